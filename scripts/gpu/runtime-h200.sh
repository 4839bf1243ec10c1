#!/usr/bin/env bash
# The runtime's GPU checks on the H200 machine: every family and --quantize on CUDA, and the
# candle profile against the probe's own limits; see docs/accuracy.md.
# Usage: scripts/gpu/runtime-h200.sh <families|limits-a|limits-b> ; the binary in dist/ (built
# here with --features cuda). Logs go to $OUT (or ./gpu-out) as <part>.tgz.
set -u
source "$(dirname "$0")/common.sh"
run() { # name model dtype [more args]: load, prefill 2,048, decode 64
  local name=$1 model=$2 dtype=$3; shift 3
  timed "$name" $B run -m "$model" --device cuda --dtype "$dtype" --prompt-tokens 2048 --max-new-tokens 65 "$@"
}
limits() { # name model card [more args]
  local name=$1 model=$2 card=$3; shift 3
  timed "$name" $B diagnose --json -m "$model" --vram-limit "$card" -p 1024 -n 256 -b 4 --find-limits "$@"
}
case "${1:-}" in
families)
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv | tee "$OUT/gpu.txt"
  run warmup-smol HuggingFaceTB/SmolLM2-135M-Instruct bf16
  run mistral-bf16 mistralai/Mistral-7B-Instruct-v0.2 bf16
  run mistral-q8_0 mistralai/Mistral-7B-Instruct-v0.2 bf16 --quantize q8_0
  run mistral-q4k mistralai/Mistral-7B-Instruct-v0.2 bf16 --quantize q4k
  run qwen3-8b Qwen/Qwen3-8B bf16
  run gemma2-9b google/gemma-2-9b-it bf16
  run phi3-mini microsoft/Phi-3-mini-4k-instruct bf16
  run mixtral-8x7b mistralai/Mixtral-8x7B-Instruct-v0.1 bf16
  run llama31-8b meta-llama/Llama-3.1-8B-Instruct bf16
  timed llama13b-24g-q8 $B diagnose --json -m meta-llama/Llama-2-13b-hf --vram-limit 24GiB --quantize q8_0
  ;;
limits-a)
  limits mistral-18g mistralai/Mistral-7B-Instruct-v0.2 18GiB
  limits llama3-20g meta-llama/Meta-Llama-3-8B 20GiB
  limits qwen05-3g Qwen/Qwen2.5-0.5B-Instruct 3GiB
  ;;
limits-b)
  limits qwen7-18g Qwen/Qwen2.5-7B-Instruct 18GiB
  limits phi3-10g microsoft/Phi-3-mini-4k-instruct 10GiB
  limits gemma2-22g google/gemma-2-9b-it 22GiB
  ;;
*)
  echo "usage: $0 families|limits-a|limits-b" >&2
  exit 2
  ;;
esac
