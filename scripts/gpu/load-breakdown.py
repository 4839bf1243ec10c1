#!/usr/bin/env python3
"""Where a transformers probe's first seconds go, in one fresh process: the
imports, CUDA's start, building the model with random weights on the device, and generate()'s
first, second and third calls. Prints one JSON line of wall times in seconds.
Usage: load-breakdown.py PRESET.json [prompt new]"""
import json, sys, time
t = {}
t0 = time.perf_counter()
def mark(k):
    global t0
    now = time.perf_counter(); t[k] = round(now - t0, 3); t0 = now
import torch; mark("import_torch")
import transformers; mark("import_transformers")
from transformers import AutoConfig, AutoModelForCausalLM; mark("import_auto")
torch.cuda.init(); x = torch.empty(1, device="cuda"); torch.cuda.synchronize(); mark("cuda_init")
import pynvml  # noqa
mark("import_pynvml")
cfg = AutoConfig.from_pretrained(sys.argv[1]); mark("config")
with torch.device("cuda"):
    m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
torch.cuda.synchronize(); mark("from_config_on_cuda")
m.eval()
p = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
n = int(sys.argv[3]) if len(sys.argv) > 3 else 256
ids = torch.randint(0, cfg.vocab_size, (1, p), device="cuda")
for k in ("gen1", "gen2", "gen3"):
    with torch.no_grad():
        m.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize(); mark(k)
with torch.no_grad():
    m(ids[:, :p]); torch.cuda.synchronize(); mark("prefill_only")
    m.generate(ids, max_new_tokens=1, do_sample=False, pad_token_id=0); torch.cuda.synchronize(); mark("gen_1tok")
t["peak_allocated"] = torch.cuda.max_memory_allocated()
print(json.dumps(t))
