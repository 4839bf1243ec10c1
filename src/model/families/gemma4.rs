//! Gemma-4 (`gemma4`, its language model `gemma4_text`), after transformers 5.25's
//! modeling_gemma4.py and configuration_gemma4.py.
//!
//! Layers are sliding or full attention by `layer_types` (by default every sixth full, and the
//! last layer is forced to full either way, `Gemma4TextConfig.__post_init__`). A sliding layer has
//! `num_key_value_heads` KV heads of `head_dim`; a full layer's `per_layer_config` gives it
//! `global_head_dim` (512 by default) and, when `attention_k_eq_v`, `num_global_key_value_heads`
//! KV heads. With `attention_k_eq_v` a full layer has no `v_proj`: its values are its key
//! projection, v-normed without the rotary, so the cache still stores a key and a value tensor
//! (`cache.update(key_states, value_states)`). `Gemma4TextAttention` has a `q_norm` and `k_norm`
//! of one head's width; its `v_norm` has no weight (`with_scale=False`).
//!
//! The last `num_kv_shared_layers` layers reuse the cache of the last earlier layer of their type:
//! they have neither k/v projections nor k/v norms and cache nothing, and with
//! `use_double_wide_mlp` their MLP is twice `intermediate_size` wide. Every layer has Gemma's four
//! norms (input, post-attention, pre- and post-feed-forward) and a persistent `layer_scalar`.
//! Per-layer inputs (`hidden_size_per_layer_input`, 256 by default): an embedding of
//! `vocab_size_per_layer_input` × layers·width, a projection from the hidden state and its norm,
//! and in each layer a gate, a projection back and a norm. `enable_moe_block` adds, beside the
//! dense MLP of every layer, a router (`proj`, `scale`, `per_expert_scale`), `num_experts` experts
//! of `moe_intermediate_size` and three more norms. The embedding is tied by default.
//!
//! With `use_bidirectional_attention: "all"` the sliding window becomes `window / 2 + 1`. The
//! vision tower of `Gemma4ForConditionalGeneration` is `families::vision`'s; an audio tower
//! (`audio_config`) is refused.

use serde_json::Value;

use super::{common, embeddings, finish, layer_types, moe, mul, Built, Kind};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{every_nth, AttentionGroup, KvRow, Layout, Tensors};
use crate::model::spec::Role;

/// Which layers are full attention: listed (`layer_types`, last forced full), or the default
/// pattern of every sixth.
enum Types {
    Listed(Vec<bool>),
    EverySixth(u64),
}

impl Types {
    /// Full-attention layers among `a..b`.
    fn full_in(&self, a: u64, b: u64) -> u64 {
        match self {
            Types::Listed(full) => full
                .iter()
                .enumerate()
                .filter(|(i, f)| **f && (a..b).contains(&(*i as u64)))
                .count() as u64,
            Types::EverySixth(n) => {
                let raw = every_nth(b, 6) - every_nth(a, 6);
                // The last layer is forced to full attention.
                let forced = b == *n && a < b && *n % 6 != 0;
                raw + u64::from(forced)
            }
        }
    }
}

/// One kind of layer: its attention shape.
#[derive(Clone, Copy)]
struct Attn {
    kv_heads: u64,
    head_dim: u64,
    /// No `v_proj`: the keys are the values.
    k_eq_v: bool,
}

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    if let Some(audio) = r.outer.get("audio_config").filter(|v| match v {
        Value::Null => false,
        Value::Object(o) => !o.is_empty(),
        _ => true,
    }) {
        return Err(r.bad(
            "audio_config",
            audio,
            "it means an audio tower, which llm-oom does not model for `gemma4`; plan with `--python` to count it as transformers builds it",
        ));
    }
    if let Some(v) = r.get("per_layer_config") {
        return Err(r.bad(
            "per_layer_config",
            v,
            "per-layer attention overrides, which llm-oom does not model for `gemma4`; plan with `--python`",
        ));
    }
    let (h, layers, vocab) = common(r)?;
    let heads = r.u64(&["num_attention_heads"])?;
    let kv_heads = r.opt_u64(&["num_key_value_heads"])?.unwrap_or(heads);
    let head_dim = r.u64(&["head_dim"])?;
    let inter = r.u64(&["intermediate_size"])?;
    let tie = r.tie_word_embeddings().unwrap_or(true);
    let bias = r.bool("attention_bias").unwrap_or(false);
    let k_eq_v = r.bool("attention_k_eq_v").unwrap_or(false);
    let global_head_dim = r.opt_u64(&["global_head_dim"])?.unwrap_or(512);
    let global_kv = match r.opt_u64(&["num_global_key_value_heads"])? {
        Some(n) if k_eq_v => n,
        _ => kv_heads,
    };
    if kv_heads == 0 || global_kv == 0 || global_head_dim == 0 {
        return Err(r.bad(
            "num_key_value_heads",
            &Value::from(kv_heads.min(global_kv)),
            "must be at least 1",
        ));
    }
    let sliding_attn = Attn {
        kv_heads,
        head_dim,
        k_eq_v: false,
    };
    let full_attn = Attn {
        kv_heads: global_kv,
        head_dim: global_head_dim,
        k_eq_v,
    };

    let types = match layer_types(r, Kind::Gemma4, layers)? {
        Some(t) => {
            let mut full: Vec<bool> = t.iter().map(|s| s == "full_attention").collect();
            if let Some(last) = full.last_mut() {
                *last = true;
            }
            Types::Listed(full)
        }
        None => Types::EverySixth(layers),
    };
    let shared = r.opt_u64(&["num_kv_shared_layers"])?.unwrap_or(0);
    if shared >= layers && shared > 0 {
        return Err(r.bad(
            "num_kv_shared_layers",
            &Value::from(shared),
            &format!("leaves none of the {layers} layers to write the cache the others reuse"),
        ));
    }
    let first_shared = layers - shared;
    // `kv_sharing_modes`: each layer type reused must be written by an earlier layer.
    let own_full = types.full_in(0, first_shared);
    let shared_full = types.full_in(first_shared, layers);
    let own_sliding = first_shared - own_full;
    let shared_sliding = shared - shared_full;
    if shared > 0
        && ((shared_full > 0 || own_full > 0) != (own_full > 0)
            || (shared_sliding > 0 || own_sliding > 0) != (own_sliding > 0))
    {
        return Err(r.bad(
            "num_kv_shared_layers",
            &Value::from(shared),
            "a layer type it shares has no earlier layer that writes its cache (transformers refuses it too)",
        ));
    }
    let double_wide = r.bool("use_double_wide_mlp").unwrap_or(false);

    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    for (attn, own, reuse) in [
        (sliding_attn, own_sliding, shared_sliding),
        (full_attn, own_full, shared_full),
    ] {
        let count = own + reuse;
        let q = mul(r, "num_attention_heads", heads, attn.head_dim)?;
        t.add(Role::AttnQ, q, h, count);
        t.add(Role::AttnO, h, q, count);
        t.vector(attn.head_dim, count); // q_norm
        if bias {
            t.vector(q, count);
            t.vector(h, count);
        }
        // The layers that write their own cache: k_proj, v_proj unless K = V, k_norm.
        let kv = mul(r, "num_key_value_heads", attn.kv_heads, attn.head_dim)?;
        let kv_tensors = if attn.k_eq_v { 1 } else { 2 };
        t.add(Role::AttnK, kv, h, own);
        if !attn.k_eq_v {
            t.add(Role::AttnV, kv, h, own);
        }
        t.vector(attn.head_dim, own); // k_norm
        if bias {
            t.vector(kv, own.saturating_mul(kv_tensors));
        }
    }
    // The dense MLP: twice as wide in the layers that reuse a cache, with `use_double_wide_mlp`.
    let wide = if double_wide { shared } else { 0 };
    t.gated_mlp(h, inter, layers - wide, false);
    t.gated_mlp(h, mul(r, "intermediate_size", inter, 2)?, wide, false);
    t.vector(h, layers.saturating_mul(4)); // the four norms
    t.vector(1, layers); // layer_scalar, a persistent buffer

    let per_layer = r.opt_u64(&["hidden_size_per_layer_input"])?.unwrap_or(0);
    if per_layer > 0 {
        let width = mul(r, "hidden_size_per_layer_input", per_layer, layers)?;
        let per_vocab = r.u64(&["vocab_size_per_layer_input"])?;
        t.add(Role::Embedding, per_vocab, width, 1); // embed_tokens_per_layer
        t.add(Role::MlpUp, width, h, 1); // per_layer_model_projection
        t.vector(per_layer, 1); // per_layer_projection_norm
        t.add(Role::MlpGate, per_layer, h, layers); // per_layer_input_gate
        t.add(Role::MlpDown, h, per_layer, layers); // per_layer_projection
        t.vector(h, layers); // post_per_layer_input_norm
    }

    let experts = if r.bool("enable_moe_block").unwrap_or(false) {
        let count = r.u64(&["num_experts"])?;
        let moe_inter = r.u64(&["moe_intermediate_size"])?;
        t.add(Role::Router, count, h, layers); // router.proj
        t.vector(h, layers); // router.scale
        t.vector(count, layers); // router.per_expert_scale
        let n = mul(r, "num_experts", count, layers)?;
        t.gated_mlp(h, moe_inter, n, true);
        t.vector(h, layers.saturating_mul(3)); // post_feedforward_layernorm_1/_2, pre_…_2
        let active = r.opt_u64(&["top_k_experts"])?.unwrap_or(1);
        if active == 0 || active > count {
            return Err(r.bad(
                "top_k_experts",
                &Value::from(active),
                &format!("must be between 1 and the {count} experts"),
            ));
        }
        moe(r, &["top_k_experts"], active, count, moe_inter, layers, 0)?
    } else {
        None
    };
    let tensors = finish(r, "num_hidden_layers", t)?;

    let sliding = r.opt_u64(&["sliding_window"])?.filter(|w| *w > 0);
    let window = if r.str("use_bidirectional_attention") == Some("all") {
        sliding.map(|w| w / 2 + 1)
    } else {
        sliding
    };
    let row = |a: Attn| -> Result<KvRow, InputError> {
        let n = mul(r, "num_key_value_heads", a.kv_heads, a.head_dim)?;
        Ok(KvRow::Heads { k: n, v: n })
    };
    let attention = [
        AttentionGroup {
            layers: own_full,
            window: None,
            row: row(full_attn)?,
        },
        AttentionGroup {
            layers: own_sliding,
            window,
            row: row(sliding_attn)?,
        },
    ]
    .into_iter()
    .filter(|g| g.layers > 0)
    .collect();
    let sliding_layers = if window.is_some() { own_sliding } else { 0 };
    let mut notes = Vec::new();
    if shared > 0 {
        notes.push(format!(
            "the last {shared} layers reuse an earlier layer's keys and values (`num_kv_shared_layers`) and cache nothing of their own"
        ));
    }
    Ok(Built {
        hidden: h,
        intermediate: inter,
        layers,
        heads,
        kv_heads,
        head_dim,
        vocab,
        tie,
        sliding_window: window.filter(|_| sliding_layers > 0),
        sliding_layers,
        experts,
        layout: Layout {
            mtp: None,
            tensors,
            attention,
            state: Vec::new(),
        },
        notes,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::model::layout::{AttentionGroup, KvRow};

    fn parse(v: &Value) -> Result<crate::model::Spec, String> {
        crate::model::config::parse_config(
            &v.to_string(),
            std::path::Path::new("config.json"),
            "gemma4",
        )
        .map_err(|e| e.to_string())
    }

    fn g4_31b(edit: impl FnOnce(&mut Value)) -> Result<crate::model::Spec, String> {
        let text = include_str!("../../../tests/fixtures/configs-2026/gemma-4-31b-it/config.json");
        let mut v: Value = serde_json::from_str(text).unwrap();
        edit(&mut v);
        parse(&v)
    }

    fn attention(spec: &crate::model::Spec) -> Vec<AttentionGroup> {
        spec.layout.as_ref().unwrap().attention.clone()
    }

    fn group(layers: u64, window: Option<u64>, n: u64) -> AttentionGroup {
        AttentionGroup {
            layers,
            window,
            row: KvRow::Heads { k: n, v: n },
        }
    }

    #[test]
    fn gemma_4_31b_counts_what_transformers_builds() {
        let spec = g4_31b(|_| {}).unwrap();
        // By hand: hidden 5376, 32 heads; 50 sliding layers of 16 KV heads × 256, 10 full ones
        // of 4 × 512 with no v_proj; q/k norms of one head; a 21,504 MLP, four norms and the
        // layer scalar in each layer; vocab 262,144, tied.
        let h: u64 = 5376;
        let sliding = 2 * 32 * 256 * h + 2 * 16 * 256 * h + 2 * 256;
        let full = 2 * 32 * 512 * h + 4 * 512 * h + 2 * 512;
        let text = 262_144 * h + h + 50 * sliding + 10 * full + 60 * (3 * h * 21_504 + 4 * h + 1);
        assert_eq!(text, 30_697_345_340);
        // transformers 5.25's meta-device build: 31,273,088,876, the vision tower 575,743,536.
        let vision: u64 = spec.vision.iter().map(|t| t.params()).sum();
        assert_eq!(vision, 575_743_536);
        assert_eq!(spec.parameters(), 31_273_088_876);
        assert_eq!(spec.parameters() - vision, text);
        // Full layers cache keys and values of 4 × 512 (the values are the key projection,
        // normed apart), sliding layers 16 × 256 for at most 1,024 tokens.
        assert_eq!(
            attention(&spec),
            vec![group(10, None, 2048), group(50, Some(1024), 4096)]
        );
    }

    /// transformers 5.25 on the meta device: 508,635 parameters (Gemma4ForCausalLM), with
    /// biases, per-layer inputs, experts, K = V full layers, three layers reusing the cache
    /// (their MLP twice as wide) and the last layer forced to full attention.
    #[test]
    fn every_optional_part_counts_as_transformers_builds_it() {
        let v = json!({"model_type":"gemma4_text","architectures":["Gemma4ForCausalLM"],
            "hidden_size":64,"intermediate_size":96,"num_hidden_layers":7,
            "num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"global_head_dim":32,
            "num_global_key_value_heads":1,"attention_k_eq_v":true,"attention_bias":true,
            "vocab_size":500,"vocab_size_per_layer_input":300,"hidden_size_per_layer_input":8,
            "num_kv_shared_layers":3,"use_double_wide_mlp":true,"enable_moe_block":true,
            "num_experts":4,"top_k_experts":2,"moe_intermediate_size":24,"sliding_window":32,
            "tie_word_embeddings":false,
            "layer_types":["sliding_attention","sliding_attention","full_attention",
                "sliding_attention","sliding_attention","full_attention","sliding_attention"]});
        let spec = parse(&v).unwrap();
        assert_eq!(spec.parameters(), 508_635);
        // Layers 0, 1, 3 slide, 2 is full; 4–6 reuse and cache nothing.
        assert_eq!(
            attention(&spec),
            vec![group(1, None, 32), group(3, Some(32), 32)]
        );
        let experts = spec.experts.as_ref().unwrap();
        assert_eq!((experts.count, experts.active), (4, 2));
        assert!(spec
            .notes
            .iter()
            .any(|n| n.contains("num_kv_shared_layers")));
    }

    /// transformers 5.25 on the meta device: Gemma4TextConfig's defaults with 8 layers hold
    /// 1,806,272,008 parameters (per-layer inputs of 256 included); layers 5 and 7 (forced) are
    /// full, and bidirectional attention makes the window 512 / 2 + 1.
    #[test]
    fn the_config_class_defaults_fill_what_is_left_out() {
        let v = json!({"model_type":"gemma4_text","num_hidden_layers":8,
            "use_bidirectional_attention":"all"});
        let spec = parse(&v).unwrap();
        assert_eq!(spec.parameters(), 1_806_272_008);
        assert_eq!(
            attention(&spec),
            vec![group(2, None, 2048), group(6, Some(257), 1024)]
        );
    }

    #[test]
    fn what_it_does_not_model_is_refused() {
        let e = g4_31b(|v| v["audio_config"] = json!({"hidden_size": 1024})).unwrap_err();
        assert!(
            e.contains("audio_config") && e.contains("does not model"),
            "{e}"
        );
        let e = g4_31b(|v| v["text_config"]["per_layer_config"] = json!({"5": {}})).unwrap_err();
        assert!(e.contains("per_layer_config"), "{e}");
        let e = g4_31b(|v| v["text_config"]["num_kv_shared_layers"] = json!(60)).unwrap_err();
        assert!(e.contains("num_kv_shared_layers"), "{e}");
        // The last two layers share, but no earlier layer is full: transformers refuses it too.
        let e = parse(&json!({"model_type":"gemma4_text","num_hidden_layers":4,
            "num_kv_shared_layers":2,"layer_types":["sliding_attention","sliding_attention",
            "full_attention","full_attention"]}))
        .unwrap_err();
        assert!(e.contains("no earlier layer"), "{e}");
        let e = g4_31b(|v| v["text_config"]["layer_types"][0] = json!("chunked_attention"))
            .unwrap_err();
        assert!(e.contains("layer_types"), "{e}");
        let e = g4_31b(|v| v["text_config"]["enable_moe_block"] = json!(true)).unwrap_err();
        assert!(e.contains("num_experts"), "{e}");
        let e = g4_31b(|v| v["text_config"]["altup_num_inputs"] = json!(4)).unwrap_err();
        assert!(e.contains("altup_num_inputs"), "{e}");
    }
}
