//! The KV cache, two ways: preallocated to the final length (what the probe uses: one allocation,
//! no growth) or grown by concatenation (what transformers' DynamicCache does: a new, longer copy
//! every step). Either way `bytes()` is what the tensors hold, and equals the estimate's formula.

use candle_core::{DType, Device, Tensor};

use super::{Result, RuntimeError};
use crate::model::Spec;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMode {
    Preallocated,
    Concatenated,
}

struct Layer {
    k: Option<Tensor>,
    v: Option<Tensor>,
}

pub struct KvCache {
    layers: Vec<Layer>,
    mode: CacheMode,
    /// Tokens held per sequence.
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// A cache for every layer of `spec`, `batch` sequences; a preallocated one holds `capacity` tokens.
    pub fn new(
        mode: CacheMode,
        spec: &Spec,
        batch: usize,
        capacity: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<KvCache> {
        let (layers, kv_heads, head_dim) = (
            spec.num_layers as usize,
            spec.num_kv_heads as usize,
            spec.head_dim as usize,
        );
        let mut v = Vec::with_capacity(layers);
        for _ in 0..layers {
            let (k, val) = match mode {
                CacheMode::Preallocated => {
                    let bytes =
                        (batch * kv_heads * capacity * head_dim * dtype.size_in_bytes()) as u64;
                    let z = || {
                        Tensor::zeros((batch, kv_heads, capacity, head_dim), dtype, device)
                            .map_err(|e| RuntimeError::from_candle(e, device).requesting(bytes))
                    };
                    (Some(z()?), Some(z()?))
                }
                CacheMode::Concatenated => (None, None),
            };
            v.push(Layer { k, v: val });
        }
        Ok(KvCache {
            layers: v,
            mode,
            len: 0,
            capacity,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append `k`, `v` of shape (batch, kv_heads, new, head_dim) to layer `i`; return the keys and
    /// values of every token so far. `advance` is called once per forward pass, after all layers.
    pub fn append(
        &mut self,
        i: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let new = k.dim(2)?;
        let layer = &mut self.layers[i];
        match self.mode {
            CacheMode::Preallocated => {
                if self.len + new > self.capacity {
                    candle_core::bail!(
                        "KV cache holds {} tokens, {} more do not fit",
                        self.capacity,
                        new
                    );
                }
                let (Some(ck), Some(cv)) = (&layer.k, &layer.v) else {
                    candle_core::bail!("preallocated cache without tensors");
                };
                ck.slice_set(&k.contiguous()?, 2, self.len)?;
                cv.slice_set(&v.contiguous()?, 2, self.len)?;
                Ok((
                    ck.narrow(2, 0, self.len + new)?,
                    cv.narrow(2, 0, self.len + new)?,
                ))
            }
            CacheMode::Concatenated => {
                let (nk, nv) = match (&layer.k, &layer.v) {
                    (Some(pk), Some(pv)) => (Tensor::cat(&[pk, k], 2)?, Tensor::cat(&[pv, v], 2)?),
                    _ => (k.contiguous()?, v.contiguous()?),
                };
                layer.k = Some(nk.clone());
                layer.v = Some(nv.clone());
                Ok((nk, nv))
            }
        }
    }

    /// Move a preallocated cache to hold `len` tokens without computing them: the slots between
    /// are the zeros it was allocated with. The probe uses this to measure the last steps of a
    /// long generation without decoding every token before them (memory is the same).
    pub fn skip_to(&mut self, len: usize) -> candle_core::Result<()> {
        if self.mode != CacheMode::Preallocated || len > self.capacity || len < self.len {
            candle_core::bail!(
                "cannot skip a {:?} cache of {} tokens (capacity {}) to {len}",
                self.mode,
                self.len,
                self.capacity
            );
        }
        self.len = len;
        Ok(())
    }

    pub fn advance(&mut self, tokens: usize) {
        self.len += tokens;
    }

    /// Bytes the cache's tensors occupy now.
    pub fn bytes(&self) -> u64 {
        self.layers
            .iter()
            .flat_map(|l| [&l.k, &l.v])
            .flatten()
            .map(|t| (t.elem_count() * t.dtype().size_in_bytes()) as u64)
            .sum()
    }
}
