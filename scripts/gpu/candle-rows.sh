#!/usr/bin/env bash
# diagnose --engine candle of Mistral-7B on this card, as the time-to-verdict table has it: the
# machine's first run (the driver compiles candle's PTX), two warm runs, the 32k-token prompt and
# --find-limits at 24 GiB. Each report kept; the summary has every timing.
# Usage: OUT=./gpu-out bash scripts/gpu/candle-rows.sh BINARY.xz   (a --features cuda build)
set -u
cd "$(dirname "$0")/../.."
SRC=$1
set -- candle-rows
source scripts/gpu/common.sh candle-rows
cuda_build "$SRC" || exit 1
M=presets/mistral-7b-instruct-v0.2.json
timed first $B diagnose --engine candle -m $M --json
for r in 1 2; do timed warm-$r $B diagnose --engine candle -m $M --json; done
timed p32k timeout 200 $B diagnose --engine candle -m $M --vram-limit 48GiB -p 32000 -n 256 --json
timed find-limits timeout 300 $B diagnose --engine candle -m $M --vram-limit 24GiB --find-limits --json
python3 scripts/gpu/timings-summary.py "$OUT" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
