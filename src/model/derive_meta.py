# Build a model from its config.json with transformers on the meta device (no weights) and print
# one JSON object: what it holds, parameter by parameter, and the cache it really keeps per layer.
# Usage: python derive_meta.py CONFIG.json. A failure is one JSON object {"error", "message"}.
import json
import sys


def fail(kind, message):
    sys.stdout.write(json.dumps({"error": kind, "message": " ".join(str(message).split())[:400]}))
    sys.stdout.write("\n")
    sys.exit(0)


try:
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
except Exception as e:  # noqa: BLE001 - any import failure means no transformers here
    fail("no_transformers", f"{type(e).__name__}: {e}")

VISION = ("vision", "visual", "multi_modal_projector", "mm_projector", "image_newline", "audio")


def role_of(name, module):
    n = name.lower()
    cls = type(module).__name__
    if any(v in n for v in VISION):
        return "vision"
    if n.startswith("lm_head") or ".lm_head." in n:
        return "lm_head"
    if isinstance(module, torch.nn.Embedding) or "embed_tokens" in n or ".wte." in n:
        return "embeddings"
    parts = n.split(".")
    holder = parts[-2] if len(parts) > 1 else ""
    if "norm" in cls.lower() or "norm" in holder:
        return "norms"
    if isinstance(module, torch.nn.Conv1d):
        return "conv"
    if ".experts." in n or n.endswith(".experts"):
        return "experts"
    owner = n.rsplit(".", 1)[0]
    if owner.endswith(".gate") or "router" in owner or owner.endswith("shared_expert_gate"):
        return "router"
    if any(m in n for m in ("linear_attn", "mamba", "mixer", ".ssm", "ssm_")):
        return "mixer"
    if any(m in n for m in ("self_attn", "attention", ".attn.", "cross_attn")):
        return "attention"
    if any(m in n for m in ("mlp", "feed_forward", "ffn", "shared_expert")):
        return "mlp"
    return "other"


def decoder_layers(model, n_layers):
    best = None
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) == n_layers and not any(v in name for v in VISION):
            if best is None or name.endswith("layers"):
                best = m
    return best


def attention_of(layer):
    for _, m in layer.named_modules():
        if hasattr(m, "kv_a_proj_with_mqa") or hasattr(m, "k_proj") or hasattr(m, "qkv_proj"):
            return m
    # Fused projections under other names (GPT-2's c_attn, Falcon's query_key_value): the
    # attention module by its name; its K/V widths then come from the config.
    for name, m in layer.named_modules():
        last = name.rsplit(".", 1)[-1].lower()
        if last in ("attn", "attention", "self_attn", "self_attention") and "linear" not in name:
            return m
    return None


def mixer_of(layer):
    for _, m in layer.named_modules():
        if isinstance(getattr(m, "conv1d", None), torch.nn.Conv1d):
            return m
    return None


def attr(cfg, name):
    """A config attribute, or None where it has none or no single value (transformers 5.2x raises
    for an attribute that varies per layer, Gemma-4's `num_key_value_heads`)."""
    try:
        return getattr(cfg, name, None)
    except Exception:  # noqa: BLE001
        return None


def out_features(m):
    return int(getattr(m, "out_features", 0) or m.weight.shape[0])


def kv_of(attn, text):
    if hasattr(attn, "kv_a_proj_with_mqa"):
        heads = int(getattr(text, "num_attention_heads"))
        rope = int(getattr(text, "qk_rope_head_dim"))
        nope = int(getattr(text, "qk_nope_head_dim"))
        mla = {
            "kv_lora_rank": int(getattr(text, "kv_lora_rank")),
            "rope_dim": rope,
            "full_k": heads * (nope + rope),
            "full_v": heads * int(getattr(text, "v_head_dim")),
        }
        # DeepSeek sparse attention: the indexer caches one key of `head_dim` per token.
        indexer = getattr(attn, "indexer", None)
        if indexer is not None:
            mla["index_dim"] = int(indexer.head_dim)
        return {"mla": mla}
    # Gemma-4's full-attention layers set `v_proj = None`: their keys are their values.
    if getattr(attn, "k_proj", None) is not None and getattr(attn, "v_proj", None) is not None:
        return {"k": out_features(attn.k_proj), "v": out_features(attn.v_proj)}
    if getattr(attn, "k_proj", None) is not None:  # keys reused as values (a K=V layer)
        k = out_features(attn.k_proj)
        return {"k": k, "v": k}
    head_dim = int(getattr(attn, "head_dim", 0) or text.hidden_size // text.num_attention_heads)
    if hasattr(attn, "qkv_proj"):
        q = int(text.num_attention_heads) * head_dim
        kv = (out_features(attn.qkv_proj) - q) // 2
        return {"k": kv, "v": kv}
    heads = attr(text, "num_key_value_heads") or text.num_attention_heads
    kv = int(heads) * head_dim
    return {"k": kv, "v": kv, "from_config": True}


def state_of(mixer):
    conv = mixer.conv1d
    g = lambda *names: [int(getattr(mixer, n)) for n in names]  # noqa: E731
    if all(hasattr(mixer, a) for a in ("num_v_heads", "head_k_dim", "head_v_dim")):
        h, k, v = g("num_v_heads", "head_k_dim", "head_v_dim")
        ssm = h * k * v
    elif all(hasattr(mixer, a) for a in ("num_heads", "head_dim", "ssm_state_size")):
        h, d, s = g("num_heads", "head_dim", "ssm_state_size")
        ssm = h * d * s
    elif all(hasattr(mixer, a) for a in ("intermediate_size", "ssm_state_size")):
        i, s = g("intermediate_size", "ssm_state_size")
        ssm = i * s
    else:
        ssm = None
    return {"conv_channels": int(conv.in_channels), "conv_kernel": int(conv.kernel_size[0]), "ssm": ssm}


def main():
    if len(sys.argv) != 2:
        fail("usage", "derive_meta.py CONFIG.json")
    try:
        with open(sys.argv[1]) as f:
            d = json.load(f)
    except Exception as e:  # noqa: BLE001
        fail("bad_config", f"{type(e).__name__}: {e}")
    if not isinstance(d, dict) or not isinstance(d.get("model_type"), str):
        fail("bad_config", "config.json has no model_type")
    model_type = d["model_type"]
    try:
        cfg = AutoConfig.for_model(**d)
    except Exception as e:  # noqa: BLE001
        fail("unknown_model_type", f"transformers {transformers.__version__} does not know model_type `{model_type}` ({e})")
    cls = None
    for name in d.get("architectures") or []:
        cls = getattr(transformers, str(name), None)
        if cls is not None:
            break
    try:
        with torch.device("meta"):
            if cls is not None:
                model = cls(cfg)
            elif "vision_config" in d:
                from transformers import AutoModelForImageTextToText

                model = AutoModelForImageTextToText.from_config(cfg)
            else:
                model = AutoModelForCausalLM.from_config(cfg)
    except Exception as e:  # noqa: BLE001
        fail("cannot_build", f"transformers {transformers.__version__} cannot build `{model_type}`: {type(e).__name__}: {e}")

    modules = dict(model.named_modules())
    by_role, by_dtype, groups = {}, {}, {}
    total = 0
    # Persistent buffers are loaded from the checkpoint like parameters (DeepSeek-V3's
    # e_score_correction_bias); non-persistent ones (RoPE's inv_freq) are computed, not stored.
    stored = set(model.state_dict().keys())
    buffers = [(n, b) for n, b in model.named_buffers() if n in stored]
    buffer_total = sum(b.numel() for _, b in buffers)
    for name, p in list(model.named_parameters()) + buffers:
        owner = modules.get(name.rsplit(".", 1)[0], model)
        role = role_of(name, owner)
        n = p.numel()
        total += n
        by_role[role] = by_role.get(role, 0) + n
        dt = str(p.dtype).replace("torch.", "")
        by_dtype[dt] = by_dtype.get(dt, 0) + n
        shape = list(p.shape) or [1]
        if len(shape) == 1:
            rows, cols, count = 1, shape[0], 1
        else:
            rows, cols, count = shape[-2], shape[-1], 1
            for s in shape[:-2]:
                count *= s
            if len(shape) == 3 and role == "conv":
                rows, cols, count = shape[0], shape[1] * shape[2], 1
        key = (role, rows, cols)
        groups[key] = groups.get(key, 0) + count

    text = cfg.get_text_config(decoder=True)
    n_layers = int(getattr(text, "num_hidden_layers"))
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs

        cache_types, _ = get_layer_types_and_kwargs(text)
    except Exception:  # noqa: BLE001
        cache_types = getattr(text, "layer_types", None) or ["full_attention"] * n_layers
    cache_types = list(cache_types)
    layer_types = list(getattr(text, "layer_types", None) or cache_types)
    shared = int(getattr(text, "num_kv_shared_layers", 0) or 0)
    stack = decoder_layers(model, n_layers)
    if stack is None:
        fail("cannot_read", f"no list of {n_layers} decoder layers in {type(model).__name__}")
    layers = []
    for i, layer in enumerate(stack):
        kind = layer_types[i] if i < len(layer_types) else "full_attention"
        row = {"type": kind}
        attn = attention_of(layer)
        if attn is not None:
            if getattr(attn, "is_kv_shared_layer", False) or (shared and i >= n_layers - shared):
                row["shared_kv"] = True
            else:
                row.update(kv_of(attn, text))
                if "sliding" in kind:
                    row["window"] = int(getattr(text, "sliding_window"))
                elif "chunked" in kind:
                    row["window"] = int(getattr(text, "attention_chunk_size"))
        mixer = mixer_of(layer)
        if mixer is not None:
            row["state"] = state_of(mixer)
        layers.append(row)

    def get(name):
        v = attr(text, name)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def first(*names):
        for n in names:
            v = get(n)
            if v:
                return v
        return None

    sparse = sum(1 for layer in stack if any(n.endswith("experts") for n, _ in layer.named_modules()))
    experts = None
    count = first("num_experts", "num_local_experts", "n_routed_experts")
    if sparse and count:
        inter = first("moe_intermediate_size", "expert_intermediate_size", "intermediate_size") or 0
        shared = first("shared_expert_intermediate_size") or (first("n_shared_experts") or 0) * inter
        experts = {
            "count": count,
            "active": first("num_experts_per_tok", "moe_topk", "top_k") or 1,
            "intermediate_size": inter,
            "sparse_layers": sparse,
            "shared_intermediate_size": shared,
        }

    dtype = getattr(text, "dtype", None) or getattr(cfg, "dtype", None)
    out = {
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
        "model_type": model_type,
        "class": type(model).__name__,
        "parameters": total,
        "buffers": buffer_total,
        "by_role": by_role,
        "by_dtype": by_dtype,
        "tensors": [
            {"role": r, "rows": rows, "cols": cols, "count": c} for (r, rows, cols), c in sorted(groups.items())
        ],
        "config_dtype": str(dtype).replace("torch.", "") if dtype is not None else None,
        "text": {
            "model_type": getattr(text, "model_type", model_type),
            "hidden_size": get("hidden_size"),
            "intermediate_size": get("intermediate_size"),
            "num_hidden_layers": n_layers,
            "num_attention_heads": get("num_attention_heads"),
            "num_key_value_heads": get("num_key_value_heads"),
            "head_dim": get("head_dim"),
            "vocab_size": get("vocab_size"),
            "max_position_embeddings": get("max_position_embeddings"),
            "experts": experts,
            "tie_word_embeddings": bool(model.get_output_embeddings() is not None
                                        and model.get_input_embeddings() is not None
                                        and model.get_output_embeddings().weight is model.get_input_embeddings().weight),
        },
        "layers": layers,
    }
    sys.stdout.write(json.dumps(out))
    sys.stdout.write("\n")


try:
    main()
except SystemExit:
    raise
except Exception as e:  # noqa: BLE001 - one JSON line, never a traceback
    fail("cannot_read", f"transformers {transformers.__version__} built the model but llm-oom could not read it: {type(e).__name__}: {e}")
