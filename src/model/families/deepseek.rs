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
//! The multi-token-prediction layers (`num_nextn_predict_layers`, `model.layers.61` in V3) are
//! built apart (`Layout::mtp`): transformers 5.17 does not load them
//! (modeling_deepseek_v3.py: `_keys_to_ignore_on_load_unexpected = [r"model\.layers\.61.*"]`),
//! so the model's count leaves them out and `plan --mtp` prices them as the draft.
//!
//! DeepSeek sparse attention (`deepseek_v32`: DeepSeek-V3.2; `glm_moe_dsa`: GLM-5, GLM-5.1) is
//! this MLA plus a lightning indexer in the layer, after transformers 5.17's
//! modeling_deepseek_v32.py / modeling_glm_moe_dsa.py (`DeepseekV32Indexer.__init__`): `wq_b`
//! (q_lora_rank → index_n_heads × index_head_dim), `wk` (hidden → index_head_dim), `k_norm`
//! (a LayerNorm of index_head_dim, weight and bias), `weights_proj` (hidden → index_n_heads).
//! GLM-MoE-DSA may share one layer's top-k with the next (`indexer_types` "shared", or the
//! `index_topk_freq` / `index_skip_topk_offset` schedule of configuration_glm_moe_dsa.py): such a
//! layer has no indexer. The multi-token-prediction layer has one (the checkpoints store it).

use super::{add, common, embeddings, finish, moe, mul, Built};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{layers_where, AttentionGroup, KvRow, Layout, Mtp, Tensors};
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
    let index = indexer(r)?;
    let shape = Shape {
        h,
        heads,
        kv_lora,
        q_lora,
        nope,
        rope,
        v_dim,
        qk_head,
        bias,
        inter,
        routed,
        moe_inter,
        shared_inter,
        index,
    };
    let indexed = match index {
        Some(_) => indexed_layers(r, layers)?,
        None => 0,
    };
    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    shape.layers(r, &mut t, dense, sparse)?;
    shape.indexers(r, &mut t, indexed)?;
    let tensors = finish(r, "n_routed_experts", t)?;

    let full_k = mul(r, "num_attention_heads", heads, qk_head)?;
    let o_in = mul(r, "num_attention_heads", heads, v_dim)?;
    let row = |index_dim| KvRow::Latent {
        kv_lora_rank: kv_lora,
        rope_dim: rope,
        full_k,
        full_v: o_in,
        index_dim,
    };
    let index_dim = index.map_or(0, |i| i.dim);
    let attention = |layers| AttentionGroup {
        layers,
        window: None,
        row: row(index_dim),
    };
    // Layers that reuse another layer's top-k: plain MLA rows.
    let unindexed = |layers| AttentionGroup {
        layers,
        window: None,
        row: row(0),
    };
    let mut notes = Vec::new();
    if let Some(i) = index {
        notes.push(format!(
            "DeepSeek sparse attention: a lightning indexer ({} heads of {}) in {indexed} of \
             {layers} layers, whose key ({} per token and layer) is cached beside the MLA cache: \
             vLLM keeps it in fp8 with an f32 scale per 128, transformers in the cache dtype",
            i.heads, i.dim, i.dim
        ));
    }
    let mtp = match r.opt_u64(&["num_nextn_predict_layers"])?.unwrap_or(0) {
        0 => None,
        n => {
            // Layers past `num_hidden_layers`: routed experts where the trunk's rule puts them.
            let all = add(r, "num_nextn_predict_layers", layers, n)?;
            let sparse_all = if routed == 0 {
                0
            } else {
                layers_where(all, freq, 0) - layers_where(first_dense.min(all), freq, 0)
            };
            let mtp_sparse = sparse_all.saturating_sub(sparse).min(n);
            let mut m = Tensors::default();
            shape.layers(r, &mut m, n - mtp_sparse, mtp_sparse)?;
            if index.is_some() {
                shape.indexers(r, &mut m, n)?;
            }
            // enorm, hnorm, shared_head.norm; eh_proj (2·hidden → hidden), which V3's FP8
            // checkpoint stores in BF16 and vLLM builds as a plain nn.Linear (deepseek_mtp.py):
            // 16 bits whatever the trunk's quantization, as a head is.
            m.vector(h, mul(r, "num_nextn_predict_layers", n, 3)?);
            m.add(Role::LmHead, h, mul(r, "hidden_size", h, 2)?, n);
            let mtp = Mtp {
                layers: n,
                sparse_layers: mtp_sparse,
                tensors: finish(r, "num_nextn_predict_layers", m)?,
                attention: vec![attention(n)],
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
            mtp,
            tensors,
            attention: match index {
                None => vec![attention(layers)],
                Some(_) => [attention(indexed), unindexed(layers - indexed)]
                    .into_iter()
                    .filter(|g| g.layers > 0)
                    .collect(),
            },
            state: Vec::new(),
        },
        notes,
        ..Built::default()
    })
}

/// One decoder layer's sizes, for the trunk's layers and the multi-token-prediction layer alike.
struct Shape {
    h: u64,
    heads: u64,
    kv_lora: u64,
    q_lora: Option<u64>,
    nope: u64,
    rope: u64,
    v_dim: u64,
    qk_head: u64,
    bias: bool,
    inter: u64,
    routed: u64,
    moe_inter: u64,
    shared_inter: u64,
    index: Option<Indexer>,
}

/// The lightning indexer's sizes (`index_n_heads`, `index_head_dim`) and the q_lora_rank its
/// `wq_b` reads.
#[derive(Debug, Clone, Copy)]
struct Indexer {
    heads: u64,
    dim: u64,
    q_lora: u64,
}

/// The indexer of a DeepSeek-sparse-attention config (one with `index_n_heads`), else `None`.
fn indexer(r: &Reader) -> Result<Option<Indexer>, InputError> {
    let dsa = matches!(r.str("model_type"), Some("deepseek_v32" | "glm_moe_dsa"));
    if !dsa && r.get("index_n_heads").is_none() {
        return Ok(None);
    }
    Ok(Some(Indexer {
        heads: r.u64(&["index_n_heads"])?,
        dim: r.u64(&["index_head_dim"])?,
        // `wq_b` reads the query latent: DSA has no q_lora_rank-less form.
        q_lora: r.u64(&["q_lora_rank"])?,
    }))
}

/// How many of the `layers` run their own indexer: `indexer_types` ("full" / "shared"), else
/// `index_topk_pattern` ("F" / "S"), else the `index_topk_freq` / `index_skip_topk_offset`
/// schedule — layer i is full when max(i − offset + 1, 0) is a multiple of freq
/// (configuration_glm_moe_dsa.py `__post_init__`); every layer when none is set.
fn indexed_layers(r: &Reader, layers: u64) -> Result<u64, InputError> {
    let listed = |key: &str, full: &str, shared: &str| -> Result<Option<u64>, InputError> {
        let Some(v) = r.get(key) else {
            return Ok(None);
        };
        let items: Vec<String> = match v {
            serde_json::Value::String(s) => s.chars().map(String::from).collect(),
            serde_json::Value::Array(a) => a
                .iter()
                .map(|x| x.as_str().map(String::from))
                .collect::<Option<_>>()
                .ok_or_else(|| r.bad(key, v, "expected a list of strings"))?,
            _ => return Err(r.bad(key, v, "expected a list of strings")),
        };
        if items.len() as u64 != layers {
            return Err(r.bad(
                key,
                v,
                &format!("has {} entries for {layers} layers", items.len()),
            ));
        }
        let mut n = 0;
        for i in &items {
            if i == full {
                n += 1;
            } else if i != shared {
                return Err(r.bad(
                    key,
                    v,
                    &format!("entries must be \"{full}\" or \"{shared}\""),
                ));
            }
        }
        Ok(Some(n))
    };
    if let Some(n) = listed("indexer_types", "full", "shared")? {
        return Ok(n);
    }
    if let Some(n) = listed("index_topk_pattern", "F", "S")? {
        return Ok(n);
    }
    let freq = r.opt_u64(&["index_topk_freq"])?.unwrap_or(1).max(1);
    let offset = r.opt_u64(&["index_skip_topk_offset"])?.unwrap_or(2);
    Ok(layers.min(offset) + layers.saturating_sub(offset) / freq)
}

impl Shape {
    /// `dense` layers with the dense MLP and `sparse` with the experts.
    fn layers(
        &self,
        r: &Reader,
        t: &mut Tensors,
        dense: u64,
        sparse: u64,
    ) -> Result<(), InputError> {
        let h = self.h;
        let layers = add(r, "num_hidden_layers", dense, sparse)?;
        let q_out = mul(r, "num_attention_heads", self.heads, self.qk_head)?;
        match self.q_lora {
            Some(q) => {
                t.add(Role::AttnQ, q, h, layers);
                t.vector(q, layers);
                t.add(Role::AttnQ, q_out, q, layers);
                if self.bias {
                    t.vector(q, layers);
                }
            }
            None => t.add(Role::AttnQ, q_out, h, layers),
        }
        let kv_a = add(r, "kv_lora_rank", self.kv_lora, self.rope)?;
        t.add(Role::AttnK, kv_a, h, layers);
        t.vector(self.kv_lora, layers);
        let kv_b = mul(
            r,
            "num_attention_heads",
            self.heads,
            add(r, "v_head_dim", self.nope, self.v_dim)?,
        )?;
        t.add(Role::AttnV, kv_b, self.kv_lora, layers);
        let o_in = mul(r, "num_attention_heads", self.heads, self.v_dim)?;
        t.add(Role::AttnO, h, o_in, layers);
        if self.bias {
            t.vector(kv_a, layers);
            t.vector(h, layers);
        }
        t.vector(h, layers.saturating_mul(2));
        t.gated_mlp(h, self.inter, dense, false);
        if sparse > 0 {
            t.add(Role::Router, self.routed, h, sparse);
            // V3's router keeps its `e_score_correction_bias` in the checkpoint.
            if r.str("model_type") != Some("deepseek_v2") {
                t.vector(self.routed, sparse);
            }
            let experts = mul(r, "n_routed_experts", self.routed, sparse)?;
            t.gated_mlp(h, self.moe_inter, experts, true);
            t.gated_mlp(h, self.shared_inter, sparse, false);
        }
        Ok(())
    }

    /// The lightning indexer of `layers` layers (none without DSA).
    fn indexers(&self, r: &Reader, t: &mut Tensors, layers: u64) -> Result<(), InputError> {
        let Some(i) = self.index else {
            return Ok(());
        };
        let q = mul(r, "index_n_heads", i.heads, i.dim)?;
        t.add(Role::AttnQ, q, i.q_lora, layers); // wq_b
        t.add(Role::AttnK, i.dim, self.h, layers); // wk
        t.vector(i.dim, layers.saturating_mul(2)); // k_norm weight and bias
                                                   // weights_proj: BF16 in the FP8 checkpoint, kept in fp32 by transformers
                                                   // (`_keep_in_fp32_modules`), unquantized in vLLM (`quant_config=None`): like a router.
        t.add(Role::Router, i.heads, self.h, layers);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::model::presets;

    #[test]
    fn deepseek_v3_mtp_layer_is_one_moe_layer_and_its_projection() {
        let (id, json) = presets::find("deepseek-ai/DeepSeek-V3").unwrap();
        let spec = presets::load(id, json).unwrap();
        let m = spec.mtp().unwrap();
        assert_eq!((m.layers, m.sparse_layers), (1, 1));
        // By hand, from config.json: hidden 7168, 128 heads, q_lora 1536, kv_lora 512,
        // qk 128 + 64, v 128, 256 experts and 1 shared of 2048.
        let h: u64 = 7168;
        let attention = 1536 * h + 1536 // q_a_proj, q_a_layernorm
            + 128 * 192 * 1536 // q_b_proj
            + 576 * h + 512 // kv_a_proj_with_mqa, kv_a_layernorm
            + 128 * 256 * 512 // kv_b_proj
            + h * 128 * 128; // o_proj
        let moe = 256 * h + 256 // gate, e_score_correction_bias
            + 256 * 3 * h * 2048 // routed experts
            + 3 * h * 2048; // shared expert
        let layer = attention + 2 * h + moe; // + input and post-attention norms
        let mtp = 3 * h + 2 * h * h; // enorm, hnorm, shared_head.norm; eh_proj
        assert_eq!(m.parameters(), layer + mtp);
        assert_eq!(m.parameters(), 11_610_068_224);
        // The trunk is unchanged: 61 layers, the MTP layer not among them.
        assert_eq!(spec.num_layers, 61);
        let draft = spec.mtp_draft().unwrap();
        assert_eq!(draft.num_layers, 1);
        assert_eq!(draft.parameters(), m.parameters());
        assert_eq!(draft.full_attention_layers(), 1);
        // eh_proj stays in 16 bits beside the FP8 layer: 2 bytes a weight.
        let eh = m
            .tensors
            .iter()
            .find(|t| (t.rows, t.cols) == (h, 2 * h))
            .unwrap();
        let fp8 = crate::estimate::weights::group_bytes(&draft, eh, spec.native_dtype);
        assert_eq!(fp8, 2 * h * 2 * h);
    }

    #[test]
    fn a_config_without_nextn_layers_has_no_mtp() {
        let (id, json) = presets::find("deepseek-ai/DeepSeek-V2-Lite").unwrap();
        let spec = presets::load(id, json).unwrap();
        assert!(spec.mtp().is_none() && spec.mtp_draft().is_none());
    }

    fn glm(edit: impl FnOnce(&mut serde_json::Value)) -> Result<crate::model::Spec, String> {
        let text = include_str!("../../../tests/fixtures/configs-2026/glm-5.1/config.json");
        let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
        edit(&mut v);
        crate::model::config::parse_config(
            &v.to_string(),
            std::path::Path::new("config.json"),
            "glm",
        )
        .map_err(|e| e.to_string())
    }

    fn index_dims(spec: &crate::model::Spec) -> Vec<(u64, u64)> {
        spec.attention_groups()
            .iter()
            .map(|g| match g.row {
                crate::model::layout::KvRow::Latent { index_dim, .. } => (g.layers, index_dim),
                crate::model::layout::KvRow::Heads { .. } => (g.layers, u64::MAX),
            })
            .collect()
    }

    #[test]
    fn every_glm_5_layer_runs_an_indexer_without_a_schedule() {
        let spec = glm(|_| {}).unwrap();
        assert_eq!(index_dims(&spec), vec![(78, 128)]);
        // DeepSeek-V3 has no indexer: its rows carry no indexer key.
        let (id, json) = presets::find("deepseek-ai/DeepSeek-V3").unwrap();
        assert_eq!(index_dims(&presets::load(id, json).unwrap()), vec![(61, 0)]);
    }

    #[test]
    fn a_topk_schedule_leaves_the_shared_layers_without_an_indexer() {
        let all = glm(|_| {}).unwrap();
        // freq 3, offset 2 (configuration_glm_moe_dsa.py): layers 0 and 1, then every third
        // after them (max(i − 1, 0) % 3 == 0: 4, 7, … 76): 2 + 76 / 3 = 27 of 78.
        let spec = glm(|v| v["index_topk_freq"] = 3.into()).unwrap();
        let full: Vec<u64> = (0..78u64)
            .filter(|i| (i + 1).saturating_sub(2) % 3 == 0)
            .collect();
        assert_eq!(full.len(), 27);
        assert_eq!(index_dims(&spec), vec![(27, 128), (51, 0)]);
        let indexer = 32 * 128 * 2048 + 128 * 6144 + 2 * 128 + 32 * 6144;
        assert_eq!(all.parameters() - spec.parameters(), 51 * indexer);
        // The MTP layer keeps its indexer.
        assert_eq!(
            all.mtp().unwrap().parameters(),
            spec.mtp().unwrap().parameters()
        );

        // The same schedule spelled out.
        let types: Vec<&str> = (0..78u64)
            .map(|i| if full.contains(&i) { "full" } else { "shared" })
            .collect();
        let listed = glm(|v| v["indexer_types"] = types.into()).unwrap();
        assert_eq!(index_dims(&listed), index_dims(&spec));
        assert_eq!(listed.parameters(), spec.parameters());
    }

    #[test]
    fn a_bad_indexer_schedule_is_refused_with_its_field() {
        let e = glm(|v| v["indexer_types"] = vec!["full"; 3].into()).unwrap_err();
        assert!(
            e.contains("indexer_types") && e.contains("3 entries for 78 layers"),
            "{e}"
        );
        let e = glm(|v| v["indexer_types"] = vec!["sparse"; 78].into()).unwrap_err();
        assert!(
            e.contains("indexer_types") && e.contains("\"full\" or \"shared\""),
            "{e}"
        );
        let e = glm(|v| {
            v.as_object_mut().unwrap().remove("index_head_dim");
            v["model_type"] = "deepseek_v3".into();
            v["index_n_heads"] = 32.into();
        })
        .unwrap_err();
        assert!(e.contains("index_head_dim"), "{e}");
    }
}
