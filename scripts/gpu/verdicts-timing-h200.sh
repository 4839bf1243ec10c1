#!/usr/bin/env bash
# #14/#20 on the H200, session 6, second call: `env --markdown` (both builds); predicted mode at every
# memory-limited limit; the ground truth re-tried where measured mode disagreed; measured mode for
# the workloads the first call did not reach (full reports kept); time to verdict for Mistral-7B in
# transformers mode (cold, warm, 32k prompt) and candle mode (cold, warm).
# Binaries: .gl/llm-oom (release), .gl/llm-oom-cuda.gz (release --features cuda).
set -u
cd "$(dirname "$0")/../.."
set -- timing   # common.sh's EXIT trap reads $1
source scripts/gpu/common.sh timing
export PYTHONUNBUFFERED=1 LLM_OOM_PROBE_STALL_S=15
B=.gl/llm-oom
C=/tmp/llm-oom-cuda; gunzip -c .gl/llm-oom-cuda.gz > $C && chmod +x $C
M=presets/mistral-7b-instruct-v0.2.json
S=$OUT/reports; mkdir -p $S
$C env --markdown > "$FINAL/env-h200.md" 2>&1; $C env --json > "$S/env.json" 2>&1
$C --version >> "$OUT/summary.txt"
python3 scripts/gpu/select-limits.py "$OUT/all.jsonl" all >> "$OUT/summary.txt"
timed predicted env PER_RUN_S=30 SAVE_DIR=$S python3 scripts/gpu/diagnose-vs-transformers.py "$OUT/all.jsonl" "$FINAL/verdicts-b.jsonl" "$B" predicted
# The ground truth again where measured mode said "fits" and transformers ran out (llama-2-7b eager 1,509).
for p in 1509 1458; do
  timed "truth-llama2-$p" timeout 60 python3 scripts/gpu/transformers-limits.py --trial \
    "{\"preset\": \"llama-2-7b\", \"attn\": \"eager\", \"batch\": 1, \"new\": 64, \"prompt\": $p, \"vram_limit\": 16106127360, \"device\": \"cuda:0\", \"dtype\": \"bf16\"}"
done
python3 scripts/gpu/select-limits.py "$OUT/llama2.jsonl" llama-2-7b:1
ONLY=ok timed llama2-oom-diag env PER_RUN_S=80 SAVE_DIR=$S python3 scripts/gpu/diagnose-vs-transformers.py "$OUT/llama2.jsonl" "$FINAL/verdicts-b.jsonl" "$B" measured
# Time to verdict, Mistral-7B's default workload (2,048 + 256, batch 1) on the whole card.
timed ttv-transformers-cold "$B" diagnose -m $M --json
timed ttv-transformers-warm "$B" diagnose -m $M --json
timed ttv-candle-cold $C diagnose -m $M --engine candle --json
timed ttv-candle-warm $C diagnose -m $M --engine candle --json
timed ttv-transformers-32k timeout 120 "$B" diagnose -m $M --vram-limit 48GiB -p 32000 -n 256 --json
cp "$OUT"/ttv-*.json "$S/" 2>/dev/null
# Measured mode for the rest, while the call has time.
python3 scripts/gpu/select-limits.py "$OUT/rest.jsonl" mistral-7b-instruct-v0.2:1 meta-llama-3-8b:1 qwen2.5-0.5b-instruct:16
ONLY=oom timed rest-mistral env PER_RUN_S=80 SAVE_DIR=$S timeout 85 python3 scripts/gpu/diagnose-vs-transformers.py <(head -1 "$OUT/rest.jsonl") "$FINAL/verdicts-b.jsonl" "$B" measured
timed rest env PER_RUN_S=80 SAVE_DIR=$S timeout ${REST_S:-170} python3 scripts/gpu/diagnose-vs-transformers.py <(tail -n +2 "$OUT/rest.jsonl") "$FINAL/verdicts-b.jsonl" "$B" measured
tar czf "$FINAL/reports.tgz" -C "$OUT" reports
