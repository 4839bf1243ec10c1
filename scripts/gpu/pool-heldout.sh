#!/usr/bin/env bash
# The allocator model's held-out check: fresh ground-truth trials at the edges the model predicted
# before they ran (docs/calibration/pool-predictions-h200-2026-12-02.jsonl): the largest prompt it
# says runs and one token more, for 9 workloads (8 models' shapes, SDPA and eager, batch 1-32), and
# Qwen2.5-7B's predicted non-monotone stretch (4,097-4,300 out of memory, 4,400 runs). Each trial is
# alloc-trace.py's fresh process (the probe's ballast, from_config, one generate()); the small
# traces come back. Then diagnose in predicted mode (transformers hidden) on the 16 edges.
# Usage: OUT=./gpu-out bash scripts/gpu/pool-heldout.sh   (binary: .gl/llm-oom-cpu.gz)
set -u
export PYTHONUNBUFFERED=1
D=/tmp/traces; mkdir -p $D
P=docs/calibration/pool-predictions-h200-2026-12-02.jsonl
W=$(python3 -c "
import json
for l in open('$P'):
    d=json.loads(l); print('%s:%s:%d:%d:%g:%d' % (d['preset'],d['attn'],d['batch'],d['new'],d['vram_limit']/2**30,d['prompt']))")
timeout 480 python3 scripts/gpu/alloc-trace.py $D $W 2> $OUT/trials.log
ls -la $D >> $OUT/trials.log
cd $D && find . -name '*.json.gz' -size -1500k | tar cf $OUT/small-traces.tar -T - ; cd - >/dev/null
gunzip -c .gl/llm-oom-cpu.gz > /tmp/llm-oom && chmod +x /tmp/llm-oom
while read m eng b n lim p; do
  s=$(date +%s.%N)
  LLM_OOM_PYTHON=/nonexistent timeout 60 /tmp/llm-oom diagnose --model $m --engine $eng --device cuda \
    -b $b -n $n -p $p --vram-limit ${lim}GiB --json > /tmp/o.json 2>/dev/null; rc=$?
  e=$(date +%s.%N)
  python3 -c "
import json; d=json.load(open('/tmp/o.json')); v=d['verdict']
print(json.dumps(dict(model='$m',engine='$eng',batch=$b,new=$n,limit_gib=$lim,prompt=$p,exit=$rc,mode=d['mode'],cause=v['cause'],budget=d['budget']['max_prompt_tokens'],seconds=round($e-$s,2),gpu=(d['device'].get('gpu') or {}).get('name'))))" >> $OUT/predicted.jsonl
done <<'L'
mistralai/Mistral-7B-Instruct-v0.2 transformers 1 256 16 5815
mistralai/Mistral-7B-Instruct-v0.2 transformers 1 256 16 5887
meta-llama/Meta-Llama-3-8B transformers 1 256 16.5 2368
meta-llama/Meta-Llama-3-8B transformers 1 256 16.5 2432
Qwen/Qwen2.5-7B-Instruct transformers 1 128 16 4466
Qwen/Qwen2.5-7B-Instruct transformers 1 128 16 4549
microsoft/Phi-3-mini-4k-instruct transformers 4 128 10 903
microsoft/Phi-3-mini-4k-instruct transformers 4 128 10 936
meta-llama/Llama-2-7b-hf transformers-eager 1 64 15 1458
meta-llama/Llama-2-7b-hf transformers-eager 1 64 15 1509
Qwen/Qwen3-8B transformers 1 128 18 6561
Qwen/Qwen3-8B transformers 1 128 18 7019
mistralai/Mistral-7B-Instruct-v0.2 transformers 8 256 24 4245
mistralai/Mistral-7B-Instruct-v0.2 transformers 8 256 24 4295
Qwen/Qwen2.5-0.5B-Instruct transformers 16 256 8 7400
Qwen/Qwen2.5-0.5B-Instruct transformers 16 256 8 8073
L
nvidia-smi --query-gpu=memory.used --format=csv >> $OUT/predicted.jsonl.gpu 2>&1
