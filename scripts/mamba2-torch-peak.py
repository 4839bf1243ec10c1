"""Peak bytes of one Mamba-2 mixer's prefill on transformers' pure-torch path, measured on CPU.

Builds a one-layer Nemotron-H (`M`) model, runs its mixer over a prompt with a cache (as
`generate` does) and records every allocation through torch.profiler's memory events; the peak
of live bytes above what was there before the call is compared with the closed form that
src/estimate/mod.rs (`ssd_scan_bytes`) uses. Assumes mamba-ssm and causal-conv1d are absent, so
`mamba2_chunk_scan` and `causal_conv1d_fn` run their torch fallbacks.

    python scripts/mamba2-torch-peak.py
"""

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import NemotronHConfig, NemotronHForCausalLM
from transformers.cache_utils import DynamicCache


def formula(b, s, h, p, g, n, c, d):
    """Mirror of ssd_scan_bytes + the mixer's in_proj / conv outputs (d bytes per element)."""
    S = -(-s // c) * c
    T = b * S
    nc = S // c
    inner = h * p
    conv = inner + 2 * g * n
    proj = inner + conv + h
    mixer = d * b * s * (proj + conv + h) + 4 * T * 2 * h
    f = 4
    base = f * T * (2 * h * p + 2 * h * n + h * c)  # D_residual, x, B, C, L
    g_stage = base + f * T * (c * h * n + c * h)
    y_stage = base + f * T * (2 * c * h + c * h * p + h * p)
    states = f * b * (nc + 1) * h * p * n
    s_stage = base + f * T * (2 * c * h + 2 * h * p + h * n + h * p * n) + f * b * nc * h * p * n
    c_stage = base + f * T * (2 * c * h + 3 * h * p + h * n + h * p * n) + states
    return mixer + max(g_stage, y_stage, s_stage, c_stage)


def measure(b, s, h, p, g, n, c, dtype=torch.bfloat16):
    cfg = NemotronHConfig(
        hidden_size=256,
        vocab_size=64,
        hybrid_override_pattern="M",
        mamba_num_heads=h,
        mamba_head_dim=p,
        n_groups=g,
        ssm_state_size=n,
        chunk_size=c,
        num_attention_heads=4,
        num_key_value_heads=4,
    )
    model = NemotronHForCausalLM(cfg).to(dtype).eval()
    mixer = model.model.layers[0].mixer
    x = torch.randn(b, s, cfg.hidden_size, dtype=dtype)
    cache = DynamicCache(config=cfg)
    with torch.no_grad():
        mixer(x, cache_params=DynamicCache(config=cfg))  # warm-up
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = mixer(x, cache_params=cache)
    events = [
        e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    ]
    events.sort(key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak, out


def main():
    cases = [
        # b, s, heads, head_dim, groups, state, chunk
        (1, 256, 8, 16, 2, 32, 64),
        (1, 500, 8, 16, 2, 32, 64),
        (2, 384, 8, 16, 1, 32, 128),
        (1, 512, 16, 32, 4, 16, 32),
        (1, 1024, 8, 32, 2, 64, 128),
    ]
    for b, s, h, p, g, n, c in cases:
        peak, _ = measure(b, s, h, p, g, n, c)
        want = formula(b, s, h, p, g, n, c, 2)
        print(
            f"b={b} s={s} h={h} p={p} g={g} n={n} c={c}: measured {peak:,} formula {want:,} "
            f"ratio {want / peak:.4f}"
        )


if __name__ == "__main__":
    main()
