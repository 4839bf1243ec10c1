#!/usr/bin/env python3
"""Measure what Hugging Face transformers really allocates, to calibrate llm-oom's engine profiles.

Runs on a CUDA machine with torch + transformers. Models are built from llm-oom's own preset configs
(presets/*.json) with random weights directly on the GPU: memory is the same as with real weights.

For each model it records, as JSON lines:
  kind=model   weights (torch.cuda.memory_allocated after load), CUDA context (NVML used - reserved)
  kind=case    one generate() call: attention implementation, dtype, batch, prompt, new tokens,
               peak allocated / reserved above the weights
  kind=limit   under a memory cap emulating a smaller card, the largest prompt that survives
               generate(max_new_tokens=256) at a batch size (binary search; a cuDNN failure near the
               limit counts as a failure, as it does for users)

Usage: python3 scripts/calibrate/transformers_memory.py OUT.jsonl [--budget-s 480]
"""
import argparse, gc, json, os, subprocess, sys, time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
PRESETS = os.path.join(HERE, "..", "..", "presets")
GIB = 1 << 30

MODELS = [
    # (preset file, cases) — cases: (attn, batch, prompt, new)
    ("mistral-7b-instruct-v0.2", "full"),
    ("qwen2.5-0.5b-instruct", "full"),
    ("llama-2-7b", "full"),
    ("meta-llama-3-8b", "full"),
    ("qwen2.5-7b-instruct", "short"),
    ("gemma-2-9b-it", "short"),
    ("phi-3-mini-4k-instruct", "short"),
]
FULL = [
    ("sdpa", 1, 512, 1), ("sdpa", 1, 2048, 1), ("sdpa", 1, 8192, 1), ("sdpa", 1, 16384, 1),
    ("sdpa", 4, 2048, 1), ("sdpa", 1, 2048, 64), ("sdpa", 8, 1024, 64), ("sdpa", 1, 8192, 64),
    ("eager", 1, 512, 1), ("eager", 1, 2048, 1), ("eager", 1, 4096, 1), ("eager", 2, 2048, 1),
]
SHORT = [("sdpa", 1, 2048, 1), ("sdpa", 1, 4096, 64), ("sdpa", 4, 1024, 1), ("eager", 1, 2048, 1)]


def nvml_used():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=10).stdout
        return int(out.strip().splitlines()[0]) * (1 << 20)
    except Exception:
        return None


def emit(f, rec):
    rec["t"] = round(time.time(), 1)
    f.write(json.dumps(rec) + "\n")
    f.flush()
    print(json.dumps(rec), flush=True)


def build(name, dtype):
    cfg_dict = json.load(open(os.path.join(PRESETS, name + ".json")))
    model_type = cfg_dict.pop("model_type")
    cfg_dict.pop("_name_or_path", None)
    cfg_dict.pop("architectures", None)
    cfg = AutoConfig.for_model(model_type, **cfg_dict)
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
        except TypeError:
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype, attn_implementation="sdpa")
    model.eval()
    return model, cfg


def set_attn(model, impl):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(impl)
    else:
        model.config._attn_implementation = impl


def is_oom(e):
    s = str(e)
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in s or "is_good()" in s \
        or "CUBLAS_STATUS_ALLOC_FAILED" in s or "CUDNN" in s.upper()


def run_case(model, vocab, batch, prompt, new):
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    base_alloc = torch.cuda.memory_allocated()
    base_res = torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    ids = torch.randint(3, vocab - 1, (batch, prompt), device="cuda")
    mask = torch.ones_like(ids)
    t0 = time.time()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                             do_sample=False, use_cache=True, pad_token_id=0, eos_token_id=None)
    torch.cuda.synchronize()
    dt = time.time() - t0
    gen = out.shape[1] - prompt
    del out, ids, mask
    return {
        "peak_alloc": torch.cuda.max_memory_allocated() - base_alloc,
        "peak_reserved": torch.cuda.max_memory_reserved() - base_res,
        "base_alloc": base_alloc,
        "generated": int(gen),
        "seconds": round(dt, 3),
    }


def largest_prompt(f, model, name, vocab, batch, new, cap, lo, hi, deadline, attn="sdpa"):
    """Binary search the largest prompt that survives generate() under `cap` bytes of torch memory."""
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(cap / total)
    trials = []
    try:
        # The bracket must start from a prompt that fits; widen downwards if it does not.
        while lo > 64:
            try:
                run_case(model, vocab, batch, lo, new)
                trials.append((lo, True))
                break
            except Exception as e:  # noqa: BLE001
                if not is_oom(e):
                    raise
                trials.append((lo, False))
                hi, lo = lo, lo // 2
                gc.collect(); torch.cuda.empty_cache()
        while hi - lo > max(16, lo // 50) and time.time() < deadline:
            mid = (lo + hi) // 2
            try:
                run_case(model, vocab, batch, mid, new)
                ok = True
            except Exception as e:  # noqa: BLE001 - OOM in any disguise is a failure
                if not is_oom(e):
                    raise
                ok = False
            trials.append((mid, ok))
            if ok:
                lo = mid
            else:
                hi = mid
            gc.collect(); torch.cuda.empty_cache()
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    emit(f, {"kind": "limit", "model": name, "attn": attn, "batch": batch, "new": new, "torch_cap": cap,
             "largest_ok": lo, "smallest_fail": hi, "trials": trials})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--budget-s", type=float, default=480)
    ap.add_argument("--only", default="")
    ap.add_argument("--limits", default="",
                    help="only limit searches: preset:batch:attn:lo:hi,... (24 GiB card, 256 new tokens)")
    args = ap.parse_args()
    start = time.time()
    deadline = start + args.budget_s
    f = open(args.out, "w")
    props = torch.cuda.get_device_properties(0)
    torch.cuda.init()
    torch.ones(1, device="cuda")
    ctx = nvml_used()
    # CUDA context + what torch.ones reserved: what a card loses before the first tensor.
    context = (ctx - torch.cuda.memory_reserved()) if ctx else 512 << 20
    emit(f, {"kind": "env", "gpu": props.name, "total": props.total_memory, "torch": torch.__version__,
             "transformers": transformers.__version__, "nvml_used_after_init": ctx,
             "reserved_after_init": torch.cuda.memory_reserved()})
    if args.limits:
        for spec in args.limits.split(","):
            name, batch, attn, lo, hi = spec.split(":")
            if time.time() > deadline:
                emit(f, {"kind": "skipped", "model": name, "why": "time budget"})
                continue
            model, cfg = build(name, torch.bfloat16)
            set_attn(model, attn)
            largest_prompt(f, model, name, cfg.vocab_size, int(batch), 256, 24 * GIB - max(context, 0),
                           int(lo), int(hi), deadline, attn)
            del model
            gc.collect(); torch.cuda.empty_cache()
        emit(f, {"kind": "done", "seconds": round(time.time() - start, 1)})
        return
    for name, which in MODELS:
        if args.only and name not in args.only.split(","):
            continue
        if time.time() > deadline:
            emit(f, {"kind": "skipped", "model": name, "why": "time budget"})
            continue
        for dtype in ([torch.bfloat16, torch.float16] if name.startswith("mistral") else [torch.bfloat16]):
            gc.collect(); torch.cuda.empty_cache()
            before = torch.cuda.memory_allocated()
            t0 = time.time()
            model, cfg = build(name, dtype)
            torch.cuda.synchronize()
            weights = torch.cuda.memory_allocated() - before
            emit(f, {"kind": "model", "model": name, "dtype": str(dtype).split(".")[-1], "weights": weights,
                     "build_s": round(time.time() - t0, 2), "nvml_used": nvml_used(),
                     "reserved": torch.cuda.memory_reserved(), "params": sum(p.numel() for p in model.parameters())})
            vocab = cfg.vocab_size
            cases = (FULL if which == "full" else SHORT) if dtype == torch.bfloat16 else FULL[:2] + FULL[8:10]
            maxpos = getattr(cfg, "max_position_embeddings", 1 << 30)
            for attn, batch, prompt, new in cases:
                if prompt + new > maxpos or time.time() > deadline:
                    continue
                set_attn(model, attn)
                try:
                    r = run_case(model, vocab, batch, prompt, new)
                    r["outcome"] = "ok"
                except Exception as e:  # noqa: BLE001
                    r = {"outcome": "oom" if is_oom(e) else "error", "error": str(e)[:300]}
                emit(f, dict(kind="case", model=name, dtype=str(dtype).split(".")[-1], attn=attn,
                             batch=batch, prompt=prompt, new=new, **r))
            set_attn(model, "sdpa")
            if dtype == torch.bfloat16 and name in ("mistral-7b-instruct-v0.2", "meta-llama-3-8b"):
                # A 24 GiB card: torch may use 24 GiB minus the CUDA context it would have there.
                cap = 24 * GIB - max(context, 0)
                # transformers does not enforce max_position_embeddings for these models; the
                # search may pass it, which makes the memory limit, not the context, the answer.
                hi1 = 120000
                largest_prompt(f, model, name, vocab, 1, 256, cap, 1024, hi1, deadline)
                if name.startswith("mistral"):
                    largest_prompt(f, model, name, vocab, 8, 256, cap, 256, 16384, deadline)
            del model
            gc.collect(); torch.cuda.empty_cache()
    emit(f, {"kind": "done", "seconds": round(time.time() - start, 1)})


if __name__ == "__main__":
    main()
