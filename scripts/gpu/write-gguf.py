#!/usr/bin/env python3
"""Write a GGUF with a real model's shapes and synthetic weights, for llama.cpp memory runs.

The file has the tensor names, shapes, metadata keys and quantized on-disk layouts that llama.cpp's
loader expects for the model of a Hugging Face config.json (a preset of this repo or any path), and
a synthetic but valid tokenizer of the real vocabulary size, so `llama completion` loads it,
tokenizes a prompt and generates. Weights are random blocks with small valid scales (no NaN/Inf),
written straight in the quantized layout (no llama-quantize pass), streamed tensor by tensor from
one reused random buffer per type: memory stays at a few MiB and the speed is the disk's.

    python3 scripts/gpu/write-gguf.py llama-3.1-8b-instruct --type Q4_K_M --out /tmp/l8.gguf
    python3 scripts/gpu/write-gguf.py presets/qwen2.5-7b-instruct.json --type Q8_0 --out q.gguf
    python3 scripts/gpu/write-gguf.py qwen3-30b-a3b --type Q4_K_M --layers 2 --out small.gguf

--type: F16 | Q8_0 | Q4_K (every quantizable tensor Q4_K, like `llama-quantize --pure ... Q4_K_M`)
| Q4_K_M (llama-quantize's own mix: Q6_K output and some attn_v/ffn_down, see q4_k_m_type).
--layers N keeps the first N blocks (the per-layer shapes stay real). A name without a slash is
looked up as presets/NAME.json, then scripts/gpu/gguf-configs/NAME.json.

Needs python3 + numpy and llama.cpp's gguf-py (pure Python; PyYAML is stubbed out when missing): --gguf-py DIR, else $GGUF_PY, else
.gl/llama-cpp-cuda/gguf-py (where scripts/build-llama-cpp.sh's archive unpacks), else `import gguf`.
"""

import argparse
import json
import math
import os
import sys
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
QK_K = 256
BUFFER_BLOCKS = 1 << 15  # blocks in the reused random buffer of each type (about 4.5 MiB of Q4_K)


def import_gguf(explicit):
    candidates = [explicit, os.environ.get("GGUF_PY"), str(ROOT / ".gl/llama-cpp-cuda/gguf-py")]
    for path in candidates:
        if path and Path(path, "gguf", "__init__.py").is_file():
            sys.path.insert(0, str(path))
            break
    try:
        import yaml  # noqa: F401,PLC0415  (gguf.metadata imports it; only model cards use it)
    except ImportError:
        sys.modules["yaml"] = types.ModuleType("yaml")
    try:
        import gguf  # noqa: PLC0415
    except ImportError:
        sys.exit("write-gguf: gguf-py not found; pass --gguf-py DIR (the folder holding gguf/) "
                 "or set GGUF_PY")
    return gguf


def load_config(name):
    path = Path(name)
    if not path.is_file() and "/" not in name:
        for folder in (ROOT / "presets", ROOT / "scripts/gpu/gguf-configs"):
            if (folder / f"{name}.json").is_file():
                path = folder / f"{name}.json"
                break
    if not path.is_file():
        sys.exit(f"write-gguf: no config {name!r}; give a config.json path or a preset name")
    cfg = json.loads(path.read_text())
    return cfg.get("text_config", cfg), path.stem


# ---------------------------------------------------------------- model description ---

class Model:
    """The hyperparameters llama.cpp needs, read from a Hugging Face config."""

    def __init__(self, cfg, layers):
        self.model_type = cfg["model_type"]
        self.arch = {"llama": "llama", "mistral": "llama", "mixtral": "llama", "qwen2": "qwen2",
                     "qwen3": "qwen3", "qwen3_moe": "qwen3moe", "olmoe": "olmoe"}.get(self.model_type)
        if self.arch is None:
            sys.exit(f"write-gguf: model_type {self.model_type!r} is not supported "
                     "(llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, olmoe)")
        self.n_embd = cfg["hidden_size"]
        self.n_layer_real = cfg["num_hidden_layers"]
        self.n_layer = min(layers, self.n_layer_real) if layers else self.n_layer_real
        self.n_head = cfg["num_attention_heads"]
        self.n_head_kv = cfg.get("num_key_value_heads") or self.n_head
        self.head_dim = cfg.get("head_dim") or self.n_embd // self.n_head
        self.n_ff = cfg["intermediate_size"]
        self.n_vocab = cfg["vocab_size"]
        self.n_ctx = cfg.get("max_position_embeddings", 4096)
        self.rope_theta = float(cfg.get("rope_theta", 10000.0))
        self.rms_eps = float(cfg.get("rms_norm_eps", 1e-5))
        self.n_expert = cfg.get("num_local_experts") or cfg.get("num_experts") or 0
        self.n_expert_used = cfg.get("num_experts_per_tok") or 0
        self.n_ff_exp = cfg.get("moe_intermediate_size") or self.n_ff
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        self.rope_scaling = cfg.get("rope_scaling") or {}
        self.explicit_head_dim = "head_dim" in cfg

    @property
    def llama3_rope(self):
        return self.rope_scaling.get("rope_type") == "llama3"

    def is_70b(self):
        """llama.cpp's LLM_TYPE_70B, which bumps attn_v in the Q4_K_M mix."""
        if self.n_layer_real != 80:
            return False
        return self.arch == "qwen2" or (self.arch == "llama" and self.n_head != self.n_head_kv)


def tensor_list(m):
    """(name, ggml shape ne0..neN, kind) in the order convert_hf_to_gguf writes them.

    kind: 'weight' (quantized by the chosen type), 'norm' (F32 ones), 'bias' (F32 zeros),
    'router' (F32, never quantized), 'rope_freqs' (F32 llama3 factors).
    """
    E, D, V = m.n_embd, m.head_dim, m.n_vocab
    q_dim, kv_dim = m.n_head * D, m.n_head_kv * D
    out = []
    if m.llama3_rope:
        out.append(("rope_freqs.weight", [D // 2], "rope_freqs"))
    out.append(("token_embd.weight", [E, V], "weight"))
    for i in range(m.n_layer):
        b = f"blk.{i}."
        out.append((b + "attn_norm.weight", [E], "norm"))
        out.append((b + "attn_q.weight", [E, q_dim], "weight"))
        out.append((b + "attn_k.weight", [E, kv_dim], "weight"))
        out.append((b + "attn_v.weight", [E, kv_dim], "weight"))
        if m.arch == "qwen2":
            out += [(b + "attn_q.bias", [q_dim], "bias"), (b + "attn_k.bias", [kv_dim], "bias"),
                    (b + "attn_v.bias", [kv_dim], "bias")]
        if m.arch in ("qwen3", "qwen3moe"):
            out += [(b + "attn_q_norm.weight", [D], "norm"), (b + "attn_k_norm.weight", [D], "norm")]
        if m.arch == "olmoe":
            out += [(b + "attn_q_norm.weight", [E], "norm"), (b + "attn_k_norm.weight", [E], "norm")]
        out.append((b + "attn_output.weight", [q_dim, E], "weight"))
        out.append((b + "ffn_norm.weight", [E], "norm"))
        if m.n_expert:
            X, F = m.n_expert, m.n_ff_exp
            out.append((b + "ffn_gate_inp.weight", [E, X], "router"))
            out += [(b + "ffn_gate_exps.weight", [E, F, X], "weight"),
                    (b + "ffn_up_exps.weight", [E, F, X], "weight"),
                    (b + "ffn_down_exps.weight", [F, E, X], "weight")]
        else:
            F = m.n_ff
            out += [(b + "ffn_gate.weight", [E, F], "weight"), (b + "ffn_up.weight", [E, F], "weight"),
                    (b + "ffn_down.weight", [F, E], "weight")]
    out.append(("output_norm.weight", [E], "norm"))
    if not m.tied:
        out.append(("output.weight", [E, V], "weight"))
    return out


def check_names(gguf, m, tensors):
    """Every name must be one gguf-py lists for this architecture (catches a typo here)."""
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == m.arch)
    known = set()
    for t in gguf.MODEL_TENSORS[arch]:
        pattern = gguf.TENSOR_NAMES[t]
        if "{bid}" in pattern:
            known.update(pattern.format(bid=i) for i in range(m.n_layer))
        else:
            known.add(pattern)
    for name, _, _ in tensors:
        if name.rsplit(".", 1)[0] not in known:
            sys.exit(f"write-gguf: internal error: {name} is not a {m.arch} tensor in gguf-py")


# ---------------------------------------------------------------- tensor types ---

def fallback(T, qtype, ne0):
    """llama-quant.cpp tensor_type_fallback: a row length the block size does not divide."""
    blck = T.block(qtype)
    if ne0 % blck == 0:
        return qtype
    G = T.G
    alt = {G.Q4_K: G.Q5_0, G.Q5_K: G.Q5_1, G.Q6_K: G.Q8_0}.get(qtype, qtype)
    return alt if ne0 % T.block(alt) == 0 else G.F16


def q4_k_m_type(T, m, name, ne, wv):
    """llama_tensor_get_type_impl for LLAMA_FTYPE_MOSTLY_Q4_K_M (any arch but falcon).

    wv = (index of this attn_v among all attn_v, their count): llama-quant's i/n_attention_wv.
    """
    G = T.G

    def more_bits(i, n):
        return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2

    layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
    if name == "output.weight" or (m.tied and name == "token_embd.weight"):
        return G.Q8_0 if ne[0] % QK_K else G.Q6_K
    if name.endswith("attn_v.weight"):
        t = G.Q6_K if more_bits(*wv) else G.Q4_K
        if m.is_70b() and t == G.Q4_K:
            t = G.Q5_K
        return G.Q8_0 if m.n_expert == 8 else t
    if name.endswith("attn_k.weight"):
        return G.Q8_0 if m.n_expert == 8 else G.Q4_K
    if "ffn_down" in name:
        return G.Q6_K if more_bits(layer, m.n_layer) else G.Q4_K
    if name.endswith("attn_output.weight") and m.n_expert == 8:
        return G.Q5_K
    return G.Q4_K


def choose_types(T, m, tensors, mode):
    G = T.G
    n_wv = sum(1 for n, _, _ in tensors if n.endswith("attn_v.weight"))
    i_wv = 0
    types = []
    for name, ne, kind in tensors:
        if kind != "weight":
            types.append(G.F32)
            continue
        if mode == "F16":
            t = G.F16
        elif mode == "Q8_0":
            t = G.Q8_0
        elif mode == "Q4_K":
            t = G.Q4_K
        else:
            t = q4_k_m_type(T, m, name, ne, (i_wv, n_wv))
        if name.endswith("attn_v.weight"):
            i_wv += 1
        types.append(fallback(T, t, ne[0]) if t != G.F16 else t)
    return types


# ---------------------------------------------------------------- block layouts ---

class Types:
    def __init__(self, gguf):
        self.G = gguf.GGMLQuantizationType
        self.sizes = gguf.GGML_QUANT_SIZES

    def block(self, t):
        return self.sizes[t][0]

    def nbytes(self, t, ne):
        n = math.prod(ne)
        blck, size = self.sizes[t]
        if ne[0] % blck:
            raise ValueError(f"row of {ne[0]} is not a multiple of {blck}")
        return n // blck * size


def f16_bytes(values):
    return values.astype(np.float16).view(np.uint8).reshape(len(values), 2)


def random_blocks(T, t, rng, n):
    """n valid blocks of type t as a uint8 array (n, block bytes): weights of magnitude ~0.02."""
    G = T.G
    size = T.sizes[t][1]
    b = rng.integers(0, 256, size=(n, size), dtype=np.uint8)

    def scale(lo, hi):
        return f16_bytes(rng.uniform(lo, hi, n))

    if t == G.F32:
        return (rng.standard_normal(n) * 0.02).astype(np.float32).view(np.uint8).reshape(n, 4)
    if t == G.F16:
        return f16_bytes(rng.standard_normal(n) * 0.02)
    if t == G.Q8_0:            # d, qs[32]
        b[:, 0:2] = scale(1.5e-4, 3e-4)
    elif t == G.Q5_0:          # d, qh[4], qs[16]
        b[:, 0:2] = scale(5e-4, 1.5e-3)
    elif t == G.Q5_1:          # d, m, qh[4], qs[16]
        b[:, 0:2] = scale(5e-4, 1.5e-3)
        b[:, 2:4] = f16_bytes(-rng.uniform(0.01, 0.02, n))
    elif t in (G.Q4_K, G.Q5_K):  # d, dmin, scales[12] (6-bit), [qh[32]], qs[128]
        top = 1e-4 if t == G.Q4_K else 5e-5
        b[:, 0:2] = scale(top / 2, top)
        b[:, 2:4] = scale(top / 2, top)
    elif t == G.Q6_K:          # ql[128], qh[64], scales[16] (int8), d
        b[:, 192:208] = rng.integers(-31, 32, size=(n, 16), dtype=np.int8).view(np.uint8)
        b[:, 208:210] = scale(3e-5, 7e-5)
    else:
        raise ValueError(f"no block layout for {t.name}")
    return b


class Filler:
    """One random buffer per type, written over and over from a random block offset."""

    def __init__(self, T, seed):
        self.T, self.rng, self.buffers = T, np.random.default_rng(seed), {}

    def write(self, fout, t, nbytes):
        buf = self.buffers.get(t)
        if buf is None:
            buf = random_blocks(self.T, t, self.rng, BUFFER_BLOCKS).tobytes()
            self.buffers[t] = buf
        size = self.T.sizes[t][1]
        start = int(self.rng.integers(0, BUFFER_BLOCKS)) * size
        view = memoryview(buf)
        left = nbytes
        chunk = view[start:start + min(left, len(buf) - start)]
        while left > 0:
            fout.write(chunk)
            left -= len(chunk)
            chunk = view[:min(left, len(buf))]


def constant_f32(kind, ne, m):
    n = math.prod(ne)
    if kind == "norm":
        return np.ones(n, dtype=np.float32)
    if kind == "bias":
        return np.zeros(n, dtype=np.float32)
    if kind == "rope_freqs":
        return llama3_rope_factors(m)
    return None


def llama3_rope_factors(m):
    """convert_hf_to_gguf's LlamaModel rope_freqs for rope_type llama3."""
    s = m.rope_scaling
    factor, low, high = s.get("factor", 8.0), s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old = s.get("original_max_position_embeddings", 8192)
    freqs = 1.0 / (m.rope_theta ** (np.arange(0, m.head_dim, 2, dtype=np.float64) / m.head_dim))
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


# ---------------------------------------------------------------- tokenizer ---

def bytes_to_unicode():
    """GPT-2's byte -> printable character map (the 256 base tokens of a byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


# special tokens (id offset from the first special, text) of the real tokenizers
LLAMA3_SPECIALS = {0: "<|begin_of_text|>", 1: "<|end_of_text|>", 6: "<|start_header_id|>",
                   7: "<|end_header_id|>", 8: "<|eom_id|>", 9: "<|eot_id|>", 10: "<|python_tag|>"}
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                 "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                 "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                 "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
                 "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
QWEN3_EXTRA = ["<tool_response>", "</tool_response>", "<think>", "</think>"]


def bpe_vocab(m):
    """A byte-level BPE of the real size: 256 byte tokens, a few merged words, fillers, specials."""
    normal = list(bytes_to_unicode().values())
    merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ w", "r e", "l l"]
    for mrg in merges:
        normal.append(mrg.replace(" ", ""))
    if m.arch in ("qwen2", "qwen3", "qwen3moe"):
        first_special = 151643
        specials = QWEN_SPECIALS + (QWEN3_EXTRA if m.arch != "qwen2" else [])
        special_at = {first_special + i: s for i, s in enumerate(specials)}
        pre, bos, eos, add_bos = "qwen2", first_special, first_special + 2, False
    elif m.arch == "olmoe":
        first_special = 50279
        special_at = {1: "<|padding|>", first_special: "<|endoftext|>"}
        pre, bos, eos, add_bos = "olmo", first_special, first_special, False
    else:
        first_special = 128000
        special_at = {first_special + k: s for k, s in LLAMA3_SPECIALS.items()}
        special_at.update({first_special + k: f"<|reserved_special_token_{k}|>"
                           for k in range(256) if first_special + k not in special_at})
        pre, bos, eos, add_bos = "llama-bpe", first_special, first_special + 9, True
    if first_special > m.n_vocab:
        first_special = m.n_vocab
    tokens, types = [], []
    CONTROL, NORMAL, UNUSED = 3, 1, 5
    n_normal = 0
    for i in range(m.n_vocab):
        if i in special_at:
            tokens.append(special_at[i])
            types.append(CONTROL)
        elif i < first_special:
            tokens.append(normal[n_normal] if n_normal < len(normal) else f"[tok{i}]")
            types.append(NORMAL)
            n_normal += 1
        else:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
    return dict(model="gpt2", pre=pre, tokens=tokens, types=types, merges=merges,
                bos=bos if bos < m.n_vocab else None, eos=eos if eos < m.n_vocab else None,
                add_bos=add_bos)


def spm_vocab(m):
    """A SentencePiece ('llama') vocab: <unk> <s> </s>, the 256 <0xXX> byte tokens, then pieces."""
    pieces = ["▁", "▁t", "he", "▁the", "in", "▁a", "er", "on", "▁w", "re"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    for i in range(len(tokens), m.n_vocab):
        k = i - 259
        tokens.append(pieces[k] if k < len(pieces) else f"▁tok{i}")
        types.append(1)
    scores = [0.0] * 259 + [-float(i) for i in range(m.n_vocab - 259)]
    return dict(model="llama", pre=None, tokens=tokens, types=types, scores=scores,
                bos=1, eos=2, unk=0, add_bos=True)


def vocab_for(m):
    if m.arch == "llama" and m.n_vocab < 100000:
        return spm_vocab(m)
    return bpe_vocab(m)


# ---------------------------------------------------------------- writing ---

def add_metadata(w, gguf, m, name, mode, vocab):
    ftype = {"F16": gguf.LlamaFileType.MOSTLY_F16, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
             "Q4_K": gguf.LlamaFileType.MOSTLY_Q4_K_M, "Q4_K_M": gguf.LlamaFileType.MOSTLY_Q4_K_M}[mode]
    w.add_type("model")
    w.add_name(f"{name} (synthetic weights, {mode})")
    w.add_context_length(m.n_ctx)
    w.add_embedding_length(m.n_embd)
    w.add_block_count(m.n_layer)
    w.add_feed_forward_length(m.n_ff)
    w.add_head_count(m.n_head)
    w.add_head_count_kv(m.n_head_kv)
    w.add_rope_freq_base(m.rope_theta)
    w.add_layer_norm_rms_eps(m.rms_eps)
    w.add_rope_dimension_count(m.head_dim)
    if m.explicit_head_dim:
        w.add_key_length(m.head_dim)
        w.add_value_length(m.head_dim)
    if m.n_expert:
        w.add_expert_count(m.n_expert)
        w.add_expert_used_count(m.n_expert_used)
        if m.arch == "qwen3moe":
            w.add_expert_feed_forward_length(m.n_ff_exp)
    w.add_vocab_size(m.n_vocab)
    w.add_file_type(ftype)
    if mode != "F16":
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_tokenizer_model(vocab["model"])
    if vocab["pre"]:
        w.add_tokenizer_pre(vocab["pre"])
    w.add_token_list(vocab["tokens"])
    if "scores" in vocab:
        w.add_token_scores(vocab["scores"])
    w.add_token_types(vocab["types"])
    if "merges" in vocab:
        w.add_token_merges(vocab["merges"])
    for key, adder in (("bos", w.add_bos_token_id), ("eos", w.add_eos_token_id), ("unk", w.add_unk_token_id)):
        if vocab.get(key) is not None:
            adder(vocab[key])
    w.add_add_bos_token(vocab["add_bos"])


def write(args):
    gguf = import_gguf(args.gguf_py)
    cfg, name = load_config(args.model)
    m = Model(cfg, args.layers)
    T = Types(gguf)
    tensors = tensor_list(m)
    check_names(gguf, m, tensors)
    types = choose_types(T, m, tensors, args.type)
    vocab = vocab_for(m)

    sizes = [T.nbytes(t, ne) for (_, ne, _), t in zip(tensors, types)]
    if args.dry_run:
        summary(args, m, tensors, types, sizes, 0.0, None)
        return
    w = gguf.GGUFWriter(args.out, m.arch)
    add_metadata(w, gguf, m, name, args.type, vocab)
    for (tname, ne, _), t, nbytes in zip(tensors, types, sizes):
        # numpy order (ne reversed); a non-uint8 dtype makes gguf-py take the shape as elements
        w.add_tensor_info(tname, list(reversed(ne)), np.dtype(np.float32), nbytes, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    fout = w.fout[0]
    align = w.data_alignment
    filler = Filler(T, args.seed)
    t0 = time.time()
    for (tname, ne, kind), t, nbytes in zip(tensors, types, sizes):
        fout.write(b"\0" * (-fout.tell() % align))
        start = fout.tell()
        data = constant_f32(kind, ne, m)
        if data is not None:
            fout.write(data.tobytes())
        else:
            filler.write(fout, t, nbytes)
        if fout.tell() - start != nbytes:
            sys.exit(f"write-gguf: internal error: {tname} wrote {fout.tell() - start} of {nbytes} bytes")
    fout.write(b"\0" * (-fout.tell() % align))
    w.close()
    summary(args, m, tensors, types, sizes, time.time() - t0, os.path.getsize(args.out))


def summary(args, m, tensors, types, sizes, seconds, total):
    counts = {}
    for (_, _, kind), t, n in zip(tensors, types, sizes):
        c = counts.setdefault(t.name, [0, 0])
        c[0] += 1
        c[1] += n
    total = total if total is not None else sum(sizes)
    mix = ", ".join(f"{k} x{c}" for k, (c, _) in sorted(counts.items()))
    print(json.dumps({
        "out": args.out, "arch": m.arch, "type": args.type, "layers": m.n_layer,
        "layers_real": m.n_layer_real, "tensors": len(tensors), "bytes": total,
        "tensor_bytes": sum(sizes), "types": {k: {"tensors": c, "bytes": b} for k, (c, b) in counts.items()},
        "seconds": round(seconds, 2),
    }))
    print(f"write-gguf: {args.out}: {total / 2**30:.2f} GiB, {mix}, {seconds:.1f} s", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", help="preset name (presets/, scripts/gpu/gguf-configs/) or config.json path")
    p.add_argument("--type", required=True, choices=["F16", "Q8_0", "Q4_K", "Q4_K_M"])
    p.add_argument("--out", default="-", help="the .gguf to write")
    p.add_argument("--layers", type=int, help="keep only the first N blocks")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gguf-py", help="folder holding llama.cpp's gguf-py package (gguf/)")
    p.add_argument("--dry-run", action="store_true", help="print the tensor types and sizes, write nothing")
    args = p.parse_args()
    if args.layers is not None and args.layers < 1:
        p.error("--layers must be at least 1")
    if args.out == "-" and not args.dry_run:
        p.error("--out FILE is required (or --dry-run)")
    write(args)


if __name__ == "__main__":
    main()
