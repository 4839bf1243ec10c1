//! Meters: what the machine says about its memory. NVML is loaded at run time; a machine without
//! an NVIDIA driver is a normal case that yields a one-line note, never an error.

pub mod device;
pub mod gpu;
pub mod host;
pub mod sampler;

pub use gpu::{GpuInfo, GpuProcess};

use serde::{Deserialize, Serialize};

/// What measured a child's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Meter {
    /// The counting allocator (the CPU's heap is the device).
    HostAllocator,
    /// candle's CUDA memory pool.
    CudaPool,
    /// PyTorch's caching allocator on a GPU (the transformers probe).
    TorchCuda,
    /// PyTorch on the CPU (the transformers probe).
    TorchCpu,
}

impl Meter {
    pub fn as_str(self) -> &'static str {
        match self {
            Meter::HostAllocator => "host-allocator",
            Meter::CudaPool => "cuda-pool",
            Meter::TorchCuda => "torch-cuda",
            Meter::TorchCpu => "torch-cpu",
        }
    }
}
