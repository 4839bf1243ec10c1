//! The card a prediction is for: the size the user named, else what the detected GPU has free,
//! else an assumed 24 GiB card, and where that figure came from.

use serde::Serialize;

use crate::meter::gpu::{read_gpu, GpuInfo};
use crate::units::{Bytes, GIB};

/// Where the card size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CardSource {
    /// `--vram`.
    Flag,
    /// The free memory of the detected GPU.
    Nvml,
    /// No GPU and no flag.
    Assumed,
}

impl std::fmt::Display for CardSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CardSource::Flag => "flag",
            CardSource::Nvml => "nvml",
            CardSource::Assumed => "assumed",
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceFacts {
    pub vram_bytes: u64,
    pub source: CardSource,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuInfo>,
}

/// The card to plan for; what was assumed is said in `notes`.
pub fn choose(vram: Option<u64>, gpu_index: u32, notes: &mut Vec<String>) -> DeviceFacts {
    if let Some(v) = vram {
        return DeviceFacts {
            vram_bytes: v,
            source: CardSource::Flag,
            gpu: None,
        };
    }
    match read_gpu(gpu_index) {
        Ok(gpu) => {
            let others: u64 = gpu.processes.iter().filter_map(|p| p.bytes).sum();
            if others > 0 {
                notes.push(format!(
                    "planning for the {} free on {} (other processes hold {}); pass --vram to plan for the whole card",
                    Bytes(gpu.free_bytes), gpu.name, Bytes(others)
                ));
            }
            DeviceFacts {
                vram_bytes: gpu.free_bytes,
                source: CardSource::Nvml,
                gpu: Some(gpu),
            }
        }
        Err(why) => {
            notes.push(format!(
                "{why}; planning for a 24 GiB card — pass --vram to choose"
            ));
            DeviceFacts {
                vram_bytes: 24 * GIB,
                source: CardSource::Assumed,
                gpu: None,
            }
        }
    }
}
