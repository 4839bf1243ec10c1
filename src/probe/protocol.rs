//! What the probe's parent and its child process say to each other: one JSON value per line.
//! The parent starts `llm-oom __probe --setup <json>`; the child answers with a [`Hello`], then
//! reads [`Task`]s from its standard input and writes one [`TaskResult`] per task to its standard
//! output. A child that dies mid-task is the parent's finding, not the parent's crash.

use serde::{Deserialize, Serialize};

use crate::dtype::ComputeDtype;
use crate::meter::host::Part;
use crate::meter::sampler::MemorySnapshot;
pub use crate::meter::Meter;
use crate::request::Device;
use crate::runtime::weights::Quantize;

/// How the child is configured, for all its tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    pub model: String,
    pub device: Device,
    pub dtype: ComputeDtype,
    /// Emulate a card of this many bytes (ballast on CUDA, the counting allocator's limit on CPU).
    pub vram_limit: Option<u64>,
    pub random_weights: bool,
    /// Quantize the linear layers at load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantize: Option<Quantize>,
    /// Other processes use the GPU and no limit was asked: keep this many bytes of what is free
    /// out of the probe's reach (its memory pool is capped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_gpu_margin: Option<u64>,
    /// Materialised attention scores (transformers' eager) instead of sliced attention.
    pub eager: bool,
    pub seed: u64,
    /// Several GPUs to spread the model over (`--device cuda:0,cuda:1`: transformers'
    /// `device_map="auto"` with `max_memory` over them); empty for one device, whose setup is
    /// as before. `device` is then the first of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
    /// One rank of a tensor-parallel world (candle, one child per GPU): this child loads only its
    /// part of the weights and all-reduces with the other ranks; `device` is its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_parallel: Option<TensorParallel>,
}

/// A child's place in a tensor-parallel world and how it finds the other ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorParallel {
    pub rank: usize,
    pub world: usize,
    pub join: Join,
}

/// How the ranks meet: over NCCL, rank 0 makes the unique id and writes it (hex) to `id_file`,
/// where the other ranks read it (as candle's llama_multiprocess example does; the parent never
/// loads NCCL or opens a GPU); for ranks on the CPU, at rank 0's TCP address on the loopback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "via", rename_all = "snake_case")]
pub enum Join {
    Nccl { id_file: String },
    Tcp { addr: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "task", rename_all = "snake_case")]
pub enum Task {
    /// Load (or draw) the weights; every later task uses them.
    Load,
    /// A generation of `prompt_tokens` (up to one attention slice) that compiles kernels and
    /// allocates the libraries' workspaces, so the stages after it measure the workload, not
    /// first-use costs; then a clean 16-token one, whose measurements are reported.
    Warmup {
        prompt_tokens: usize,
    },
    Generate(GenerateTask),
    /// Return cached memory, then read free memory and the largest block the device still gives.
    Fragmentation,
}

/// Prefill `prompt_tokens` for `batch` sequences into a cache sized for `prompt + new_tokens`,
/// then run the last `decode_steps` decode passes of the generation (the cache is moved to the
/// position they start at; memory is the same as decoding every token before them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateTask {
    pub label: String,
    pub prompt_tokens: usize,
    pub new_tokens: usize,
    pub batch: usize,
    pub decode_steps: usize,
    /// Override the setup's attention for this task (`--verify` of "use SDPA").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eager: Option<bool>,
}

/// The child's first line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub pid: u32,
    pub device: Device,
    pub meter: Meter,
    /// Device bytes this process holds before any tensor (CUDA context, libraries; on the CPU the
    /// heap's baseline).
    pub base_bytes: u64,
    /// Bytes held in a ballast so the device looks like `vram_limit`.
    pub ballast_bytes: u64,
    /// The card the probe runs against: the limit, or what the device had for this process.
    pub capacity_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_total: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_free: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// With several devices: each one's greeting (the figures above are their sums).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceHello>,
}

/// One GPU of a probe spread over several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceHello {
    pub device: Device,
    /// Its tensor-parallel rank (one child per rank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    pub base_bytes: u64,
    pub ballast_bytes: u64,
    pub capacity_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_total: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_free: Option<u64>,
}

/// One GPU's memory through a task of a probe spread over several: the process's bytes on it
/// (its base, context included, plus PyTorch's reserved pool), its live tensors
/// (`torch.cuda.max_memory_allocated(d)`), and NVML's bytes for this process on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceMemory {
    pub device: Device,
    /// Its tensor-parallel rank (one child per rank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    pub before: u64,
    pub peak: u64,
    pub after: u64,
    /// Peak of live tensors (base included).
    pub used_peak: u64,
    pub capacity_bytes: u64,
    /// Bytes of the model's weights placed on it.
    #[serde(default)]
    pub weights_bytes: u64,
    /// NVML's per-process bytes on this GPU at the end of the task, when NVML lists the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_bytes: Option<u64>,
}

/// How a task — and the stage built from it — ended. A child never reports `skipped`; the parent
/// does, for a stage it did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    Oom,
    Skipped,
    Error,
    /// The child did not answer within `--stage-timeout` and was stopped: a probe fault, not an OOM.
    Timeout,
}

/// An out-of-memory as the child saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OomFacts {
    /// Size of the allocation that failed (or crossed the emulated limit), when known.
    pub requested: Option<u64>,
    /// Device bytes held by this process just before it (base included).
    pub held: u64,
    /// What was being allocated.
    pub part: Part,
    pub message: String,
    /// Free device memory and the largest block right after the failure (CUDA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_block: Option<u64>,
    /// Pool bytes reserved but unused at the failure (CUDA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<u64>,
    /// Emulated (a limit was crossed on the CPU) rather than refused by a driver.
    pub emulated: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FragmentationFacts {
    pub free: u64,
    pub largest_block: u64,
    /// The search tried blocks up to this size (a largest block equal to it means "at least").
    pub searched_up_to: u64,
    pub reserved: u64,
    pub in_use: u64,
}

/// Bytes in live tensors (base included) at a task's moments.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsedBytes {
    pub before: u64,
    pub peak: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_peak: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_peak: Option<u64>,
}

/// One task's measurements. Memory figures are device bytes this process holds, base included:
/// directly comparable with the card's capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    pub label: String,
    pub outcome: Outcome,
    pub seconds: f64,
    pub before: u64,
    pub peak: u64,
    pub after: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_peak: Option<u64>,
    /// Bytes of the loaded weights (measured across the load).
    pub weights_bytes: u64,
    /// Bytes of the KV cache's tensors.
    pub kv_bytes: u64,
    /// What the meter saw the cache allocation take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_bytes_measured: Option<u64>,
    /// Highest point of the prefill and of the decode passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_peak: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_peak: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_tokens_per_second: Option<f64>,
    /// The same moments counting only live tensors (CUDA: the pool's used bytes; on the CPU the
    /// same as the figures above).
    #[serde(default)]
    pub used: UsedBytes,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom: Option<OomFacts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fragmentation: Option<FragmentationFacts>,
    /// Memory sampled every 10 ms through the task (bounded: see `meter::sampler`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<MemorySnapshot>,
    /// With several devices: each one's memory through the task (the figures above are sums).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_device: Vec<DeviceMemory>,
    /// With several devices: the GPU the out-of-memory names, as PyTorch's message does
    /// ("GPU 1 has a total capacity of …") or its allocator's OOM observer saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_device: Option<Device>,
    /// Tensor parallel: the rank that ran out (or failed), whose device is `oom_device`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_rank: Option<usize>,
}

/// A task's per-device memory, as a session keeps them for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskDevices {
    pub label: String,
    pub outcome: Outcome,
    pub devices: Vec<DeviceMemory>,
    /// The GPU its out-of-memory names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_device: Option<Device>,
    /// Tensor parallel: the rank that ran out or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_rank: Option<usize>,
}

impl TaskDevices {
    /// The GPU the first out-of-memory among `tasks` names.
    pub fn first_oom(tasks: &[TaskDevices]) -> Option<Device> {
        tasks.iter().find_map(|t| t.oom_device)
    }

    /// How a report names the device of the first out-of-memory: `cuda:1`, with its
    /// tensor-parallel rank when there is one (`cuda:1 (rank 1 of 2)`, `cpu (rank 1 of 2)`).
    pub fn first_oom_label(tasks: &[TaskDevices]) -> Option<String> {
        let t = tasks.iter().find(|t| t.oom_device.is_some())?;
        let d = t.oom_device?;
        // the world: every rank answers a task that went well
        let world = tasks.iter().map(|t| t.devices.len()).max().unwrap_or(0);
        Some(match t.failed_rank {
            Some(r) => format!("{d} (rank {r} of {})", world.max(r + 1)),
            None => d.to_string(),
        })
    }
}

impl TaskResult {
    /// The per-device record of a task spread over several GPUs; `None` on one device.
    pub fn devices(&self) -> Option<TaskDevices> {
        (!self.per_device.is_empty()).then(|| TaskDevices {
            label: self.label.clone(),
            outcome: self.outcome,
            devices: self.per_device.clone(),
            oom_device: self.oom_device,
            failed_rank: self.failed_rank,
        })
    }
}

impl TaskResult {
    pub fn new(label: &str) -> TaskResult {
        TaskResult {
            label: label.to_string(),
            outcome: Outcome::Ok,
            seconds: 0.0,
            before: 0,
            peak: 0,
            after: 0,
            reserved_peak: None,
            weights_bytes: 0,
            kv_bytes: 0,
            kv_bytes_measured: None,
            prefill_peak: None,
            decode_peak: None,
            prefill_seconds: None,
            decode_tokens_per_second: None,
            used: UsedBytes::default(),
            oom: None,
            error: None,
            fragmentation: None,
            timeline: Vec::new(),
            per_device: Vec::new(),
            oom_device: None,
            failed_rank: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(devices: Vec<Device>) -> Setup {
        Setup {
            model: "m".into(),
            device: Device::Cuda(0),
            dtype: ComputeDtype::Bf16,
            vram_limit: None,
            random_weights: true,
            quantize: None,
            shared_gpu_margin: None,
            eager: false,
            seed: 42,
            devices,
            tensor_parallel: None,
        }
    }

    #[test]
    fn one_device_sets_up_as_before_and_several_are_listed() {
        let one = serde_json::to_string(&setup(Vec::new())).unwrap();
        assert!(!one.contains("devices"), "{one}");
        let two = serde_json::to_value(setup(vec![Device::Cuda(0), Device::Cuda(1)])).unwrap();
        assert_eq!(two["devices"], serde_json::json!(["cuda:0", "cuda:1"]));
    }

    #[test]
    fn a_task_spread_over_gpus_keeps_each_ones_memory_and_the_gpu_that_ran_out() {
        // what transformers_probe.py writes for a task on cuda:0 + cuda:1
        let line = r#"{"label": "concurrency", "outcome": "oom", "seconds": 0.5, "before": 2,
            "peak": 9, "after": 2, "weights_bytes": 4, "kv_bytes": 0,
            "oom": {"requested": 1048576, "held": 9, "part": "kv_cache", "emulated": false,
                    "message": "CUDA out of memory. Tried to allocate 1.00 MiB. GPU 1 has a total capacity of 23.65 GiB"},
            "oom_device": "cuda:1",
            "per_device": [
              {"device": "cuda:0", "before": 1, "peak": 4, "after": 1, "used_peak": 3,
               "capacity_bytes": 24, "weights_bytes": 2, "nvml_bytes": null},
              {"device": "cuda:1", "before": 1, "peak": 5, "after": 1, "used_peak": 5,
               "capacity_bytes": 24, "weights_bytes": 2, "nvml_bytes": 6}]}"#;
        let r: TaskResult = serde_json::from_str(line).unwrap();
        let d = r.devices().unwrap();
        assert_eq!(d.devices.len(), 2);
        assert_eq!(d.devices[1].nvml_bytes, Some(6));
        assert_eq!(TaskDevices::first_oom(&[d]), Some(Device::Cuda(1)));
        // one device: no per-device record, and the result reads as before
        let single: TaskResult = serde_json::from_str(
            r#"{"label": "load", "outcome": "ok", "seconds": 0.1, "before": 1,
                "peak": 2, "after": 1, "weights_bytes": 1, "kv_bytes": 0}"#,
        )
        .unwrap();
        assert!(single.devices().is_none());
        let back = serde_json::to_string(&single).unwrap();
        assert!(
            !back.contains("per_device") && !back.contains("oom_device"),
            "{back}"
        );
    }

    #[test]
    fn a_hello_of_several_gpus_lists_each() {
        let h: Hello = serde_json::from_str(
            r#"{"pid": 7, "device": "cuda:0", "meter": "torch-cuda", "base_bytes": 2,
                "ballast_bytes": 0, "capacity_bytes": 48, "devices": [
                {"device": "cuda:0", "base_bytes": 1, "ballast_bytes": 0, "capacity_bytes": 24},
                {"device": "cuda:1", "base_bytes": 1, "ballast_bytes": 0, "capacity_bytes": 24}]}"#,
        )
        .unwrap();
        assert_eq!(h.devices[1].device, Device::Cuda(1));
    }
}
