#!/usr/bin/env bash
# #14 on the H200, session 7, call 2: measured-mode verdicts with the current code, the truth's dtype
# passed to diagnose (--dtype; session 6 compared Llama-2-7B's f16 diagnose with a bf16 truth), an
# eighth workload bracketed (Qwen3-8B, 18 GiB), then predicted mode over all eight.
set -u
cd "$(dirname "$0")/../.."
set -- verdicts-s7
source scripts/gpu/common.sh verdicts-s7
export PYTHONUNBUFFERED=1 LLM_OOM_PROBE_STALL_S=15
B=${ENGINE_B:-.gl/llm-oom}
# Does transformers itself fit Llama-2-7B eager at 1,509 in f16 (what diagnose said for f16)?
timed trial-f16 timeout 60 python3 scripts/gpu/transformers-limits.py --trial \
  '{"preset": "llama-2-7b", "attn": "eager", "batch": 1, "new": 64, "prompt": 1509, "vram_limit": 16106127360, "dtype": "f16", "device": "cuda:0"}'
cp "$OUT/trial-f16.json" "$FINAL/trial-f16.json"
timed gt-qwen3 timeout ${GT_S:-125} python3 scripts/gpu/transformers-limits.py "$OUT/qwen3.jsonl" --budget-s ${GT_BUDGET:-110} \
  --workload qwen3-8b:sdpa:1:128:18:6104
cp "$OUT/qwen3.jsonl" "$FINAL/qwen3-limits.jsonl"
EXTRA="$FINAL/qwen3-limits.jsonl" python3 scripts/gpu/select-limits.py "$OUT/all.jsonl" \
  llama-2-7b:1 phi-3-mini-4k-instruct:4 qwen2.5-0.5b-instruct:16 qwen3-8b:1 mistral-7b-instruct-v0.2:1 \
  mistral-7b-instruct-v0.2:8 qwen2.5-7b-instruct:1 meta-llama-3-8b:1 >> "$OUT/summary.txt"
EXTRA="$FINAL/qwen3-limits.jsonl" python3 scripts/gpu/select-limits.py "$OUT/measured4.jsonl" \
  llama-2-7b:1 phi-3-mini-4k-instruct:4 qwen2.5-0.5b-instruct:16 qwen3-8b:1 >> "$OUT/summary.txt"
python3 scripts/gpu/select-limits.py "$OUT/mistral1.jsonl" mistral-7b-instruct-v0.2:1 >> "$OUT/summary.txt"
timed measured timeout ${MEASURED_S:-330} env PER_RUN_S=${PER_RUN:-80} python3 scripts/gpu/diagnose-vs-transformers.py \
  "$OUT/measured4.jsonl" "$FINAL/verdicts.jsonl" "$B" measured
timed measured-m1 timeout ${M1_S:-60} env ONLY=ok PER_RUN_S=${PER_RUN:-80} python3 scripts/gpu/diagnose-vs-transformers.py \
  "$OUT/mistral1.jsonl" "$FINAL/verdicts.jsonl" "$B" measured
timed predicted timeout ${PREDICTED_S:-60} env PER_RUN_S=30 python3 scripts/gpu/diagnose-vs-transformers.py \
  "$OUT/all.jsonl" "$FINAL/verdicts.jsonl" "$B" predicted
