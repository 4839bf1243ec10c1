//! Moonshot Kimi-K3 (`kimi_k3`, its `text_config` of `model_type` `kimi_linear`), after the
//! checkpoint's remote code `modeling_kimi_linear.py` (moonshotai/Kimi-K3), read in a copy that
//! keeps its modules and shapes (GitHub index file 67241057529, marked "Derived from c5d1dd4"),
//! and `configuration_kimi_k3.py`'s `is_kda_layer` (`layer_idx + 1` in
//! `linear_attn_config.kda_layers`: the lists are one-based, as the checkpoint's tensors confirm —
//! MLA weights in zero-based layers 3, 7, … 87, 91 and 92). transformers 5.25 builds neither
//! `kimi_k3` nor this decoder: its own `kimi_linear` is Kimi-Linear-48B's, without the attention
//! residuals, the latent experts or the gated MLA, so a plain `kimi_linear` config is not claimed
//! here.
//!
//! Attention, by layer: Kimi Delta Attention (`KimiDeltaAttention`) in the `kda_layers`, MLA
//! (`KimiMLAAttention`) in the rest (`full_attn_layers`, checked to be exactly those).
//! - KDA: q/k/v of `num_heads × head_dim` from the hidden state, a depthwise short convolution
//!   of `short_conv_kernel_size` on each (no bias), `A_log` (one per head — the checkpoint
//!   stores it zero-padded to 128), the forget gate `f_a_proj` (hidden → head_dim) and
//!   `f_b_proj` (head_dim → heads × head_dim), `dt_bias` (heads × head_dim), `b_proj` (hidden →
//!   heads), the output gate — `g_proj` (hidden → heads × head_dim) with `use_full_rank_gate`,
//!   else `g_a_proj`/`g_b_proj` of rank head_dim —, the gated `o_norm` (head_dim) and `o_proj`.
//!   Per sequence it keeps the three convolution states (3 × heads × head_dim channels) and a
//!   heads × head_dim × head_dim delta-rule state, whatever the length.
//! - MLA (DeepSeek-V3's): `q_a_proj`/`q_a_layernorm`/`q_b_proj` (or `q_proj` without
//!   `q_lora_rank`), `kv_a_proj_with_mqa` (kv_lora_rank + rope), `kv_a_layernorm`, `kv_b_proj`,
//!   `o_proj`, and with `mla_use_output_gate` a sigmoid gate `g_proj` (hidden → heads × v).
//!   `mla_use_nope`: no RoPE is applied, but the rope part of the shapes is still there. Cached
//!   per token: the latent (kv_lora_rank + qk_rope_head_dim) where the engine caches MLA so; the
//!   remote code's own `KimiDynamicCache` keeps the decompressed heads.
//!
//! MLP: layers from `first_k_dense_replace` on, every `moe_layer_freq`-th, hold the sparse block
//! (`KimiSparseMoeBlock`): the router `gate.weight` (experts × hidden) and its
//! `e_score_correction_bias`, `num_experts` SiTU-GLU experts (`w1`, `w3`, `w2`) of
//! `moe_intermediate_size` working on a latent of `routed_expert_hidden_size` — reached through
//! `routed_expert_down_proj` (hidden → latent), left through `routed_expert_norm` (latent, with
//! `latent_moe_use_norm`) and `routed_expert_up_proj` —, and the shared experts, one gated MLP
//! of `moe_intermediate_size × num_shared_experts` on the full hidden state. The other layers
//! hold a gated MLP of `intermediate_size`.
//!
//! Attention residuals (`attn_res_block_size`): every layer holds `self_attention_res_norm`,
//! `mlp_res_norm` (hidden each) and the projections `self_attention_res_proj`, `mlp_res_proj`
//! (hidden → 1); the model holds `output_attn_res_norm` and `output_attn_res_proj` before its
//! final norm. They mix the layers' outputs of the same token, so they cache nothing across
//! tokens.
//!
//! The count is not checked against a build (no transformers release builds this model); it is
//! checked against the checkpoint's safetensors headers (see the tests). The MoonViT vision
//! tower and the `mm_projector` are not counted (`parse_config` says so); the config declares no
//! multi-token-prediction layers.

use super::{add, common, embeddings, finish, moe, mul, Built};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{layers_where, AttentionGroup, KvRow, Layout, StateGroup, Tensors};
use crate::model::spec::Role;
use serde_json::{Map, Value};

/// Whether this config is Kimi-K3's: a `kimi_linear` text model under a `kimi_k3` wrapper.
pub(crate) fn claims(model_type: &str, outer: &Map<String, Value>) -> bool {
    model_type == "kimi_linear"
        && outer.get("model_type").and_then(Value::as_str) == Some("kimi_k3")
}

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    let (h, layers, vocab) = common(r)?;
    let heads = r.u64(&["num_attention_heads"])?;
    let inter = r.u64(&["intermediate_size"])?;
    let tie = r.tie_word_embeddings().unwrap_or(false);

    // Which layers are KDA (zero-based), from the one-based lists.
    let linear = r.get("linear_attn_config");
    let (kda, kda_heads, kda_dim, kernel, full_rank) = match linear {
        None => (0, 0, 0, 0, false),
        Some(v) => {
            let Some(o) = v.as_object() else {
                return Err(r.bad("linear_attn_config", v, "expected an object"));
            };
            let nested = |key: &str| -> Result<u64, InputError> {
                let field = format!("linear_attn_config.{key}");
                match o.get(key) {
                    Some(x) => match x.as_u64().filter(|n| *n > 0) {
                        Some(n) => Ok(n),
                        None => Err(r.bad(&field, x, "expected a positive integer")),
                    },
                    None => Err(InputError::MissingField {
                        path: r.path.to_path_buf(),
                        field,
                    }),
                }
            };
            let kda_layers = one_based(r, o, "kda_layers", layers)?;
            if let Some(full) = o.get("full_attn_layers").filter(|x| !x.is_null()) {
                let listed = one_based(r, o, "full_attn_layers", layers)?;
                let complement: Vec<u64> =
                    (1..=layers).filter(|i| !kda_layers.contains(i)).collect();
                if listed != complement {
                    return Err(r.bad(
                        "linear_attn_config.full_attn_layers",
                        full,
                        "expected exactly the layers `kda_layers` leaves out: the remote code builds MLA in every layer that is not a KDA layer, whatever this lists; llm-oom does not model a model where they differ",
                    ));
                }
            }
            let n = kda_layers.len() as u64;
            if n == 0 {
                (0, 0, 0, 0, false)
            } else {
                (
                    n,
                    nested("num_heads")?,
                    nested("head_dim")?,
                    nested("short_conv_kernel_size")?,
                    o.get("use_full_rank_gate").and_then(Value::as_bool) == Some(true),
                )
            }
        }
    };
    let mla = layers - kda;

    let q_lora = if r.is_null("q_lora_rank") {
        None
    } else {
        Some(r.u64(&["q_lora_rank"])?)
    };
    let kv_lora = r.u64(&["kv_lora_rank"])?;
    let nope = r.u64(&["qk_nope_head_dim"])?;
    let rope = r.u64(&["qk_rope_head_dim"])?;
    let v_dim = r.u64(&["v_head_dim"])?;
    let qk_head = add(r, "qk_rope_head_dim", nope, rope)?;
    let output_gate = r.bool("mla_use_output_gate").unwrap_or(false);

    // `num_experts: null` is a dense model; sparse layers: i >= first_k_dense_replace with
    // i % moe_layer_freq == 0.
    let experts = r.opt_u64(&["num_experts"])?.unwrap_or(0);
    let first_dense = r.opt_u64(&["first_k_dense_replace"])?.unwrap_or(0);
    let freq = r.opt_u64(&["moe_layer_freq"])?.unwrap_or(1).max(1);
    let sparse = if experts == 0 {
        0
    } else {
        layers_where(layers, freq, 0) - layers_where(layers.min(first_dense), freq, 0)
    };
    let dense = layers - sparse;
    let moe_inter = if sparse > 0 {
        r.u64(&["moe_intermediate_size"])?
    } else {
        0
    };
    let shared = r.opt_u64(&["num_shared_experts"])?.unwrap_or(0);
    let shared_inter = mul(r, "num_shared_experts", moe_inter, shared)?;
    let latent = r.opt_u64(&["routed_expert_hidden_size"])?;
    let latent_norm = r.bool("latent_moe_use_norm").unwrap_or(false);
    let attn_res = r.opt_u64(&["attn_res_block_size"])?.is_some();

    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    t.vector(h, layers.saturating_mul(2)); // input and post-attention RMSNorms
    if attn_res {
        t.vector(h, layers.saturating_mul(2)); // self_attention_res_norm, mlp_res_norm
                                               // self_attention_res_proj, mlp_res_proj: hidden → 1 each, stored in bf16 like the norms
        t.vector(h, layers.saturating_mul(2));
        t.vector(h, 2); // output_attn_res_norm, output_attn_res_proj
    }

    // KDA layers.
    let p = mul(r, "linear_attn_config.num_heads", kda_heads, kda_dim)?;
    t.add(Role::AttnQ, p, h, kda);
    t.add(Role::AttnK, p, h, kda);
    t.add(Role::AttnV, p, h, kda);
    t.add(Role::Conv, p, kernel, kda.saturating_mul(3)); // q_conv1d, k_conv1d, v_conv1d
    t.vector(kda_heads, kda); // A_log
                              // The KDA's gate projections sit under `self_attn` in the checkpoint (as its tensor list
                              // names them), so the quantization's `re:.*self_attn.*` keeps them in bf16 with the q/k/v.
    t.add(Role::AttnQ, kda_dim, h, kda); // f_a_proj
    t.add(Role::AttnQ, p, kda_dim, kda); // f_b_proj
    t.vector(p, kda); // dt_bias
    t.add(Role::AttnQ, kda_heads, h, kda); // b_proj
    if full_rank {
        t.add(Role::AttnQ, p, h, kda); // g_proj
    } else {
        t.add(Role::AttnQ, kda_dim, h, kda); // g_a_proj
        t.add(Role::AttnQ, p, kda_dim, kda); // g_b_proj
    }
    t.vector(kda_dim, kda); // o_norm
    t.add(Role::AttnO, h, p, kda);

    // MLA layers.
    let q_out = mul(r, "num_attention_heads", heads, qk_head)?;
    match q_lora {
        Some(q) => {
            t.add(Role::AttnQ, q, h, mla);
            t.vector(q, mla);
            t.add(Role::AttnQ, q_out, q, mla);
        }
        None => t.add(Role::AttnQ, q_out, h, mla),
    }
    t.add(Role::AttnK, add(r, "kv_lora_rank", kv_lora, rope)?, h, mla);
    t.vector(kv_lora, mla);
    let kv_b = mul(
        r,
        "num_attention_heads",
        heads,
        add(r, "v_head_dim", nope, v_dim)?,
    )?;
    t.add(Role::AttnV, kv_b, kv_lora, mla);
    let o_in = mul(r, "num_attention_heads", heads, v_dim)?;
    t.add(Role::AttnO, h, o_in, mla);
    if output_gate {
        t.add(Role::AttnQ, o_in, h, mla); // g_proj
    }

    // MLPs.
    t.gated_mlp(h, inter, dense, false);
    let lat = latent.unwrap_or(h);
    t.add(Role::Router, experts, h, sparse);
    t.vector(experts, sparse); // e_score_correction_bias
    t.gated_mlp(
        lat,
        moe_inter,
        mul(r, "num_experts", experts, sparse)?,
        true,
    );
    t.gated_mlp(h, shared_inter, sparse, false);
    if latent.is_some() && sparse > 0 {
        t.add(Role::MlpDown, lat, h, sparse); // routed_expert_down_proj
        t.add(Role::MlpUp, h, lat, sparse); // routed_expert_up_proj
        if latent_norm {
            t.vector(lat, sparse); // routed_expert_norm
        }
    }
    let tensors = finish(r, "num_experts", t)?;

    let mut notes = Vec::new();
    if kda > 0 {
        notes.push(format!(
            "Kimi Delta Attention in {kda} of {layers} layers (a {kda_heads} × {kda_dim} × {kda_dim} state and three short-convolution states per sequence, no KV cache), MLA in the other {mla}"
        ));
    }
    if let Some(l) = latent {
        notes.push(format!(
            "the routed experts work on a latent of {l} (`routed_expert_hidden_size`), reached through a down- and an up-projection per MoE layer"
        ));
    }
    if r.outer.get("vision_config").is_some_and(Value::is_object) {
        notes.push(
            "the MoonViT vision tower (`vision_config`) and its `mm_projector` are not counted: the language model is sized, and no transformers release builds `kimi_k3` to count them (`plan --python` cannot either)".to_string(),
        );
    }
    if r.outer.get("quantization_config").is_none() && r.get("quantization_config").is_some() {
        notes.push(
            "the weights are as `text_config.quantization_config` declares them: the routed experts in MXFP4 (compressed-tensors `mxfp4-pack-quantized`, a uint8 scale per 32), the rest in bf16 as its ignore list and the checkpoint keep them; Kimi-K3's checkpoint holds its language model in 1,559,965,606,912 bytes, 22,249,280 more than this count: the convolutions, dt_bias, A_log, o_norm and e_score_correction_bias it stores in float32 are counted here at bf16".to_string(),
        );
    }
    let row = KvRow::Latent {
        kv_lora_rank: kv_lora,
        rope_dim: rope,
        full_k: q_out,
        full_v: o_in,
        index_dim: 0,
    };
    let conv = mul(r, "linear_attn_config.num_heads", p, 3)?;
    let ssm = mul(r, "linear_attn_config.head_dim", p, kda_dim)?;
    Ok(Built {
        hidden: h,
        intermediate: if dense > 0 { inter } else { 0 },
        layers,
        heads,
        kv_heads: heads,
        head_dim: qk_head,
        vocab,
        tie,
        sliding_window: None,
        sliding_layers: 0,
        experts: moe(
            r,
            &["num_experts_per_token", "num_experts_per_tok"],
            1,
            experts,
            moe_inter,
            sparse,
            shared_inter,
        )?,
        layout: Layout {
            mtp: None,
            tensors,
            attention: vec![AttentionGroup {
                layers: mla,
                window: None,
                row,
            }]
            .into_iter()
            .filter(|g| g.layers > 0)
            .collect(),
            state: vec![StateGroup {
                layers: kda,
                conv_channels: conv,
                conv_kernel: kernel,
                ssm,
                scan: None,
            }]
            .into_iter()
            .filter(|g| g.layers > 0)
            .collect(),
        },
        notes,
    })
}

/// A one-based list of layers in `linear_attn_config`, sorted, each in `1..=layers`, no repeats.
fn one_based(
    r: &Reader,
    o: &Map<String, Value>,
    key: &str,
    layers: u64,
) -> Result<Vec<u64>, InputError> {
    let field = format!("linear_attn_config.{key}");
    let Some(v) = o.get(key).filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let Some(a) = v.as_array() else {
        return Err(r.bad(&field, v, "expected a list of one-based layer numbers"));
    };
    let mut out = Vec::with_capacity(a.len());
    for x in a {
        match x.as_u64().filter(|n| (1..=layers).contains(n)) {
            Some(n) => out.push(n),
            None => {
                return Err(r.bad(
                    &field,
                    x,
                    &format!("expected a one-based layer number from 1 to {layers}"),
                ))
            }
        }
    }
    out.sort_unstable();
    let before = out.len();
    out.dedup();
    if out.len() != before {
        return Err(r.bad(&field, v, "lists a layer twice"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    fn k3(edit: impl FnOnce(&mut Value)) -> Result<crate::model::Spec, String> {
        super::super::parse_edited(
            include_str!("../../../tests/fixtures/configs-2026/kimi-k3/config.json"),
            "kimi-k3",
            edit,
        )
    }

    /// By hand from config.json, tensor by tensor as modeling_kimi_linear.py builds them (not
    /// checked against a build: no transformers release builds this model). Checked instead
    /// against the checkpoint: its safetensors headers hold 1,503,647,073,024 elements (index
    /// file 62826164383), which is this count plus the 69 × 32 zeros `A_log` is padded with, with
    /// the MXFP4 experts as stored (two values a byte, a uint8 scale per 32), the MoonViT tower
    /// (401,214,464) and the projector (46,144,512).
    #[test]
    fn kimi_k3_counts_the_remote_code_model() {
        let spec = k3(|_| {}).unwrap();
        let h: u64 = 7168;
        let p: u64 = 96 * 128;
        // KDA: q, k, v; three convs of 4; A_log; f_a, f_b; dt_bias; b_proj; g_proj; o_norm; o.
        let kda = 3 * p * h + 3 * p * 4 + 96 + 128 * h + p * 128 + p + 96 * h + p * h + 128 + h * p;
        assert_eq!(kda, 443_740_384);
        // MLA: q_a + norm, q_b (96 × 192), kv_a (512 + 64) + norm, kv_b (96 × 256), o, g.
        let mla = 1536 * h + 1536 + 96 * 192 * 1536 + 576 * h + 512 + 96 * 256 * 512 + 2 * h * p;
        assert_eq!(mla, 232_196_096);
        // MoE: router + bias, 896 experts of 3072 on the 3584 latent, shared 2 × 3072, latent
        // down/up projections and norm.
        let sparse = 896 * h + 896 + 896 * 3 * 3072 * 3584 + 3 * h * 6144 + 2 * 3584 * h + 3584;
        assert_eq!(sparse, 29_784_936_832);
        let total = 2 * 163_840 * h // embed_tokens, lm_head
            + 3 * h // norm, output_attn_res_norm and _proj
            + 93 * 6 * h // two RMSNorms, two attn-res norms, two attn-res projections
            + 69 * kda
            + 24 * mla
            + 3 * h * 33_792 // layer 0's dense MLP
            + 92 * sparse;
        assert_eq!(total, 2_779_484_476_000);
        assert_eq!(spec.parameters(), total);
        // The checkpoint's element count, from that.
        let experts = 92 * 896 * 3 * 3072 * 3584;
        let stored = 92 * 896 * (2 * 3072 * 1792 + 3584 * 1536 + 2 * 3072 * 112 + 3584 * 96);
        let vision = 27 * (2 * 4096 * 1024 + 2 * 1024 + 1024 * 1536 + 4608 * 1024)
            + 1024
            + 64 * 64 * 1024
            + 1024 * 3 * 14 * 14;
        let projector = 7168 + 4096 * 4096 + 7168 * 4096;
        assert_eq!((vision, projector), (401_214_464, 46_144_512));
        assert_eq!(
            total + 69 * 32 - experts + stored + vision + projector,
            1_503_647_073_024
        );

        let layout = spec.layout.as_ref().unwrap();
        assert_eq!(layout.attention.len(), 1);
        assert_eq!(layout.attention[0].layers, 24);
        assert!(matches!(
            layout.attention[0].row,
            crate::model::layout::KvRow::Latent {
                kv_lora_rank: 512,
                rope_dim: 64,
                ..
            }
        ));
        let s = layout.state[0];
        assert_eq!((s.layers, s.conv_channels, s.conv_kernel), (69, 3 * p, 4));
        assert_eq!(s.ssm, 96 * 128 * 128);
        let e = spec.experts.as_ref().unwrap();
        assert_eq!((e.count, e.active, e.sparse_layers), (896, 16, 92));
        let notes = spec.notes.join("\n");
        assert!(
            notes.contains("Kimi Delta Attention in 69 of 93"),
            "{notes}"
        );
        assert!(notes.contains("MoonViT"), "{notes}");
        assert!(notes.contains("mxfp4-pack-quantized"), "{notes}");
        assert!(!notes.contains("plan --python` counts"), "{notes}");
    }

    #[test]
    fn the_layer_lists_are_one_based_and_must_agree() {
        // A full_attn_layers that is not the complement of kda_layers is refused.
        let e = k3(|v| v["text_config"]["linear_attn_config"]["full_attn_layers"][0] = 3.into())
            .unwrap_err();
        assert!(e.contains("full_attn_layers"), "{e}");
        // Layer 0 does not exist in a one-based list.
        let e =
            k3(|v| v["text_config"]["linear_attn_config"]["kda_layers"][0] = 0.into()).unwrap_err();
        assert!(e.contains("kda_layers"), "{e}");
        // Without the cross-check list, the KDA list alone decides.
        let bare = k3(|v| {
            v["text_config"]["linear_attn_config"]
                .as_object_mut()
                .unwrap()
                .remove("full_attn_layers");
        })
        .unwrap();
        assert_eq!(bare.parameters(), k3(|_| {}).unwrap().parameters());
    }

    #[test]
    fn a_plain_kimi_linear_is_not_claimed() {
        // Kimi-Linear-48B's `kimi_linear` is transformers' own, a different decoder.
        let e = k3(|v| {
            let inner = v["text_config"].take();
            *v = inner;
        })
        .unwrap_err();
        assert!(e.contains("kimi_linear"), "{e}");
    }
}
