//! Qwen3-Next, after transformers' modeling_qwen3_next.py.
//!
//! Every `full_attention_interval`-th layer is gated full attention (`q_proj` doubled for the
//! output gate, q/k RMSNorms); the others a Gated DeltaNet: `in_proj_qkvz` (hidden →
//! 2·key_dim + 2·value_dim), `in_proj_ba` (→ 2·v_heads), a `conv1d` over 2·key_dim + value_dim
//! channels, `dt_bias` and `A_log` per value head, a gated RMSNorm of the value head width,
//! `out_proj`. MLP: a router over `num_experts` experts, a shared expert and its sigmoid gate.
//! A DeltaNet layer keeps per sequence its conv state and a v_heads × k_dim × v_dim state.
//!
//! Qwen3.5 / Qwen3.6 (modeling_qwen3_5.py, modeling_qwen3_5_moe.py, transformers 5.25) are these
//! layers with `in_proj_qkvz` split into `in_proj_qkv` and `in_proj_z` and `in_proj_ba` into
//! `in_proj_b` and `in_proj_a` (the same parameters), and their MLP chosen by the model type, not
//! by `decoder_sparse_step` / `mlp_only_layers`: `qwen3_5` has a dense MLP in every layer,
//! `qwen3_5_moe` experts (with the shared expert and its gate) in every layer.

use super::{add, common, embeddings, finish, gqa_row, layer_types, moe, mul, Built, Gqa, Kind};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{
    every_nth, sparse_every, AttentionGroup, Layout, Mtp, StateGroup, Tensors,
};
use crate::model::spec::Role;
use serde_json::Value;

/// Which modeling file the layers follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Variant {
    /// qwen3_next: experts where `decoder_sparse_step` and `mlp_only_layers` put them.
    Next,
    /// qwen3_5: a dense MLP in every layer.
    Qwen35,
    /// qwen3_5_moe: experts in every layer.
    Qwen35Moe,
}

pub(super) fn read(r: &Reader, variant: Variant) -> Result<Built, InputError> {
    let kind = match variant {
        Variant::Next => Kind::Qwen3Next,
        Variant::Qwen35 | Variant::Qwen35Moe => Kind::Qwen35,
    };
    let (h, layers, vocab) = common(r)?;
    let heads = r.u64(&["num_attention_heads"])?;
    let kv_heads = r.opt_u64(&["num_key_value_heads"])?.unwrap_or(heads);
    let head_dim = r.u64(&["head_dim"])?;
    let tie = r.tie_word_embeddings().unwrap_or(false);
    let interval = r.u64(&["full_attention_interval"])?;
    let full = match layer_types(r, kind, layers)? {
        Some(types) => types.iter().filter(|t| *t == "full_attention").count() as u64,
        None => every_nth(layers, interval),
    };
    let linear = layers - full;
    let (nk, nv) = (
        r.u64(&["linear_num_key_heads"])?,
        r.u64(&["linear_num_value_heads"])?,
    );
    let (dk, dv) = (
        r.u64(&["linear_key_head_dim"])?,
        r.u64(&["linear_value_head_dim"])?,
    );
    let kernel = r.u64(&["linear_conv_kernel_dim"])?;
    let key_dim = mul(r, "linear_num_key_heads", nk, dk)?;
    let value_dim = mul(r, "linear_num_value_heads", nv, dv)?;
    let conv_dim = add(
        r,
        "linear_value_head_dim",
        key_dim.saturating_mul(2),
        value_dim,
    )?;

    let experts = match variant {
        Variant::Qwen35 => 0,
        Variant::Next | Variant::Qwen35Moe => r.opt_u64(&["num_experts"])?.unwrap_or(0),
    };
    let step = r.opt_u64(&["decoder_sparse_step"])?.unwrap_or(1).max(1);
    let mlp_only: Vec<u64> = r
        .get("mlp_only_layers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let sparse = match variant {
        _ if experts == 0 => 0,
        Variant::Next => sparse_every(layers, step, &mlp_only),
        Variant::Qwen35 | Variant::Qwen35Moe => layers,
    };
    let moe_inter = if sparse > 0 {
        r.u64(&["moe_intermediate_size"])?
    } else {
        0
    };
    let shared_inter = if sparse > 0 {
        r.opt_u64(&["shared_expert_intermediate_size"])?
            .unwrap_or(0)
    } else {
        0
    };
    let inter = if layers > sparse {
        r.u64(&["intermediate_size"])?
    } else {
        r.opt_u64(&["intermediate_size"])?.unwrap_or(0)
    };

    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    let bias = r.bool("attention_bias").unwrap_or(false);
    Gqa::uniform(h, heads, kv_heads, head_dim, bias).add(r, &mut t, full)?;
    // the output gate doubles q_proj
    t.add(
        Role::AttnQ,
        mul(r, "num_attention_heads", heads, head_dim)?,
        h,
        full,
    );
    if bias {
        t.vector(heads.saturating_mul(head_dim), full);
    }
    t.vector(head_dim, full.saturating_mul(2)); // q_norm, k_norm
    t.add(
        Role::Mixer,
        add(
            r,
            "linear_value_head_dim",
            key_dim.saturating_mul(2),
            value_dim.saturating_mul(2),
        )?,
        h,
        linear,
    );
    t.add(Role::Mixer, nv.saturating_mul(2), h, linear);
    t.add(Role::Conv, conv_dim, kernel, linear);
    t.vector(nv, linear.saturating_mul(2)); // dt_bias, A_log
    t.vector(dv, linear); // gated norm
    t.add(Role::Mixer, h, value_dim, linear);
    t.vector(h, layers.saturating_mul(2));
    t.gated_mlp(h, inter, layers - sparse, false);
    t.add(Role::Router, experts, h, sparse);
    t.gated_mlp(h, moe_inter, mul(r, "num_experts", experts, sparse)?, true);
    if shared_inter > 0 {
        t.gated_mlp(h, shared_inter, sparse, false);
        t.add(Role::Router, 1, h, sparse);
    }
    let tensors = finish(r, "num_experts", t)?;
    let row = gqa_row(r, kv_heads, head_dim)?;

    // Qwen3.5's `mtp_num_hidden_layers` (`mtp.*` in the checkpoint): full-attention layers of the
    // trunk's MLP kind, then `fc` (2·hidden → hidden), `pre_fc_norm_embedding`,
    // `pre_fc_norm_hidden` and `norm` once for the module (vLLM's qwen3_5_mtp.py); the embedding
    // and head are the model's.
    let mut notes = Vec::new();
    let mtp = match r.opt_u64(&["mtp_num_hidden_layers"])?.unwrap_or(0) {
        0 => None,
        n => {
            let ms = if sparse > 0 { n } else { 0 };
            let mut m = Tensors::default();
            Gqa::uniform(h, heads, kv_heads, head_dim, bias).add(r, &mut m, n)?;
            m.add(
                Role::AttnQ,
                mul(r, "num_attention_heads", heads, head_dim)?,
                h,
                n,
            );
            if bias {
                m.vector(heads.saturating_mul(head_dim), n);
            }
            m.vector(head_dim, mul(r, "mtp_num_hidden_layers", n, 2)?);
            m.vector(h, mul(r, "mtp_num_hidden_layers", n, 2)?);
            m.gated_mlp(h, inter, n - ms, false);
            if ms > 0 {
                m.add(Role::Router, experts, h, ms);
                m.gated_mlp(h, moe_inter, mul(r, "num_experts", experts, ms)?, true);
                if shared_inter > 0 {
                    m.gated_mlp(h, shared_inter, ms, false);
                    m.add(Role::Router, 1, h, ms);
                }
            }
            m.vector(h, 3);
            // fc: unquantized in vLLM's qwen3_5_mtp.py, priced in 16 bits as a head is.
            m.add(Role::LmHead, h, mul(r, "hidden_size", h, 2)?, 1);
            let mtp = Mtp {
                layers: n,
                sparse_layers: ms,
                tensors: finish(r, "mtp_num_hidden_layers", m)?,
                attention: vec![AttentionGroup {
                    layers: n,
                    window: None,
                    row,
                }],
            };
            notes.push(format!(
                "+ {n} multi-token-prediction layer(s) in the checkpoint ({} parameters beside the \
                 shared embedding and head), not counted: transformers does not load them, vLLM \
                 and SGLang only as the draft of speculative decoding (--mtp prices them)",
                crate::units::group(mtp.parameters())
            ));
            Some(mtp)
        }
    };

    Ok(Built {
        hidden: h,
        intermediate: inter,
        layers,
        heads,
        kv_heads,
        head_dim,
        vocab,
        tie,
        experts: moe(
            r,
            &["num_experts_per_tok"],
            1,
            experts,
            moe_inter,
            sparse,
            shared_inter,
        )?,
        notes,
        layout: Layout {
            mtp,
            tensors,
            attention: vec![AttentionGroup {
                layers: full,
                window: None,
                row,
            }]
            .into_iter()
            .filter(|g| g.layers > 0)
            .collect(),
            state: vec![StateGroup {
                layers: linear,
                conv_channels: conv_dim,
                conv_kernel: kernel,
                ssm: mul(
                    r,
                    "linear_value_head_dim",
                    mul(r, "linear_num_value_heads", nv, dk)?,
                    dv,
                )?,
                scan: None,
            }],
        },
        ..Built::default()
    })
}
