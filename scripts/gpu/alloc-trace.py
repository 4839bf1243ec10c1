#!/usr/bin/env python3
"""Record PyTorch's caching-allocator trace of the ground truth's own trials: one fresh process per
trial, exactly as scripts/gpu/transformers-limits.py runs them (the probe's Child: context, ballast
outside PyTorch's pool, from_config on the device in the dtype, then one plain generate()), with
`torch.cuda.memory._record_memory_history` switched on after the ballast and before the load.

    python3 scripts/gpu/alloc-trace.py OUTDIR PRESET:ATTN:BATCH:NEW:LIMIT_GIB:PROMPT[:stacks] ...

Per trial OUTDIR gets NAME.json.gz: {"spec", "rec" (the truth trial's record), "env" (mem_get_info
after the ballast, NVML own), "strings": [...], "events": [[action, addr, size, site], ...]} with
action A alloc, F free_completed, S segment_alloc, U segment_free, O oom (size = the request,
addr = device_free); site indexes strings (innermost Python frames) or -1. These traces are what
src/estimate/torch_alloc.rs replays and what its generator is checked against.

To hide the imports (~11 s a trial), the next trial's process is started while the current one runs;
it imports torch and transformers, then waits for its spec on stdin before it touches CUDA.
"""
import gzip
import importlib.util
import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ACT = {"alloc": "A", "free_completed": "F", "segment_alloc": "S", "segment_free": "U", "oom": "O"}


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def site(frames, strings, index):
    if not frames:
        return -1
    keep = []
    for f in frames:
        fn = f.get("filename", "")
        if "/torch/" in fn and "/nn/" not in fn and "/transformers/" not in fn:
            continue
        keep.append("%s:%s:%s" % (os.path.basename(fn), f.get("line"), f.get("name")))
        if len(keep) == 3:
            break
    s = " < ".join(keep)
    if s not in index:
        index[s] = len(strings)
        strings.append(s)
    return index[s]


def worker():
    tl = load(os.path.join(HERE, "transformers-limits.py"), "tl")
    probe = tl.load_probe()
    probe.import_libs()
    torch = probe.torch
    from transformers import AutoModelForCausalLM  # noqa: F401 - the import the load would pay
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    spec = json.loads(line)
    stacks = spec.pop("stacks", False)
    real_load = probe.Child.load

    def load_with_history(self, r):
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc" if stacks else None,
                                                 stacks="python", max_entries=4_000_000)
        free, total = torch.cuda.mem_get_info()
        env["free_before_load"], env["total"] = int(free), int(total)
        env["reserved_before_load"] = int(torch.cuda.memory_reserved())
        return real_load(self, r)

    env = {}
    probe.Child.load = load_with_history
    tl.load_probe = lambda: probe  # trial() loads the probe again: hand it this patched copy
    rec = tl.trial(dict(spec, presets=None))
    snap = torch.cuda.memory._snapshot()
    strings, index, events = [], {}, []
    for e in snap["device_traces"][0]:
        a = ACT.get(e["action"])
        if a is None:
            continue
        if a == "O":
            events.append([a, int(e.get("device_free", 0)), int(e["size"]), -1])
        else:
            events.append([a, int(e["addr"]), int(e["size"]), site(e.get("frames"), strings, index)])
    name = "%s-%s-b%d-n%d-p%d" % (spec["preset"], spec["attn"], spec["batch"], spec["new"], spec["prompt"])
    with gzip.open(os.path.join(spec["outdir"], name + ".json.gz"), "wt") as f:
        json.dump({"spec": spec, "rec": rec, "env": env, "strings": strings, "events": events}, f)
    sys.stdout.write(json.dumps({"name": name, "outcome": rec.get("outcome"), "events": len(events),
                                 "peak_reserved": rec.get("peak_reserved"), "message": rec.get("message"),
                                 "wall_s": rec.get("wall_s")}) + "\n")
    sys.stdout.flush()
    os._exit(0)


def main():
    if sys.argv[1:2] == ["--worker"]:
        return worker()
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    specs = []
    for w in sys.argv[2:]:
        parts = w.split(":")
        specs.append({"preset": parts[0], "attn": parts[1], "batch": int(parts[2]), "new": int(parts[3]),
                      "vram_limit": int(float(parts[4]) * (1 << 30)), "prompt": int(parts[5]),
                      "stacks": len(parts) > 6 and parts[6] == "stacks", "dtype": "bf16", "device": "cuda:0",
                      "outdir": outdir})

    def spawn():
        return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)

    nxt = spawn()
    for i, spec in enumerate(specs):
        cur, nxt = nxt, None
        t0 = time.time()
        cur.stdin.write(json.dumps(spec) + "\n")
        cur.stdin.flush()
        # the next one imports while this one runs; it touches CUDA only once it reads its spec
        nxt = spawn() if i + 1 < len(specs) else None
        out, _ = cur.communicate(timeout=400)
        sys.stderr.write("[%.1f s] %s\n" % (time.time() - t0, out.strip()))
        sys.stderr.flush()
    if nxt is not None:
        nxt.stdin.close()
        nxt.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
