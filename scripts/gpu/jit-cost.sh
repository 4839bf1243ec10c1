#!/usr/bin/env bash
# What the driver's PTX compilation costs a first run, on one machine: with its cache off
# (CUDA_CACHE_DISABLE=1) every run compiles as a fresh machine's first does. `llm-oom run` of
# Mistral-7B's shapes with eager attention (the cast, mask and softmax kernels the sliced path used
# before its one-step masked softmax) against sliced attention (that kernel), twice each; then the
# first diagnose --engine candle as a fresh machine runs it.
# Usage: OUT=./gpu-out bash scripts/gpu/jit-cost.sh BINARY.xz   (a --features cuda build)
set -u
cd "$(dirname "$0")/../.."
SRC=$1
set -- jit-cost
source scripts/gpu/common.sh jit-cost
cuda_build "$SRC" || exit 1
M=presets/mistral-7b-instruct-v0.2.json
export CUDA_CACHE_DISABLE=1
for r in 1 2; do
  timed eager-$r $B run -m $M --device cuda --random-weights --prompt-tokens 300 --max-new-tokens 2 --attention-chunk 0
  timed sliced-$r $B run -m $M --device cuda --random-weights --prompt-tokens 300 --max-new-tokens 2 --attention-chunk 256
done
timed diagnose-uncached $B diagnose --engine candle -m $M --json
unset CUDA_CACHE_DISABLE
timed diagnose-cached $B diagnose --engine candle -m $M --json
python3 scripts/gpu/timings-summary.py "$OUT" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
