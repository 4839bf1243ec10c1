//! Granite-4.0-H (`granitemoehybrid`), after transformers' modeling_granitemoehybrid.py.
//!
//! `layer_types` names each layer's mixer: `attention` (GQA, no RoPE by default) or `mamba`
//! (the Mamba-2 mixer). Every layer has a shared MLP (`input_linear` hidden → 2·shared,
//! `output_linear`) and, when `num_local_experts` > 0, a router over that many experts of
//! `intermediate_size`.

use super::mamba2::Mixer;
use super::{common, embeddings, finish, gqa_row, layer_types, mul, Built, Gqa, Kind};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{AttentionGroup, Layout, Tensors};
use crate::model::spec::{Experts, Role};

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    let (h, layers, vocab) = common(r)?;
    let heads = r.u64(&["num_attention_heads"])?;
    let kv_heads = r.opt_u64(&["num_key_value_heads"])?.unwrap_or(heads);
    let head_dim = h / heads;
    let tie = r.bool("tie_word_embeddings").unwrap_or(false);
    let Some(types) = layer_types(r, Kind::GraniteHybrid, layers)? else {
        return Err(InputError::MissingField {
            path: r.path.to_path_buf(),
            field: "layer_types".into(),
        });
    };
    let attention = types.iter().filter(|t| *t == "attention").count() as u64;
    let mamba = layers - attention;
    let experts = r.opt_u64(&["num_local_experts"])?.unwrap_or(0);
    let inter = if experts > 0 {
        r.u64(&["intermediate_size"])?
    } else {
        0
    };
    let shared = r.u64(&["shared_intermediate_size"])?;
    let inner = mul(r, "mamba_expand", r.u64(&["mamba_expand"])?, h)?;
    super::mamba2::check_head_dim(r, inner)?;
    let mixer = Mixer {
        hidden: h,
        inner,
        heads: r.u64(&["mamba_n_heads"])?,
        groups: r.u64(&["mamba_n_groups"])?,
        state: r.u64(&["mamba_d_state"])?,
        kernel: r.u64(&["mamba_d_conv"])?,
        chunk: super::mamba2::chunk_size(r, &["mamba_chunk_size"], 256)?,
        in_bias: r.bool("mamba_proj_bias").unwrap_or(false),
        conv_bias: r.bool("mamba_conv_bias").unwrap_or(true),
        out_bias: r.bool("mamba_proj_bias").unwrap_or(false),
        gated_norm: true,
    };

    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    let bias = r.bool("attention_bias").unwrap_or(false);
    Gqa::uniform(h, heads, kv_heads, head_dim, bias).add(r, &mut t, attention)?;
    mixer.add(r, &mut t, mamba)?;
    t.vector(h, layers.saturating_mul(2));
    // shared MLP: input_linear is gate and up in one matrix
    t.add(
        Role::MlpUp,
        mul(r, "shared_intermediate_size", shared, 2)?,
        h,
        layers,
    );
    t.add(Role::MlpDown, h, shared, layers);
    if experts > 0 {
        t.add(Role::Router, experts, h, layers);
        let n = mul(r, "num_local_experts", experts, layers)?;
        t.add_routed(Role::MlpUp, mul(r, "intermediate_size", inter, 2)?, h, n);
        t.add_routed(Role::MlpDown, h, inter, n);
    }
    let tensors = finish(r, "num_local_experts", t)?;
    Ok(Built {
        hidden: h,
        intermediate: shared,
        layers,
        heads,
        kv_heads,
        head_dim,
        vocab,
        tie,
        experts: (experts > 0).then(|| Experts {
            count: experts,
            active: r
                .opt_u64(&["num_experts_per_tok"])
                .ok()
                .flatten()
                .unwrap_or(1),
            intermediate_size: inter,
            sparse_layers: layers,
            shared_intermediate_size: shared,
        }),
        layout: Layout {
            mtp: None,
            tensors,
            attention: vec![AttentionGroup {
                layers: attention,
                window: None,
                row: gqa_row(r, kv_heads, head_dim)?,
            }]
            .into_iter()
            .filter(|g| g.layers > 0)
            .collect(),
            state: vec![mixer.state(r, mamba)?],
        },
        ..Built::default()
    })
}
