#!/usr/bin/env python3
"""Where the edge row's decisive run spends its time: one process builds Mistral-7B (random bf16
weights of the preset's shapes) on the GPU and runs the same plain generate() three times
(b x p prompt, n new tokens), timing each and the allocator's counters each added (retries after a
failed cudaMalloc, cudaMalloc and cudaFree calls). The first call is what the fresh run meets; the
second and third show what is first-use cost (--no-cudnn-sdp: without SDPA's cuDNN backend, which
builds an execution graph for every new sequence length). With --vram-limit GiB, PyTorch's pool is capped with
set_per_process_memory_fraction as a card of that size (weights included).

    python3 scripts/gpu/edge-generate.py [--vram-limit 24] [-p 4096] [-b 8] [-n 256]

One JSON line per generate() on stdout.
"""
import argparse
import json
import os
import sys
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GIB = 1 << 30


def counters():
    s = torch.cuda.memory_stats()
    return {k: s.get(k, 0) for k in ("num_alloc_retries", "num_device_alloc", "num_device_free", "num_ooms")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vram-limit", type=float, default=None)
    ap.add_argument("-p", type=int, default=4096)
    ap.add_argument("-b", type=int, default=8)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--preset", default="mistral-7b-instruct-v0.2")
    ap.add_argument("--no-cudnn-sdp", action="store_true", help="turn SDPA's cuDNN backend off")
    a = ap.parse_args()
    if a.no_cudnn_sdp:
        torch.backends.cuda.enable_cudnn_sdp(False)
    t0 = time.perf_counter()
    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    if a.vram_limit:
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.vram_limit * GIB / total))
    with open(os.path.join(ROOT, "presets", a.preset + ".json")) as f:
        raw = json.load(f)
    raw = raw.get("config", raw)
    cfg = AutoConfig.for_model(**raw)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    torch.cuda.synchronize()
    print(json.dumps({"what": "build", "seconds": round(time.perf_counter() - t0, 3),
                      "card": torch.cuda.get_device_name(0), "vram_limit_gib": a.vram_limit,
                      "cudnn_sdp": torch.backends.cuda.cudnn_sdp_enabled(),
                      "torch": torch.__version__}), flush=True)
    g = torch.Generator().manual_seed(0)
    for i in range(3):
        ids = torch.randint(3, cfg.vocab_size - 1, (a.b, a.p), generator=g).to("cuda")
        before = counters()
        torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        try:
            with torch.no_grad():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.n,
                                     min_new_tokens=a.n, do_sample=False)
            torch.cuda.synchronize()
            outcome, gen = "ok", out.shape[1] - a.p
            del out
        except torch.OutOfMemoryError as e:
            outcome, gen = "oom: " + str(e).splitlines()[0][:120], 0
        dt = time.perf_counter() - t
        after = counters()
        print(json.dumps({"what": "generate", "run": i + 1, "outcome": outcome, "generated": int(gen),
                          "seconds": round(dt, 3),
                          "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / GIB, 3),
                          **{k: after[k] - before[k] for k in after}}), flush=True)
        del ids


if __name__ == "__main__":
    sys.exit(main())
