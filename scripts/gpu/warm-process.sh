#!/usr/bin/env bash
# transformers-mode diagnose with the warm process (transformers_probe.py's zygote).
# Time to verdict for Mistral-7B's default workload without it (LLM_OOM_ZYGOTE=0), then with it
# (its first run starts it), warm three times, the 32k-token prompt; the 16 edge runs of the 8
# workloads at transformers' limits, measured, against the recorded truth; a diagnose killed with
# SIGKILL mid-run (the GPU must be free within seconds); what the warm process holds (host RSS, and
# no GPU memory). Binary: .gl/llm-oom.gz (release build; transformers mode needs no CUDA feature).
# OFF=0 skips the run without the warm process; EDGES_S=0 skips the edge runs.
# Usage: OUT=./gpu-out [OFF=0] [EDGES_S=300] bash scripts/gpu/warm-process.sh
set -u
cd "$(dirname "$0")/../.."
set -- zygote
source scripts/gpu/common.sh zygote
export PYTHONUNBUFFERED=1 LLM_OOM_PROBE_STALL_S=15
B=/tmp/llm-oom; gunzip -c .gl/llm-oom.gz > $B && chmod +x $B
M=presets/mistral-7b-instruct-v0.2.json
apps() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>&1 | tr '\n' ';'; }
echo "apps before: $(apps)" >> "$OUT/summary.txt"
[ "${OFF:-1}" = 0 ] || timed ttv-off env LLM_OOM_ZYGOTE=0 $B -vv diagnose -m $M --json
timed ttv-cold $B -vv diagnose -m $M --json
for r in warm1 warm2 warm3; do timed ttv-$r $B -vv diagnose -m $M --json; done
timed ttv-32k timeout 150 $B -vv diagnose -m $M --vram-limit 48GiB -p 32000 -n 256 --json
echo "apps after the timing runs: $(apps)" >> "$OUT/summary.txt"
Z=$(pgrep -f -- '--zygote' | head -1)
echo "warm process: pid ${Z:-none} $(grep -E 'VmRSS|VmHWM' /proc/${Z:-0}/status 2>/dev/null | tr -s ' \n' ' ')" >> "$OUT/summary.txt"
# SIGKILL of diagnose mid-run: its relay dies with it (PDEATHSIG), the warm process kills the child.
$B diagnose -m $M --json > "$OUT/killed.json" 2> "$OUT/killed.log" & D=$!
sleep 6; echo "killed run, 6 s in: $(apps)" >> "$OUT/summary.txt"; kill -9 $D; K0=$(date +%s%N)
for i in $(seq 1 100); do sleep 0.1; [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader)" ] && break; done
echo "killed run: GPU free $(( ($(date +%s%N) - K0) / 1000000 )) ms after SIGKILL: [$(apps)]" >> "$OUT/summary.txt"
python3 scripts/gpu/select-limits.py "$OUT/all.jsonl" all >> "$OUT/summary.txt"
[ "${EDGES_S:-300}" = 0 ] || timed edges timeout ${EDGES_S:-300} env PER_RUN_S=80 SAVE_DIR=$OUT/reports python3 scripts/gpu/diagnose-vs-transformers.py \
  "$OUT/all.jsonl" "$FINAL/verdicts.jsonl" "$B" measured
pkill -f 'llm-oom diagnose'; sleep 2   # a run the timeout cut short (the harness's child)
echo "apps at the end: $(apps)" >> "$OUT/summary.txt"
Z=$(pgrep -f -- '--zygote' | head -1)
echo "warm process at the end: pid ${Z:-none} $(grep -E 'VmRSS|VmHWM' /proc/${Z:-0}/status 2>/dev/null | tr -s ' \n' ' ')" >> "$OUT/summary.txt"
cp /tmp/llm-oom-$(id -u)/zygote-*.log "$OUT/" 2>/dev/null || cp ${XDG_RUNTIME_DIR:-/tmp}/llm-oom-$(id -u)/zygote-*.log "$OUT/" 2>/dev/null
pkill -f -- '--zygote'
