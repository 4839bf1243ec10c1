//! The llm-oom runtime's own activations (`src/runtime/decoder.rs`), read off its code: the
//! tensors one forward pass holds at each of its peak moments. `plan --engine candle` and the
//! probe's measured budget price with it; `tests/runtime_activations.rs` measures the runtime
//! against it, and the H200 runs in docs/accuracy.md check it against `diagnose --find-limits`.
//!
//! Sizes are per forward pass of `new` tokens for each of `batch` sequences, after `past` cached
//! tokens. Weights and the preallocated KV cache are not included (they are exact elsewhere).

use crate::dtype::WeightDtype;
use crate::model::Spec;

/// How the runtime computes: the activations' element width, and whether linear layers are
/// quantized (their matmuls take and give f32, beside the activations' own dtype).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Compute {
    pub d: f64,
    pub quantized: bool,
}

impl Compute {
    /// The runtime's compute for weights of `dtype`: 16-bit activations for 16-bit and quantized
    /// weights, f32 for f32.
    pub fn of(dtype: WeightDtype) -> Compute {
        Compute {
            d: dtype.compute_kv_dtype().elem_bytes().as_f64(),
            quantized: matches!(dtype, WeightDtype::Gguf(_)),
        }
    }
}

/// Bytes alive per (query, key) pair of one sequence at the peak of the runtime's eager attention:
/// two f32 score copies per head while one replaces the other and the 4-byte mask; or, while the
/// mask is built (on the CPU its broadcast operands are materialised), one copy per head and 13
/// bytes. Measured by tests/runtime_memory.rs.
pub fn score_bytes(heads: u64) -> u64 {
    (8 * heads + 4).max(4 * heads + 13)
}

/// The same for sliced attention, whose one-step masked softmax
/// (`runtime::masked_softmax`) holds the scores and their probabilities, both `d` bytes wide,
/// and nothing else per pair. Measured by tests/runtime_memory.rs.
pub fn sliced_score_bytes(heads: u64, d: f64) -> f64 {
    2.0 * d * heads as f64
}

/// Queries per attention slice in the probe (and so in `plan --engine candle`).
pub const ATTENTION_SLICE: u64 = 256;

/// The query slice of sliced attention (`None`: eager, all queries at once).
pub type Slice = Option<u64>;

/// Peak transient bytes of one forward pass (see the module doc).
pub fn forward_activations(
    spec: &Spec,
    c: &Compute,
    batch: u64,
    new: u64,
    past: u64,
    slice: Slice,
) -> u64 {
    let (h, q, kv) = (
        spec.hidden_size as f64,
        spec.q_dim() as f64,
        spec.kv_dim() as f64,
    );
    let d = c.d;
    // a quantized projection's f32 input copy and f32 output, per token
    let qx = |inp: f64, out: f64| if c.quantized { 4.0 * (inp + out) } else { 0.0 };
    let b = batch as f64;
    let t = b * new as f64;
    // The residual stream and the block's normed input live through each block.
    let stream = 2.0 * h;
    // q, k, v after their projections, reshaped; RoPE makes the rotated copy of q before the
    // unrotated one is freed. A fused qkv stays whole until its three views are reshaped.
    let projections = if spec.fused_projections {
        2.0 * q + 4.0 * kv
    } else {
        2.0 * q + 2.0 * kv
    };
    // The worst query slice: the slices' outputs so far, its scores against the keys it sees,
    // and the contiguous copy of those keys (or values). The last slice sees the most keys; the
    // one before it may hold more queries (the last is what remains of the prompt).
    let chunk = slice.map_or(new, |c| c.clamp(1, new.max(1)));
    let pair = match slice {
        Some(_) => sliced_score_bytes(spec.num_heads, d),
        None => score_bytes(spec.num_heads) as f64,
    };
    let slice_at = |start: u64| {
        let n = chunk.min(new.saturating_sub(start)) as f64;
        let seen = past.saturating_add(start) as f64 + n;
        b * (start as f64 * q * d + n * seen * pair + seen * kv * d + 2.0 * n * q * d)
    };
    let last_start = new.saturating_sub(1) / chunk * chunk;
    let worst_slice = slice_at(last_start).max(slice_at(last_start.saturating_sub(chunk)));
    let attention = [
        t * (d * (stream + projections) + qx(h, q)),
        t * d * (stream + q) + worst_slice,
        // the slices' outputs, concatenated, then transposed for o_proj
        t * d * (stream + 2.0 * q),
        t * d * (stream + q + h),
    ]
    .into_iter()
    .fold(0.0, f64::max);
    let mlp = t * d * stream + mlp_bytes(spec, t, c);
    // After the last block: the stream, the last position normed, its logits and their f32 copy.
    let head = t * h * d + b * (h * d + spec.vocab_size as f64 * (d + 4.0));
    attention.max(mlp).max(head) as u64
}

/// The MLP's intermediates for `t` tokens (beyond the stream): gate, its activation and up, or
/// the product replacing them; a fused gate_up is kept whole while its halves are in use. Experts
/// run one at a time on the tokens routed to them; a skewed routing is allowed for (2× their
/// share), plus the accumulated output and the gathered inputs.
fn mlp_bytes(spec: &Spec, t: f64, c: &Compute) -> f64 {
    let d = c.d;
    let copies = if spec.fused_projections { 4.0 } else { 3.0 };
    let h = spec.hidden_size as f64;
    // gate (or gate_up) held while the next projection runs, quantized: through f32
    let dense = |inter: f64| {
        let plain = copies * inter * d;
        if c.quantized {
            plain.max((copies - 1.0) * inter * d + 4.0 * (h + inter))
        } else {
            plain
        }
    };
    match &spec.experts {
        Some(e) if e.sparse_layers > 0 => {
            let share = (2.0 * e.active as f64 / e.count as f64).min(1.0);
            let routed = t * share;
            let expert = routed * (dense(e.intermediate_size as f64) + 2.0 * h * d);
            let shared = t * (dense(e.shared_intermediate_size as f64) + h * d);
            let dense_layers = t * dense(spec.intermediate_size as f64);
            // router logits and their f32 softmax; the output being accumulated (and its next copy)
            let router = t * e.count as f64 * (d + 8.0);
            (router + 2.0 * t * h * d + expert.max(shared)).max(dense_layers)
        }
        _ => t * dense(spec.intermediate_size as f64),
    }
}

/// What the device's memory pool holds beyond live tensors during a sliced prefill: each slice's
/// scores are larger than the last slice's (it sees more keys), so the freed block of the previous
/// slice cannot serve the next request and stays reserved beside it. One f32 score block of the
/// worst slice; nothing when the prompt fits in one slice. docs/accuracy.md has the H200 runs.
pub fn growth_headroom(spec: &Spec, batch: u64, new: u64, past: u64, slice: Slice) -> u64 {
    match slice {
        Some(c) if new > c => {
            (batch as f64
                * c as f64
                * past.saturating_add(new) as f64
                * 4.0
                * spec.num_heads as f64) as u64
        }
        _ => 0,
    }
}

/// The RoPE tables and position ids a decoder for `max_len` tokens holds: cos and sin
/// (`max_len × head_dim/2` each, compute dtype) and `max_len` u32 positions.
pub fn rope_tables(spec: &Spec, c: &Compute, max_len: u64) -> u64 {
    (max_len as f64 * (spec.head_dim as f64 * c.d + 4.0)) as u64
}

/// Prefill and last-decode-step transients of a generation: the prompt in one pass, then a
/// step at the last position of `prompt + new` tokens, each with the decoder's tables.
pub fn generation_activations(
    spec: &Spec,
    c: &Compute,
    batch: u64,
    prompt: u64,
    total: u64,
    slice: Slice,
) -> (u64, u64) {
    let tables = rope_tables(spec, c, total);
    let prefill = forward_activations(spec, c, batch, prompt, 0, slice).saturating_add(tables);
    let decode = forward_activations(spec, c, batch, 1, total.saturating_sub(1), slice)
        .saturating_add(tables);
    (prefill, decode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::presets;

    fn preset(id: &str) -> Spec {
        let (id, json) = presets::find(id).unwrap_or_else(|| panic!("{id}"));
        presets::load(id, json).unwrap()
    }

    #[test]
    fn long_prompts_are_linear_with_sliced_attention_and_quadratic_without() {
        let s = preset("mistral-7b-instruct-v0.2");
        let c = Compute::of(WeightDtype::Bf16);
        let f = |p: u64, slice| forward_activations(&s, &c, 1, p, 0, slice) as f64;
        // sliced: doubling a long prompt doubles the transients
        let r = f(40_000, Some(256)) / f(20_000, Some(256));
        assert!((1.95..2.05).contains(&r), "{r}");
        // eager: the L² scores dominate
        let r = f(8_000, None) / f(4_000, None);
        assert!(r > 3.5, "{r}");
        // at least Mistral's MLP: 2h + 3i values per token (its last slice's scores are close)
        let mlp = 2.0 * (2.0 * 4096.0 + 3.0 * 14336.0);
        assert!(f(512, Some(256)) >= 512.0 * mlp);
    }

    #[test]
    fn a_decode_step_grows_with_the_context_it_attends_to() {
        let s = preset("mistral-7b-instruct-v0.2");
        let c = Compute::of(WeightDtype::Bf16);
        let a = forward_activations(&s, &c, 4, 1, 1_000, Some(256));
        let b = forward_activations(&s, &c, 4, 1, 30_000, Some(256));
        assert!(b > 10 * a, "{a} {b}");
    }
}
