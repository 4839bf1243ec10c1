#!/usr/bin/env bash
# diagnose in transformers mode (random weights of the real shapes, from_config on the GPU) of this
# year's architectures whose configs are pinned in tests/fixtures/configs-2026, each against plan's
# prediction for the same card and workload (diagnose's own `prediction`, the transformers profile
# on this card). One line per model in new-archs.jsonl: card, versions, the measured stages' peaks,
# the predicted peak, the verdict, the seconds.
# Usage: OUT=./gpu-out [MODELS="gemma-4-31b-it qwen3.6-27b"] [PROMPT=2048] [NEW=64]
#        bash scripts/gpu/new-archs.sh          (binary: .gl/llm-oom, a release build)
set -u
cd "$(dirname "$0")/../.."
set -- new-archs
source scripts/gpu/common.sh new-archs
export PYTHONUNBUFFERED=1
B=${ENGINE_B:-.gl/llm-oom}
for m in ${MODELS:-gemma-4-31b-it qwen3.6-27b nemotron-3-nano-30b-a3b}; do
  timed "diag-$m" timeout "${PER_MODEL_S:-150}" "$B" diagnose --model "tests/fixtures/configs-2026/$m/config.json" \
    -p "${PROMPT:-2048}" -n "${NEW:-64}" --json
  python3 - "$OUT/diag-$m.json" "$m" >> "$OUT/new-archs.jsonl" <<'PY'
import json, subprocess, sys, datetime
path, name = sys.argv[1], sys.argv[2]
card = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                      capture_output=True, text=True).stdout.strip()
try:
    import torch, transformers
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
except Exception as e:
    versions = {"error": str(e)}
row = {"date": datetime.date.today().isoformat(), "card": card, "model": name, **versions}
try:
    d = json.load(open(path))
    r = d.get("report", d)
    row.update({
        "cause": r["verdict"]["cause"], "summary": r["verdict"]["summary"],
        "stages": [{"name": s["name"], "outcome": s["outcome"], "peak": (s.get("memory") or {}).get("peak"),
                    "seconds": s.get("seconds")} for s in r.get("stages", [])],
        "measured_peak": max([(s.get("memory") or {}).get("peak") or 0 for s in r.get("stages", [])] or [0]),
        "weights_bytes": r.get("weights_bytes"), "prediction": r.get("prediction"),
        "budget": (r.get("budget") or {}).get("max_prompt_tokens"), "seconds": r.get("seconds"),
        "notes": r.get("notes"),
    })
except Exception as e:
    row["error"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(row))
PY
  tail -1 "$OUT/new-archs.jsonl" | cut -c1-400 >> "$OUT/summary.txt"
done
cp "$OUT/new-archs.jsonl" "$FINAL/" 2>/dev/null
