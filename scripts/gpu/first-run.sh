#!/usr/bin/env bash
# The first diagnose on a fresh machine, then where it goes: Mistral-7B's default workload as the
# machine's first CUDA program, two warm runs, then (as root) the page cache dropped and the warm
# process stopped, and the cold run again; last, the edge case (b8 x 4,096 at 24 GiB, whose
# decisive fresh run is the user's whole generate()) under cProfile.
# Usage: OUT=./gpu-out bash scripts/gpu/first-run.sh BINARY.xz
set -u
cd "$(dirname "$0")/../.."
SRC=$1
set -- first-run
source scripts/gpu/common.sh first-run
export PYTHONUNBUFFERED=1
B=/tmp/llm-oom-first
unpack "$SRC" $B || exit 1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch,transformers;print("torch",torch.__version__,"transformers",transformers.__version__)'
  date -u +%FT%TZ; id -u; ls -d ~/.nv/ComputeCache 2>&1; } > "$OUT/machine.txt"
M=presets/mistral-7b-instruct-v0.2.json
timed cold-first $B -v diagnose -m $M --json
for r in 1 2; do timed warm-$r $B diagnose -m $M --json; done
pkill -f -- '--zygote'; sleep 1
sync; if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then
  timed cold-dropped $B -v diagnose -m $M --json
  pkill -f -- '--zygote'; sleep 1; sync; echo 3 > /proc/sys/vm/drop_caches
  timed import-cold python3 -X importtime -c "import torch, transformers, accelerate; from transformers import AutoModelForCausalLM"
  mv "$OUT/import-cold.log" "$OUT/importtime-cold.txt"
else echo "no root: page cache kept" >> "$OUT/summary.txt"; fi
mkdir -p "$OUT/prof-edge"
timed edge-prof env LLM_OOM_PROBE_PROFILE="$OUT/prof-edge" timeout 200 $B -v diagnose -m $M --vram-limit 24GiB -p 4096 -b 8 -n 256 --json
for f in "$OUT"/prof-edge/*.prof; do
  [ -e "$f" ] || continue
  python3 -c "
import pstats,sys
s=pstats.Stats(sys.argv[1]); s.sort_stats('cumulative').print_stats(35); s.sort_stats('tottime').print_stats(20)" "$f" > "$f.txt" 2>&1
  rm -f "$f"
done
python3 scripts/gpu/timings-summary.py "$OUT" >> "$OUT/summary.txt"
pkill -f -- '--zygote'
cat "$OUT/summary.txt"
