#!/usr/bin/env bash
# Where transformers-mode diagnose spends its time. Python's import times,
# load-breakdown.py (imports, CUDA start, random weights, generate() 1st/2nd/3rd), then diagnose of
# Mistral-7B's default workload three times and the 32k-token case, each report kept.
# Usage: OUT=./gpu-out bash scripts/gpu/time-to-verdict.sh   (binary: .gl/llm-oom)
set -u
cd "$(dirname "$0")/../.."
set -- ttv8
source scripts/gpu/common.sh ttv8
export PYTHONUNBUFFERED=1
B=.gl/llm-oom
M=presets/mistral-7b-instruct-v0.2.json
python3 -X importtime -c "import torch, transformers; from transformers import AutoModelForCausalLM" 2> "$OUT/importtime.txt"
timed breakdown python3 scripts/gpu/load-breakdown.py $M
timed breakdown-32k python3 scripts/gpu/load-breakdown.py $M 32000 256
cat "$OUT"/breakdown*.json >> "$OUT/summary.txt"
for r in cold warm warm2; do timed ttv-$r "$B" diagnose -m $M --json; done
timed ttv-32k timeout 150 "$B" diagnose -m $M --vram-limit 48GiB -p 32000 -n 256 --json
for f in "$OUT"/ttv-*.json; do python3 - "$f" >> "$OUT/summary.txt" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print(sys.argv[1], "unreadable", e); sys.exit()
def walk(o, path=""):
    if isinstance(o, dict):
        for k, v in o.items():
            if k in ("seconds", "prefill_seconds", "wall_seconds", "elapsed_s", "time_to_verdict_s") or k.endswith("_seconds"):
                print(sys.argv[1].split("/")[-1], path + "/" + k, v)
            else:
                walk(v, path + "/" + (o.get("label") or o.get("name") or k) if isinstance(v, (dict, list)) else path)
    elif isinstance(o, list):
        for i, v in enumerate(o):
            walk(v, path + "[%d]" % i)
walk(d)
PY
done
