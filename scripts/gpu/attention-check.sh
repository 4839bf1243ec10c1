#!/usr/bin/env bash
# The runtime's sliced attention on this card (`llm-oom run`, random weights of Mistral-7B's shapes,
# drawn from one seed so every run computes with the same weights): eager attention (the f32
# mask-and-softmax path) against the one-step masked softmax, greedy tokens compared in bf16 and
# f32; then the prefill time of 8k, 16k and 32k-token prompts with the slice the probe uses.
# Usage: OUT=./gpu-out bash scripts/gpu/attention-check.sh BINARY.xz   (a --features cuda build)
set -u
cd "$(dirname "$0")/../.."
SRC=$1
set -- attention-check
source scripts/gpu/common.sh attention-check
cuda_build "$SRC" || exit 1
M=presets/mistral-7b-instruct-v0.2.json
run() { $B run -m $M --device cuda --random-weights "$@"; }
for dt in bf16 f32; do
  timed eager-$dt run --dtype $dt --prompt-tokens 2000 --max-new-tokens 12 --attention-chunk 0
  timed sliced-$dt run --dtype $dt --prompt-tokens 2000 --max-new-tokens 12 --attention-chunk 256
done
for p in 8000 16000 32000; do
  timed prefill-$p run --prompt-tokens $p --max-new-tokens 2 --attention-chunk 256
done
python3 - "$OUT" >> "$OUT/summary.txt" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
def j(n):
    try: return json.loads((d / f"{n}.json").read_text())
    except Exception as e: return {"error": str(e)}
for dt in ("bf16", "f32"):
    e, s = j(f"eager-{dt}"), j(f"sliced-{dt}")
    same = sum(a == b for a, b in zip(e.get("tokens", []), s.get("tokens", [])))
    print(f"{dt}: eager {e.get('tokens')} sliced {s.get('tokens')} same {same}/{len(e.get('tokens', []))}; prefill eager {e.get('prefill_seconds')} s sliced {s.get('prefill_seconds')} s")
for p in (8000, 16000, 32000):
    r = j(f"prefill-{p}")
    print(f"prefill {p}: {r.get('prefill_seconds')} s, {r.get('prefill_tokens_per_second')} tok/s, gpu after {r.get('gpu_bytes_after_generate')}")
PY
cat "$OUT/summary.txt"
