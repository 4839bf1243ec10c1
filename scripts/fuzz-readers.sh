#!/usr/bin/env bash
# Usage: scripts/fuzz-readers.sh BIN_DIR SECONDS [WORKERS] [OUT_DIR]
#
# Fuzzes every reader of untrusted bytes (explain, config, gguf, safetensors, snapshot) at once,
# each for SECONDS with WORKERS libFuzzer processes, from seed inputs the repository holds or this
# script writes. BIN_DIR holds the fuzz targets built with
#     cd fuzz && cargo +nightly fuzz build -O -a -s none
# (optimised, debug assertions and overflow checks on: an overflow is a crash). The binaries need
# no Rust toolchain, so a machine with more cores can run them. OUT_DIR (default ./fuzz-out) gets
# one log per target, any crash input under crashes/, and summary.md.
set -u
BIN=${1:?usage: scripts/fuzz-readers.sh BIN_DIR SECONDS [WORKERS] [OUT_DIR]}
SECS=${2:?usage: scripts/fuzz-readers.sh BIN_DIR SECONDS [WORKERS] [OUT_DIR]}
WORKERS=${3:-1}
OUT=${4:-fuzz-out}
BIN=$(cd "$BIN" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGETS="explain config gguf safetensors snapshot"
mkdir -p "$OUT/crashes"
OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

# --- seeds ----------------------------------------------------------------------------------
for t in $TARGETS; do mkdir -p "$W/corpus/$t" "$W/run/$t"; done
find "$ROOT/tests/fixtures/logs" -name '*.log' -size -64k | head -400 | while read -r f; do
    cp "$f" "$W/corpus/explain/$(echo "$f" | md5sum | cut -c1-12).log"
done
cp "$ROOT"/presets/*.json "$ROOT/tests/fixtures/tiny-llama/config.json" "$W/corpus/config/"
cp "$ROOT"/tests/fixtures/snapshot/*.pickle "$W/corpus/snapshot/"
python3 - "$W/corpus" <<'EOF'
import json, struct, sys, os
C = sys.argv[1]
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
def gguf(meta, tensors, arch='llama'):
    b = b'GGUF' + struct.pack('<I', 3) + struct.pack('<Q', len(tensors)) + struct.pack('<Q', len(meta) + 1)
    b += s('general.architecture') + struct.pack('<I', 8) + s(arch)
    for k, v in meta:
        b += s(k) + struct.pack('<I', 4) + struct.pack('<I', v)
    for n, d, t in tensors:
        b += s(n) + struct.pack('<I', len(d)) + b''.join(struct.pack('<Q', x) for x in d) + struct.pack('<I', t) + struct.pack('<Q', 0)
    return b
for arch in ('llama', 'qwen2', 'gemma2', 'gemma3'):
    meta = [(f'{arch}.block_count', 2), (f'{arch}.embedding_length', 64), (f'{arch}.feed_forward_length', 128),
            (f'{arch}.attention.head_count', 4), (f'{arch}.attention.head_count_kv', 2), (f'{arch}.context_length', 4096)]
    open(os.path.join(C, 'gguf', arch + '.gguf'), 'wb').write(
        gguf(meta, [('token_embd.weight', [64, 100], 0), ('blk.0.attn_q.weight', [64, 64], 12)], arch))
def st(tensors, pad=0):
    hdr, off, data = {'__metadata__': {'format': 'pt'}}, 0, b''
    for name, dtype, shape, size in tensors:
        hdr[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [off, off + size]}
        off += size
    h = json.dumps(hdr).encode()
    return struct.pack('<Q', len(h)) + h + b'\0' * (off + pad)
open(os.path.join(C, 'safetensors', 'small.safetensors'), 'wb').write(
    st([('model.embed_tokens.weight', 'BF16', [100, 64], 12800), ('lm_head.weight', 'F16', [100, 64], 12800)]))
open(os.path.join(C, 'safetensors', 'fp8.safetensors'), 'wb').write(
    st([('model.layers.0.mlp.up_proj.weight', 'F8_E4M3', [128, 64], 8192),
        ('model.layers.0.mlp.up_proj.weight_scale_inv', 'F32', [1, 1], 4)]))
EOF

# --- runs -----------------------------------------------------------------------------------
for t in $TARGETS; do
    [ -x "$BIN/$t" ] || { echo "no fuzz target $BIN/$t" >&2; exit 2; }
    (
        cd "$W/run/$t" || exit 1
        "$BIN/$t" "$W/corpus/$t" -max_total_time="$SECS" -max_len=16384 -rss_limit_mb=2048 \
            -timeout=20 -jobs="$WORKERS" -workers="$WORKERS" -artifact_prefix="$OUT/crashes/$t-" \
            >"$OUT/$t.log" 2>&1
        cat fuzz-*.log >>"$OUT/$t.log" 2>/dev/null
    ) &
done
wait

# --- summary --------------------------------------------------------------------------------
{
    echo "| target | workers × seconds | runs | coverage (edges) at the end | corpus | crashes |"
    echo "|---|---|---|---|---|---|"
    for t in $TARGETS; do
        runs=$(grep -hoE '^#[0-9]+' "$OUT/$t.log" | tr -d '#' | sort -n | tail -1)
        cov=$(grep -hoE 'cov: [0-9]+' "$OUT/$t.log" | awk '{print $2}' | sort -n | tail -1)
        corp=$(ls "$W/corpus/$t" | wc -l)
        crashes=$(ls "$OUT/crashes" | grep -c "^$t-")
        echo "| $t | $WORKERS × $SECS | ${runs:-?} (largest worker) | ${cov:-?} | $corp inputs | $crashes |"
    done
} >"$OUT/summary.md"
cat "$OUT/summary.md"
! ls "$OUT/crashes" | grep -q .
