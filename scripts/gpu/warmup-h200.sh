#!/usr/bin/env bash
# Where a warm transformers-mode diagnose of Mistral-7B spends its seconds. The first
# run starts the warm process; three warm runs under cProfile (LLM_OOM_PROBE_PROFILE), their -vv
# phases and the profiles' top functions; then the floor of a fresh CUDA process's first
# generate() (warmup-floor.py), with lazy and with eager module loading.
# Usage: OUT=./gpu-out bash scripts/gpu/warmup-h200.sh   (binary: .gl/llm-oom.gz)
set -u
cd "$(dirname "$0")/../.."
set -- warmup
source scripts/gpu/common.sh warmup
export PYTHONUNBUFFERED=1 LLM_OOM_PROBE_STALL_S=15
B=/tmp/llm-oom; gunzip -c .gl/llm-oom.gz > $B && chmod +x $B
M=presets/mistral-7b-instruct-v0.2.json
timed ttv-cold $B -vv diagnose -m $M --json
for r in warm1 warm2 warm3; do
  mkdir -p "$OUT/prof-$r"
  timed ttv-$r env LLM_OOM_PROBE_PROFILE="$OUT/prof-$r" $B -vv diagnose -m $M --json
done
timed ttv-noprof $B -vv diagnose -m $M --json
for r in warm1 warm3; do
  for f in "$OUT"/prof-$r/*.prof; do
    python3 -c "
import pstats,sys
s=pstats.Stats(sys.argv[1]); s.sort_stats('cumulative').print_stats(45); s.sort_stats('tottime').print_stats(30)" "$f" > "$f.txt" 2>&1
  done
done
timed floor-lazy python3 scripts/gpu/warmup-floor.py 512
timed floor-eager env CUDA_MODULE_LOADING=EAGER python3 scripts/gpu/warmup-floor.py 512
for f in floor-lazy floor-eager; do echo "$f: $(cat "$OUT/$f.json")" >> "$OUT/summary.txt"; done
pkill -f -- '--zygote'
