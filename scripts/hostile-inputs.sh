#!/usr/bin/env bash
# Hostile inputs: ~300 bad inputs through the real binary, grouped; each row is the exit code
# and the line llm-oom printed. A row fails when the binary panics, runs past 60 s, exits with a code
# the row does not allow, loses a watch report, or leaves a process of a watched tree running.
#
#   scripts/hostile-inputs.sh [path/to/llm-oom] > table.md
#   scripts/hostile-inputs.sh --update-docs      # rewrites the table in docs/reliability.md
#
# Needs python3 (to write GGUF headers and prompt files). Runs offline (HF_HUB_OFFLINE=1).
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
UPDATE=0
BIN=""
for a in "$@"; do
    case "$a" in
        --update-docs) UPDATE=1 ;;
        *) BIN="$a" ;;
    esac
done
if [ -z "$BIN" ]; then
    (cd "$ROOT" && cargo build --release --quiet) || exit 3
    BIN="$ROOT/target/release/llm-oom"
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export HF_HUB_OFFLINE=1 NO_COLOR=1 HF_HOME="$T/hf"
unset RUST_LOG HF_HUB_CACHE

ROWS="$T/rows.md"
: >"$ROWS"
TOTAL=0 PANICS=0 HANGS=0 WRONG=0 LOST=0 LEFT=0
GROUP=""

group() { GROUP="$1"; printf '\n### %s\n\n| input | exit | printed |\n|---|---|---|\n' "$1" >>"$ROWS"; }

# first line worth showing: the error on stderr, else the verdict on stdout
shown() {
    local line
    line=$(grep -m1 -E '^(llm-oom:|error:)' "$T/err" || true)
    [ -z "$line" ] && line=$(grep -m1 -E '(FITS|WOULD OOM|OUT OF MEMORY|NO OOM|"cause")' "$T/out" || true)
    [ -z "$line" ] && line=$(grep -m1 -v '^\s*$' "$T/err" || true)
    [ -z "$line" ] && line=$(grep -m1 -v '^\s*$' "$T/out" || true)
    line=${line//|/\\|}
    line=${line//$T/\$TMP}
    printf '%s' "${line:0:160}" | tr -d '`'
}

# row EXPECT DESCRIPTION -- ARGS...   (EXPECT: allowed exit codes, e.g. "2" or "0 1")
row() {
    local expect="$1" desc="$2"
    shift 3
    TOTAL=$((TOTAL + 1))
    timeout 60 "$BIN" "$@" >"$T/out" 2>"$T/err" </dev/null
    local rc=$? mark=""
    if grep -q "panicked" "$T/err"; then PANICS=$((PANICS + 1)); mark=" **PANIC**"; fi
    if [ $rc -eq 124 ]; then HANGS=$((HANGS + 1)); mark="$mark **HANG**"; fi
    if ! [[ " $expect " == *" $rc "* ]]; then WRONG=$((WRONG + 1)); mark="$mark **expected $expect**"; fi
    desc=${desc//|/\\|}
    printf '| `%s` | %s%s | %s |\n' "$desc" "$rc" "$mark" "$(shown)" >>"$ROWS"
}

# --- fixtures -------------------------------------------------------------------------------
mkdir -p "$T/ok" "$T/empty-dir" "$T/tok"
cp "$ROOT/tests/fixtures/tiny-llama/config.json" "$T/ok/config.json"
cp "$ROOT/tests/fixtures/tiny-llama/config.json" "$T/tok/config.json"
cat >"$T/tok/tokenizer.json" <<'EOF'
{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
"model":{"type":"WordLevel","vocab":{"[UNK]":0,"hello":1,"world":2},"unk_token":"[UNK]"}}
EOF
python3 - "$T" <<'EOF'
import struct, sys, os
T = sys.argv[1]
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
def hdr(meta, tensors, version=3, arch='llama'):
    b = b'GGUF' + struct.pack('<I', version) + struct.pack('<Q', len(tensors)) + struct.pack('<Q', len(meta) + (1 if arch else 0))
    if arch: b += s('general.architecture') + struct.pack('<I', 8) + s(arch)
    for k, v in meta:
        b += s(k) + (struct.pack('<I', 4) + struct.pack('<I', v) if v < 2**32 else struct.pack('<I', 10) + struct.pack('<Q', v))
    for n, d, t in tensors:
        b += s(n) + struct.pack('<I', len(d)) + b''.join(struct.pack('<Q', x) for x in d) + struct.pack('<I', t) + struct.pack('<Q', 0)
    return b
base = [('llama.block_count', 2), ('llama.embedding_length', 64), ('llama.feed_forward_length', 128),
        ('llama.attention.head_count', 4), ('llama.vocab_size', 100)]
emb = [('token_embd.weight', [64, 100], 0)]
files = {
    'ok.gguf': hdr(base, emb),
    'empty.gguf': b'',
    'magic-only.gguf': b'GGUF',
    'version-0.gguf': b'GGUF' + struct.pack('<I', 0) + b'\0' * 16,
    'version-99.gguf': hdr(base, emb, version=99),
    'truncated.gguf': hdr(base, emb)[:40],
    'counts-huge.gguf': b'GGUF' + struct.pack('<I', 3) + struct.pack('<Q', 2**62) + struct.pack('<Q', 2**62),
    'alignment-0.gguf': hdr(base + [('general.alignment', 0)], emb),
    'dims-2^33x2^33.gguf': hdr(base, [('blk.0.ffn_up.weight', [2**33, 2**33], 0)]),
    'dims-zero.gguf': hdr(base, [('blk.0.ffn_up.weight', [0, 64], 0)]),
    'dims-5.gguf': hdr(base, [('blk.0.ffn_up.weight', [2, 2, 2, 2, 2], 0)]),
    'dtype-unknown.gguf': hdr(base, [('blk.0.ffn_up.weight', [64, 64], 99)]),
    'layers-2^62.gguf': hdr([(k, 2**62 if k == 'llama.block_count' else v) for k, v in base], emb),
    'experts-2^40.gguf': hdr(base + [('llama.expert_count', 2**40)], emb),
    'heads-0.gguf': hdr([(k, 0 if k == 'llama.attention.head_count' else v) for k, v in base], emb),
    'no-arch.gguf': hdr(base, emb, arch=None),
    'hidden-2^40.gguf': hdr([(k, 2**40 if k == 'llama.embedding_length' else v) for k, v in base], emb),
}
for name, data in files.items():
    open(os.path.join(T, name), 'wb').write(data)
open(os.path.join(T, 'prompt-200mb.txt'), 'w').write(('hello world ' * 1000 + '\n') * 16_700)
open(os.path.join(T, 'prompt-binary.txt'), 'wb').write(os.urandom(1 << 20))
open(os.path.join(T, 'prompt-empty.txt'), 'w').write('')
open(os.path.join(T, 'prompt-bad-utf8.txt'), 'wb').write(b'hello \xff\xfe world \xc3')
EOF
: >"$T/empty.json"

# --- the rows ---------------------------------------------------------------------------------
group "Workload flags (plan)"
for v in 0 -1 -9223372036854775808 9223372036854775807 140737488355327 10000001 abc "" 1e6 0x10 " 5"; do
    row "2" "plan --prompt-tokens '$v'" -- plan --prompt-tokens "$v" --vram 24GiB
done
row "0 1" "plan --prompt-tokens 10000000 (the ceiling)" -- plan --prompt-tokens 10000000 --vram 24GiB
for v in 0 -3 10000001 18446744073709551616 x; do
    row "2" "plan --max-new-tokens '$v'" -- plan --max-new-tokens "$v" --vram 24GiB
done
for v in 0 -5 65537 9223372036854775807 2.5; do
    row "2" "plan --batch '$v'" -- plan --batch "$v" --vram 24GiB
done
row "0 1" "plan --batch 65536 (the ceiling)" -- plan --batch 65536 --vram 24GiB
row "2" "plan --engine vllm --prompt-tokens 140737488355327 (printed FITS)" -- plan --engine vllm --prompt-tokens 140737488355327 --model mistralai/Mistral-7B-Instruct-v0.2 --vram 24GiB
row "0 1" "plan -p 100000 on a 32k model" -- plan -p 100000 --vram 80GiB

group "Card sizes (--vram)"
for v in 24 24B 0GiB -24GiB 24XB 1e3GiB NaN inf 24.5.5GiB 2048TiB 999999999999TiB "" " " 0.00001GiB 1KiB; do
    row "2" "plan --vram '$v'" -- plan --vram "$v"
done
for v in rtx4090 24gb 80GB 1536GiB 1PiB; do
    row "0 1 2" "plan --vram '$v'" -- plan --vram "$v"
done

group "Dtypes and engines"
for v in fp9 "" q3_k int4 gptq "bf16 " FP8 MXFP4; do
    row "0 1 2" "plan --dtype '$v'" -- plan --dtype "$v" --vram 24GiB
done
for v in q2 int2 fp16x ""; do
    row "2" "plan --kv-dtype '$v'" -- plan --kv-dtype "$v" --vram 24GiB
done
for v in tensorrt "" lmdeploy "VLLM"; do
    row "0 1 2" "plan --engine '$v'" -- plan --engine "$v" --vram 24GiB
done

group "Command line"
row "2" "plan --json --markdown" -- plan --json --markdown
row "2" "--markdown --json plan" -- --markdown --json plan
row "2" "plan --frobnicate" -- plan --frobnicate
row "2" "frobnicate" -- frobnicate
row "2" "plan extra-positional" -- plan extra-positional
row "2" "plan --color bogus" -- plan --color bogus
row "2" "plan --gpu -1" -- plan --gpu -1
row "2" "plan --gpu 99999999999" -- plan --gpu 99999999999
row "2" "completions bogus" -- completions bogus
row "2" "(no arguments)" --
row "2" "plan -p 5 --prompt-file x" -- plan -p 5 --prompt-file x

group "Models that cannot be read"
row "2" "--model /nonexistent/dir" -- plan --model /nonexistent/dir
row "2" "--model (a folder without config.json)" -- plan --model "$T/empty-dir"
row "2" "--model (an empty config.json)" -- plan --model "$T/empty.json"
row "2" "--model /dev/null" -- plan --model /dev/null
row "2" "--model /dev/zero" -- plan --model /dev/zero
row "2" "--model no-slash-id (offline)" -- plan --model no-slash-id
row "2" "--model owner/unknown (offline)" -- plan --model owner/unknown
row "2" "--model ''" -- plan --model ""
row "2" "--model ../../../../etc/passwd" -- plan --model ../../../../etc/passwd
row "2" "--model /etc" -- plan --model /etc

group "config.json contents"
cfg() { # cfg NAME JSON -> path
    mkdir -p "$T/cfg/$1"
    printf '%s' "$2" >"$T/cfg/$1/config.json"
    printf '%s' "$T/cfg/$1"
}
LLAMA='"model_type":"llama","hidden_size":256,"intermediate_size":688,"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,"vocab_size":1000,"max_position_embeddings":2048'
for j in '{ not json' '[1,2]' '"a string"' '{}' '{"model_type":"llama"}' '{"model_type":"bert","hidden_size":768}' \
    '{"model_type":"t5","d_model":512}' '{"model_type":"whisper"}' 'null' '{"model_type":7}'; do
    row "2" "config.json = $j" -- plan --model "$(cfg "j$TOTAL" "$j")" --vram 24GiB
done
for key in hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads vocab_size head_dim max_position_embeddings sliding_window; do
    for v in 0 4294967296 4611686018427387904 18446744073709551615 18446744073709551616 -1 1.5 '"x"' null; do
        j="{$LLAMA,\"$key\":$v}"
        row "0 1 2" "$key = $v" -- plan --model "$(cfg "k$TOTAL" "$j")" --vram 24GiB
    done
done
MOE='"model_type":"mixtral","hidden_size":256,"intermediate_size":688,"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,"vocab_size":1000'
for v in 0 65537 1099511627776 18446744073709551615; do
    row "0 1 2" "mixtral num_local_experts = $v" -- plan --model "$(cfg "e$TOTAL" "{$MOE,\"num_local_experts\":$v,\"num_experts_per_tok\":2}")" --vram 24GiB
done
for v in 0 100 65537; do
    row "2" "mixtral num_experts_per_tok = $v (8 experts)" -- plan --model "$(cfg "t$TOTAL" "{$MOE,\"num_local_experts\":8,\"num_experts_per_tok\":$v}")" --vram 24GiB
done
row "1" "16,384 wide, 65,536 intermediate, 64 experts x 256 layers: 5e13 parameters" -- plan --model "$(cfg big '{"model_type":"mixtral","hidden_size":16384,"intermediate_size":65536,"num_hidden_layers":256,"num_attention_heads":64,"num_key_value_heads":8,"vocab_size":32000,"num_local_experts":64,"num_experts_per_tok":2}')" --vram 80GiB
row "2" "every width at its ceiling, 65,536 experts x 65,536 layers (was FITS, 0 B)" -- plan --model "$(cfg wide '{"model_type":"mixtral","hidden_size":1048576,"intermediate_size":1048576,"num_hidden_layers":65536,"num_attention_heads":64,"num_key_value_heads":8,"vocab_size":32000,"num_local_experts":65536,"num_experts_per_tok":2}')" --vram 80GiB
row "2" "num_hidden_layers = 2^62 (hung: a loop per layer)" -- plan --model "$(cfg layers62 "{$LLAMA,\"num_hidden_layers\":4611686018427387904}")"
row "0 1 2" "quantization_config gptq group_size 0" -- plan --model "$(cfg gptq0 "{$LLAMA,\"quantization_config\":{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":0}}")" --vram 24GiB
row "0 1 2" "quantization_config bits 255" -- plan --model "$(cfg bits255 "{$LLAMA,\"quantization_config\":{\"quant_method\":\"gptq\",\"bits\":255,\"group_size\":128}}")" --vram 24GiB
row "0 1 2" "fp8 weight_block_size [0,0]" -- plan --model "$(cfg fp8b "{$LLAMA,\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[0,0]}}")" --vram 24GiB
row "0 1 2" "mlp_only_layers of 100,000 entries" -- plan --model "$(cfg mlponly "{\"model_type\":\"qwen2_moe\",\"hidden_size\":256,\"intermediate_size\":688,\"moe_intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":8,\"vocab_size\":1000,\"num_experts\":8,\"mlp_only_layers\":[$(seq -s, 0 99999)]}")" --vram 24GiB
row "0 1 2" "layer_types of 1,000,000 entries" -- plan --model "$(cfg ltypes "{$LLAMA,\"sliding_window\":64,\"layer_types\":[$(yes '"sliding_attention"' | head -1000000 | paste -sd,)]}")" --vram 24GiB
row "0 1 2" "a 10 MB config.json" -- plan --model "$(cfg big "{$LLAMA,\"pad\":\"$(head -c 10000000 /dev/zero | tr '\0' a)\"}")" --vram 24GiB
for fam in deepseek_v3 jamba mamba2 llama4 qwen3_next gpt_oss falcon_h1 granitemoehybrid phimoe; do
    row "2" "model_type $fam with no fields" -- plan --model "$(cfg "f$fam" "{\"model_type\":\"$fam\"}")" --vram 24GiB
done

group "GGUF headers"
for f in ok empty magic-only version-0 version-99 truncated counts-huge alignment-0 'dims-2^33x2^33' dims-zero dims-5 dtype-unknown 'layers-2^62' 'experts-2^40' heads-0 no-arch 'hidden-2^40'; do
    case "$f" in ok | dims-zero) want="0 1" ;; *) want="2" ;; esac
    row "$want" "plan --model $f.gguf" -- plan --model "$T/$f.gguf" --vram 24GiB
done
row "0 1" "plan --model ok.gguf --json (engine defaults to llama.cpp)" -- plan --model "$T/ok.gguf" --vram 24GiB --json

group "Prompt files"
row "2" "--prompt-file /dev/zero" -- plan --model "$T/tok" --prompt-file /dev/zero --vram 24GiB
row "2" "--prompt-file (200 MB of text)" -- plan --model "$T/tok" --prompt-file "$T/prompt-200mb.txt" --vram 24GiB
row "0 1" "--prompt-file (1 MiB of random bytes)" -- plan --model "$T/tok" --prompt-file "$T/prompt-binary.txt" --vram 24GiB
row "2" "--prompt-file (empty: 0 tokens)" -- plan --model "$T/tok" --prompt-file "$T/prompt-empty.txt" --vram 24GiB
row "0 1" "--prompt-file (invalid UTF-8)" -- plan --model "$T/tok" --prompt-file "$T/prompt-bad-utf8.txt" --vram 24GiB
row "2" "--prompt-file /nonexistent" -- plan --model "$T/tok" --prompt-file /nonexistent --vram 24GiB
row "2" "--prompt-file (a folder)" -- plan --model "$T/tok" --prompt-file "$T" --vram 24GiB
row "2" "--prompt-file with a preset (no tokenizer)" -- plan --prompt-file "$T/prompt-empty.txt" --vram 24GiB

group "explain and diagnose inputs (flags only; their readers are tested by their owners)"
row "2" "explain /nonexistent.log" -- explain /nonexistent.log
row "2" "explain --model x --prompt-tokens 0" -- explain /dev/null --model x --prompt-tokens 0
row "2" "explain --model m --prompt-tokens 2^47" -- explain /dev/null --model mistralai/Mistral-7B-Instruct-v0.2 --prompt-tokens 140737488355327
row "2" "diagnose --prompt-tokens 2^47" -- diagnose --prompt-tokens 140737488355327 --device cpu
row "2" "diagnose --batch 0" -- diagnose --batch 0 --device cpu
row "2" "diagnose --device tpu" -- diagnose --device tpu

group "watch"
row "2" "watch (no command)" -- watch
row "2" "watch -- /no/such/program" -- watch -- /no/such/program
for v in 0ms 1000s abc -5 "" 0.0001s; do
    row "2" "watch --interval '$v'" -- watch --interval "$v" -- true
done
touch "$T/not-run"
rm -f "$T/ran"
row "2" "watch -o missing-dir/report.md (program not run)" -- watch -o "$T/missing-dir/report.md" -- sh -c "touch $T/ran; exit 5"
[ -e "$T/ran" ] && { WRONG=$((WRONG + 1)); echo '| (the program ran) | | **WRONG** |' >>"$ROWS"; }
row "2" "watch --svg /proc/version/x.svg" -- watch --svg /proc/version/x.svg -- sh -c "touch $T/ran"
row "5" "watch -o /dev/full (write fails at the end: report on stderr)" -- watch -o /dev/full -- sh -c 'exit 5'
grep -q "follows on standard error" "$T/err" && grep -q "llm-oom watch" "$T/err" || { LOST=$((LOST + 1)); echo '| (report lost) | | **LOST** |' >>"$ROWS"; }
row "137" "watch -- sh -c 'kill -9 \$\$' (not a host OOM)" -- watch --fail-on-oom -- sh -c 'kill -9 $$'
row "5" "watch -- sh -c 'exit 5'" -- watch -- sh -c 'exit 5'
row "1" "watch --fail-on-oom, 9 MB of output after the OOM line" -- watch --fail-on-oom -- python3 -c "
import sys
for _ in range(2000): print('x' * 999)
print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.', flush=True)
for _ in range(9000): print('y' * 999)"

# kill -9 of watch, and a program that ignores SIGTERM: no process of the tree may be left.
tree_case() { # tree_case DESCRIPTION SIGNAL TRAP
    local desc="$1" sig="$2" trapline="$3"
    TOTAL=$((TOTAL + 1))
    : >"$T/pids"
    "$BIN" watch -- sh -c "$trapline echo \$\$ >> $T/pids; sh -c 'echo \$\$ >> $T/pids; sleep 300 & echo \$! >> $T/pids; wait' & sleep 300; wait" >"$T/out" 2>"$T/err" &
    local w=$!
    for _ in $(seq 100); do [ "$(wc -l <"$T/pids")" -ge 3 ] && break; sleep 0.05; done
    sleep 0.2
    kill "-$sig" $w
    # a second Ctrl-C is what escalates
    [ "$sig" = INT ] && { sleep 0.3; kill -INT $w; }
    local t0=$SECONDS
    wait $w
    local rc=$? mark="" left=""
    sleep 0.5
    for p in $(cat "$T/pids"); do
        if [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null; then left="$left $p"; kill -9 "$p" 2>/dev/null; fi
    done
    [ -n "$left" ] && { LEFT=$((LEFT + 1)); mark=" **left:$left**"; }
    [ $((SECONDS - t0)) -gt 30 ] && { HANGS=$((HANGS + 1)); mark="$mark **HANG**"; }
    grep -q panicked "$T/err" && { PANICS=$((PANICS + 1)); mark="$mark **PANIC**"; }
    printf '| `%s` | %s%s | %s |\n' "$desc" "$rc" "$mark" "$(tail -1 "$T/err" | cut -c1-120) — $(wc -l <"$T/pids") pids, 0 left" >>"$ROWS"
}
tree_case "kill -9 of watch (a shell, a child, a grandchild)" KILL ""
tree_case "SIGTERM to watch, the tree ignores SIGTERM" TERM "trap '' INT TERM HUP;"
tree_case "SIGINT twice to watch, the tree ignores it" INT "trap '' INT TERM HUP;"

# A grandchild killed by the OOM killer inside a 64 MiB memory cgroup, behind a shell that survives.
CG=""
for root in /sys/fs/cgroup/memory /sys/fs/cgroup; do
    d="$root/llm-oom-hostile-$$"
    if mkdir "$d" 2>/dev/null; then
        if echo $((64 << 20)) >"$d/memory.limit_in_bytes" 2>/dev/null || echo $((64 << 20)) >"$d/memory.max" 2>/dev/null; then CG="$d"; break; fi
        rmdir "$d"
    fi
done
if [ -n "$CG" ]; then
    row "1" "watch --fail-on-oom: a grandchild OOM-killed in a 64 MiB cgroup, the wrapper exits 0" -- watch --fail-on-oom -- sh -c "echo \$\$ > $CG/cgroup.procs; sh -c 'sleep 0.3; python3 -c \"a = bytearray(512 << 20)\"'; echo survived"
    rmdir "$CG" 2>/dev/null
else
    echo '| `a grandchild OOM-killed in a small cgroup` | skipped | this machine does not let us create a memory cgroup |' >>"$ROWS"
fi

# More groups, one file per area (each uses group, row and the fixtures above).
for extra in "$ROOT"/scripts/hostile-inputs.d/*.sh; do
    [ -f "$extra" ] && . "$extra"
done

# --- summary ----------------------------------------------------------------------------------
SUMMARY="$TOTAL inputs: $PANICS panics, $HANGS hangs, $WRONG unexpected exit codes (overflows among them), $LOST lost reports, $LEFT runs with processes left."
OUT="$T/table.md"
{
    echo "<!-- hostile-inputs:begin (generated by scripts/hostile-inputs.sh; do not edit by hand) -->"
    echo
    echo "**$SUMMARY**"
    cat "$ROWS"
    echo
    echo "<!-- hostile-inputs:end -->"
} >"$OUT"
if [ $UPDATE -eq 1 ]; then
    python3 - "$ROOT/docs/reliability.md" "$OUT" <<'EOF'
import sys, re
doc, table = sys.argv[1], open(sys.argv[2]).read()
text = open(doc).read()
text = re.sub(r'<!-- hostile-inputs:begin.*?<!-- hostile-inputs:end -->\n?', lambda m: table, text, flags=re.S)
open(doc, 'w').write(text)
EOF
else
    cat "$OUT"
fi
echo "$SUMMARY" >&2
[ $PANICS -eq 0 ] && [ $HANGS -eq 0 ] && [ $WRONG -eq 0 ] && [ $LOST -eq 0 ] && [ $LEFT -eq 0 ]
