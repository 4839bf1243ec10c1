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

/// The compute capability transformers' constants beside PyTorch's pool were measured on: the
/// CUDA context, cuDNN's and cuBLAS's workspaces and the allocator at the limit, on an H100 and an
/// H200 (docs/calibration/card-edges-h200-2026-12-06.jsonl and the H100 same-OOM records).
pub const MEASURED_CAPABILITY: (u32, u32) = (9, 0);

/// Where a transformers plan's card is not one those constants were measured on, a note saying so
/// and what covers it (`named`: the card `--vram` named; `detected`: the GPU read instead).
pub fn constants_note(
    engine: crate::estimate::Engine,
    named: Option<&str>,
    detected: Option<&GpuInfo>,
) -> Option<String> {
    if !engine.is_transformers() {
        return None;
    }
    let card = named.or(detected.map(|g| g.name.as_str()));
    // A unified-memory machine gets its own note (budget::unified), not a CUDA card's.
    if card.and_then(crate::cards::unified).is_some() {
        return None;
    }
    let cc = card.and_then(crate::cards::compute_capability);
    let (x, y) = MEASURED_CAPABILITY;
    let on = match (card, cc) {
        (_, Some(c)) if c == MEASURED_CAPABILITY => return None,
        (Some(card), Some((a, b))) => {
            format!("not on a card of compute capability {a}.{b} ({card})")
        }
        (Some(card), None) => {
            format!("not on {card}, whose compute capability llm-oom does not know")
        }
        (None, _) => "and the card here is a size, not a named card (`--vram rtx4090`)".to_string(),
    };
    Some(format!(
        "transformers' constants beside PyTorch's pool (the CUDA context, cuDNN's and cuBLAS's \
         workspaces, the allocator at the limit) are measured on an H100 and an H200 (compute \
         capability {x}.{y}), {on}: the margin row is what covers the difference; `llm-oom \
         diagnose` on the card measures them"
    ))
}

#[cfg(test)]
mod constants_tests {
    use super::*;
    use crate::estimate::Engine;

    #[test]
    fn the_note_names_what_was_not_measured() {
        assert_eq!(
            constants_note(Engine::Transformers, Some("h100"), None),
            None
        );
        assert_eq!(
            constants_note(Engine::Transformers, Some("NVIDIA H200"), None),
            None
        );
        let ada = constants_note(Engine::Transformers, Some("rtx4090"), None).unwrap_or_default();
        assert!(ada.contains("compute capability 8.9 (rtx4090)"), "{ada}");
        let ampere =
            constants_note(Engine::TransformersEager, Some("rtx3090ti"), None).unwrap_or_default();
        assert!(ampere.contains("8.6"), "{ampere}");
        let size = constants_note(Engine::Transformers, None, None).unwrap_or_default();
        assert!(size.contains("a size, not a named card"), "{size}");
        assert!(constants_note(Engine::Vllm, Some("rtx4090"), None).is_none());
        assert_eq!(crate::cards::compute_capability("a100-80g"), Some((8, 0)));
        assert_eq!(crate::cards::compute_capability("a10"), Some((8, 6)));
        assert_eq!(crate::cards::compute_capability("l40s"), Some((8, 9)));
        assert_eq!(
            crate::cards::compute_capability("NVIDIA GeForce RTX 5090"),
            Some((12, 0))
        );
        assert_eq!(crate::cards::compute_capability("mi300x"), None);
    }
}
