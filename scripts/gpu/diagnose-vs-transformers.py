#!/usr/bin/env python3
"""diagnose's verdict, exit code and budget against what transformers really did at its limits.

Reads the limit records of scripts/gpu/transformers-limits.py (largest prompt that ran, first that
ran out of memory, each a REAL generate() in a fresh process under the same emulated card) and runs
`llm-oom diagnose --json` at both prompts of each workload, measured (the transformers probe) and
predicted (no transformers: LLM_OOM_PYTHON points at a python without torch). Agreement: exit 0 at
largest_ok, exit 1 at first_oom; the budget's largest prompt at that batch never at or above
first_oom, and its share of largest_ok.

    python3 scripts/gpu/diagnose-vs-transformers.py LIMITS.jsonl OUT.jsonl BINARY
"""
import json, os, subprocess, sys, time

limits_file, out_file, binary = sys.argv[1:4]
MODES = (sys.argv[4] if len(sys.argv) > 4 else "measured,predicted").split(",")
PER_RUN = int(os.environ.get("PER_RUN_S", "120"))
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
limits = [json.loads(l) for l in open(limits_file) if '"kind": "limit"' in l or '"kind":"limit"' in l]
out = open(out_file, "a")


def diagnose(rec, prompt, mode):
    gib = rec["vram_limit"] / (1 << 30)
    args = [binary, "diagnose", "--model", os.path.join(ROOT, "presets", rec["preset"] + ".json"),
            "--vram-limit", "%.6fGiB" % gib, "-p", str(prompt), "-n", str(rec["new"]),
            "-b", str(rec["batch"]), "--stage-timeout", str(PER_RUN // 2), "--json",
            # the dtype the truth ran in (a preset's own torch_dtype may differ: llama-2-7b is f16)
            "--dtype", rec.get("dtype") or "bf16"]
    if rec["attn"] == "eager":
        args += ["--engine", "transformers-eager"]
    args += os.environ.get("EXTRA_ARGS", "").split()
    env = dict(os.environ)
    if mode == "predicted":
        env["LLM_OOM_PYTHON"] = "/nonexistent/python3"
    t0 = time.time()
    try:
        p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=PER_RUN)
    except subprocess.TimeoutExpired as e:
        return {"rc": None, "wall_s": PER_RUN, "error": "timed out",
                "stderr": (e.stderr or b"")[-600:].decode("utf-8", "replace") if isinstance(e.stderr, bytes) else str(e.stderr)[-600:]}
    wall = time.time() - t0
    save = os.environ.get("SAVE_DIR")
    if save:  # the whole report, for a case whose verdict must be read closely
        os.makedirs(save, exist_ok=True)
        name = "%s-%s-b%d-p%d-%s.json" % (rec["preset"], rec["attn"], rec["batch"], prompt, mode)
        with open(os.path.join(save, name), "w") as f:
            f.write(p.stdout or p.stderr)
    try:
        r = json.loads(p.stdout)
    except Exception:
        return {"rc": p.returncode, "wall_s": wall, "error": p.stderr[-600:]}
    budget = r.get("budget") or {}
    row = next((x for x in budget.get("table", []) if x.get("batch") == rec["batch"]), None)
    return {"rc": p.returncode, "wall_s": round(wall, 2), "cause": r["verdict"]["cause"],
            "stage": r["verdict"]["stage"], "mode": r.get("mode"),
            "max_prompt": budget.get("max_prompt_tokens"), "row": row,
            "stages": [(s["name"], s["outcome"], s["memory"]["peak"], (s.get("reason") or "")[:600])
                       for s in r.get("stages", [])],
            "summary": r["verdict"].get("summary", "")[:300], "seconds": r.get("seconds"),
            "warmup_seconds": r.get("warmup_seconds")}


for rec in limits:
    ok, bad = rec.get("largest_ok"), rec.get("first_oom")
    if rec.get("limited_by") != "memory" or not ok or not bad:
        continue
    for mode in MODES:
        for prompt, truth in ((ok, 0), (bad, 1)):
            if not prompt or os.environ.get("ONLY") == ("oom" if truth == 0 else "ok"):
                continue
            d = diagnose(rec, prompt, mode)
            d.update({"preset": rec["preset"], "attn": rec["attn"], "batch": rec["batch"],
                      "new": rec["new"], "prompt": prompt, "truth_rc": truth, "largest_ok": ok,
                      "first_oom": bad, "mode_asked": mode})
            d["agrees"] = d.get("rc") == truth
            mp = d.get("max_prompt")
            d["budget_safe"] = None if mp is None or bad is None else mp < bad
            d["budget_share"] = None if mp is None or not ok else round(mp / ok, 3)
            out.write(json.dumps(d) + "\n"); out.flush()
            print("%-26s %-5s b%-2d n%-3d p%-6d %-9s truth=%d rc=%s %-14s budget=%s share=%s %.1fs" % (
                rec["preset"], rec["attn"], rec["batch"], rec["new"], prompt, mode, truth,
                d.get("rc"), d.get("cause"), mp, d["budget_share"], d.get("wall_s", 0)), flush=True)
