#!/usr/bin/env bash
# Usage: PY=python3 OUT=./gpu-out bash scripts/gpu/same-oom.sh [CASE ...]
#
# Out-of-memory runs of known cause in transformers (scripts/gpu/same-oom.py), each in a fresh
# process with llm-oom's allocator hook first on PYTHONPATH (as `watch` puts it there): keeps each
# run's stdout, stderr, exit code and PyTorch's allocator record at the OOM under
# $OUT/same-oom/<case>/, with the card and versions in $OUT/same-oom/machine.txt. These become
# tests/fixtures/same-oom/, where tests/same_oom.rs holds explain, watch and snapshot to one cause.
# DRY=1 runs each case for 4 tokens on the CPU with a 2-layer model (no GPU: tests the plumbing).
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
OUT=${OUT:-./gpu-out}
HOOK=$PWD/src/snapshot
DRYARG=${DRY:+--dry-run}
mkdir -p "$OUT/same-oom"
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU"
    "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
} >"$OUT/same-oom/machine.txt" 2>&1
CASES=${*:-weights-13b kv-decode batch-48 batch-32 other-process long-prompt}
for c in $CASES; do
    d="$OUT/same-oom/$c"
    mkdir -p "$d/snapshot"
    t0=$(date +%s.%N)
    PYTHONPATH="$HOOK${PYTHONPATH:+:$PYTHONPATH}" LLM_OOM_SNAPSHOT_DIR="$d/snapshot" LLM_OOM_SNAPSHOT=oom \
        timeout 300 "$PY" scripts/gpu/same-oom.py "$c" $DRYARG >"$d/stdout.log" 2>"$d/stderr.log"
    echo $? >"$d/exit_code"
    echo "$c exit $(cat "$d/exit_code") in $(echo "$(date +%s.%N) - $t0" | bc) s; $(ls "$d/snapshot" | tr '\n' ' ')" | tee -a "$OUT/same-oom/summary.txt"
    case "$c" in served-ramp*)
        # The truth of a long-lived process's OOM: the failing length in a fresh process, and the
        # whole sequence with every cached hole returned (expandable segments).
        L=$(grep ' start$' "$d/stdout.log" | tail -1 | awk '{print $4}')
        timeout 300 "$PY" scripts/gpu/same-oom.py "$c" --only "$L" $DRYARG >"$d/fresh.stdout.log" 2>"$d/fresh.stderr.log"
        echo "$c fresh process at prompt $L: exit $?" | tee -a "$OUT/same-oom/summary.txt"
        PYTORCH_ALLOC_CONF=expandable_segments:True timeout 300 "$PY" scripts/gpu/same-oom.py "$c" $DRYARG \
            >"$d/expandable.stdout.log" 2>"$d/expandable.stderr.log"
        echo "$c with expandable_segments: exit $?, last step $(grep ' start$' "$d/expandable.stdout.log" | tail -1)" | tee -a "$OUT/same-oom/summary.txt"
    esac
done
