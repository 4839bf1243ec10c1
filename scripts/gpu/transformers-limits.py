#!/usr/bin/env python3
"""Ground truth for llm-oom's transformers verdicts: under an emulated card, the largest prompt for
which a REAL `model.generate(max_new_tokens=new, min_new_tokens=new)` completes, bisected with one
FRESH process per trial (an OOM leaves PyTorch's allocator in another state than a user's new
program has).

Each trial (`this_script --trial '<json>'`) uses the probe's own code, imported by path from
src/probe/transformers_probe.py: its Child opens the device, measures the base and holds the same
ballast (cudaMalloc outside PyTorch's pool, sized free_now - (limit - this_process_now)), and loads
the model as the probe does (random weights of the preset's shapes, from_config on the device in the
dtype). Then one plain generate() of random ids, as a user runs it. A cuDNN `mha_graph ... is_good()`
or a cuBLAS allocation failure counts as an OOM (probe.is_oom).

    python3 scripts/gpu/transformers-limits.py OUT.jsonl [--vram-limit 24] [--budget-s 540]
        [--workload PRESET:ATTN:BATCH:NEW[:LIMIT_GIB[:GUESS]]]... [--only PRESET,...] [--resume]
        [--dtype bf16] [--device cuda:0] [--fork]

--fork: each trial is a child forked from this process after it imported torch and transformers
(never CUDA), so a trial costs its CUDA start, build and generate() only (about 3 s instead of 15):
the child's CUDA context and caching allocator are as new as a fresh process's.

Without --workload, the default list below (24 GiB card; qwen2.5-0.5b on 8 GiB). OUT gets JSON lines:
  {kind:"env", ...}
  {kind:"trial", preset, attn, batch, new, prompt, vram_limit, outcome: ok|oom|error|crash,
   peak_allocated, peak_reserved (torch's, during generate(), weights included), load_peak_reserved,
   base_bytes, ballast_bytes, generated, seconds (the generate() call), wall_s (the whole process),
   message (OOM/error first line), part}
  {kind:"limit", preset, attn, batch, new, vram_limit, context, largest_ok, first_oom, limited_by:
   "memory"|"context"|"weights", trials, incomplete (true when the budget ran out or a trial failed
   otherwise)}
`largest_ok`/`first_oom` are prompt lengths. The search stops when first_oom - largest_ok <=
max(64, 2% of largest_ok). It is bounded by the model's context (max_position_embeddings): prompt +
new <= context; if prompt = context - new runs, largest_ok = context - new, first_oom = null,
limited_by = "context". If the weights alone do not fit, largest_ok = 0, limited_by = "weights".
--resume appends to OUT, skips workloads with a complete limit record and seeds the bracket from the
trials already there. Progress goes to stderr.
"""
import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # importing the probe by path must leave no __pycache__ in src/
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
PRESETS = os.path.join(ROOT, "presets")
PROBE = os.path.join(ROOT, "src", "probe", "transformers_probe.py")
GIB = 1 << 30

# (preset, attn, batch, new_tokens, card GiB or None for --vram-limit)
DEFAULT_WORKLOADS = [
    ("mistral-7b-instruct-v0.2", "sdpa", 1, 256, None),
    ("mistral-7b-instruct-v0.2", "sdpa", 8, 256, None),
    ("meta-llama-3-8b", "sdpa", 1, 256, None),
    ("qwen2.5-7b-instruct", "sdpa", 1, 128, None),
    ("llama-2-7b", "eager", 1, 64, None),
    ("gemma-2-9b-it", "sdpa", 1, 64, None),
    ("phi-3-mini-4k-instruct", "sdpa", 4, 128, None),
    ("qwen2.5-0.5b-instruct", "sdpa", 16, 256, 8),
]


def log(msg):
    sys.stderr.write("[%s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def load_probe():
    spec = importlib.util.spec_from_file_location("transformers_probe", PROBE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def preset(name, presets=None):
    with open(os.path.join(presets or PRESETS, name + ".json")) as f:
        return json.load(f)


# ---------------------------------------------------------------------------------------------
# One trial, in its own process
# ---------------------------------------------------------------------------------------------
_PROBE = None


def trial(spec):
    t_start = time.time()
    rec = {"outcome": "error", "peak_allocated": None, "peak_reserved": None, "load_peak_reserved": None,
           "base_bytes": None, "ballast_bytes": None, "generated": None, "seconds": None, "message": None,
           "part": None}
    probe = _PROBE or load_probe()
    probe.import_libs()
    torch = probe.torch
    folder = tempfile.mkdtemp(prefix="tl-model-")
    child = None
    try:
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(preset(spec["preset"], spec.get("presets")), f)
        setup = {"model": folder, "device": spec["device"], "dtype": spec["dtype"], "vram_limit": spec["vram_limit"],
                 "random_weights": True, "eager": spec["attn"] == "eager", "seed": 0,
                 "attn_implementation": spec["attn"]}
        child = probe.Child(setup)
        hello = child.open()
        rec["base_bytes"], rec["ballast_bytes"] = hello["base_bytes"], hello["ballast_bytes"]
        rec["capacity_bytes"] = hello["capacity_bytes"]
        r = child.run({"task": "load"})
        rec["load_peak_reserved"] = r.get("reserved_peak")
        if r["outcome"] != "ok":
            rec["outcome"] = r["outcome"]
            rec["message"] = (r.get("oom") or {}).get("message") or r.get("error")
            rec["part"] = (r.get("oom") or {}).get("part") or "weights"
            return rec
        model, dev = child.model, child.device
        b, p, n = spec["batch"], spec["prompt"], spec["new"]
        cuda = dev.type == "cuda"
        torch.manual_seed(1)
        ids = torch.randint(3, child.vocab - 1, (b, p), device=dev)
        mask = torch.ones_like(ids)
        if cuda:
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
        else:  # a dry run of the search on the CPU: the probe's emulated limit on the resident set
            child.meter.reset_peak()
        t0 = time.time()
        try:
            with torch.no_grad():
                out = model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                     pad_token_id=0)
            if cuda:
                torch.cuda.synchronize(dev)
            child.limit_check()
            rec["outcome"] = "ok"
            rec["generated"] = int(out.shape[1] - p)
            del out
        except Exception as e:  # noqa: BLE001
            rec["outcome"] = "oom" if probe.is_oom(e) or isinstance(e, probe.EmulatedOom) else "error"
            rec["message"] = probe.first_line(e)
            rec["part"] = probe.part_from_traceback(e.__traceback__, "activations")
        rec["seconds"] = round(time.time() - t0, 3)
        if cuda:
            rec["peak_allocated"] = int(torch.cuda.max_memory_allocated(dev))
            rec["peak_reserved"] = int(torch.cuda.max_memory_reserved(dev))
        else:
            rec["peak_allocated"] = rec["peak_reserved"] = int(child.meter.peak())
        return rec
    except Exception as e:  # noqa: BLE001 - the open (ballast) failed, or something unforeseen
        rec["outcome"] = "error"
        rec["message"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
        return rec
    finally:
        if child is not None:
            child.close()
        shutil.rmtree(folder, ignore_errors=True)
        rec["wall_s"] = round(time.time() - t_start, 2)


def trial_main(arg):
    rec = trial(json.loads(arg))
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()
    return 0


# ---------------------------------------------------------------------------------------------
# The search, in the parent (which never touches CUDA)
# ---------------------------------------------------------------------------------------------
def forked_trial(spec, timeout):
    """One trial in a child forked from this process (torch and transformers imported, CUDA never
    started here): its record, or a crash record."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, write one JSON line, leave without running the parent's exit code
        os.close(r)
        code = 0
        try:
            rec = trial(spec)
            os.write(w, (json.dumps(rec) + "\n").encode())
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    deadline = time.time() + timeout
    data = b""
    import select
    while True:
        left = deadline - time.time()
        if left <= 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            os.close(r)
            return {"outcome": "crash", "message": "timed out after %.0f s" % timeout}
        ready, _, _ = select.select([r], [], [], min(left, 1.0))
        if ready:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    try:
        return json.loads(data.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"outcome": "crash", "message": "forked trial exited with status %d and no record" % status}


def subprocess_trial(spec, timeout):
    """One trial in a fresh interpreter: its record, or a crash record."""
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--trial", json.dumps(spec)],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"outcome": "crash", "message": "timed out after %.0f s" % timeout}
    for line in reversed(p.stdout.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    tail = (p.stderr.strip().splitlines() or ["(no stderr)"])[-1]
    return {"outcome": "crash", "message": "exit %s: %s" % (p.returncode, tail[:300])}


def run_trial(args, w, prompt, timeout):
    spec = {"preset": w["preset"], "attn": w["attn"], "batch": w["batch"], "new": w["new"], "prompt": prompt,
            "vram_limit": w["vram_limit"], "dtype": args.dtype, "device": args.device, "presets": args.presets}
    t0 = time.time()
    if getattr(args, "fork", False):
        rec = forked_trial(spec, timeout)
        rec["forked"] = True
    else:
        rec = subprocess_trial(spec, timeout)
    rec.setdefault("wall_s", round(time.time() - t0, 2))
    out = {"kind": "trial", "preset": w["preset"], "attn": w["attn"], "batch": w["batch"], "new": w["new"],
           "prompt": prompt, "vram_limit": w["vram_limit"], "dtype": args.dtype}
    out.update(rec)
    return out


def estimate(cfg, attn, batch, new, limit, dtype_bytes):
    """A rough largest prompt, only to start the bracket near the answer."""
    L = cfg["num_hidden_layers"]
    hidden = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kvh = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or hidden // heads
    inter = cfg["intermediate_size"]
    vocab = cfg["vocab_size"]
    experts = cfg.get("num_local_experts") or 1
    params = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2) + L * (
        2 * hidden * heads * hd + 2 * hidden * kvh * hd + 3 * hidden * inter * experts)
    avail = limit - 0.75 * GIB - params * dtype_bytes
    if avail <= 0:
        return 0
    kv_tok = 2 * L * kvh * hd * dtype_bytes * batch
    act_tok = batch * (3 * inter + 6 * hidden) * dtype_bytes
    quad = batch * heads * (dtype_bytes + 4) if attn == "eager" else 0
    lin = kv_tok + act_tok
    # quad p^2 + lin p = avail - kv of the new tokens
    rhs = max(1.0, avail - kv_tok * new)
    if quad:
        p = (-lin + (lin * lin + 4 * quad * rhs) ** 0.5) / (2 * quad)
    else:
        p = rhs / lin
    return max(16, int(p))


def resolution(lo):
    return max(64, int(0.02 * lo))


def search(args, w, f, deadline, prior, stats):
    cfg = preset(w["preset"], args.presets)
    ctx = int(cfg.get("max_position_embeddings") or 131072)
    top = max(1, ctx - w["new"])  # the longest prompt the context allows
    lo, hi = 0, None  # lo: largest prompt known ok (0: none); hi: smallest known to fail
    for t in prior:
        if t["outcome"] == "ok":
            lo = max(lo, t["prompt"])
        elif t["outcome"] in ("oom", "crash"):
            hi = t["prompt"] if hi is None else min(hi, t["prompt"])
    trials = len(prior)
    incomplete, limited_by, weights_fail = False, "memory", False
    dsize = 4 if args.dtype == "f32" else 2

    def attempt(prompt):
        nonlocal trials, incomplete
        mean = stats["sum"] / stats["n"] if stats["n"] else 30.0
        left = deadline - time.time()
        if left < mean * 1.2 + 5:
            incomplete = True
            return None
        t = run_trial(args, w, prompt, min(600, max(60, left)))
        stats["sum"] += t.get("wall_s") or 0
        stats["n"] += 1
        trials += 1
        f.write(json.dumps(t) + "\n")
        f.flush()
        log("  %s %s b%d n%d prompt %d: %s%s (%.1f s)" % (w["preset"], w["attn"], w["batch"], w["new"], prompt,
                                                         t["outcome"], (" - " + t["message"][:120]) if t.get("message") else "",
                                                         t.get("wall_s") or 0))
        if t["outcome"] == "error":
            incomplete = True
            return None
        return t

    guess = w.get("guess") or estimate(cfg, w["attn"], w["batch"], w["new"], w["vram_limit"], dsize)
    # A given guess (llm-oom's own forecast, a safe side one) is close: step by x1.15, not x1.5.
    step = 1.15 if w.get("guess") else 1.5
    # 1. A bracket: start at the estimate (or the context), then move by the step until it is found.
    if hi is None and lo < top:
        p = top if guess >= top else max(16, min(top, guess if lo == 0 else int(lo * step)))
        while True:
            t = attempt(p)
            if t is None:
                break
            if t["outcome"] == "ok":
                lo = p
                if p >= top:
                    break
                p = min(top, int(p * step))
            else:
                hi = p
                if t.get("part") == "weights":
                    weights_fail = True
                break
    if lo == 0 and hi is not None and not incomplete and not weights_fail:
        p = hi
        while p > 16 and not incomplete:
            p = max(16, int(p / step))
            t = attempt(p)
            if t is None:
                break
            if t["outcome"] == "ok":
                lo = p
                break
            hi = p
            if t.get("part") == "weights":
                weights_fail = True
                break
    # 2. Bisect.
    while hi is not None and lo > 0 and hi - lo > resolution(lo) and not incomplete:
        mid = (lo + hi) // 2
        t = attempt(mid)
        if t is None:
            break
        if t["outcome"] == "ok":
            lo = mid
        else:
            hi = mid
    if lo >= top and hi is None:
        lo, limited_by = top, "context"
    elif weights_fail and lo == 0:
        limited_by = "weights"
    rec = {"kind": "limit", "preset": w["preset"], "attn": w["attn"], "batch": w["batch"], "new": w["new"],
           "vram_limit": w["vram_limit"], "vram_limit_gib": round(w["vram_limit"] / GIB, 3), "dtype": args.dtype,
           "context": ctx, "largest_ok": lo, "first_oom": hi, "limited_by": limited_by, "trials": trials,
           "estimate": guess, "incomplete": bool(incomplete or (hi is None and lo < top))}
    f.write(json.dumps(rec) + "\n")
    f.flush()
    log("%s %s b%d n%d on %.1f GiB: largest ok %d, first oom %s (%s, %d trials%s)"
        % (w["preset"], w["attn"], w["batch"], w["new"], w["vram_limit"] / GIB, lo, hi, limited_by, trials,
           ", incomplete" if rec["incomplete"] else ""))
    return rec


def parse_workload(s, default_gib):
    parts = s.split(":")
    if len(parts) not in (4, 5, 6):
        raise SystemExit("a workload is PRESET:ATTN:BATCH:NEW[:LIMIT_GIB[:GUESS]], not %r" % s)
    gib = float(parts[4]) if len(parts) >= 5 and parts[4] else default_gib
    w = {"preset": parts[0], "attn": parts[1], "batch": int(parts[2]), "new": int(parts[3]),
         "vram_limit": int(gib * GIB)}
    if len(parts) == 6:
        w["guess"] = int(parts[5])
    return w


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--trial":
        return trial_main(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--vram-limit", type=float, default=24.0, help="the emulated card, GiB (default 24)")
    ap.add_argument("--budget-s", type=float, default=540.0, help="wall-clock budget for all trials")
    ap.add_argument("--workload", action="append", default=[], help="PRESET:ATTN:BATCH:NEW[:LIMIT_GIB] (repeatable)")
    ap.add_argument("--only", default="", help="comma-separated presets of the default list")
    ap.add_argument("--resume", action="store_true", help="append to OUT, reuse its trials")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--device", default="cuda:0", help="cuda:N; cpu for a dry run of the search (limit on RSS)")
    ap.add_argument("--presets", default=PRESETS, help="folder of PRESET.json configs (default: presets/)")
    ap.add_argument("--fork", action="store_true", help="fork each trial from this process (torch imported once)")
    args = ap.parse_args()
    if args.fork:  # import what a trial imports, never starting CUDA here
        global _PROBE
        _PROBE = load_probe()
        _PROBE.import_libs()
        from transformers import AutoConfig, AutoModelForCausalLM  # noqa: F401
        assert not _PROBE.torch.cuda.is_initialized(), "CUDA started before the fork"
    start = time.time()
    deadline = start + args.budget_s
    if args.workload:
        work = [parse_workload(s, args.vram_limit) for s in args.workload]
    else:
        work = [{"preset": p, "attn": a, "batch": b, "new": n, "vram_limit": int((gib or args.vram_limit) * GIB)}
                for p, a, b, n, gib in DEFAULT_WORKLOADS]
        if args.only:
            keep = set(args.only.split(","))
            work = [w for w in work if w["preset"] in keep]
    for w in work:
        if not os.path.isfile(os.path.join(args.presets, w["preset"] + ".json")):
            raise SystemExit("no preset %s in %s" % (w["preset"], args.presets))
    prior_trials, done = [], set()
    if args.resume and os.path.exists(args.out):
        with open(args.out) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                key = (r.get("preset"), r.get("attn"), r.get("batch"), r.get("new"), r.get("vram_limit"), r.get("dtype"))
                if r.get("kind") == "trial":
                    prior_trials.append((key, r))
                elif r.get("kind") == "limit" and not r.get("incomplete"):
                    done.add(key)
    f = open(args.out, "a" if args.resume else "w")
    f.write(json.dumps({"kind": "env", "argv": sys.argv[1:], "python": sys.executable, "host": os.uname().nodename,
                        "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "probe": PROBE}) + "\n")
    f.flush()
    stats = {"sum": 0.0, "n": 0}
    results = []
    for w in work:
        key = (w["preset"], w["attn"], w["batch"], w["new"], w["vram_limit"], args.dtype)
        if key in done:
            log("%s %s b%d n%d: done already" % key[:4])
            continue
        if time.time() > deadline:
            rec = {"kind": "skipped", "preset": w["preset"], "attn": w["attn"], "batch": w["batch"], "new": w["new"],
                   "vram_limit": w["vram_limit"], "dtype": args.dtype, "why": "time budget"}
            f.write(json.dumps(rec) + "\n")
            continue
        log("%s %s b%d n%d on %.1f GiB" % (w["preset"], w["attn"], w["batch"], w["new"], w["vram_limit"] / GIB))
        prior = [t for k, t in prior_trials if k == key]
        results.append(search(args, w, f, deadline, prior, stats))
    f.write(json.dumps({"kind": "done", "seconds": round(time.time() - start, 1), "trials": stats["n"]}) + "\n")
    f.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
