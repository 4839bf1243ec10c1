//! Xiaomi MiMo-V2 (`mimo_v2`: MiMo-V2.5; `mimo_v2_flash`: MiMo-V2-Flash), after transformers
//! 5.25's modeling_mimo_v2_flash.py and configuration_mimo_v2_flash.py. transformers knows the
//! type as `mimo_v2_flash` only; a `mimo_v2` config is read as that config class would read it.
//!
//! Attention (`MiMoV2FlashAttention`): q and k of `head_dim` (192), v of `v_head_dim` (128), o
//! from `num_attention_heads × v_head_dim`; biases on q/k/v only with `attention_bias`. The
//! `layer_types` marked `sliding_attention` (by default all but layer 0 and every sixth) have
//! twice `num_key_value_heads`, one learned sink logit per head (`sinks`) and a window of
//! `sliding_window` tokens — `sliding_window_size + 1` when the config gives that, as the config
//! class sets it; transformers' `DynamicSlidingWindowLayer` keeps the last `window - 1`. So each
//! token caches K of `kv_heads × head_dim` and V of `kv_heads × v_head_dim` per layer, the two
//! head dims apart.
//!
//! MLP: by `mlp_layer_types` (by default layer 0 `dense`, the rest `sparse`) a gated MLP of
//! `intermediate_size`, or a sigmoid router (`gate.weight`, experts × hidden, kept in fp32), its
//! persistent `e_score_correction_bias` and `n_routed_experts` gated experts of
//! `moe_intermediate_size`; no shared expert.
//!
//! MiMo's own config fields that transformers does not read (`hybrid_layer_pattern`,
//! `moe_layer_freq`, `swa_num_key_value_heads`, `swa_num_attention_heads`, `swa_head_dim`,
//! `swa_v_head_dim`, `add_full_attention_sink_bias`, `add_swa_attention_sink_bias`) are checked
//! against what it builds, and a config where they differ is refused rather than sized one way
//! or the other. `attention_chunk_size` is read by nothing in transformers 5.25. The checkpoints'
//! multi-token-prediction layers (`model.mtp.*`) are skipped by transformers on load; a config
//! that declares them (`num_nextn_predict_layers`) gets `parse_config`'s note. The vision and
//! audio encoders of MiMo-V2.5 (`vision_config`, `audio_config`) are not built by transformers'
//! `mimo_v2_flash` and not counted here; a note says so.

use super::{common, embeddings, finish, layer_types, moe, mul, Built, Kind};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{AttentionGroup, KvRow, Layout, Tensors};
use crate::model::spec::Role;
use serde_json::Value;

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    let (h, layers, vocab) = common(r)?;
    let heads = r.u64(&["num_attention_heads"])?;
    let kv_heads = r.u64(&["num_key_value_heads"])?;
    let head_dim = r.u64(&["head_dim"])?;
    let v_head_dim = r.u64(&["v_head_dim"])?;
    let swa_kv_heads = mul(r, "num_key_value_heads", kv_heads, 2)?;
    let inter = r.u64(&["intermediate_size"])?;
    let moe_inter = r.u64(&["moe_intermediate_size"])?;
    // `num_local_experts` is the config class's alias (`attribute_map`) of `n_routed_experts`.
    let experts = r.u64(&["n_routed_experts", "num_local_experts"])?;
    let tie = r.tie_word_embeddings().unwrap_or(false);
    let bias = r.bool("attention_bias").unwrap_or(false);
    // MiMoV2FlashConfig.__post_init__: `sliding_window_size + 1` overrides `sliding_window`.
    let window = match r.opt_u64(&["sliding_window_size"])? {
        Some(w) => super::add(r, "sliding_window_size", w, 1)?,
        None => r.u64(&["sliding_window"])?,
    };

    let sliding_types: Vec<bool> = match layer_types(r, Kind::MiMoV2, layers)? {
        Some(types) => types.iter().map(|t| t == "sliding_attention").collect(),
        None => (0..layers).map(|i| i != 0 && (i + 1) % 6 != 0).collect(),
    };
    let sparse_types = mlp_layer_types(r, layers)?;
    check_pattern(
        r,
        "hybrid_layer_pattern",
        &sliding_types,
        "1 sliding, 0 full",
    )?;
    check_pattern(r, "moe_layer_freq", &sparse_types, "1 MoE, 0 dense")?;
    for (key, want) in [
        ("swa_num_key_value_heads", swa_kv_heads),
        ("swa_num_attention_heads", heads),
        ("swa_head_dim", head_dim),
        ("swa_v_head_dim", v_head_dim),
    ] {
        if let Some(n) = r.opt_u64(&[key])?.filter(|n| *n != want) {
            return Err(r.bad(
                key,
                &Value::from(n),
                &format!(
                    "transformers 5.25 builds {want} on sliding layers whatever this says; llm-oom does not model a sliding layer of another shape, so it cannot size this model"
                ),
            ));
        }
    }
    for (key, want) in [
        ("add_full_attention_sink_bias", false),
        ("add_swa_attention_sink_bias", true),
    ] {
        if let Some(b) = r.bool(key).filter(|b| *b != want) {
            return Err(r.bad(
                key,
                &Value::from(b),
                "transformers 5.25 builds sinks on exactly the sliding layers; llm-oom does not model sinks placed otherwise, so it cannot size this model",
            ));
        }
    }
    let sliding = sliding_types.iter().filter(|s| **s).count() as u64;
    let full = layers - sliding;
    let sparse = sparse_types.iter().filter(|s| **s).count() as u64;
    let dense = layers - sparse;

    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    let q = mul(r, "num_attention_heads", heads, head_dim)?;
    let o = mul(r, "num_attention_heads", heads, v_head_dim)?;
    let mut rows = Vec::new();
    for (count, kvh, window) in [
        (full, kv_heads, None),
        (sliding, swa_kv_heads, Some(window)),
    ] {
        let k = mul(r, "num_key_value_heads", kvh, head_dim)?;
        let v = mul(r, "num_key_value_heads", kvh, v_head_dim)?;
        t.add(Role::AttnQ, q, h, count);
        t.add(Role::AttnK, k, h, count);
        t.add(Role::AttnV, v, h, count);
        t.add(Role::AttnO, h, o, count);
        if bias {
            t.vector(q, count);
            t.vector(k, count);
            t.vector(v, count);
        }
        if window.is_some() {
            t.vector(heads, count); // sinks
        }
        rows.push(AttentionGroup {
            layers: count,
            window,
            row: KvRow::Heads { k, v },
        });
    }
    t.vector(h, layers.saturating_mul(2)); // input and post-attention RMSNorms
    t.gated_mlp(h, inter, dense, false);
    t.add(Role::Router, experts, h, sparse);
    t.vector(experts, sparse); // e_score_correction_bias
    t.gated_mlp(
        h,
        moe_inter,
        mul(r, "n_routed_experts", experts, sparse)?,
        true,
    );
    let tensors = finish(r, "n_routed_experts", t)?;

    let mut notes = Vec::new();
    if r.str("model_type") == Some("mimo_v2") {
        notes.push(
            "`mimo_v2` is sized as transformers 5.25's `mimo_v2_flash`, the same decoder; transformers itself does not know `mimo_v2` (remote code)".to_string(),
        );
    }
    let parts: Vec<&str> = ["vision_config", "audio_config"]
        .into_iter()
        .filter(|k| r.outer.get(*k).is_some_and(Value::is_object))
        .collect();
    if !parts.is_empty() {
        notes.push(format!(
            "the vision and audio encoders ({}) are not counted: transformers' `mimo_v2_flash` builds only the language model, which is what is sized",
            parts
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(Built {
        hidden: h,
        intermediate: if dense > 0 { inter } else { 0 },
        layers,
        heads,
        kv_heads,
        head_dim,
        vocab,
        tie,
        sliding_window: Some(window).filter(|_| sliding > 0),
        sliding_layers: sliding,
        experts: moe(
            r,
            &["num_experts_per_tok"],
            8,
            experts,
            moe_inter,
            sparse,
            0,
        )?,
        layout: Layout {
            mtp: None,
            tensors,
            attention: rows.into_iter().filter(|g| g.layers > 0).collect(),
            state: Vec::new(),
        },
        notes,
    })
}

/// `mlp_layer_types` as "is sparse" per layer, else the config class's default (layer 0 dense).
fn mlp_layer_types(r: &Reader, layers: u64) -> Result<Vec<bool>, InputError> {
    let Some(v) = r.get("mlp_layer_types") else {
        return Ok((0..layers).map(|i| i != 0).collect());
    };
    let Some(a) = v.as_array() else {
        return Err(r.bad("mlp_layer_types", v, "expected a list of strings"));
    };
    let mut out = Vec::with_capacity(a.len());
    for t in a {
        match t.as_str() {
            Some("dense") => out.push(false),
            Some("sparse") => out.push(true),
            _ => {
                return Err(r.bad(
                    "mlp_layer_types",
                    t,
                    "llm-oom does not model a layer other than `dense` or `sparse` for this family; it cannot size this model",
                ))
            }
        }
    }
    if out.len() as u64 != layers {
        return Err(r.bad(
            "mlp_layer_types",
            v,
            &format!("has {} entries for {layers} layers", out.len()),
        ));
    }
    Ok(out)
}

/// A MiMo list of 0/1 per layer that transformers does not read: absent, or the same as `built`
/// (what transformers builds from `layer_types` / `mlp_layer_types`), else refused.
fn check_pattern(r: &Reader, key: &str, built: &[bool], meaning: &str) -> Result<(), InputError> {
    let Some(v) = r.get(key) else {
        return Ok(());
    };
    let pattern: Option<Vec<bool>> = v.as_array().and_then(|a| {
        a.iter()
            .map(|x| match x.as_u64() {
                Some(0) => Some(false),
                Some(1) => Some(true),
                _ => None,
            })
            .collect()
    });
    if pattern.as_deref() == Some(built) {
        return Ok(());
    }
    Err(r.bad(
        key,
        v,
        &format!(
            "expected one 0/1 per layer ({meaning}) matching what transformers 5.25 builds from the config's layer types, which it reads instead of this; llm-oom does not model a model where they differ"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    fn mimo(edit: impl FnOnce(&mut Value)) -> Result<crate::model::Spec, String> {
        super::super::parse_edited(
            include_str!("../../../tests/fixtures/configs-2026/mimo-v2.5/config.json"),
            "mimo",
            edit,
        )
    }

    #[test]
    fn mimo_v2_5_counts_what_transformers_builds() {
        let spec = mimo(|_| {}).unwrap();
        // By hand, from config.json: hidden 4096, 64 heads, q/k of 192 and v of 128; 9 full
        // layers (0, 5, 11, … 47) of 4 KV heads, 39 sliding ones of 8 with 64 sinks; layer 0 a
        // dense MLP of 16,384, 47 of 256 experts of 2048; vocab 152,576, lm_head apart.
        let h: u64 = 4096;
        let attn = |kv: u64| 64 * 192 * h + kv * 192 * h + kv * 128 * h + h * 64 * 128;
        let attention = 9 * attn(4) + 39 * (attn(8) + 64);
        let mlp = 3 * h * 16_384;
        let moe = 47 * (256 * h + 256 + 256 * 3 * h * 2048);
        let total = 2 * 152_576 * h + h + attention + 48 * 2 * h + mlp + moe;
        assert_eq!(spec.parameters(), total);
        // transformers 5.25's meta-device build of the config with model_type `mimo_v2_flash`.
        assert_eq!(total, 308_778_780_864);
        assert_eq!(spec.full_attention_layers(), 9);
        assert_eq!((spec.sliding_layers, spec.sliding_window), (39, Some(129)));
        // K and V per token: 9 × (4 × 192 + 4 × 128) + 39 × (8 × 192 + 8 × 128), bf16.
        let layout = spec.layout.as_ref().unwrap();
        let elements: u64 = layout
            .attention
            .iter()
            .map(|g| match g.row {
                crate::model::layout::KvRow::Heads { k, v } => g.layers * (k + v),
                _ => 0,
            })
            .sum();
        assert_eq!(2 * elements, 222_720);
        let notes = spec.notes.join("\n");
        assert!(notes.contains("`vision_config`, `audio_config`"), "{notes}");
        assert!(notes.contains("mimo_v2_flash"), "{notes}");
    }

    #[test]
    fn the_flash_type_and_defaults_read_the_same() {
        let flash = mimo(|v| v["model_type"] = Value::from("mimo_v2_flash")).unwrap();
        let v25 = mimo(|_| {}).unwrap();
        assert_eq!(flash.parameters(), v25.parameters());
        // Without MiMo's own pattern fields, the config class's defaults give the same model.
        let bare = mimo(|v| {
            let o = v.as_object_mut().unwrap();
            for k in [
                "hybrid_layer_pattern",
                "moe_layer_freq",
                "sliding_window_size",
            ] {
                o.remove(k);
            }
            o.insert("sliding_window".into(), Value::from(129));
        })
        .unwrap();
        assert_eq!(bare.parameters(), v25.parameters());
        assert_eq!(bare.sliding_window, Some(129));
    }

    #[test]
    fn fields_transformers_ignores_are_refused_when_they_disagree() {
        let e = mimo(|v| v["hybrid_layer_pattern"][1] = Value::from(0)).unwrap_err();
        assert!(e.contains("hybrid_layer_pattern"), "{e}");
        let e = mimo(|v| v["moe_layer_freq"][0] = Value::from(1)).unwrap_err();
        assert!(e.contains("moe_layer_freq"), "{e}");
        let e = mimo(|v| v["swa_num_key_value_heads"] = Value::from(4)).unwrap_err();
        assert!(e.contains("swa_num_key_value_heads"), "{e}");
        let e = mimo(|v| v["swa_v_head_dim"] = Value::from(192)).unwrap_err();
        assert!(e.contains("swa_v_head_dim"), "{e}");
        let e = mimo(|v| v["add_full_attention_sink_bias"] = Value::from(true)).unwrap_err();
        assert!(e.contains("add_full_attention_sink_bias"), "{e}");
        let e = mimo(|v| v["n_shared_experts"] = Value::from(1)).unwrap_err();
        assert!(e.contains("n_shared_experts"), "{e}");
    }
}
