#!/usr/bin/env bash
# Where the transformers probe's start goes on this machine: the interpreter's bytecode settings,
# whether torch's and transformers' sources have compiled bytecode beside them, and the import of
# torch and transformers timed with the page cache warm, plain and with the bytecode written to a
# private cache (PYTHONPYCACHEPREFIX), twice each.
# Usage: OUT=./gpu-out bash scripts/gpu/import-cost.sh
set -u
cd "$(dirname "$0")/../.."
set -- import-cost
source scripts/gpu/common.sh import-cost
IMPORT='import torch, transformers, accelerate; from transformers import AutoModelForCausalLM, AutoConfig'
{ env | grep -E '^PYTHON' ; python3 -c 'import sys,sysconfig,os; print(sys.version); print("dont_write_bytecode", sys.flags.dont_write_bytecode, "pycache_prefix", sys.pycache_prefix); p=sysconfig.get_paths()["purelib"]; print(p, "writable", os.access(p, os.W_OK))'
  for m in torch transformers; do d=$(python3 -c "import importlib.util as u; print(u.find_spec('$m').submodule_search_locations[0])"); echo "$m $d: $(find "$d" -name '*.py' | wc -l) .py, $(find "$d" -name '*.pyc' | wc -l) .pyc"; done
} > "$OUT/python.txt" 2>&1
cat "$OUT/python.txt" >> "$OUT/summary.txt"
for r in 1 2; do timed plain-$r python3 -c "$IMPORT"; done
P=$(mktemp -d)
for r in 1 2; do timed prefix-$r env PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$P python3 -c "$IMPORT"; done
echo "prefix cache: $(du -sh $P | cut -f1)" >> "$OUT/summary.txt"
timed importtime env PYTHONPYCACHEPREFIX=$P python3 -X importtime -c "$IMPORT"
sort -t'|' -k2 -n "$OUT/importtime.log" | tail -25 > "$OUT/importtime-top.txt"
cat "$OUT/summary.txt"
