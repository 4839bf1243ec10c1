//! A peak model fitted to the probe's measurements on this device, in place of an engine profile:
//! the measured base (CUDA context), weights, KV bytes per token, and prefill activations as a
//! function of the prompt length (linear for sliced attention; linear + quadratic for eager).
//! The probe holds the whole KV cache from the start (preallocated), so both phases carry it.

use serde::Serialize;

use super::{weight_bytes, Engine, Estimate, Phase, Workload};
use crate::dtype::WeightDtype;
use crate::model::Spec;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MeasuredModel {
    /// Device bytes held before the weights: CUDA context and libraries (the heap's baseline on CPU).
    pub base: u64,
    /// Weights as loaded, and their dtype.
    pub weights: u64,
    pub weight_dtype: WeightDtype,
    /// KV-cache bytes per token per sequence, and the element width they were measured at.
    pub kv_per_token: u64,
    pub kv_elem_bytes: f64,
    /// Prefill activations per sequence: `act_const + act_per_token·P + act_scores·min(P, C)·P`,
    /// where C is the probe's query slice (`attention_chunk`; none for eager: P²).
    pub act_const: f64,
    pub act_per_token: f64,
    pub act_scores: f64,
    pub attention_chunk: Option<u64>,
    /// Bytes per token of context (prompt + new) held once, whatever the batch (RoPE tables).
    pub context_per_token: f64,
    /// Activations of a decode step per sequence, per token of context it attends to.
    pub decode_per_context_token: f64,
    /// The probe materialised the scores (eager); the quadratic term applies only to eager.
    pub eager: bool,
    /// What the allocator held beyond live tensors at the measured peaks (CUDA's pool: blocks it
    /// cannot hand back or reuse), the most seen in any stage.
    pub allocator_slack: u64,
}

/// The margin a measured budget keeps: 2 % of the card, at least 256 KiB. Smaller than a profile's
/// (which must absorb an engine's unmeasured allocations): the measured peaks are this runtime's
/// own, so the margin only covers run-to-run variation and the allocator's block rounding.
pub fn measured_margin(vram: u64) -> u64 {
    (vram / 50).max(256 << 10)
}

impl MeasuredModel {
    /// Peak of `w` on a card of `vram` bytes. Changes the probe did not run are priced by the parts
    /// that do not depend on the engine: another weight dtype by its exact bytes, another KV dtype by
    /// its width, SDPA in place of eager by dropping the quadratic term.
    pub fn estimate(&self, spec: &Spec, w: &Workload, vram: u64) -> Estimate {
        let weights = if w.weight_dtype == self.weight_dtype {
            self.weights
        } else {
            weight_bytes(spec, w.weight_dtype)
        };
        let width = |d: WeightDtype| d.compute_kv_dtype().elem_bytes().as_f64();
        let act_scale = width(w.weight_dtype) / width(self.weight_dtype);
        let kv_scale = w.kv_dtype.elem_bytes().as_f64() / self.kv_elem_bytes;
        let kv_full = (self.kv_per_token as f64 * kv_scale) as u64 * w.total_tokens() * w.batch;
        let p = w.prompt_tokens as f64;
        // Score rows alive at once: the slice, or the whole prompt for eager; SDPA in place of a
        // measured eager run is priced with the slice the probe would use (256).
        let rows = match (self.attention_chunk, w.engine) {
            (Some(c), _) => p.min(c as f64),
            (None, Engine::TransformersEager) => p,
            (None, _) => p.min(256.0),
        };
        let t = w.total_tokens() as f64;
        let shared = self.context_per_token * t;
        let prefill = ((w.batch as f64
            * (self.act_const + self.act_per_token * p + self.act_scores * rows * p)
            + shared)
            * act_scale) as u64;
        let decode =
            ((w.batch as f64 * self.decode_per_context_token * t + shared) * act_scale) as u64;
        let (peak_phase, activations) = if prefill >= decode {
            (Phase::Prefill, prefill)
        } else {
            (Phase::Decode, decode)
        };
        let margin = measured_margin(vram);
        Estimate {
            weights,
            kv_cache: kv_full,
            kv_cache_full: kv_full,
            activations,
            allocator: self.allocator_slack,
            runtime: self.base,
            margin,
            total: weights + kv_full + activations + self.allocator_slack + self.base + margin,
            peak_phase,
        }
    }
}
