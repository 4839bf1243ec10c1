#!/usr/bin/env bash
# llama.cpp's memory measured on the H200 (scripts/gpu/llamacpp-measure.py) for GGUFs of real
# shapes written here (scripts/gpu/write-gguf.py), across -c, -fa, -ub, -ctk/-ctv, -np, -ngl; the
# largest context that loads under a cap (a ballast holds the rest); llama.cpp's own --fit; real
# out-of-memory logs. Needs .gl/llama-cpp-cuda.tar.gz (scripts/build-llama-cpp.sh).
# Usage: OUT=./gpu-out [PARTS="grid ctx fit oom"] [MODELS="..."] [DIR=/tmp/gguf] [WRITE_ONLY=1] bash scripts/gpu/llamacpp-h200.sh
set -u
cd "$(dirname "$0")/../.."
set -- llamacpp
source scripts/gpu/common.sh llamacpp
# The binary: finished on this machine by llamacpp-finish-build.sh, else the archive of build-llama-cpp.sh.
if [ -x .glb/tree/llama-build/cuda/bin/llama-completion ]; then
  LLAMA_BIN=${LLAMA_BIN:-.glb/tree/llama-build/cuda/bin/llama-completion}
  export GGUF_PY=${GGUF_PY:-$PWD/.glb/tree/src/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py}
else
  [ -d .gl/llama-cpp-cuda ] || tar xzf .gl/llama-cpp-cuda.tar.gz -C .gl
  LLAMA_BIN=${LLAMA_BIN:-.gl/llama-cpp-cuda/bin/llama-completion}
fi
export LLAMACPP_LOGS="$OUT/logs" LLAMA_BIN
mkdir -p "$LLAMACPP_LOGS"
"$LLAMA_BIN" --version > "$OUT/version.txt" 2>&1
cp "$OUT/version.txt" "$FINAL/version.txt"
DIR=${DIR:-.glb/gguf}; mkdir -p "$DIR"
M="python3 scripts/gpu/llamacpp-measure.py"
R="$FINAL/llamacpp-runs.jsonl"
MODELS=${MODELS:-"llama-3.1-8b-instruct mistral-7b-instruct-v0.2 qwen2.5-7b-instruct qwen3-30b-a3b"}
PARTS=${PARTS:-"grid ctx fit oom"}
for m in $MODELS; do
  [ -s "$DIR/$m-Q4_K_M.gguf" ] || timed "write-$m" python3 scripts/gpu/write-gguf.py "$m" --type Q4_K_M --out "$DIR/$m-Q4_K_M.gguf"
done
[ -s "$DIR/q8.gguf" ] || timed "write-q8" python3 scripts/gpu/write-gguf.py ${Q8:-llama-3.1-8b-instruct} --type Q8_0 --out "$DIR/q8.gguf"
[ -n "${WRITE_ONLY:-}" ] && exit 0
ls -l "$DIR" >> "$OUT/summary.txt"
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
if has grid; then (
  for m in $MODELS; do
    g="$DIR/$m-Q4_K_M.gguf"
    $M run "$R" "$g" "$m:c4096:fa1" -c 4096 -fa on -ngl 99
    $M run "$R" "$g" "$m:c32768:fa1" -c 32768 -fa on -ngl 99
    $M run "$R" "$g" "$m:c4096:fa0" -c 4096 -fa off -ngl 99
    $M run "$R" "$g" "$m:c32768:fa0" -c 32768 -fa off -ngl 99
    $M run "$R" "$g" "$m:c32768:fa1:ngl16" -c 32768 -fa on -ngl 16
    [ "$m" = qwen3-30b-a3b ] && continue
    $M run "$R" "$g" "$m:c32768:fa1:ub2048" -c 32768 -fa on -ngl 99 -b 2048 -ub 2048
    $M run "$R" "$g" "$m:c32768:fa1:q8kv" -c 32768 -fa on -ngl 99 -ctk q8_0 -ctv q8_0
    $M run "$R" "$g" "$m:c32768:fa1:np4" -c 32768 -fa on -ngl 99 -np 4
    $M run "$R" "$g" "$m:c16384:fa0:ub1024" -c 16384 -fa off -ngl 99 -b 1024 -ub 1024
  done
  [ -f "$DIR/q8.gguf" ] && $M run "$R" "$DIR/q8.gguf" "q8:c4096:fa1" -c 4096 -fa on -ngl 99
  [ -f "$DIR/q8.gguf" ] && $M run "$R" "$DIR/q8.gguf" "q8:c32768:fa0" -c 32768 -fa off -ngl 99
) & GP=$!
  for _ in $(seq ${GRID_S:-150}); do kill -0 $GP 2>/dev/null || break; sleep 1; done
  kill $GP 2>/dev/null; pkill -f llamacpp-measure.py; pkill -f llama-completion; wait $GP 2>/dev/null
fi
if has ctx; then  # the largest context under a cap (MiB left free beside the ballast)
  $M ctx "$R" "$DIR/llama-3.1-8b-instruct-Q4_K_M.gguf" "llama-3.1-8b:cap10240:fa1" 10240 4096 131072 -fa on -ngl 99
  $M ctx "$R" "$DIR/llama-3.1-8b-instruct-Q4_K_M.gguf" "llama-3.1-8b:cap10240:fa0" 10240 4096 131072 -fa off -ngl 99
  $M ctx "$R" "$DIR/mistral-7b-instruct-v0.2-Q4_K_M.gguf" "mistral-7b:cap8192:fa1" 8192 4096 32768 -fa on -ngl 99
  $M ctx "$R" "$DIR/qwen2.5-7b-instruct-Q4_K_M.gguf" "qwen2.5-7b:cap6144:fa1" 6144 4096 32768 -fa on -ngl 99
  [ -f "$DIR/qwen3-30b-a3b-Q4_K_M.gguf" ] && $M ctx "$R" "$DIR/qwen3-30b-a3b-Q4_K_M.gguf" "qwen3-30b-a3b:cap20480:fa1" 20480 4096 40960 -fa on -ngl 99
fi
if has fit; then  # llama.cpp's default --fit on, under a cap, context unset: what it chooses
  for m in llama-3.1-8b-instruct qwen2.5-7b-instruct; do
    python3 - "$R" "$DIR/$m-Q4_K_M.gguf" "$m:fit:cap8192" <<'PY'
import importlib.util, json, os, subprocess, sys, time
spec = importlib.util.spec_from_file_location("m", "scripts/gpu/llamacpp-measure.py"); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
out, gguf, tag = sys.argv[1:4]
nv = m.Nvml(0); idle = nv.used()[0]; b = m.Ballast(8192); bb = nv.used()[0] - idle
try:
    cmd = [m.BIN, "-m", gguf, "-n", "8", "-f", m.prompt_file(), "--no-display-prompt", "-no-cnv", "--temp", "0", "-lv", "4"]
    t0 = time.time(); p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    log = p.stderr + p.stdout
    path = os.path.join(m.LOGS, tag.replace(":", "_") + ".log"); open(path, "w").write("$ " + " ".join(cmd) + "\n" + log)
    bufs, table, oom = m.parse(log)
    fit = [l.strip()[:300] for l in log.splitlines() if "fit" in l.lower() or "n_ctx" in l][:40]
    open(out, "a").write(json.dumps({"kind": "fit", "tag": tag, "rc": p.returncode, "seconds": round(time.time() - t0, 2),
        "buffers": bufs, "breakdown": table, "oom": oom, "fit_lines": fit, "device_free": b.free, "log": os.path.basename(path)}) + "\n")
    print(tag, p.returncode, fit[-3:] if fit else "")
finally:
    b.close()
PY
  done
fi
if has oom; then  # out-of-memory logs of known causes, for explain's corpus
  L8="$DIR/llama-3.1-8b-instruct-Q4_K_M.gguf"
  cat > "$OUT/oom.py" <<'PY'
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("m", "scripts/gpu/llamacpp-measure.py"); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
out, gguf, tag, cap = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
nv = m.Nvml(0); idle = nv.used()[0]; b = m.Ballast(cap); bb = nv.used()[0] - idle
try:
    r = m.run_once(nv, gguf, tag, sys.argv[5:], idle, bb); r.update({"cap_mib": cap, "device_free": b.free})
    open(out, "a").write(json.dumps(r) + "\n"); print(tag, r["rc"], r["oom"])
finally:
    b.close()
PY
  python3 "$OUT/oom.py" "$R" "$L8" "oom-load:weights" 3072 -c 4096 -fa on -ngl 99
  python3 "$OUT/oom.py" "$R" "$L8" "oom-kv:kv_cache" 6144 -c 131072 -fa on -ngl 99
  python3 "$OUT/oom.py" "$R" "$L8" "oom-compute:activations" 9216 -c 16384 -fa off -ngl 99 -b 4096 -ub 4096
  python3 "$OUT/oom.py" "$R" "$L8" "oom-partial:weights" 2048 -c 4096 -fa on -ngl 24
fi
cp -r "$LLAMACPP_LOGS" "$OUT/logs-copy" 2>/dev/null; tar czf "$FINAL/llamacpp-logs.tgz" -C "$LLAMACPP_LOGS" .
