#!/usr/bin/env bash
# #14 on the H200, session 7, call 3: measured-mode verdicts at the eighth workload (Qwen3-8B,
# 18 GiB, bracketed in call 2) and Mistral-7B batch 1 at its largest prompt that ran (5,815), which
# session 6 ran only with older code.
set -u
cd "$(dirname "$0")/../.."
set -- verdicts-s7b
source scripts/gpu/common.sh verdicts-s7b
export PYTHONUNBUFFERED=1 LLM_OOM_PROBE_STALL_S=15
B=${ENGINE_B:-.gl/llm-oom}
python3 scripts/gpu/select-limits.py "$OUT/qwen3.jsonl" qwen3-8b:1 >> "$OUT/summary.txt"
python3 scripts/gpu/select-limits.py "$OUT/mistral1.jsonl" mistral-7b-instruct-v0.2:1 >> "$OUT/summary.txt"
timed qwen3 timeout ${Q3_S:-150} env PER_RUN_S=${PER_RUN:-80} python3 scripts/gpu/diagnose-vs-transformers.py \
  "$OUT/qwen3.jsonl" "$FINAL/verdicts-s7b.jsonl" "$B" measured
timed mistral1 timeout ${M1_S:-85} env ONLY=ok PER_RUN_S=${PER_RUN:-80} python3 scripts/gpu/diagnose-vs-transformers.py \
  "$OUT/mistral1.jsonl" "$FINAL/verdicts-s7b.jsonl" "$B" measured
