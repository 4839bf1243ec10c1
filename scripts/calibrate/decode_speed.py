"""Decode tokens/s of transformers generate() on the presets' shapes (random weights, greedy), to
set beside llm-oom's probe on the same GPU. One JSON line per model.

    python3 scripts/calibrate/decode_speed.py mistral-7b-instruct-v0.2:bfloat16 llama-2-13b:float16
"""
import json, os, sys, time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

PRESETS = os.path.join(os.path.dirname(__file__), "..", "..", "presets")


def timed_generate(model, ids, new):
    torch.cuda.synchronize()
    t0 = time.time()
    with torch.inference_mode():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                       do_sample=False, use_cache=True, pad_token_id=0, eos_token_id=None)
    torch.cuda.synchronize()
    return time.time() - t0


for arg in sys.argv[1:]:
    name, dtype = arg.split(":")
    cfg = json.load(open(os.path.join(PRESETS, name + ".json")))
    model_type = cfg.pop("model_type")
    cfg.pop("_name_or_path", None)
    cfg.pop("architectures", None)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **cfg),
                                                 dtype=getattr(torch, dtype), attn_implementation="sdpa")
    model.eval()
    ids = torch.randint(3, cfg["vocab_size"] - 1, (1, 2048), device="cuda")
    timed_generate(model, ids, 2)  # warm-up
    one = timed_generate(model, ids, 1)
    full = timed_generate(model, ids, 129)
    print(json.dumps({"engine": "transformers", "model": name, "dtype": dtype, "prompt": 2048,
                      "decode_tokens": 128, "prefill_s": round(one, 3),
                      "decode_tokens_per_second": round(128 / (full - one), 1),
                      "torch": torch.__version__}), flush=True)
    del model
    torch.cuda.empty_cache()
