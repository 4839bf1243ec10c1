//! `llm-oom run` (hidden): one measured generation in the runtime — load (the checkpoint, or random
//! weights of the model's exact shapes), prefill, decode — with the time of each and the memory
//! the driver reports for this process.

use std::time::Instant;

use serde::Serialize;

use crate::dtype::ComputeDtype;
use crate::error::{InputError, Result};
use crate::estimate::kv_bytes;
use crate::meter::gpu::GpuSampler;
use crate::model::resolve;
use crate::request::Device;
use crate::runtime::generate::{generate, GenerateConfig, GenerateStats};
use crate::runtime::setup::{candle_dtype, runtime_err, runtime_weight_bytes, weight_source};
use crate::runtime::weights::Quantize;
use crate::runtime::{open_device, Attention, CacheMode};

#[derive(Debug, Clone)]
pub struct RunRequest {
    pub model: String,
    pub device: Device,
    pub dtype: ComputeDtype,
    pub prompt_tokens: usize,
    pub new_tokens: usize,
    pub batch: usize,
    pub attention_chunk: usize,
    pub prefill_chunk: Option<usize>,
    pub concat_cache: bool,
    /// Draw random weights even when the checkpoint's safetensors are there.
    pub random_weights: bool,
    /// Quantize the linear layers at load.
    pub quantize: Option<Quantize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub model: String,
    /// `checkpoint` (read from safetensors), `gguf`, or `random` (the exact shapes, drawn on the
    /// device).
    pub weights: &'static str,
    /// The block type the linear layers were quantized to at load, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantize: Option<Quantize>,
    pub device: Device,
    pub dtype: ComputeDtype,
    pub prompt_tokens: usize,
    pub new_tokens: usize,
    pub batch: usize,
    pub load_seconds: f64,
    pub prefill_seconds: f64,
    pub prefill_tokens_per_second: f64,
    pub decode_seconds: f64,
    pub decode_tokens_per_second: f64,
    pub weights_bytes: u64,
    pub weights_bytes_estimated: u64,
    pub kv_cache_bytes: u64,
    pub kv_cache_bytes_estimated: u64,
    /// What NVML says this process holds, after loading and after generating (None without NVML).
    pub gpu_bytes_after_load: Option<u64>,
    pub gpu_bytes_after_generate: Option<u64>,
    /// The first sequence's generated token ids (greedy), to compare two runs of the same weights:
    /// eager against sliced attention, or one device against another.
    pub tokens: Vec<u32>,
}

pub fn run(req: &RunRequest) -> Result<RunReport> {
    let resolved = resolve(&req.model)?;
    let source = weight_source(&resolved.source, req.random_weights)?;
    let quantize = req.quantize;
    let spec = resolved.spec;
    if req.prompt_tokens == 0 || req.batch == 0 {
        return Err(
            InputError::Usage("--prompt-tokens and --batch must be at least 1".into()).into(),
        );
    }
    // A card's first run: candle's kernels compiled in processes side by side before the model.
    let compiled = req
        .device
        .gpu()
        .and_then(|gpu| crate::runtime::jit::compile_ahead_on(gpu, quantize.is_some()));
    tracing::info!(?compiled, "run: kernels compiled ahead");
    let device = open_device(req.device).map_err(runtime_err)?;
    let (dtype, wd, kd) = (candle_dtype(req.dtype), req.dtype.weights(), req.dtype.kv());
    let gpu = GpuSampler::open(0).ok();
    let me = [std::process::id()];
    let read = || gpu.as_ref().and_then(|g| g.read(&me)).map(|r| r.tree);

    let sync = |d: &candle_core::Device| {
        d.synchronize()
            .map_err(|e| runtime_err(crate::runtime::RuntimeError::from_candle(e, d)))
    };
    sync(&device)?;
    let t0 = Instant::now();
    let weights = source
        .load(&spec, dtype, &device, 42, quantize)
        .map_err(runtime_err)?;
    sync(&device)?;
    let load_seconds = t0.elapsed().as_secs_f64();
    let after_load = read();

    let cfg = GenerateConfig {
        prompt_tokens: req.prompt_tokens,
        new_tokens: req.new_tokens,
        batch: req.batch,
        prefill_chunk: req.prefill_chunk,
        attention: if req.attention_chunk == 0 {
            Attention::Eager
        } else {
            Attention::Chunked(req.attention_chunk)
        },
        cache: if req.concat_cache {
            CacheMode::Concatenated
        } else {
            CacheMode::Preallocated
        },
    };
    let s: GenerateStats = generate(&spec, &weights, &cfg, &device).map_err(runtime_err)?;
    let after = read();
    let total = (req.prompt_tokens + req.new_tokens) as u64;
    let held = if req.concat_cache { total - 1 } else { total };
    Ok(RunReport {
        model: spec.name.clone(),
        weights: source.name(),
        quantize,
        device: req.device,
        dtype: req.dtype,
        prompt_tokens: req.prompt_tokens,
        new_tokens: req.new_tokens,
        batch: req.batch,
        load_seconds,
        prefill_seconds: s.prefill_seconds,
        prefill_tokens_per_second: (req.prompt_tokens * req.batch) as f64
            / s.prefill_seconds.max(1e-9),
        decode_seconds: s.decode_seconds,
        decode_tokens_per_second: s.decode_tokens_per_second,
        weights_bytes: s.weights_bytes,
        weights_bytes_estimated: runtime_weight_bytes(&spec, wd, &source, quantize),
        kv_cache_bytes: s.kv_cache_bytes,
        kv_cache_bytes_estimated: kv_bytes(&spec, kd, held, req.batch as u64, false),
        gpu_bytes_after_load: after_load,
        gpu_bytes_after_generate: after,
        tokens: s.tokens.into_iter().next().unwrap_or_default(),
    })
}
