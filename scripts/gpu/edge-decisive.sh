#!/usr/bin/env bash
# The edge row's decisive run: Mistral-7B b8 × 4,096 + 256 at 24 GiB three times (the first starts
# the warm process), on the whole card with --fresh-run always, and the default workload; then the
# short fresh run against the full one trial by trial (fresh-fast-forward.py) and where a fresh
# program's own generate() spends its time (edge-generate.py). Everything is tarred into $OUT.
# Usage: OUT=./gpu-out bash scripts/gpu/edge-decisive.sh BUILD   (a --features cuda build, raw or gzip)
# FF_PROMPTS=4096,4245 sets the prompts of the short-against-full trials.
set -u
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; date -u +%FT%TZ
export PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
N=/tmp/llm-oom-edge; gunzip -c -f "$1" > $N && chmod +x $N || exit 1
M=presets/mistral-7b-instruct-v0.2.json
summary() { python3 - "$@" <<'PY'
import json, sys
name, wall, rc = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    v = json.load(open(name))
except Exception as e:
    print(name, "rc", rc, "no report:", e); sys.exit()
print(name.split("/")[-1], "rc", rc, "wall", wall, "cause", (v.get("verdict") or {}).get("cause"),
      "budget", (v.get("budget") or {}).get("max_prompt_tokens"))
print("  ", [(t["what"][:24], t["seconds"]) for t in v.get("timings", [])])
print("  ", [n[:240] for n in v.get("notes", []) if "decided" in n][:1])
print("  ", [(s["name"], s["outcome"], s["memory"]["peak"], s["detail"][:160]) for s in v.get("stages", []) if s.get("fresh_process")])
PY
}
case_() { local name=$1; shift; local t0=$(date +%s.%N)
  $N -v diagnose -m $M "$@" --json > "$OUT/$name.json" 2> "$OUT/$name.log"; local rc=$?
  summary "$OUT/$name.json" "$(python3 -c "import sys;print(round(float(sys.argv[1])-float(sys.argv[2]),2))" "$(date +%s.%N)" "$t0")" $rc; }
for i in 1 2 3; do case_ edge-$i -p 4096 -b 8 --vram-limit 24GiB; done
case_ edge-whole-card -p 4096 -b 8 --fresh-run always
case_ default-warm
pkill -f -- '--zygote'; sleep 1
timeout 200 python3 scripts/gpu/fresh-fast-forward.py --prompts "${FF_PROMPTS:-4096,4195,4245}" > "$OUT/ff.jsonl" 2> "$OUT/ff.err"; cut -c1-700 "$OUT/ff.jsonl"; tail -3 "$OUT/ff.err"
timeout 100 python3 scripts/gpu/edge-generate.py --vram-limit 24 2> "$OUT/eg.err" | tee "$OUT/eg.jsonl"; tail -2 "$OUT/eg.err"
(cd "$OUT" && tar czf /tmp/edge-decisive.tgz . && rm -rf ./* && mv /tmp/edge-decisive.tgz .)
