//! Mamba-2 (Codestral-Mamba), after transformers' modeling_mamba2.py, and the Mamba-2 mixer that
//! Granite-4.0-H and Falcon-H1 share with it.
//!
//! Mixer: `in_proj` (hidden → inner + conv_dim + heads, with conv_dim = inner + 2·groups·state),
//! a depthwise `conv1d` over conv_dim channels, `dt_bias`, `A_log` and `D` per head, a gated
//! RMSNorm over inner, `out_proj` (inner → hidden). Per sequence it keeps a conv state of
//! conv_dim × kernel and an SSM state of heads × head_dim × state, whatever the length.

use super::{add, common, embeddings, finish, mul, Built};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::layout::{Layout, SsdScan, StateGroup, Tensors};
use crate::model::spec::Role;

/// One Mamba-2 mixer's shape.
pub(super) struct Mixer {
    pub hidden: u64,
    pub inner: u64,
    pub heads: u64,
    pub groups: u64,
    pub state: u64,
    pub kernel: u64,
    /// Tokens per chunk of the SSD scan (`chunk_size` / `mamba_chunk_size`).
    pub chunk: u64,
    pub in_bias: bool,
    pub conv_bias: bool,
    pub out_bias: bool,
    pub gated_norm: bool,
}

impl Mixer {
    fn conv_dim(&self, r: &Reader) -> Result<u64, InputError> {
        let gs = mul(r, "n_groups", self.groups.saturating_mul(2), self.state)?;
        add(r, "n_groups", self.inner, gs)
    }

    pub(super) fn add(&self, r: &Reader, t: &mut Tensors, count: u64) -> Result<(), InputError> {
        let conv = self.conv_dim(r)?;
        let proj = add(
            r,
            "num_heads",
            add(r, "expand", self.inner, conv)?,
            self.heads,
        )?;
        t.add(Role::Mixer, proj, self.hidden, count);
        if self.in_bias {
            t.vector(proj, count);
        }
        t.add(Role::Conv, conv, self.kernel, count);
        if self.conv_bias {
            t.vector(conv, count);
        }
        t.vector(self.heads, count.saturating_mul(3)); // dt_bias, A_log, D
        if self.gated_norm {
            t.vector(self.inner, count);
        }
        t.add(Role::Mixer, self.hidden, self.inner, count);
        if self.out_bias {
            t.vector(self.hidden, count);
        }
        Ok(())
    }

    pub(super) fn state(&self, r: &Reader, layers: u64) -> Result<StateGroup, InputError> {
        if self.heads == 0 || self.inner % self.heads != 0 {
            return Err(r.bad(
                "num_heads",
                &serde_json::Value::from(self.heads),
                "must divide the mixer's inner size",
            ));
        }
        let head_dim = self.inner / self.heads;
        Ok(StateGroup {
            layers,
            conv_channels: self.conv_dim(r)?,
            conv_kernel: self.kernel,
            ssm: mul(
                r,
                "state_size",
                mul(r, "num_heads", self.heads, head_dim)?,
                self.state,
            )?,
            scan: Some(SsdScan {
                heads: self.heads,
                head_dim,
                groups: self.groups,
                state: self.state,
                chunk: self.chunk,
            }),
        })
    }
}

/// The SSD scan's chunk length from the first of `keys` the config sets, else the config
/// class's default (256 for Mamba2Config, FalconH1Config and GraniteMoeHybridConfig, 128 for
/// NemotronHConfig); 0 is taken as unset.
pub(super) fn chunk_size(r: &Reader, keys: &[&str], default: u64) -> Result<u64, InputError> {
    Ok(r.opt_u64(keys)?.filter(|c| *c > 0).unwrap_or(default))
}

/// A hybrid's `mamba_d_head`, when a number, must be the mixer's inner size over
/// `mamba_n_heads` — transformers refuses the config otherwise, and so does llm-oom.
pub(super) fn check_head_dim(r: &Reader, inner: u64) -> Result<(), InputError> {
    let heads = r.u64(&["mamba_n_heads"])?;
    match r.get("mamba_d_head") {
        Some(v) if v.as_str() == Some("auto") => Ok(()),
        Some(v) if v.as_u64().and_then(|d| d.checked_mul(heads)) == Some(inner) => Ok(()),
        Some(v) => Err(r.bad(
            "mamba_d_head",
            v,
            &format!("times mamba_n_heads ({heads}) it must be the mixer's inner size {inner}"),
        )),
        None => Ok(()),
    }
}

pub(super) fn read(r: &Reader) -> Result<Built, InputError> {
    let (h, layers, vocab) = common(r)?;
    let heads = r.u64(&["num_heads"])?;
    let expand = r.u64(&["expand"])?;
    let inner = mul(r, "expand", expand, h)?;
    let tie = r.bool("tie_word_embeddings").unwrap_or(false);
    let mixer = Mixer {
        hidden: h,
        inner,
        heads,
        groups: r.u64(&["n_groups"])?,
        state: r.u64(&["state_size"])?,
        kernel: r.u64(&["conv_kernel"])?,
        chunk: chunk_size(r, &["chunk_size"], 256)?,
        in_bias: r.bool("use_bias").unwrap_or(false),
        conv_bias: r.bool("use_conv_bias").unwrap_or(true),
        out_bias: r.bool("use_bias").unwrap_or(false),
        gated_norm: true,
    };
    let mut t = Tensors::default();
    embeddings(&mut t, vocab, h, tie);
    mixer.add(r, &mut t, layers)?;
    t.vector(h, layers); // the block's RMSNorm
    let tensors = finish(r, "num_hidden_layers", t)?;
    Ok(Built {
        hidden: h,
        intermediate: 0,
        layers,
        heads,
        kv_heads: heads,
        head_dim: inner / heads.max(1),
        vocab,
        tie,
        layout: Layout {
            mtp: None,
            tensors,
            attention: Vec::new(),
            state: vec![mixer.state(r, layers)?],
        },
        ..Built::default()
    })
}
