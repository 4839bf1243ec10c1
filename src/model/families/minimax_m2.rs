//! MiniMax-M2 (`minimax_m2`: M2, M2.1, M2.5, M2.7), after transformers 5.25's
//! modeling_minimax_m2.py and configuration_minimax_m2.py.
//!
//! Every layer is grouped-query softmax attention without biases whose `q_norm` and `k_norm` are
//! RMSNorms over the whole projection (`num_attention_heads × head_dim` and
//! `num_key_value_heads × head_dim`, not one head), then a sparse MoE block: a router
//! (`gate.weight`, experts × hidden), the `e_score_correction_bias` buffer (one per expert,
//! persistent, so the checkpoint stores it) and `num_local_experts` gated experts of
//! `intermediate_size`. No shared expert and no dense layer. `head_dim` is the config's (128 by
//! default, not hidden / heads); the partial rotary `rotary_dim` changes no tensor and no cache.
//!
//! The modeling file reads neither `attn_type_list` nor `use_qk_norm` / `qk_norm_type`: it builds
//! full attention with the q/k norms in every layer, so every layer caches K and V of
//! `num_key_value_heads × head_dim`, with no sliding window. `attn_type_list` is still checked: an
//! entry other than 1 is MiniMax's lightning (linear) attention, which this reader does not size.
//! The MTP modules (`num_mtp_modules`) are not built by transformers; `parse_config` notes them.

use super::{common, embeddings, finish, gqa_row, moe, mul, Built, Gqa};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{AttentionGroup, Layout, Tensors};
use crate::model::spec::Role;
use serde_json::Value;

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    let (h, layers, vocab) = common(r)?;
    attention_types(r, layers)?;
    let heads = r.u64(&["num_attention_heads"])?;
    let kv_heads = r.opt_u64(&["num_key_value_heads"])?.unwrap_or(heads);
    // MiniMaxM2Attention: `getattr(config, "head_dim", hidden // heads)`; the config class
    // always has one (128 by default, from `defaults`).
    let head_dim = match r.opt_u64(&["head_dim"])? {
        Some(d) if d > 0 => d,
        _ => h / heads.max(1),
    };
    // `num_experts` is the config class's alias (`attribute_map`) of `num_local_experts`; 256
    // when neither is set.
    let experts = r
        .opt_u64(&["num_local_experts", "num_experts"])?
        .unwrap_or(256);
    if experts == 0 {
        return Err(r.bad("num_local_experts", &Value::from(0), "must be at least 1"));
    }
    let inter = r.u64(&["intermediate_size"])?;
    let tie = r.tie_word_embeddings().unwrap_or(false);

    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    Gqa::uniform(h, heads, kv_heads, head_dim, false).add(r, &mut t, layers)?;
    // q_norm and k_norm: one weight over all heads' width.
    t.vector(mul(r, "num_attention_heads", heads, head_dim)?, layers);
    t.vector(mul(r, "num_key_value_heads", kv_heads, head_dim)?, layers);
    t.vector(h, layers.saturating_mul(2)); // input and post-attention RMSNorms
    t.add(Role::Router, experts, h, layers);
    t.vector(experts, layers); // e_score_correction_bias
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
        sliding_window: None,
        sliding_layers: 0,
        experts: moe(r, &["num_experts_per_tok"], 8, experts, inter, layers, 0)?,
        layout: Layout {
            mtp: None,
            tensors,
            attention: vec![AttentionGroup {
                layers,
                window: None,
                row,
            }],
            state: Vec::new(),
        },
        notes: Vec::new(),
    })
}

/// `attn_type_list`, when present: one entry per layer, each 1 (softmax attention). MiniMax's
/// own code (MiniMax-Text-01 / M1) builds lightning attention where it says 0; transformers 5.25's
/// minimax_m2 ignores the list, so a 0 there would be sized wrong either way and is refused.
fn attention_types(r: &Reader, layers: u64) -> Result<(), InputError> {
    let Some(v) = r.get("attn_type_list") else {
        return Ok(());
    };
    if v.is_null() {
        return Ok(());
    }
    let Some(a) = v.as_array() else {
        return Err(r.bad("attn_type_list", v, "expected a list of 0/1 per layer"));
    };
    if let Some(t) = a.iter().find(|t| t.as_u64() != Some(1)) {
        return Err(r.bad(
            "attn_type_list",
            t,
            "an entry other than 1 is a lightning (linear) attention layer, which llm-oom does not model for `minimax_m2`; it cannot size this model",
        ));
    }
    if a.len() as u64 != layers {
        return Err(r.bad(
            "attn_type_list",
            &Value::from(a.len()),
            &format!("has that many entries for {layers} layers"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    fn m27(edit: impl FnOnce(&mut Value)) -> Result<crate::model::Spec, String> {
        super::super::parse_edited(
            include_str!("../../../tests/fixtures/configs-2026/minimax-m2.7/config.json"),
            "minimax",
            edit,
        )
    }

    #[test]
    fn minimax_m2_7_counts_what_transformers_builds() {
        let spec = m27(|_| {}).unwrap();
        // By hand, from config.json: hidden 3072, 48 heads and 8 KV heads of 128, 256 experts
        // of 1536, 62 layers, vocab 200,064, lm_head apart.
        let h: u64 = 3072;
        let attention = 2 * h * 48 * 128 + 2 * h * 8 * 128 // q, o; k, v
            + 48 * 128 + 8 * 128; // q_norm, k_norm over all heads
        let moe = 256 * h + 256 // gate, e_score_correction_bias
            + 256 * 3 * h * 1536; // experts' gate_up_proj and down_proj
        let layer = attention + 2 * h + moe;
        let total = 62 * layer + 2 * 200_064 * h + h;
        assert_eq!(spec.parameters(), total);
        // transformers 5.25's meta-device count (docs/models.md).
        assert_eq!(total, 228_689_764_864);
        assert_eq!(spec.full_attention_layers(), 62);
        assert_eq!((spec.num_kv_heads, spec.head_dim), (8, 128));
    }

    #[test]
    fn lightning_attention_layers_and_a_short_list_are_refused() {
        let e = m27(|v| v["attn_type_list"][0] = Value::from(0)).unwrap_err();
        assert!(
            e.contains("attn_type_list") && e.contains("does not model"),
            "{e}"
        );
        let e = m27(|v| {
            v["attn_type_list"].as_array_mut().unwrap().pop();
        })
        .unwrap_err();
        assert!(e.contains("61") && e.contains("62 layers"), "{e}");
        // Absent, every layer is full attention.
        let spec = m27(|v| {
            v.as_object_mut().unwrap().remove("attn_type_list");
        })
        .unwrap();
        assert_eq!(spec.full_attention_layers(), 62);
    }

    #[test]
    fn a_shared_expert_is_refused_not_ignored() {
        let e = m27(|v| v["shared_intermediate_size"] = Value::from(1536)).unwrap_err();
        assert!(e.contains("shared_intermediate_size"), "{e}");
    }
}
