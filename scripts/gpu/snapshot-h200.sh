#!/usr/bin/env bash
# PyTorch's allocator snapshot of real OOMs on the H200, made by llm-oom's own hook
# (src/snapshot/sitecustomize.py, put first on PYTHONPATH as `watch` will), for a load OOM, a
# long-prompt OOM, a batch OOM and a fragmented allocator; then decode time with and without
# memory history. Keeps the pickles (small) under $OUT/snapshots/<case>/ for tests/fixtures.
# Usage: PY=/path/to/python-with-cuda-torch-and-transformers OUT=./gpu-out bash scripts/gpu/snapshot-h200.sh
# DRY=1 runs each case for 4 tokens on the CPU with a 2-layer model (no GPU: tests the plumbing).
# (no set -u: common.sh's EXIT trap reads $1)
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
W=scripts/gpu/snapshot-workload.py
set -- snapshot   # common.sh names the archive after the script's $1
source scripts/gpu/common.sh snapshot
HOOK=$PWD/src/snapshot
DRYARG=${DRY:+--dry-run}
case_() { # name cap_gib
  local d="$OUT/snapshots/$1"; mkdir -p "$d"
  PYTHONPATH="$HOOK${PYTHONPATH:+:$PYTHONPATH}" LLM_OOM_SNAPSHOT_DIR="$d" LLM_OOM_SNAPSHOT=${MODE:-oom} \
    timed "$1" "$PY" "$W" "$1" --cap-gib "$2" $DRYARG
  ls -l "$d" >> "$OUT/summary.txt"
  cat "$d"/status-*.json >> "$OUT/summary.txt" 2>/dev/null; echo >> "$OUT/summary.txt"
}
case_ load 12          # 13.5 GiB of weights into 12 GiB
case_ long_prompt 24   # 40,000-token prefill: the MLP intermediate (1.07 GiB) fails
case_ batch 24         # 24 × (4,096 + 256): the KV cache and activations of the batch
case_ fragmented 20    # 20 MiB holes, a 64 MiB request
# The cost of history on decode (2,048 + 128 tokens), three runs each, warm model per process.
for i in 1 2 3; do
  timed "decode-plain-$i" "$PY" "$W" decode --cap-gib 60 $DRYARG
  PYTHONPATH="$HOOK" LLM_OOM_SNAPSHOT_DIR="$OUT/snapshots/decode" LLM_OOM_SNAPSHOT=oom \
    timed "decode-history-$i" "$PY" "$W" decode --cap-gib 60 $DRYARG
done
mkdir -p "$OUT/snapshots/decode"
grep -h seconds "$OUT"/decode-*.json /dev/null | paste - - >> "$OUT/summary.txt"
for f in "$OUT"/decode-*.json; do echo "$(basename "$f" .json) $(cat "$f")"; done >> "$OUT/summary.txt"
