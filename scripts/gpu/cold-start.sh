#!/usr/bin/env bash
# The first diagnose on a machine, in both engines, two builds alternating: before each run the
# machine is made as cold as a fresh one (as root: the page cache dropped, the warm transformers
# process stopped, the driver's compiled-kernel cache emptied). Then the transformers budget at
# 24 GiB from each build and --find-limits, to hold the budget's batch to what runs.
# Usage: OUT=./gpu-out bash scripts/gpu/cold-start.sh OLD.xz NEW.xz   (--features cuda builds)
set -u
cd "$(dirname "$0")/../.."
OLD_SRC=$1 NEW_SRC=$2
set -- cold-start
source scripts/gpu/common.sh cold-start
export PYTHONUNBUFFERED=1
cuda_build "$NEW_SRC" || exit 1
NEW=$B OLD=/tmp/llm-oom-cuda-old
unpack "$OLD_SRC" "$OLD" || exit 1
{ python3 -c 'import torch,transformers;print("torch",torch.__version__,"transformers",transformers.__version__)'
  "$OLD" --version; id -u; df -h / | tail -1; } >> "$OUT/machine.txt" 2>&1
M=presets/mistral-7b-instruct-v0.2.json
cold() { # as a fresh machine: no warm process, no cached pages, no compiled kernels
  pkill -f -- '--zygote'; sleep 1
  rm -rf "${CUDA_CACHE_PATH:-$HOME/.nv/ComputeCache}"
  sync; echo 3 > /proc/sys/vm/drop_caches || echo "no root: page cache kept" >> "$OUT/summary.txt"
}
for r in 1 2; do
  cold; timed candle-old-$r "$OLD" -v diagnose --engine candle -m $M --json
  cold; timed candle-new-$r "$NEW" -v diagnose --engine candle -m $M --json
  cold; timed tf-old-$r "$OLD" -v diagnose -m $M --json
  cold; timed tf-new-$r "$NEW" -v diagnose -m $M --json
done
for r in 1 2; do timed candle-warm-new-$r "$NEW" diagnose --engine candle -m $M --json; done
for r in 1 2; do timed tf-warm-new-$r "$NEW" diagnose -m $M --json; done
timed budget24-old "$OLD" diagnose -m $M --vram-limit 24GiB --json
timed budget24-new "$NEW" diagnose -m $M --vram-limit 24GiB --json
timed limits24-new timeout 200 "$NEW" -v diagnose -m $M --vram-limit 24GiB --find-limits --json
for f in "$OUT"/budget24-*.json "$OUT"/limits24-new.json; do
  python3 -c "
import json,sys
d=json.load(open(sys.argv[1])); b=d.get('budget') or {}; l=d.get('limits') or {}
print(sys.argv[1].rsplit('/',1)[-1], 'budget: prompt', b.get('max_prompt_tokens'), 'batch', b.get('max_batch'),
      '| limits: prompt', l.get('max_prompt_tokens'), 'batch', l.get('max_batch'),
      [(t['batch'], t['fits']) for t in l.get('trials', []) if t.get('search') == 'batch'])" "$f" >> "$OUT/summary.txt" 2>&1
done
python3 scripts/gpu/timings-summary.py "$OUT" >> "$OUT/summary.txt"
pkill -f -- '--zygote'
cat "$OUT/summary.txt"
