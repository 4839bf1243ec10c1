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
        }
    }
}
