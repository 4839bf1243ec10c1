//! GPT-OSS (20B, 120B), after transformers' modeling_gpt_oss.py.
//!
//! Attention: biased q/k/v/o, one learned sink logit per head (`sinks`), sliding windows of
//! `sliding_window` tokens on the `layer_types` marked so (by default the even layers). MLP: a
//! biased router over `num_local_experts` experts whose fused `gate_up_proj` and `down_proj` carry
//! biases too; no dense MLP. The published checkpoints store the experts in MXFP4
//! (`quantization_config`), everything else in bf16.

use super::{common, embeddings, finish, gqa_row, layer_types, moe, mul, Built, Gqa, Kind};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{AttentionGroup, Layout, Tensors};
use crate::model::spec::Role;

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    let (h, layers, vocab) = common(r)?;
    let heads = r.u64(&["num_attention_heads"])?;
    let kv_heads = r.opt_u64(&["num_key_value_heads"])?.unwrap_or(heads);
    let head_dim = r.u64(&["head_dim"])?;
    let experts = r.u64(&["num_local_experts"])?;
    let inter = r.u64(&["intermediate_size"])?;
    let window = r.opt_u64(&["sliding_window"])?.filter(|w| *w > 0);
    let tie = r.bool("tie_word_embeddings").unwrap_or(false);
    let sliding = match layer_types(r, Kind::GptOss, layers)? {
        Some(types) => types.iter().filter(|t| *t == "sliding_attention").count() as u64,
        None => layers.div_ceil(2),
    };
    let sliding = if window.is_some() { sliding } else { 0 };

    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    let bias = r.bool("attention_bias").unwrap_or(true);
    Gqa::uniform(h, heads, kv_heads, head_dim, bias).add(r, &mut t, layers)?;
    t.vector(heads, layers); // sinks
    t.vector(h, layers.saturating_mul(2));
    t.add(Role::Router, experts, h, layers);
    t.vector(experts, layers);
    let n = mul(r, "num_local_experts", experts, layers)?;
    t.gated_mlp(h, inter, n, true);
    t.vector(mul(r, "intermediate_size", inter, 2)?, n); // gate_up_proj_bias
    t.vector(h, n); // down_proj_bias
    let tensors = finish(r, "num_local_experts", t)?;

    let row = gqa_row(r, kv_heads, head_dim)?;
    let attention = [
        AttentionGroup {
            layers: layers - sliding,
            window: None,
            row,
        },
        AttentionGroup {
            layers: sliding,
            window,
            row,
        },
    ]
    .into_iter()
    .filter(|g| g.layers > 0)
    .collect();
    Ok(Built {
        hidden: h,
        intermediate: 0,
        layers,
        heads,
        kv_heads,
        head_dim,
        vocab,
        tie,
        sliding_window: window.filter(|_| sliding > 0),
        sliding_layers: sliding,
        experts: moe(
            r,
            &["num_experts_per_tok", "experts_per_token"],
            4,
            experts,
            inter,
            layers,
            0,
        )?,
        layout: Layout {
            mtp: None,
            tensors,
            attention,
            state: Vec::new(),
        },
        notes: Vec::new(),
    })
}
