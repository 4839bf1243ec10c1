#!/usr/bin/env bash
# Build llama.cpp's CUDA tools for an H200 (sm_90) on a machine with no GPU and no CUDA toolkit, and
# pack them into ONE archive, .gl/llama-cpp-cuda.tar.gz, to carry to the GPU machine.
#
# Usage:  scripts/build-llama-cpp.sh          # CUDA build + archive (30-60 min on 2 cores, first run)
#         scripts/build-llama-cpp.sh --cpu    # also a CPU-only build in .gl/llama-build/cpu (local tests)
#
# Source: the llama-cpp-python 0.3.36 sdist from PyPI (sha256 pinned below), which vendors llama.cpp
# at commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f (2026-10-01, "webgpu: fix SSM_SCAN binding
# aliasing (#29750)"), upstream release b11312. The sdist's git metadata is a shallow clone (its
# rev-list count is 1), so the build number is passed to cmake by hand and the tools print
# "version: ... (build 11312, commit 0c1e570)".
# Toolchain: CUDA 13.0 nvcc/cudart/cublas wheels of scripts/setup-cuda.sh; cmake 4.4.5 and ninja 1.13.2
# wheels in a sibling venv of the same cache.
#
# The archive holds ONE static binary, bin/llama (llama.cpp's unified tool: `llama completion`,
# `llama bench`, `llama serve`, `llama quantize`, ...), so the CUDA kernels are in it once, plus
# wrappers bin/llama-completion, bin/llama-bench, bin/llama-server, bin/llama-quantize that call it,
# and gguf-py (for scripts/gpu/write-gguf.py on a machine without the `gguf` package).
# It links the shared cudart/cublas of CUDA 13 (RUNPATH /usr/local/cuda-13.0/lib64) and the driver's
# libcuda.so.1; libstdc++/libgcc are static. The CPU backend is generic x86-64 with AVX2/FMA/F16C.
#
# Idempotent: the download, the venv and the build are kept in .gl/; a second run re-checks
# (cmake, ninja: seconds) and re-packs.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
GL="$ROOT/.gl"
PIN=0.3.36
SDIST="llama_cpp_python-$PIN.tar.gz"
SDIST_URL="https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/$SDIST"
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
BUILD_NUMBER=11312
BUILD_COMMIT=0c1e570
CMAKE_PIN=4.4.5
NINJA_PIN=1.13.2
SRC="$GL/src/llama_cpp_python-$PIN/vendor/llama.cpp"
BUILD="$GL/llama-build"
STAGE="$GL/llama-cpp-cuda"
ARCHIVE="$GL/llama-cpp-cuda.tar.gz"
JOBS="${JOBS:-2}"
WITH_CPU=0
[ "${1:-}" = "--cpu" ] && WITH_CPU=1

log() { echo "build-llama-cpp: $*" >&2; }

fetch_source() {
  [ -f "$SRC/CMakeLists.txt" ] && return
  mkdir -p "$GL/src"
  if [ ! -f "$GL/src/$SDIST" ]; then
    # `pip download --no-binary :all:` would build cmake from source just to read the sdist's
    # metadata (its build backend needs cmake); the pinned URL and hash are the same file.
    log "downloading $SDIST"
    curl -sSfL -o "$GL/src/$SDIST.part" "$SDIST_URL"
    mv "$GL/src/$SDIST.part" "$GL/src/$SDIST"
  fi
  echo "$SDIST_SHA256  $GL/src/$SDIST" | sha256sum -c --quiet -
  tar -xzf "$GL/src/$SDIST" -C "$GL/src"
}

build_tools() {
  local cache="${LLM_OOM_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-oom-cuda}"
  local venv="$cache/buildtools"
  if [ ! -f "$venv/.cmake-$CMAKE_PIN-ninja-$NINJA_PIN" ]; then
    log "installing cmake $CMAKE_PIN and ninja $NINJA_PIN into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --only-binary :all: \
      "cmake==$CMAKE_PIN" "ninja==$NINJA_PIN" >&2
    touch "$venv/.cmake-$CMAKE_PIN-ninja-$NINJA_PIN"
  fi
  export PATH="$venv/bin:$PATH"
  STUB="$cache/stub"
}

common_flags() {
  echo -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_OPENMP=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_NUMBER=$BUILD_NUMBER -DLLAMA_BUILD_COMMIT=$BUILD_COMMIT
}

build_cuda() {
  local lib="$CUDA_ROOT/lib"
  # shellcheck disable=SC2046
  cmake -S "$SRC" -B "$BUILD/cuda" $(common_flags) \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA_ALL_QUANTS=OFF \
    -DCMAKE_CUDA_COMPILER="$CUDA_ROOT/bin/nvcc" -DCUDAToolkit_ROOT="$CUDA_ROOT" \
    -DCUDA_cuda_driver_LIBRARY="$STUB/libcuda.so" -DCMAKE_SKIP_BUILD_RPATH=ON \
    -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc -Wl,-rpath,/usr/local/cuda-13.0/lib64 -Wl,-rpath-link,$lib" \
    >"$BUILD/cuda-configure.log"
  log "building llama (CUDA, sm_90) with $JOBS jobs; log: $BUILD/cuda-build.log"
  local t0=$SECONDS
  nice -n 10 cmake --build "$BUILD/cuda" --target llama-app -j "$JOBS" >"$BUILD/cuda-build.log" 2>&1 \
    || { tail -30 "$BUILD/cuda-build.log" >&2; exit 1; }
  log "CUDA build: $((SECONDS - t0)) s"
}

build_cpu() {
  # shellcheck disable=SC2046
  cmake -S "$SRC" -B "$BUILD/cpu" $(common_flags) >"$BUILD/cpu-configure.log"
  log "building llama-completion (CPU only); log: $BUILD/cpu-build.log"
  nice -n 10 cmake --build "$BUILD/cpu" --target llama-completion -j "$JOBS" >"$BUILD/cpu-build.log" 2>&1 \
    || { tail -30 "$BUILD/cpu-build.log" >&2; exit 1; }
}

pack() {
  rm -rf "$STAGE"
  mkdir -p "$STAGE/bin"
  cp "$BUILD/cuda/bin/llama" "$STAGE/bin/llama"
  strip --strip-all "$STAGE/bin/llama"
  for tool in completion bench server quantize cli; do
    local cmd=$tool
    [ "$tool" = server ] && cmd=serve
    printf '#!/bin/sh\nexec "$(dirname "$0")/llama" %s "$@"\n' "$cmd" >"$STAGE/bin/llama-$tool"
    chmod +x "$STAGE/bin/llama-$tool"
  done
  cp -r "$SRC/gguf-py" "$STAGE/gguf-py"
  find "$STAGE/gguf-py" -name __pycache__ -prune -exec rm -rf {} +
  cp "$SRC/LICENSE" "$STAGE/LICENSE"
  {
    echo "llama.cpp b$BUILD_NUMBER (commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f), vendored by llama-cpp-python $PIN"
    echo "CUDA 13.0, sm_90, static; needs libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcuda.so.1"
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -m) with $(gcc --version | head -1)"
    echo "glibc symbols needed up to: $(objdump -T "$STAGE/bin/llama" | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)"
  } >"$STAGE/BUILD-INFO.txt"
  tar -C "$GL" -czf "$ARCHIVE.part" "$(basename "$STAGE")"
  mv "$ARCHIVE.part" "$ARCHIVE"
  log "binary:  $(du -b "$STAGE/bin/llama" | cut -f1) bytes stripped ($(du -h "$BUILD/cuda/bin/llama" | cut -f1) unstripped)"
  log "archive: $ARCHIVE $(du -b "$ARCHIVE" | cut -f1) bytes ($(du -h "$ARCHIVE" | cut -f1))"
  local limit=$((55 * 1024 * 1024))
  if [ "$(du -b "$ARCHIVE" | cut -f1)" -gt "$limit" ]; then
    log "WARNING: the archive is over 55 MiB"
  fi
}

mkdir -p "$BUILD"
fetch_source
build_tools
eval "$("$ROOT/scripts/setup-cuda.sh")"
build_cuda
[ "$WITH_CPU" = 1 ] && build_cpu
pack
