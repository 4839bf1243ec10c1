#!/usr/bin/env bash
# diagnose in the user's engine on the H200 (issue #14). Part `limits`: the probe's protocol smoke
# run, then transformers' real limits by bisection. Part `verdicts`: diagnose measured and
# predicted at those limits, and the time to a verdict. Binary: dist/llm-oom (or $B).
set -u
source "$(dirname "$0")/common.sh" "$1"
B=${B:-.gl/llm-oom}
case "$1" in
limits)
  mkdir -p /tmp/m && cp presets/mistral-7b-instruct-v0.2.json /tmp/m/config.json
  printf '%s\n' '{"task":"load"}' '{"task":"warmup","prompt_tokens":256}' \
    '{"task":"generate","label":"ok","prompt_tokens":2048,"new_tokens":256,"batch":1,"decode_steps":16}' \
    '{"task":"generate","label":"big","prompt_tokens":60000,"new_tokens":16,"batch":1,"decode_steps":8}' \
    '{"task":"generate","label":"after","prompt_tokens":512,"new_tokens":16,"batch":1,"decode_steps":16}' \
    '{"task":"fragmentation"}' |
    timed smoke python3 src/probe/transformers_probe.py --setup \
      '{"model":"/tmp/m","device":"cuda:0","dtype":"bf16","vram_limit":25769803776,"random_weights":true,"eager":false,"seed":0}'
  timed limits python3 scripts/gpu/transformers-limits.py "$OUT/limits.jsonl" --vram-limit 24 --budget-s ${BUDGET:-430}
  cp "$OUT/limits.jsonl" "$FINAL/limits.jsonl" 2>/dev/null
  ;;
verdicts)
  timed verdicts python3 scripts/gpu/diagnose-vs-transformers.py "${LIMITS:-docs/calibration/transformers-limits-h200-2026-12-01.jsonl}" "$OUT/verdicts.jsonl" "$B"
  cp "$OUT/verdicts.jsonl" "$FINAL/verdicts.jsonl" 2>/dev/null
  M=mistralai/Mistral-7B-Instruct-v0.2
  timed ttv-cold "$B" diagnose -m $M --vram-limit 24GiB --json
  timed ttv-warm "$B" diagnose -m $M --vram-limit 24GiB --json
  timed ttv-32k "$B" diagnose -m $M --vram-limit 48GiB -p 32000 -n 256 --json
  timed ttv-predicted env LLM_OOM_PYTHON=/nonexistent "$B" diagnose -m $M --vram-limit 24GiB --json
  ;;
esac
