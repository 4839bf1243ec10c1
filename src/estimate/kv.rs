//! KV-cache bytes: per attention layer and token, the K and V rows (kv_heads × head_dim each, or
//! for multi-head latent attention what the engine keeps of it), with sliding and chunked layers
//! holding at most their window where the engine trims them; plus, for state-space and
//! linear-attention layers, a fixed state per sequence that does not grow with length.
//!
//! Because sliding layers stop growing, bytes per token are a function of the context length:
//! `kv_bytes_per_token_at` says what the next token adds at a given length.

use serde::Serialize;

use super::engine::{Engine, Profile};
use crate::dtype::KvDtype;
use crate::model::layout::{AttentionGroup, KvRow};
use crate::model::Spec;

/// What an engine keeps of a latent-attention (MLA) layer per token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MlaCache {
    /// The decompressed per-head K (nope + rope) and V: the most an engine could keep (the
    /// bound `CachePolicy::KEEP_ALL` uses; transformers before 5.x cached this).
    Full,
    /// The compressed latent `kv_lora_rank + qk_rope_head_dim` once per token (vLLM's and
    /// SGLang's MLA backends, transformers 5.17's DynamicCache).
    Latent,
    /// llama.cpp's MLA: the latent as K (`key_length` = kv_lora_rank + rope, one KV head) plus
    /// `value_length` = kv_lora_rank as V.
    LatentKv,
}

/// What an engine keeps of a DeepSeek-sparse-attention layer (DeepSeek-V3.2, GLM-5): MLA plus
/// the lightning indexer's one key of `index_head_dim` per token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DsaCache {
    /// vLLM (vllm-project/vllm@002d6073, vllm/model_executor/models/deepseek_v2.py,
    /// `Indexer.__init__`: `DeepseekV32IndexerCache(head_dim=head_dim + head_dim //
    /// quant_block_size * 4, dtype=torch.uint8)`, "fp8 naive cache ... value in fp8 and scale in
    /// fp32 per quant_block_size element", quant_block_size 128): the MLA row as `MlaCache` says,
    /// plus `index_head_dim` bytes and 4 bytes a 128-element block, whatever the KV dtype.
    /// SGLang is taken to keep the same row (not read from its source).
    Fp8Index,
    /// The MLA row as `MlaCache` says plus the indexer key in the cache's dtype. transformers
    /// 5.25 (modeling_deepseek_v32.py / modeling_glm_moe_dsa.py: `cache.update(k_pass, k_rot)`
    /// then `expand_kv`; the key through `cache.update_indexer`, which cache_utils.py's
    /// `DynamicIndexedLayer` grows by concatenation). transformers 5.17 cached the expanded K/V
    /// of every head instead ("Sparse-attention models cache the expanded K/V, not the
    /// compressed latents"); llm-oom follows the newer release. Also the row for engines whose
    /// DSA cache llm-oom has not read (llama.cpp, llm-oom's runtime).
    Index,
}

/// How an engine caches each kind of layer (from its `Profile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CachePolicy {
    /// Sliding-window and chunked layers keep at most their window.
    pub trims_windows: bool,
    pub mla: MlaCache,
    pub dsa: DsaCache,
    /// Conv-state columns per channel: the whole kernel (transformers' caches) or kernel − 1
    /// (vLLM's and llama.cpp's).
    pub conv_full_kernel: bool,
    /// Recurrent state in f32 (llama.cpp's `r`/`s` caches), else in the model's 16-bit dtype.
    pub state_f32: bool,
}

impl CachePolicy {
    pub fn of(engine: Engine) -> CachePolicy {
        let p = Profile::of(engine);
        CachePolicy {
            trims_windows: p.caps_sliding_window,
            mla: p.mla_cache,
            dsa: p.dsa_cache,
            conv_full_kernel: p.conv_state_full_kernel,
            state_f32: p.recurrent_state_f32,
        }
    }

    /// Every token in every layer, the decompressed MLA rows: the most any engine keeps.
    pub const KEEP_ALL: CachePolicy = CachePolicy {
        trims_windows: false,
        mla: MlaCache::Full,
        dsa: DsaCache::Index,
        conv_full_kernel: true,
        state_f32: false,
    };
}

/// The DSA indexer's quantization block in vLLM (`Indexer.quant_block_size`).
const INDEX_QUANT_BLOCK: u64 = 128;

/// Bytes one layer of `group` caches per token under `policy`.
fn row_bytes(row: KvRow, kv: KvDtype, policy: CachePolicy) -> u64 {
    let e = kv.elem_bytes();
    match row {
        KvRow::Heads { k, v } => e.of(k).saturating_add(e.of(v)),
        KvRow::Latent {
            kv_lora_rank,
            rope_dim,
            full_k,
            full_v,
            index_dim,
        } => {
            let mla = match policy.mla {
                MlaCache::Full => e.of(full_k).saturating_add(e.of(full_v)),
                MlaCache::Latent => e.of(kv_lora_rank.saturating_add(rope_dim)),
                MlaCache::LatentKv => e
                    .of(kv_lora_rank.saturating_add(rope_dim))
                    .saturating_add(e.of(kv_lora_rank)),
            };
            if index_dim == 0 {
                return mla;
            }
            match policy.dsa {
                DsaCache::Fp8Index => mla
                    .saturating_add(index_dim)
                    .saturating_add(index_dim / INDEX_QUANT_BLOCK * 4),
                DsaCache::Index => mla.saturating_add(e.of(index_dim)),
            }
        }
    }
}

/// Tokens a layer of `g` holds at `tokens` tokens of context.
fn held(g: &AttentionGroup, tokens: u64, policy: CachePolicy) -> u64 {
    match g.window {
        Some(w) if policy.trims_windows => tokens.min(w),
        _ => tokens,
    }
}

/// Bytes the (`context` + 1)-th token adds to one sequence's cache: the layers whose window it
/// still fits in (or that keep every token). At `context` 0 it is the per-token cost of a short
/// sequence; past every window only the global layers grow.
pub fn kv_bytes_per_token_at(spec: &Spec, kv: KvDtype, policy: CachePolicy, context: u64) -> u64 {
    spec.attention_groups()
        .iter()
        .filter(|g| held(g, context.saturating_add(1), policy) > held(g, context, policy))
        .map(|g| g.layers.saturating_mul(row_bytes(g.row, kv, policy)))
        .fold(0, u64::saturating_add)
}

/// Bytes one token adds to the cache of one sequence while it is shorter than any window, with
/// every layer's full rows (transformers' cache). `kv_bytes_per_token_at` gives it per engine.
pub fn kv_bytes_per_token(spec: &Spec, kv: KvDtype) -> u64 {
    kv_bytes_per_token_at(spec, kv, CachePolicy::KEEP_ALL, 0)
}

/// Bytes of one sequence's recurrent state (conv + SSM of every state-space layer): the same at
/// any length.
pub fn state_bytes(spec: &Spec, kv: KvDtype, policy: CachePolicy) -> u64 {
    let elem = if policy.state_f32 || kv.elem_bytes().as_f64() >= 4.0 {
        4
    } else {
        2
    };
    spec.state_groups()
        .iter()
        .map(|g| {
            let cols = if policy.conv_full_kernel {
                g.conv_kernel
            } else {
                g.conv_kernel.saturating_sub(1)
            };
            g.layers.saturating_mul(
                g.conv_channels
                    .saturating_mul(cols)
                    .saturating_add(g.ssm)
                    .saturating_mul(elem),
            )
        })
        .fold(0, u64::saturating_add)
}

/// Bytes of the cache of `batch` sequences of `tokens` tokens each, as `policy`'s engine keeps it.
pub fn kv_bytes_in(spec: &Spec, kv: KvDtype, tokens: u64, batch: u64, policy: CachePolicy) -> u64 {
    kv_bytes_in_cells(spec, kv, batch, policy, |window| match window {
        Some(w) if policy.trims_windows => tokens.min(w),
        _ => tokens,
    })
}

/// Bytes of the cache of `batch` sequences where each layer holds `cells(window)` tokens per
/// sequence (`window`: the layer's sliding window, `None` for a global layer): for an engine that
/// sizes a sliding layer's cache by its own rule (llama.cpp: window + micro-batch, padded).
pub fn kv_bytes_in_cells(
    spec: &Spec,
    kv: KvDtype,
    batch: u64,
    policy: CachePolicy,
    cells: impl Fn(Option<u64>) -> u64,
) -> u64 {
    let attention = spec
        .attention_groups()
        .iter()
        .map(|g| {
            g.layers
                .saturating_mul(row_bytes(g.row, kv, policy))
                .saturating_mul(cells(g.window))
        })
        .fold(0, u64::saturating_add);
    batch.saturating_mul(attention.saturating_add(state_bytes(spec, kv, policy)))
}

/// Bytes of the cache of `batch` sequences of `tokens` tokens each. `trim_windows`: whether the
/// engine keeps only the window in sliding-window layers (full MLA rows, whole conv kernels).
pub fn kv_bytes(spec: &Spec, kv: KvDtype, tokens: u64, batch: u64, trim_windows: bool) -> u64 {
    let policy = CachePolicy {
        trims_windows: trim_windows,
        ..CachePolicy::KEEP_ALL
    };
    kv_bytes_in(spec, kv, tokens, batch, policy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::presets;

    fn preset(id: &str) -> Spec {
        let (id, json) = presets::find(id).unwrap();
        presets::load(id, json).unwrap()
    }

    #[test]
    fn per_token_bytes_are_exact() {
        let m = preset("mistralai/Mistral-7B-Instruct-v0.2");
        assert_eq!(kv_bytes_per_token(&m, KvDtype::Bf16), 131_072);
        assert_eq!(
            kv_bytes(&m, KvDtype::Bf16, 4096, 4, true),
            4 * 4096 * 131_072
        );
        // Llama-2-7B has no GQA: 2 × 32 × 4096 × 2 = 512 KiB per token.
        assert_eq!(
            kv_bytes_per_token(&preset("meta-llama/Llama-2-7b-hf"), KvDtype::F16),
            524_288
        );
        // q8_0: 34 bytes per 32 values.
        assert_eq!(
            kv_bytes_per_token(&m, KvDtype::Q8_0),
            2 * 32 * 1024 / 32 * 34
        );
    }

    #[test]
    fn sliding_layers_stop_at_the_window() {
        let g = preset("google/gemma-2-9b-it");
        assert_eq!((g.sliding_layers, g.sliding_window), (21, Some(4096)));
        let per = 2 * 8 * 256 * 2;
        assert_eq!(
            kv_bytes(&g, KvDtype::Bf16, 8192, 1, true),
            per * (21 * 8192 + 21 * 4096)
        );
        // transformers' generate() keeps every token (measured on the H200).
        assert_eq!(kv_bytes(&g, KvDtype::Bf16, 8192, 1, false), per * 42 * 8192);
        assert_eq!(kv_bytes(&g, KvDtype::Bf16, 1000, 1, true), per * 42 * 1000);
    }

    #[test]
    fn a_dsa_row_adds_the_indexer_key_as_each_engine_keeps_it() {
        let row = KvRow::Latent {
            kv_lora_rank: 512,
            rope_dim: 64,
            full_k: 128 * 192,
            full_v: 128 * 128,
            index_dim: 128,
        };
        let bf16 = KvDtype::Bf16;
        let vllm = CachePolicy::of(Engine::Vllm);
        let tf = CachePolicy::of(Engine::Transformers);
        // vLLM: the bf16 latent, then 128 fp8 bytes and one f32 scale.
        assert_eq!(row_bytes(row, bf16, vllm), 576 * 2 + 128 + 4);
        // Its indexer row does not follow --kv-cache-dtype.
        assert_eq!(row_bytes(row, KvDtype::Fp8, vllm), 576 + 132);
        // transformers: the key in the cache dtype beside the latent.
        assert_eq!(row_bytes(row, bf16, tf), (576 + 128) * 2);
        assert_eq!(
            row_bytes(row, bf16, CachePolicy::KEEP_ALL),
            (128 * 192 + 128 * 128 + 128) * 2
        );
        // Plain MLA is unchanged.
        let mla = KvRow::Latent {
            kv_lora_rank: 512,
            rope_dim: 64,
            full_k: 128 * 192,
            full_v: 128 * 128,
            index_dim: 0,
        };
        assert_eq!(row_bytes(mla, bf16, vllm), 576 * 2);
    }
}
