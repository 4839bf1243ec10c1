//! Meters: what the machine says about its memory. NVML is loaded at run time; a machine without
//! an NVIDIA driver is a normal case that yields a one-line note, never an error.

pub mod device;
pub mod gpu;
pub mod host;
pub mod sampler;

pub use gpu::{GpuInfo, GpuProcess};
