//! DeepSeek-V2 / V3 (and R1, Kimi-K2, which are `deepseek_v3`): multi-head latent attention and
//! DeepSeekMoE, after transformers' modeling_deepseek_v2.py / modeling_deepseek_v3.py.
//!
//! Attention per layer: `q_a_proj` (hidden → q_lora_rank) + `q_a_layernorm` + `q_b_proj`
//! (→ heads × (nope + rope)), or one `q_proj` when `q_lora_rank` is null (V2-Lite);
//! `kv_a_proj_with_mqa` (hidden → kv_lora_rank + rope), `kv_a_layernorm`, `kv_b_proj`
//! (kv_lora_rank → heads × (nope + v)), `o_proj` (heads × v → hidden).
//! MLP: a dense MLP of `intermediate_size` in the first `first_k_dense_replace` layers (and those
//! off `moe_layer_freq`), else a router over `n_routed_experts` experts of `moe_intermediate_size`
//! plus one shared MLP of `n_shared_experts × moe_intermediate_size`. Every expert is resident.
//! The multi-token-prediction layer (`num_nextn_predict_layers`) is not loaded by transformers
//! (`_keys_to_ignore_on_load_unexpected`) and is not counted.

use super::{add, common, embeddings, finish, moe, mul, Built};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{layers_where, AttentionGroup, KvRow, Layout, Tensors};
use crate::model::spec::Role;

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    let (h, layers, vocab) = common(r)?;
    let heads = r.u64(&["num_attention_heads"])?;
    let kv_lora = r.u64(&["kv_lora_rank"])?;
    let q_lora = if r.is_null("q_lora_rank") {
        None
    } else {
        r.opt_u64(&["q_lora_rank"])?.filter(|q| *q > 0)
    };
    let nope = r.u64(&["qk_nope_head_dim"])?;
    let rope = r.u64(&["qk_rope_head_dim"])?;
    let v_dim = r.u64(&["v_head_dim"])?;
    let qk_head = add(r, "qk_nope_head_dim", nope, rope)?;
    let bias = r.bool("attention_bias").unwrap_or(false);
    let tie = r.bool("tie_word_embeddings").unwrap_or(false);

    let routed = r.opt_u64(&["n_routed_experts"])?.unwrap_or(0);
    let shared = r.opt_u64(&["n_shared_experts"])?.unwrap_or(0);
    let first_dense = r.opt_u64(&["first_k_dense_replace"])?.unwrap_or(0);
    let freq = r.opt_u64(&["moe_layer_freq"])?.unwrap_or(1).max(1);
    let sparse = if routed == 0 {
        0
    } else {
        layers_where(layers, freq, 0) - layers_where(first_dense.min(layers), freq, 0)
    };
    let dense = layers - sparse;
    let inter = if dense > 0 {
        r.u64(&["intermediate_size"])?
    } else {
        r.opt_u64(&["intermediate_size"])?.unwrap_or(0)
    };
    let moe_inter = if sparse > 0 {
        r.u64(&["moe_intermediate_size"])?
    } else {
        0
    };

    let shared_inter = mul(r, "n_shared_experts", shared, moe_inter)?;
    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    let q_out = mul(r, "num_attention_heads", heads, qk_head)?;
    match q_lora {
        Some(q) => {
            t.add(Role::AttnQ, q, h, layers);
            t.vector(q, layers);
            t.add(Role::AttnQ, q_out, q, layers);
            if bias {
                t.vector(q, layers);
            }
        }
        None => t.add(Role::AttnQ, q_out, h, layers),
    }
    let kv_a = add(r, "kv_lora_rank", kv_lora, rope)?;
    t.add(Role::AttnK, kv_a, h, layers);
    t.vector(kv_lora, layers);
    let kv_b = mul(
        r,
        "num_attention_heads",
        heads,
        add(r, "v_head_dim", nope, v_dim)?,
    )?;
    t.add(Role::AttnV, kv_b, kv_lora, layers);
    let o_in = mul(r, "num_attention_heads", heads, v_dim)?;
    t.add(Role::AttnO, h, o_in, layers);
    if bias {
        t.vector(kv_a, layers);
        t.vector(h, layers);
    }
    t.vector(h, layers.saturating_mul(2));
    t.gated_mlp(h, inter, dense, false);
    if sparse > 0 {
        t.add(Role::Router, routed, h, sparse);
        // V3's router keeps its `e_score_correction_bias` in the checkpoint.
        if r.str("model_type") != Some("deepseek_v2") {
            t.vector(routed, sparse);
        }
        let experts = mul(r, "n_routed_experts", routed, sparse)?;
        t.gated_mlp(h, moe_inter, experts, true);
        t.gated_mlp(h, shared_inter, sparse, false);
    }
    let tensors = finish(r, "n_routed_experts", t)?;

    let full_k = mul(r, "num_attention_heads", heads, qk_head)?;
    let row = KvRow::Latent {
        kv_lora_rank: kv_lora,
        rope_dim: rope,
        full_k,
        full_v: o_in,
    };
    let mut notes = Vec::new();
    if r.opt_u64(&["num_nextn_predict_layers"])?.unwrap_or(0) > 0 {
        notes.push("the checkpoint's multi-token-prediction layer is not counted: transformers does not load it, and vLLM only for speculative decoding".into());
    }
    Ok(Built {
        hidden: h,
        intermediate: inter,
        layers,
        heads,
        kv_heads: heads,
        head_dim: qk_head,
        vocab,
        tie,
        experts: moe(
            r,
            &["num_experts_per_tok"],
            1,
            routed,
            moe_inter,
            sparse,
            shared_inter,
        )?,
        layout: Layout {
            tensors,
            attention: vec![AttentionGroup {
                layers,
                window: None,
                row,
            }],
            state: Vec::new(),
        },
        notes,
        ..Built::default()
    })
}
