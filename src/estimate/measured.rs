//! A peak model of this device from the probe's measurements, in place of an engine profile: the
//! measured base (CUDA context, library workspaces) and weights, the KV cache's exact bytes per
//! token, and the runtime's activations as its code predicts them (`estimate::candle`), plus what
//! the measured peaks held beyond that prediction. The probe holds the whole KV cache from the
//! start (preallocated), so both phases carry it.

use serde::Serialize;

use super::candle::{generation_activations, growth_headroom, Compute, ATTENTION_SLICE};
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
    /// How the probe computed: activation width, quantized linear layers.
    pub compute: Compute,
    /// KV-cache bytes per token per sequence, and the element width they were measured at.
    pub kv_per_token: u64,
    pub kv_elem_bytes: f64,
    /// The probe's attention slice (`None`: eager, every query at once).
    pub attention_chunk: Option<u64>,
    /// The probe materialised the scores (eager).
    pub eager: bool,
    /// The most any measured peak held beyond the runtime's predicted activations (allocator
    /// rounding, workspaces allocated mid-pass): added to every prediction.
    pub residual: u64,
    /// How far the prediction was from the measured activations, relative, at the largest prompt
    /// measured (positive: the prediction was above).
    pub formula_error: f64,
    /// The device allocates from a caching pool (CUDA), which holds freed blocks it cannot reuse.
    pub pool: bool,
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
    /// Peak of `w` on a card of `vram` bytes. Changes the probe did not run are priced by the
    /// runtime's formula: another weight dtype by its exact bytes and its compute width, another
    /// KV dtype by its width, sliced attention in place of eager.
    pub fn estimate(&self, spec: &Spec, w: &Workload, vram: u64) -> Estimate {
        let weights = if w.weight_dtype == self.weight_dtype {
            self.weights
        } else {
            weight_bytes(spec, w.weight_dtype)
        };
        let kv_scale = w.kv_dtype.elem_bytes().as_f64() / self.kv_elem_bytes;
        let kv_full = ((self.kv_per_token as f64 * kv_scale) as u64)
            .saturating_mul(w.total_tokens())
            .saturating_mul(w.batch);
        // Attention as the probe ran it; SDPA in place of a measured eager run is priced with the
        // slice the probe would use.
        let slice = match (self.attention_chunk, w.engine) {
            (Some(c), _) => Some(c),
            (None, Engine::TransformersEager) => None,
            (None, _) => Some(ATTENTION_SLICE),
        };
        let (prefill, decode) = generation_activations(
            spec,
            &if w.weight_dtype == self.weight_dtype {
                self.compute
            } else {
                Compute::of(w.weight_dtype)
            },
            w.batch,
            w.prompt_tokens,
            w.total_tokens(),
            slice,
        );
        let (prefill, decode) = (
            prefill.saturating_add(self.residual),
            decode.saturating_add(self.residual),
        );
        // a caching pool (CUDA) keeps the growing slices' freed blocks; the host heap does not
        let growth = if self.pool {
            growth_headroom(spec, w.batch, w.prompt_tokens, 0, slice)
        } else {
            0
        };
        let (peak_phase, activations, allocator) = if prefill.saturating_add(growth) >= decode {
            (
                Phase::Prefill,
                prefill,
                self.allocator_slack.saturating_add(growth),
            )
        } else {
            (Phase::Decode, decode, self.allocator_slack)
        };
        let margin = measured_margin(vram);
        Estimate {
            weights,
            kv_cache: kv_full,
            kv_cache_full: kv_full,
            activations,
            allocator,
            runtime: self.base,
            margin,
            adapters: 0,
            draft_weights: 0,
            draft_kv_cache: 0,
            vision_tower: 0,
            vision_encoder: 0,
            total: [kv_full, activations, allocator, self.base, margin]
                .into_iter()
                .fold(weights, u64::saturating_add),
            peak_phase,
        }
    }
}
