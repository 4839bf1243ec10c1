//! The model runtime the probe measures with: one decoder configured by a `Spec`, its weights
//! drawn on the device (or read from safetensors), a KV cache whose every byte is accounted for,
//! and greedy generation with the knobs users turn (batch, prefill chunking, attention mode,
//! preallocated or growing cache). CPU always; CUDA with the `cuda` feature.

pub mod decoder;
pub mod generate;
pub mod kv_cache;
pub mod run;
pub mod weights;

use candle_core::{DType, Device};

pub use decoder::{Attention, Decoder};
pub use generate::{generate, GenerateConfig, GenerateStats};
pub use kv_cache::{CacheMode, KvCache};

/// Failures of the runtime. An allocation failure is its own case, carrying the driver's words,
/// so the probe can tell "out of memory" from "broken".
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("out of memory on {device}: {message}")]
    OutOfMemory { device: String, message: String },
    #[error(
        "the runtime does not run `{0}` models yet (llama, mistral and qwen2 shapes are supported)"
    )]
    Unsupported(String),
    #[error("{0}")]
    Device(String),
    #[error("{0}")]
    Candle(String),
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
            }
        } else {
            RuntimeError::Candle(message)
        }
    }
}

pub type Result<T> = std::result::Result<T, RuntimeError>;

/// `cpu`, `cuda`, `cuda:1`.
pub fn parse_device(s: &str) -> Result<Device> {
    match s.trim() {
        "cpu" => Ok(Device::Cpu),
        d if d == "cuda" || d.starts_with("cuda:") => {
            let index: usize = d
                .strip_prefix("cuda:")
                .map_or(Ok(0), str::parse)
                .map_err(|_| {
                    RuntimeError::Device(format!("`{s}` is not a device; use cpu, cuda or cuda:N"))
                })?;
            cuda_device(index)
        }
        _ => Err(RuntimeError::Device(format!(
            "`{s}` is not a device; use cpu, cuda or cuda:N"
        ))),
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
