//! The decoder's weights. `random` draws every tensor on the device, one at a time, so a 7B model
//! never passes through host memory: memory is what real weights would take, and it is ready in
//! about a second. (Loading real safetensors checkpoints is the next step of this module.)

use candle_core::{DType, Device, Tensor};

use super::{Result, RuntimeError};
use crate::model::Spec;

pub struct LayerWeights {
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    pub o: Tensor,
    pub qkv_bias: Option<(Tensor, Tensor, Tensor)>,
    pub gate: Tensor,
    pub up: Tensor,
    pub down: Tensor,
    pub input_norm: Tensor,
    pub post_attention_norm: Tensor,
}

pub struct Weights {
    pub embed: Tensor,
    pub layers: Vec<LayerWeights>,
    pub norm: Tensor,
    /// `None` when the embeddings are tied to the output.
    pub lm_head: Option<Tensor>,
    pub dtype: DType,
}

/// The families the decoder runs as written: llama-style blocks (RMSNorm, RoPE, GQA, SwiGLU).
pub fn check_supported(spec: &Spec) -> Result<()> {
    let ok = matches!(spec.architecture.as_str(), "llama" | "mistral" | "qwen2")
        && spec.experts.is_none()
        && !spec.fused_projections;
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::Unsupported(spec.architecture.clone()))
    }
}

impl Weights {
    /// Every tensor drawn from N(0, 0.02²) on `device` (norms are ones), `seed` fixing the draw.
    pub fn random(spec: &Spec, dtype: DType, device: &Device, seed: u64) -> Result<Weights> {
        check_supported(spec)?;
        let _ = device.set_seed(seed);
        let err = |e| RuntimeError::from_candle(e, device);
        let (h, i, v) = (
            spec.hidden_size as usize,
            spec.intermediate_size as usize,
            spec.vocab_size as usize,
        );
        let (q, kv) = (spec.q_dim() as usize, spec.kv_dim() as usize);
        let w = |rows: usize, cols: usize| -> Result<Tensor> {
            Tensor::randn(0f32, 0.02, (rows, cols), device)
                .and_then(|t| t.to_dtype(dtype))
                // drawn in f32, then converted: the f32 draw is the largest allocation
                .map_err(|e| err(e).requesting((rows * cols * 4) as u64))
        };
        let ones = |n: usize| -> Result<Tensor> { Tensor::ones(n, dtype, device).map_err(err) };
        let bias = |n: usize| -> Result<Tensor> {
            Tensor::randn(0f32, 0.02, n, device)
                .and_then(|t| t.to_dtype(dtype))
                .map_err(err)
        };
        let mut layers = Vec::with_capacity(spec.num_layers as usize);
        for _ in 0..spec.num_layers {
            layers.push(LayerWeights {
                q: w(q, h)?,
                k: w(kv, h)?,
                v: w(kv, h)?,
                o: w(h, q)?,
                qkv_bias: if spec.qkv_bias {
                    Some((bias(q)?, bias(kv)?, bias(kv)?))
                } else {
                    None
                },
                gate: w(i, h)?,
                up: w(i, h)?,
                down: w(h, i)?,
                input_norm: ones(h)?,
                post_attention_norm: ones(h)?,
            });
        }
        Ok(Weights {
            embed: w(v, h)?,
            layers,
            norm: ones(h)?,
            lm_head: if spec.tie_word_embeddings {
                None
            } else {
                Some(w(v, h)?)
            },
            dtype,
        })
    }

    /// Bytes the weight tensors occupy.
    pub fn bytes(&self) -> u64 {
        let t = |t: &Tensor| (t.elem_count() * t.dtype().size_in_bytes()) as u64;
        let layers: u64 = self
            .layers
            .iter()
            .map(|l| {
                [
                    &l.q,
                    &l.k,
                    &l.v,
                    &l.o,
                    &l.gate,
                    &l.up,
                    &l.down,
                    &l.input_norm,
                    &l.post_attention_norm,
                ]
                .iter()
                .map(|x| t(x))
                .sum::<u64>()
                    + l.qkv_bias
                        .as_ref()
                        .map_or(0, |(a, b, c)| t(a) + t(b) + t(c))
            })
            .sum();
        layers + t(&self.embed) + t(&self.norm) + self.lm_head.as_ref().map_or(0, t)
    }
}
