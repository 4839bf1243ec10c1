//! A decoder-only transformer forward pass, llama style: embeddings, per layer RMSNorm → attention
//! with RoPE and grouped KV heads → residual → RMSNorm → SwiGLU MLP → residual, then the final norm
//! and the output projection for the last position only (as `generate` does).

use candle_core::{DType, Device, Module, Tensor, D};

use super::kv_cache::KvCache;
use super::weights::{LayerWeights, Weights};
use super::{Result, RuntimeError};
use crate::model::Spec;

/// How attention scores are formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attention {
    /// The full L × L score matrix per head at once (transformers' eager).
    Eager,
    /// Queries in slices of this many tokens, so scores stay linear in length (the stand-in for
    /// SDPA / flash attention).
    Chunked(usize),
}

pub struct Decoder<'a> {
    pub spec: &'a Spec,
    pub weights: &'a Weights,
    pub attention: Attention,
    device: Device,
    cos: Tensor,
    sin: Tensor,
    /// 0, 1, … max_len − 1 on the device (u32), for the causal mask.
    positions: Tensor,
    /// Asked after every layer; `true` stops the forward pass with an error (the probe's emulated
    /// out-of-memory on the CPU stops at the layer that crossed the limit, not minutes later).
    pub interrupt: Option<fn() -> bool>,
}

struct Linear<'a>(&'a Tensor);

impl Module for Linear<'_> {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (b, l, d) = x.dims3()?;
        x.reshape((b * l, d))?
            .matmul(&self.0.t()?)?
            .reshape((b, l, ()))
    }
}

impl<'a> Decoder<'a> {
    /// A decoder for sequences of up to `max_len` tokens (the RoPE tables' length).
    pub fn new(
        spec: &'a Spec,
        weights: &'a Weights,
        attention: Attention,
        max_len: usize,
        device: &Device,
    ) -> Result<Decoder<'a>> {
        let err = |e| RuntimeError::from_candle(e, device);
        let half = spec.head_dim as usize / 2;
        let inv: Vec<f32> = (0..half)
            .map(|i| 1.0 / (spec.rope_theta.powf(2.0 * i as f64 / spec.head_dim as f64)) as f32)
            .collect();
        let inv = Tensor::from_vec(inv, (1, half), device).map_err(err)?;
        let positions = Tensor::arange(0u32, max_len as u32, device).map_err(err)?;
        let pos = positions
            .to_dtype(DType::F32)
            .and_then(|t| t.reshape((max_len, 1)))
            .map_err(err)?;
        let freqs = pos.broadcast_mul(&inv).map_err(err)?;
        let cos = freqs
            .cos()
            .and_then(|t| t.to_dtype(weights.dtype))
            .map_err(err)?;
        let sin = freqs
            .sin()
            .and_then(|t| t.to_dtype(weights.dtype))
            .map_err(err)?;
        Ok(Decoder {
            spec,
            weights,
            attention,
            device: device.clone(),
            cos,
            sin,
            positions,
            interrupt: None,
        })
    }

    /// Run `ids` (batch × new tokens) at positions after what `cache` holds; return the logits of
    /// the last position (batch × vocab, f32) and grow the cache.
    pub fn forward(&self, ids: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        self.forward_inner(ids, cache)
            .map_err(|e| RuntimeError::from_candle(e, &self.device))
    }

    fn forward_inner(&self, ids: &Tensor, cache: &mut KvCache) -> candle_core::Result<Tensor> {
        let (b, l) = ids.dims2()?;
        let pos = cache.len();
        let w = self.weights;
        let eps = self.spec.rms_norm_eps as f32;
        let mut x = w
            .embed
            .index_select(&ids.flatten_all()?, 0)?
            .reshape((b, l, ()))?;
        for (i, layer) in w.layers.iter().enumerate() {
            let h = candle_nn::ops::rms_norm(&x, &layer.input_norm, eps)?;
            let a = self.attention_block(&h, layer, i, pos, cache)?;
            x = (x + a)?;
            let h = candle_nn::ops::rms_norm(&x, &layer.post_attention_norm, eps)?;
            let gate = Linear(&layer.gate).forward(&h)?.silu()?;
            let up = Linear(&layer.up).forward(&h)?;
            x = (x + Linear(&layer.down).forward(&(gate * up)?)?)?;
            if self.interrupt.is_some_and(|stop| stop()) {
                candle_core::bail!("interrupted after layer {i}");
            }
        }
        cache.advance(l);
        let last = candle_nn::ops::rms_norm(&x.narrow(1, l - 1, 1)?.contiguous()?, &w.norm, eps)?;
        let head = w.lm_head.as_ref().unwrap_or(&w.embed);
        Linear(head)
            .forward(&last)?
            .squeeze(1)?
            .to_dtype(DType::F32)
    }

    fn attention_block(
        &self,
        x: &Tensor,
        w: &LayerWeights,
        i: usize,
        pos: usize,
        cache: &mut KvCache,
    ) -> candle_core::Result<Tensor> {
        let s = self.spec;
        let (b, l, _) = x.dims3()?;
        let (heads, kv_heads, hd) = (
            s.num_heads as usize,
            s.num_kv_heads as usize,
            s.head_dim as usize,
        );
        let mut q = Linear(&w.q).forward(x)?;
        let mut k = Linear(&w.k).forward(x)?;
        let mut v = Linear(&w.v).forward(x)?;
        if let Some((bq, bk, bv)) = &w.qkv_bias {
            q = q.broadcast_add(bq)?;
            k = k.broadcast_add(bk)?;
            v = v.broadcast_add(bv)?;
        }
        let shape = |t: Tensor, n: usize| t.reshape((b, l, n, hd))?.transpose(1, 2)?.contiguous();
        let (q, k, v) = (shape(q, heads)?, shape(k, kv_heads)?, shape(v, kv_heads)?);
        let cos = self.cos.narrow(0, pos, l)?;
        let sin = self.sin.narrow(0, pos, l)?;
        let q = candle_nn::rotary_emb::rope(&q, &cos, &sin)?;
        let k = candle_nn::rotary_emb::rope(&k, &cos, &sin)?;
        let (k, v) = cache.append(i, &k, &v)?;
        let total = pos + l;
        let chunk = match self.attention {
            Attention::Eager => l,
            Attention::Chunked(c) => c.max(1),
        };
        let mut outs = Vec::with_capacity(l.div_ceil(chunk));
        let mut start = 0;
        while start < l {
            let n = chunk.min(l - start);
            // Keys this slice can see: everything up to its last query.
            let seen = pos + start + n;
            outs.push(self.attend(
                &q.narrow(2, start, n)?,
                &k.narrow(2, 0, seen)?,
                &v.narrow(2, 0, seen)?,
                pos + start,
            )?);
            start += n;
        }
        let _ = total;
        let o = Tensor::cat(&outs, 2)?; // (b, heads, l, hd)
        let o = o.transpose(1, 2)?.reshape((b, l, heads * hd))?;
        Linear(&w.o).forward(&o)
    }

    /// Scaled dot-product attention of queries `q` (b, heads, n, hd) at absolute positions
    /// `first..first + n` over keys/values (b, kv_heads, t, hd), causal, GQA without copying K/V:
    /// the queries of the heads sharing one KV head are stacked into one matmul.
    ///
    /// Memory: each step replaces the scores before the next is made, so at most two copies of
    /// the n × t scores are alive per head (one f32 being replaced by the next; a bf16 and an f32
    /// during casts), plus the (n, t) mask shared by the heads: [`score_bytes`] per (query, key).
    /// The probe's budget relies on this figure; `tests/runtime_memory.rs` measures it.
    fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        first: usize,
    ) -> candle_core::Result<Tensor> {
        let (b, heads, n, hd) = q.dims4()?;
        let (_, kv_heads, t, _) = k.dims4()?;
        let rep = heads / kv_heads;
        // Scale the queries (n × hd values), not the scores (n × t).
        let q = (q.reshape((b, kv_heads, rep * n, hd))? * (1.0 / (hd as f64).sqrt()))?;
        let kt = k.t()?.contiguous()?;
        let mut s = q.matmul(&kt)?;
        drop((q, kt));
        s = s.to_dtype(DType::F32)?.reshape((b, kv_heads, rep, n, t))?;
        // Causal mask, built on the device from the position table: query at position first + r
        // sees keys 0..=first + r. A slice whose every query sees every key needs none.
        if first + 1 < t {
            // One (n, t) additive mask per slice, shared by every head through broadcasting.
            let keys = self.positions.narrow(0, 0, t)?.reshape((1, t))?;
            let queries = self.positions.narrow(0, first, n)?.reshape((n, 1))?;
            let visible = keys.broadcast_le(&queries)?;
            let zero = Tensor::new(0f32, s.device())?.broadcast_as((n, t))?;
            let hidden = Tensor::new(f32::NEG_INFINITY, s.device())?.broadcast_as((n, t))?;
            let mask = visible.where_cond(&zero, &hidden)?;
            drop(visible);
            s = s.broadcast_add(&mask)?;
        }
        s = candle_nn::ops::softmax_last_dim(&s)?;
        let probs = s.to_dtype(v.dtype())?.reshape((b, kv_heads, rep * n, t))?;
        drop(s);
        probs.matmul(&v.contiguous()?)?.reshape((b, heads, n, hd))
    }
}

/// Bytes alive per (query, key) pair of one sequence at the peak of [`Decoder::attend`]: two f32
/// score copies per head while one replaces the other and the 4-byte mask; or, while the mask is
/// built (on the CPU its broadcast operands are materialised), one copy per head and 13 bytes.
pub fn score_bytes(heads: u64) -> u64 {
    (8 * heads + 4).max(4 * heads + 13)
}

/// Greedy choice of the next token per sequence.
pub fn argmax(logits: &Tensor) -> candle_core::Result<Tensor> {
    logits.argmax(D::Minus1)
}
