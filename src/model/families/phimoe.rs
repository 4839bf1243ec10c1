//! Phi-3.5-MoE (`phimoe`), after transformers' modeling_phimoe.py: biased q/k/v/o, LayerNorms
//! with a bias, a router over `num_local_experts` experts of `intermediate_size` in every layer,
//! and a biased lm_head (`lm_head_bias`).

use super::{common, embeddings, finish, gqa_row, moe, mul, Built, Gqa};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{AttentionGroup, Layout, Tensors};
use crate::model::spec::Role;

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    let (h, layers, vocab) = common(r)?;
    let heads = r.u64(&["num_attention_heads"])?;
    let kv_heads = r.opt_u64(&["num_key_value_heads"])?.unwrap_or(heads);
    let head_dim = match r.opt_u64(&["head_dim"])? {
        Some(d) if d > 0 => d,
        _ => h / heads,
    };
    let experts = r.u64(&["num_local_experts"])?;
    let inter = r.u64(&["intermediate_size"])?;
    let tie = r.bool("tie_word_embeddings").unwrap_or(false);
    let window = r.opt_u64(&["sliding_window"])?.filter(|w| *w > 0);

    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    t.vector(h, 1); // final LayerNorm bias
    if r.bool("lm_head_bias").unwrap_or(true) && !tie {
        t.vector(vocab, 1);
    }
    let bias = r.bool("attention_bias").unwrap_or(true);
    Gqa::uniform(h, heads, kv_heads, head_dim, bias).add(r, &mut t, layers)?;
    t.vector(h, layers.saturating_mul(4)); // two LayerNorms, weight and bias
    t.add(Role::Router, experts, h, layers);
    t.gated_mlp(
        h,
        inter,
        mul(r, "num_local_experts", experts, layers)?,
        true,
    );
    let tensors = finish(r, "num_local_experts", t)?;
    let row = gqa_row(r, kv_heads, head_dim)?;
    Ok(Built {
        hidden: h,
        intermediate: 0,
        layers,
        heads,
        kv_heads,
        head_dim,
        vocab,
        tie,
        sliding_window: window,
        sliding_layers: if window.is_some() { layers } else { 0 },
        experts: moe(r, &["num_experts_per_tok"], 2, experts, inter, layers, 0)?,
        layout: Layout {
            mtp: None,
            tensors,
            attention: vec![AttentionGroup {
                layers,
                window,
                row,
            }],
            state: Vec::new(),
        },
        notes: Vec::new(),
    })
}
