//! The llm-oom runtime's own activations (`src/runtime/decoder.rs`), read off its code: the
//! tensors one forward pass holds at each of its peak moments. `plan --engine candle` and the
//! probe's measured budget price with it; `tests/runtime_memory.rs` measures the runtime against
//! it, and the H200 runs in docs/accuracy.md check it against `diagnose --find-limits`.
//!
//! Sizes are per forward pass of `new` tokens for each of `batch` sequences, after `past` cached
//! tokens, in the compute dtype's width `d`. Weights and the preallocated KV cache are not
//! included (they are exact elsewhere).

use crate::model::Spec;

/// Bytes alive per (query, key) pair of one sequence at the peak of the runtime's attention: two
/// f32 score copies per head while one replaces the other and the 4-byte mask; or, while the mask
/// is built (on the CPU its broadcast operands are materialised), one copy per head and 13 bytes.
/// Measured by tests/runtime_memory.rs.
pub fn score_bytes(heads: u64) -> u64 {
    (8 * heads + 4).max(4 * heads + 13)
}

/// The query slice the probe's sliced attention uses (`None`: eager, all queries at once).
pub type Slice = Option<u64>;

/// Peak transient bytes of one forward pass (see the module doc).
pub fn forward_activations(
    spec: &Spec,
    d: f64,
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
    let b = batch as f64;
    let t = b * new as f64;
    let ctx = (past + new) as f64;
    let n = slice.map_or(new, |c| c.min(new)) as f64;
    // The residual stream and the block's normed input live through each block.
    let stream = 2.0 * h;
    // q, k, v after their projections, reshaped; RoPE makes the rotated copy of q before the
    // unrotated one is freed. A fused qkv stays whole until its three views are reshaped.
    let projections = if spec.fused_projections {
        2.0 * q + 4.0 * kv
    } else {
        2.0 * q + 2.0 * kv
    };
    // The last query slice: the slices' outputs so far, its scores against every key, and the
    // contiguous copy of the keys (or values) it multiplies with.
    let last_slice = b
        * ((new as f64 - n) * q * d
            + n * ctx * score_bytes(spec.num_heads) as f64
            + ctx * kv * d
            + 2.0 * n * q * d);
    let attention = [
        t * d * (stream + projections),
        t * d * (stream + q) + last_slice,
        // the slices' outputs, concatenated, then transposed for o_proj
        t * d * (stream + 2.0 * q),
        t * d * (stream + q + h),
    ]
    .into_iter()
    .fold(0.0, f64::max);
    let mlp = t * d * stream + mlp_bytes(spec, t, d);
    // After the last block: the stream, the last position normed, its logits and their f32 copy.
    let head = t * h * d + b * (h * d + spec.vocab_size as f64 * (d + 4.0));
    attention.max(mlp).max(head) as u64
}

/// The MLP's intermediates for `t` tokens (beyond the stream): gate, its activation and up, or
/// the product replacing them; a fused gate_up is kept whole while its halves are in use. Experts
/// run one at a time on the tokens routed to them; a skewed routing is allowed for (2× their
/// share), plus the accumulated output and the gathered inputs.
fn mlp_bytes(spec: &Spec, t: f64, d: f64) -> f64 {
    let copies = if spec.fused_projections { 4.0 } else { 3.0 };
    let h = spec.hidden_size as f64;
    match &spec.experts {
        Some(e) if e.sparse_layers > 0 => {
            let share = (2.0 * e.active as f64 / e.count as f64).min(1.0);
            let routed = t * share;
            let expert = routed * d * (copies * e.intermediate_size as f64 + 2.0 * h);
            let shared = t * d * (copies * e.shared_intermediate_size as f64 + h);
            let dense = t * d * copies * spec.intermediate_size as f64;
            // router logits and their f32 softmax; the output being accumulated (and its next copy)
            let router = t * e.count as f64 * (d + 8.0);
            (router + 2.0 * t * h * d + expert.max(shared)).max(dense)
        }
        _ => t * d * copies * spec.intermediate_size as f64,
    }
}

/// The RoPE tables and position ids a decoder for `max_len` tokens holds: cos and sin
/// (`max_len × head_dim/2` each, compute dtype) and `max_len` u32 positions.
pub fn rope_tables(spec: &Spec, d: f64, max_len: u64) -> u64 {
    (max_len as f64 * (spec.head_dim as f64 * d + 4.0)) as u64
}

/// Prefill and last-decode-step transients of a generation: the prompt in one pass, then a
/// step at the last position of `prompt + new` tokens, each with the decoder's tables.
pub fn generation_activations(
    spec: &Spec,
    d: f64,
    batch: u64,
    prompt: u64,
    total: u64,
    slice: Slice,
) -> (u64, u64) {
    let tables = rope_tables(spec, d, total);
    let prefill = forward_activations(spec, d, batch, prompt, 0, slice) + tables;
    let decode =
        forward_activations(spec, d, batch, 1, total.saturating_sub(1), slice) + tables;
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
        let f = |p: u64, slice| forward_activations(&s, 2.0, 1, p, 0, slice) as f64;
        // sliced: doubling a long prompt doubles the transients
        let r = f(40_000, Some(256)) / f(20_000, Some(256));
        assert!((1.95..2.05).contains(&r), "{r}");
        // eager: the L² scores dominate
        let r = f(8_000, None) / f(4_000, None);
        assert!(r > 3.5, "{r}");
        // Mistral's MLP dominates a short prompt: 2h + 3i values per token
        let mlp = 2.0 * (2.0 * 4096.0 + 3.0 * 14336.0);
        assert_eq!(f(512, Some(256)), 512.0 * mlp);
    }

    #[test]
    fn a_decode_step_grows_with_the_context_it_attends_to() {
        let s = preset("mistral-7b-instruct-v0.2");
        let a = forward_activations(&s, 2.0, 4, 1, 1_000, Some(256));
        let b = forward_activations(&s, 2.0, 4, 1, 30_000, Some(256));
        assert!(b > 10 * a, "{a} {b}");
    }
}
