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

use super::Workload;
use crate::model::Spec;

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
}

impl LlamaCppArgs {
    pub fn is_default(&self) -> bool {
        *self == LlamaCppArgs::default()
    }
}

/// llama.cpp's defaults (common/common.h).
pub const DEFAULT_UBATCH: u64 = 512;
pub const DEFAULT_BATCH: u64 = 2048;
/// `cparams.n_ctx` and each slot's share are padded to this many cells.
pub const CTX_PAD: u64 = 256;

fn pad(n: u64, to: u64) -> u64 {
    n.div_ceil(to).saturating_mul(to)
}

/// The cells llama.cpp allocates: `(n_ctx, n_ctx_seq)` for the workload's sequences, `-c` as
/// given (else just enough for prompt + new tokens in every sequence).
pub fn context(w: &Workload) -> (u64, u64) {
    let seqs = w.batch.max(1);
    let asked = w
        .llama
        .ctx_size
        .unwrap_or_else(|| w.total_tokens().saturating_mul(seqs));
    let n_ctx = pad(asked.max(1), CTX_PAD);
    let per_seq = pad((n_ctx / seqs).max(1), CTX_PAD);
    (per_seq.saturating_mul(seqs), per_seq)
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

/// The compute buffer on the GPU that runs the layers: the largest of the attention's, the
/// feed-forward's and the output's live f32 tensors for one `n_ubatch` pass, plus the residual
/// stream alive through all three.
pub fn compute_buffer(spec: &Spec, w: &Workload) -> u64 {
    let (n_ctx, _) = context(w);
    let (n_batch, n_ub) = batches(w, n_ctx);
    let n_tok = n_ub.min(n_ctx) as f64;
    let n_out = n_tok.min(n_batch as f64);
    let f32b = 4.0;
    let embd = spec.hidden_size as f64;
    let heads = spec.num_heads as f64;
    let kv_cells = n_ctx as f64;
    let q = spec.q_dim() as f64;
    let kv = spec.kv_dim() as f64;
    let ff = match &spec.experts {
        // llama.cpp's MoE runs the selected experts of every token in one op: each token's
        // `n_expert_used` rows of gate, up and their product.
        Some(e) if e.sparse_layers > 0 => e.intermediate_size as f64 * e.active as f64,
        _ => spec.intermediate_size as f64,
    };
    let residual = 2.0 * embd * n_tok * f32b;
    let qkv = (q + 2.0 * kv) * n_tok * f32b;
    // The KQ mask: one row per token, padded, over every cell (f16 with flash attention).
    let mask = kv_cells * pad(n_tok as u64, 64) as f64 * if flash_attn(w) { 2.0 } else { 4.0 };
    let attention = if flash_attn(w) {
        qkv + q * n_tok * f32b + mask
    } else {
        qkv + kv_cells * n_tok * heads * f32b + mask
    };
    let ffn = 3.0 * ff * n_tok * f32b;
    let output = spec.vocab_size as f64 * n_out * f32b + embd * n_tok * f32b;
    (residual + attention.max(ffn).max(output)) as u64
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

    #[test]
    fn batches_are_capped_by_the_context() {
        let w = work(100, 10, 1, LlamaCppArgs::default());
        assert_eq!(batches(&w, 256), (256, 256));
        assert_eq!(batches(&w, 4096), (2048, 512));
    }
}
