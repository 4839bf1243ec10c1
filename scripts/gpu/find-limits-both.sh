#!/usr/bin/env bash
# diagnose --find-limits of Mistral-7B at --vram-limit 24GiB in both engines on this card, each
# after one warm diagnose of the default workload (the transformers probe's warm process, the
# driver's PTX cache), twice each; every trial's seconds are in the reports.
# Usage: OUT=./gpu-out bash scripts/gpu/find-limits-both.sh BINARY.xz   (a --features cuda build)
set -u
cd "$(dirname "$0")/../.."
SRC=$1
set -- find-limits-both
source scripts/gpu/common.sh find-limits-both
cuda_build "$SRC" || exit 1
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)" >> "$OUT/machine.txt" 2>&1
M=presets/mistral-7b-instruct-v0.2.json
timed tf-warm $B diagnose -m $M --json
for r in 1 2; do timed tf-find-limits-$r timeout 200 $B diagnose -m $M --vram-limit 24GiB --find-limits --json; done
for r in 1 2; do timed candle-find-limits-$r timeout 200 $B diagnose --engine candle -m $M --vram-limit 24GiB --find-limits --json; done
python3 scripts/gpu/timings-summary.py "$OUT" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
