#!/usr/bin/env bash
# Usage: OUT=./gpu-out bash scripts/gpu/same-oom-diagnose.sh [CASE ...]   (binary: .gl/llm-oom.gz)
#
# `diagnose` (transformers mode, random weights of the real shapes) of the same workloads that
# scripts/gpu/same-oom.sh runs out of memory: the same model, batch, prompt and new tokens, and
# the same memory. A capped run's cap (set_per_process_memory_fraction) bounds PyTorch's
# allocations only, and its CUDA context sat beside it, so diagnose gets the card that process
# had: `--vram-limit` = the cap + the non-PyTorch memory its own OOM message reports (in use −
# allocated − reserved-unallocated, tests/fixtures/same-oom/<case>/stderr.log). For
# other-process a second process holds all of the card but 16 GiB while diagnose runs. Each case's --json is kept as $OUT/same-oom-diagnose/<case>.json, beside the
# summary; docs/accuracy.md's one-OOM table takes its diagnose column from them.
set -u
cd "$(dirname "$0")/../.."
ARGS=("$@")
set -- same-oom-diagnose
source scripts/gpu/common.sh same-oom-diagnose
B=/tmp/llm-oom
gunzip -c .gl/llm-oom.gz >$B && chmod +x $B
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
} >"$OUT/machine.txt" 2>&1
P=presets
# case: model, capped (- for no cap), batch, prompt, new tokens (scripts/gpu/same-oom.py's
# CASES; the served ramps at the prompt their long-lived process failed at)
declare -A W=(
    [weights-13b]="$P/llama-2-13b.json cap 1 16 1"
    [kv-decode]="$P/llama-2-7b.json cap 1 1000 3000"
    [batch-48]="$P/mistral-7b-instruct-v0.2.json cap 48 2048 16"
    [batch-32]="$P/llama-2-7b.json cap 32 2048 16"
    [other-process]="$P/mistral-7b-instruct-v0.2.json - 4 8000 16"
    [long-prompt]="$P/mistral-7b-instruct-v0.2.json cap 1 40000 8"
    [served-ramp]="$P/mistral-7b-instruct-v0.2.json cap 2 7840 64"
    [served-ramp-b1]="$P/llama-2-7b.json cap 1 4548 64"
)
CASES=${ARGS[*]:-weights-13b kv-decode batch-48 batch-32 other-process long-prompt served-ramp served-ramp-b1}
for c in $CASES; do
    read -r m cap b p n <<<"${W[$c]}"
    limit=(--allow-past-context)
    if [ "$cap" != "-" ]; then
        card=$(python3 - "tests/fixtures/same-oom/$c/stderr.log" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
g = lambda v, u: float(v) * (1024 if u == "GiB" else 1 if u == "MiB" else 1 / 1024)
m = re.findall(r"this process has ([0-9.]+) GiB memory in use\. ([0-9.]+) GiB allowed; Of the allocated "
               r"memory ([0-9.]+) ([GMK]iB) is allocated by PyTorch, and ([0-9.]+) ([GMK]iB) is reserved", t)[-1]
other = g(m[0], "GiB") - g(m[2], m[3]) - g(m[4], m[5])
print("%dMiB" % round(g(m[1], "GiB") + other))
PY
)
        limit+=(--vram-limit "$card")
        echo "$c: --vram-limit $card (the cap + the process's non-PyTorch memory)" >>"$OUT/summary.txt"
    fi
    hold=
    if [ "$c" = other-process ]; then
        python3 -c "import torch,time; f=torch.cuda.mem_get_info()[0]-16*(1<<30); t=torch.empty(f,dtype=torch.uint8,device='cuda'); print('held',flush=True); time.sleep(900)" >"$OUT/$c.hold.log" 2>&1 &
        hold=$!
        for _ in $(seq 60); do grep -q held "$OUT/$c.hold.log" 2>/dev/null && break; sleep 1; done
    fi
    timed "$c" $B -v diagnose -m "$m" "${limit[@]}" -b "$b" -p "$p" -n "$n" --json
    [ -n "$hold" ] && kill "$hold" && wait "$hold" 2>/dev/null
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); v=r.get('verdict') or {}; print(sys.argv[2], v.get('cause'), v.get('rule'), v.get('confidence'), v.get('stage'), ((v.get('evidence') or [{}])[0].get('text') or '')[:200], 'seconds', r.get('seconds'))" "$OUT/$c.json" "$c" >>"$OUT/summary.txt" 2>&1
done
pkill -f -- '--zygote'
