"""One out-of-memory of known cause in transformers, for scripts/gpu/same-oom.sh: random bf16
weights of a real model's shapes built with from_config on the GPU, a per-process cap
(torch.cuda.set_per_process_memory_fraction) or another process holding the card, then
generate(). Its stderr, stdout and (with llm-oom's sitecustomize on PYTHONPATH) PyTorch's
allocator record at the OOM are the fixtures that explain, watch and snapshot must agree on.

    python same-oom.py CASE [--dry-run]
--dry-run builds a 2-layer model on the CPU with tiny widths (tests the script anywhere).
"""
import argparse
import os
import subprocess
import sys
import time

# name: (model, cap GiB (None: no cap), batch, prompt, new tokens, GiB another process leaves
# free (0: no other process), truth)
CASES = {
    "weights-13b": ("llama2-13b", 20.0, 1, 16, 1, 0, "weights"),
    "kv-decode": ("llama2-7b", 13.5, 1, 1000, 3000, 0, "kv_cache"),
    "batch-48": ("mistral-7b", 20.0, 48, 2048, 16, 0, "concurrency"),
    "batch-32": ("llama2-7b", 16.0, 32, 2048, 16, 0, "concurrency"),
    "other-process": ("mistral-7b", None, 4, 8000, 16, 16, "other_process"),
    "long-prompt": ("mistral-7b", 24.0, 1, 40000, 8, 0, "activations"),
    # A long-lived process serving requests of varied, then growing, prompt lengths until one runs
    # out (the prompt slot holds where the ramp starts). Its truth is measured, not assumed:
    # scripts/gpu/same-oom.sh runs the failing length again in a fresh process and the whole
    # sequence again with expandable segments (fragmentation only if both then run further).
    "served-ramp": ("mistral-7b", 18.0, 2, 4000, 64, 0, "measured"),
    "served-ramp-b1": ("llama2-7b", 16.0, 1, 2500, 64, 0, "measured"),
    "served-ramp-b4": ("mistral-7b", 20.0, 4, 3000, 32, 0, "measured"),
}



def ramp(start):
    """A served-ramp's requests: earlier ones of varied lengths up to `start`, then a ramp in
    steps of 256 tokens."""
    varied = [start // 8, start * 3 // 4, start // 4, start, start // 16, start * 9 // 10,
              start // 2, start // 6, start * 7 // 8]
    return varied + list(range(start, 8 * start, 256))

SHAPES = {
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, vocab_size=32000),
    "llama2-13b": dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                       num_attention_heads=40, num_key_value_heads=40, vocab_size=32000),
    "mistral-7b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=32000),
}


def hold_other(leave_gib):
    """A second process that takes all of the card but `leave_gib` and sleeps; returns it once it
    holds them."""
    code = ("import torch,sys,time; f=torch.cuda.mem_get_info()[0]-int(%f*(1<<30));"
            "t=torch.empty(f,dtype=torch.uint8,device='cuda');"
            "print('held',flush=True); time.sleep(3600)" % leave_gib)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    p.stdout.readline()
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--only", type=int, help="served-ramp: one request of this many prompt tokens")
    a = ap.parse_args()
    model_name, cap, batch, prompt, new, other, truth = CASES[a.case]
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

    dev = "cpu" if a.dry_run else "cuda"
    shape = dict(SHAPES[model_name])
    if a.dry_run:
        shape.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2 if "mistral" in model_name else 4,
                     vocab_size=256)
        prompt, batch, new = min(prompt, 32), min(batch, 2), 4
    cls, cfg_cls = (MistralForCausalLM, MistralConfig) if "mistral" in model_name else (
        LlamaForCausalLM, LlamaConfig)
    cfg = cfg_cls(max_position_embeddings=65536, **shape)
    print("case %s model %s cap %s batch %d prompt %d new %d other %s truth %s" % (
        a.case, model_name, cap, batch, prompt, new, other, truth), flush=True)
    holder = None
    if not a.dry_run:
        total = torch.cuda.mem_get_info()[1]
        if cap is not None:
            torch.cuda.set_per_process_memory_fraction(cap * (1 << 30) / total)
        if other:
            holder = hold_other(other)
    try:
        torch.manual_seed(0)
        with torch.device(dev):
            model = cls._from_config(cfg, dtype=torch.bfloat16)
        model.eval()
        served = a.case.startswith("served-ramp")
        lengths = [prompt] if not served else (
            [a.only] if a.only else ramp(prompt)[:12] if a.dry_run else ramp(prompt))
        if a.dry_run:
            lengths = [min(n, 32) for n in lengths]
        t0 = time.perf_counter()
        for i, n in enumerate(lengths):
            if served:
                print("step %d prompt %d batch %d new %d start" % (i, n, batch, new), flush=True)
            ids = torch.randint(0, cfg.vocab_size, (batch, n), device=dev)
            t1 = time.perf_counter()
            with torch.no_grad():
                model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                               min_new_tokens=new, do_sample=False)
            if served:
                print("step %d prompt %d batch %d new %d ok in %.2f s" % (
                    i, n, batch, new, time.perf_counter() - t1), flush=True)
        print("ran without an OOM in %.1f s" % (time.perf_counter() - t0), flush=True)
    finally:
        if holder is not None:
            holder.kill()


if __name__ == "__main__":
    sys.exit(main())
