#!/usr/bin/env python3
"""A real transformers OOM to watch: Mistral-7B shapes (random bf16 weights, built on the GPU), a
24 GiB card emulated with torch's per-process memory cap, and a 40,000-token prompt.

    llm-oom watch --svg mem.svg -- python3 scripts/calibrate/oom_demo.py
"""
import json, os, sys, time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

here = os.path.dirname(os.path.abspath(__file__))
cfg = json.load(open(os.path.join(here, "..", "..", "presets", "mistral-7b-instruct-v0.2.json")))
model_type = cfg.pop("model_type")
for k in ("_name_or_path", "architectures"):
    cfg.pop(k, None)
torch.cuda.set_per_process_memory_fraction(24 * (1 << 30) / torch.cuda.get_device_properties(0).total_memory)
time.sleep(0.5)
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **cfg), dtype=torch.bfloat16)
model.eval()
print(f"weights loaded: {torch.cuda.memory_allocated() / 2**30:.2f} GiB", flush=True)
time.sleep(1.0)
prompt = int(sys.argv[1]) if len(sys.argv) > 1 else 40000
ids = torch.randint(3, 30000, (1, prompt), device="cuda")
print("batch=", ids.shape[0], "seq=", ids.shape[1], flush=True)
with torch.inference_mode():
    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=256, do_sample=False, pad_token_id=0)
print("generated", flush=True)
