//! `Layout`: the tensors and the cache of a model whose layers are not all one llama-style block —
//! multi-head latent attention, local/global attention mixes, MoE with shared experts, state-space
//! hybrids. A family reader (`model::families`) spells these out from its config, following the
//! transformers module it mirrors, so the estimate never has to guess from llama's fields.

use serde::Serialize;

use super::spec::{Role, TensorGroup};

/// What a non-uniform model holds: every weight tensor, the layers that cache keys and values, and
/// the recurrent state of the layers that do not.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Layout {
    #[serde(skip)]
    pub tensors: Vec<TensorGroup>,
    pub attention: Vec<AttentionGroup>,
    pub state: Vec<StateGroup>,
    /// The checkpoint's multi-token-prediction modules, kept apart from `tensors`: no engine loads
    /// them with the model (see `Mtp`).
    #[serde(skip)]
    pub mtp: Option<Mtp>,
}

/// Multi-token-prediction modules (DeepSeek-V3's `model.layers.61`, `num_nextn_predict_layers`):
/// each one decoder layer of the model's last layer's shape plus `enorm`, `hnorm` (hidden each),
/// `eh_proj` (2·hidden → hidden) and `shared_head.norm`. Their `embed_tokens` and
/// `shared_head.head` copy the model's and are shared with it when they run as a draft, so they
/// are not counted. transformers skips them (`_keys_to_ignore_on_load_unexpected`); vLLM and
/// SGLang load them only as the draft of speculative decoding.
#[derive(Debug, Clone, Default)]
pub struct Mtp {
    pub layers: u64,
    /// Of `layers`, those with routed experts.
    pub sparse_layers: u64,
    pub tensors: Vec<TensorGroup>,
    pub attention: Vec<AttentionGroup>,
}

impl Mtp {
    pub fn parameters(&self) -> u64 {
        self.tensors
            .iter()
            .map(TensorGroup::params)
            .fold(0, u64::saturating_add)
    }
}

/// `layers` attention layers that cache the same row per token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AttentionGroup {
    pub layers: u64,
    /// The most tokens a layer attends to (a sliding window, or Llama-4's attention chunk): an
    /// engine that trims caches at most this many. `None` = every token.
    pub window: Option<u64>,
    pub row: KvRow,
}

/// Elements one token adds to one layer's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KvRow {
    /// Keys and values per KV head: `k` and `v` elements (kv_heads × head_dim each for GQA).
    Heads { k: u64, v: u64 },
    /// Multi-head latent attention (DeepSeek-V2/V3). What is cached depends on the engine:
    /// the compressed latent `kv_lora_rank + qk_rope_head_dim` (vLLM, SGLang), that latent as K plus
    /// `kv_lora_rank` as V (llama.cpp). transformers 5.17 caches the latent too and decompresses
    /// it per layer for attention.
    Latent {
        kv_lora_rank: u64,
        rope_dim: u64,
        /// num_heads × (qk_nope_head_dim + qk_rope_head_dim) and num_heads × v_head_dim.
        full_k: u64,
        full_v: u64,
        /// DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): the lightning indexer's key,
        /// `index_head_dim` elements per token beside the latent; 0 for plain MLA.
        #[serde(skip_serializing_if = "is_zero")]
        index_dim: u64,
    },
}

pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `layers` recurrent layers (Mamba, Mamba-2, Gated DeltaNet): per sequence a convolution state
/// of `conv_channels` × kernel columns and an SSM / delta-rule state of `ssm` elements, whatever
/// the length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StateGroup {
    pub layers: u64,
    pub conv_channels: u64,
    pub conv_kernel: u64,
    pub ssm: u64,
    /// The Mamba-2 (SSD) mixer's shape when these layers are Mamba-2 layers: what the chunked
    /// scan's transient tensors are sized by (`None` for Mamba-1 and Gated DeltaNet).
    #[serde(skip)]
    pub scan: Option<SsdScan>,
}

/// One Mamba-2 mixer's scan shape: `heads` × `head_dim` values, `groups` groups of B and C of
/// `state` each, scanned in chunks of `chunk` tokens (`chunk_size` / `mamba_chunk_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SsdScan {
    pub heads: u64,
    pub head_dim: u64,
    pub groups: u64,
    pub state: u64,
    pub chunk: u64,
}

/// Adds tensor groups with `checked` sizes: config values are user input, and a product that
/// overflows must become an error, not a wrapped number.
#[derive(Debug, Default)]
pub struct Tensors {
    pub groups: Vec<TensorGroup>,
    overflow: bool,
}

impl Tensors {
    /// `count` matrices of `rows × cols` (1 × n for vectors).
    pub fn add(&mut self, role: Role, rows: u64, cols: u64, count: u64) {
        self.push(role, rows, cols, count, false);
    }
    /// The same, for tensors of routed experts (what MXFP4 checkpoints and expert offload touch).
    pub fn add_routed(&mut self, role: Role, rows: u64, cols: u64, count: u64) {
        self.push(role, rows, cols, count, true);
    }
    /// A vector of `n` elements in each of `count` layers (norms, biases, sinks, A_log, D…).
    pub fn vector(&mut self, n: u64, count: u64) {
        self.push(Role::Vector, 1, n, count, false);
    }
    /// gate, up and down of a gated MLP of width `inter` in `count` places.
    pub fn gated_mlp(&mut self, hidden: u64, inter: u64, count: u64, routed: bool) {
        self.push(Role::MlpGate, inter, hidden, count, routed);
        self.push(Role::MlpUp, inter, hidden, count, routed);
        self.push(Role::MlpDown, hidden, inter, count, routed);
    }
    fn push(&mut self, role: Role, rows: u64, cols: u64, count: u64, routed: bool) {
        if rows == 0 || cols == 0 || count == 0 {
            return;
        }
        let ok = rows
            .checked_mul(cols)
            .and_then(|n| n.checked_mul(count))
            .is_some();
        if !ok {
            self.overflow = true;
            return;
        }
        self.groups.push(TensorGroup {
            role,
            rows,
            cols,
            count,
            routed,
        });
    }
    /// The groups, or `None` when a size overflowed (or the total does).
    pub fn finish(self) -> Option<Vec<TensorGroup>> {
        if self.overflow {
            return None;
        }
        self.groups
            .iter()
            .try_fold(0u64, |acc, t| acc.checked_add(t.params()))
            .map(|_| self.groups)
    }
}

/// How many of the layers `0..n` have `i % period == residue`, in O(1): the per-layer patterns
/// of configs (`attn_layer_period`, `moe_layer_freq`, `sliding_window_pattern`…) counted without
/// a loop over the layers, so a config's layer count cannot make the estimate slow. `period` 0
/// matches nothing.
pub fn layers_where(n: u64, period: u64, residue: u64) -> u64 {
    if period == 0 || residue >= period || n <= residue {
        return 0;
    }
    (n - residue - 1) / period + 1
}

/// The layers `0..n` for which `(i + 1) % period == 0` (every `period`-th layer, 1-based).
pub fn every_nth(n: u64, period: u64) -> u64 {
    match period {
        0 => 0,
        p => n / p,
    }
}

/// Layers with experts when every `step`-th layer (1-based) has them except those listed in
/// `mlp_only` (Qwen-MoE's `decoder_sparse_step` and `mlp_only_layers`).
pub fn sparse_every(n: u64, step: u64, mlp_only: &[u64]) -> u64 {
    let mut listed: Vec<u64> = mlp_only
        .iter()
        .copied()
        .filter(|i| *i < n && step > 0 && (i + 1) % step == 0)
        .collect();
    listed.sort_unstable();
    listed.dedup();
    every_nth(n, step).saturating_sub(listed.len() as u64)
}

/// The most parameters a model may have before llm-oom refuses it: 10^15, over a thousand times
/// the largest open model. Below it every byte count the estimate forms fits in 64 bits.
pub const MAX_PARAMETERS: u64 = 1_000_000_000_000_000;

/// The total of `groups`, or `None` when it overflows or passes `MAX_PARAMETERS`.
pub fn bounded_parameters(groups: &[TensorGroup]) -> Option<u64> {
    groups
        .iter()
        .try_fold(0u64, |acc, t| {
            t.rows
                .checked_mul(t.cols)
                .and_then(|n| n.checked_mul(t.count))
                .and_then(|n| acc.checked_add(n))
        })
        .filter(|n| *n <= MAX_PARAMETERS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_patterns_match_a_loop() {
        for n in 0..40u64 {
            for p in 0..7u64 {
                for r in 0..8u64 {
                    let looped = (0..n).filter(|i| p > 0 && i % p == r).count() as u64;
                    assert_eq!(layers_where(n, p, r), looped, "{n} {p} {r}");
                }
                let looped = (0..n).filter(|i| p > 0 && (i + 1) % p == 0).count() as u64;
                assert_eq!(every_nth(n, p), looped, "{n} {p}");
            }
        }
        assert_eq!(layers_where(1 << 62, 8, 4), 1 << 59);
        let only = [0, 3, 3, 7, 100];
        for n in 0..20u64 {
            for step in 1..4u64 {
                let looped = (0..n)
                    .filter(|i| !only.contains(i) && (i + 1) % step == 0)
                    .count() as u64;
                assert_eq!(sparse_every(n, step, &only), looped, "{n} {step}");
            }
        }
    }
}
