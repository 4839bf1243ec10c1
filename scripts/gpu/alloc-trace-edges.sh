#!/usr/bin/env bash
# PyTorch's caching-allocator traces of the 16 ground-truth trials at transformers' limits (8
# workloads: the largest prompt that ran and the first that ran out), each in its own fresh process
# (scripts/gpu/alloc-trace.py), tarred and split into 15 MB parts under $OUT.
# Usage: OUT=./gpu-out bash scripts/gpu/alloc-trace-edges.sh
set -u
D=/tmp/traces; mkdir -p $D
python3 scripts/gpu/alloc-trace.py $D \
  mistral-7b-instruct-v0.2:sdpa:1:256:16:5815:stacks mistral-7b-instruct-v0.2:sdpa:1:256:16:5887:stacks \
  meta-llama-3-8b:sdpa:1:256:16.5:2368:stacks meta-llama-3-8b:sdpa:1:256:16.5:2432:stacks \
  qwen2.5-7b-instruct:sdpa:1:128:16:4466:stacks qwen2.5-7b-instruct:sdpa:1:128:16:4549:stacks \
  phi-3-mini-4k-instruct:sdpa:4:128:10:903:stacks phi-3-mini-4k-instruct:sdpa:4:128:10:936:stacks \
  llama-2-7b:eager:1:64:15:1458:stacks llama-2-7b:eager:1:64:15:1509:stacks \
  qwen3-8b:sdpa:1:128:18:6561:stacks qwen3-8b:sdpa:1:128:18:7019:stacks \
  mistral-7b-instruct-v0.2:sdpa:8:256:24:4245:stacks mistral-7b-instruct-v0.2:sdpa:8:256:24:4295:stacks \
  qwen2.5-0.5b-instruct:sdpa:16:256:8:7400:stacks qwen2.5-0.5b-instruct:sdpa:16:256:8:8073:stacks \
  2> $OUT/alloc-trace.log
ls -la $D >> $OUT/alloc-trace.log
tar cf /tmp/traces.tar -C $D .
split -b 15M -d /tmp/traces.tar $OUT/traces.tar.
ls -la $OUT
