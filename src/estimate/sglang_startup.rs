//! SGLang's start-up on one GPU: the token pool `max_total_num_tokens` it allocates after loading
//! the weights, and whether it starts. Transcribed from sgl-project/sglang:
//! python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py@001ccef0072a4537d4ec6bdd50a73e6feb2c907d
//! (`profile_max_num_token`, `init_memory`), python/sglang/srt/managers/tp_worker.py
//! (`max_req_len`) and python/sglang/srt/server_args.py (`_handle_gpu_memory_settings`):
//!
//! ```text
//! total_gpu_memory = free memory before the model loads (the card less the CUDA context)
//! rest             = (total_gpu_memory − weights) − total_gpu_memory × (1 − mem_fraction_static)
//! max_total_num_tokens = rest // cell_size         (cell_size: KV bytes of one token, all layers)
//! max_total_num_tokens ≤ 0  →  RuntimeError "Not enough memory. Please try to increase
//!                              --mem-fraction-static. …", SGLang does not start
//! max_req_len = min(context_len − 1, max_total_num_tokens − 1); max_req_len − 5 ≤ 0
//!                           →  AssertionError "Memory pool size is too small"
//! mem_fraction_static default = round((gpu_mem − reserved_mem) / gpu_mem, 3), gpu_mem in MiB,
//! reserved_mem = 512 + max(chunked_prefill_size, 2048) × 1.5 + cuda_graph_max_bs × 2
//!                + tp × pp / 8 × 1024, at least 10,240 on cards above 60 GiB
//! ```
//!
//! What `1 − mem_fraction_static` leaves is for the activations of a chunked-prefill step and the
//! CUDA graphs; SGLang sizes nothing else from it.
//!
//! With `--tp N` on one node every rank runs the same arithmetic on its own GPU (the free memory
//! is the least of the ranks', `get_available_gpu_memory(distributed=True)`): the weights are
//! split N ways, and `cell_size` counts the rank's KV heads,
//! `get_num_kv_heads(attention_tp_size) = max(1, kv_heads // N)` (python/sglang/srt/configs/
//! model_config.py; replicated when there are fewer KV heads than ranks); N also enters the
//! defaults above (`tp × pp / 8 × 1024` MiB reserved; the larger CUDA-graph batch from 4 ranks).
//! `max_total_num_tokens` is then the pool of one rank, and every rank holds that many tokens.
//!
//! **LoRA** (`--enable-lora`): model_runner.py `load_model` calls `init_lora_manager` before
//! `init_memory_pool`, so `LoRAMemoryPool.init_buffers` (python/sglang/srt/lora/mem_pool.py) takes
//! its A and B buffers before `profile_max_num_token` reads the free memory: they come off the
//! pool as the weights do.
//!
//! **Speculative decoding** (`--speculative-algorithm NEXTN | EAGLE | STANDALONE`): the target's
//! worker profiles and allocates its pool first, exactly as above (its `cell_size` counts its own
//! layers only); the draft worker (speculative/eagle_worker.py, `is_draft_worker=True`) then loads
//! the draft's weights and allocates its own KV pool of `draft_runner_cache_size` tokens, which
//! `init_memory` sets to the target's `max_total_num_tokens`, in the draft's layers (for NEXTN
//! `num_nextn_predict_layers`). Both come out of `total_gpu_memory × (1 − mem_fraction_static)`;
//! which is why `_handle_gpu_memory_settings` reserves 2,048 MiB more for EAGLE/NEXTN ("eagle
//! draft models and cuda graphs") and 6,144 MiB more for STANDALONE in the default fraction.
//! NEXTN's draft (models/deepseek_nextn.py) builds its own `embed_tokens` and `lm_head` and loads
//! them; `EAGLEWorker` replaces them with the target's (`set_embed_and_head`) only after the draft
//! worker's pool is allocated, so they are part of what the draft takes at that moment.

use serde::Serialize;

use super::Workload;
use super::{activations, kv_bytes_in_cells, kv_bytes_per_token_at, weight_bytes};
use super::{CachePolicy, Engine, Profile};
use crate::error::InputError;
use crate::model::Spec;
use crate::units::{GIB, MIB};

/// The CUDA context torch holds before SGLang loads the model: what `get_available_gpu_memory`
/// reads below the card's total on an otherwise idle GPU.
pub const CUDA_CONTEXT: u64 = 512 * MIB;

/// The largest `--mem-fraction-static` llm-oom suggests: above it the chunked prefill and the
/// CUDA graphs have almost nothing left.
pub const MAX_SUGGESTED_FRACTION: f64 = 0.95;

/// `--speculative-algorithm`: the drafts llm-oom prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SpecAlgorithm {
    /// The checkpoint's own multi-token-prediction layers (`--mtp`).
    Nextn,
    /// A separate small model (`--draft-model`).
    Standalone,
}

impl SpecAlgorithm {
    pub fn name(self) -> &'static str {
        match self {
            SpecAlgorithm::Nextn => "NEXTN",
            SpecAlgorithm::Standalone => "STANDALONE",
        }
    }

    /// MiB `_handle_gpu_memory_settings` adds to `reserved_mem` for the draft and its CUDA graphs.
    pub fn reserve_mib(self) -> u64 {
        match self {
            SpecAlgorithm::Nextn => 2 * 1024,
            SpecAlgorithm::Standalone => 6 * 1024,
        }
    }
}

/// The draft worker as SGLang builds it after the target's pool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DraftWorker {
    pub algorithm: SpecAlgorithm,
    /// The draft's weights that stay on the card.
    pub weights_bytes: u64,
    /// What the draft has loaded when its pool is allocated: the weights, and for NEXTN its own
    /// embedding and head, freed by `set_embed_and_head` afterwards.
    pub load_bytes: u64,
    /// KV bytes of one token over the draft's layers.
    pub cell_size: u64,
}

/// What sits beside the model in SGLang's start-up.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Beside {
    /// `LoRAMemoryPool`'s A and B buffers.
    pub lora_bytes: u64,
    pub draft: Option<DraftWorker>,
}

/// SGLang's own flags as `plan` takes them; `None` = SGLang's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SglangArgs {
    pub mem_fraction_static: Option<f64>,
    pub context_length: Option<u64>,
    pub max_running_requests: Option<u64>,
    pub chunked_prefill_size: Option<u64>,
}

impl SglangArgs {
    /// The first flag given, as the user typed it, with the vLLM flag it corresponds to.
    pub fn first_given(&self) -> Option<(&'static str, &'static str)> {
        if self.mem_fraction_static.is_some() {
            Some(("--mem-fraction-static", "--gpu-memory-utilization"))
        } else if self.context_length.is_some() {
            Some(("--context-length", "--max-model-len"))
        } else if self.max_running_requests.is_some() {
            Some(("--max-running-requests", "--max-num-seqs"))
        } else if self.chunked_prefill_size.is_some() {
            Some(("--chunked-prefill-size", "--max-num-batched-tokens"))
        } else {
            None
        }
    }

    /// Each value in the range SGLang accepts.
    pub fn check(&self) -> Result<(), InputError> {
        if let Some(f) = self.mem_fraction_static {
            if !(f > 0.0 && f < 1.0) {
                return Err(InputError::Usage(format!(
                    "--mem-fraction-static {f}: write a fraction above 0 and below 1 (SGLang's \
                     default is about 0.85 on a 24 GB card)"
                )));
            }
        }
        crate::limits::at_least_one(&[
            ("--context-length", self.context_length),
            ("--max-running-requests", self.max_running_requests),
            ("--chunked-prefill-size", self.chunked_prefill_size),
        ])
    }
}

/// What SGLang does at start-up on one card, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Startup {
    pub card_bytes: u64,
    pub mem_fraction_static: f64,
    /// `mem_fraction_static` is SGLang's default for this card (none given).
    pub fraction_is_default: bool,
    pub chunked_prefill_size: u64,
    pub cuda_graph_max_bs: u64,
    pub context_length: u64,
    /// `--tp`: ranks on one node, one GPU each; the bytes below are one rank's.
    pub tp: u64,
    /// The KV heads one rank keeps (`max(1, kv_heads // tp)`).
    pub kv_heads_per_rank: u64,
    /// Fewer KV heads than ranks: each rank keeps a copy of one.
    pub kv_heads_replicated: bool,
    /// `total_gpu_memory`: the card less the CUDA context.
    pub free_before_load_bytes: u64,
    pub weights_bytes: u64,
    /// `total_gpu_memory × (1 − mem_fraction_static)`: kept for activations and CUDA graphs.
    pub reserved_bytes: u64,
    /// llm-oom's estimate of one chunked-prefill step's activations (SGLang does not check it).
    pub prefill_step_bytes: u64,
    /// `rest_memory`, the token pool's bytes (0 when nothing is left).
    pub pool_bytes: u64,
    /// `cell_size`: KV bytes of one token over all layers.
    pub cell_size: u64,
    /// `rest_memory // cell_size`, before a hybrid sliding-window split.
    pub profiled_tokens: u64,
    pub max_total_num_tokens: u64,
    /// A hybrid sliding-window model: the sliding layers' tokens (`swa_max_total_num_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swa_tokens: Option<u64>,
    /// `min(context_len − 1, max_total_num_tokens − 1)`: the longest request SGLang takes.
    pub max_req_len: u64,
    pub max_running_requests: u64,
    /// Requests of `context_length` tokens the pool holds at once.
    pub requests_of_context: f64,
    pub starts: bool,
    /// The `--mem-fraction-static` whose pool holds one request of `context_length` tokens, when
    /// it is at most `MAX_SUGGESTED_FRACTION`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fraction_for_context: Option<f64>,
    /// When no fraction up to `MAX_SUGGESTED_FRACTION` holds the context and SGLang refuses: the
    /// context the pool holds at that fraction (`--mem-fraction-static 0.95 --context-length N`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_at_max_fraction: Option<u64>,
    /// `LoRAMemoryPool`'s buffers, taken before the pool is profiled.
    #[serde(skip_serializing_if = "is_zero")]
    pub lora_bytes: u64,
    /// `--speculative-algorithm`, when a draft is planned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculative_algorithm: Option<SpecAlgorithm>,
    /// The draft's weights that stay (NEXTN shares the target's embedding and head).
    #[serde(skip_serializing_if = "is_zero")]
    pub draft_weights_bytes: u64,
    /// The draft's weights when its pool is allocated (NEXTN's own embedding and head still in).
    #[serde(skip_serializing_if = "is_zero")]
    pub draft_load_bytes: u64,
    /// KV bytes of one token over the draft's layers.
    #[serde(skip_serializing_if = "is_zero")]
    pub draft_cell_size: u64,
    /// The draft worker's pool: `max_total_num_tokens × draft_cell_size`.
    #[serde(skip_serializing_if = "is_zero")]
    pub draft_kv_bytes: u64,
    /// With a draft that does not fit the reserve: the largest `--mem-fraction-static` (two
    /// decimals) whose reserve holds it, when the target still gets a pool there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fraction_for_draft: Option<f64>,
    /// With a draft: the largest fraction (at most `MAX_SUGGESTED_FRACTION`) whose reserve holds
    /// the draft worker; `fraction_for_context` and `context_at_max_fraction` stay within it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draft_fraction_cap: Option<f64>,
    /// SGLang's error when it refuses to start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `_handle_gpu_memory_settings`: (chunked_prefill_size, cuda_graph_max_bs) by the card's MiB.
pub fn defaults_by_card(gpu_mib: u64, tp: u64) -> (u64, u64) {
    let small_tp = tp < 4;
    match gpu_mib {
        m if m < 20 * 1024 => (2048, 8),
        m if m < 35 * 1024 => (2048, if small_tp { 24 } else { 80 }),
        m if m < 60 * 1024 => (4096, if small_tp { 32 } else { 160 }),
        m if m < 160 * 1024 => (8192, if small_tp { 256 } else { 512 }),
        _ => (16384, 512),
    }
}

fn is_zero(b: &u64) -> bool {
    *b == 0
}

/// SGLang's default `mem_fraction_static` for a card of `gpu_mib` MiB and `tp` ranks (pp = 1,
/// no DP attention, no speculative decoding, no piecewise CUDA graphs).
pub fn default_fraction(
    gpu_mib: u64,
    chunked_prefill_size: u64,
    cuda_graph_max_bs: u64,
    tp: u64,
) -> f64 {
    default_fraction_with(gpu_mib, chunked_prefill_size, cuda_graph_max_bs, tp, None)
}

/// `default_fraction` with speculative decoding: `_handle_gpu_memory_settings` adds the
/// algorithm's `reserve_mib` after the 10,240 MiB floor of large cards.
pub fn default_fraction_with(
    gpu_mib: u64,
    chunked_prefill_size: u64,
    cuda_graph_max_bs: u64,
    tp: u64,
    spec: Option<SpecAlgorithm>,
) -> f64 {
    let tp_pp = tp.max(1) as f64;
    let mut reserved = 512.0
        + chunked_prefill_size.max(2048) as f64 * 1.5
        + cuda_graph_max_bs as f64 * 2.0
        + tp_pp / 8.0 * 1024.0;
    if gpu_mib > 60 * 1024 {
        reserved = reserved.max(10.0 * 1024.0);
    }
    reserved += spec.map_or(0, SpecAlgorithm::reserve_mib) as f64;
    let g = gpu_mib.max(1) as f64;
    ((g - reserved) / g * 1000.0).round() / 1000.0
}

/// `profile_max_num_token`: the pool's tokens at `fraction` (0 when nothing is left); `weights`
/// is everything taken before it (the weights and the LoRA buffers).
fn pool_tokens(free: u64, weights: u64, fraction: f64, cell: u64) -> (u64, u64) {
    let reserved = (free as f64 * (1.0 - fraction)) as u64;
    let rest = free.saturating_sub(weights).saturating_sub(reserved);
    (rest, rest.checked_div(cell).unwrap_or(0))
}

/// SGLang's default `--swa-full-tokens-ratio`: sliding-window tokens per full-attention token.
pub const SWA_FULL_TOKENS_RATIO: f64 = 0.8;

/// The model types SGLang runs as hybrid sliding-window models (model_config.py
/// `is_hybrid_swa_model`: Llama 4, gpt-oss, MiMo-V2-Flash, Step-3.5, Gemma 4).
const HYBRID_SWA: [&str; 7] = [
    "llama4",
    "llama4_text",
    "gpt_oss",
    "mimo_v2_flash",
    "step3p5",
    "gemma4",
    "gemma4_text",
];

/// `set_num_tokens_hybrid_swa`: a hybrid sliding-window model's pool of `tokens` × `cell` bytes
/// split so that the sliding layers hold `SWA_FULL_TOKENS_RATIO` tokens per full-layer token;
/// `max_total_num_tokens` becomes the full layers' count. `None` for other models.
fn hybrid_swa_tokens(spec: &Spec, w: &Workload, tokens: u64, cell: u64) -> Option<u64> {
    if !HYBRID_SWA.contains(&spec.architecture.as_str()) {
        return None;
    }
    let policy = CachePolicy::of(Engine::Sglang);
    let base = kv_bytes_in_cells(spec, w.kv_dtype, 1, policy, |_| 0);
    let full = kv_bytes_in_cells(spec, w.kv_dtype, 1, policy, |win| u64::from(win.is_none()))
        .saturating_sub(base);
    let swa = kv_bytes_in_cells(spec, w.kv_dtype, 1, policy, |win| u64::from(win.is_some()))
        .saturating_sub(base);
    if full == 0 || swa == 0 {
        return None;
    }
    let total = tokens as f64 * cell as f64;
    Some((total / (full as f64 + SWA_FULL_TOKENS_RATIO * swa as f64)) as u64)
}

/// SGLang's start-up on one card of `card` bytes for the model and dtypes of `w`.
pub fn startup(spec: &Spec, w: &Workload, card: u64, a: &SglangArgs) -> Startup {
    startup_tp(spec, w, card, a, 1)
}

/// The KV heads of one of `tp` ranks (model_config.py `get_num_kv_heads`).
pub fn kv_heads_per_rank(kv_heads: u64, tp: u64) -> u64 {
    (kv_heads / tp.max(1)).max(1)
}

/// SGLang's start-up with `tp` ranks on one node, each on a card of `card` bytes: one rank's
/// weights, KV cell and pool.
pub fn startup_tp(spec: &Spec, w: &Workload, card: u64, a: &SglangArgs, tp: u64) -> Startup {
    startup_beside(spec, w, card, a, tp, &Beside::default())
}

/// SGLang's start-up with LoRA buffers and a draft worker beside the model (`tp` ranks).
pub fn startup_beside(
    spec: &Spec,
    w: &Workload,
    card: u64,
    a: &SglangArgs,
    tp: u64,
    beside: &Beside,
) -> Startup {
    let tp = tp.max(1);
    let algorithm = beside.draft.map(|d| d.algorithm);
    let gpu_mib = card / MIB;
    let (chunk_default, cuda_graph_max_bs) = defaults_by_card(gpu_mib, tp);
    let chunked_prefill_size = a.chunked_prefill_size.unwrap_or(chunk_default);
    let fraction = a.mem_fraction_static.unwrap_or_else(|| {
        default_fraction_with(
            gpu_mib,
            chunked_prefill_size,
            cuda_graph_max_bs,
            tp,
            algorithm,
        )
    });
    let context_length = a
        .context_length
        .or(spec.max_position_embeddings)
        .unwrap_or_else(|| w.total_tokens())
        .max(1);
    let free = card.saturating_sub(CUDA_CONTEXT);
    let weights = weight_bytes(spec, w.weight_dtype).div_ceil(tp);
    // What profile_max_num_token finds gone: the weights and the LoRA buffers.
    let taken = weights.saturating_add(beside.lora_bytes);
    let kv_heads = spec.num_kv_heads.max(1);
    // A latent (MLA) cache is one row a token on every rank, whatever the tp.
    let kv_heads_per_rank = if crate::placement::vllm::is_mla(spec) {
        kv_heads
    } else {
        kv_heads_per_rank(kv_heads, tp).min(kv_heads)
    };
    let cell = (kv_bytes_per_token_at(spec, w.kv_dtype, CachePolicy::of(Engine::Sglang), 0)
        / kv_heads
        * kv_heads_per_rank)
        .max(1);
    let (pool, tokens) = pool_tokens(free, taken, fraction, cell);
    let profiled_tokens = tokens;
    let hybrid = hybrid_swa_tokens(spec, w, tokens, cell);
    let tokens = hybrid.unwrap_or(tokens);
    let swa_tokens = hybrid.map(|full| (full as f64 * SWA_FULL_TOKENS_RATIO) as u64);
    // One forward of a chunk of chunked_prefill_size tokens, the SGLang profile's activations.
    let step = Workload {
        prompt_tokens: chunked_prefill_size,
        max_new_tokens: 0,
        batch: 1,
        ..*w
    };
    let d = w.weight_dtype.compute_kv_dtype().elem_bytes().as_f64();
    let (prefill_step, _) = activations(spec, &Profile::of(Engine::Sglang), &step, d, 0);
    let reserved = (free as f64 * (1.0 - fraction)) as u64;
    let max_req_len = context_length.min(tokens).saturating_sub(1);
    // The draft worker: its weights and a pool of draft_runner_cache_size = max_total_num_tokens
    // tokens, allocated from what mem_fraction_static left.
    let draft_kv = beside
        .draft
        .map_or(0, |d| tokens.saturating_mul(d.cell_size));
    let draft_need = beside
        .draft
        .map_or(0, |d| d.load_bytes.saturating_add(draft_kv));
    let draft_fits = draft_need <= reserved;
    let pool_ok = tokens > 0 && max_req_len > 5;
    let starts = pool_ok && draft_fits;
    // The largest fraction whose reserve still holds the draft worker caps every suggestion.
    let draft_cap = beside
        .draft
        .map(|d| draft_cap(free, taken, cell, &d).min(MAX_SUGGESTED_FRACTION));
    let cap = draft_cap.unwrap_or(MAX_SUGGESTED_FRACTION);
    let fraction_for_draft = draft_cap.filter(|&f| {
        let (_, at) = pool_tokens(free, taken, f, cell);
        pool_ok && !draft_fits && f > 0.0 && at > 6
    });
    // init_memory: max_num_reqs = min(max(max_total_num_tokens / context_len × 512, 2048), 4096)
    let max_running_requests = a.max_running_requests.unwrap_or_else(|| {
        ((tokens as f64 / context_length as f64 * 512.0) as u64).clamp(2048, 4096)
    });
    // The fraction whose pool holds one request of context_length: free × f − weights ≥ cell × ctx
    let want = taken.saturating_add(cell.saturating_mul(context_length));
    let f = (want as f64 / free.max(1) as f64 * 100.0).ceil() / 100.0;
    let fraction_for_context = (tokens < context_length && f <= cap && f > fraction).then_some(f);
    let (_, at_max) = pool_tokens(free, taken, cap, cell);
    let context_at_max_fraction =
        (!pool_ok && fraction_for_context.is_none() && at_max > 6 && fraction < cap)
            .then_some(at_max.min(context_length));
    let message = (!starts).then(|| {
        if pool_ok {
            format!(
                "torch.OutOfMemoryError: CUDA out of memory (the draft worker's weights and its \
                 KV pool of {tokens} tokens, {}, past the {} mem_fraction_static left)",
                crate::units::Bytes(draft_need),
                crate::units::Bytes(reserved)
            )
        } else if tokens == 0 {
            format!(
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. \
                 Current value: self.server_args.mem_fraction_static={fraction}"
            )
        } else {
            "AssertionError: Memory pool size is too small".to_string()
        }
    });
    Startup {
        card_bytes: card,
        mem_fraction_static: fraction,
        fraction_is_default: a.mem_fraction_static.is_none(),
        chunked_prefill_size,
        cuda_graph_max_bs,
        context_length,
        tp,
        kv_heads_per_rank,
        kv_heads_replicated: !crate::placement::vllm::is_mla(spec) && kv_heads < tp,
        free_before_load_bytes: free,
        weights_bytes: weights,
        reserved_bytes: reserved,
        prefill_step_bytes: prefill_step,
        pool_bytes: pool,
        cell_size: cell,
        profiled_tokens,
        max_total_num_tokens: tokens,
        swa_tokens,
        max_req_len,
        max_running_requests,
        requests_of_context: tokens as f64 / context_length as f64,
        starts,
        fraction_for_context,
        context_at_max_fraction,
        lora_bytes: beside.lora_bytes,
        speculative_algorithm: algorithm,
        draft_weights_bytes: beside.draft.map_or(0, |d| d.weights_bytes),
        draft_load_bytes: beside.draft.map_or(0, |d| d.load_bytes),
        draft_cell_size: beside.draft.map_or(0, |d| d.cell_size),
        draft_kv_bytes: draft_kv,
        fraction_for_draft,
        draft_fraction_cap: draft_cap,
        message,
    }
}

/// The largest fraction (two decimals) whose reserve holds the draft worker: with
/// `tokens = (free × f − taken) / cell`, `free × (1 − f) ≥ load + tokens × draft_cell` gives
/// `f ≤ (free − load + taken × r) / (free × (1 + r))`, `r = draft_cell / cell`.
fn draft_cap(free: u64, taken: u64, cell: u64, d: &DraftWorker) -> f64 {
    let (free_f, r) = (free as f64, d.cell_size as f64 / cell.max(1) as f64);
    let f = (free_f - d.load_bytes as f64 + taken as f64 * r) / (free_f.max(1.0) * (1.0 + r));
    (f * 100.0).floor() / 100.0
}

/// The pool in GiB as SGLang's log rounds it.
pub fn gib(b: u64) -> f64 {
    b as f64 / GIB as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::{KvDtype, WeightDtype};
    use crate::model::presets;

    fn qwen7b() -> Spec {
        presets::from_file("qwen2.5-7b-instruct")
    }

    fn work() -> Workload {
        Workload {
            prompt_tokens: 2048,
            max_new_tokens: 256,
            batch: 1,
            weight_dtype: WeightDtype::Bf16,
            kv_dtype: KvDtype::Bf16,
            engine: Engine::Sglang,
            llama: Default::default(),
        }
    }

    const RTX4090: u64 = 24_564 * MIB;

    #[test]
    fn default_fraction_of_a_24gb_card() {
        // 4090: chunked_prefill_size 2048, cuda_graph_max_bs 24;
        // reserved = 512 + 3072 + 48 + 128 = 3760 MiB; (24564 − 3760) / 24564 = 0.8469…
        assert_eq!(defaults_by_card(24_564, 1), (2048, 24));
        assert_eq!(default_fraction(24_564, 2048, 24, 1), 0.847);
        // H100 80 GB: 8192 and 256; reserved = 512 + 12288 + 512 + 128 = 13440 MiB
        assert_eq!(defaults_by_card(81_559, 1), (8192, 256));
        assert_eq!(default_fraction(81_559, 8192, 256, 1), 0.835);
        // --tp 2 on 4090s: 128 MiB more reserved, (24564 − 3888) / 24564 = 0.8417…
        assert_eq!(default_fraction(24_564, 2048, 24, 2), 0.842);
        // 4 ranks: the larger CUDA-graph batch of the 20–35 GiB tier
        assert_eq!(defaults_by_card(24_564, 4), (2048, 80));
    }

    #[test]
    fn kv_heads_split_over_the_ranks_or_replicate() {
        assert_eq!(kv_heads_per_rank(8, 2), 4);
        assert_eq!(kv_heads_per_rank(4, 8), 1);
        assert_eq!(kv_heads_per_rank(2, 4), 1);
        assert_eq!(kv_heads_per_rank(8, 1), 8);
    }

    #[test]
    fn tp_2_halves_the_weights_and_the_cell_per_rank() {
        let a = SglangArgs {
            mem_fraction_static: Some(0.85),
            ..Default::default()
        };
        let one = startup(&qwen7b(), &work(), RTX4090, &a);
        let two = startup_tp(&qwen7b(), &work(), RTX4090, &a, 2);
        assert_eq!(two.weights_bytes, one.weights_bytes.div_ceil(2));
        // 4 KV heads: 2 a rank
        assert_eq!(
            (two.kv_heads_per_rank, two.cell_size),
            (2, 28 * 2 * 256 * 2)
        );
        assert!(two.max_total_num_tokens > 2 * one.max_total_num_tokens);
        // 8 ranks over 4 KV heads: one head a rank, replicated
        let eight = startup_tp(&qwen7b(), &work(), RTX4090, &a, 8);
        assert_eq!(eight.cell_size, 28 * 256 * 2);
    }

    #[test]
    fn the_pool_by_hand() {
        let a = SglangArgs {
            mem_fraction_static: Some(0.85),
            ..Default::default()
        };
        let s = startup(&qwen7b(), &work(), RTX4090, &a);
        // Qwen2.5-7B: 28 layers × 4 KV heads × (128 + 128) × 2 bytes = 57,344 bytes a token
        assert_eq!(s.cell_size, 28 * 4 * 256 * 2);
        let free = RTX4090 - 512 * MIB;
        let reserved = (free as f64 * 0.15) as u64;
        assert_eq!(s.pool_bytes, free - s.weights_bytes - reserved);
        assert_eq!(s.max_total_num_tokens, s.pool_bytes / 57_344);
        assert!(s.starts);
        assert_eq!(s.context_length, 32_768);
        assert_eq!(s.max_req_len, 32_767);
    }

    #[test]
    fn too_small_a_fraction_refuses_and_the_suggested_one_starts() {
        let a = SglangArgs {
            mem_fraction_static: Some(0.5),
            ..Default::default()
        };
        let s = startup(&qwen7b(), &work(), RTX4090, &a);
        assert!(!s.starts);
        assert_eq!(s.max_total_num_tokens, 0);
        let msg = s.message.clone().expect("SGLang's message");
        assert!(msg.starts_with("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: self.server_args.mem_fraction_static=0.5"), "{msg}");
        let f = s.fraction_for_context.expect("a fraction that fits");
        let ok = startup(
            &qwen7b(),
            &work(),
            RTX4090,
            &SglangArgs {
                mem_fraction_static: Some(f),
                ..Default::default()
            },
        );
        assert!(ok.starts);
        assert!(ok.max_total_num_tokens >= 32_768);
        let below = startup(
            &qwen7b(),
            &work(),
            RTX4090,
            &SglangArgs {
                mem_fraction_static: Some(f - 0.01),
                ..Default::default()
            },
        );
        assert!(below.max_total_num_tokens < 32_768);
    }

    #[test]
    fn a_context_no_fraction_holds_gets_the_largest_fraction_with_the_context_it_holds() {
        let llama = presets::from_file("llama-3.1-8b-instruct");
        let a = SglangArgs {
            mem_fraction_static: Some(0.6),
            ..Default::default()
        };
        let s = startup(&llama, &work(), RTX4090, &a);
        assert!(!s.starts);
        // 131,072 tokens of 128 KiB are 16 GiB: no fraction below 1 holds them beside 15 GiB
        assert_eq!(s.fraction_for_context, None);
        let n = s.context_at_max_fraction.expect("a context at 0.95");
        let ok = startup(
            &llama,
            &work(),
            RTX4090,
            &SglangArgs {
                mem_fraction_static: Some(MAX_SUGGESTED_FRACTION),
                context_length: Some(n),
                ..Default::default()
            },
        );
        assert!(ok.starts);
        assert_eq!(ok.max_total_num_tokens, n);
    }

    #[test]
    fn gpt_oss_splits_its_pool_between_full_and_sliding_layers() {
        let spec = presets::from_file("gpt-oss-20b");
        let a = SglangArgs {
            mem_fraction_static: Some(0.85),
            ..Default::default()
        };
        let s = startup(&spec, &work(), 80 * GIB, &a);
        // 24 layers, 12 full and 12 sliding, 8 KV heads × (64 + 64) × 2 bytes = 2,048 a layer
        assert_eq!(s.cell_size, 24 * 2048);
        let profiled = s.pool_bytes / s.cell_size;
        // full = profiled × (F + S) / (F + 0.8 × S), F = S = 12 × 2,048
        let full = (profiled as f64 * (24.0 * 2048.0) / (12.0 * 2048.0 * 1.8)) as u64;
        assert_eq!(s.max_total_num_tokens, full);
        assert!(s.max_total_num_tokens > profiled);
        // a dense model keeps the profiled count
        let q = startup(&qwen7b(), &work(), 80 * GIB, &a);
        assert_eq!(q.max_total_num_tokens, q.pool_bytes / q.cell_size);
    }

    #[test]
    fn a_draft_reserves_more_in_the_default_fraction() {
        // H100 80 GB: 13,440 MiB reserved, + 2,048 for NEXTN: (81,559 − 15,488) / 81,559 = 0.8101…
        let f = |a| default_fraction_with(81_559, 8192, 256, 1, a);
        assert_eq!(f(None), 0.835);
        assert_eq!(f(Some(SpecAlgorithm::Nextn)), 0.81);
        // + 6,144 for STANDALONE: (81,559 − 19,584) / 81,559 = 0.7598…
        assert_eq!(f(Some(SpecAlgorithm::Standalone)), 0.76);
        // a 24 GiB card: (24,576 − 3,760 − 6,144) / 24,576 = 0.5970…
        assert_eq!(
            default_fraction_with(24_576, 2048, 24, 1, Some(SpecAlgorithm::Standalone)),
            0.597
        );
    }

    #[test]
    fn lora_buffers_come_off_the_pool_as_the_weights_do() {
        let a = SglangArgs {
            mem_fraction_static: Some(0.85),
            ..Default::default()
        };
        let alone = startup(&qwen7b(), &work(), RTX4090, &a);
        let beside = Beside {
            lora_bytes: 300 * MIB,
            draft: None,
        };
        let with = startup_beside(&qwen7b(), &work(), RTX4090, &a, 1, &beside);
        assert_eq!(alone.pool_bytes - with.pool_bytes, 300 * MIB);
        assert_eq!(with.max_total_num_tokens, with.pool_bytes / with.cell_size);
        assert_eq!(with.reserved_bytes, alone.reserved_bytes);
    }

    #[test]
    fn the_draft_worker_takes_a_pool_of_as_many_tokens_from_the_reserve() {
        let a = SglangArgs {
            mem_fraction_static: Some(0.85),
            ..Default::default()
        };
        let alone = startup(&qwen7b(), &work(), 80 * GIB, &a);
        let draft = DraftWorker {
            algorithm: SpecAlgorithm::Standalone,
            weights_bytes: GIB,
            load_bytes: GIB,
            cell_size: 4_096,
        };
        let beside = Beside {
            lora_bytes: 0,
            draft: Some(draft),
        };
        let with = startup_beside(&qwen7b(), &work(), 80 * GIB, &a, 1, &beside);
        // The model's pool is sized without the draft; the draft's holds as many tokens.
        assert_eq!(with.max_total_num_tokens, alone.max_total_num_tokens);
        assert_eq!(with.draft_kv_bytes, with.max_total_num_tokens * 4_096);
        assert!(GIB + with.draft_kv_bytes <= with.reserved_bytes);
        assert!(with.starts);
        // A draft whose pool is past the 15 % left: torch runs out, and a lower fraction fits it.
        let big = Beside {
            lora_bytes: 0,
            draft: Some(DraftWorker {
                cell_size: 28_672,
                ..draft
            }),
        };
        let s = startup_beside(&qwen7b(), &work(), 80 * GIB, &a, 1, &big);
        assert!(!s.starts);
        assert!(s
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with("torch.OutOfMemoryError")));
        let f = s.fraction_for_draft.expect("a fraction that leaves room");
        let lower = SglangArgs {
            mem_fraction_static: Some(f),
            ..a
        };
        let ok = startup_beside(&qwen7b(), &work(), 80 * GIB, &lower, 1, &big);
        assert!(ok.starts, "{f}");
        let above = SglangArgs {
            mem_fraction_static: Some(f + 0.01),
            ..a
        };
        assert!(!startup_beside(&qwen7b(), &work(), 80 * GIB, &above, 1, &big).starts);
    }

    #[test]
    fn out_of_range_flags_are_refused() {
        for f in [0.0, 1.0, -0.1, 1.5, f64::NAN] {
            let a = SglangArgs {
                mem_fraction_static: Some(f),
                ..Default::default()
            };
            assert!(a.check().is_err(), "{f}");
        }
        let a = SglangArgs {
            context_length: Some(0),
            ..Default::default()
        };
        assert!(a.check().is_err());
    }
}
