"""Where the first generate() of a fresh CUDA process spends its time: Mistral-7B's
shapes, random bf16 weights built on the GPU, each first call timed to a synchronize. Prints one
JSON object. Usage: python3 warmup-floor.py [prompt_tokens]"""
import gc
import json
import sys
import time

t = time.perf_counter()
import torch  # noqa: E402
import transformers  # noqa: E402,F401
from transformers import AutoModelForCausalLM  # noqa: E402

out = {"import_s": time.perf_counter() - t}
p = int(sys.argv[1]) if len(sys.argv) > 1 else 512


def step(name, fn):
    torch.cuda.synchronize() if torch.cuda.is_initialized() else None
    t0 = time.perf_counter()
    r = fn()
    torch.cuda.synchronize()
    out[name] = round(time.perf_counter() - t0, 4)
    return r


step("context", lambda: torch.zeros(1, device="cuda"))
cfg = transformers.MistralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                 num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=32768,
                                 rope_theta=1e6, sliding_window=None)


def build():
    with torch.device("cuda"):
        return AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")


model = step("build", build)
model.eval()
x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
step("first_matmul", lambda: x @ w)
step("second_matmul", lambda: x @ w)
q = torch.randn(1, 32, 16, 128, device="cuda", dtype=torch.bfloat16)
step("first_sdpa", lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True))
ids = torch.randint(3, 31000, (1, p), device="cuda")
mask = torch.ones_like(ids)
kw = dict(max_new_tokens=16, min_new_tokens=16, do_sample=False, pad_token_id=0, return_dict_in_generate=True,
          use_cache=True)
with torch.no_grad():
    step("first_forward_p", lambda: model(input_ids=ids, attention_mask=mask, logits_to_keep=1))
    step("first_generate_p_16", lambda: model.generate(ids, attention_mask=mask, **kw))
    step("second_generate_p_16", lambda: model.generate(ids, attention_mask=mask, **kw))
    small = ids[:, :16]
    step("generate_16_16", lambda: model.generate(small, attention_mask=torch.ones_like(small), **kw))
    b4 = torch.randint(3, 31000, (4, p), device="cuda")
    step("first_generate_b4", lambda: model.generate(b4, attention_mask=torch.ones_like(b4), **kw))
    step("second_generate_b4", lambda: model.generate(b4, attention_mask=torch.ones_like(b4), **kw))
t0 = time.perf_counter()
gc.collect()
out["gc_collect"] = round(time.perf_counter() - t0, 4)
gc.freeze()
t0 = time.perf_counter()
gc.collect()
out["gc_collect_frozen"] = round(time.perf_counter() - t0, 4)
out["objects_frozen"] = gc.get_freeze_count()
out["prompt_tokens"] = p
print(json.dumps(out))
