#!/usr/bin/env bash
# diagnose's GPU checks on the H200 machine: the meters, verdicts of Mistral-7B and Llama-2-13B
# workloads, decode speed against transformers, and the README's example reports.
# Usage: scripts/gpu/diagnose-h200.sh <meters|verdicts|speed|readme> ; binaries in dist/ (built
# here with --features cuda). Logs go to $OUT (or ./gpu-out).
set -u
source "$(dirname "$0")/common.sh"
M7=mistralai/Mistral-7B-Instruct-v0.2
timed() { # name, then the command: JSON to $OUT/name.json, stderr and wall time to $OUT/name.log
  local name=$1; shift
  local t0=$(date +%s%N)
  "$@" > "$OUT/$name.json" 2> "$OUT/$name.log"
  local rc=$?
  local t1=$(date +%s%N)
  echo "$name rc=$rc wall=$(( (t1 - t0) / 1000000 )) ms" | tee -a "$OUT/summary.txt"
}
case "${1:-all}" in
meters)
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv | tee "$OUT/gpu.txt"
  timeout 300 dist/meters_gpu > "$OUT/meters.jsonl" 2> "$OUT/meters.log"; echo "meters rc=$?" | tee -a "$OUT/summary.txt"
  ;;
verdicts)
  timed default            $B diagnose --json
  timed mistral-default    $B diagnose --json -m $M7
  timed mistral-default-2  $B diagnose --json -m $M7
  timed llama13b-24g       $B diagnose --json -m meta-llama/Llama-2-13b-hf --vram-limit 24GiB
  timed mistral-fits-24g   $B diagnose --json -m $M7 --vram-limit 24GiB -p 2048 -n 256
  timed mistral-40k-24g    $B diagnose --json -m $M7 --vram-limit 24GiB -p 40000 -n 256
  timed mistral-48x-24g    $B diagnose --json -m $M7 --vram-limit 24GiB -p 2048 -n 256 -b 48 --verify
  timed llama13b-default   $B diagnose --json -m meta-llama/Llama-2-13b-hf
  $B diagnose -m $M7 --vram-limit 24GiB -p 2048 -n 256 -b 48 --svg "$OUT/mistral-48x.svg" --markdown > "$OUT/mistral-48x.md" 2>/dev/null
  ;;
speed)
  timeout 200 python3 scripts/calibrate/decode_speed.py mistral-7b-instruct-v0.2:bfloat16 llama-2-13b:float16 > "$OUT/transformers-speed.jsonl" 2> "$OUT/transformers-speed.log"
  timed run-mistral $B run -m $M7 --device cuda --dtype bf16 --prompt-tokens 2048 --max-new-tokens 129
  timed run-llama13b $B run -m meta-llama/Llama-2-13b-hf --device cuda --dtype f16 --prompt-tokens 2048 --max-new-tokens 129
  ;;
readme)
  $B diagnose --color never -m $M7 --vram-limit 24GiB -p 2048 -n 256 -b 48 --verify > "$OUT/mistral-48x.txt" 2>&1; echo "48x rc=$?" >> "$OUT/summary.txt"
  $B diagnose -m $M7 --vram-limit 24GiB -p 2048 -n 256 -b 48 --markdown --svg "$OUT/mistral-48x.svg" > "$OUT/mistral-48x.md" 2>/dev/null
  $B diagnose --color never -m $M7 --vram-limit 24GiB -p 40000 -n 256 > "$OUT/mistral-40k.txt" 2>&1; echo "40k rc=$?" >> "$OUT/summary.txt"
  timed mistral-default    $B diagnose --json -m $M7
  $B diagnose --color never -m $M7 > "$OUT/mistral-default.txt" 2>&1
  timed llama13b-24g       $B diagnose --json -m meta-llama/Llama-2-13b-hf --vram-limit 24GiB
  ;;
shared)
  # Another process holds 120 GB and keeps allocating 2 GiB more; the probe must not squeeze it.
  python3 -c "
import torch, time
x = torch.empty(int(120e9), dtype=torch.uint8, device='cuda')
print('holding', flush=True)
fails = 0; tries = 0; t0 = time.time()
while time.time() - t0 < 45:
    tries += 1
    try:
        y = torch.empty(2 << 30, dtype=torch.uint8, device='cuda'); del y; torch.cuda.empty_cache()
    except RuntimeError:
        fails += 1
    time.sleep(0.02)
print('other process: 2 GiB allocations tried', tries, 'failed', fails, flush=True)
" > "$OUT/other-process.log" 2>&1 &
  OTHER=$!
  for i in $(seq 1 60); do grep -q holding "$OUT/other-process.log" && break; sleep 0.5; done
  timed shared-b32 $B diagnose --json -m $M7 -p 2048 -n 256 -b 32
  $B diagnose --color never -m $M7 -p 2048 -n 256 -b 32 > "$OUT/shared-b32.txt" 2>&1
  timed shared-b1  $B diagnose --json -m $M7
  wait $OTHER
  ;;
limits)
  timed mistral-limits-24g $B diagnose --json -m $M7 --vram-limit 24GiB -p 2048 -n 256 -b 8 --find-limits
  ;;
esac
