//! What llama-server does with its own defaults before it loads: the slots (`-np`, 4 sharing one
//! unified cache when not given) and `--fit` (on by default), which lowers an automatic context
//! (`-c 0`, the model's trained one) until the model, its cache and its compute buffer leave
//! `--fit-target` (1,024 MiB) of the card free, and moves layers to the CPU when not even
//! `--fit-ctx` (4,096) tokens do. Read in llama.cpp b11312 (0c1e570):
//!
//! - tools/server/server.cpp: `n_parallel < 0` (auto, common/arg.cpp) → `n_parallel = 4`,
//!   `kv_unified = true`;
//! - common/common.h: `n_ctx = 0` (the trained context), `fit_params = true`,
//!   `fit_params_min_ctx = 4096`, `fit_params_target = 1024 MiB` a device, `n_gpu_layers = -1`
//!   (auto);
//! - common/fit.cpp `common_params_fit_impl`: with `n_streams = kv_unified ? 1 : n_seq_max`, an
//!   automatic context is `n_ctx_train × n_streams`; when the projected use (model + context +
//!   compute buffers) leaves less than the target free, it measures again at `n_ctx_min ×
//!   n_streams` and interpolates linearly between the two, rounding down to `256 × n_streams`;
//!   where even the minimum does not fit, the context stays at the minimum and the layers are
//!   filled back to front on the GPU, the rest on the CPU (not when `-ngl` was set by the user);
//!   a context the user set (`-c N`) is never changed.
//!
//! "Free" is what the driver reports once the backend is up, so the CUDA context is not in it:
//! here the card less `RUNTIME_AT_FIT`, what llama.cpp's process held when it measured (the
//! H200 records of docs/calibration/llamacpp-h200-2026-12-01.jsonl: 524 MiB, before cuBLAS and the
//! CUDA pool grow it to the run's `llamacpp::runtime`).

use serde::Serialize;

use super::llamacpp::{self, compute_buffer, gpu_weights, kv_cache, CTX_PAD};
use super::Workload;
use crate::model::Spec;

/// The llama.cpp build whose rules these are.
pub const BUILD: &str = "llama.cpp b11312 (0c1e570)";

/// llama-server's slots when `-np` is not given (tools/server/server.cpp).
pub const AUTO_SLOTS: u64 = 4;
/// `--fit-target`'s default: MiB left free on each device (common/common.h).
pub const DEFAULT_TARGET: u64 = 1024 << 20;
/// `--fit-ctx`'s default: the smallest context `--fit` sets (common/common.h).
pub const DEFAULT_MIN_CTX: u64 = 4096;
/// The trained context assumed where the checkpoint does not say.
pub const UNKNOWN_TRAINED: u64 = 131_072;

/// llama-server's start-up knobs as given; `None` = its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerArgs {
    /// `--fit on|off` [on].
    pub fit: Option<bool>,
    /// `--fit-target` in bytes [1,024 MiB].
    pub target: Option<u64>,
    /// `--fit-ctx` [4,096].
    pub min_ctx: Option<u64>,
    /// `-c 0`: the context is llama-server's to choose (the trained one, lowered by `--fit`).
    pub ctx_auto: bool,
    /// `-np` as given; `None` = auto (4 slots over one unified cache).
    pub slots: Option<u64>,
    /// `--kv-unified` given with `-np`.
    pub unified: bool,
}

impl ServerArgs {
    /// Whether llama-server's own choice is asked for: `-c 0` or `--fit` given.
    pub fn is_asked(&self) -> bool {
        self.ctx_auto || self.fit.is_some() || self.target.is_some() || self.min_ctx.is_some()
    }
}

/// What `--fit` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The projected use leaves the target free: nothing changed.
    Unchanged,
    /// The automatic context was lowered until it did.
    ContextReduced,
    /// Not even the minimum context fits with every layer: the context stays at the minimum and
    /// layers go to the CPU.
    LayersToCpu,
    /// The user set `-c`: the context stays, and layers go to the CPU if it does not fit.
    UserContext,
    /// `--fit off`: llama-server loads what it was given.
    Off,
}

/// llama-server's choice, with the figures it decided on.
#[derive(Debug, Clone, Serialize)]
pub struct Fitted {
    pub build: &'static str,
    /// Slots (`-np`), and whether llama-server chose them.
    pub slots: u64,
    pub slots_auto: bool,
    /// One cache that every slot shares.
    pub unified: bool,
    /// The context it loads with, and the automatic one it started from (trained × streams).
    pub n_ctx: u64,
    pub n_ctx_auto: Option<u64>,
    pub fit: bool,
    pub outcome: Outcome,
    /// `--fit-target` and `--fit-ctx` in force.
    pub target_bytes: u64,
    pub min_ctx: u64,
    /// The device memory free when llama-server measures, and its projected use (model +
    /// context + compute) at the context it started from and at the one it loads with.
    pub free_bytes: u64,
    pub projected_start_bytes: u64,
    pub projected_bytes: u64,
    /// Layers llama-server keeps on the GPU where not all fit (`-ngl` it sets), else `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layers_on_gpu: Option<u64>,
}

/// What llama.cpp's process holds on the card when `--fit` reads the free memory: the CUDA
/// context with the backend up, nothing of cuBLAS or the CUDA pool yet. Both `--fit` runs recorded
/// on the H200 (b11312, docs/calibration/llamacpp-h200-2026-12-01.jsonl) printed 7,667 MiB free
/// where the ballast had left 8,191.1 MiB: 524 MiB, whatever the model.
pub const RUNTIME_AT_FIT: u64 = 524 << 20;

/// The card's memory llama-server counts as free when it fits (`vram` less `RUNTIME_AT_FIT`).
pub fn free_at_fit(vram: u64) -> u64 {
    vram.saturating_sub(RUNTIME_AT_FIT)
}

/// llama.cpp's projected device use at `w`: the model, the context (KV) and compute buffers.
pub fn projected(spec: &Spec, w: &Workload) -> u64 {
    gpu_weights(spec, w.weight_dtype)
        .saturating_add(kv_cache(spec, w))
        .saturating_add(compute_buffer(spec, w))
}

/// The workload llama-server runs (its slots and cache layout) and the context `--fit` picks
/// for it on a card of `vram` bytes. `w.llama.ctx_size` is the user's `-c` unless `a.ctx_auto`.
pub fn fit(spec: &Spec, w: &Workload, vram: u64, a: &ServerArgs) -> (Workload, Fitted) {
    let slots_auto = a.slots.is_none();
    let slots = a.slots.unwrap_or(AUTO_SLOTS).max(1);
    let unified = slots_auto || a.unified;
    let streams = if unified { 1 } else { slots };
    let trained = spec
        .max_position_embeddings
        .filter(|&t| t > 0)
        .unwrap_or(UNKNOWN_TRAINED);
    let n_ctx_max = trained.saturating_mul(streams);
    let min_ctx = a.min_ctx.unwrap_or(DEFAULT_MIN_CTX);
    let n_ctx_min = min_ctx.saturating_mul(streams);
    let target = a.target.unwrap_or(DEFAULT_TARGET);
    let fit_on = a.fit.unwrap_or(true);
    let at = |n_ctx: u64| Workload {
        batch: slots,
        llama: llamacpp::LlamaCppArgs {
            ctx_size: Some(n_ctx),
            unified,
            ..w.llama
        },
        ..*w
    };
    let start_ctx = if a.ctx_auto {
        n_ctx_max
    } else {
        w.llama.ctx_size.unwrap_or(n_ctx_max)
    };
    let start = at(start_ctx);
    let free = free_at_fit(vram);
    let used_start = projected(spec, &start);
    let done = |n_ctx: u64, outcome: Outcome, used: u64| {
        (
            at(n_ctx),
            Fitted {
                build: BUILD,
                slots,
                slots_auto,
                unified,
                n_ctx,
                n_ctx_auto: a.ctx_auto.then_some(n_ctx_max),
                fit: fit_on,
                outcome,
                target_bytes: target,
                min_ctx,
                free_bytes: free,
                projected_start_bytes: used_start,
                projected_bytes: used,
                layers_on_gpu: None,
            },
        )
    };
    if !fit_on {
        return done(start_ctx, Outcome::Off, used_start);
    }
    if free.saturating_sub(used_start) >= target {
        return done(start_ctx, Outcome::Unchanged, used_start);
    }
    if !a.ctx_auto {
        return done(start_ctx, Outcome::UserContext, used_start);
    }
    if n_ctx_max <= n_ctx_min {
        return done(start_ctx, Outcome::LayersToCpu, used_start);
    }
    let used_min = projected(spec, &at(n_ctx_min));
    let used_target = free.saturating_sub(target);
    if used_target <= used_min || used_start <= used_min {
        return done(n_ctx_min, Outcome::LayersToCpu, used_min);
    }
    // llama.cpp's linear interpolation between the minimum and the automatic context.
    let span = u128::from(n_ctx_max - n_ctx_min);
    let extra = span * u128::from(used_target - used_min) / u128::from(used_start - used_min);
    let n_ctx = n_ctx_min.saturating_add(u64::try_from(extra).unwrap_or(u64::MAX));
    let align = CTX_PAD.saturating_mul(streams);
    let n_ctx = (n_ctx - n_ctx % align).max(n_ctx_min);
    let used = projected(spec, &at(n_ctx));
    done(n_ctx, Outcome::ContextReduced, used)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::{KvDtype, WeightDtype};
    use crate::estimate::Engine;
    use crate::units::GIB;

    fn preset(id: &str) -> Spec {
        let (id, json) = crate::model::presets::find(id).unwrap();
        crate::model::presets::load(id, json).unwrap()
    }

    fn work(_spec: &Spec) -> Workload {
        Workload {
            prompt_tokens: 512,
            max_new_tokens: 256,
            batch: 1,
            weight_dtype: WeightDtype::Gguf(crate::dtype::GgufMix::Q4KM),
            kv_dtype: KvDtype::F16,
            engine: Engine::LlamaCpp,
            llama: Default::default(),
        }
    }

    fn auto() -> ServerArgs {
        ServerArgs {
            ctx_auto: true,
            ..Default::default()
        }
    }

    #[test]
    fn a_card_that_holds_the_trained_context_keeps_it() {
        let m = preset("meta-llama/Llama-3.1-8B-Instruct");
        let (w, f) = fit(&m, &work(&m), 80 * GIB, &auto());
        assert_eq!(f.outcome, Outcome::Unchanged);
        assert_eq!(f.n_ctx, 131_072);
        assert_eq!((f.slots, f.unified), (4, true));
        assert_eq!(w.llama.ctx_size, Some(131_072));
        assert!(f.free_bytes - f.projected_bytes >= DEFAULT_TARGET);
    }

    #[test]
    fn the_automatic_context_is_interpolated_down_to_leave_the_target() {
        let m = preset("meta-llama/Llama-3.1-8B-Instruct");
        let (_, f) = fit(&m, &work(&m), 12 * GIB, &auto());
        assert_eq!(f.outcome, Outcome::ContextReduced);
        assert_eq!(f.n_ctx % 256, 0);
        assert!(
            f.n_ctx > DEFAULT_MIN_CTX && f.n_ctx < 131_072,
            "{}",
            f.n_ctx
        );
        // The interpolation is llama.cpp's, by hand from the two projections it measures.
        let at = |n: u64| {
            let mut w = work(&m);
            w.batch = 4;
            w.llama.ctx_size = Some(n);
            w.llama.unified = true;
            projected(&m, &w)
        };
        let (lo, hi) = (at(4096), at(131_072));
        let want = 4096 + (131_072 - 4096) * (f.free_bytes - DEFAULT_TARGET - lo) / (hi - lo);
        assert_eq!(f.n_ctx, want - want % 256);
        // What it picks leaves the target free.
        assert!(f.free_bytes - f.projected_bytes >= DEFAULT_TARGET);
    }

    #[test]
    fn separate_slots_multiply_the_automatic_context() {
        let m = preset("meta-llama/Llama-3.1-8B-Instruct");
        let a = ServerArgs {
            slots: Some(2),
            ..auto()
        };
        let (w, f) = fit(&m, &work(&m), 80 * GIB, &a);
        assert!(!f.unified);
        assert_eq!(f.n_ctx_auto, Some(2 * 131_072));
        assert_eq!(w.batch, 2);
        let (_, f) = fit(&m, &work(&m), 16 * GIB, &a);
        assert_eq!(f.outcome, Outcome::ContextReduced);
        assert_eq!(f.n_ctx % 512, 0);
    }

    #[test]
    fn below_the_minimum_the_layers_move_and_a_user_context_stays() {
        let m = preset("meta-llama/Llama-3.1-8B-Instruct");
        let (_, f) = fit(&m, &work(&m), 4 * GIB, &auto());
        assert_eq!((f.outcome, f.n_ctx), (Outcome::LayersToCpu, 4096));
        let mut w = work(&m);
        w.llama.ctx_size = Some(65_536);
        let a = ServerArgs {
            fit: Some(true),
            ..Default::default()
        };
        let (w, f) = fit(&m, &w, 8 * GIB, &a);
        assert_eq!(
            (f.outcome, w.llama.ctx_size),
            (Outcome::UserContext, Some(65_536))
        );
        let off = ServerArgs {
            fit: Some(false),
            ..auto()
        };
        let (_, f) = fit(&m, &work(&m), 8 * GIB, &off);
        assert_eq!((f.outcome, f.n_ctx), (Outcome::Off, 131_072));
    }

    #[test]
    fn a_unified_cache_keeps_every_slots_window_in_a_sliding_layer() {
        let m = preset("openai/gpt-oss-20b");
        let mut w = work(&m);
        w.weight_dtype = WeightDtype::Mxfp4;
        w.batch = 4;
        w.llama.ctx_size = Some(32_768);
        let separate = kv_cache(&m, &w);
        w.llama.unified = true;
        let unified = kv_cache(&m, &w);
        // separate: 4 streams of 8,192 cells (global) and 768 (window 128 + 512, padded);
        // unified: one stream of 32,768 cells and 4 × 128 + 512 = 1,024 in the sliding layers.
        // 8 KV heads × 64 dims, K and V in f16: 2 KiB per layer and cell.
        let row = 2 * 8 * 64 * 2;
        let global = m.num_layers - m.sliding_layers;
        assert_eq!(
            separate,
            row * (global * 4 * 8192 + m.sliding_layers * 4 * 768)
        );
        assert_eq!(unified, row * (global * 32_768 + m.sliding_layers * 1024));
    }
}
