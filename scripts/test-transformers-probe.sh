#!/usr/bin/env bash
# End-to-end test of the transformers probe child (src/probe/transformers_probe.py) on the CPU,
# through its protocol: Setup on the command line, Hello, Task lines in, TaskResult lines out.
#
#   PYTHON=/path/to/python-with-torch-and-transformers scripts/test-transformers-probe.sh
#
# PYTHON defaults to python3. Checks: every stdout line is JSON with protocol.rs's fields and types;
# load / warmup / generate at batch 1 and 2 (fast-forwarded and full) / an eager override /
# a checkpoint folder loaded with from_pretrained /
# fragmentation (CPU: ok, fragmentation null, a note); the cache ends with the same length as a real
# full generate() (prompt + new - 1); an emulated out-of-memory under vram_limit and a task after it;
# unreadable and unknown tasks; exit on stdin EOF, on SIGTERM, when the parent dies; bad setup
# (exit 2, "llm-oom: " line); the missing-package path (exit 4 and one JSON line); and the warm
# process (children forked from one interpreter: relay, signals, exit status, idle exit).
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
exec "$PY" - "$HERE" <<'PYEOF'
import json, os, signal, subprocess, sys, tempfile, time

ROOT = sys.argv[1]
PROBE = os.path.join(ROOT, "src", "probe", "transformers_probe.py")
TINY = os.path.join(ROOT, "tests", "fixtures", "tiny-llama")
PY = sys.executable
T0 = time.time()
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def setup(**kw):
    s = {"model": TINY, "device": "cpu", "dtype": "bf16", "vram_limit": None, "random_weights": True,
         "eager": False, "seed": 7}
    s.update(kw)
    return json.dumps(s)


class Probe:
    def __init__(self, setup_json):
        self.p = subprocess.Popen([PY, PROBE, "--setup", setup_json], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self.lines = []

    def read(self):
        line = self.p.stdout.readline()
        self.lines.append(line)
        assert line.endswith("\n"), "the probe closed stdout: %r\nstderr: %s" % (line, self.p.stderr.read()[-3000:])
        return json.loads(line)

    def task(self, t):
        self.p.stdin.write((t if isinstance(t, str) else json.dumps(t)) + "\n")
        self.p.stdin.flush()
        return self.read()


U64 = int
HELLO = {"pid": U64, "device": str, "meter": str, "base_bytes": U64, "ballast_bytes": U64,
         "capacity_bytes": U64, "notes": list}
RESULT = {"label": str, "outcome": str, "seconds": float, "before": U64, "peak": U64, "after": U64,
          "weights_bytes": U64, "kv_bytes": U64, "used": dict}
OPTIONAL = {"reserved_peak": U64, "kv_bytes_measured": U64, "prefill_peak": U64, "decode_peak": U64,
            "prefill_seconds": float, "decode_tokens_per_second": float, "oom": dict, "error": str,
            "fragmentation": dict}
OOM = {"held": U64, "part": str, "message": str, "emulated": bool}


def typed(d, spec, where, optional=False):
    for k, t in spec.items():
        if optional and d.get(k) is None:
            continue
        v = d.get(k)
        good = isinstance(v, t) and not (t is int and isinstance(v, bool))
        if t is int and good:
            good = v >= 0
        if t is float:
            good = isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
        check(good, "%s: %s is %s (got %r)" % (where, k, t.__name__, v))


def result_ok(r, where, outcome="ok"):
    typed(r, RESULT, where)
    typed(r, OPTIONAL, where, optional=True)
    typed(r["used"], {"before": U64, "peak": U64}, where + ".used")
    check(r["outcome"] == outcome, "%s: outcome %s (got %s; %s)" % (where, outcome, r["outcome"], r.get("error") or r.get("oom")))
    check(r["peak"] >= r["before"] and r["used"]["peak"] >= r["used"]["before"], where + ": peak >= before")


# --- 1. the main session ----------------------------------------------------------------------
pr = Probe(setup())
hello = pr.read()
typed(hello, HELLO, "hello")
check(hello["meter"] == "torch-cpu" and hello["device"] == "cpu" and hello["pid"] == pr.p.pid, "hello: cpu meter, pid")
check(any(n.startswith("torch ") for n in hello["notes"]) and any(n.startswith("transformers ") for n in hello["notes"])
      and any("attn_implementation sdpa" in n for n in hello["notes"]), "hello: notes name torch, transformers, attention")
print("  hello:", pr.lines[-1].strip())

r = pr.task({"task": "load"})
result_ok(r, "load")
check(r["label"] == "load" and r["weights_bytes"] > 0, "load: weights_bytes %d" % r["weights_bytes"])
# tiny-llama: embed 256x64 + lm_head 256x64 + 2 x (q 64x64, k 64x32, v 64x32, o 64x64, mlp 3 x 64x128, 2 norms) + norm, bf16
expect_w = 2 * (256 * 64 * 2 + 2 * (64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128 + 2 * 64) + 64)
check(r["weights_bytes"] >= expect_w, "load: weights %d >= parameters %d (plus buffers)" % (r["weights_bytes"], expect_w))
print("  load:", pr.lines[-1].strip())
load_after = r["after"]

r = pr.task({"task": "warmup", "prompt_tokens": 64})
result_ok(r, "warmup")
check(r["label"] == "warmup" and r.get("cache_tokens") == 16 + 3 - 1, "warmup: the reported run is 16 + 3 tokens")
print("  warmup:", pr.lines[-1].strip())

KV_PER_TOKEN = 2 * 2 * 2 * 16 * 2  # layers x (k, v) x kv heads x head dim x bf16


def gen(label, p, n, b, steps, eager=None):
    t = {"task": "generate", "label": label, "prompt_tokens": p, "new_tokens": n, "batch": b, "decode_steps": steps}
    if eager is not None:
        t["eager"] = eager
    r = pr.task(t)
    result_ok(r, label)
    check(r["label"] == label, label + ": label echoed")
    check(r.get("cache_tokens") == p + n - 1, "%s: cache holds prompt + new - 1 = %d (got %s, path %s)"
          % (label, p + n - 1, r.get("cache_tokens"), r.get("path")))
    check(r.get("generated_tokens") == n, "%s: %d tokens generated (got %s)" % (label, n, r.get("generated_tokens")))
    check(r["kv_bytes"] == KV_PER_TOKEN * b * (p + n - 1), "%s: kv_bytes %d == %d" % (label, r["kv_bytes"], KV_PER_TOKEN * b * (p + n - 1)))
    for k in ("prefill_peak", "prefill_seconds"):
        check(r.get(k) is not None, "%s: %s present" % (label, k))
    if min(steps, n - 1) > 0:
        check(r.get("decode_peak") is not None and r.get("decode_tokens_per_second", 0) > 0, label + ": decode figures present")
    print("  %s:" % label, pr.lines[-1].strip())
    return r


gen("b1", 48, 64, 1, 8)            # fast-forwarded: the cache grows to 48 + 64 - 1 - 8, then 8 decode steps
gen("b2", 32, 12, 2, 16)           # decode_steps >= new - 1: one full generate()
r = gen("b2-eager", 32, 12, 2, 16, eager=True)
check(r.get("attn_implementation") == "eager", "eager override selects eager attention")
r = gen("b1-sdpa-again", 16, 4, 1, 1, eager=False)
check(r.get("attn_implementation") == "sdpa", "eager: false goes back to sdpa")

r = pr.task({"task": "fragmentation"})
result_ok(r, "fragmentation")
check(r["fragmentation"] is None and "note" in r, "fragmentation on the CPU: ok, null, a note")
print("  fragmentation:", pr.lines[-1].strip())

r = pr.task("this is not json")
check(r["outcome"] == "error" and "cannot read" in (r.get("error") or ""), "an unreadable line gets an error result")
r = pr.task({"task": "bogus"})
check(r["outcome"] == "error" and r["label"] == "bogus", "an unknown task gets an error result")

pr.p.stdin.close()
t = time.time()
rc = pr.p.wait(timeout=30)
check(rc == 0, "stdin EOF: exit 0 (got %s) in %.1f s" % (rc, time.time() - t))
check(all(l.strip().startswith("{") for l in pr.lines), "stdout held JSON lines only")
rest = pr.p.stdout.read()
check(rest == "", "nothing else on stdout (got %r)" % rest[:200])

# --- 2. a full generate() in this process: the length the fast-forward must match -------------
import torch
from transformers import AutoConfig, AutoModelForCausalLM
cfg = AutoConfig.from_pretrained(TINY)
m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
ids = torch.randint(3, 255, (1, 48))
out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64, min_new_tokens=64, do_sample=False,
                 pad_token_id=0, return_dict_in_generate=True)
check(out.past_key_values.get_seq_length() == 48 + 64 - 1 and out.sequences.shape[1] == 48 + 64,
      "a real generate() of 48 + 64 ends with 111 tokens in its cache (got %d)" % out.past_key_values.get_seq_length())
# --- 2b. a checkpoint on disk: from_pretrained(folder, dtype, device_map), as users load ---------
ckpt = tempfile.mkdtemp(prefix="tiny-ckpt-")
m.save_pretrained(ckpt)
del m, out
pr = Probe(setup(model=ckpt, random_weights=False, dtype="f16", eager=True))
hello = pr.read()
check(any("attn_implementation eager" in n for n in hello["notes"]), "checkpoint: eager from the setup")
r = pr.task({"task": "load"})
result_ok(r, "checkpoint load")
check(r["weights_bytes"] >= expect_w, "checkpoint load: weights %d" % r["weights_bytes"])
gen("checkpoint-b2", 20, 30, 2, 4)
pr.p.stdin.close()
check(pr.p.wait(timeout=30) == 0, "checkpoint: exit 0")

# --- 3. an emulated out-of-memory, a task after it, then SIGTERM ------------------------------
limit = load_after + (96 << 20)
pr = Probe(setup(vram_limit=limit, dtype="f32"))
hello = pr.read()
check(hello["capacity_bytes"] == limit, "limit: capacity_bytes is the limit")
r = pr.task({"task": "load"})
if r["outcome"] != "ok":
    print("  (load crossed the limit; this machine's RSS differs) ", pr.lines[-1].strip())
result_ok(r, "limit load")
r = pr.task({"task": "generate", "label": "too-big", "prompt_tokens": 512, "new_tokens": 4, "batch": 64,
             "decode_steps": 2, "eager": True})
result_ok(r, "too-big", outcome="oom")
if r.get("oom"):
    typed(r["oom"], OOM, "too-big.oom")
    check(r["oom"]["emulated"] is True and r["oom"]["held"] > limit and r["oom"]["part"] == "activations",
          "too-big: emulated, held above the limit, activations")
print("  too-big:", pr.lines[-1].strip())
r = pr.task({"task": "generate", "label": "after-oom", "prompt_tokens": 16, "new_tokens": 4, "batch": 1, "decode_steps": 2})
result_ok(r, "after-oom")
pr.p.send_signal(signal.SIGTERM)
rc = pr.p.wait(timeout=30)
check(rc == 128 + signal.SIGTERM, "SIGTERM: exit 143 (got %s)" % rc)

# --- 4. the parent dies ---------------------------------------------------------------------
with tempfile.TemporaryDirectory() as tmp:
    fifo, outf = os.path.join(tmp, "in"), os.path.join(tmp, "out")
    os.mkfifo(fifo)
    parent = subprocess.Popen(["sh", "-c", '"$0" "$1" --setup "$2" < "$3" > "$4" & wait', PY, PROBE, setup(), fifo, outf])
    w = open(fifo, "w")  # keeps the probe's stdin open
    deadline = time.time() + 120
    pid = None
    while time.time() < deadline and pid is None:
        time.sleep(0.2)
        txt = open(outf).read()
        if txt.endswith("\n"):
            pid = json.loads(txt.splitlines()[0])["pid"]
    check(pid is not None, "parent death: the probe said hello")
    parent.kill()
    parent.wait()
    t = time.time()
    while pid and os.path.exists("/proc/%d" % pid) and time.time() - t < 10:
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break
        except OSError:
            break
        time.sleep(0.1)
    gone = pid is not None and (not os.path.exists("/proc/%d" % pid) or open("/proc/%d/stat" % pid).read().split(")")[-1].split()[0] == "Z")
    check(gone, "parent death: the probe left within %.1f s" % (time.time() - t))
    w.close()

# --- 5. bad setup, missing packages --------------------------------------------------------
p = subprocess.run([PY, PROBE, "--setup", setup(model="/nonexistent")], capture_output=True, text=True, timeout=60)
check(p.returncode == 2 and p.stdout == "" and p.stderr.strip().splitlines()[-1].startswith("llm-oom: "),
      "bad setup: exit 2, a 'llm-oom: ' line (%s)" % p.stderr.strip()[-200:])
p = subprocess.run([PY, "-I", "-S", PROBE, "--setup", setup()], capture_output=True, text=True, timeout=60)
lines = p.stdout.splitlines()
ok = p.returncode == 4 and len(lines) == 1
if ok:
    j = json.loads(lines[0])
    ok = j.get("kind") == "missing_python_package" and j.get("package") == "torch" and "torch" in j.get("error", "")
check(ok, "no torch (python -I -S): exit 4 and one JSON line: %s" % p.stdout.strip())
with tempfile.TemporaryDirectory() as shim:
    os.mkdir(os.path.join(shim, "torch"))
    open(os.path.join(shim, "torch", "__init__.py"), "w").close()
    env = dict(os.environ, PYTHONPATH=shim)
    p = subprocess.run([PY, "-S", PROBE, "--setup", setup()], capture_output=True, text=True, timeout=60, env=env)
    lines = p.stdout.splitlines()
    ok = p.returncode == 4 and len(lines) == 1 and json.loads(lines[0]).get("package") == "transformers"
    check(ok, "torch but no transformers: exit 4, package transformers: %s" % p.stdout.strip())

# --- 6. the warm process: children forked from one interpreter that imported torch once --------
def alive(pid):
    try:
        return open("/proc/%d/stat" % pid).read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def zygote_pid(hello):
    for n in hello.get("notes", []):
        if n.startswith("forked from llm-oom's warm transformers process (pid "):
            return int(n.split("(pid ")[1].split(")")[0])
    return None


with tempfile.TemporaryDirectory() as run_dir:
    zenv = dict(os.environ, XDG_RUNTIME_DIR=run_dir, LLM_OOM_ZYGOTE="cpu", LLM_OOM_ZYGOTE_IDLE_S="3")

    def start(**kw):
        return subprocess.Popen([PY, PROBE, "--setup", setup(**kw)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, bufsize=1, env=zenv)

    zygotes, results = [], []
    for i in range(2):
        p = start()
        h = json.loads(p.stdout.readline())
        p.stdin.write(json.dumps({"task": "load"}) + "\n")
        p.stdin.flush()
        results.append(json.loads(p.stdout.readline()))
        p.stdin.close()
        rc = p.wait(timeout=60)
        zygotes.append(zygote_pid(h))
        check(h["pid"] != p.pid and rc == 0, "warm process: run %d's child (pid %d) is not its relay (pid %d), exit %d"
              % (i + 1, h["pid"], p.pid, rc))
    check(zygotes[0] is not None and zygotes[0] == zygotes[1],
          "warm process: both children were forked by one warm process (%s)" % zygotes)
    check(all(r["outcome"] == "ok" and r["after"] > 0 for r in results), "warm process: a forked child loads the model")
    # A relay that leaves right after its request, before the pid comes back: its child must
    # not outlive it, and the warm process must go on serving.
    import socket as _socket

    def zchildren(z):
        kids = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    if int(open("/proc/%s/stat" % d).read().split(")")[-1].split()[1]) == z:
                        kids.append(int(d))
                except (OSError, IndexError, ValueError):
                    pass
        return kids

    zdir = os.path.join(run_dir, "llm-oom-%d" % os.getuid())
    zsock = [os.path.join(zdir, f) for f in os.listdir(zdir) if f.endswith(".sock")][0]
    for _ in range(3):
        r0, w0 = os.pipe()
        r1, w1 = os.pipe()
        c = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        c.connect(zsock)
        body = json.dumps({"argv": ["--setup", setup()], "env": dict(zenv), "cwd": os.getcwd()}).encode()
        _socket.send_fds(c, [b"%d\n" % len(body) + body], [r0, w1, w1])
        c.close()
        for fd in (r0, w0, r1, w1):
            os.close(fd)
    t = time.time()
    while zchildren(zygotes[0]) and time.time() - t < 10:
        time.sleep(0.05)
    check(not zchildren(zygotes[0]), "warm process: a relay gone before its pid leaves no child behind")
    p = start()
    h = json.loads(p.stdout.readline())
    check(zygote_pid(h) == zygotes[0], "warm process: it still serves after relays that left early")
    p.kill()
    p.wait()
    t = time.time()
    while alive(h["pid"]) and time.time() - t < 5:
        time.sleep(0.05)
    check(not alive(h["pid"]), "warm process: SIGKILL of the relay ends its child")
    p = start()
    h = json.loads(p.stdout.readline())
    p.send_signal(signal.SIGTERM)
    check(p.wait(timeout=30) == 128 + signal.SIGTERM, "warm process: SIGTERM reaches the child; the relay exits 143")
    p = start()
    h = json.loads(p.stdout.readline())
    os.kill(h["pid"], signal.SIGKILL)
    check(p.wait(timeout=30) == -signal.SIGKILL, "warm process: a child killed by SIGKILL leaves its relay killed by it")
    p = subprocess.run([PY, PROBE, "--setup", setup(model="/nonexistent")], capture_output=True, text=True,
                       timeout=60, env=zenv)
    check(p.returncode == 2 and p.stderr.strip().splitlines()[-1].startswith("llm-oom: "),
          "warm process: a bad setup exits 2 with its 'llm-oom: ' line")
    p = subprocess.run([PY, "-I", "-S", PROBE, "--setup", setup()], capture_output=True, text=True, timeout=60,
                       env=zenv)
    check(p.returncode == 4 and json.loads(p.stdout.splitlines()[0]).get("package") == "torch",
          "warm process: without torch the warm process cannot start and the answer is as before (exit 4)")
    off = dict(zenv, LLM_OOM_ZYGOTE="0")
    p = subprocess.Popen([PY, PROBE, "--setup", setup()], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=off)
    h = json.loads(p.stdout.readline())
    p.stdin.close()
    p.wait(timeout=60)
    check(h["pid"] == p.pid and zygote_pid(h) is None, "LLM_OOM_ZYGOTE=0: the probe runs in its own process")
    t = time.time()
    while zygotes[0] and alive(zygotes[0]) and time.time() - t < 30:
        time.sleep(0.1)
    socks = [f for f in os.listdir(os.path.join(run_dir, "llm-oom-%d" % os.getuid())) if f.endswith(".sock")]
    check(not alive(zygotes[0]) and not socks, "warm process: it exits when idle and removes its socket (%s)" % socks)

# With bytecode writing off, the probe keeps torch's compiled bytecode in a private cache folder
# (never beside the sources); with it on, it leaves Python to its own.
with tempfile.TemporaryDirectory() as cache:
    def hello_with(**env):
        e = dict(os.environ, XDG_CACHE_HOME=cache, LLM_OOM_ZYGOTE="0")
        e.pop("PYTHONDONTWRITEBYTECODE", None)
        e.update(env)
        p = subprocess.Popen([PY, PROBE, "--setup", setup()], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=e)
        out, _ = p.communicate("", timeout=300)
        return json.loads(out.splitlines()[0])
    kept = os.path.join(cache, "llm-oom", "pycache")
    h = hello_with()
    check(not os.path.exists(kept) and not any("PYTHONDONTWRITEBYTECODE" in n for n in h.get("notes", [])),
          "bytecode: with writing on, no cache folder of the probe's")
    h = hello_with(PYTHONDONTWRITEBYTECODE="1")
    torch_pyc = [f for _, _, fs in os.walk(kept) for f in fs if f.endswith(".pyc")] if os.path.isdir(kept) else []
    check(os.path.isdir(kept) and os.stat(kept).st_mode & 0o777 == 0o700 and len(torch_pyc) > 1000
          and any(kept in n for n in h.get("notes", [])),
          "bytecode: with PYTHONDONTWRITEBYTECODE=1, torch's bytecode kept in a 0700 folder of the user's cache "
          "(%d files) and the hello says where" % len(torch_pyc))

# A first start with enough cores compiles the sources ahead, in processes side by side: the cache
# it leaves is the one the import reads (an import from it compiles next to nothing more).
import importlib.util as _iu
_spec = _iu.spec_from_file_location("llm_oom_probe", PROBE)
_probe = _iu.module_from_spec(_spec)
_spec.loader.exec_module(_probe)
with tempfile.TemporaryDirectory() as pref:
    srcs = _probe._compile_sources()
    t = time.time()
    _probe._compile_ahead(pref, 2)
    ahead = [os.path.join(r, f) for r, _, fs in os.walk(pref) for f in fs if f.endswith(".pyc")]
    took = time.time() - t
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([PY, "-X", "pycache_prefix=" + pref, "-c", "import torch, transformers"], env=env,
                   check=True, timeout=300)
    after = [os.path.join(r, f) for r, _, fs in os.walk(pref) for f in fs if f.endswith(".pyc")]
    # What the import still compiled: the standard library's modules (not compiled ahead), and of the
    # packages only a few left out on purpose (torch.testing._internal's).
    more = [f for f in set(after) - set(ahead) if "site-packages" in f]
    check(len(srcs) > 2000 and any(s.endswith(os.path.join("torch", "__init__.py")) for s in srcs)
          and not any(os.sep + "tests" + os.sep in s for s in srcs)
          and _probe._COMPILED_AHEAD is not None and _probe._COMPILED_AHEAD[1] == 2
          and len(ahead) > 0.95 * len(srcs) and len(more) < 20,
          "bytecode: compiled ahead in 2 processes, %d files for %d sources in %.1f s; the import then compiled "
          "%d more of the packages' (%s)" % (len(ahead), len(srcs), took, len(more), more[:3]))

import shutil
shutil.rmtree(ckpt, ignore_errors=True)
print("%s in %.1f s" % ("all passed" if not failures else "%d FAILED" % len(failures), time.time() - T0))
sys.exit(1 if failures else 0)
PYEOF
