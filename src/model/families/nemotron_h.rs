//! Nemotron-H and Nemotron-3 (`nemotron_h`), after transformers 5.25's modeling_nemotron_h.py
//! and configuration_nemotron_h.py.
//!
//! Each layer is one RMSNorm and one mixer, named by `layers_block_type` (alias `layer_types`),
//! else by the legacy `hybrid_override_pattern` string (`M` Mamba-2, `E` MoE, `*` attention,
//! `-` MLP), else NemotronHConfig's default of four layers; the layer count is that list's
//! length, whatever `num_hidden_layers` says.
//!
//! - `linear_attention`: the Mamba-2 mixer of `mamba_num_heads` × `mamba_head_dim` (not
//!   `expand` × hidden), `n_groups` groups, `ssm_state_size`, `conv_kernel`; `use_bias` on
//!   in_proj and out_proj (`mamba_proj_bias` is read by nothing). Per sequence it keeps the
//!   conv and SSM state.
//! - `full_attention`: GQA of `head_dim`, no biases whatever `attention_bias` says. Per token it
//!   keeps K and V.
//! - `mlp`: a non-gated (relu²) MLP, up and down of `intermediate_size`.
//! - `moe`: a sigmoid router over `n_routed_experts` with its `e_score_correction_bias`,
//!   non-gated experts of `moe_intermediate_size` (over `moe_latent_size` behind two latent
//!   projections when set), and one shared non-gated MLP of
//!   `moe_shared_expert_intermediate_size` (`n_shared_experts` is read by nothing).
//!
//! lm_head is never tied to the embeddings (`_tied_weights_keys = {}`). The MTP layers of `num_nextn_predict_layers` are not built (`mtp.*` is dropped on load), and
//! `mamba_ssm_cache_dtype` is read by nothing in the modeling file. The legacy names
//! `mamba_n_groups`, `mamba_d_conv` and `mamba_conv_bias` win over `n_groups`, `conv_kernel` and
//! `use_conv_bias`, as `__post_init__` has them.

use serde_json::Value;

use super::mamba2::Mixer;
use super::{embeddings, finish, gqa_row, moe, mul, Built, Gqa, Kind};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{AttentionGroup, Layout, Tensors};
use crate::model::spec::Role;

/// How many layers of each block type.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    mamba: u64,
    moe: u64,
    attention: u64,
    mlp: u64,
}

impl Counts {
    fn total(&self) -> u64 {
        self.mamba
            .saturating_add(self.moe)
            .saturating_add(self.attention)
            .saturating_add(self.mlp)
    }

    fn count(&mut self, block: &str) -> bool {
        match block {
            "linear_attention" => self.mamba += 1,
            "moe" => self.moe += 1,
            "full_attention" => self.attention += 1,
            "mlp" => self.mlp += 1,
            _ => return false,
        }
        true
    }
}

/// The block types, from the first of `layers_block_type`, `layer_types` and
/// `hybrid_override_pattern` the config sets (NemotronHConfig.__post_init__).
fn counts(r: &Reader) -> Result<Counts, InputError> {
    let mut c = Counts::default();
    for key in ["layers_block_type", "layer_types"] {
        let Some(v) = r.get(key) else { continue };
        let Some(a) = v.as_array() else {
            return Err(r.bad(key, v, "expected a list of strings"));
        };
        for t in a {
            if !t.as_str().is_some_and(|s| c.count(s)) {
                return Err(r.bad(
                    key,
                    t,
                    &format!(
                        "transformers knows only {} blocks",
                        Kind::NemotronH.layer_types().join(", ")
                    ),
                ));
            }
        }
        return Ok(c);
    }
    match r.get("hybrid_override_pattern") {
        Some(Value::String(p)) => {
            for ch in p.chars() {
                let block = match ch {
                    'M' => "linear_attention",
                    'E' => "moe",
                    '*' => "full_attention",
                    '-' => "mlp",
                    _ => {
                        return Err(r.bad(
                            "hybrid_override_pattern",
                            &Value::from(ch.to_string()),
                            "expected only M (Mamba-2), E (MoE), * (attention) and - (MLP)",
                        ))
                    }
                };
                c.count(block);
            }
            Ok(c)
        }
        Some(v) => Err(r.bad("hybrid_override_pattern", v, "expected a string")),
        None => Ok(Counts {
            mamba: 1,
            moe: 1,
            attention: 1,
            mlp: 1,
        }),
    }
}

/// up and down of a non-gated MLP of width `inter` in `count` places, with their biases if any.
fn plain_mlp(t: &mut Tensors, hidden: u64, inter: u64, count: u64, bias: bool) {
    t.add(Role::MlpUp, inter, hidden, count);
    t.add(Role::MlpDown, hidden, inter, count);
    if bias {
        t.vector(inter, count);
        t.vector(hidden, count);
    }
}

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    let h = r.u64(&["hidden_size"])?;
    let vocab = r.u64(&["vocab_size"])?;
    let c = counts(r)?;
    let layers = c.total();
    if layers == 0 {
        return Err(r.bad(
            "hybrid_override_pattern",
            &Value::from(""),
            "names no layers",
        ));
    }
    let heads = r.u64(&["num_attention_heads"])?;
    let kv_heads = r.opt_u64(&["num_key_value_heads"])?.unwrap_or(heads);
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(r.bad(
            "num_key_value_heads",
            &Value::from(kv_heads),
            "must divide num_attention_heads",
        ));
    }
    let head_dim = match r.opt_u64(&["head_dim"])? {
        Some(d) if d > 0 => d,
        _ => h / heads,
    };
    // NemotronHForCausalLM has `_tied_weights_keys = {}`: lm_head is its own matrix even when
    // the config asks for tied embeddings.
    let tie = false;
    let mut notes = Vec::new();
    if r.tie_word_embeddings() == Some(true) {
        notes.push(
            "tie_word_embeddings is set, but transformers' NemotronHForCausalLM never ties lm_head to the embeddings; both are counted".into(),
        );
    }
    let mlp_bias = r.bool("mlp_bias").unwrap_or(false);

    let mamba_heads = r.u64(&["mamba_num_heads"])?;
    let mixer = Mixer {
        hidden: h,
        inner: mul(
            r,
            "mamba_head_dim",
            mamba_heads,
            r.u64(&["mamba_head_dim"])?,
        )?,
        heads: mamba_heads,
        groups: r.u64(&["mamba_n_groups", "n_groups"])?,
        state: r.u64(&["ssm_state_size"])?,
        kernel: r.u64(&["mamba_d_conv", "conv_kernel"])?,
        chunk: super::mamba2::chunk_size(r, &["mamba_chunk_size", "chunk_size"], 128)?,
        in_bias: r.bool("use_bias").unwrap_or(false),
        conv_bias: r
            .bool("mamba_conv_bias")
            .or_else(|| r.bool("use_conv_bias"))
            .unwrap_or(true),
        out_bias: r.bool("use_bias").unwrap_or(false),
        gated_norm: true,
    };

    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    t.vector(h, layers); // each block's norm
    mixer.add(r, &mut t, c.mamba)?;
    Gqa::uniform(h, heads, kv_heads, head_dim, false).add(r, &mut t, c.attention)?;
    let inter = if c.mlp > 0 {
        r.u64(&["intermediate_size"])?
    } else {
        0
    };
    plain_mlp(&mut t, h, inter, c.mlp, mlp_bias);
    let (routed, moe_inter, shared) = if c.moe > 0 {
        (
            r.u64(&["n_routed_experts", "num_local_experts"])?,
            r.u64(&["moe_intermediate_size"])?,
            r.u64(&["moe_shared_expert_intermediate_size"])?,
        )
    } else {
        (0, 0, 0)
    };
    if c.moe > 0 {
        t.add(Role::Router, routed, h, c.moe);
        t.vector(routed, c.moe); // e_score_correction_bias, a persistent buffer
        let latent = r.opt_u64(&["moe_latent_size"])?.filter(|n| *n > 0);
        let input = latent.unwrap_or(h);
        if let Some(l) = latent {
            plain_mlp(&mut t, h, l, c.moe, mlp_bias); // fc1/fc2_latent_proj
        }
        let n = mul(r, "n_routed_experts", routed, c.moe)?;
        t.add_routed(Role::MlpUp, moe_inter, input, n);
        t.add_routed(Role::MlpDown, input, moe_inter, n);
        plain_mlp(&mut t, h, shared, c.moe, mlp_bias);
    }
    let tensors = finish(r, "n_routed_experts", t)?;

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
            2,
            routed,
            moe_inter,
            c.moe,
            shared,
        )?,
        layout: Layout {
            mtp: None,
            tensors,
            attention: vec![AttentionGroup {
                layers: c.attention,
                window: None,
                row: gqa_row(r, kv_heads, head_dim)?,
            }]
            .into_iter()
            .filter(|g| g.layers > 0)
            .collect(),
            state: vec![mixer.state(r, c.mamba)?]
                .into_iter()
                .filter(|g| g.layers > 0)
                .collect(),
        },
        notes,
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::estimate::kv::{kv_bytes_per_token, state_bytes, CachePolicy};
    use crate::model::config::parse_config;

    /// A pattern of each block type, counted by hand from modeling_nemotron_h.py.
    #[test]
    fn every_block_type_counted_by_hand() {
        let json = r#"{"model_type":"nemotron_h","architectures":["NemotronHForCausalLM"],
            "hidden_size":64,"vocab_size":100,"num_hidden_layers":5,
            "hybrid_override_pattern":"ME*-M","num_attention_heads":4,"num_key_value_heads":2,
            "head_dim":32,"intermediate_size":96,"mamba_num_heads":8,"mamba_head_dim":16,
            "n_groups":2,"ssm_state_size":8,"conv_kernel":4,"use_conv_bias":true,
            "n_routed_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":24,
            "moe_shared_expert_intermediate_size":48,"tie_word_embeddings":true,
            "time_step_limit":[0.0,Infinity]}"#;
        let s = parse_config(json, Path::new("config.json"), "m").unwrap();
        let h = 64;
        let inner = 8 * 16;
        let conv = inner + 2 * 2 * 8;
        let mamba = h * (inner + conv + 8) + conv * 4 + conv + 3 * 8 + inner + h * inner;
        let attention = h * 4 * 32 + 2 * h * 2 * 32 + 4 * 32 * h;
        let mlp = 2 * h * 96;
        let moe = 4 * h + 4 + 4 * 2 * h * 24 + 2 * h * 48;
        // lm_head counted although the config asks for tying: transformers never ties it.
        let embed = 2 * 100 * h + h;
        let total = embed + 5 * h + 2 * mamba + attention + mlp + moe;
        assert_eq!(s.parameters(), total);
        assert_eq!(s.num_layers, 5);
        let e = s.experts.as_ref().unwrap();
        assert_eq!((e.count, e.active, e.sparse_layers), (4, 2, 1));
        // One attention layer: 2 KV heads × 32, K and V, bf16.
        let kv = crate::dtype::KvDtype::F16;
        assert_eq!(kv_bytes_per_token(&s, kv), 2 * 2 * 32 * 2);
        // Two Mamba layers: conv state of conv_dim × kernel and SSM state of
        // heads × head_dim × state.
        assert_eq!(
            state_bytes(&s, kv, CachePolicy::KEEP_ALL),
            2 * (conv * 4 + 8 * 16 * 8) * 2
        );
    }

    /// An unknown pattern letter and an unknown block type are refused, not skipped.
    #[test]
    fn unknown_blocks_are_refused() {
        let base = r#""model_type":"nemotron_h","hidden_size":64,"vocab_size":100,
            "num_attention_heads":4,"mamba_num_heads":8,"mamba_head_dim":16"#;
        for extra in [
            r#""hybrid_override_pattern":"MX*""#,
            r#""layers_block_type":["mamba","full_attention"]"#,
        ] {
            let json = format!("{{{base},{extra}}}");
            assert!(parse_config(&json, Path::new("config.json"), "m").is_err());
        }
    }
}
