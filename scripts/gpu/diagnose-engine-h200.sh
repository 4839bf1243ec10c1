#!/usr/bin/env bash
# diagnose in transformers on the H200, one short device call: the verdict and exit code
# at transformers' own limits, predicted mode for every memory-limited workload (no GPU work), then
# measured mode (the embedded transformers probe) from the fastest workload on, while time is left.
# A stalled stage is quoted by its Python stacks (faulthandler, every LLM_OOM_PROBE_STALL_S).
# Usage: scripts/gpu/diagnose-engine-h200.sh verdicts   (binary: $B, default .gl/llm-oom)
set -u
source "$(dirname "$0")/common.sh" "$1"
B=${ENGINE_B:-.gl/llm-oom}
LIMITS=${LIMITS:-.gl/mem-limits.jsonl}
export LLM_OOM_PROBE_STALL_S=${STALL:-10}
timed predicted env PER_RUN_S=30 python3 scripts/gpu/diagnose-vs-transformers.py "$LIMITS" "$FINAL/verdicts.jsonl" "$B" predicted
head -1 "$LIMITS" > "$OUT/first.jsonl"
timed measured-first env PER_RUN_S=${PER_RUN:-90} python3 scripts/gpu/diagnose-vs-transformers.py "$OUT/first.jsonl" "$FINAL/verdicts.jsonl" "$B" measured
if grep -q '"load", "ok"' "$FINAL/verdicts.jsonl"; then
  tail -n +2 "$LIMITS" | head -${MORE:-1} > "$OUT/rest.jsonl"
  timed measured-rest env PER_RUN_S=${PER_RUN:-90} python3 scripts/gpu/diagnose-vs-transformers.py "$OUT/rest.jsonl" "$FINAL/verdicts.jsonl" "$B" measured
fi
cp "$FINAL/verdicts.jsonl" "$FINAL/verdicts.jsonl" 2>/dev/null
cp "$OUT/summary.txt" "$FINAL/summary.txt" 2>/dev/null
