"""One line per diagnose report in a folder: its cause, every timing and, with --find-limits, the
limits it found. Usage: python3 scripts/gpu/timings-summary.py DIR  (the GPU scripts' summaries)"""
import glob
import json
import os
import sys

for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        d = json.load(open(f))
    except Exception as e:  # noqa: BLE001 - a report that did not finish is said so
        print(os.path.basename(f), "unreadable:", e)
        continue
    t = d.get("timings") or []
    parts = " ".join("%s=%.2f" % (x.get("what", "?").split(" ")[0].rstrip(":"), x.get("seconds", 0)) for x in t)
    lim = d.get("limits") or {}
    found = " limits=%s/%s" % (lim.get("max_prompt_tokens"), lim.get("max_batch")) if lim else ""
    print(os.path.basename(f), "cause=%s" % (d.get("verdict") or {}).get("cause"), parts + found)
