//! The vision tower of Qwen3-VL and Qwen3.5 / Qwen3.6, after transformers' `Qwen3VLVisionModel`
//! and `Qwen3_5VisionModel` (5.25): a Conv3d patch embedding (`in_channels` × `temporal_patch_size`
//! × `patch_size`² → hidden, with bias), learned position embeddings (`num_position_embeddings` ×
//! hidden), `depth` ViT blocks (two LayerNorms with bias, fused qkv and proj with bias, a
//! fc1/fc2 MLP of `intermediate_size` with bias), a patch merger (LayerNorm of hidden, then
//! hidden·merge² → hidden·merge² → `out_hidden_size`), and Qwen3-VL's DeepStack mergers, one per
//! `deepstack_visual_indexes` entry (the same, their LayerNorm over hidden·merge²). Qwen3.5's
//! vision config has no DeepStack.

use serde_json::{Map, Value};

use super::{add, mul};
use crate::error::InputError;
use crate::model::config::Reader;
use crate::model::spec::{Role, TensorGroup};

/// The wrappers whose model transformers builds with this vision tower, and whether their vision
/// config has DeepStack mergers (three by default).
fn deepstack_default(model_type: &str) -> Option<u64> {
    match model_type {
        "qwen3_vl" | "qwen3_vl_moe" => Some(3),
        "qwen3_5" | "qwen3_5_moe" => Some(0),
        _ => None,
    }
}

/// Whether `model_type` is a wrapper built with this vision tower.
pub(crate) fn is_wrapper(model_type: &str) -> bool {
    deepstack_default(model_type).is_some()
}

/// The vision tower's tensors and its depth, when the config's top level is a Qwen3-VL or
/// Qwen3.5 wrapper (transformers builds the tower from `vision_config`, or from its defaults
/// when the config has none); `None` for a text-only config.
pub(crate) fn qwen(r: &Reader) -> Result<Option<(Vec<TensorGroup>, u64)>, InputError> {
    let outer_type = r.outer.get("model_type").and_then(Value::as_str);
    let Some(deepstack) = outer_type.and_then(deepstack_default) else {
        return Ok(None);
    };
    let empty = Map::new();
    let v = match r.outer.get("vision_config") {
        Some(Value::Object(o)) => o,
        None | Some(Value::Null) => &empty,
        Some(other) => return Err(r.bad("vision_config", other, "expected an object")),
    };
    // Qwen3VLVisionConfig / Qwen3_5VisionConfig defaults.
    let get = |key: &str, default: u64| -> Result<u64, InputError> {
        let name = format!("vision_config.{key}");
        match v.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(x) => match x.as_u64() {
                Some(n) if n > 0 && n <= 1 << 20 => Ok(n),
                _ => Err(r.bad(&name, x, "expected an integer from 1 to 1,048,576")),
            },
        }
    };
    let h = get("hidden_size", 1152)?;
    let inter = get("intermediate_size", 4304)?;
    let depth = get("depth", 27)?;
    let channels = get("in_channels", 3)?;
    let patch = get("patch_size", 16)?;
    let temporal = get("temporal_patch_size", 2)?;
    let merge = get("spatial_merge_size", 2)?;
    let out = get("out_hidden_size", 3584)?;
    let positions = get("num_position_embeddings", 2304)?;
    let deepstack = match v.get("deepstack_visual_indexes") {
        None | Some(Value::Null) => deepstack,
        Some(Value::Array(a)) => a.len() as u64,
        Some(x) => {
            return Err(r.bad(
                "vision_config.deepstack_visual_indexes",
                x,
                "expected a list of layer indexes",
            ))
        }
    };
    let f = "vision_config.hidden_size";
    let merged = mul(r, f, h, mul(r, f, merge, merge)?)?;
    let kernel = mul(
        r,
        f,
        mul(r, f, channels, temporal)?,
        mul(r, f, patch, patch)?,
    )?;
    let g = |rows, cols, count| TensorGroup {
        role: Role::Vision,
        rows,
        cols,
        count,
        routed: false,
    };
    let qkv = mul(r, f, h, 3)?;
    let mergers = add(r, f, deepstack, 1)?;
    let t = vec![
        g(h, kernel, 1),
        g(1, h, 1),
        g(positions, h, 1),
        // per block: norm1, norm2 (weight and bias each), the attention's and MLP's biases
        g(1, h, mul(r, f, depth, 6)?),
        g(1, qkv, depth),
        g(1, inter, depth),
        g(qkv, h, depth),
        g(h, h, depth),
        g(inter, h, depth),
        g(h, inter, depth),
        // the merger's LayerNorm is over hidden, DeepStack's over hidden·merge²
        g(1, h, 2),
        g(1, merged, mul(r, f, deepstack, 2)?),
        g(merged, merged, mergers),
        g(1, merged, mergers),
        g(out, merged, mergers),
        g(1, out, mergers),
    ];
    Ok(Some((
        t.into_iter().filter(|t| t.count > 0).collect(),
        depth,
    )))
}
