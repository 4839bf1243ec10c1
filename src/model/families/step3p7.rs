//! StepFun Step-3.7 (`step3p7`, its `text_config` of `model_type` `step3p5`), after transformers
//! 5.25's modeling_step3p7.py and configuration_step3p7.py (`Step3p7TextConfig`), which also read
//! the hub's remote-code spellings: `num_attention_groups` (the KV heads), `moe_num_experts`,
//! `moe_top_k`, `moe_layers_enum`, `attention_other_setting` and per-layer lists padded with the
//! multi-token-prediction layers.
//!
//! Attention (`Step3p7Attention`): q of `heads × head_dim`, k and v of `num_key_value_heads ×
//! head_dim`, o back to hidden (biases with `attention_bias`), `q_norm` and `k_norm` (head_dim
//! each) and the head-wise gate `g_proj` (hidden → heads: `gating` is on in the config class).
//! The `layer_types` marked `sliding_attention` have `num_sliding_attention_heads` query heads —
//! `attention_other_setting.num_attention_heads` in the hub's config — and a window of
//! `sliding_window`; the KV heads and head_dim are the same in every layer
//! (`attention_other_setting`'s own `num_attention_groups` and `head_dim` are not read by
//! transformers, so a config where they differ is refused rather than sized one way or the
//! other). So each token caches `kv_heads × head_dim` of K and of V per layer.
//!
//! MLP, by `mlp_layer_types` (else `moe_layers_enum`, else every layer from the fourth on
//! sparse): a gated MLP of `intermediate_size`, or the sparse block — the sigmoid router
//! (`gate.weight`, experts × hidden) and its persistent `e_score_correction_bias`,
//! `n_routed_experts` gated experts of `moe_intermediate_size`, and the always-on shared expert
//! of `share_expert_dim`. The `swiglu_limits` clamp activations and change no size.
//!
//! The `num_nextn_predict_layers` multi-token-prediction layers in the checkpoint are skipped by
//! transformers on load (`_keys_to_ignore_on_load_unexpected`) and not counted (`parse_config`
//! says so); the vision tower (`vision_config`) and the projector are not counted either.

use super::{common, embeddings, finish, moe, mul, Built};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{AttentionGroup, KvRow, Layout, Tensors};
use crate::model::spec::Role;
use serde_json::Value;

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    let (h, layers, vocab) = common(r)?;
    let mtp = r
        .opt_u64(&["num_nextn_predict_layers", "num_mtp_layers"])?
        .unwrap_or(0);
    let heads = r.u64(&["num_attention_heads"])?;
    let kv_heads = r.u64(&["num_attention_groups", "num_key_value_heads"])?;
    let head_dim = r.u64(&["head_dim"])?;
    let inter = r.u64(&["intermediate_size"])?;
    let moe_inter = r.u64(&["moe_intermediate_size"])?;
    let shared = r.u64(&["share_expert_dim", "share_expert_dims"])?;
    let experts = r.u64(&["moe_num_experts", "num_local_experts", "n_routed_experts"])?;
    let tie = r.tie_word_embeddings().unwrap_or(false);
    let attn_bias = r.bool("attention_bias").unwrap_or(false);
    let mlp_bias = r.bool("mlp_bias").unwrap_or(false);
    if r.bool("use_head_wise_attn_gate") == Some(false) {
        return Err(r.bad(
            "use_head_wise_attn_gate",
            &Value::from(false),
            "transformers 5.25 builds the head-wise gate whatever this says; llm-oom does not model Step-3.7 without it, so it cannot size this model",
        ));
    }

    let other = r.get("attention_other_setting").and_then(Value::as_object);
    let sliding_heads = match r.opt_u64(&["num_sliding_attention_heads"])? {
        Some(n) if n > 0 => n,
        _ => match other.and_then(|o| o.get("num_attention_heads")) {
            Some(v) => match v.as_u64().filter(|n| *n > 0) {
                Some(n) => n,
                None => {
                    return Err(r.bad(
                        "attention_other_setting.num_attention_heads",
                        v,
                        "expected a positive integer",
                    ))
                }
            },
            None => heads,
        },
    };
    if let Some(o) = other {
        for (key, want) in [("num_attention_groups", kv_heads), ("head_dim", head_dim)] {
            if let Some(v) = o.get(key).filter(|v| v.as_u64() != Some(want)) {
                return Err(r.bad(
                    &format!("attention_other_setting.{key}"),
                    v,
                    &format!(
                        "transformers 5.25 builds {want} on sliding layers whatever this says; llm-oom does not model a sliding layer of another shape, so it cannot size this model"
                    ),
                ));
            }
        }
    }

    let sliding = per_layer(
        r,
        "layer_types",
        layers,
        mtp,
        &["full_attention", "sliding_attention"],
    )?
    .map(|t| t.iter().filter(|s| *s == "sliding_attention").count() as u64)
    .unwrap_or(0);
    let full = layers - sliding;
    let window = if sliding > 0 {
        Some(r.u64(&["sliding_window"])?)
    } else {
        None
    };
    let sparse = match per_layer(r, "mlp_layer_types", layers, mtp, &["dense", "sparse"])? {
        Some(t) => t.iter().filter(|s| *s == "sparse").count() as u64,
        None => moe_layers(r, layers)?,
    };
    let dense = layers - sparse;

    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    let kv = mul(r, "num_attention_groups", kv_heads, head_dim)?;
    let mut rows = Vec::new();
    for (count, n, window) in [(full, heads, None), (sliding, sliding_heads, window)] {
        let q = mul(r, "num_attention_heads", n, head_dim)?;
        t.add(Role::AttnQ, q, h, count);
        t.add(Role::AttnK, kv, h, count);
        t.add(Role::AttnV, kv, h, count);
        t.add(Role::AttnO, h, q, count);
        if attn_bias {
            t.vector(q, count);
            t.vector(kv, count.saturating_mul(2));
            t.vector(h, count);
        }
        t.vector(head_dim, count.saturating_mul(2)); // q_norm, k_norm
        t.add(Role::AttnQ, n, h, count); // g_proj, one gate per head
        rows.push(AttentionGroup {
            layers: count,
            window,
            row: KvRow::Heads { k: kv, v: kv },
        });
    }
    t.vector(h, layers.saturating_mul(2)); // input and post-attention RMSNorms
    let mlp = |t: &mut Tensors, width: u64, count: u64, routed: bool| {
        t.gated_mlp(h, width, count, routed);
        if mlp_bias && !routed {
            t.vector(width, count.saturating_mul(2));
            t.vector(h, count);
        }
    };
    mlp(&mut t, inter, dense, false);
    t.add(Role::Router, experts, h, sparse);
    t.vector(experts, sparse); // e_score_correction_bias (a persistent buffer)
    mlp(
        &mut t,
        moe_inter,
        mul(r, "moe_num_experts", experts, sparse)?,
        true,
    );
    mlp(&mut t, shared, sparse, false);
    let tensors = finish(r, "moe_num_experts", t)?;

    let mut notes = Vec::new();
    if sliding > 0 && sliding_heads != heads {
        notes.push(format!(
            "{sliding} sliding-window layers of {sliding_heads} query heads and {full} full-attention layers of {heads}, {kv_heads} KV heads in each"
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
        sliding_window: window,
        sliding_layers: sliding,
        experts: moe(
            r,
            &["moe_top_k", "num_experts_per_tok"],
            8,
            experts,
            moe_inter,
            sparse,
            if sparse > 0 { shared } else { 0 },
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

/// A per-layer list of strings from `allowed`, with the MTP layers' trailing entries dropped as
/// `Step3p7TextConfig.__post_init__` drops them; `None` when absent.
fn per_layer(
    r: &Reader,
    key: &str,
    layers: u64,
    mtp: u64,
    allowed: &[&str],
) -> Result<Option<Vec<String>>, InputError> {
    let Some(v) = r.get(key) else {
        return Ok(None);
    };
    let Some(a) = v.as_array() else {
        return Err(r.bad(key, v, "expected a list of strings"));
    };
    let n = a.len() as u64;
    if n != layers && (mtp == 0 || Some(n) != layers.checked_add(mtp)) {
        return Err(r.bad(
            key,
            v,
            &format!("has {n} entries for {layers} layers (and {mtp} multi-token-prediction ones)"),
        ));
    }
    let mut out = Vec::with_capacity(a.len());
    for x in a.iter().take(usize::try_from(layers).unwrap_or(usize::MAX)) {
        match x.as_str() {
            Some(s) if allowed.contains(&s) => out.push(s.to_string()),
            _ => {
                return Err(r.bad(
                    key,
                    x,
                    &format!(
                        "llm-oom models only {} here for this family; it cannot size the rest",
                        allowed.join(" and ")
                    ),
                ))
            }
        }
    }
    Ok(Some(out))
}

/// The sparse layers by `moe_layers_enum` (a comma-separated string or a list of layer indices;
/// MTP layers' indices past the trunk are not the trunk's), else every layer from index 3 on.
fn moe_layers(r: &Reader, layers: u64) -> Result<u64, InputError> {
    let Some(v) = r.get("moe_layers_enum") else {
        return Ok(layers.saturating_sub(3));
    };
    let bad = || {
        r.bad(
            "moe_layers_enum",
            v,
            "expected layer indices: a comma-separated string or a list of integers",
        )
    };
    let mut listed: Vec<u64> = match v {
        Value::String(s) => s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| p.parse::<u64>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?,
        Value::Array(a) => a
            .iter()
            .map(|x| {
                x.as_u64()
                    .or_else(|| x.as_str().and_then(|s| s.trim().parse().ok()))
                    .ok_or_else(bad)
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(bad()),
    };
    listed.retain(|i| *i < layers);
    listed.sort_unstable();
    listed.dedup();
    Ok(listed.len() as u64)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    /// A config in the hub's spelling at Step-3.7-Flash's published shape (45 layers, every
    /// fourth full, 64 / 96 query heads, 8 KV groups, MoE from layer 3, three MTP layers padding
    /// the per-layer lists). Not a real config: no copy of the released config.json was found;
    /// its shape is from the sources named in tests/configs_2026.rs.
    pub(crate) fn flash_shaped() -> Value {
        let n = 48;
        let types: Vec<&str> = (0..n)
            .map(|i| {
                if i % 4 == 0 {
                    "full_attention"
                } else {
                    "sliding_attention"
                }
            })
            .collect();
        let moe: Vec<String> = (3..n).map(|i| i.to_string()).collect();
        json!({
            "architectures": ["Step3p7ForConditionalGeneration"],
            "model_type": "step3p7",
            "text_config": {
                "architectures": ["Step3p5ForCausalLM"],
                "model_type": "step3p5",
                "hidden_size": 4096,
                "intermediate_size": 11264,
                "num_hidden_layers": 45,
                "num_nextn_predict_layers": 3,
                "vocab_size": 128896,
                "num_attention_heads": 64,
                "num_attention_groups": 8,
                "head_dim": 128,
                "attention_other_setting": {
                    "attention_type": "sliding_attention",
                    "num_attention_heads": 96,
                    "num_attention_groups": 8,
                    "head_dim": 128
                },
                "layer_types": types,
                "sliding_window": 512,
                "moe_num_experts": 288,
                "moe_top_k": 8,
                "moe_intermediate_size": 1280,
                "share_expert_dim": 1280,
                "moe_layers_enum": moe.join(","),
                "use_head_wise_attn_gate": true,
                "tie_word_embeddings": false
            }
        })
    }

    fn parse(v: &Value) -> Result<crate::model::Spec, String> {
        crate::model::config::parse_config(
            &v.to_string(),
            std::path::Path::new("config.json"),
            "step",
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn step_3_7_flash_shape_counts_what_transformers_builds() {
        let spec = parse(&flash_shaped()).unwrap();
        // By hand: 12 full layers of 64 heads, 33 sliding of 96, 8 KV heads × 128, q/k norms,
        // a gate per head; 3 dense MLPs of 11,264; 42 MoE layers of 288 experts of 1280 with a
        // router, its bias and a shared expert of 1280.
        let h: u64 = 4096;
        let attn = |q: u64| q * 128 * h * 2 + 2 * 8 * 128 * h + 2 * 128 + q * h;
        let moe = 288 * h + 288 + 288 * 3 * h * 1280 + 3 * h * 1280;
        let total = 2 * 128_896 * h
            + h
            + 12 * attn(64)
            + 33 * attn(96)
            + 45 * 2 * h
            + 3 * 3 * h * 11_264
            + 42 * moe;
        assert_eq!(spec.parameters(), total);
        // transformers 5.25's meta-device build of this config (`plan --python`): 198,937,145,152
        // parameters, of which the vision tower and projector are 1,981,014,784.
        assert_eq!(total, 196_956_130_368);
        assert_eq!(total, 198_937_145_152 - 1_981_014_784);
        assert_eq!((spec.sliding_layers, spec.sliding_window), (33, Some(512)));
        // K and V per token: 45 layers × 2 × 8 × 128, bf16.
        let layout = spec.layout.as_ref().unwrap();
        let elements: u64 = layout
            .attention
            .iter()
            .map(|g| match g.row {
                crate::model::layout::KvRow::Heads { k, v } => g.layers * (k + v),
                _ => 0,
            })
            .sum();
        assert_eq!(2 * elements, 184_320);
        let notes = spec.notes.join("\n");
        assert!(notes.contains("33 sliding-window layers of 96"), "{notes}");
        assert!(notes.contains("multi-token-prediction"), "{notes}");
    }

    #[test]
    fn the_transformers_spellings_read_the_same() {
        let hub = parse(&flash_shaped()).unwrap();
        let mut v = flash_shaped();
        let t = v["text_config"].as_object_mut().unwrap();
        for k in [
            "attention_other_setting",
            "moe_layers_enum",
            "moe_num_experts",
            "moe_top_k",
        ] {
            t.remove(k);
        }
        t.insert("num_sliding_attention_heads".into(), 96.into());
        t.insert("n_routed_experts".into(), 288.into());
        let mlp: Vec<&str> = (0..45)
            .map(|i| if i < 3 { "dense" } else { "sparse" })
            .collect();
        t.insert("mlp_layer_types".into(), json!(mlp));
        let types = t["layer_types"].as_array().unwrap()[..45].to_vec();
        t.insert("layer_types".into(), Value::Array(types));
        assert_eq!(parse(&v).unwrap().parameters(), hub.parameters());
        // Without moe_layers_enum or mlp_layer_types, layers 3 on are sparse: the same model.
        let t = v["text_config"].as_object_mut().unwrap();
        t.remove("mlp_layer_types");
        assert_eq!(parse(&v).unwrap().parameters(), hub.parameters());
    }

    #[test]
    fn sliding_shapes_transformers_ignores_are_refused() {
        let mut v = flash_shaped();
        v["text_config"]["attention_other_setting"]["num_attention_groups"] = 4.into();
        let e = parse(&v).unwrap_err();
        assert!(
            e.contains("attention_other_setting.num_attention_groups"),
            "{e}"
        );
        let mut v = flash_shaped();
        v["text_config"]["layer_types"]
            .as_array_mut()
            .unwrap()
            .pop();
        let e = parse(&v).unwrap_err();
        assert!(e.contains("layer_types"), "{e}");
        let mut v = flash_shaped();
        v["text_config"]["moe_layers_enum"] = "3,x".into();
        let e = parse(&v).unwrap_err();
        assert!(e.contains("moe_layers_enum"), "{e}");
    }
}
