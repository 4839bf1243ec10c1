//! llama.cpp's device memory, buffer by buffer, as `llama_context` allocates it (read in b11312's
//! `src/llama-context.cpp`, measured on an H200 in docs/calibration/llamacpp-h200-2026-12-01.jsonl):
//!
//! - the **model** buffer: the GGUF's tensors (`estimate::weight_bytes`; -ngl places them,
//!   `placement::llamacpp`);
//! - the **KV** buffer: every slot's context, `n_ctx_seq = pad(n_ctx / n_seq, 256)` cells per
//!   sequence (`-c` itself padded to 256 first), K and V rows of the cache type;
//! - the **compute** buffer: ggml-alloc's worst case over the prompt-processing graph of
//!   `n_ubatch` tokens attending to the whole context, with `n_outputs = n_ubatch` logits rows.
//!   Without flash attention the f32 `KQ` scores of all heads (`n_kv × n_ubatch × n_head × 4`) are
//!   the largest tensor; with it the attention keeps only its mask and the f32 outputs.
//!
//! `-fa auto` (the default) is flash attention on a CUDA GPU.

use serde::Serialize;

use super::{kv_bytes_in_cells, CachePolicy, Engine, Estimate, Phase, Workload};
use crate::model::spec::Experts;
use crate::model::Spec;

/// llama.cpp's peak on the GPU for `w` (every layer offloaded): the model less the input
/// embedding, the KV buffer of every slot's padded share of `-c`, one compute buffer reserved for
/// the worst pass (prefill and decode alike), the runtime beside them and llama.cpp's margin.
/// Nothing grows while it runs, so the peak is the same at every step.
pub fn estimate(spec: &Spec, w: &Workload, vram: u64) -> Estimate {
    let weights = gpu_weights(spec, w.weight_dtype);
    let kv = kv_cache(spec, w);
    let activations = compute_buffer(spec, w);
    let runtime = runtime(spec, w);
    let margin = safety_margin(vram);
    Estimate {
        weights,
        kv_cache: kv,
        kv_cache_full: kv,
        activations,
        allocator: 0,
        runtime,
        margin,
        adapters: 0,
        draft_weights: 0,
        draft_kv_cache: 0,
        vision_tower: super::weights::vision_bytes(spec, w.weight_dtype).min(weights),
        vision_encoder: 0,
        total: [kv, activations, runtime, margin]
            .into_iter()
            .fold(weights, u64::saturating_add),
        peak_phase: Phase::Decode,
    }
}

/// The model's routed experts, when its layers have any.
fn routed(spec: &Spec) -> Option<&Experts> {
    spec.experts.as_ref().filter(|e| e.sparse_layers > 0)
}

/// llama.cpp's knobs that move memory, as the user set them (`None` = llama.cpp's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct LlamaCppArgs {
    /// `-c`: the context of all slots together [default here: (prompt + new) × sequences].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ctx_size: Option<u64>,
    /// `-ub`: tokens one forward pass processes [512].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ubatch: Option<u64>,
    /// `-b`: the logical batch; caps `-ub` and the logits rows [2048].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// `-fa on|off` (`None` = auto, which is on for CUDA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flash_attn: Option<bool>,
    /// `--kv-unified`: every slot shares one cache of `-c` cells (llama-server's default when
    /// `-np` is not given) instead of `-c / -np` cells each.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unified: bool,
}

impl LlamaCppArgs {
    pub fn is_default(&self) -> bool {
        *self == LlamaCppArgs::default()
    }
}

/// The CUDA context and cuBLAS beside llama.cpp's buffers on the H200 (dense models; `runtime`).
pub const RUNTIME_BASE: u64 = 612 << 20;

/// llama.cpp's defaults (common/common.h).
pub const DEFAULT_UBATCH: u64 = 512;
pub const DEFAULT_BATCH: u64 = 2048;
/// `cparams.n_ctx` and each slot's share are padded to this many cells.
pub const CTX_PAD: u64 = 256;

fn pad(n: u64, to: u64) -> u64 {
    n.div_ceil(to).saturating_mul(to)
}

/// The cells llama.cpp allocates: `(n_ctx, n_ctx_seq)` for the workload's sequences, `-c` as
/// given (else just enough for prompt + new tokens in every sequence). A unified cache is one
/// stream of all `n_ctx` cells that every sequence shares (`n_ctx_seq = n_ctx`).
pub fn context(w: &Workload) -> (u64, u64) {
    let seqs = w.batch.max(1);
    let asked = w
        .llama
        .ctx_size
        .unwrap_or_else(|| w.total_tokens().saturating_mul(seqs));
    let n_ctx = pad(asked.max(1), CTX_PAD);
    if w.llama.unified {
        return (n_ctx, n_ctx);
    }
    let per_seq = pad((n_ctx / seqs).max(1), CTX_PAD);
    (per_seq.saturating_mul(seqs), per_seq)
}

/// The cache's streams: one per sequence, or one for all with a unified cache.
pub fn streams(w: &Workload) -> u64 {
    if w.llama.unified {
        1
    } else {
        w.batch.max(1)
    }
}

/// The cells a layer keeps per sequence (its stream) when each sequence has `per_seq` cells of
/// context: every one in a global layer; in a sliding-window layer the window plus one
/// micro-batch, padded to 256, never more than the context (`llama_kv_cache_iswa`'s
/// `size_swa = GGML_PAD(min(size_base, n_swa·(unified ? n_seq_max : 1) + n_ubatch), 256)`,
/// src/llama-kv-cache-iswa.cpp; before that padding came in (ggml-org/llama.cpp#17037) the sum was
/// not rounded up, which is the 640 cells older builds log for gpt-oss at `-ub` 512).
pub fn layer_cells(window: Option<u64>, per_seq: u64, n_ubatch: u64) -> u64 {
    match window {
        Some(n_swa) => pad(per_seq.min(n_swa.saturating_add(n_ubatch)), SWA_PAD),
        None => per_seq,
    }
}

/// The sliding-window cache is padded to this many cells.
pub const SWA_PAD: u64 = 256;

/// The KV buffer: every slot's share of `-c` in the global layers, window + `-ub` in the sliding
/// ones (`layer_cells`). A unified cache is one stream whose sliding layers keep every sequence's
/// window (`n_swa × n_seq_max + n_ubatch`); recurrent states stay one per sequence either way.
pub fn kv_cache(spec: &Spec, w: &Workload) -> u64 {
    let (n_ctx, per_seq) = context(w);
    let (_, n_ub) = batches(w, n_ctx);
    let policy = CachePolicy::of(Engine::LlamaCpp);
    let seqs = w.batch.max(1);
    if !w.llama.unified {
        return kv_bytes_in_cells(spec, w.kv_dtype, seqs, policy, |window| {
            layer_cells(window, per_seq, n_ub)
        });
    }
    let one = kv_bytes_in_cells(spec, w.kv_dtype, 1, policy, |window| {
        layer_cells(window.map(|n| n.saturating_mul(seqs)), per_seq, n_ub)
    });
    let states = super::kv::state_bytes(spec, w.kv_dtype, policy);
    one.saturating_add(states.saturating_mul(seqs - 1))
}

/// The largest `-c` (a multiple of 256 for every slot, at most the model's context) with which
/// `fits` holds for `w`; `None` when not even 256 cells a slot fit.
pub fn largest_ctx(spec: &Spec, w: &Workload, fits: impl Fn(&Workload) -> bool) -> Option<u64> {
    let step = CTX_PAD.saturating_mul(streams(w));
    let trained = spec.max_position_embeddings.unwrap_or(131_072).max(CTX_PAD);
    let with = |units: u64| Workload {
        llama: LlamaCppArgs {
            ctx_size: Some(units.saturating_mul(step)),
            ..w.llama
        },
        ..*w
    };
    let most = (trained / CTX_PAD).max(1);
    crate::budget::largest(1, most, |u| fits(&with(u))).map(|u| u.saturating_mul(step))
}

/// `(n_batch, n_ubatch)` after llama.cpp caps them by the context.
pub fn batches(w: &Workload, n_ctx: u64) -> (u64, u64) {
    let n_batch = w
        .llama
        .batch
        .unwrap_or(DEFAULT_BATCH)
        .clamp(1, n_ctx.max(1));
    let n_ubatch = w.llama.ubatch.unwrap_or(DEFAULT_UBATCH).clamp(1, n_batch);
    (n_batch, n_ubatch)
}

/// Whether flash attention runs (`-fa auto` on CUDA is on).
pub fn flash_attn(w: &Workload) -> bool {
    w.llama.flash_attn.unwrap_or(true)
}

/// The compute buffer on the GPU that runs the layers (`CUDA0 compute buffer size`): ggml-alloc
/// reuses memory across the graph, so it is the largest of three moments of one `n_ubatch` pass,
/// each exact to 0.01 MiB on the H200 for the dense models of
/// docs/calibration/llamacpp-h200-2026-12-01.jsonl (f32 activations, `T` = the pass's tokens,
/// `H` = n_embd·T·4):
/// - the output: the logits of `min(T, n_batch)` rows and one hidden state;
/// - the feed-forward: gate, up and their product (3·n_ff·T·4) with three hidden states and the
///   mask, which stays alive through every layer;
/// - the attention: without flash attention the f32 scores of all heads (n_kv·T·heads·4), the f32
///   mask, four hidden states and K and V of the pass; with it, the f16 mask, four hidden states
///   and, for a quantized cache, K and V of the whole context converted to f16.
pub fn compute_buffer(spec: &Spec, w: &Workload) -> u64 {
    let (n_ctx, per_seq) = context(w);
    let (n_batch, n_ub) = batches(w, n_ctx);
    let t = n_ub.min(n_ctx) as f64;
    let n_out = t.min(n_batch as f64);
    let n_kv = per_seq as f64;
    let hidden = spec.hidden_size as f64 * t * 4.0;
    let kv_dim = spec.kv_dim() as f64;
    let heads = spec.num_heads as f64;
    let ff = routed(spec).map_or(spec.intermediate_size as f64, |e| {
        e.intermediate_size as f64 * e.active as f64
    });
    let output = spec.vocab_size as f64 * n_out * 4.0 + hidden;
    let (mask, attention) = if flash_attn(w) {
        let mask = n_kv * t * 2.0;
        let convert = if w.kv_dtype.elem_bytes().as_f64() < 2.0 {
            2.0 * n_kv * kv_dim * 2.0
        } else {
            0.0
        };
        (mask, mask + 4.0 * hidden + convert)
    } else {
        let mask = n_kv * t * 4.0;
        (
            mask,
            n_kv * t * heads * 4.0 + mask + 4.0 * hidden + 2.0 * kv_dim * t * 4.0,
        )
    };
    let ffn = 3.0 * ff * t * 4.0 + 3.0 * hidden + mask;
    output.max(ffn).max(attention) as u64
}

/// What the GPU holds beside llama.cpp's three buffers, measured by NVML on the H200 (the
/// breakdown's "unaccounted"): the CUDA context and cuBLAS, 608–616 MiB for the dense models,
/// ~100 MiB more for an MoE's expert routing; without flash attention the CUDA pool's temporaries
/// of the scores' matrix products, fitted at 15 KiB per head and micro-batch token (201–491 MiB
/// measured, within 60 MiB of the fit).
pub fn runtime(spec: &Spec, w: &Workload) -> u64 {
    const MOE: u64 = 100 << 20;
    let moe = if routed(spec).is_some() { MOE } else { 0 };
    let pool = if flash_attn(w) {
        0
    } else {
        let (n_ctx, _) = context(w);
        let (_, n_ub) = batches(w, n_ctx);
        spec.num_heads.saturating_mul(n_ub).saturating_mul(15 << 10)
    };
    RUNTIME_BASE.saturating_add(moe).saturating_add(pool)
}

/// llama.cpp allocates its buffers once, at start: what is left to chance is the CUDA pool and the
/// driver. On the H200 the peak of every run was predicted within −0.7 % … +0.1 % (at most 61 MiB
/// under, docs/accuracy.md), so the margin is 1 % of the card, at least 96 MiB, not the 2 % /
/// 256 MiB the engines that grow their memory while they run need.
pub fn safety_margin(vram: u64) -> u64 {
    (vram / 100).max(96 << 20)
}

/// The model's bytes on the GPU with every layer offloaded: all but the input embedding, which
/// llama.cpp keeps in host memory (`CPU_Mapped model buffer`); a tied output layer is loaded
/// again as a copy on the GPU, so then nothing stays behind.
pub fn gpu_weights(spec: &Spec, dtype: crate::dtype::WeightDtype) -> u64 {
    let total = super::weight_bytes(spec, dtype);
    if spec.tie_word_embeddings {
        return total;
    }
    let embed = spec
        .tensors()
        .iter()
        .filter(|t| t.role == crate::model::spec::Role::Embedding)
        .map(|t| super::weights::group_bytes(spec, t, dtype))
        .fold(0, u64::saturating_add);
    total.saturating_sub(embed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::{KvDtype, WeightDtype};
    use crate::estimate::Engine;

    fn work(prompt: u64, new: u64, batch: u64, llama: LlamaCppArgs) -> Workload {
        Workload {
            prompt_tokens: prompt,
            max_new_tokens: new,
            batch,
            weight_dtype: WeightDtype::F16,
            kv_dtype: KvDtype::F16,
            engine: Engine::LlamaCpp,
            llama,
        }
    }

    #[test]
    fn the_context_is_padded_to_256_per_slot() {
        let w = work(1000, 24, 1, LlamaCppArgs::default());
        assert_eq!(context(&w), (1024, 1024));
        let w = work(1000, 25, 1, LlamaCppArgs::default());
        assert_eq!(context(&w), (1280, 1280));
        // -c 8192 -np 3: 8192 / 3 = 2730 → 2816 per slot, 8448 cells in all
        let c = LlamaCppArgs {
            ctx_size: Some(8192),
            ..Default::default()
        };
        assert_eq!(context(&work(1, 1, 3, c)), (8448, 2816));
    }

    fn preset(id: &str) -> Spec {
        let (id, json) = crate::model::presets::find(id).unwrap();
        crate::model::presets::load(id, json).unwrap()
    }

    #[test]
    fn a_sliding_layer_keeps_the_window_and_one_micro_batch_padded_to_256() {
        // gpt-oss: a 128-token window. 128 + 1,024 = 1,152 → 1,280 cells at -ub 1024 (the
        // figure ollama#16480 quotes); 128 + 512 = 640 → 768 cells with the 256 padding.
        assert_eq!(layer_cells(Some(128), 32_768, 1024), 1280);
        assert_eq!(layer_cells(Some(128), 32_768, 512), 768);
        // Never past the context itself; a global layer keeps every cell.
        assert_eq!(layer_cells(Some(128), 512, 512), 512);
        assert_eq!(layer_cells(None, 32_768, 512), 32_768);
        // Gemma-2's 4,096 window: 4,608 at -ub 512 (a multiple of 256 already).
        assert_eq!(layer_cells(Some(4096), 8192, 512), 4608);
    }

    #[test]
    fn gpt_oss_kv_buffer_is_the_global_layers_context_and_the_sliding_layers_window() {
        let m = preset("openai/gpt-oss-20b");
        assert_eq!(m.sliding_window, Some(128));
        let c = |ub: u64| LlamaCppArgs {
            ctx_size: Some(32_768),
            ubatch: Some(ub),
            ..Default::default()
        };
        // 24 layers, half sliding; 8 KV heads × 64 dims, K and V in f16: 2 KiB per layer and cell.
        let row = 2 * 8 * 64 * 2;
        let global = m.num_layers - m.sliding_layers;
        let at = |ub: u64, cells: u64| {
            assert_eq!(
                kv_cache(&m, &work(1, 1, 1, c(ub))),
                row * (global * 32_768 + m.sliding_layers * cells)
            );
        };
        at(512, 768);
        at(1024, 1280);
    }

    #[test]
    fn the_largest_ctx_is_a_multiple_of_256_a_slot_and_the_next_does_not_fit() {
        let m = preset("meta-llama/Llama-3.1-8B-Instruct");
        let w = Workload {
            weight_dtype: "q4_k_m".parse().unwrap(),
            ..work(2048, 256, 2, LlamaCppArgs::default())
        };
        let vram = 8 * 1000_u64.pow(3);
        let fits = |w: &Workload| estimate(&m, w, vram).total <= vram;
        let c = largest_ctx(&m, &w, fits).unwrap();
        assert_eq!(c % 512, 0);
        let with = |c| Workload {
            llama: LlamaCppArgs {
                ctx_size: Some(c),
                ..w.llama
            },
            ..w
        };
        assert!(fits(&with(c)));
        assert!(!fits(&with(c + 512)));
    }

    #[test]
    fn batches_are_capped_by_the_context() {
        let w = work(100, 10, 1, LlamaCppArgs::default());
        assert_eq!(batches(&w, 256), (256, 256));
        assert_eq!(batches(&w, 4096), (2048, 512));
    }
}
