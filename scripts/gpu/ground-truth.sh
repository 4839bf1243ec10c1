#!/usr/bin/env bash
# Python-only ground truth in one device call (no llm-oom binary needed):
#  1. transformers' real limits for four workloads (bisection, a fresh process per trial,
#     started at llm-oom's own predicted-mode budget: GUESS), appended to $OUT/limits.jsonl;
#  2. what transformers' cache really holds on CUDA for Gemma-3 and an MLA model (cache-real.py);
#  3. PyTorch allocator snapshots of four real OOMs, and decode with and without history.
# Each part is bounded by `timeout` so the call ends inside the device's 600 s.
# Usage: OUT=./gpu-out [LIMITS_S=300] [SNAP_S=180] bash scripts/gpu/ground-truth.sh
set -u
cd "$(dirname "$0")/../.."
set -- truth   # common.sh's EXIT trap reads $1
source scripts/gpu/common.sh truth
export PYTHONUNBUFFERED=1
timed limits timeout ${LIMITS_S:-300} python3 scripts/gpu/transformers-limits.py "$OUT/limits.jsonl" \
  --budget-s $(( ${LIMITS_S:-300} - 15 )) \
  --workload qwen2.5-7b-instruct:sdpa:1:128:16:3884 \
  --workload phi-3-mini-4k-instruct:sdpa:4:128:10:903 \
  --workload llama-2-7b:eager:1:64:15:1357 \
  --workload gemma-2-9b-it:sdpa:1:64:20:3344
cp "$OUT/limits.jsonl" "$FINAL/limits.jsonl" 2>/dev/null
timed cache-gemma3 timeout 45 python3 scripts/gpu/cache-real.py presets/gemma-3-27b-it.json --layers 6 --lengths 1024 8192 --device cuda
timed cache-dsv2 timeout 45 python3 scripts/gpu/cache-real.py presets/deepseek-v2-lite.json --layers 4 --lengths 1024 8192 --device cuda
cp "$OUT"/cache-*.json "$FINAL/" 2>/dev/null
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
OUT="$FINAL" timeout ${SNAP_S:-180} bash scripts/gpu/snapshot-h200.sh
