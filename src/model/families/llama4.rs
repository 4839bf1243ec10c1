//! Llama-4 (Scout, Maverick), after transformers' modeling_llama4.py (text model only).
//!
//! Attention: q/k/v/o of GQA; the RoPE layers attend within chunks of `attention_chunk_size`
//! tokens (`chunked_attention`), every `no_rope_layers[i] == 0` layer (by default every fourth)
//! is a global NoPE layer. The q/k L2 norm has no weights. MLP: the layers in `moe_layers`
//! (by default every `interleave_moe_layer_step`-th) hold a router, `num_local_experts` experts of
//! `intermediate_size` and one shared expert of the same width; the rest a dense MLP of
//! `intermediate_size_mlp`.

use super::{common, embeddings, finish, gqa_row, layer_types, moe, Built, Gqa, Kind};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{every_nth, AttentionGroup, Layout, Tensors};
use crate::model::spec::Role;
use serde_json::Value;

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    let (h, layers, vocab) = common(r)?;
    let heads = r.u64(&["num_attention_heads"])?;
    let kv_heads = r.opt_u64(&["num_key_value_heads"])?.unwrap_or(heads);
    let head_dim = r.u64(&["head_dim"])?;
    let experts = r.u64(&["num_local_experts"])?;
    let inter = r.u64(&["intermediate_size"])?;
    let inter_mlp = r.u64(&["intermediate_size_mlp"])?;
    let step = r
        .opt_u64(&["interleave_moe_layer_step"])?
        .unwrap_or(1)
        .max(1);
    let chunk = r.opt_u64(&["attention_chunk_size"])?.filter(|c| *c > 0);
    let tie = r.bool("tie_word_embeddings").unwrap_or(false);

    // Llama4TextConfig: moe_layers = range(step - 1, layers, step) unless given.
    let sparse = match r.get("moe_layers").and_then(Value::as_array) {
        Some(a) => {
            let mut listed: Vec<u64> = a
                .iter()
                .filter_map(Value::as_u64)
                .filter(|i| *i < layers)
                .collect();
            listed.sort_unstable();
            listed.dedup();
            listed.len() as u64
        }
        None => every_nth(layers, step),
    };
    // no_rope_layers[i] = 1 → RoPE + chunked attention; 0 → NoPE global. Empty = the default
    // (every fourth layer NoPE).
    let chunked = match layer_types(r, Kind::Llama4, layers)? {
        Some(types) => types.iter().filter(|t| *t == "chunked_attention").count() as u64,
        None => match r.get("no_rope_layers").and_then(Value::as_array) {
            Some(a) if !a.is_empty() => {
                if a.len() as u64 != layers {
                    return Err(r.bad(
                        "no_rope_layers",
                        &Value::from(a.len()),
                        &format!("has that many entries for {layers} layers"),
                    ));
                }
                a.iter().filter(|v| v.as_u64() == Some(1)).count() as u64
            }
            _ => layers - every_nth(layers, 4),
        },
    };
    let chunked = if chunk.is_some() { chunked } else { 0 };

    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    let bias = r.bool("attention_bias").unwrap_or(false);
    Gqa::uniform(h, heads, kv_heads, head_dim, bias).add(r, &mut t, layers)?;
    t.vector(h, layers.saturating_mul(2));
    t.gated_mlp(h, inter_mlp, layers - sparse, false);
    t.add(Role::Router, experts, h, sparse);
    t.gated_mlp(
        h,
        inter,
        super::mul(r, "num_local_experts", experts, sparse)?,
        true,
    );
    t.gated_mlp(h, inter, sparse, false);
    let tensors = finish(r, "num_local_experts", t)?;

    let row = gqa_row(r, kv_heads, head_dim)?;
    let attention = [
        AttentionGroup {
            layers: layers - chunked,
            window: None,
            row,
        },
        AttentionGroup {
            layers: chunked,
            window: chunk,
            row,
        },
    ]
    .into_iter()
    .filter(|g| g.layers > 0)
    .collect();
    // The vision tower is counted by vision.rs, which says so in its own note.
    let notes = Vec::new();
    Ok(Built {
        hidden: h,
        intermediate: inter_mlp,
        layers,
        heads,
        kv_heads,
        head_dim,
        vocab,
        tie,
        sliding_window: chunk.filter(|_| chunked > 0),
        sliding_layers: chunked,
        experts: moe(
            r,
            &["num_experts_per_tok"],
            1,
            experts,
            inter,
            sparse,
            inter,
        )?,
        layout: Layout {
            mtp: None,
            tensors,
            attention,
            state: Vec::new(),
        },
        notes,
    })
}
