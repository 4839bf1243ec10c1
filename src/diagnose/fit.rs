//! Fit the peak model of this device to the probe's measurements: base (context, library
//! workspaces) and weights after the warm-up, the KV cache per token from the cache's tensors,
//! prefill activations from the first token at two prompt lengths, and what grows with the
//! context (RoPE tables, the decode step's view of the cache) from the long generation.

use crate::dtype::WeightDtype;
use crate::estimate::MeasuredModel;

/// A prefill measurement at batch 1: prompt tokens and the activation bytes above what was held
/// before (weights, base) and the cache.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefillPoint {
    pub tokens: u64,
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
    /// Bytes per (query, key) of one sequence's attention scores.
    pub score_bytes: f64,
    pub prefill: &'a [PrefillPoint],
    pub long: Option<LongPoint>,
}

/// The model, or `None` when no prefill was measured.
pub fn fit(input: &FitInput) -> Option<MeasuredModel> {
    let (act_const, act_per_token, act_scores) =
        fit_prefill(input.prefill, input.attention_chunk, input.score_bytes)?;
    let c_max = input.attention_chunk.map_or(f64::INFINITY, |c| c as f64);
    let prefill_at = |p: f64| act_const + act_per_token * p + act_scores * p.min(c_max) * p;
    let (context_per_token, decode_per_context_token) = match input.long {
        Some(l) => {
            // The same prompt's prefill, with a cache (and tables) for the whole context: what is
            // more than the first-token prefill grows with the context.
            let grown = l.prefill_activations as f64 - prefill_at(l.prompt_tokens as f64);
            let extra = l.total_tokens.saturating_sub(l.prompt_tokens + 1).max(1) as f64;
            let ctx = (grown / extra).max(0.0);
            let decode = l.decode_activations.map_or(0.0, |d| {
                (d as f64 - ctx * l.total_tokens as f64).max(0.0) / l.total_tokens.max(1) as f64
            });
            (ctx, decode)
        }
        None => (0.0, 0.0),
    };
    Some(MeasuredModel {
        base: input.base,
        weights: input.weights,
        weight_dtype: input.weight_dtype,
        kv_per_token: input.kv_per_token,
        kv_elem_bytes: input.kv_elem_bytes,
        act_const,
        act_per_token,
        act_scores,
        attention_chunk: input.attention_chunk,
        context_per_token,
        decode_per_context_token,
        eager: input.eager,
        allocator_slack: input.allocator_slack,
    })
}

/// Prefill activations as `c + a·P + s·min(P, C)·P`: a constant, what is linear in the prompt
/// (hidden states, MLP intermediates, the slice outputs), and the attention scores of one query
/// slice of `C` tokens against the prompt (`C` = ∞ for eager attention: P²). The score bytes `s`
/// are the runtime's own figure (`runtime::decoder::score_bytes`, measured in
/// tests/runtime_memory.rs), so the points only fit `c` and `a`: through the two largest, then
/// raised until every measured point is covered. Coefficients never go negative (that would
/// promise memory back).
fn fit_prefill(points: &[PrefillPoint], chunk: Option<u64>, s: f64) -> Option<(f64, f64, f64)> {
    let c_max = chunk.map_or(f64::INFINITY, |c| c as f64);
    let mut pts: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (p.tokens as f64, p.activations as f64))
        .filter(|(t, _)| *t > 0.0)
        .map(|(p, y)| (p, (y - s * p.min(c_max) * p).max(0.0)))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts.dedup_by(|a, b| a.0 == b.0);
    let (c, a) = match pts.as_slice() {
        [] => return None,
        [(p, y)] => (0.0, y / p),
        [.., (p1, y1), (p2, y2)] => {
            let a = ((y2 - y1) / (p2 - p1)).max(0.0);
            ((y2 - a * p2).max(0.0), a)
        }
    };
    // Cover every point: lift the constant by the largest shortfall.
    let short = pts.iter().map(|(p, y)| y - (c + a * p)).fold(0.0, f64::max);
    Some((c + short, a, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(tokens: u64, activations: u64) -> PrefillPoint {
        PrefillPoint {
            tokens,
            activations,
        }
    }

    fn at(fit: (f64, f64, f64), chunk: f64, p: f64) -> f64 {
        fit.0 + fit.1 * p + fit.2 * p.min(chunk) * p
    }

    #[test]
    fn the_constant_and_the_line_are_fitted_beside_the_known_scores() {
        // Sliced attention, slices of 256: quadratic below 256 tokens, linear above.
        let truth = |p: f64| 5000.0 + 300.0 * p + 36.0 * p.min(256.0) * p;
        for probed in [[16.0, 32.0, 64.0], [16.0, 1024.0, 2048.0]] {
            let pts: Vec<_> = probed
                .iter()
                .map(|&p| pt(p as u64, truth(p) as u64))
                .collect();
            let f = fit_prefill(&pts, Some(256), 36.0).unwrap();
            for p in [16.0, 200.0, 4096.0, 40_000.0] {
                let e = (at(f, 256.0, p) - truth(p)) / truth(p);
                assert!((-1e-3..0.02).contains(&e), "probed {probed:?}, at {p}: {e}");
            }
        }
        // Eager: no slice, P² throughout.
        let truth = |p: f64| 300.0 * p + 36.0 * p * p;
        let pts = [pt(16, truth(16.0) as u64), pt(512, truth(512.0) as u64)];
        let f = fit_prefill(&pts, None, 36.0).unwrap();
        assert!((at(f, f64::INFINITY, 8000.0) - truth(8000.0)).abs() / truth(8000.0) < 1e-3);
    }

    #[test]
    fn noise_never_makes_a_coefficient_negative_and_every_point_is_covered() {
        let pts = [pt(16, 9000), pt(100, 5000), pt(200, 6000)];
        let f = fit_prefill(&pts, Some(256), 0.0).unwrap();
        assert!(f.0 >= 0.0 && f.1 >= 0.0, "{f:?}");
        for p in pts {
            assert!(
                at(f, 256.0, p.tokens as f64) >= p.activations as f64,
                "{f:?}"
            );
        }
        assert_eq!(fit_prefill(&[], Some(256), 1.0), None);
    }

    #[test]
    fn what_grows_with_the_context_is_taken_from_the_long_generation() {
        // Prefill 1000 + 10·P (with tables of 16 B per position of the first token's context);
        // decode 40 B per context token.
        let m = fit(&FitInput {
            base: 0,
            allocator_slack: 0,
            weights: 0,
            weight_dtype: WeightDtype::F32,
            kv_per_token: 0,
            kv_elem_bytes: 4.0,
            eager: false,
            attention_chunk: Some(256),
            score_bytes: 0.0,
            prefill: &[pt(100, 1000 + 26 * 100 + 16), pt(200, 1000 + 26 * 200 + 16)],
            long: Some(LongPoint {
                prompt_tokens: 200,
                total_tokens: 1200,
                prefill_activations: 1000 + 10 * 200 + 16 * 1201,
                decode_activations: Some(16 * 1200 + 40 * 1200),
            }),
        })
        .unwrap();
        assert!(
            (m.context_per_token - 16.0).abs() < 0.1,
            "{}",
            m.context_per_token
        );
        assert!((m.decode_per_context_token - 40.0).abs() < 0.1);
    }
}
