//! The NCCL communicator of a tensor-parallel rank, through cudarc's bindings as candle's
//! `llama_multiprocess` example uses them: rank 0 makes the unique id and writes it to a file
//! the parent named, the other ranks read it there ([`Nccl::join`]), and the all-reduce is a
//! candle custom op on the rank's own CUDA stream. Built with the `nccl` feature only.

use std::ffi::c_char;
use std::path::Path;
use std::time::{Duration, Instant};

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::nccl::safe::{Comm, Id, ReduceOp};
use candle_core::{CpuStorage, CudaStorage, DType, Device, Layout, Shape, Tensor};

use super::parallel::{Communicator, Rank};
use super::{Result, RuntimeError};

/// The bytes of an NCCL unique id (`ncclUniqueId`).
pub const ID_BYTES: usize = 128;

/// A fresh NCCL unique id, as hex.
fn new_id() -> Result<String> {
    let id = Id::new().map_err(|e| {
        RuntimeError::Device(format!(
            "NCCL could not make a unique id ({e:?}); is libnccl.so.2 installed?"
        ))
    })?;
    Ok(id
        .internal()
        .iter()
        .map(|&b| format!("{:02x}", b as u8))
        .collect())
}

/// Written whole or not at all: the other ranks never read half an id.
fn write_id(path: &Path, hex: &str) -> Result<()> {
    let part = path.with_extension("part");
    std::fs::write(&part, hex)
        .and_then(|()| std::fs::rename(&part, path))
        .map_err(|e| {
            RuntimeError::Device(format!(
                "cannot write the NCCL id to {}: {e}",
                path.display()
            ))
        })
}

fn read_id(path: &Path, within: Duration) -> Result<String> {
    let start = Instant::now();
    loop {
        if let Ok(hex) = std::fs::read_to_string(path) {
            return Ok(hex);
        }
        if start.elapsed() > within {
            return Err(RuntimeError::Device(format!(
                "rank 0 did not write the NCCL id to {} within {:.0} s",
                path.display(),
                within.as_secs_f64()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn parse_id(hex: &str) -> Result<[c_char; ID_BYTES]> {
    let bad = || RuntimeError::Device(format!("not an NCCL unique id: {hex:?}"));
    if hex.len() != 2 * ID_BYTES {
        return Err(bad());
    }
    let mut id = [0 as c_char; ID_BYTES];
    for (i, slot) in id.iter_mut().enumerate() {
        let byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16)
            .map_err(|_| bad())?;
        *slot = byte as c_char;
    }
    Ok(id)
}

/// One rank's NCCL communicator on its GPU.
pub struct Nccl {
    comm: Comm,
    me: Rank,
}

impl Nccl {
    /// Join the world whose id rank 0 writes to `id_file`, as `rank` on `device` (blocks until
    /// every rank has joined).
    pub fn join(device: &Device, rank: Rank, id_file: &Path, within: Duration) -> Result<Nccl> {
        let Device::Cuda(cuda) = device else {
            return Err(RuntimeError::Device(
                "NCCL ranks run on CUDA devices".into(),
            ));
        };
        let hex = if rank.rank == 0 {
            let hex = new_id()?;
            write_id(id_file, &hex)?;
            hex
        } else {
            read_id(id_file, within)?
        };
        let id = Id::uninit(parse_id(&hex)?);
        let comm = Comm::from_rank(cuda.cuda_stream(), rank.rank, rank.world, id).map_err(|e| {
            RuntimeError::Device(format!(
                "NCCL could not start rank {} of {} ({e:?})",
                rank.rank, rank.world
            ))
        })?;
        Ok(Nccl { comm, me: rank })
    }
}

impl Communicator for Nccl {
    fn rank(&self) -> Rank {
        self.me
    }

    fn all_reduce_sum(&self, t: &Tensor) -> candle_core::Result<Tensor> {
        t.contiguous()?
            .apply_op1_no_bwd(&AllReduce { comm: &self.comm })
    }
}

/// `ncclAllReduce(sum)` of a contiguous tensor into a new one, on the rank's stream.
struct AllReduce<'a> {
    comm: &'a Comm,
}

impl AllReduce<'_> {
    fn reduce<T>(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<CudaStorage>
    where
        T: candle_core::cuda_backend::CudaDType
            + candle_core::cuda_backend::cudarc::driver::DeviceRepr
            + candle_core::cuda_backend::cudarc::nccl::safe::NcclType,
    {
        let whole = s.as_cuda_slice::<T>()?;
        let Some((start, end)) = l
            .contiguous_offsets()
            .filter(|&(start, end)| start <= end && end <= whole.len())
        else {
            candle_core::bail!("the all-reduce takes a contiguous tensor")
        };
        let count = end - start;
        let src = whole.slice(start..end);
        let dev = s.device().clone();
        // SAFETY: every element is written by the all-reduce before it is read.
        let mut dst = unsafe { dev.alloc::<T>(count) }?;
        self.comm
            .all_reduce(&src, &mut dst, &ReduceOp::Sum)
            .map_err(|e| candle_core::Error::Msg(format!("NCCL all-reduce failed: {e:?}")))?;
        Ok(CudaStorage::wrap_cuda_slice(dst, dev))
    }
}

impl candle_core::CustomOp1 for AllReduce<'_> {
    fn name(&self) -> &'static str {
        "nccl-all-reduce"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("the NCCL all-reduce runs on CUDA tensors")
    }

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        use half::{bf16, f16};
        let out = match s.dtype() {
            DType::BF16 => self.reduce::<bf16>(s, l)?,
            DType::F16 => self.reduce::<f16>(s, l)?,
            DType::F32 => self.reduce::<f32>(s, l)?,
            other => candle_core::bail!("no NCCL all-reduce for {other:?}"),
        };
        Ok((out, l.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_goes_through_hex_and_back() {
        let hex: String = (0..ID_BYTES).map(|i| format!("{:02x}", i as u8)).collect();
        let id = parse_id(&hex).unwrap();
        assert_eq!(id[127] as u8, 127);
        assert!(parse_id("00").is_err());
    }
}
