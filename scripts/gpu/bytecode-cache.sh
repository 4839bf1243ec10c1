#!/usr/bin/env bash
# The transformers probe's start when its warm process has to start again (the first diagnose on a
# machine, or after 10 idle minutes), two builds alternating: before each run the warm process is
# stopped; the page cache stays warm. Run where PYTHONDONTWRITEBYTECODE=1 and torch has no
# compiled bytecode beside its sources (scripts/gpu/import-cost.sh says so).
# Usage: OUT=./gpu-out bash scripts/gpu/bytecode-cache.sh OLD.gz NEW.gz   (--features cuda builds)
set -u
cd "$(dirname "$0")/../.."
OLD_SRC=$1 NEW_SRC=$2
set -- bytecode-cache
source scripts/gpu/common.sh bytecode-cache
cuda_build "$NEW_SRC" || exit 1
NEW=$B OLD=/tmp/llm-oom-cuda-old
unpack "$OLD_SRC" "$OLD" || exit 1
{ env | grep -E '^PYTHON'; "$OLD" --version; } >> "$OUT/machine.txt" 2>&1
rm -rf "${XDG_CACHE_HOME:-$HOME/.cache}/llm-oom/pycache"
M=presets/mistral-7b-instruct-v0.2.json
timed first-ever "$OLD" diagnose -m $M --json
for r in 1 2 3; do
  pkill -f -- '--zygote'; sleep 1; timed restart-old-$r "$OLD" diagnose -m $M --json
  pkill -f -- '--zygote'; sleep 1; timed restart-new-$r "$NEW" diagnose -m $M --json
done
for r in 1 2 3; do timed warm-new-$r "$NEW" diagnose -m $M --json; done
echo "kept: $(du -sh "${XDG_CACHE_HOME:-$HOME/.cache}/llm-oom/pycache" | cut -f1)" >> "$OUT/summary.txt"
python3 scripts/gpu/timings-summary.py "$OUT" >> "$OUT/summary.txt"
pkill -f -- '--zygote'
cat "$OUT/summary.txt"
