//! What the user asked, typed once at the CLI edge and carried typed through every layer: the
//! device, the runtime dtype, and the model with its workload.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::dtype::{KvDtype, WeightDtype};
use crate::error::InputError;
use crate::estimate::{Engine, Workload};
use crate::model::Spec;

/// Where the probe runs. Serialised as the user writes it (`cpu`, `cuda:0`), so the probe's
/// protocol and the JSON contract keep strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Device {
    Cpu,
    Cuda(u32),
}

impl Device {
    /// The GPU's ordinal, for NVML and the driver; `None` on the CPU.
    pub fn gpu(self) -> Option<u32> {
        match self {
            Device::Cpu => None,
            Device::Cuda(n) => Some(n),
        }
    }
}

impl FromStr for Device {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Device, InputError> {
        let t = s.trim().to_ascii_lowercase();
        if t == "cpu" {
            return Ok(Device::Cpu);
        }
        if t == "cuda" || t == "gpu" {
            return Ok(Device::Cuda(0));
        }
        if let Some(n) = t.strip_prefix("cuda:") {
            if let Ok(i) = n.parse::<u32>() {
                return Ok(Device::Cuda(i));
            }
        }
        Err(InputError::Usage(format!(
            "`{s}` is not a device; use cpu, cuda or cuda:N"
        )))
    }
}

/// `--device` as `diagnose` takes it: one device, or several GPUs separated by commas
/// (`cuda:0,cuda:1`) that the probe spreads the model over. Several must all be distinct GPUs.
pub fn parse_device_list(s: &str) -> Result<Vec<Device>, InputError> {
    let devices: Vec<Device> = s
        .split(',')
        .map(str::parse)
        .collect::<Result<_, InputError>>()?;
    if devices.len() > 1 {
        if devices.contains(&Device::Cpu) {
            return Err(InputError::Usage(format!(
                "--device {s}: several devices are GPUs only; write them like cuda:0,cuda:1"
            )));
        }
        let mut seen = devices.clone();
        seen.sort_by_key(|d| d.gpu());
        seen.dedup();
        if seen.len() != devices.len() {
            return Err(InputError::Usage(format!(
                "--device {s}: a GPU is named twice; write each once, like cuda:0,cuda:1"
            )));
        }
    }
    Ok(devices)
}

impl TryFrom<String> for Device {
    type Error = InputError;
    fn try_from(s: String) -> Result<Device, InputError> {
        s.parse()
    }
}

impl From<Device> for String {
    fn from(d: Device) -> String {
        d.to_string()
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// A model and a workload as asked; the card to price it on. `plan` takes it whole, `explain`
/// when the user names a model.
#[derive(Debug, Clone)]
pub struct WorkloadRequest {
    pub model: String,
    pub dtype: Option<WeightDtype>,
    pub kv_dtype: Option<KvDtype>,
    pub prompt_tokens: u64,
    pub max_new_tokens: u64,
    pub batch: u64,
    pub engine: Engine,
    /// The card to plan for; `None` = the detected GPU's free memory, else an assumed 24 GiB.
    pub vram: Option<u64>,
    /// How `--vram` was read when it named a card or a card class (`24GB → RTX 4090 24 GB
    /// class, 24,564 MiB`), said in the report's notes; `None` for an exact size.
    pub vram_read: Option<String>,
    /// The card `--vram` named, as typed (`rtx4090`); `None` for a size, a class or the detected GPU.
    pub vram_card: Option<String>,
    pub gpu_index: u32,
    /// Every GPU's total when `--vram` names more than one (`24GiB,24GiB`, `2xrtx4090`); then
    /// `vram` is the first. Empty for one device: the single-device plan is unchanged.
    pub gpus: Vec<u64>,
    /// The host RAM offered as the offload tier (`--host-ram`; `None` = the detected
    /// MemAvailable, as accelerate reads it).
    pub host_ram: Option<u64>,
    /// vLLM's parallel layout as asked (`--tensor-parallel-size`, `--pipeline-parallel-size`,
    /// `--nodes`, `--gpus-per-node`); all `None` when none was given.
    pub parallel: ParallelRequest,
    /// llama.cpp's `-c`, `-ub`, `-b`, `-fa` as given (all unset: its defaults).
    pub llama: crate::estimate::LlamaCppArgs,
    /// llama-server's own choice of context, slots and layers (`-c 0`, `--fit`); `None` when
    /// neither was asked: the context is `-c` or the workload's.
    pub llama_server: Option<crate::estimate::llamacpp_fit::ServerArgs>,
    /// `plan --exact`: answer transformers' workloads by replaying its allocation sequence
    /// through PyTorch's allocator (seconds, not milliseconds) where the sequence is known.
    pub exact: bool,
    /// vLLM's own flags (`--gpu-memory-utilization`, `--max-model-len`, `--max-num-seqs`,
    /// `--max-num-batched-tokens`); all `None` when none was given.
    pub vllm: crate::estimate::VllmArgs,
    /// SGLang's own flags (`--mem-fraction-static`, `--context-length`, `--max-running-requests`,
    /// `--chunked-prefill-size`); all `None` when none was given.
    pub sglang: crate::estimate::SglangArgs,
    /// `--engine ollama` (or an ollama tag as the model): ollama's knobs; `None` for other engines.
    pub ollama: Option<crate::estimate::ollama::OllamaArgs>,
    /// `plan --python`: the interpreter whose transformers builds the model on the meta device
    /// and sizes its parameters and cache (`None`: the config reader's families alone).
    pub python: Option<std::path::PathBuf>,
    /// `plan --lora-rank`, `--draft-model`: what the deployment runs beside the model.
    pub deployment: DeploymentRequest,
}

/// Adapters and a draft model as asked; all `None` when none was given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeploymentRequest {
    pub lora: Option<crate::estimate::deployment::Lora>,
    /// `--draft-model`: resolved as `--model` is.
    pub draft_model: Option<String>,
    /// `--num-speculative-tokens` [default: the engine's].
    pub speculative_tokens: Option<u64>,
    /// `plan --images`: images in each request's prompt (0: none).
    pub images: u64,
    /// `--image-size` as (height, width) [default: the model's native size].
    pub image_size: Option<(u64, u64)>,
    /// vLLM's `--limit-mm-per-prompt` for images [default: vLLM's 999].
    pub limit_mm_per_prompt: Option<u64>,
    /// llama.cpp's `--mmproj`: the multimodal projector GGUF beside the model.
    pub mmproj: Option<std::path::PathBuf>,
    /// `--mtp`: the model's own multi-token-prediction layers as the draft.
    pub mtp: bool,
}

impl DeploymentRequest {
    pub fn is_empty(&self) -> bool {
        self.lora.is_none() && self.draft_model.is_none() && !self.mtp
    }
}

/// vLLM's parallel layout as the flags give it; `None` = not given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParallelRequest {
    pub tensor: Option<u64>,
    pub pipeline: Option<u64>,
    pub nodes: Option<u64>,
    pub gpus_per_node: Option<u64>,
}

impl ParallelRequest {
    /// Whether any of the four flags was given.
    pub fn is_set(&self) -> bool {
        *self != ParallelRequest::default()
    }
}

impl WorkloadRequest {
    /// Every size within its ceiling (`crate::limits`), else the error that names the bound: a
    /// library caller gets the refusal the CLI gives.
    pub fn check(&self) -> Result<(), InputError> {
        use crate::limits::flag;
        flag("--prompt-tokens", self.prompt_tokens)?;
        flag("--max-new-tokens", self.max_new_tokens)?;
        flag("--batch", self.batch)?;
        for v in self.vram.iter().chain(&self.gpus) {
            flag("--vram", *v)?;
        }
        if let Some(h) = self.host_ram {
            flag("--host-ram", h)?;
        }
        for (name, v) in [
            ("--ctx-size", self.llama.ctx_size),
            ("--ubatch-size", self.llama.ubatch),
            ("--batch-size", self.llama.batch),
        ] {
            if let Some(v) = v {
                flag(name, v)?;
            }
        }
        Ok(())
    }

    /// The workload on this model: weights in the dtype asked (else the checkpoint's), the KV cache
    /// in the dtype asked (else the weights' compute dtype).
    pub fn workload(&self, spec: &Spec) -> Workload {
        let weight_dtype = self.dtype.unwrap_or(spec.native_dtype);
        Workload {
            prompt_tokens: self.prompt_tokens,
            max_new_tokens: self.max_new_tokens,
            batch: self.batch,
            weight_dtype,
            kv_dtype: self
                .kv_dtype
                .unwrap_or_else(|| weight_dtype.compute_kv_dtype()),
            engine: self.engine,
            llama: self.llama,
        }
    }
}

/// Said when prompt + new tokens pass the model's trained context: not a memory question, but
/// transformers only warns and runs on, so the memory is still priced.
pub fn past_context(spec: &Spec, w: &Workload) -> Option<String> {
    let max = spec.max_position_embeddings?;
    (w.total_tokens() > max).then(|| {
        InputError::ContextTooLong {
            model: spec.name.clone(),
            requested: w.total_tokens(),
            max,
        }
        .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_once_and_print_as_written() {
        assert_eq!("cpu".parse::<Device>().ok(), Some(Device::Cpu));
        assert_eq!("cuda".parse::<Device>().ok(), Some(Device::Cuda(0)));
        assert_eq!("CUDA:3".parse::<Device>().ok(), Some(Device::Cuda(3)));
        assert!("cuda:x".parse::<Device>().is_err());
        assert!("tpu".parse::<Device>().is_err());
        assert_eq!(Device::Cuda(1).to_string(), "cuda:1");
        let json = serde_json::to_string(&Device::Cuda(2)).unwrap_or_default();
        assert_eq!(json, "\"cuda:2\"");
    }

    #[test]
    fn several_devices_are_distinct_gpus() {
        assert_eq!(
            parse_device_list("cuda:0,cuda:1").ok(),
            Some(vec![Device::Cuda(0), Device::Cuda(1)])
        );
        assert_eq!(parse_device_list("cpu").ok(), Some(vec![Device::Cpu]));
        assert_eq!(parse_device_list("cuda").ok(), Some(vec![Device::Cuda(0)]));
        for bad in [
            "cuda:0,cpu",
            "cuda:1,cuda:1",
            "cuda,cuda:0",
            "cuda:0,",
            "cuda:0,tpu",
        ] {
            let e = parse_device_list(bad).unwrap_err().to_string();
            assert!(!e.contains('\n'), "{bad}: {e}");
        }
    }
}
