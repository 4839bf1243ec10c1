#!/usr/bin/env python3
"""Can the decisive run at the edge fast-forward its cache? Each trial is a fresh process that does
what diagnose's fresh run does (the probe's Child: open with the emulated card, load, no warm-up)
and then one generate task of b x p + n: either the full generate() (decode_steps = n - 1, every
decode pass real) or the probe's fast-forward (a real prefill, the cache grown through
Cache.update, then the last `steps` decode passes real). Same prompts, alternating, so the peaks
(PyTorch's reserved, the probe's held) and the seconds can be compared trial by trial.

    python3 scripts/gpu/fresh-fast-forward.py [--vram-limit 24] [-b 8] [-n 256]
        [--prompts 4096,4195,4245] [--steps 8]

One JSON line per trial on stdout: prompt, mode, outcome, prefill_peak, decode_peak,
reserved_peak, prefill_seconds, seconds (the task), wall_s (the process).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
PROBE = os.path.join(ROOT, "src", "probe", "transformers_probe.py")
GIB = 1 << 30


def one(spec):
    import importlib.util

    sys.dont_write_bytecode = True
    s = importlib.util.spec_from_file_location("transformers_probe", PROBE)
    probe = importlib.util.module_from_spec(s)
    s.loader.exec_module(probe)
    probe.import_libs()
    folder = tempfile.mkdtemp(prefix="ff-model-")
    try:
        with open(os.path.join(ROOT, "presets", spec["preset"] + ".json")) as f:
            cfg = json.load(f)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(cfg, f)
        setup = {"model": folder, "device": spec.get("device", "cuda"), "dtype": spec.get("dtype", "bf16"), "vram_limit": spec["vram_limit"],
                 "random_weights": True, "eager": False, "seed": 0, "fast_forward": "update"}
        child = probe.Child(setup)
        child.open()
        r = child.run({"task": "load"})
        if r["outcome"] != "ok":
            return {"outcome": "load " + r["outcome"]}
        n = spec["new"]
        t = {"task": "generate", "label": spec["mode"], "prompt_tokens": spec["prompt"], "new_tokens": n,
             "batch": spec["batch"], "decode_steps": n - 1 if spec["mode"] == "full" else spec["steps"]}
        r = child.run(t)
        child.close()
        keep = ("outcome", "path", "prefill_peak", "decode_peak", "reserved_peak", "peak", "prefill_seconds",
                "seconds", "generated_tokens", "cache_tokens")
        out = {k: r.get(k) for k in keep}
        out["used"] = r.get("used")
        if r.get("oom"):
            out["oom"] = (r["oom"].get("message") or "")[:160]
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(one(json.loads(sys.argv[2]))), flush=True)
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--vram-limit", type=float, default=24)
    ap.add_argument("-b", type=int, default=8)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--prompts", default="4096,4195,4245")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--preset", default="mistral-7b-instruct-v0.2")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16")
    a = ap.parse_args()
    for p in [int(x) for x in a.prompts.split(",")]:
        for mode in ("full", "fast_forward"):
            spec = {"preset": a.preset, "vram_limit": int(a.vram_limit * GIB), "batch": a.b, "new": a.n,
                    "prompt": p, "mode": mode, "steps": a.steps,
                    "device": a.device, "dtype": a.dtype}
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], capture_output=True,
                                  text=True, timeout=300)
            wall = round(time.perf_counter() - t0, 2)
            lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
            rec = json.loads(lines[-1]) if lines else {"outcome": "crash rc=%d" % proc.returncode,
                                                          "stderr": proc.stderr[-400:]}
            print(json.dumps({"prompt": p, "mode": mode, "batch": a.b, "new": a.n, "steps": a.steps,
                              "vram_limit_gib": a.vram_limit, "wall_s": wall, **rec}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
