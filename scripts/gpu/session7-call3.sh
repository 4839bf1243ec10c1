#!/usr/bin/env bash
# Session 7, call 3 (GPU machine): llama.cpp's build finished on its 16 cores while the GPU runs
# #14's last verdicts; then the GGUFs are written. Call 4 measures llama.cpp (llamacpp-h200.sh).
set -u
cd "$(dirname "$0")/../.."
export GGUF_PY=$PWD/.glb/tree/src/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py
mkdir -p "$OUT"
bash scripts/gpu/llamacpp-finish-build.sh > "$OUT/llama-build.txt" 2>&1 &
BPID=$!
bash scripts/gpu/verdicts-s7b-h200.sh
wait $BPID; echo "build rc=$?"; cat "$OUT/llama-build.txt"
"$PWD/.glb/tree/llama-build/cuda/bin/llama-completion" --version 2>&1 | tail -3
WRITE_ONLY=1 bash scripts/gpu/llamacpp-h200.sh
cat "$OUT/summary-llamacpp.txt" 2>/dev/null
