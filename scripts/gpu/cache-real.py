#!/usr/bin/env python3
"""What a model's cache really holds under transformers' generate(), for docs/models.md.

Builds the model of a preset config (random weights, the real shapes) with
AutoModelForCausalLM.from_config in bf16, runs generate() at two prompt lengths, and prints one
JSON object: per length, torch.cuda.max_memory_allocated and the bytes of every tensor the
returned cache object holds (keys, values, conv and SSM states; each storage counted once).

    python scripts/gpu/cache-real.py presets/gemma-3-27b-it.json --layers 6 --lengths 1024 8192
    python scripts/gpu/cache-real.py presets/deepseek-v2-lite.json --layers 4 --device cuda

`--layers` shrinks num_hidden_layers (and layer_types to match) so a capped card holds it; the
cache per layer is what is compared. `--device cpu` runs anywhere (max_memory_allocated is null).
"""

import argparse
import json
import sys


def shrink(cfg, layers):
    inner = cfg.get("text_config", cfg)
    if layers is None:
        return cfg
    n = inner.get("num_hidden_layers", layers)
    inner["num_hidden_layers"] = min(n, layers)
    for key in ("layer_types", "no_rope_layers"):
        if isinstance(inner.get(key), list):
            inner[key] = inner[key][: inner["num_hidden_layers"]]
    if isinstance(inner.get("first_k_dense_replace"), int):
        inner["first_k_dense_replace"] = min(inner["first_k_dense_replace"], inner["num_hidden_layers"] - 1)
    inner.pop("quantization_config", None)
    cfg.pop("quantization_config", None)
    return cfg


def tensors_of(obj, seen, depth=0):
    """Every torch tensor reachable from a cache object (lists, tuples, dicts, attributes)."""
    import torch

    if depth > 6 or obj is None:
        return
    if isinstance(obj, torch.Tensor):
        key = (obj.untyped_storage().data_ptr(), obj.untyped_storage().nbytes())
        if obj.numel() and key not in seen:
            seen[key] = obj
        return
    if isinstance(obj, (list, tuple)):
        for x in obj:
            tensors_of(x, seen, depth + 1)
    elif isinstance(obj, dict):
        for x in obj.values():
            tensors_of(x, seen, depth + 1)
    elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("transformers"):
        for x in vars(obj).values():
            tensors_of(x, seen, depth + 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--lengths", type=int, nargs=2, default=[512, 2048])
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = shrink(json.load(open(a.config)), a.layers)
    model_type = raw.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **raw)
    text = getattr(cfg, "text_config", cfg)
    torch.manual_seed(0)
    with torch.device(a.device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    vocab = text.vocab_size
    out = {
        "config": a.config,
        "model_type": model_type,
        "layers": text.num_hidden_layers,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "device": a.device,
        "runs": [],
    }
    for n in a.lengths:
        if a.device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        ids = torch.randint(0, vocab, (1, n), device=a.device)
        with torch.no_grad():
            g = model.generate(
                ids,
                max_new_tokens=a.new_tokens,
                min_new_tokens=a.new_tokens,
                do_sample=False,
                return_dict_in_generate=True,
                use_cache=True,
            )
        seen = {}
        tensors_of(g.past_key_values, seen)
        cache = sum(t.untyped_storage().nbytes() for t in seen.values())
        out["runs"].append(
            {
                "prompt_tokens": n,
                "new_tokens": a.new_tokens,
                "cache_class": type(g.past_key_values).__name__,
                "cache_bytes": cache,
                "cache_tensors": len(seen),
                "cache_bytes_per_layer": cache // max(1, text.num_hidden_layers),
                "max_memory_allocated": torch.cuda.max_memory_allocated()
                if a.device.startswith("cuda")
                else None,
            }
        )
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
