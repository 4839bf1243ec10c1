#!/usr/bin/env bash
# diagnose at transformers' own limits on the card this runs on, in one call of the device:
#   1. the card's constants (nvidia-smi, torch's CUDA context in a fresh process, cuDNN, compute
#      capability) -> constants.json;
#   2. each workload's predicted budget (diagnose with no transformers), the guess that starts
#      the bisection;
#   3. the truth: the largest prompt that a REAL generate() runs in a fresh allocator, bisected to
#      2 % (scripts/gpu/transformers-limits.py --fork) -> limits.jsonl;
#   4. diagnose predicted at the largest prompt that ran and the first that ran out
#      (scripts/gpu/diagnose-vs-transformers.py) -> verdicts.jsonl;
#   5. a long-lived process serving growing prompts (scripts/gpu/same-oom.sh served-ramp-b4), whose
#      failing prompt is held against the fresh limit of the same workload in limits.jsonl;
#   6. diagnose measured at the same prompts, as long as the call's time lasts.
# Every part is bounded so the whole fits one 600 s call; what did not run is said in summary.txt.
# Usage: OUT=./gpu-out [WORKLOADS="preset:attn:batch:new:GiB ..."] [LIMITS_S=300] [TOTAL_S=570]
#        bash scripts/gpu/card-edges.sh          (binary: .gl/llm-oom, a release build)
set -u
cd "$(dirname "$0")/../.."
set -- card-edges   # common.sh's EXIT trap reads $1
source scripts/gpu/common.sh card-edges
export PYTHONUNBUFFERED=1 LLM_OOM_PROBE_STALL_S=15
B=${ENGINE_B:-.gl/llm-oom}
T0=$(date +%s)
left() { echo $(( ${TOTAL_S:-570} - ($(date +%s) - T0) )); }

python3 - > "$OUT/constants.json" 2> "$OUT/constants.log" <<'PY'
import json, subprocess, torch
q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,compute_cap",
                    "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
free, total = torch.cuda.mem_get_info()
import transformers
print(json.dumps({"nvidia_smi": q, "total_bytes": total, "context_bytes": total - free,
                  "capability": list(torch.cuda.get_device_capability()),
                  "cudnn": torch.backends.cudnn.version(), "torch": torch.__version__,
                  "transformers": transformers.__version__}))
PY
cat "$OUT/constants.json" | tee -a "$OUT/summary.txt"
cp "$OUT/constants.json" "$FINAL/constants.json"

# The last three are the served ramps' workloads (scripts/gpu/same-oom.py served-ramp, -b1, -b4): a
# GiB written NNpool is their per-process cap (PyTorch's pool), to which the card's CUDA context (as
# measured above) and the 76 MiB that run beside the pool are added.
WORKLOADS=${WORKLOADS:-"mistral-7b-instruct-v0.2:sdpa:4:256:16 llama-3.1-8b-instruct:sdpa:2:256:16 \
qwen2.5-7b-instruct:sdpa:1:128:16 phi-3-mini-4k-instruct:sdpa:4:128:10 llama-2-7b:eager:1:64:15 \
qwen2.5-0.5b-instruct:sdpa:16:256:8 mistral-7b-instruct-v0.2:sdpa:2:64:18pool llama-2-7b:sdpa:1:64:16pool \
mistral-7b-instruct-v0.2:sdpa:4:32:20pool"}
ARGS=()
for w in $WORKLOADS; do
  IFS=: read -r p attn b n gib <<< "$w"
  case "$gib" in *pool) gib=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["context_bytes"]; print("%.4f" % (float(sys.argv[2]) + (c + (76 << 20)) / (1 << 30)))' "$OUT/constants.json" "${gib%pool}");; esac
  extra=(); [ "$attn" = eager ] && extra=(--engine transformers-eager)
  guess=$(LLM_OOM_PYTHON=/nonexistent/python3 timeout 60 "$B" diagnose --model "presets/$p.json" \
      --vram-limit "${gib}GiB" -p 512 -n "$n" -b "$b" --dtype bf16 "${extra[@]}" --json 2>/dev/null |
    python3 -c 'import json,sys; print((json.load(sys.stdin).get("budget") or {}).get("max_prompt_tokens") or 0)' 2>/dev/null)
  echo "predicted $w: max prompt ${guess:-?}" | tee -a "$OUT/summary.txt"
  if [ -n "$guess" ] && [ "$guess" -gt 0 ]; then ARGS+=(--workload "$p:$attn:$b:$n:$gib:$guess"); else ARGS+=(--workload "$p:$attn:$b:$n:$gib"); fi
done

timed limits python3 scripts/gpu/transformers-limits.py "$OUT/limits.jsonl" --fork \
  --budget-s "${LIMITS_S:-300}" "${ARGS[@]}"
cp "$OUT/limits.jsonl" "$FINAL/limits.jsonl"
grep '"kind": "limit"' "$OUT/limits.jsonl" | cut -c1-260 >> "$OUT/summary.txt"

timed predicted timeout 90 env PER_RUN_S=40 python3 scripts/gpu/diagnose-vs-transformers.py \
  "$OUT/limits.jsonl" "$FINAL/verdicts.jsonl" "$B" predicted
if [ "$(left)" -gt ${RAMP_AT_LEAST_S:-150} ]; then
  timed served-ramp-b4 env PY=python3 OUT="$OUT/ramp" bash scripts/gpu/same-oom.sh served-ramp-b4
  cat "$OUT/ramp/same-oom/summary.txt" >> "$OUT/summary.txt" 2>/dev/null
else
  echo "served-ramp-b4: not run ($(left) s left)" >> "$OUT/summary.txt"
fi

M=$(( $(left) - 15 ))
if [ "$M" -gt 30 ]; then
  timed measured timeout "$M" env PER_RUN_S=80 python3 scripts/gpu/diagnose-vs-transformers.py \
    "$OUT/limits.jsonl" "$FINAL/verdicts.jsonl" "$B" measured
else
  echo "measured verdicts: not run ($(left) s left)" >> "$OUT/summary.txt"
fi
cp "$FINAL/verdicts.jsonl" "$OUT/" 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
