# Shared by the GPU scripts (source it; the part name is the script's $1): the CUDA 13.0 libraries
# on the path, logs collected in a temporary folder and tarred into $OUT (or ./gpu-out) as
# <part>.tgz on exit, with the GPU's processes afterwards, and `timed` for one command.
# Usage (in a script): set -- <part>; source scripts/gpu/common.sh <part>
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
FINAL=${OUT:-./gpu-out}
OUT=$(mktemp -d)
trap 'nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/apps-after.txt" 2>&1; tar czf "$FINAL/$1.tgz" -C "$OUT" . ; cp "$OUT/summary.txt" "$FINAL/summary-$1.txt" 2>/dev/null' EXIT
mkdir -p "$FINAL"
B=${B:-dist/llm-oom-cuda}
timed() { # name, then the command: stdout to $OUT/name.json, stderr to $OUT/name.log, wall time to the summary
  local name=$1; shift
  local t0=$(date +%s%N)
  "$@" > "$OUT/$name.json" 2> "$OUT/$name.log"
  local rc=$?
  local t1=$(date +%s%N)
  echo "$name rc=$rc wall=$(( (t1 - t0) / 1000000 )) ms" | tee -a "$OUT/summary.txt"
}
unpack() { # a release binary, compressed with xz or gzip or not, to the path given, executable
  python3 -c "import gzip,lzma,shutil,sys
src=sys.argv[1]; op=lzma.open if src.endswith('.xz') else gzip.open if src.endswith('.gz') else (lambda p: open(p, 'rb'))
shutil.copyfileobj(op(src),open(sys.argv[2],'wb'))" "$1" "$2" && chmod +x "$2"
}
cuda_build() { # the --features cuda build $1 (xz or gzip) unpacked to $B, this call's own (never one
  # an earlier call on a warm machine left), and the card, driver, date, build and cores in $OUT/machine.txt
  B=/tmp/llm-oom-cuda
  unpack "$1" "$B" || return 1
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u +%FT%TZ; "$B" --version; nproc; } > "$OUT/machine.txt" 2>&1
}
