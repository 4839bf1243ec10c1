#!/usr/bin/env bash
# transformers' real limits on the GPU: the probe's protocol smoke run, then the largest prompt
# that runs under a 24 GiB cap, by bisection (scripts/gpu/transformers-limits.py), kept as
# $OUT/limits.jsonl.
# Usage: OUT=./gpu-out [BUDGET=430] bash scripts/gpu/limits.sh
set -u
set -- limits   # common.sh's EXIT trap reads $1
source "$(dirname "$0")/common.sh" limits
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
