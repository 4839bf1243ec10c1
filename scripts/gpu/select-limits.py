#!/usr/bin/env python3
"""The memory-limited limit records (largest prompt that ran and first that ran out, both known) of
docs/calibration/transformers-limits-h200-2026-12-01*.jsonl, as JSON lines, in the order asked.

    python3 scripts/gpu/select-limits.py OUT.jsonl PRESET:BATCH [PRESET:BATCH ...]   ("all": every one)
    EXTRA=more.jsonl: limit records of another file too (read last: they win)
"""
import glob, json, os, sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
out, wanted = sys.argv[1], sys.argv[2:]
recs = {}
files = sorted(glob.glob(os.path.join(ROOT, "docs/calibration/transformers-limits-h200-2026-12-01*.jsonl")))
files += [f for f in [os.environ.get("EXTRA")] if f and os.path.exists(f)]
for f in files:
    for l in open(f):
        r = json.loads(l)
        if r.get("kind") == "limit" and r.get("limited_by") == "memory" and r.get("largest_ok") and r.get("first_oom"):
            recs["%s:%d" % (r["preset"], r["batch"])] = r
keys = list(recs) if wanted == ["all"] else [k for k in wanted if k in recs]
with open(out, "w") as f:
    for k in keys:
        f.write(json.dumps(recs[k]) + "\n")
print("%d limit records: %s" % (len(keys), ", ".join(keys)))
