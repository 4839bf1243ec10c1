//! Falcon-H1, after transformers' modeling_falcon_h1.py: every layer runs GQA attention and a
//! Mamba-2 mixer side by side, then a gated MLP. So every layer has a KV cache *and* a fixed
//! recurrent state. The mixer's inner size is `mamba_d_ssm` (else `mamba_expand` × hidden).

use super::mamba2::Mixer;
use super::{common, embeddings, finish, gqa_row, mul, Built, Gqa};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{AttentionGroup, Layout, Tensors};

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    let (h, layers, vocab) = common(r)?;
    let heads = r.u64(&["num_attention_heads"])?;
    let kv_heads = r.opt_u64(&["num_key_value_heads"])?.unwrap_or(heads);
    let head_dim = match r.opt_u64(&["head_dim"])? {
        Some(d) if d > 0 => d,
        _ => h / heads,
    };
    let inter = r.u64(&["intermediate_size"])?;
    let tie = r.bool("tie_word_embeddings").unwrap_or(false);
    // FalconH1Config: `mamba_d_ssm` defaults to 1024; null means mamba_expand × hidden.
    let inner = match r.opt_u64(&["mamba_d_ssm"])? {
        Some(d) if d > 0 && !r.is_null("mamba_d_ssm") => d,
        _ => mul(r, "mamba_expand", r.u64(&["mamba_expand"])?, h)?,
    };
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
        out_bias: r.bool("projectors_bias").unwrap_or(false),
        gated_norm: r.bool("mamba_rms_norm").unwrap_or(false),
    };
    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    let bias = r.bool("attention_bias").unwrap_or(false);
    Gqa::uniform(h, heads, kv_heads, head_dim, bias).add(r, &mut t, layers)?;
    mixer.add(r, &mut t, layers)?;
    t.gated_mlp(h, inter, layers, false);
    if r.bool("mlp_bias").unwrap_or(false) {
        t.vector(inter.saturating_mul(2).saturating_add(h), layers);
    }
    t.vector(h, layers.saturating_mul(2));
    let tensors = finish(r, "num_hidden_layers", t)?;
    Ok(Built {
        hidden: h,
        intermediate: inter,
        layers,
        heads,
        kv_heads,
        head_dim,
        vocab,
        tie,
        layout: Layout {
            mtp: None,
            tensors,
            attention: vec![AttentionGroup {
                layers,
                window: None,
                row: gqa_row(r, kv_heads, head_dim)?,
            }],
            state: vec![mixer.state(r, layers)?],
        },
        ..Built::default()
    })
}
