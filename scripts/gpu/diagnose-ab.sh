#!/usr/bin/env bash
# Two builds of llm-oom on one card, back to back: a cold diagnose of Mistral-7B's default workload
# with each (each starts its own warm process), then warm runs alternating A and B; B alone then
# runs the 32k-token prompt, the edge case (b8 x 4,096 at 24 GiB) and three warm runs under
# cProfile (LLM_OOM_PROBE_PROFILE), whose top functions go into the tarball.
# Usage: OUT=./gpu-out bash scripts/gpu/diagnose-ab.sh A.xz B.xz [warm runs each, default 4]
# (xz- or gzip-compressed release binaries; the card and versions go into machine.txt.)
set -u
cd "$(dirname "$0")/../.."
A_SRC=$1 B_SRC=$2 RUNS=${3:-4}
set -- diagnose-ab
source scripts/gpu/common.sh diagnose-ab
export PYTHONUNBUFFERED=1
unpack "$A_SRC" /tmp/llm-oom-a && unpack "$B_SRC" /tmp/llm-oom-b || exit 1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch,transformers;print("torch",torch.__version__,"transformers",transformers.__version__)'
  date -u +%FT%TZ; } > "$OUT/machine.txt"
M=presets/mistral-7b-instruct-v0.2.json
for b in a b; do timed cold-$b /tmp/llm-oom-$b diagnose -m $M --json; done
for r in $(seq 1 "$RUNS"); do for b in a b; do timed warm-$b-$r /tmp/llm-oom-$b diagnose -m $M --json; done; done
timed b-32k timeout 150 /tmp/llm-oom-b diagnose -m $M --vram-limit 48GiB -p 32000 -n 256 --json
timed b-edge timeout 150 /tmp/llm-oom-b diagnose -m $M --vram-limit 24GiB -p 4096 -b 8 -n 256 --json
for r in 1 2 3; do
  mkdir -p "$OUT/prof-$r"
  timed prof-$r env LLM_OOM_PROBE_PROFILE="$OUT/prof-$r" /tmp/llm-oom-b diagnose -m $M --json
done
for f in "$OUT"/prof-*/*.prof; do
  [ -e "$f" ] || continue
  python3 -c "
import pstats,sys
s=pstats.Stats(sys.argv[1]); s.sort_stats('cumulative').print_stats(40); s.sort_stats('tottime').print_stats(25)" "$f" > "$f.txt" 2>&1
done
python3 scripts/gpu/timings-summary.py "$OUT" >> "$OUT/summary.txt"
pkill -f -- '--zygote'
cat "$OUT/summary.txt"
