#!/usr/bin/env bash
# fork-warm.py on the H200: a fresh child against one forked from a process that
# imported torch and transformers without CUDA (Mistral-7B's shapes, random bf16 weights), and
# the GPU's processes after (no memory left behind).
# Usage: OUT=./gpu-out bash scripts/gpu/fork-warm-h200.sh
set -u
cd "$(dirname "$0")/../.."
set -- forkwarm
source scripts/gpu/common.sh forkwarm
export PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
M=presets/mistral-7b-instruct-v0.2.json
python3 -c "import torch" 2>/dev/null  # page cache warm, as a second diagnose would find it
for i in 1 2; do timed cold$i python3 scripts/gpu/fork-warm.py cold $M; cat "$OUT/cold$i.json" >> "$OUT/summary.txt"; done
timed server python3 scripts/gpu/fork-warm.py server $M 3
cat "$OUT/server.json" >> "$OUT/summary.txt"
nvidia-smi --query-gpu=memory.used --format=csv >> "$OUT/summary.txt"
