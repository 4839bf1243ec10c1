//! What the probe child and the commands need to set the runtime up from a typed request: where
//! the weights come from, what they will take, the candle dtype and device, and how a runtime
//! error maps to the library's (bad input, an out-of-memory finding, or an internal failure).

use candle_core::DType;

use super::weights::{Quantize, WeightSource};
use super::RuntimeError;
use crate::dtype::{ComputeDtype, WeightDtype};
use crate::error::{Error, InputError, Result};
use crate::estimate::weight_bytes;
use crate::model::{ModelSource, SourceKind};

/// candle's dtype for a compute dtype.
pub fn candle_dtype(d: ComputeDtype) -> DType {
    match d {
        ComputeDtype::F32 => DType::F32,
        ComputeDtype::F16 => DType::F16,
        ComputeDtype::Bf16 => DType::BF16,
    }
}

pub fn runtime_err(e: RuntimeError) -> Error {
    match e {
        e @ (RuntimeError::Device(_)
        | RuntimeError::Unsupported(_)
        | RuntimeError::Checkpoint(_)
        | RuntimeError::Parallel(_)) => InputError::Usage(e.to_string()).into(),
        e @ RuntimeError::OutOfMemory { .. } => Error::OutOfMemory(e.to_string()),
        other => Error::Internal(other.to_string()),
    }
}

/// Where the weights come from: the checkpoint's safetensors or GGUF file, or a random draw of
/// its shapes (asked for, or no weights beside the config).
pub fn weight_source(source: &ModelSource, random_weights: bool) -> Result<WeightSource> {
    if random_weights {
        return Ok(WeightSource::Random);
    }
    let path = source.path.as_deref();
    Ok(match source.kind {
        SourceKind::Directory | SourceKind::ConfigFile | SourceKind::HfCache | SourceKind::Hub => {
            // A checkpoint's weights are beside its config.json.
            match path.and_then(std::path::Path::parent) {
                Some(dir) => {
                    let files = super::weights::checkpoint_files(dir).map_err(runtime_err)?;
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
                    super::weights::quantized_bytes(b, t.rows as usize, t.cols as usize) * t.count
                }
                None => dense,
            }
        })
        .sum()
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
