//! Jamba (v0.1, 1.5), after transformers' modeling_jamba.py.
//!
//! Layer i is attention when `i % attn_layer_period == attn_layer_offset`, else a Mamba (v1)
//! mixer; its MLP is a router over `num_experts` experts when
//! `i % expert_layer_period == expert_layer_offset`, else dense. Mamba mixer: `in_proj`
//! (hidden → 2·inner), `conv1d` over inner, `x_proj` (inner → dt_rank + 2·d_state), `dt_proj`
//! (dt_rank → inner, biased), `A_log` (inner × d_state), `D`, `out_proj`, and the dt/B/C
//! RMSNorms. Only the attention layers have a KV cache; each Mamba layer keeps inner × d_conv of
//! conv state and inner × d_state of SSM state per sequence.

use super::{common, embeddings, finish, gqa_row, moe, mul, Built, Gqa};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{layers_where, AttentionGroup, Layout, StateGroup, Tensors};
use crate::model::spec::Role;
use serde_json::Value;

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    let (h, layers, vocab) = common(r)?;
    let heads = r.u64(&["num_attention_heads"])?;
    let kv_heads = r.opt_u64(&["num_key_value_heads"])?.unwrap_or(heads);
    let head_dim = h / heads;
    let inter = r.u64(&["intermediate_size"])?;
    let tie = r.bool("tie_word_embeddings").unwrap_or(false);
    let attn_period = r.u64(&["attn_layer_period"])?;
    let attn_offset = r.opt_u64(&["attn_layer_offset"])?.unwrap_or(0);
    let exp_period = r.u64(&["expert_layer_period"])?;
    let exp_offset = r.opt_u64(&["expert_layer_offset"])?.unwrap_or(0);
    let experts = r.opt_u64(&["num_experts"])?.unwrap_or(1);
    let attention = layers_where(layers, attn_period, attn_offset);
    let mamba = layers - attention;
    let sparse = if experts > 1 {
        layers_where(layers, exp_period, exp_offset)
    } else {
        0
    };
    let d_state = r.u64(&["mamba_d_state"])?;
    let d_conv = r.u64(&["mamba_d_conv"])?;
    let inner = mul(r, "mamba_expand", r.u64(&["mamba_expand"])?, h)?;
    // mamba_dt_rank "auto" = ceil(hidden / 16).
    let dt_rank = match r.get("mamba_dt_rank") {
        Some(Value::String(s)) if s == "auto" => h.div_ceil(16),
        Some(v) => v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
            r.bad(
                "mamba_dt_rank",
                v,
                "expected \"auto\" or a positive integer",
            )
        })?,
        None => h.div_ceil(16),
    };
    let proj_bias = r.bool("mamba_proj_bias").unwrap_or(false);

    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    Gqa::uniform(h, heads, kv_heads, head_dim, false).add(r, &mut t, attention)?;
    t.add(Role::Mixer, mul(r, "mamba_expand", inner, 2)?, h, mamba);
    t.add(Role::Conv, inner, d_conv, mamba);
    if r.bool("mamba_conv_bias").unwrap_or(true) {
        t.vector(inner, mamba);
    }
    t.add(
        Role::Mixer,
        dt_rank.saturating_add(d_state.saturating_mul(2)),
        inner,
        mamba,
    );
    t.add(Role::Mixer, inner, dt_rank, mamba);
    t.vector(inner, mamba); // dt_proj bias
    t.vector(mul(r, "mamba_d_state", inner, d_state)?, mamba); // A_log
    t.vector(inner, mamba); // D
    t.add(Role::Mixer, h, inner, mamba);
    if proj_bias {
        t.vector(inner.saturating_mul(2), mamba);
        t.vector(h, mamba);
    }
    t.vector(dt_rank.saturating_add(d_state.saturating_mul(2)), mamba); // dt, B, C layernorms
    t.vector(h, layers.saturating_mul(2));
    t.gated_mlp(h, inter, layers - sparse, false);
    t.add(Role::Router, experts, h, sparse);
    t.gated_mlp(h, inter, mul(r, "num_experts", experts, sparse)?, true);
    let tensors = finish(r, "num_experts", t)?;

    Ok(Built {
        hidden: h,
        intermediate: inter,
        layers,
        heads,
        kv_heads,
        head_dim,
        vocab,
        tie,
        experts: moe(r, &["num_experts_per_tok"], 2, experts, inter, sparse, 0)?,
        layout: Layout {
            mtp: None,
            tensors,
            attention: vec![AttentionGroup {
                layers: attention,
                window: None,
                row: gqa_row(r, kv_heads, head_dim)?,
            }]
            .into_iter()
            .filter(|g| g.layers > 0)
            .collect(),
            state: vec![StateGroup {
                layers: mamba,
                conv_channels: inner,
                conv_kernel: d_conv,
                ssm: mul(r, "mamba_d_state", inner, d_state)?,
                scan: None,
            }],
        },
        ..Built::default()
    })
}
