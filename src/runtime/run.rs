//! One measured generation: load (random weights of the model's exact shapes), prefill, decode,
//! with the time of each and the memory the driver reports for this process. The probe's stages
//! are built from this.

use std::time::Instant;

use candle_core::DType;
use serde::Serialize;

use super::generate::{generate, GenerateConfig, GenerateStats};
use super::{parse_device, Attention, CacheMode, RuntimeError};
use crate::dtype::{KvDtype, WeightDtype};
use crate::error::{Error, InputError, Result};
use crate::estimate::{kv_bytes, weight_bytes};
use crate::meter::gpu::GpuSampler;
use crate::model::{resolve, SourceKind};
use crate::runtime::weights::{Quantize, WeightSource};

#[derive(Debug, Clone)]
pub struct RunRequest {
    pub model: String,
    pub device: String,
    pub dtype: String,
    pub prompt_tokens: usize,
    pub new_tokens: usize,
    pub batch: usize,
    pub attention_chunk: usize,
    pub prefill_chunk: Option<usize>,
    pub concat_cache: bool,
    /// Draw random weights even when the checkpoint's safetensors are there.
    pub random_weights: bool,
    /// Quantize the linear layers at load: `q8_0` or `q4k`.
    pub quantize: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub model: String,
    /// `checkpoint` (read from safetensors), `gguf`, or `random` (the exact shapes, drawn on the
    /// device).
    pub weights: &'static str,
    /// The block type the linear layers were quantized to at load, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantize: Option<String>,
    pub device: String,
    pub dtype: String,
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
}

pub fn runtime_err(e: RuntimeError) -> Error {
    match e {
        e @ (RuntimeError::Device(_)
        | RuntimeError::Unsupported(_)
        | RuntimeError::Checkpoint(_)) => InputError::Usage(e.to_string()).into(),
        e @ RuntimeError::OutOfMemory { .. } => Error::OutOfMemory(e.to_string()),
        other => Error::Internal(other.to_string()),
    }
}

/// Where the weights come from: the checkpoint's safetensors or GGUF file, or a random draw of
/// its shapes (asked for, or no weights beside the config).
pub fn weight_source(
    resolved: &crate::model::ResolvedModel,
    random_weights: bool,
) -> Result<WeightSource> {
    if random_weights {
        return Ok(WeightSource::Random);
    }
    let path = resolved.source.path.as_deref();
    Ok(match resolved.source.kind {
        SourceKind::Directory | SourceKind::ConfigFile | SourceKind::HfCache | SourceKind::Hub => {
            // A checkpoint's weights are beside its config.json.
            match path.and_then(std::path::Path::parent) {
                Some(dir) => {
                    let files =
                        crate::runtime::weights::checkpoint_files(dir).map_err(runtime_err)?;
                    if files.is_empty() {
                        WeightSource::Random
                    } else {
                        WeightSource::Safetensors(dir.to_path_buf())
                    }
                }
                None => WeightSource::Random,
            }
        }
        SourceKind::Gguf => path.map_or(WeightSource::Random, |p| WeightSource::Gguf(p.into())),
        SourceKind::Preset => WeightSource::Random,
    })
}

/// `--quantize q8_0|q4k`, checked.
pub fn parse_quantize(q: Option<&str>) -> Result<Option<Quantize>> {
    q.map(|s| {
        Quantize::parse(s).ok_or_else(|| {
            InputError::Usage(format!(
                "`--quantize {s}` is not a block type the runtime quantizes to; use q8_0 or q4k"
            ))
            .into()
        })
    })
    .transpose()
}

/// The runtime's dtypes by name: `f32`, `f16`, `bf16`.
pub fn runtime_dtype(name: &str) -> Result<(DType, WeightDtype, KvDtype)> {
    Ok(match name {
        "f32" => (DType::F32, WeightDtype::F32, KvDtype::F32),
        "f16" => (DType::F16, WeightDtype::F16, KvDtype::F16),
        "bf16" => (DType::BF16, WeightDtype::Bf16, KvDtype::Bf16),
        other => {
            return Err(InputError::Usage(format!(
                "the probe runs f32, f16 or bf16 weights, not `{other}`; pass --dtype bf16 (quantized dtypes are priced by `llm-oom plan`)"
            ))
            .into())
        }
    })
}

/// The bytes the runtime's weights take: the estimate's for dense weights; for `--quantize`, each
/// linear layer at its block type (embeddings, norms and the output head stay dense); for a GGUF
/// file, its tensors' exact bytes with the embeddings widened to the compute dtype.
pub fn runtime_weight_bytes(
    spec: &crate::model::Spec,
    dtype: WeightDtype,
    source: &WeightSource,
    quantize: Option<Quantize>,
) -> u64 {
    use crate::model::spec::Role;
    let width = dtype.compute_kv_dtype().elem_bytes().as_f64();
    if let (WeightSource::Gguf(_), Some(g)) = (source, &spec.gguf) {
        return g.total_bytes - g.widened_file_bytes + (g.widened_elements as f64 * width) as u64;
    }
    let Some(q) = quantize else {
        return weight_bytes(spec, dtype);
    };
    spec.tensors()
        .iter()
        .map(|t| {
            let dense = (t.params() as f64 * width) as u64;
            if !t.role.is_linear() || t.role == Role::Router {
                return dense;
            }
            match q.for_columns(t.cols as usize) {
                Some(b) => {
                    crate::runtime::weights::quantized_bytes(b, t.rows as usize, t.cols as usize)
                        * t.count
                }
                None => dense,
            }
        })
        .sum()
}

pub fn run(req: &RunRequest) -> Result<RunReport> {
    let resolved = resolve(&req.model)?;
    let source = weight_source(&resolved, req.random_weights)?;
    let quantize = parse_quantize(req.quantize.as_deref())?;
    let spec = resolved.spec;
    let device = parse_device(&req.device).map_err(runtime_err)?;
    let (dtype, wd, kd) = runtime_dtype(&req.dtype)?;
    if req.prompt_tokens == 0 || req.batch == 0 {
        return Err(
            InputError::Usage("--prompt-tokens and --batch must be at least 1".into()).into(),
        );
    }
    let gpu = GpuSampler::open(0).ok();
    let me = [std::process::id()];
    let read = || gpu.as_ref().and_then(|g| g.read(&me)).map(|r| r.tree);

    let _ = device.synchronize();
    let t0 = Instant::now();
    let weights = source
        .load(&spec, dtype, &device, 42, quantize)
        .map_err(runtime_err)?;
    let _ = device.synchronize();
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
        quantize: quantize.and(req.quantize.clone()),
        device: req.device.clone(),
        dtype: req.dtype.clone(),
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_out_of_memory_is_a_finding_and_bad_devices_are_bad_input() {
        let oom = RuntimeError::OutOfMemory {
            device: "cuda".into(),
            message: "DriverError(CUDA_ERROR_OUT_OF_MEMORY)".into(),
            requested: Some(4 << 30),
        };
        let e = runtime_err(oom);
        assert_eq!(e.exit_code(), 1);
        assert!(e.to_string().contains("allocating 4.00 GiB"), "{e}");
        assert_eq!(runtime_err(RuntimeError::Device("x".into())).exit_code(), 2);
        assert_eq!(
            runtime_err(RuntimeError::Candle("shape".into())).exit_code(),
            3
        );
    }
}
