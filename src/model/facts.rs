//! The model as every report shows it: the facts of a `Spec` that decide memory.

use serde::Serialize;

use super::{ModelSource, Spec};
use crate::dtype::WeightDtype;

#[derive(Debug, Clone, Serialize)]
pub struct ModelFacts {
    pub name: String,
    pub architecture: String,
    pub source: ModelSource,
    pub parameters: u64,
    pub layers: u64,
    pub hidden_size: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub vocab_size: u64,
    pub max_position_embeddings: Option<u64>,
    pub sliding_window: Option<u64>,
    pub sliding_layers: u64,
    pub experts: Option<u64>,
    pub native_dtype: WeightDtype,
    /// The checkpoint's multi-token-prediction layers, not in `parameters` or `layers`: no engine
    /// loads them with the model (`plan --mtp` prices them as the draft).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtp: Option<MtpFacts>,
    /// A vision-language model's tower (its encoder layers and parameters, counted in
    /// `parameters`); `architecture` is then the language model's `model_type`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vision: Option<VisionFacts>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct VisionFacts {
    pub layers: u64,
    pub parameters: u64,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct MtpFacts {
    pub layers: u64,
    pub parameters: u64,
}

pub fn facts(spec: &Spec, source: ModelSource) -> ModelFacts {
    ModelFacts {
        name: spec.name.clone(),
        architecture: spec.architecture.clone(),
        source,
        parameters: spec.parameters(),
        layers: spec.num_layers,
        hidden_size: spec.hidden_size,
        heads: spec.num_heads,
        kv_heads: spec.num_kv_heads,
        head_dim: spec.head_dim,
        vocab_size: spec.vocab_size,
        max_position_embeddings: spec.max_position_embeddings,
        sliding_window: spec.sliding_window,
        sliding_layers: spec.sliding_layers,
        experts: spec.experts.as_ref().map(|e| e.count),
        native_dtype: spec.native_dtype,
        mtp: spec.mtp().map(|m| MtpFacts {
            layers: m.layers,
            parameters: m.parameters(),
        }),
        vision: (!spec.vision.is_empty()).then(|| VisionFacts {
            layers: spec.vision_layers,
            parameters: spec
                .vision
                .iter()
                .map(super::spec::TensorGroup::params)
                .fold(0, u64::saturating_add),
        }),
    }
}
