#!/usr/bin/env bash
# diagnose --engine candle of Mistral-7B on this card, as the time-to-verdict table has it: the
# machine's first run (the driver compiles candle's PTX), two warm runs, the 32k-token prompt and
# --find-limits at 24 GiB. Each report kept; the summary has every timing.
# Usage: OUT=./gpu-out bash scripts/gpu/candle-rows.sh BINARY.xz   (a --features cuda build)
set -u
cd "$(dirname "$0")/../.."
SRC=$1
set -- candle-rows
source scripts/gpu/common.sh candle-rows
B=/tmp/llm-oom-cuda
python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]),open(sys.argv[2],'wb'))" "$SRC" $B && chmod +x $B || exit 1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u +%FT%TZ; $B --version; } > "$OUT/machine.txt" 2>&1
M=presets/mistral-7b-instruct-v0.2.json
timed first $B diagnose --engine candle -m $M --json
for r in 1 2; do timed warm-$r $B diagnose --engine candle -m $M --json; done
timed p32k timeout 200 $B diagnose --engine candle -m $M --vram-limit 48GiB -p 32000 -n 256 --json
timed find-limits timeout 300 $B diagnose --engine candle -m $M --vram-limit 24GiB --find-limits --json
python3 - "$OUT" >> "$OUT/summary.txt" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        d = json.load(open(f))
    except Exception as e:  # noqa: BLE001
        print(os.path.basename(f), "unreadable:", e); continue
    t = d.get("timings") or []
    parts = " ".join("%s=%.2f" % (x.get("what", "?").split(" ")[0].rstrip(":"), x.get("seconds", 0)) for x in t)
    lim = d.get("limits") or {}
    print(os.path.basename(f), "cause=%s" % (d.get("verdict") or {}).get("cause"), parts,
          "limits=%s/%s" % (lim.get("max_prompt_tokens"), lim.get("max_batch")) if lim else "")
PY
cat "$OUT/summary.txt"
