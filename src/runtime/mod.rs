//! The model runtime the probe measures with: one decoder configured by a `Spec`, its weights
//! drawn on the device (or read from safetensors), a KV cache whose every byte is accounted for,
//! and greedy generation with the knobs users turn (batch, prefill chunking, attention mode,
//! preallocated or growing cache). CPU always; CUDA with the `cuda` feature.

pub mod decoder;
pub mod generate;
pub mod jit;
pub mod kv_cache;
pub mod masked_softmax;
#[cfg(feature = "nccl")]
pub mod nccl;
pub mod parallel;
pub mod setup;
pub mod tcp;
pub mod weights;

use candle_core::{DType, Device};

pub use decoder::{Attention, Decoder};
pub use generate::{generate, GenerateConfig, GenerateStats};
pub use kv_cache::{CacheMode, KvCache};

/// Failures of the runtime. An allocation failure is its own case, carrying the driver's words,
/// so the probe can tell "out of memory" from "broken".
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("out of memory on {device}{}: {message}", requested.map_or(String::new(), |b| format!(" allocating {}", crate::units::Bytes(b))))]
    OutOfMemory {
        device: String,
        message: String,
        requested: Option<u64>,
    },
    #[error(
        "the runtime does not run `{0}` models yet (it runs llama, mistral, qwen2, qwen3, phi3, gemma2, mixtral and qwen2/3-moe; `llm-oom plan` prices the rest)"
    )]
    Unsupported(String),
    #[error("{0}")]
    Device(String),
    /// A checkpoint that cannot be read as the config describes it.
    #[error("{0}")]
    Checkpoint(String),
    #[error("{0}")]
    Candle(String),
    /// A tensor-parallel world the model does not split into, or a communicator that failed to
    /// start.
    #[error("{0}")]
    Parallel(String),
}

impl RuntimeError {
    /// Classify a candle error: the driver's out-of-memory becomes `OutOfMemory`.
    pub fn from_candle(e: candle_core::Error, device: &Device) -> RuntimeError {
        // candle appends a backtrace when RUST_BACKTRACE is set: keep the message.
        let message = e
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        if message.contains("OUT_OF_MEMORY") || message.contains("out of memory") {
            RuntimeError::OutOfMemory {
                device: device_name(device),
                message,
                requested: None,
            }
        } else {
            RuntimeError::Candle(message)
        }
    }
}

impl RuntimeError {
    /// Attach the size of the allocation that failed, where the caller knows it.
    pub fn requesting(self, bytes: u64) -> RuntimeError {
        match self {
            RuntimeError::OutOfMemory {
                device, message, ..
            } => RuntimeError::OutOfMemory {
                device,
                message,
                requested: Some(bytes),
            },
            other => other,
        }
    }
}

pub type Result<T> = std::result::Result<T, RuntimeError>;

/// Check that this build can open the device, without opening it (no CUDA context is made).
pub fn check_device(d: crate::request::Device) -> Result<()> {
    match d {
        crate::request::Device::Cpu => Ok(()),
        crate::request::Device::Cuda(_) if cfg!(feature = "cuda") => Ok(()),
        crate::request::Device::Cuda(i) => cuda_device(i as usize).map(|_| ()),
    }
}

/// Open the device for candle (a CUDA context on the GPU).
pub fn open_device(d: crate::request::Device) -> Result<Device> {
    match d {
        crate::request::Device::Cpu => Ok(Device::Cpu),
        crate::request::Device::Cuda(i) => cuda_device(i as usize),
    }
}

#[cfg(feature = "cuda")]
fn cuda_device(index: usize) -> Result<Device> {
    Device::new_cuda(index)
        .map_err(|e| RuntimeError::Device(format!("cannot open CUDA device {index}: {e}")))
}

#[cfg(not(feature = "cuda"))]
fn cuda_device(_index: usize) -> Result<Device> {
    Err(RuntimeError::Device("this llm-oom was built without the `cuda` feature; rebuild with `cargo build --release --features cuda` (see scripts/setup-cuda.sh)".into()))
}

pub fn device_name(d: &Device) -> String {
    match d {
        Device::Cpu => "cpu".into(),
        Device::Cuda(_) => "cuda".into(),
        _ => format!("{d:?}"),
    }
}

/// Bytes of one element of a candle dtype.
pub fn dtype_bytes(d: DType) -> u64 {
    d.size_in_bytes() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_out_of_memory_carries_what_was_asked() {
        let e = candle_core::Error::Msg(
            "DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")\n   0: backtrace".into(),
        );
        let r = RuntimeError::from_candle(e, &Device::Cpu).requesting(3 << 30);
        assert_eq!(r.to_string(), "out of memory on cpu allocating 3.00 GiB: DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")");
        let other = RuntimeError::from_candle(
            candle_core::Error::Msg("shape mismatch".into()),
            &Device::Cpu,
        );
        assert!(matches!(other.requesting(1), RuntimeError::Candle(_)));
    }
}
