#!/usr/bin/env python3
"""What a draft model adds to transformers' generate() on the GPU, beside `plan --draft-model`.

Builds the target and the draft from their config.json (random weights, the real shapes) in
bf16 with AutoModelForCausalLM.from_config, runs generate() of one sequence alone and with
assistant_model= (num_assistant_tokens K, the eos token off so every run makes all its tokens),
and prints one JSON object: torch.cuda.max_memory_allocated of each run, the draft's parameter
bytes and what the draft added to the peak, to set beside `plan --json --draft-model`'s rows
(docs/plan.md). On an H100 the example below takes about two minutes.

    python scripts/gpu/draft-real.py presets/llama-3.1-8b-instruct.json \
        tests/fixtures/draft/llama-3.2-1b-instruct.json --prompt 100 --new 400 --k 20
"""

import argparse
import json


def build(path, torch, transformers):
    cfg = transformers.AutoConfig.for_model(**json.load(open(path)))
    with torch.device("cuda"):
        m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    return m.eval()


def run(target, ids, new, torch, **kw):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        out = target.generate(
            ids,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            **kw,
        )
    torch.cuda.synchronize()
    return {
        "allocated_before": base,
        "peak_allocated": torch.cuda.max_memory_allocated(),
        "new_tokens": int(out.shape[1] - ids.shape[1]),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("draft")
    ap.add_argument("--prompt", type=int, default=100)
    ap.add_argument("--new", type=int, default=2000)
    ap.add_argument("--k", type=int, default=20)
    a = ap.parse_args()
    import torch
    import transformers

    torch.manual_seed(0)
    target = build(a.target, torch, transformers)
    ids = torch.randint(100, 1000, (1, a.prompt), device="cuda")
    alone = run(target, ids, a.new, torch)
    before = torch.cuda.memory_allocated()
    draft = build(a.draft, torch, transformers)
    draft_bytes = torch.cuda.memory_allocated() - before
    with_draft = run(
        target,
        ids,
        a.new,
        torch,
        assistant_model=draft,
        num_assistant_tokens=a.k,
        num_assistant_tokens_schedule="constant",
    )
    print(
        json.dumps(
            {
                "transformers": transformers.__version__,
                "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name(),
                "prompt": a.prompt,
                "new": a.new,
                "k": a.k,
                "draft_weight_bytes": draft_bytes,
                "alone": alone,
                "with_draft": with_draft,
                "peak_added_by_draft": with_draft["peak_allocated"] - alone["peak_allocated"],
            }
        )
    )


if __name__ == "__main__":
    main()
