//! Before the probe starts: the model resolved, where its weights come from, the dtype the probe
//! computes in, what the weights will take, and the workload as the verdict prices it.

use super::DiagnoseRequest;
use crate::dtype::{ComputeDtype, GgufMix, WeightDtype};
use crate::error::{InputError, Result};
use crate::estimate::{Engine, Workload};
use crate::model::{resolve, ModelSource, Spec};
use crate::request::past_context;
use crate::runtime::setup::{runtime_weight_bytes, weight_source};
use crate::runtime::weights::{Quantize, WeightSource};

pub struct Prepared {
    pub spec: Spec,
    pub source: ModelSource,
    pub dtype: ComputeDtype,
    /// What the weights are priced as: the GGUF file's types, the --quantize block type, or dense.
    pub weight_dtype: WeightDtype,
    /// The weights' bytes in the probe, exact from the shapes.
    pub expected_weights: u64,
    /// Quantized blocks (a GGUF file or --quantize) change what a forward pass holds.
    pub quantized: bool,
    pub workload: Workload,
    pub eager: bool,
    pub notes: Vec<String>,
}

pub fn prepare(req: &DiagnoseRequest) -> Result<Prepared> {
    let resolved = resolve(&req.model)?;
    let spec = resolved.spec;
    let weights = weight_source(&resolved.source, req.random_weights)?;
    let gguf = matches!(weights, WeightSource::Gguf(_));
    let dtype = match req.dtype {
        Some(d) => d,
        None => match ComputeDtype::of_weights(spec.native_dtype) {
            Some(d) => d,
            // a GGUF file's activations run in the device's usual compute dtype
            None if spec.gguf.is_some() => match req.device.gpu() {
                Some(_) => ComputeDtype::Bf16,
                None => ComputeDtype::F32,
            },
            None => {
                return Err(InputError::Usage(format!(
                    "the checkpoint is {}-quantized; the probe runs f32, f16 or bf16 weights — pass --dtype bf16 to probe the unquantized shape, or use `llm-oom plan`",
                    spec.native_dtype
                ))
                .into())
            }
        },
    };
    let weight_dtype = match (gguf, req.quantize) {
        (true, _) => spec.native_dtype,
        (false, Some(Quantize::Q8_0)) => WeightDtype::Gguf(GgufMix::Q8_0),
        (false, Some(Quantize::Q4K)) => WeightDtype::Gguf(GgufMix::Q4KM),
        (false, None) => dtype.weights(),
    };
    let expected_weights = runtime_weight_bytes(&spec, dtype.weights(), &weights, req.quantize);
    let mut notes = spec.notes.clone();
    let mut prompt_tokens = req.prompt_tokens;
    if let (true, Some(max)) = (req.prompt_is_default, spec.max_position_embeddings) {
        let room = max.saturating_sub(req.max_new_tokens).max(1);
        if prompt_tokens > room {
            notes.push(format!(
                "the default {}-token prompt was shortened to {} so prompt + new tokens stay within the model's {}-token context",
                crate::units::group(prompt_tokens),
                crate::units::group(room),
                crate::units::group(max)
            ));
            prompt_tokens = room;
        }
    }
    let workload = Workload {
        llama: Default::default(),
        prompt_tokens,
        max_new_tokens: req.max_new_tokens,
        batch: req.batch,
        weight_dtype,
        kv_dtype: dtype.kv(),
        engine: req.engine,
    };
    notes.extend(past_context(&spec, &workload));
    Ok(Prepared {
        eager: req.engine == Engine::TransformersEager,
        spec,
        source: resolved.source,
        dtype,
        weight_dtype,
        expected_weights,
        quantized: gguf || req.quantize.is_some(),
        workload,
        notes,
    })
}
