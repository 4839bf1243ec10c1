#!/usr/bin/env bash
# Why diagnose's decisive fresh run can fit Llama-2-7B eager at 1,509 tokens (15 GiB) where
# transformers' own trial runs out (scripts/gpu/generate-ab.py, one fresh process per variant),
# then measured-mode verdicts at limit records.   AB_ONLY=1: the A/B part only.
# Usage: OUT=./gpu-out [AB_ONLY=1] bash scripts/gpu/generate-ab-h200.sh
set -u
cd "$(dirname "$0")/../.."
set -- generate-ab
source scripts/gpu/common.sh generate-ab
export PYTHONUNBUFFERED=1 LLM_OOM_PROBE_STALL_S=15
B=${ENGINE_B:-.gl/llm-oom}
L2='"preset": "llama-2-7b", "attn": "eager", "batch": 1, "new": 64, "vram_limit": 16106127360'
for pv in 1509:trial 1509:settle 1509:dict 1509:probe 1509:nosettle 1458:trial 1458:probe; do
  p=${pv%%:*}; v=${pv##*:}
  timed "ab-$p-$v" timeout 90 python3 scripts/gpu/generate-ab.py "{$L2, \"prompt\": $p, \"variant\": \"$v\"}"
  cat "$OUT/ab-$p-$v.json" >> "$FINAL/ab.jsonl"
done
timed diag-1509 timeout 120 "$B" diagnose -m presets/llama-2-7b.json --engine transformers-eager \
  --vram-limit 15GiB -p 1509 -n 64 --fresh-run always --json
cp "$OUT/diag-1509.json" "$FINAL/diag-1509.json"
[ -n "${AB_ONLY:-}" ] && exit 0
python3 scripts/gpu/select-limits.py "$OUT/limits.jsonl" ${RECORDS:-mistral-7b-instruct-v0.2:8 qwen2.5-7b-instruct:1} >> "$OUT/summary.txt"
timed measured timeout ${MEASURED_S:-260} env PER_RUN_S=${PER_RUN:-80} python3 scripts/gpu/diagnose-vs-transformers.py \
  "$OUT/limits.jsonl" "$FINAL/verdicts.jsonl" "$B" measured
