"""One case of scripts/gpu/snapshot-h200.sh: transformers generate() on Mistral-7B shapes (random
bf16 weights) under a ballast that leaves CAP_GIB of the card, run with llm-oom's sitecustomize
on PYTHONPATH so the allocator snapshot is written at the OOM. Cases: load, long_prompt, batch,
fragmented, decode (timing only: 2,048 + 128 tokens, prints seconds).

    python snapshot-workload.py CASE [--cap-gib N] [--layers N] [--dry-run]
--dry-run builds a 2-layer model on the CPU and generates 4 tokens (to test the script anywhere).
"""
import argparse
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["load", "long_prompt", "batch", "fragmented", "decode"])
    ap.add_argument("--cap-gib", type=float, default=24.0)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    import torch
    from transformers import MistralConfig, MistralForCausalLM

    dev = "cpu" if a.dry_run else "cuda"
    cfg = MistralConfig(num_hidden_layers=2 if a.dry_run else a.layers, vocab_size=32768,
                        hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                        num_key_value_heads=8, max_position_embeddings=65536)
    if a.dry_run:
        cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads = 64, 128, 4, 2
        cfg.vocab_size = 256
    ballast = None
    if not a.dry_run:
        free, total = torch.cuda.mem_get_info()
        keep = int(a.cap_gib * (1 << 30))
        ballast = torch.empty(max(0, free - keep), dtype=torch.uint8, device=dev)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = MistralForCausalLM(cfg)
    model = model.to(torch.bfloat16).to_empty(device="cpu")  # uninitialised: "random" weights
    model = model.to(dev)  # the load: weights cross to the card here (a load OOM happens here)
    model.eval()
    prompt, batch, new = {"long_prompt": (40_000, 1, 8), "batch": (4_096, 24, 256),
                          "fragmented": (2_048, 1, 16), "decode": (2_048, 1, 128),
                          "load": (16, 1, 1)}[a.case]
    if a.dry_run:
        prompt, batch, new = min(prompt, 32), min(batch, 2), 4
    if a.case == "fragmented" and not a.dry_run:
        # Split one cached 2 GiB segment into 10 MiB tensors and free every other one: 100 holes
        # the allocator cannot release (live neighbours), none fit a 64 MiB request once the
        # rest of the card is taken.
        big = torch.empty(2 << 30, dtype=torch.uint8, device=dev)
        del big
        keep = [torch.empty(10 << 20, dtype=torch.uint8, device=dev) for _ in range(200)]
        del keep[::2]
        free, _ = torch.cuda.mem_get_info()
        filler = torch.empty(max(0, free - (8 << 20)), dtype=torch.uint8, device=dev)
        torch.empty(64 << 20, dtype=torch.uint8, device=dev)
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt), device=dev)
    t0 = time.perf_counter()
    with torch.no_grad():
        model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False)
    if dev == "cuda":
        torch.cuda.synchronize()
    print("seconds %.3f" % (time.perf_counter() - t0))
    del ballast


if __name__ == "__main__":
    sys.exit(main())
