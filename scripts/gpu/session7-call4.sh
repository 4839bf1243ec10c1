#!/usr/bin/env bash
# Session 7, call 4: llama.cpp's build finished (cmake linked in for its static-library rules),
# GGUFs written if this is a fresh machine, then llama.cpp measured (llamacpp-h200.sh).
set -u
cd "$(dirname "$0")/../.."
export GGUF_PY=$PWD/.glb/tree/src/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py
mkdir -p "$OUT"
bash scripts/gpu/llamacpp-finish-build.sh > "$OUT/llama-build.txt" 2>&1
echo "build rc=$?"; tail -12 "$OUT/llama-build.txt"
ls .glb/gguf 2>/dev/null
GRID_S=${GRID_S:-150} bash scripts/gpu/llamacpp-h200.sh
cat "$OUT/summary-llamacpp.txt" 2>/dev/null | tail -5
