#!/usr/bin/env bash
# Finish llama.cpp's CUDA build on the GPU machine (16 cores) from the tree scripts/build-llama-cpp.sh
# left half-built here (2 cores: ~1 template instance a minute). .glb/llama-tree.tar.gz holds the
# vendored source and the build folder at the paths they were configured with; this recreates those
# paths (the sdist under /work/wt-llamacpp/.gl, the CUDA wheels' root as links into the machine's
# CUDA 13.0 toolkit), drops ninja's regeneration edge (cmake is not needed: nothing was
# reconfigured) and runs ninja for llama-completion. Prints the binary's path on success.
# Usage: bash scripts/gpu/llamacpp-finish-build.sh   (from the repository root, .glb/llama-tree.tar.gz present)
set -u
REPO=$(pwd)
T="$REPO/.glb/tree"   # inside the repository's ignored .glb: kept for the next call while warm
# (a tree a previous call left here is newer: keep it)
[ -d "$T/llama-build/cuda" ] || { mkdir -p "$T" && tar xzf .glb/llama-tree.tar.gz -C "$T"; } || exit 1
mkdir -p /work/wt-llamacpp && ln -sfn "$T" /work/wt-llamacpp/.gl
F=/root/.cache/llm-oom-cuda/venv/lib/python3.11/site-packages/nvidia/cu13
mkdir -p "$F"
for e in /usr/local/cuda-13.0/*; do ln -sfn "$e" "$F/$(basename "$e")"; done
[ -e "$F/lib" ] || ln -sfn /usr/local/cuda-13.0/lib64 "$F/lib"
STUB=$(find /usr/local/cuda-13.0/ -path '*stubs*' -name libcuda.so | head -1)
mkdir -p /root/.cache/llm-oom-cuda/stub && ln -sfn "$STUB" /root/.cache/llm-oom-cuda/stub/libcuda.so
# CMake's own binary runs in the static-library rules (`cmake -E rm -f` before `ar qc`).
CM=/root/.cache/llm-oom-cuda/buildtools/lib/python3.11/site-packages/cmake/data/bin
mkdir -p "$CM" && ln -sfn "$(command -v cmake)" "$CM/cmake"
B=/work/wt-llamacpp/.gl/llama-build/cuda
python3 - "$B/build.ninja" <<'PY'
import re, sys
p = sys.argv[1]; s = open(p).read()
# the edge that regenerates build.ninja with cmake: "build build.ninja ...: RERUN_CMAKE | ...\n  pool = console\n"
s2 = re.sub(r"\nbuild build\.ninja[^\n]*RERUN_CMAKE[^\n]*\n(  [^\n]*\n)*", "\n", s)
print("regeneration edge dropped:", s2 != s)
open(p, "w").write(s2)
PY
NINJA=$(command -v ninja || echo "python3 -m ninja")
c++ --version | head -1; /usr/local/cuda-13.0/bin/nvcc --version | tail -2
echo "jobs planned: $($NINJA -C "$B" -n llama-completion | grep -c '^\[')"
$NINJA -C "$B" -n llama-completion | grep -c "Building CXX" | sed 's/^/  of which C++: /'
t0=$(date +%s)
$NINJA -C "$B" -j 16 llama-completion > /tmp/llama-build.log 2>&1
rc=$?
echo "ninja rc=$rc in $(( $(date +%s) - t0 )) s"; tail -5 /tmp/llama-build.log
[ $rc -eq 0 ] && ls -la "$B/bin/" && echo "LLAMA_BIN=$B/bin/llama-completion"
exit $rc
