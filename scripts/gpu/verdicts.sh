#!/usr/bin/env bash
# diagnose's verdict and exit code at transformers' own limits, MEASURED mode by default (the
# embedded transformers probe, with the decisive fresh run at the edge), against the memory-limited
# records of docs/calibration/transformers-limits-h200-2026-12-01*.jsonl. Binary: .gl/llm-oom (a
# release build; the transformers child needs no CUDA build), or $ENGINE_B.
#   FIRST=n COUNT=n   which limit records (in the order below) to run; MEASURED_S bounds the part;
#   MODES="measured predicted" picks the modes.
# Usage: OUT=./gpu-out [FIRST=0] [COUNT=99] bash scripts/gpu/verdicts.sh
set -u
cd "$(dirname "$0")/../.."
set --  verdicts   # common.sh's EXIT trap reads $1
source scripts/gpu/common.sh verdicts
export PYTHONUNBUFFERED=1 LLM_OOM_PROBE_STALL_S=15
B=${ENGINE_B:-.gl/llm-oom}
python3 scripts/gpu/select-limits.py "$OUT/ordered.jsonl" \
  mistral-7b-instruct-v0.2:8 llama-2-7b:1 qwen2.5-7b-instruct:1 phi-3-mini-4k-instruct:4 \
  mistral-7b-instruct-v0.2:1 meta-llama-3-8b:1 qwen2.5-0.5b-instruct:16 gemma-2-9b-it:1 >> "$OUT/summary.txt"
tail -n +$(( ${FIRST:-0} + 1 )) "$OUT/ordered.jsonl" | head -n ${COUNT:-99} > "$OUT/limits.jsonl"
cat "$OUT/limits.jsonl" | cut -c1-160 >> "$OUT/summary.txt"
timed measured timeout ${MEASURED_S:-500} env PER_RUN_S=${PER_RUN:-80} python3 scripts/gpu/diagnose-vs-transformers.py \
  "$OUT/limits.jsonl" "$FINAL/verdicts.jsonl" "$B" ${MODES:-measured}
