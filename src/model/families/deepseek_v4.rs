//! DeepSeek-V4 (`deepseek_v4`), after transformers 5.25's modeling_deepseek_v4.py and
//! configuration_deepseek_v4.py.
//!
//! Not MLA: every layer is shared-KV multi-query attention (one KV head of `head_dim`, the key
//! read as the value) with a low-rank query (`q_a_proj`, `q_a_norm`, `q_b_proj`), a `kv_proj` and
//! `kv_norm`, a grouped low-rank output (`o_a_proj`: `o_groups` blocks of
//! heads·head_dim/o_groups → `o_lora_rank`, then `o_b_proj`) and a sink per head. By
//! `layer_types` (else the legacy per-layer `compress_ratios` 0/4/128, else two heavily
//! compressed layers then compressed-sparse / heavily compressed alternating) a layer is sliding
//! only, or adds a compressor: HCA's (`kv_proj`, `gate_proj` of head_dim, `position_bias` of
//! rate × head_dim, `kv_norm`) or CSA's (the same at twice head_dim) with its lightning indexer
//! (`kv_proj`, `gate_proj` of 2·index_head_dim, `position_bias`, `kv_norm`, `q_b_proj` from
//! q_lora_rank to index_n_heads × index_head_dim, `weights_proj`). Rates from `compress_rates`
//! (4 and 128 by default; `compress_rate_csa` / `compress_rate_hca` override).
//!
//! Every layer has experts (`n_routed_experts` of `moe_intermediate_size`) and one shared MLP of
//! that width (`DeepseekV4MLP` reads `intermediate_size`, aliased to `moe_intermediate_size`;
//! `n_shared_experts` is read by nothing). The first `num_hash_layers` (3) route through a frozen
//! `tid2eid` table of vocab × top-k (a persistent int64 buffer), the rest through a learned
//! router with its `e_score_correction_bias`. The residual is `hc_mult` streams mixed by two
//! hyper-connections per layer (`fn` of (2 + n)·n × n·hidden, `base`, `scale`) and collapsed by
//! `hc_head` before the final norm. The checkpoint's MTP layer (`mtp.*`) is not built
//! (`_keys_to_ignore_on_load_unexpected`) and not counted.

use serde_json::Value;

use super::{add, common, embeddings, finish, moe, mul, Built};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{AttentionGroup, KvRow, Layout, Tensors};
use crate::model::spec::Role;

/// What a layer's attention adds to the sliding-window branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attn {
    Sliding,
    /// Compressed sparse attention: the overlapping compressor and the lightning indexer.
    Csa,
    /// Heavily compressed attention: a compressor of non-overlapping windows.
    Hca,
}

/// The per-layer attention schedule (`DeepseekV4Config.__post_init__`), cut to `layers`.
fn schedule(r: &Reader, layers: u64) -> Result<Vec<Attn>, InputError> {
    let n = usize::try_from(layers).unwrap_or(usize::MAX);
    let listed: Option<(&str, Vec<Attn>)> = if let Some(v) = r.get("layer_types") {
        let Some(a) = v.as_array() else {
            return Err(r.bad("layer_types", v, "expected a list of strings"));
        };
        let mut out = Vec::with_capacity(a.len());
        for t in a {
            out.push(match t.as_str() {
                Some("sliding_attention") => Attn::Sliding,
                Some("compressed_sparse_attention") => Attn::Csa,
                Some("heavily_compressed_attention") => Attn::Hca,
                _ => {
                    return Err(r.bad(
                        "layer_types",
                        t,
                        "llm-oom does not model `deepseek_v4` layers of that type; it cannot size this model",
                    ))
                }
            });
        }
        Some(("layer_types", out))
    } else if let Some(v) = r.get("compress_ratios") {
        let Some(a) = v.as_array() else {
            return Err(r.bad("compress_ratios", v, "expected a list of 0, 4 or 128"));
        };
        let mut out = Vec::with_capacity(a.len());
        for t in a {
            out.push(match t.as_u64() {
                Some(0) => Attn::Sliding,
                Some(4) => Attn::Csa,
                Some(128) => Attn::Hca,
                // `_COMPRESS_RATIO_TO_LAYER_TYPE` knows these three only.
                _ => {
                    return Err(r.bad(
                        "compress_ratios",
                        t,
                        "transformers maps only 0, 4 and 128 to a layer type",
                    ))
                }
            });
        }
        Some(("compress_ratios", out))
    } else {
        None
    };
    match listed {
        // transformers keeps the first `num_hidden_layers` (a published list carries one more,
        // for the MTP layer).
        Some((key, mut out)) => {
            if out.len() < n {
                return Err(r.bad(
                    key,
                    &Value::from(out.len()),
                    &format!("has that many entries for {layers} layers"),
                ));
            }
            out.truncate(n);
            Ok(out)
        }
        None => {
            let mut out: Vec<Attn> = (0..n.min(2)).map(|_| Attn::Hca).collect();
            out.extend((0..n.saturating_sub(2)).map(|i| {
                if i % 2 == 1 {
                    Attn::Csa
                } else {
                    Attn::Hca
                }
            }));
            Ok(out)
        }
    }
}

/// How many of the `layers` route by the hash table (`mlp_layer_types`, else `num_hash_layers`).
fn hash_layers(r: &Reader, layers: u64) -> Result<u64, InputError> {
    if let Some(v) = r.get("mlp_layer_types") {
        let Some(a) = v.as_array() else {
            return Err(r.bad("mlp_layer_types", v, "expected a list of strings"));
        };
        if (a.len() as u64) < layers {
            return Err(r.bad(
                "mlp_layer_types",
                &Value::from(a.len()),
                &format!("has that many entries for {layers} layers"),
            ));
        }
        let mut hash = 0u64;
        for t in a.iter().take(usize::try_from(layers).unwrap_or(usize::MAX)) {
            match t.as_str() {
                Some("hash_moe") => hash += 1,
                Some("moe") => {}
                _ => {
                    return Err(r.bad(
                        "mlp_layer_types",
                        t,
                        "llm-oom does not model `deepseek_v4` MLP layers of that type; it cannot size this model",
                    ))
                }
            }
        }
        return Ok(hash);
    }
    Ok(r.opt_u64(&["num_hash_layers"])?.unwrap_or(3).min(layers))
}

/// A compression rate from `compress_rates[name]`, `legacy` overriding (`__post_init__`).
fn rate(r: &Reader, name: &str, legacy: &str, default: u64) -> Result<u64, InputError> {
    if let Some(n) = r.opt_u64(&[legacy])? {
        return Ok(n);
    }
    match r.get("compress_rates").and_then(|v| v.get(name)) {
        Some(v) => v
            .as_u64()
            .ok_or_else(|| r.bad("compress_rates", v, "expected a non-negative integer")),
        None => Ok(default),
    }
}

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    // V4.1's FP4 experts: a dtype of their own that llm-oom does not price.
    if let Some(v) = r
        .get("quantization_config")
        .and_then(|q| q.get("expert_dtype"))
        .or_else(|| r.get("expert_dtype"))
    {
        return Err(r.bad(
            "expert_dtype",
            v,
            "it means experts stored in a dtype of their own, which llm-oom does not model for `deepseek_v4`; plan with `--python` or a GGUF file of the model",
        ));
    }
    let (h, layers, vocab) = common(r)?;
    let heads = r.u64(&["num_attention_heads"])?;
    let head_dim = r.u64(&["head_dim"])?;
    let kv_heads = r.opt_u64(&["num_key_value_heads"])?.unwrap_or(1);
    if kv_heads != 1 {
        return Err(r.bad(
            "num_key_value_heads",
            &Value::from(kv_heads),
            "DeepSeek-V4's attention has one shared KV head whatever this says (transformers builds one); llm-oom does not model another count",
        ));
    }
    let shared = r.opt_u64(&["n_shared_experts"])?.unwrap_or(1);
    if shared != 1 {
        return Err(r.bad(
            "n_shared_experts",
            &Value::from(shared),
            "transformers builds one shared MLP whatever this says; llm-oom does not model another count for `deepseek_v4`",
        ));
    }
    let q_lora = r.u64(&["q_lora_rank"])?;
    let o_groups = r.u64(&["o_groups"])?;
    let o_lora = r.u64(&["o_lora_rank"])?;
    let index_heads = r.u64(&["index_n_heads"])?;
    let index_dim = r.u64(&["index_head_dim"])?;
    let hc = r.u64(&["hc_mult"])?;
    let experts = r.u64(&["n_routed_experts", "num_local_experts"])?;
    let inter = r.u64(&["moe_intermediate_size", "intermediate_size"])?;
    let top_k = r.u64(&["num_experts_per_tok"])?;
    if top_k > experts {
        return Err(r.bad(
            "num_experts_per_tok",
            &Value::from(top_k),
            &format!("must be between 1 and the {experts} experts"),
        ));
    }
    let q = mul(r, "num_attention_heads", heads, head_dim)?;
    if q % o_groups != 0 {
        return Err(r.bad(
            "o_groups",
            &Value::from(o_groups),
            &format!("must divide num_attention_heads × head_dim ({q})"),
        ));
    }
    let csa_rate = rate(r, "compressed_sparse_attention", "compress_rate_csa", 4)?;
    let hca_rate = rate(r, "heavily_compressed_attention", "compress_rate_hca", 128)?;
    let tie = r.tie_word_embeddings().unwrap_or(false);
    let mlp_bias = r.bool("mlp_bias").unwrap_or(false);
    let types = schedule(r, layers)?;
    let csa = types.iter().filter(|t| **t == Attn::Csa).count() as u64;
    let hca = types.iter().filter(|t| **t == Attn::Hca).count() as u64;
    let sliding = layers - csa - hca;
    let hash = hash_layers(r, layers)?;

    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    // hc_head: hc_fn, hc_base, hc_scale.
    let streams = mul(r, "hc_mult", hc, h)?;
    t.add(Role::Vector, hc, streams, 1);
    t.vector(hc, 1);
    t.vector(1, 1);

    // DeepseekV4Attention, every layer.
    t.add(Role::AttnQ, q_lora, h, layers); // q_a_proj
    t.vector(q_lora, layers); // q_a_norm
    t.add(Role::AttnQ, q, q_lora, layers); // q_b_proj
    t.add(Role::AttnK, head_dim, h, layers); // kv_proj
    t.vector(head_dim, layers); // kv_norm
    let o_mid = mul(r, "o_lora_rank", o_groups, o_lora)?;
    t.add(Role::AttnO, o_mid, q / o_groups, layers); // o_a_proj
    t.add(Role::AttnO, h, o_mid, layers); // o_b_proj
    t.vector(heads, layers); // sinks
                             // HCA's compressor.
    t.add(Role::AttnK, head_dim, h, hca.saturating_mul(2)); // kv_proj, gate_proj
    t.add(Role::Vector, hca_rate, head_dim, hca); // position_bias
    t.vector(head_dim, hca); // kv_norm
                             // CSA's compressor: two series per token.
    let wide = mul(r, "head_dim", head_dim, 2)?;
    t.add(Role::AttnK, wide, h, csa.saturating_mul(2));
    t.add(Role::Vector, csa_rate, wide, csa);
    t.vector(head_dim, csa);
    // Its lightning indexer.
    let index_wide = mul(r, "index_head_dim", index_dim, 2)?;
    t.add(Role::AttnK, index_wide, h, csa.saturating_mul(2)); // kv_proj, gate_proj
    t.add(Role::Vector, csa_rate, index_wide, csa); // position_bias
    t.vector(index_dim, csa); // kv_norm
    let index_q = mul(r, "index_n_heads", index_heads, index_dim)?;
    t.add(Role::AttnQ, index_q, q_lora, csa); // q_b_proj
    t.add(Role::Router, index_heads, h, csa); // scorer.weights_proj

    // Two hyper-connections and two norms per layer.
    let hc_out = mul(r, "hc_mult", add(r, "hc_mult", hc, 2)?, hc)?;
    t.add(Role::Vector, hc_out, streams, layers.saturating_mul(2)); // fn
    t.vector(hc_out, layers.saturating_mul(2)); // base
    t.vector(3, layers.saturating_mul(2)); // scale
    t.vector(h, layers.saturating_mul(2));

    // DeepseekV4SparseMoeBlock: router, experts, the shared MLP.
    t.add(Role::Router, experts, h, layers);
    t.vector(experts, layers - hash); // e_score_correction_bias
    t.vector(mul(r, "vocab_size", vocab, top_k)?, hash); // tid2eid
    t.gated_mlp(h, inter, mul(r, "n_routed_experts", experts, layers)?, true);
    t.gated_mlp(h, inter, layers, false);
    if mlp_bias {
        t.vector(inter, layers.saturating_mul(2));
        t.vector(h, layers);
    }
    let tensors = finish(r, "num_hidden_layers", t)?;

    // What the meta-device report sizes per token: one key and one value of head_dim in every
    // layer, the two sliding-only layers bounded by the window.
    let window = r.opt_u64(&["sliding_window"])?.filter(|w| *w > 0);
    let row = KvRow::Heads {
        k: head_dim,
        v: head_dim,
    };
    let attention = [
        AttentionGroup {
            layers: csa + hca,
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
    let notes = vec![format!(
        "DeepSeek-V4's cache is sized as a key and a value of {head_dim} in each layer per token, as transformers reports its layers; its cache keeps the key as the value, only the last {} tokens of it, and one compressed entry per {csa_rate} tokens (CSA, with the lightning indexer's key) or per {hca_rate} (HCA), so it holds less",
        window.unwrap_or(0)
    )];
    Ok(Built {
        hidden: h,
        intermediate: 0,
        layers,
        heads,
        kv_heads: 1,
        head_dim,
        vocab,
        tie,
        sliding_window: window.filter(|_| sliding > 0),
        sliding_layers: if window.is_some() { sliding } else { 0 },
        experts: moe(
            r,
            &["num_experts_per_tok"],
            6,
            experts,
            inter,
            layers,
            inter,
        )?,
        layout: Layout {
            tensors,
            attention,
            state: Vec::new(),
            mtp: None,
        },
        notes,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    fn flash(edit: impl FnOnce(&mut Value)) -> Result<crate::model::Spec, String> {
        super::super::parse_edited(
            include_str!("../../../tests/fixtures/configs-2026/deepseek-v4-flash/config.json"),
            "deepseek-v4",
            edit,
        )
    }

    /// V4-Flash by hand from its config.json: 43 layers (2 sliding, 21 CSA, 20 HCA by the first
    /// 43 `compress_ratios`), hidden 4096, 64 heads of 512, 256 experts of 2048, 3 hash layers.
    fn by_hand() -> u64 {
        let (h, vocab): (u64, u64) = (4096, 129_280);
        let attention = 1024 * h + 1024 // q_a_proj, q_a_norm
            + 64 * 512 * 1024 // q_b_proj
            + 512 * h + 512 // kv_proj, kv_norm
            + 8 * 1024 * (64 * 512 / 8) // o_a_proj
            + h * 8 * 1024 // o_b_proj
            + 64; // sinks
        let hca = 2 * 512 * h + 128 * 512 + 512;
        let indexer = 2 * 256 * h + 4 * 256 + 128 + 64 * 128 * 1024 + 64 * h;
        let csa = 2 * 1024 * h + 4 * 1024 + 512 + indexer;
        let hc = 24 * 4 * h + 24 + 3;
        let layer = attention + 2 * hc + 2 * h // two hyper-connections, two norms
            + 256 * h // router
            + 256 * 3 * h * 2048 // routed experts
            + 3 * h * 2048; // shared MLP
        let buffers = 40 * 256 + 3 * vocab * 6; // e_score_correction_bias, tid2eid
        43 * layer + 21 * csa + 20 * hca + buffers + 2 * vocab * h + h + 4 * 4 * h + 4 + 1
    }

    #[test]
    fn deepseek_v4_flash_counts_what_transformers_builds() {
        let spec = flash(|_| {}).unwrap();
        assert_eq!(spec.parameters(), by_hand());
        // transformers 5.25's meta-device count, its persistent buffers included.
        assert_eq!(by_hand(), 284_334_567_511);
        assert_eq!((spec.num_kv_heads, spec.head_dim), (1, 512));
        // A key and a value of 512 per layer in bf16, as the meta-device report sizes them.
        let layout = spec.layout.as_ref().unwrap();
        let rows: u64 = layout.attention.iter().map(|g| g.layers).sum();
        assert_eq!(rows, 43);
        let windowed: Vec<_> = layout
            .attention
            .iter()
            .filter(|g| g.window.is_some())
            .collect();
        assert_eq!(windowed.len(), 1);
        assert_eq!((windowed[0].layers, windowed[0].window), (2, Some(128)));
    }

    #[test]
    fn the_schedule_falls_back_to_the_v4_pro_default_and_layer_types_win() {
        // No `compress_ratios`: two HCA, then CSA at odd offsets — 23 HCA and 20 CSA of 43.
        let default = flash(|v| {
            v.as_object_mut().unwrap().remove("compress_ratios");
        })
        .unwrap();
        let listed = flash(|v| {
            let types: Vec<Value> = (0..43)
                .map(|i| {
                    Value::from(if i < 2 || i % 2 == 0 {
                        "heavily_compressed_attention"
                    } else {
                        "compressed_sparse_attention"
                    })
                })
                .collect();
            v["layer_types"] = Value::from(types);
        })
        .unwrap();
        assert_eq!(default.parameters(), listed.parameters());
        // One CSA layer fewer and three HCA more than V4-Flash's 21 and 20, no sliding-only layer.
        let h: u64 = 4096;
        let hca = 2 * 512 * h + 128 * 512 + 512;
        let csa =
            2 * 1024 * h + 4 * 1024 + 512 + 2 * 256 * h + 4 * 256 + 128 + 64 * 128 * 1024 + 64 * h;
        assert_eq!(default.parameters() + csa, by_hand() + 3 * hca);
        let rows = default.layout.as_ref().unwrap();
        assert!(rows.attention.iter().all(|g| g.window.is_none()));
    }

    #[test]
    fn what_it_does_not_model_is_refused() {
        let e =
            flash(|v| v["quantization_config"]["expert_dtype"] = Value::from("fp4")).unwrap_err();
        assert!(
            e.contains("expert_dtype") && e.contains("does not model"),
            "{e}"
        );
        let e = flash(|v| v["compress_ratios"][5] = Value::from(16)).unwrap_err();
        assert!(e.contains("compress_ratios"), "{e}");
        let e = flash(|v| {
            v["compress_ratios"] = Value::from(vec![0; 10]);
        })
        .unwrap_err();
        assert!(e.contains("43 layers"), "{e}");
        let e = flash(|v| v["n_shared_experts"] = Value::from(2)).unwrap_err();
        assert!(e.contains("n_shared_experts"), "{e}");
        let e = flash(|v| v["layer_types"] = Value::from(vec!["full_attention"; 43])).unwrap_err();
        assert!(e.contains("layer_types"), "{e}");
        // Another family's reader does not read V4's keys as a plain decoder's.
        let e = crate::model::config::parse_config(
            r#"{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":100,"hc_mult":4}"#,
            std::path::Path::new("config.json"),
            "llama",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("hc_mult"), "{e}");
    }
}
