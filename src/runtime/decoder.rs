//! A decoder-only transformer forward pass, llama style: embeddings, per layer RMSNorm → attention
//! with RoPE and grouped KV heads → residual → RMSNorm → gated MLP (or experts) → residual, then
//! the final norm and the output projection for the last position only (as `generate` does). The
//! families' variants come from the `Spec`: biases and q/k norms (qwen2/3), fused projections
//! (phi3), four norms, GELU and soft-capping (gemma2), sliding windows, RoPE scaling, experts.

use candle_core::{DType, Device, Tensor, D};

use super::kv_cache::KvCache;
use super::masked_softmax::MaskedSoftmax;
use super::parallel::{embed_lookup, place_logits, Communicator};
use super::weights::{Ffn, GateUp, LayerWeights, Mlp, Moe, Qkv, Weights};
use super::{Result, RuntimeError};
use crate::model::spec::{Activation, RopeScaling};
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
    /// A tensor-parallel rank: `spec` is the rank's ([`super::parallel::rank_spec`]), `weights`
    /// its part, and the partial sums of o, down and the vocabulary go through this all-reduce.
    pub comm: Option<&'a dyn Communicator>,
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
            .map(|i| {
                let f = 1.0 / spec.rope_theta.powf(2.0 * i as f64 / spec.head_dim as f64);
                scaled_frequency(f, spec.numerics.rope_scaling) as f32
            })
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
            comm: None,
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
        let gemma = self.spec.numerics.gemma_norms;
        // gemma's RMSNorm scales by 1 + w
        let norm = |x: &Tensor, w: &Tensor| {
            if gemma {
                candle_nn::ops::rms_norm(x, &(w + 1.0)?, eps)
            } else {
                candle_nn::ops::rms_norm(x, w, eps)
            }
        };
        let flat = ids.flatten_all()?;
        let mut x = match w.vocab {
            Some(v) => self.reduce(embed_lookup(&w.embed, &flat, v)?)?,
            None => w.embed.index_select(&flat, 0)?,
        }
        .reshape((b, l, ()))?;
        drop(flat);
        if gemma {
            // gemma scales the embeddings by √hidden, rounded to the compute dtype first
            let scale = Tensor::new((self.spec.hidden_size as f32).sqrt(), x.device())?
                .to_dtype(x.dtype())?;
            x = x.broadcast_mul(&scale)?;
        }
        for (i, layer) in w.layers.iter().enumerate() {
            let a = self.attention_block(&norm(&x, &layer.input_norm)?, layer, i, pos, cache)?;
            x = match &layer.ffn_norms {
                // gemma2: the attention's and the MLP's outputs are normed before each residual
                Some((pre, post)) => {
                    let normed = norm(&a, &layer.post_attention_norm)?;
                    drop(a);
                    let x = (x + normed)?;
                    let m = self.mlp(&layer.mlp, &norm(&x, pre)?)?;
                    (x + norm(&m, post)?)?
                }
                None => {
                    let x = (x + a)?;
                    let m = self.mlp(&layer.mlp, &norm(&x, &layer.post_attention_norm)?)?;
                    (x + m)?
                }
            };
            if self.interrupt.is_some_and(|stop| stop()) {
                candle_core::bail!("interrupted after layer {i}");
            }
        }
        cache.advance(l);
        let last = norm(&x.narrow(1, l - 1, 1)?.contiguous()?, &w.norm)?;
        let logits = match &w.lm_head {
            Some(head) => head.forward(&last)?,
            None => {
                let (b, _, d) = last.dims3()?;
                last.reshape((b, d))?.matmul(&w.embed.t()?)?
            }
        };
        let mut logits = logits.reshape((b, ()))?.to_dtype(DType::F32)?;
        if let Some(v) = w.vocab {
            // every rank's rows in their place, summed: the whole vocabulary on every rank
            logits = self
                .reduce(place_logits(&logits, v)?)?
                .narrow(1, 0, v.vocab)?;
        }
        match self.spec.numerics.final_softcap {
            Some(cap) => softcap(logits, cap),
            None => Ok(logits),
        }
    }

    fn ffn(&self, f: &Ffn, x: &Tensor) -> candle_core::Result<Tensor> {
        let (gate, up) = match &f.gate_up {
            GateUp::Split { gate, up } => (gate.forward(x)?, up.forward(x)?),
            GateUp::Fused(g) => {
                let gu = g.forward(x)?;
                let half = g.rows() / 2;
                (gu.narrow(2, 0, half)?, gu.narrow(2, half, half)?)
            }
        };
        // Each step frees what it consumed: at most three intermediate-size tensors are alive
        // (two and the next), four with a fused gate_up whose views keep it whole.
        let act = match self.spec.numerics.activation {
            Activation::Silu => gate.silu()?,
            Activation::GeluTanh => gate.gelu()?,
        };
        drop(gate);
        let product = (act * up)?;
        f.down.forward(&product)
    }

    fn mlp(&self, mlp: &Mlp, x: &Tensor) -> candle_core::Result<Tensor> {
        let partial = match mlp {
            Mlp::Dense(f) => self.ffn(f, x)?,
            Mlp::Moe(m) => self.experts(m, x)?,
        };
        self.reduce(partial)
    }

    /// A tensor-parallel rank's partial sum made whole (as it is without a communicator).
    fn reduce(&self, partial: Tensor) -> candle_core::Result<Tensor> {
        match self.comm {
            Some(c) if c.rank().world > 1 => c.all_reduce_sum(&partial),
            _ => Ok(partial),
        }
    }

    /// Route each token to its `active` best experts (softmax over the router's logits, top-k,
    /// renormalised where the family does) and sum their outputs by those weights. The routing is
    /// read on the host, as candle-transformers' mixtral does; every expert stays resident.
    fn experts(&self, m: &Moe, x: &Tensor) -> candle_core::Result<Tensor> {
        let (b, l, h) = x.dims3()?;
        let flat = x.reshape((1, b * l, h))?;
        let probs = candle_nn::ops::softmax_last_dim(
            &m.router.forward(&flat)?.squeeze(0)?.to_dtype(DType::F32)?,
        )?;
        let probs = probs.to_vec2::<f32>()?;
        let mut routed: Vec<(Vec<u32>, Vec<f32>)> = vec![(Vec::new(), Vec::new()); m.experts.len()];
        for (t, p) in probs.iter().enumerate() {
            let mut order: Vec<usize> = (0..p.len()).collect();
            order.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
            let top = &order[..m.active.min(order.len())];
            let sum: f32 = top.iter().map(|&e| p[e]).sum();
            for &e in top {
                let w = if self.spec.numerics.norm_topk_prob {
                    p[e] / sum
                } else {
                    p[e]
                };
                routed[e].0.push(t as u32);
                routed[e].1.push(w);
            }
        }
        let flat = flat.squeeze(0)?;
        let mut out = flat.zeros_like()?;
        for (expert, (tokens, weights)) in m.experts.iter().zip(routed) {
            if tokens.is_empty() {
                continue;
            }
            let n = tokens.len();
            let idx = Tensor::from_vec(tokens, n, x.device())?;
            let w = Tensor::from_vec(weights, (n, 1), x.device())?.to_dtype(x.dtype())?;
            let xs = flat.index_select(&idx, 0)?.reshape((1, n, h))?;
            let y = self.ffn(expert, &xs)?.squeeze(0)?.broadcast_mul(&w)?;
            out = out.index_add(&idx, &y, 0)?;
        }
        if let Some((shared, gate)) = &m.shared {
            let xs = flat.reshape((1, b * l, h))?;
            let g = candle_nn::ops::sigmoid(&gate.forward(&xs)?)?;
            let y = self.ffn(shared, &xs)?.broadcast_mul(&g)?.squeeze(0)?;
            out = (out + y)?;
        }
        out.reshape((b, l, h))
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
        let (mut q, mut k, mut v) = match &w.qkv {
            Qkv::Split { q, k, v } => (q.forward(x)?, k.forward(x)?, v.forward(x)?),
            Qkv::Fused(f) => {
                let qkv = f.forward(x)?;
                let (qd, kvd) = (heads * hd, kv_heads * hd);
                (
                    qkv.narrow(2, 0, qd)?,
                    qkv.narrow(2, qd, kvd)?,
                    qkv.narrow(2, qd + kvd, kvd)?,
                )
            }
        };
        if let Some((bq, bk, bv)) = &w.qkv_bias {
            q = q.broadcast_add(bq)?;
            k = k.broadcast_add(bk)?;
            v = v.broadcast_add(bv)?;
        }
        let shape = |t: Tensor, n: usize| t.reshape((b, l, n, hd))?.transpose(1, 2)?.contiguous();
        let (mut q, mut k, v) = (shape(q, heads)?, shape(k, kv_heads)?, shape(v, kv_heads)?);
        if let Some((qn, kn)) = &w.qk_norm {
            let eps = s.rms_norm_eps as f32;
            q = candle_nn::ops::rms_norm(&q, qn, eps)?;
            k = candle_nn::ops::rms_norm(&k, kn, eps)?;
        }
        let cos = self.cos.narrow(0, pos, l)?;
        let sin = self.sin.narrow(0, pos, l)?;
        let rope = if s.numerics.rope_interleaved {
            candle_nn::rotary_emb::rope_i
        } else {
            candle_nn::rotary_emb::rope
        };
        let q = {
            let r = rope(&q, &cos, &sin)?;
            drop(q);
            r
        };
        let k = {
            let r = rope(&k, &cos, &sin)?;
            drop(k);
            r
        };
        // The cache keeps its own copy: this layer's new K and V are freed.
        let (k, v) = {
            let (new_k, new_v) = (k, v);
            cache.append(i, &new_k, &new_v)?
        };
        let window = s
            .sliding_window
            .filter(|_| s.is_sliding(i as u64))
            .map(|w| w as usize);
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
                window,
            )?);
            start += n;
        }
        drop((q, k, v));
        let o = Tensor::cat(&outs, 2)?; // (b, heads, l, hd)
        drop(outs);
        let o = {
            let cat = o;
            cat.transpose(1, 2)?.reshape((b, l, heads * hd))?
        };
        let partial = w.o.forward(&o)?;
        drop(o);
        self.reduce(partial)
    }

    /// Scaled dot-product attention of queries `q` (b, heads, n, hd) at absolute positions
    /// `first..first + n` over keys/values (b, kv_heads, t, hd), causal, GQA without copying K/V:
    /// the queries of the heads sharing one KV head are stacked into one matmul.
    ///
    /// Memory ([`score_bytes`] per (query, key), measured by `tests/runtime_memory.rs`; the
    /// probe's budget relies on it): sliced, the scores and their probabilities in the model's
    /// dtype ([`MaskedSoftmax`] masks and normalises in one step); eager, as transformers' eager
    /// does it, in f32 beside an (n, t) mask, each step replacing the scores before the next.
    fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        first: usize,
        window: Option<usize>,
    ) -> candle_core::Result<Tensor> {
        let (b, heads, n, hd) = q.dims4()?;
        let kv_heads = k.dim(1)?;
        let rep = heads / kv_heads;
        // Scale the queries (n × hd values), not the scores (n × t).
        let scale = self
            .spec
            .numerics
            .query_scale
            .unwrap_or(1.0 / (hd as f64).sqrt());
        let q = (q.reshape((b, kv_heads, rep * n, hd))? * scale)?;
        let kt = k.t()?.contiguous()?;
        let s = q.matmul(&kt)?;
        drop((q, kt));
        let probs = match self.attention {
            Attention::Chunked(_) => {
                let op = MaskedSoftmax {
                    queries: n,
                    first,
                    window,
                    softcap: self.spec.numerics.attention_softcap,
                };
                let p = op.apply(&s)?;
                drop(s);
                p
            }
            Attention::Eager => self.eager_probs(s, n, first, window)?,
        };
        probs.matmul(&v.contiguous()?)?.reshape((b, heads, n, hd))
    }

    /// Eager attention's probabilities from scores (b, kv_heads, rep · n, t): cast to f32,
    /// soft-capped, an additive mask, softmax, cast back.
    fn eager_probs(
        &self,
        s: Tensor,
        n: usize,
        first: usize,
        window: Option<usize>,
    ) -> candle_core::Result<Tensor> {
        let (b, kv_heads, rows, t) = s.dims4()?;
        let dtype = s.dtype();
        // The raw scores go as their f32 copy is made (a shadowed binding would keep them alive).
        let mut s = {
            let raw = s;
            raw.to_dtype(DType::F32)?
                .reshape((b, kv_heads, rows / n, n, t))?
        };
        if let Some(cap) = self.spec.numerics.attention_softcap {
            s = softcap(s, cap)?;
        }
        // Causal mask, built on the device from the position table: query at position first + r
        // sees keys 0..=first + r (and, in a sliding-window layer, only the last `window` of
        // them). A slice whose every query sees every key needs none.
        let slides = window.is_some_and(|w| first + 1 > w);
        if first + 1 < t || slides {
            // One (n, t) additive mask per slice, shared by every head through broadcasting.
            let keys = self.positions.narrow(0, 0, t)?.reshape((1, t))?;
            let queries = self.positions.narrow(0, first, n)?.reshape((n, 1))?;
            let mut visible = keys.broadcast_le(&queries)?;
            if let Some(w) = window {
                // key + window ≤ query: out of the window
                let old = keys
                    .broadcast_add(&Tensor::new(w as u32, keys.device())?)?
                    .broadcast_le(&queries)?;
                visible = visible.gt(&old)?;
            }
            let zero = Tensor::new(0f32, s.device())?.broadcast_as((n, t))?;
            let hidden = Tensor::new(f32::NEG_INFINITY, s.device())?.broadcast_as((n, t))?;
            let mask = visible.where_cond(&zero, &hidden)?;
            drop(visible);
            s = s.broadcast_add(&mask)?;
        }
        s = candle_nn::ops::softmax_last_dim(&s)?;
        s.to_dtype(dtype)?.reshape((b, kv_heads, rows, t))
    }
}

/// tanh soft-capping: `cap · tanh(x / cap)`.
fn softcap(x: Tensor, cap: f64) -> candle_core::Result<Tensor> {
    // one copy replaces the other, as the scores' other steps do
    let scaled = (&x / cap)?;
    drop(x);
    let t = scaled.tanh()?;
    drop(scaled);
    t * cap
}

/// A RoPE frequency after the model's long-context scaling.
fn scaled_frequency(f: f64, scaling: Option<RopeScaling>) -> f64 {
    match scaling {
        None => f,
        Some(RopeScaling::Linear { factor }) => f / factor,
        Some(RopeScaling::Llama3 {
            factor,
            low_freq_factor: low,
            high_freq_factor: high,
            original_max_position_embeddings: original,
        }) => {
            let wavelen = 2.0 * std::f64::consts::PI / f;
            if wavelen < original / high {
                f
            } else if wavelen > original / low {
                f / factor
            } else {
                let smooth = (original / wavelen - low) / (high - low);
                (1.0 - smooth) * f / factor + smooth * f
            }
        }
    }
}

pub use crate::estimate::candle::{score_bytes, sliced_score_bytes};

/// Greedy choice of the next token per sequence.
pub fn argmax(logits: &Tensor) -> candle_core::Result<Tensor> {
    logits.argmax(D::Minus1)
}
