//! The peak model of this device from the probe's measurements: base (context, library
//! workspaces) and weights after the warm-up, the KV cache per token from the cache's tensors,
//! and the runtime's activations from its own formula (`estimate::candle`), checked against every
//! measured prefill and decode step. What a measured peak held beyond the formula becomes a
//! residual added to every prediction, so the budget covers what was seen; the formula is never
//! lowered to meet a smaller measurement (that would promise memory back).

use crate::dtype::WeightDtype;
use crate::estimate::candle::{forward_activations, rope_tables, Compute};
use crate::estimate::MeasuredModel;
use crate::model::Spec;

/// A prefill measurement at batch 1: prompt tokens, the context the decoder was built for (its
/// RoPE tables), and the activation bytes above what was held before (weights, base) and the cache.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefillPoint {
    pub tokens: u64,
    pub total_tokens: u64,
    pub activations: u64,
}

/// The long generation at batch 1: its context, and its prefill and decode activations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LongPoint {
    pub prompt_tokens: u64,
    pub total_tokens: u64,
    pub prefill_activations: u64,
    pub decode_activations: Option<u64>,
}

pub struct FitInput<'a> {
    pub spec: &'a Spec,
    /// How the probe computed (activation width, quantized linear layers).
    pub compute: Compute,
    /// The device allocates from a caching pool (CUDA).
    pub pool: bool,
    pub base: u64,
    /// The allocator's most slack beyond live tensors at a measured peak.
    pub allocator_slack: u64,
    pub weights: u64,
    pub weight_dtype: WeightDtype,
    pub kv_per_token: u64,
    pub kv_elem_bytes: f64,
    pub eager: bool,
    /// Query slice of the probe's sliced attention (`None`: eager).
    pub attention_chunk: Option<u64>,
    pub prefill: &'a [PrefillPoint],
    pub long: Option<LongPoint>,
}

/// The model, or `None` when no prefill was measured.
pub fn fit(input: &FitInput) -> Option<MeasuredModel> {
    if input.prefill.is_empty() {
        return None;
    }
    let c = input.compute;
    let spec = input.spec;
    let slice = input.attention_chunk;
    let predicted = |new: u64, past: u64, total: u64| {
        forward_activations(spec, &c, 1, new, past, slice) + rope_tables(spec, &c, total)
    };
    // (measured, predicted) for every measured pass
    let mut pairs: Vec<(u64, u64)> = input
        .prefill
        .iter()
        .map(|p| (p.activations, predicted(p.tokens, 0, p.total_tokens)))
        .collect();
    if let Some(l) = input.long {
        pairs.push((
            l.prefill_activations,
            predicted(l.prompt_tokens, 0, l.total_tokens),
        ));
        if let Some(d) = l.decode_activations {
            pairs.push((
                d,
                predicted(1, l.total_tokens.saturating_sub(1), l.total_tokens),
            ));
        }
    }
    let residual = pairs
        .iter()
        .map(|&(m, p)| m.saturating_sub(p))
        .max()
        .unwrap_or(0);
    let largest = input.prefill.iter().max_by_key(|p| p.tokens)?;
    let at_largest = predicted(largest.tokens, 0, largest.total_tokens) as f64;
    let formula_error = at_largest / (largest.activations.max(1) as f64) - 1.0;
    Some(MeasuredModel {
        base: input.base,
        weights: input.weights,
        weight_dtype: input.weight_dtype,
        compute: input.compute,
        kv_per_token: input.kv_per_token,
        kv_elem_bytes: input.kv_elem_bytes,
        attention_chunk: input.attention_chunk,
        eager: input.eager,
        residual,
        formula_error,
        pool: input.pool,
        allocator_slack: input.allocator_slack,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::presets;

    fn mistral() -> Spec {
        let (id, json) = presets::find("mistral-7b-instruct-v0.2").unwrap();
        presets::load(id, json).unwrap()
    }

    fn input<'a>(
        spec: &'a Spec,
        prefill: &'a [PrefillPoint],
        long: Option<LongPoint>,
    ) -> FitInput<'a> {
        FitInput {
            spec,
            compute: Compute::of(WeightDtype::Bf16),
            pool: true,
            base: 0,
            allocator_slack: 0,
            weights: 0,
            weight_dtype: WeightDtype::Bf16,
            kv_per_token: 0,
            kv_elem_bytes: 2.0,
            eager: false,
            attention_chunk: Some(256),
            prefill,
            long,
        }
    }

    fn formula(spec: &Spec, p: u64, total: u64) -> u64 {
        let c = Compute::of(WeightDtype::Bf16);
        forward_activations(spec, &c, 1, p, 0, Some(256)) + rope_tables(spec, &c, total)
    }

    #[test]
    fn what_the_passes_held_beyond_the_formula_is_kept() {
        let s = mistral();
        // the runtime's formula plus a 40 MiB workspace at one point, exact at the others
        let pts = [
            PrefillPoint {
                tokens: 16,
                total_tokens: 18,
                activations: formula(&s, 16, 18),
            },
            PrefillPoint {
                tokens: 1024,
                total_tokens: 1025,
                activations: formula(&s, 1024, 1025) + (40 << 20),
            },
            PrefillPoint {
                tokens: 2048,
                total_tokens: 2049,
                activations: formula(&s, 2048, 2049),
            },
        ];
        let m = fit(&input(&s, &pts, None)).unwrap();
        assert_eq!(m.residual, 40 << 20);
        assert_eq!(m.formula_error, 0.0);
        // measured below the formula: nothing is promised back
        let low = [PrefillPoint {
            tokens: 2048,
            total_tokens: 2049,
            activations: formula(&s, 2048, 2049) / 2,
        }];
        let m = fit(&input(&s, &low, None)).unwrap();
        assert_eq!(m.residual, 0);
        assert!((m.formula_error - 1.0).abs() < 1e-6);
        assert!(fit(&input(&s, &[], None)).is_none());
    }

    #[test]
    fn a_decode_step_beyond_the_formula_raises_the_residual() {
        let s = mistral();
        let pts = [PrefillPoint {
            tokens: 512,
            total_tokens: 513,
            activations: formula(&s, 512, 513),
        }];
        let c = Compute::of(WeightDtype::Bf16);
        let decode = forward_activations(&s, &c, 1, 1, 4095, Some(256)) + rope_tables(&s, &c, 4096);
        let long = LongPoint {
            prompt_tokens: 512,
            total_tokens: 4096,
            prefill_activations: formula(&s, 512, 4096),
            decode_activations: Some(decode + 12_345),
        };
        assert_eq!(fit(&input(&s, &pts, Some(long))).unwrap().residual, 12_345);
    }
}
