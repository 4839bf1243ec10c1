//! A GPU that shares the machine's RAM (Apple silicon, NVIDIA's DGX Spark, AMD's Strix Halo) has
//! no card of its own: what counts as "the card" is a limit the OS or the driver sets, read
//! differently by each engine, and the usable part moves with what else the machine holds. The
//! plan is made for the figure the engine itself counts; this note says which figure that is, where
//! it comes from, and the knob that moves it.
//!
//! Sources, each a public measurement:
//! - Apple: Metal's `recommendedMaxWorkingSetSize` is what llama.cpp's Metal backend reports as
//!   the device's memory (it prints it at start) and what ollama takes as the GPU's VRAM; it
//!   follows `sysctl iogpu.wired_limit_mb` when that is set (AlexsJones/llmfit#754 measured both
//!   directions on an M3). MLX's allocator refuses only past min(1.5 × the working set, 0.95 ×
//!   RAM) and pages between the two (mlx/backend/metal/allocator.cpp, quoted in
//!   osaurus-ai/osaurus#1958); PyTorch's MPS allocator past 1.7 × the working set
//!   (`PYTORCH_MPS_HIGH_WATERMARK_RATIO`).
//! - DGX Spark (GB10): CUDA's total is 121.69 GiB; its free figure (`cudaMemGetInfo`,
//!   `torch.cuda.mem_get_info`) is the kernel's `MemFree`, so the page cache counts as used
//!   (vllm-project/vllm#48140; unslothai/unsloth#10704 wrote 60 GiB to a file and watched CUDA's
//!   free fall by 61.7 GiB while `MemAvailable` did not move).
//! - Strix Halo: llama.cpp's Vulkan backend counts the BIOS carve-out's heap plus the shared one
//!   (108.62–111.89 GiB of 128 GB at carve-outs of 32, 64 and 96 GiB, unslothai/unsloth#10418);
//!   ROCm's `hipMalloc` allocates only in the carve-out unless GTT is opened to it
//!   (defilantech/LLMKube#1155, ROCm/legacy-rocm-build#6050); `ttm.pages_limit` sets the GTT
//!   ceiling (pages = GiB × 262,144, noamsto/nix-amd-ai#42).

use crate::cards::{apple_working_set_mib, Unified};
use crate::estimate::Engine;
use crate::units::group;

/// What counts as the card on this unified-memory machine for `engine`, and what moves it.
pub fn note(machine: Unified, engine: Engine) -> String {
    match machine {
        Unified::Apple { ram_gb } => {
            let set = group(apple_working_set_mib(ram_gb));
            let who = match engine {
                Engine::LlamaCpp => {
                    "llama.cpp's Metal backend (and ollama, which runs it) counts exactly this as \
                     the GPU's memory and prints it at start (`recommendedMaxWorkingSetSize`): pass \
                     that figure as --vram to plan for your macOS"
                        .to_string()
                }
                Engine::Transformers | Engine::TransformersEager => {
                    "PyTorch on MPS allows up to 1.7 × it (PYTORCH_MPS_HIGH_WATERMARK_RATIO) but \
                     pages past it, slowly; MLX likewise up to min(1.5 × it, 95 % of RAM)"
                        .to_string()
                }
                Engine::Vllm | Engine::Sglang => format!(
                    "{engine} runs on NVIDIA and AMD GPUs, not on Apple's: the figure is what \
                     llama.cpp, ollama and MLX count"
                ),
                Engine::Candle => "candle's Metal backend allocates within it".to_string(),
            };
            format!(
                "unified memory: an Apple machine of {ram_gb} GB has no card of its own; the GPU \
                 may use Metal's working set, planned as {set} MiB (macOS 13–15's share; macOS 26 \
                 gives more: 107.52 GiB of 128 GB measured); {who}; `sudo sysctl \
                 iogpu.wired_limit_mb=N` raises it until reboot — leave the OS a few GiB"
            )
        }
        Unified::DgxSpark => {
            let who = match engine {
                Engine::Vllm => {
                    "vLLM's start-up check (gpu_memory_utilization × 121.69 GiB must be free) \
                     fails once a load has read the weights into the page cache: run `sync; echo 3 \
                     | sudo tee /proc/sys/vm/drop_caches` before starting, and keep \
                     --gpu-memory-utilization near 0.85 so the OS and the CPU side have room"
                }
                Engine::LlamaCpp => {
                    "llama.cpp's --fit reads that free figure too, so a GGUF just read (or \
                     mmap'ed) shrinks the context it fits: drop the page cache first, or pass -c \
                     yourself"
                }
                _ => {
                    "the CPU side, the OS and the page cache draw on the same 128 GB: what this \
                     plan counts as the card is what the GPU can have with the rest idle"
                }
            };
            format!(
                "unified memory: a DGX Spark's GPU shares 128 GB with the CPU; CUDA counts 121.69 \
                 GiB, and its free figure (cudaMemGetInfo) is the kernel's MemFree, which counts \
                 the page cache as used although the kernel gives it back on demand; {who}"
            )
        }
        Unified::StrixHalo => {
            let who = match engine {
                Engine::LlamaCpp => {
                    "this plan is for llama.cpp's Vulkan backend; its ROCm (HIP) build sees only \
                     the carve-out: pass --vram <carve-out>GiB for it"
                }
                Engine::Vllm
                | Engine::Sglang
                | Engine::Transformers
                | Engine::TransformersEager => {
                    "ROCm (PyTorch, vLLM, SGLang) allocates only in the BIOS carve-out unless GTT \
                     is opened to it: pass --vram <carve-out>GiB (the BIOS's \"dedicated graphics \
                     memory\") for ROCm"
                }
                Engine::Candle => "candle has no ROCm or Vulkan backend to run here",
            };
            format!(
                "unified memory: a Strix Halo's GPU has a BIOS carve-out plus GTT in the same 128 \
                 GB; Vulkan counts both (108.62–111.89 GiB measured, planned for the smallest); \
                 {who}; `ttm.pages_limit` on the kernel command line sets the GTT ceiling (pages = \
                 GiB × 262,144)"
            )
        }
    }
}

/// The note for a plan whose `--vram` named a unified-memory machine.
pub fn note_for(named: Option<&str>, engine: Engine) -> Option<String> {
    named
        .and_then(crate::cards::unified)
        .map(|machine| note(machine, engine))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cards::{parse_vram, unified};
    use crate::units::{GIB, MIB};

    #[test]
    fn apple_names_are_their_ram_and_plan_for_the_working_set() {
        assert_eq!(unified("m4-max-128g"), Some(Unified::Apple { ram_gb: 128 }));
        assert_eq!(unified("M3 Pro 36GB"), Some(Unified::Apple { ram_gb: 36 }));
        assert_eq!(unified("mac-24g"), Some(Unified::Apple { ram_gb: 24 }));
        assert_eq!(unified("m4-pro-48g"), Some(Unified::Apple { ram_gb: 48 }));
        // Not Apple: an old Tesla, an AMD Instinct, a discrete card.
        assert_eq!(unified("Tesla M40 24GB"), None);
        assert_eq!(unified("mi300x"), None);
        assert_eq!(unified("rtx4090"), None);
        // 8 GB: two thirds, llama.cpp's 5,461.34 MB on an M1.
        assert_eq!(apple_working_set_mib(8), 5461);
        // 48 GB and up: three quarters, the table's entries agree.
        assert_eq!(apple_working_set_mib(48), 36 * 1024);
        assert_eq!(
            parse_vram("m4-pro-48g").map(|v| v.bytes).ok(),
            Some(36 * GIB)
        );
        assert_eq!(
            parse_vram("m1-max-64g").map(|v| v.bytes).ok(),
            Some(apple_working_set_mib(64) * MIB)
        );
        assert_eq!(
            parse_vram("m2-ultra-192g").map(|v| v.bytes).ok(),
            Some(apple_working_set_mib(192) * MIB)
        );
        let v = parse_vram("m4-24g").map(|v| v.resolved).unwrap_or_default();
        assert!(v.contains("16,384 MiB"), "{v}");
    }

    #[test]
    fn each_machine_names_the_figure_its_engine_counts() {
        let a = note(Unified::Apple { ram_gb: 64 }, Engine::LlamaCpp);
        assert!(
            a.contains("49,152 MiB") && a.contains("iogpu.wired_limit_mb"),
            "{a}"
        );
        assert!(a.contains("recommendedMaxWorkingSetSize"), "{a}");
        let v = note_for(Some("dgx-spark"), Engine::Vllm).unwrap_or_default();
        assert!(v.contains("drop_caches") && v.contains("MemFree"), "{v}");
        let s = note_for(Some("AMD Radeon 8060S"), Engine::Transformers).unwrap_or_default();
        assert!(
            s.contains("carve-out") && s.contains("ttm.pages_limit"),
            "{s}"
        );
        assert_eq!(note_for(Some("h100"), Engine::Vllm), None);
        assert_eq!(note_for(None, Engine::Vllm), None);
        assert_eq!(
            parse_vram("gb10").map(|v| v.bytes).ok(),
            Some(124_611 * MIB)
        );
    }
}
