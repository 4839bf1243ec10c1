//! The causal softmax of the runtime's sliced attention in one step: each query's row of scores
//! is soft-capped (Gemma 2), masked to the keys it sees (causal, and in a sliding-window layer only
//! the last `window` of them) and normalised, reading the scores in their own dtype and reducing in
//! f32, with no mask tensor and no f32 copy of the scores. On the GPU it is one kernel
//! (`kernels/masked_softmax.cu`, two reads and one write of the scores) in place of five passes
//! (cast to f32, mask, softmax, cast back), which made a 32k-token prefill many times slower than
//! SDPA; on the CPU the same arithmetic, so both devices hold the same bytes.
//!
//! Memory: the scores and the probabilities, both in the scores' dtype, are the only per-(query,
//! key) tensors alive ([`crate::estimate::candle::sliced_score_bytes`]).

use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor, WithDType};

/// Softmax over the last dimension of scores shaped (…, queries, keys), where query `r` of every
/// row block sits at position `first + r` and the keys are positions `0..keys`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaskedSoftmax {
    /// Queries per block of rows (the slice's length): row `i` is query `i % queries`.
    pub queries: usize,
    /// The position of the first query.
    pub first: usize,
    /// A sliding-window layer's window.
    pub window: Option<usize>,
    /// Gemma 2's attention soft-cap.
    pub softcap: Option<f64>,
}

impl MaskedSoftmax {
    /// The keys `lo..hi` query `r` sees among `keys`.
    fn visible(&self, r: usize, keys: usize) -> (usize, usize) {
        let pos = self.first.saturating_add(r);
        let hi = pos.saturating_add(1).min(keys);
        let lo = self
            .window
            .map_or(0, |w| pos.saturating_add(1).saturating_sub(w));
        (lo.min(hi), hi)
    }

    /// The op applied to `scores` (contiguous, last dimension the keys).
    pub fn apply(&self, scores: &Tensor) -> Result<Tensor> {
        scores.apply_op1_no_bwd(self)
    }

    fn cpu<T: WithDType>(&self, src: &[T], layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let Some((o1, o2)) = layout.contiguous_offsets() else {
            candle_core::bail!("masked softmax: the scores must be contiguous")
        };
        let src = &src[o1..o2];
        let dims = layout.shape().dims();
        let keys = dims.last().copied().unwrap_or(1).max(1);
        let queries = self.queries.max(1);
        let cap = self.softcap.map(|c| c as f32);
        let mut dst = vec![T::zero(); src.len()];
        for (row, (x, y)) in src.chunks(keys).zip(dst.chunks_mut(keys)).enumerate() {
            let (lo, hi) = self.visible(row % queries, keys);
            let value = |v: T| {
                let v = v.to_f64() as f32;
                cap.map_or(v, |c| c * (v / c).tanh())
            };
            let max = x[lo..hi]
                .iter()
                .map(|&v| value(v))
                .fold(f32::NEG_INFINITY, f32::max);
            let sum: f32 = x[lo..hi].iter().map(|&v| (value(v) - max).exp()).sum();
            let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
            for (d, &v) in y[lo..hi].iter_mut().zip(&x[lo..hi]) {
                *d = T::from_f64(f64::from((value(v) - max).exp() * inv));
            }
        }
        Ok((T::to_cpu_storage_owned(dst), layout.shape().clone()))
    }
}

/// The kernel's PTX, which the driver compiles for the card when it is first loaded
/// (`runtime::jit` has it compiled ahead, beside candle's).
#[cfg(feature = "cuda")]
pub const PTX: &str = cuda::ptx::MASKED_SOFTMAX;

/// The launch on the GPU.
#[cfg(feature = "cuda")]
mod cuda {
    use candle_core::cuda_backend::cudarc::driver::{
        CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg,
    };
    use candle_core::cuda_backend::{CudaStorageSlice, WrapErr};
    use candle_core::{CudaDevice, CudaStorage, Layout, Result, Shape};

    use super::MaskedSoftmax;

    pub(super) mod ptx {
        include!(concat!(env!("OUT_DIR"), "/ptx.rs"));
    }

    /// Threads per row: the kernel's `BLOCK`.
    const BLOCK: u32 = 256;

    fn launch<T: DeviceRepr>(
        op: &MaskedSoftmax,
        name: &str,
        src: &CudaSlice<T>,
        dev: &CudaDevice,
        layout: &Layout,
    ) -> Result<CudaSlice<T>> {
        let Some((o1, o2)) = layout.contiguous_offsets() else {
            candle_core::bail!("masked softmax: the scores must be contiguous")
        };
        let src = src.slice(o1..o2);
        let n = o2 - o1;
        let keys = layout.shape().dims().last().copied().unwrap_or(1).max(1);
        let rows = u32::try_from(n / keys)
            .map_err(|_| candle_core::Error::Msg(format!("masked softmax: {} rows", n / keys)))?;
        let func = dev.get_or_load_custom_func(name, "masked_softmax", ptx::MASKED_SOFTMAX)?;
        // SAFETY: every element is written by the kernel below.
        let dst = unsafe { dev.alloc::<T>(n)? };
        let (t, queries, first) = (keys as i64, op.queries.max(1) as i64, op.first as i64);
        let window = op.window.map_or(0, |w| w as i64);
        let cap = op.softcap.map_or(0.0, |c| c as f32);
        let mut b = func.builder();
        b.arg(&src);
        b.arg(&dst);
        b.arg(&t);
        b.arg(&queries);
        b.arg(&first);
        b.arg(&window);
        b.arg(&cap);
        let cfg = LaunchConfig {
            grid_dim: (rows, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments match the kernel's signature; src and dst hold rows × t elements.
        unsafe { b.launch(cfg) }.w()?;
        Ok(dst)
    }

    pub fn forward(
        op: &MaskedSoftmax,
        storage: &CudaStorage,
        layout: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        use candle_core::backend::BackendStorage;
        let dev = storage.device();
        let slice = match &storage.slice {
            CudaStorageSlice::F32(s) => {
                CudaStorageSlice::F32(launch(op, "masked_softmax_f32", s, dev, layout)?)
            }
            CudaStorageSlice::F16(s) => {
                CudaStorageSlice::F16(launch(op, "masked_softmax_f16", s, dev, layout)?)
            }
            CudaStorageSlice::BF16(s) => {
                CudaStorageSlice::BF16(launch(op, "masked_softmax_bf16", s, dev, layout)?)
            }
            _ => candle_core::bail!("masked softmax: scores of {:?}", storage.dtype()),
        };
        Ok((
            CudaStorage {
                slice,
                device: dev.clone(),
            },
            layout.shape().clone(),
        ))
    }
}

impl CustomOp1 for MaskedSoftmax {
    fn name(&self) -> &'static str {
        "masked-softmax"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        match storage {
            CpuStorage::F32(s) => self.cpu(s, layout),
            CpuStorage::F16(s) => self.cpu(s, layout),
            CpuStorage::BF16(s) => self.cpu(s, layout),
            CpuStorage::F64(s) => self.cpu(s, layout),
            other => candle_core::bail!(
                "masked softmax: scores of {:?}",
                candle_core::backend::BackendStorage::dtype(other)
            ),
        }
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        cuda::forward(self, storage, layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, D};

    /// The five-pass reference the op replaces: an additive −∞ mask, softmax in f32.
    fn reference(s: &Tensor, op: &MaskedSoftmax) -> Tensor {
        let dims = s.dims().to_vec();
        let keys = dims[dims.len() - 1];
        let rows = s.elem_count() / keys;
        let mut mask = vec![f32::NEG_INFINITY; rows * keys];
        for r in 0..rows {
            let (lo, hi) = op.visible(r % op.queries, keys);
            for m in &mut mask[r * keys + lo..r * keys + hi] {
                *m = 0.0;
            }
        }
        let mut x = s.to_dtype(DType::F32).unwrap();
        if let Some(c) = op.softcap {
            x = ((x / c).unwrap().tanh().unwrap() * c).unwrap();
        }
        let mask = Tensor::from_vec(mask, dims, s.device()).unwrap();
        candle_nn::ops::softmax_last_dim(&(x + mask).unwrap()).unwrap()
    }

    fn close(a: &Tensor, b: &Tensor, tol: f32) {
        let d = (a.to_dtype(DType::F32).unwrap() - b.to_dtype(DType::F32).unwrap())
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(D::Minus1)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(d <= tol, "differs by {d}");
    }

    #[test]
    fn matches_the_masked_f32_softmax_for_causal_windowed_and_capped_slices() {
        let dev = Device::Cpu;
        // (batch, kv heads, rep · queries, keys): 3 queries at positions 5, 6, 7 over 8 keys.
        let s = Tensor::randn(0f32, 3.0, (2, 2, 6, 8), &dev).unwrap();
        for op in [
            MaskedSoftmax {
                queries: 3,
                first: 5,
                window: None,
                softcap: None,
            },
            MaskedSoftmax {
                queries: 3,
                first: 5,
                window: Some(3),
                softcap: None,
            },
            MaskedSoftmax {
                queries: 3,
                first: 5,
                window: Some(2),
                softcap: Some(5.0),
            },
            // decode: one query that sees every key needs no mask
            MaskedSoftmax {
                queries: 1,
                first: 7,
                window: None,
                softcap: None,
            },
        ] {
            close(&op.apply(&s).unwrap(), &reference(&s, &op), 1e-6);
            let half = s.to_dtype(DType::BF16).unwrap();
            let got = op.apply(&half).unwrap();
            assert_eq!(got.dtype(), DType::BF16);
            close(&got, &reference(&half, &op), 4e-3);
        }
    }

    #[test]
    fn hidden_keys_are_zero_and_rows_sum_to_one() {
        let s = Tensor::ones((1, 1, 2, 4), DType::F32, &Device::Cpu).unwrap();
        let op = MaskedSoftmax {
            queries: 2,
            first: 1,
            window: Some(2),
            softcap: None,
        };
        let got: Vec<Vec<f32>> = op
            .apply(&s)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec2()
            .unwrap();
        // position 1 sees keys 0 and 1; position 2 sees keys 1 and 2
        assert_eq!(
            got,
            vec![vec![0.5, 0.5, 0.0, 0.0], vec![0.0, 0.5, 0.5, 0.0]]
        );
    }
}
