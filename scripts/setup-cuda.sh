#!/usr/bin/env bash
# Install a CUDA 13.0 toolchain from PyPI wheels into a cache folder outside the repository, so the
# `cuda` feature builds on a machine with no GPU and no system CUDA toolkit.
#
# Usage:  eval "$(scripts/setup-cuda.sh)"   # then: cargo build --release --features cuda
#         eval "$(scripts/setup-cuda.sh --nccl)"   # also NCCL 2.30, to link --features nccl
#         (`cargo check --features nccl` needs no NCCL: cudarc's bindings are pre-generated)
#
# Pinned to 13.0 because driver 580 accepts PTX up to ISA 9.0; an unpinned install pulls 13.5 pieces and
# ptxas fails with "Unsupported .version 9.5". Users with a CUDA toolkit don't need this script.
# Everything here is idempotent: a second run only prints the exports.
set -euo pipefail

CACHE="${LLM_OOM_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-oom-cuda}"
CAP="${CUDA_COMPUTE_CAP:-90}"
VENV="$CACHE/venv"

log() { echo "setup-cuda: $*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  mkdir -p "$CACHE"
  python3 -m venv "$VENV"
fi

if [ ! -f "$CACHE/.wheels-13.0" ]; then
  log "installing pinned CUDA 13.0 wheels (about 0.6 GB)"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cublas==13.0.2.14 \
    nvidia-curand==10.4.0.35 nvidia-cuda-nvrtc==13.0.88 >&2
  touch "$CACHE/.wheels-13.0"
fi

CU13=$("$VENV/bin/python" - <<'PY'
import os, nvidia
print(os.path.join(list(nvidia.__path__)[0], "cu13"))
PY
)
LIB="$CU13/lib"

# The tensor-parallel probe's NCCL (candle links cudarc's libraries: a --features nccl binary
# needs libnccl.so.2 at run time too). Pinned to the 2.30 cudarc's `nccl` feature binds.
NCCL_LIB=""
if [ "${1:-}" = "--nccl" ]; then
  if [ ! -f "$CACHE/.nccl-2.30" ]; then
    log "installing pinned NCCL 2.30 wheel"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check nvidia-nccl-cu13==2.30.7 >&2
    touch "$CACHE/.nccl-2.30"
  fi
  NCCL_LIB="$(dirname "$CU13")/nccl/lib"
  [ -e "$NCCL_LIB/libnccl.so" ] || ln -s libnccl.so.2 "$NCCL_LIB/libnccl.so"
fi

# The wheels ship only versioned libraries; the linker wants the plain names.
for name in cublas cublasLt cudart nvrtc; do
  [ -e "$LIB/lib$name.so" ] || ln -s "lib$name.so.13" "$LIB/lib$name.so"
done
[ -e "$LIB/libcurand.so" ] || ln -s libcurand.so.10 "$LIB/libcurand.so"
[ -e "$CU13/lib64" ] || ln -s lib "$CU13/lib64"

# No wheel ships the driver's libcuda.so. Build a link-only stub with the real soname; at run time
# the driver's libcuda.so.1 is used. Never put $STUB on LD_LIBRARY_PATH when running.
STUB="$CACHE/stub"
if [ ! -f "$STUB/libcuda.so" ]; then
  log "building link-only libcuda stub"
  mkdir -p "$STUB"
  {
    grep -oE 'CUresult CUDAAPI cu[A-Za-z0-9_]+' "$CU13/include/cuda.h" | awk '{print $3}'
    grep -oE '^#define cu[A-Za-z0-9_]+ +cu[A-Za-z0-9_]+' "$CU13/include/cuda.h" | awk '{print $3}'
  } | sort -u | awk '{printf "int %s(void){return 34;}\n", $1}' >"$STUB/stub.c"
  gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$STUB/libcuda.so" "$STUB/stub.c"
fi

cat <<OUT
export PATH="$CU13/bin:\$PATH"
export CUDA_ROOT="$CU13"
export CUDA_PATH="$CU13"
export CUDA_COMPUTE_CAP="$CAP"
export LIBRARY_PATH="$LIB:$STUB\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
export RUSTFLAGS="-L $LIB -L $STUB\${RUSTFLAGS:+ \$RUSTFLAGS}"
OUT
if [ -n "$NCCL_LIB" ]; then
  # the linker finds -lnccl here (RUSTFLAGS stay as they are, so nothing else rebuilds)
  cat <<OUT
export LIBRARY_PATH="$NCCL_LIB:\$LIBRARY_PATH"
OUT
fi
