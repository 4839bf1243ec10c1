#!/usr/bin/env bash
# The first diagnose on a machine, both engines, two builds alternating, each run made as cold as a
# fresh machine's (as root: the warm transformers process stopped, the driver's compiled-kernel cache,
# llm-oom's own cache and the page cache emptied). NEW compiles candle's kernels and Python's
# bytecode ahead in processes side by side. Then: a restart of the warm process from each build's
# bytecode cache, warm runs, the helpers' GPU memory (nvidia-smi every 100 ms during a cold candle
# run), and the edge row's fresh run on the whole card and at 24 GiB.
# Usage: OUT=./gpu-out bash scripts/gpu/first-run-ahead.sh OLD.xz NEW.xz   (--features cuda builds)
# ROUNDS=1 runs each cold case once (default 2); EDGE=0 leaves the edge row out.
set -u
cd "$(dirname "$0")/../.."
OLD_SRC=$1 NEW_SRC=$2
set -- first-run-ahead
source scripts/gpu/common.sh first-run-ahead
export PYTHONUNBUFFERED=1
cuda_build "$NEW_SRC" || exit 1
NEW=$B OLD=/tmp/llm-oom-cuda-old
unpack "$OLD_SRC" "$OLD" || exit 1
{ python3 -c 'import sys,torch,transformers;print("python",sys.version.split()[0],"torch",torch.__version__,"transformers",transformers.__version__)'
  echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-}"; "$OLD" --version; id -u; df -h / | tail -1; } >> "$OUT/machine.txt" 2>&1
M=presets/mistral-7b-instruct-v0.2.json
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/llm-oom
stop_warm() { pkill -f -- '--zygote'; sleep 1; }
cold() { # as a fresh machine: no warm process, no compiled kernels or bytecode, no cached pages
  stop_warm
  rm -rf "${CUDA_CACHE_PATH:-$HOME/.nv/ComputeCache}" "$CACHE/pycache" "$CACHE/cuda-kernels"
  sync; echo 3 > /proc/sys/vm/drop_caches || echo "no root: page cache kept" >> "$OUT/summary.txt"
}
apps() { nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader -lms 100 > "$OUT/apps-$1.txt" 2>&1 & APPS=$!; }
for r in $(seq 1 ${ROUNDS:-2}); do
  cold; timed candle-old-$r "$OLD" -v diagnose --engine candle -m $M --json
  cold; apps candle-new-$r; timed candle-new-$r "$NEW" -v diagnose --engine candle -m $M --json; kill $APPS
  cold; timed tf-old-$r "$OLD" -v diagnose -m $M --json
  stop_warm; timed tf-old-restart-$r "$OLD" -v diagnose -m $M --json
  cold; timed tf-new-$r "$NEW" -v diagnose -m $M --json
  stop_warm; timed tf-new-restart-$r "$NEW" -v diagnose -m $M --json
done
du -s "$CACHE/pycache" >> "$OUT/summary.txt" 2>&1
find "$CACHE/pycache" -name '*.pyc' | wc -l >> "$OUT/summary.txt" 2>&1
# The cold transformers runs emptied the driver's cache again: one untimed run fills it first.
"$NEW" diagnose --engine candle -m $M --json > /dev/null 2>&1
for r in 1 2; do timed candle-warm-new-$r "$NEW" diagnose --engine candle -m $M --json; done
for r in 1 2 3; do timed tf-warm-new-$r "$NEW" diagnose -m $M --json; done
if [ "${EDGE:-1}" = 1 ]; then
  timed edge-whole-card-new "$NEW" -v diagnose -m $M -p 4096 -b 8 --fresh-run always --json
  timed edge-24g-new "$NEW" -v diagnose -m $M -p 4096 -b 8 --vram-limit 24GiB --json
fi
python3 - "$OUT" >> "$OUT/summary.txt" 2>&1 <<'PY'
import glob, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "apps-*.txt"))):
    peak = {}
    for line in open(f):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[2].endswith("MiB"):
            peak[(parts[0], parts[1])] = max(peak.get((parts[0], parts[1]), 0), int(parts[2].split()[0]))
    print(os.path.basename(f), "processes", len(peak), "peak MiB each", sorted(peak.values()))
PY
python3 scripts/gpu/timings-summary.py "$OUT" >> "$OUT/summary.txt"
grep -h -o '"the CUDA driver compiled[^"]*"\|"this first start compiled[^"]*"' "$OUT"/*.json >> "$OUT/summary.txt"
stop_warm
cat "$OUT/summary.txt"
