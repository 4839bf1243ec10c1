#!/usr/bin/env bash
# #14, session 8, call 2: time to verdict after the child's os._exit and the skipped scikit-learn
# import (Mistral-7B's default workload cold / warm / warm, with -vv's timed events; the 32k-token
# case), candle mode cold / warm (CUDA build), then measured mode re-run with this binary at the
# largest-that-ran / first-that-ran-out prompts of the workloads named in $SET.
# Binaries: .gl/llm-oom (release), .gl/llm-oom-cuda.gz (release --features cuda).
set -u
cd "$(dirname "$0")/../.."
PART=${PART:-s8c2}
set -- "$PART"
source scripts/gpu/common.sh "$PART"
export PYTHONUNBUFFERED=1 LLM_OOM_PROBE_STALL_S=15
B=.gl/llm-oom
M=presets/mistral-7b-instruct-v0.2.json
S=$OUT/reports; mkdir -p $S
if [ -z "${SKIP_TTV:-}" ]; then
  for r in cold warm warm2; do timed ttv-$r "$B" -vv diagnose -m $M --json; done
  timed ttv-32k timeout 150 "$B" -vv diagnose -m $M --vram-limit 48GiB -p 32000 -n 256 --json
  C=/tmp/llm-oom-cuda; gunzip -c .gl/llm-oom-cuda.gz > $C && chmod +x $C
  timed ttv-candle-cold $C diagnose -m $M --engine candle --json
  timed ttv-candle-warm $C diagnose -m $M --engine candle --json
  cp "$OUT"/ttv-*.json "$OUT"/ttv-*.log "$S/" 2>/dev/null
fi
python3 scripts/gpu/select-limits.py "$OUT/set.jsonl" ${SET:-mistral-7b-instruct-v0.2:8} >> "$OUT/summary.txt"
timed measured timeout ${MEASURED_S:-420} env PER_RUN_S=${PER_RUN:-90} SAVE_DIR=$S python3 scripts/gpu/diagnose-vs-transformers.py \
  "$OUT/set.jsonl" "$FINAL/verdicts-$PART.jsonl" "$B" measured
cat "$OUT/measured.json" >> "$OUT/summary.txt"
tar czf "$FINAL/reports.tgz" -C "$OUT" reports
