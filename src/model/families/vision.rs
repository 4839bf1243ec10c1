//! The vision tower of Qwen3-VL and Qwen3.5 / Qwen3.6, after transformers' `Qwen3VLVisionModel`
//! and `Qwen3_5VisionModel` (5.25): a Conv3d patch embedding (`in_channels` × `temporal_patch_size`
//! × `patch_size`² → hidden, with bias), learned position embeddings (`num_position_embeddings` ×
//! hidden), `depth` ViT blocks (two LayerNorms with bias, fused qkv and proj with bias, a
//! fc1/fc2 MLP of `intermediate_size` with bias), a patch merger (LayerNorm of hidden, then
//! hidden·merge² → hidden·merge² → `out_hidden_size`), and Qwen3-VL's DeepStack mergers, one per
//! `deepstack_visual_indexes` entry (the same, their LayerNorm over hidden·merge²). Qwen3.5's
//! vision config has no DeepStack.
//!
//! Also the towers of Gemma-3 (transformers 5.17 `SiglipVisionModel` with Gemma-3's
//! `Gemma3MultiModalProjector`), Qwen2-VL (`Qwen2VisionTransformerPretrainedModel`) and
//! Qwen2.5-VL (`Qwen2_5_VisionTransformerPretrainedModel`), Mistral-3 (`PixtralVisionModel` with
//! `Mistral3MultiModalProjector`), LLaVA (`CLIPVisionModel` or `PixtralVisionModel` with
//! `LlavaMultiModalProjector`), LLaVA-NeXT (LLaVA's and its `image_newline`), Llama-4
//! (`Llama4VisionModel` with its projector) and InternVL
//! (`InternVLVisionModel` with `InternVLMultiModalProjector`), each held to transformers' own
//! parameter count by tests/derive_meta.rs, Phi-3.5-vision's (remote code: CLIP ViT-L/14-336,
//! its separators and projector), held by tests/derive_meta.rs to its parts built from
//! transformers' own classes, and Gemma-4's (transformers 5.25 `Gemma4VisionModel`), held to it
//! by tests/configs_2026.rs.

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

/// Whether `model_type` is a wrapper whose own `tie_word_embeddings` governs its language model:
/// Qwen3-VL's and Qwen3.5's, Mistral-3's and InternVL's (transformers 5.17 ties these two by the
/// top-level flag, whatever `text_config` says).
pub(crate) fn is_wrapper(model_type: &str) -> bool {
    deepstack_default(model_type).is_some() || matches!(model_type, "mistral3" | "internvl")
}

/// The vision tower's tensors and its depth for the wrapper the config's top level names
/// (Qwen3-VL, Qwen3.5, Gemma-3, Gemma-4, Qwen2-VL, Qwen2.5-VL, Mistral-3, LLaVA, LLaVA-NeXT,
/// Llama-4, InternVL, Phi-3.5-vision); `None` for a text-only config, a LLaVA vision model or a
/// Phi-3.5-vision `img_processor` not counted here.
/// `text_hidden` is the language model's width (Gemma-3's projector maps into it). Groups a
/// config leaves empty (a bias it turns off, a count of zero) are dropped here, once for every
/// tower.
pub(crate) fn tower(
    r: &Reader,
    text_hidden: u64,
) -> Result<Option<(Vec<TensorGroup>, u64)>, InputError> {
    let built = match r.outer.get("model_type").and_then(Value::as_str) {
        Some("gemma3") => siglip_gemma3(r, text_hidden).map(Some),
        Some("gemma4") => gemma4(r, text_hidden),
        Some("qwen2_vl") => qwen2(r, false).map(Some),
        Some("qwen2_5_vl") => qwen2(r, true).map(Some),
        Some("mistral3") => mistral3(r, text_hidden).map(Some),
        Some("llava") => llava(r, text_hidden),
        Some("llava_next") => llava_next(r, text_hidden),
        Some("phi3_v") => phi3_v(r, text_hidden),
        Some("llama4") => llama4(r, text_hidden).map(Some),
        Some("internvl") => internvl(r, text_hidden).map(Some),
        _ => qwen(r),
    }?;
    Ok(built.map(|(t, depth)| {
        let t = t
            .into_iter()
            .filter(|t| t.count > 0 && t.rows > 0)
            .collect();
        (t, depth)
    }))
}

/// The config's `vision_config` (empty when it has none: transformers then builds the tower
/// from its vision config class's defaults).
fn vision_config<'a>(
    r: &'a Reader,
    empty: &'a Map<String, Value>,
) -> Result<&'a Map<String, Value>, InputError> {
    Ok(given_vision_config(r)?.unwrap_or(empty))
}

/// `vision_config` as the config gives it: `None` when absent or null.
fn given_vision_config<'a>(r: &'a Reader) -> Result<Option<&'a Map<String, Value>>, InputError> {
    match r.outer.get("vision_config") {
        Some(Value::Object(o)) => Ok(Some(o)),
        None | Some(Value::Null) => Ok(None),
        Some(other) => Err(r.bad("vision_config", other, "expected an object")),
    }
}

/// `vision_config.key` as a positive integer, or `default` when absent.
fn field(r: &Reader, v: &Map<String, Value>, key: &str, default: u64) -> Result<u64, InputError> {
    let name = format!("vision_config.{key}");
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => match x.as_u64() {
            Some(n) if n > 0 && n <= 1 << 20 => Ok(n),
            _ => Err(r.bad(&name, x, "expected an integer from 1 to 1,048,576")),
        },
    }
}

fn vision(rows: u64, cols: u64, count: u64) -> TensorGroup {
    TensorGroup {
        role: Role::Vision,
        rows,
        cols,
        count,
        routed: false,
    }
}

/// Gemma-3's SigLIP tower (transformers 5.17 `SiglipVisionModel`, `SiglipVisionConfig`
/// defaults where the config is silent): a Conv2d patch embedding with bias, learned position
/// embeddings ((image_size / patch_size)²), `num_hidden_layers` encoder layers (LayerNorms,
/// q/k/v/out projections and a fc1/fc2 MLP, all with bias), the post LayerNorm, the attention
/// pooling head unless `vision_use_head` is false, then `Gemma3MultiModalProjector`'s
/// `mm_input_projection_weight` [vision hidden, text hidden] and `mm_soft_emb_norm`.
fn siglip_gemma3(r: &Reader, text_hidden: u64) -> Result<(Vec<TensorGroup>, u64), InputError> {
    let empty = Map::new();
    let v = vision_config(r, &empty)?;
    let h = field(r, v, "hidden_size", 768)?;
    let inter = field(r, v, "intermediate_size", 3072)?;
    let depth = field(r, v, "num_hidden_layers", 12)?;
    let channels = field(r, v, "num_channels", 3)?;
    let image = field(r, v, "image_size", 224)?;
    let patch = field(r, v, "patch_size", 16)?;
    let head = v
        .get("vision_use_head")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let f = "vision_config.hidden_size";
    let side = image / patch;
    let positions = mul(r, f, side, side)?;
    let kernel = mul(r, f, channels, mul(r, f, patch, patch)?)?;
    let mut t = vec![
        vision(h, kernel, 1),
        vision(1, h, 1),
        vision(positions, h, 1),
        // per layer: q, k, v, out and their biases, two LayerNorms (weight and bias each)
        vision(h, h, mul(r, f, depth, 4)?),
        vision(1, h, mul(r, f, depth, 8)?),
        vision(inter, h, depth),
        vision(1, inter, depth),
        vision(h, inter, depth),
        vision(1, h, depth),
        // the post LayerNorm
        vision(1, h, 2),
        // the projector: mm_input_projection_weight and mm_soft_emb_norm
        vision(h, text_hidden, 1),
        vision(1, h, 1),
    ];
    if head {
        // SiglipMultiheadAttentionPoolingHead: the probe, in_proj (3h × h) and its bias,
        // out_proj and its bias, a LayerNorm, and a fc1/fc2 MLP with biases.
        t.extend([
            vision(1, h, 1),
            vision(h, h, 4),
            vision(1, h, 4),
            vision(1, h, 2),
            vision(inter, h, 1),
            vision(1, inter, 1),
            vision(h, inter, 1),
            vision(1, h, 1),
        ]);
    }
    Ok((t, depth))
}

/// Gemma-4's tower (transformers 5.25 `Gemma4VisionModel` and `Gemma4MultimodalEmbedder`,
/// modeling_gemma4.py), built only when the config has a `vision_config`: a patch projection
/// (3 × `patch_size`² → hidden, no bias), a position table of 2 × `position_embedding_size` ×
/// hidden, `num_hidden_layers` blocks of Gemma's four RMSNorms, q/k/v/o without bias
/// (`num_attention_heads` and `num_key_value_heads` of `head_dim`) with a q and k norm of one
/// head (the v norm has no weight) and a gate/up/down MLP of `intermediate_size`; with
/// `standardize` the persistent `std_bias` and `std_scale` (hidden each), with
/// `use_clipped_linears` four persistent scalar bounds on each of a block's seven linears. The
/// embedder projects hidden (or `output_proj_dims`) to the language model's width; its norm has
/// no weight.
fn gemma4(r: &Reader, text_hidden: u64) -> Result<Option<(Vec<TensorGroup>, u64)>, InputError> {
    let Some(v) = given_vision_config(r)? else {
        return Ok(None);
    };
    let h = field(r, v, "hidden_size", 768)?;
    let inter = field(r, v, "intermediate_size", 3072)?;
    let depth = field(r, v, "num_hidden_layers", 16)?;
    let heads = field(r, v, "num_attention_heads", 12)?;
    let kv_heads = field(r, v, "num_key_value_heads", 12)?;
    let head_dim = field(r, v, "head_dim", 64)?;
    let patch = field(r, v, "patch_size", 16)?;
    let positions = field(r, v, "position_embedding_size", 10 * 1024)?;
    let out = field(r, v, "output_proj_dims", h)?;
    let flag = |key: &str| v.get(key).and_then(Value::as_bool).unwrap_or(false);
    let f = "vision_config.hidden_size";
    let q = mul(r, f, heads, head_dim)?;
    let kv = mul(r, f, kv_heads, head_dim)?;
    let mut t = vec![
        vision(h, mul(r, f, 3, mul(r, f, patch, patch)?)?, 1),
        vision(positions, h, 2),
        vision(q, h, depth),
        vision(kv, h, mul(r, f, depth, 2)?),
        vision(h, q, depth),
        vision(1, head_dim, mul(r, f, depth, 2)?),
        vision(1, h, mul(r, f, depth, 4)?),
        vision(inter, h, mul(r, f, depth, 2)?),
        vision(h, inter, depth),
        vision(text_hidden, out, 1),
    ];
    if flag("standardize") {
        t.push(vision(1, h, 2));
    }
    if flag("use_clipped_linears") {
        t.push(vision(1, 1, mul(r, f, depth, 7 * 4)?));
    }
    Ok(Some((t, depth)))
}

/// The count of vision feature layers the projector concatenates: one for an integer
/// `vision_feature_layer` (or none given), the list's length for a list.
fn feature_layers(r: &Reader) -> Result<u64, InputError> {
    match r.outer.get("vision_feature_layer") {
        None | Some(Value::Null) | Some(Value::Number(_)) => Ok(1),
        Some(Value::Array(a)) if !a.is_empty() => Ok(a.len() as u64),
        Some(x) => Err(r.bad(
            "vision_feature_layer",
            x,
            "expected a layer index or a list of them",
        )),
    }
}

/// The wrapper's `multimodal_projector_bias`, or its config class's `default`.
fn projector_bias(r: &Reader, default: bool) -> bool {
    r.outer
        .get("multimodal_projector_bias")
        .and_then(Value::as_bool)
        .unwrap_or(default)
}

/// A two-layer projector (transformers 5.17 `LlavaMultiModalProjector`, and the same linears in
/// `Mistral3MultiModalProjector`): vision hidden × `feature_layers` → text hidden → text hidden,
/// with biases when `bias`.
fn two_linears(
    r: &Reader,
    vision_hidden: u64,
    text_hidden: u64,
    bias: bool,
) -> Result<Vec<TensorGroup>, InputError> {
    let f = "vision_config.hidden_size";
    let input = mul(r, f, vision_hidden, feature_layers(r)?)?;
    let mut t = vec![
        vision(text_hidden, input, 1),
        vision(text_hidden, text_hidden, 1),
    ];
    if bias {
        t.push(vision(1, text_hidden, 2));
    }
    Ok(t)
}

/// Pixtral's tower (transformers 5.17 `PixtralVisionModel`, modeling_pixtral.py): a Conv2d patch
/// embedding without bias (`num_channels` × `patch_size`² → hidden), the `ln_pre` RMSNorm, and
/// `num_hidden_layers` blocks of two RMSNorms, q/k/v/o of hidden × hidden without bias and a
/// gate/up/down MLP of `intermediate_size` without bias; its rotary embedding holds no
/// parameters. `patch` is the patch size the wrapper's config class falls back on.
fn pixtral(
    r: &Reader,
    v: &Map<String, Value>,
    patch: u64,
) -> Result<(Vec<TensorGroup>, u64, u64), InputError> {
    let h = field(r, v, "hidden_size", 1024)?;
    let inter = field(r, v, "intermediate_size", 4096)?;
    let depth = field(r, v, "num_hidden_layers", 24)?;
    let channels = field(r, v, "num_channels", 3)?;
    let patch = field(r, v, "patch_size", patch)?;
    let f = "vision_config.hidden_size";
    let t = vec![
        vision(h, mul(r, f, channels, mul(r, f, patch, patch)?)?, 1),
        vision(1, h, 1),
        vision(h, h, mul(r, f, depth, 4)?),
        vision(inter, h, mul(r, f, depth, 2)?),
        vision(h, inter, depth),
        vision(1, h, mul(r, f, depth, 2)?),
    ];
    Ok((t, depth, h))
}

/// Mistral-3's tower (transformers 5.17 `Mistral3Model`): Pixtral (Mistral3Config's own Pixtral
/// settings, patch 14, when the config has no `vision_config`; `PixtralVisionConfig`'s, patch
/// 16, for a field a given one leaves out), then `Mistral3MultiModalProjector`: an RMSNorm over
/// the vision hidden, the patch merger's `merging_layer` (hidden · `spatial_merge_size`² →
/// hidden, no bias) and the two linears, with biases only when `multimodal_projector_bias`.
fn mistral3(r: &Reader, text_hidden: u64) -> Result<(Vec<TensorGroup>, u64), InputError> {
    let (mut t, depth, h) = match given_vision_config(r)? {
        Some(v) => pixtral(r, v, 16)?,
        None => pixtral(r, &Map::new(), 14)?,
    };
    let merge = match r.outer.get("spatial_merge_size") {
        None | Some(Value::Null) => 2,
        Some(x) => match x.as_u64() {
            Some(n) if n > 0 && n <= 1 << 10 => n,
            _ => {
                return Err(r.bad(
                    "spatial_merge_size",
                    x,
                    "expected an integer from 1 to 1,024",
                ))
            }
        },
    };
    let f = "spatial_merge_size";
    t.push(vision(1, h, 1));
    t.push(vision(h, mul(r, f, h, mul(r, f, merge, merge)?)?, 1));
    t.extend(two_linears(r, h, text_hidden, projector_bias(r, false))?);
    Ok((t, depth))
}

/// CLIP's vision tower (transformers 5.17 `CLIPVisionModel`, `CLIPVisionConfig` defaults where
/// the config is silent): the class embedding, a Conv2d patch embedding without bias, learned
/// position embeddings ((image_size / patch_size)² + 1), the pre LayerNorm, `num_hidden_layers`
/// layers (two LayerNorms, q/k/v/out and a fc1/fc2 MLP, all with bias) and the post LayerNorm.
/// Every layer is built, the one a `vision_feature_layer` of -2 leaves unused included.
fn clip(
    r: &Reader,
    v: &Map<String, Value>,
    defaults: [u64; 5],
) -> Result<(Vec<TensorGroup>, u64, u64), InputError> {
    let [h, inter, depth, image, patch] = defaults;
    let h = field(r, v, "hidden_size", h)?;
    let inter = field(r, v, "intermediate_size", inter)?;
    let depth = field(r, v, "num_hidden_layers", depth)?;
    let channels = field(r, v, "num_channels", 3)?;
    let image = field(r, v, "image_size", image)?;
    let patch = field(r, v, "patch_size", patch)?;
    let f = "vision_config.hidden_size";
    let side = image / patch;
    let positions = add(r, f, mul(r, f, side, side)?, 1)?;
    let t = vec![
        vision(1, h, 1),
        vision(h, mul(r, f, channels, mul(r, f, patch, patch)?)?, 1),
        vision(positions, h, 1),
        // the pre and post LayerNorms, weight and bias each
        vision(1, h, 4),
        // per layer: q, k, v, out and their biases, two LayerNorms (weight and bias each)
        vision(h, h, mul(r, f, depth, 4)?),
        vision(1, h, mul(r, f, depth, 8)?),
        vision(inter, h, depth),
        vision(1, inter, depth),
        vision(h, inter, depth),
        vision(1, h, depth),
    ];
    Ok((t, depth, h))
}

/// LLaVA's tower (transformers 5.17 `LlavaModel`): `AutoModel` of `vision_config`, CLIP (the
/// default `model_type`) or Pixtral, then `LlavaMultiModalProjector` (two linears, with biases
/// unless `multimodal_projector_bias` is false). With no `vision_config` LlavaConfig builds CLIP
/// ViT-L/14 at 336 pixels. `None` for another vision model (left to the note).
fn llava(r: &Reader, text_hidden: u64) -> Result<Option<(Vec<TensorGroup>, u64)>, InputError> {
    let empty = Map::new();
    let given = given_vision_config(r)?;
    let v = given.unwrap_or(&empty);
    let (mut t, depth, h) = match v.get("model_type").and_then(Value::as_str) {
        None if given.is_none() => clip(r, v, [1024, 4096, 24, 336, 14])?,
        None | Some("clip_vision_model") => clip(r, v, [768, 3072, 12, 224, 32])?,
        Some("pixtral") => pixtral(r, v, 16)?,
        Some(_) => return Ok(None),
    };
    t.extend(two_linears(r, h, text_hidden, projector_bias(r, true))?);
    Ok(Some((t, depth)))
}

/// LLaVA-NeXT's tower (transformers 5.17 `LlavaNextModel`, modeling_llava_next.py): LLaVA's
/// (`AutoModel` of `vision_config`, CLIP ViT-L/14 at 336 pixels when it has none;
/// `LlavaNextMultiModalProjector` is the same two linears), and `image_newline`, one text-hidden
/// vector the model appends to each row of an image's features.
fn llava_next(r: &Reader, text_hidden: u64) -> Result<Option<(Vec<TensorGroup>, u64)>, InputError> {
    Ok(llava(r, text_hidden)?.map(|(mut t, depth)| {
        t.push(vision(1, text_hidden, 1));
        (t, depth)
    }))
}

/// Phi-3.5-vision's tower (`Phi3ImageEmbedding`, the checkpoint's remote-code
/// modeling_phi3_v.py; transformers has no class for `phi3_v`): a `CLIPVisionModel` built from
/// clip-vit-large-patch14-336's fixed `CLIPVisionConfig` (every one of its 24 layers, though the
/// features come from the second-to-last), then, with `embd_layer.with_learnable_separator`,
/// `glb_GN` and `sub_GN` (image_dim_out · 4 each: the 2 × 2 merged feature's width) and
/// `img_projection`: under `projection_cls` `mlp` Linear(image_dim_out · 4, hidden) (image_dim_out
/// without the HD transform), GELU, Linear(hidden, hidden), else one Linear(image_dim_out,
/// hidden), all with biases. The text embedding it holds (`wte`) is the language model's.
/// `None` for an `img_processor` other than that CLIP (the remote code refuses it).
fn phi3_v(r: &Reader, text_hidden: u64) -> Result<Option<(Vec<TensorGroup>, u64)>, InputError> {
    let Some(Value::Object(img)) = r.outer.get("img_processor") else {
        return Ok(None);
    };
    let clip_model = img.get("name").and_then(Value::as_str) == Some("clip_vision_model")
        && img.get("model_name").and_then(Value::as_str)
            == Some("openai/clip-vit-large-patch14-336");
    if !clip_model {
        return Ok(None);
    }
    let dim = match img.get("image_dim_out") {
        None | Some(Value::Null) => 1024,
        Some(x) => match x.as_u64() {
            Some(n) if n > 0 && n <= 1 << 20 => n,
            _ => {
                return Err(r.bad(
                    "img_processor.image_dim_out",
                    x,
                    "expected an integer from 1 to 1,048,576",
                ))
            }
        },
    };
    let empty = Map::new();
    let embd = match r.outer.get("embd_layer") {
        Some(Value::Object(o)) => o,
        _ => &empty,
    };
    let flag = |k: &str| embd.get(k).and_then(Value::as_bool).unwrap_or(false);
    let (hd, separators) = (flag("use_hd_transform"), flag("with_learnable_separator"));
    let mlp = embd.get("projection_cls").and_then(Value::as_str) == Some("mlp");
    let (mut t, depth, _) = clip(r, &empty, [1024, 4096, 24, 336, 14])?;
    let f = "img_processor.image_dim_out";
    let merged = mul(r, f, dim, 4)?;
    if separators {
        t.push(vision(1, merged, 2));
    }
    let input = if hd { merged } else { dim };
    if mlp {
        t.push(vision(text_hidden, input, 1));
        t.push(vision(text_hidden, text_hidden, 1));
        t.push(vision(1, text_hidden, 2));
    } else {
        t.push(vision(text_hidden, dim, 1));
        t.push(vision(1, text_hidden, 1));
    }
    Ok(Some((t, depth)))
}

/// Llama-4's tower (transformers 5.17 `Llama4VisionModel` and `Llama4MultiModalProjector`,
/// modeling_llama4.py; `Llama4VisionConfig` defaults where the config is silent, the whole
/// default tower when it has no `vision_config`): the unfold patch embedding's linear
/// (`num_channels` × `patch_size`² → hidden, no bias), the class embedding, learned position
/// embeddings ((image_size / patch_size)² + 1), the pre and post LayerNorms, `num_hidden_layers`
/// layers (two LayerNorms, q/k/v/o of `num_attention_heads` × hidden / heads with bias, a fc1/fc2
/// MLP of `intermediate_size` with bias), the pixel-shuffle adapter's two linears without bias
/// (`intermediate_size` → `projector_input_dim`, `projector_output_dim` squared), then the
/// projector's `vision_output_dim` → text hidden, no bias.
fn llama4(r: &Reader, text_hidden: u64) -> Result<(Vec<TensorGroup>, u64), InputError> {
    let empty = Map::new();
    let v = vision_config(r, &empty)?;
    let h = field(r, v, "hidden_size", 768)?;
    let inter = field(r, v, "intermediate_size", 5632)?;
    let depth = field(r, v, "num_hidden_layers", 34)?;
    let heads = field(r, v, "num_attention_heads", 16)?;
    let channels = field(r, v, "num_channels", 3)?;
    let image = field(r, v, "image_size", 448)?;
    let patch = field(r, v, "patch_size", 14)?;
    let proj_in = field(r, v, "projector_input_dim", 4096)?;
    let proj_out = field(r, v, "projector_output_dim", 4096)?;
    let out = field(r, v, "vision_output_dim", 7680)?;
    let f = "vision_config.hidden_size";
    let side = image / patch;
    let positions = add(r, f, mul(r, f, side, side)?, 1)?;
    let q = mul(r, f, heads, h / heads)?;
    let t = vec![
        vision(h, mul(r, f, channels, mul(r, f, patch, patch)?)?, 1),
        vision(1, h, 1),
        vision(positions, h, 1),
        // the pre and post LayerNorms, weight and bias each
        vision(1, h, 4),
        // per layer: q, k, v and their biases, o, then o's and fc2's biases and two LayerNorms
        vision(q, h, mul(r, f, depth, 3)?),
        vision(1, q, mul(r, f, depth, 3)?),
        vision(h, q, depth),
        vision(1, h, mul(r, f, depth, 6)?),
        vision(inter, h, depth),
        vision(1, inter, depth),
        vision(h, inter, depth),
        // the adapter's MLP, then the projector
        vision(proj_in, inter, 1),
        vision(proj_out, proj_out, 1),
        vision(text_hidden, out, 1),
    ];
    Ok((t, depth))
}

/// `vision_config.key` as a (height, width) pair: an integer for both or a list of two, or
/// `default` for both when absent.
fn pair(
    r: &Reader,
    v: &Map<String, Value>,
    key: &str,
    default: u64,
) -> Result<(u64, u64), InputError> {
    let name = format!("vision_config.{key}");
    let one = |x: &Value| match x.as_u64() {
        Some(n) if n > 0 && n <= 1 << 20 => Ok(n),
        _ => Err(r.bad(
            &name,
            x,
            "expected an integer from 1 to 1,048,576 or a list of two",
        )),
    };
    match v.get(key) {
        None | Some(Value::Null) => Ok((default, default)),
        Some(Value::Array(a)) if a.len() == 2 => Ok((one(&a[0])?, one(&a[1])?)),
        Some(x) => one(x).map(|n| (n, n)),
    }
}

/// InternVL's tower (transformers 5.17 `InternVLVisionModel` and `InternVLMultiModalProjector`,
/// modeling_internvl.py; `InternVLVisionConfig` defaults where the config is silent, the whole
/// default tower when it has no `vision_config`): the CLS token, the mask token when
/// `use_mask_token`, a Conv2d patch embedding with bias, absolute position embeddings (the
/// patches and one) when `use_absolute_position_embeddings`, `num_hidden_layers` layers (q/k/v with biases only
/// when `attention_bias`, the output projection with bias, q and k RMSNorms of hidden when
/// `use_qk_norm`, a fc1/fc2 MLP with biases, two norms of `norm_type`, LayerNorm with bias or
/// RMSNorm, and the layer-scale vectors `lambda_1` and `lambda_2`), the final LayerNorm unless
/// `use_mean_pooling`, then the projector: a LayerNorm over hidden · (1 / `downsample_ratio`)²
/// and two linears with biases into the language model's width.
fn internvl(r: &Reader, text_hidden: u64) -> Result<(Vec<TensorGroup>, u64), InputError> {
    let empty = Map::new();
    let v = vision_config(r, &empty)?;
    let h = field(r, v, "hidden_size", 1024)?;
    let inter = field(r, v, "intermediate_size", 4096)?;
    let depth = field(r, v, "num_hidden_layers", 24)?;
    let channels = field(r, v, "num_channels", 3)?;
    let (image_h, image_w) = pair(r, v, "image_size", 448)?;
    let (patch_h, patch_w) = pair(r, v, "patch_size", 14)?;
    let flag = |key: &str, default: bool| v.get(key).and_then(Value::as_bool).unwrap_or(default);
    let rms = match v.get("norm_type") {
        None | Some(Value::Null) => false,
        Some(x) if x.as_str() == Some("layer_norm") => false,
        Some(x) if x.as_str() == Some("rms_norm") => true,
        Some(x) => {
            return Err(r.bad(
                "vision_config.norm_type",
                x,
                "expected \"layer_norm\" or \"rms_norm\"",
            ))
        }
    };
    // int(1 / downsample_ratio), the side of the square of patches merged into one token
    let side = match r.outer.get("downsample_ratio") {
        None | Some(Value::Null) => 2,
        Some(x) => match x.as_f64() {
            Some(d) if d > 0.0 && d <= 1.0 && 1.0 / d <= 1024.0 => (1.0 / d) as u64,
            _ => return Err(r.bad("downsample_ratio", x, "expected a number in (0, 1]")),
        },
    };
    let f = "vision_config.hidden_size";
    let patches = mul(r, f, image_h / patch_h, image_w / patch_w)?;
    let merged = mul(r, f, h, mul(r, f, side, side)?)?;
    let norm = if rms { 1 } else { 2 };
    let mut t = vec![
        vision(1, h, 1),
        vision(h, mul(r, f, channels, mul(r, f, patch_h, patch_w)?)?, 1),
        vision(1, h, 1),
        // per layer: q, k, v and the output projection, its bias, fc2's bias, two norms and the
        // two layer-scale vectors
        vision(h, h, mul(r, f, depth, 4)?),
        vision(1, h, mul(r, f, depth, add(r, f, 4, 2 * norm)?)?),
        vision(inter, h, depth),
        vision(1, inter, depth),
        vision(h, inter, depth),
        // the projector: its LayerNorm, then two linears with biases
        vision(1, merged, 2),
        vision(text_hidden, merged, 1),
        vision(text_hidden, text_hidden, 1),
        vision(1, text_hidden, 2),
    ];
    if flag("use_mask_token", false) {
        t.push(vision(1, h, 1));
    }
    if flag("use_absolute_position_embeddings", true) {
        t.push(vision(add(r, f, patches, 1)?, h, 1));
    }
    if flag("attention_bias", false) {
        t.push(vision(1, h, mul(r, f, depth, 3)?));
    }
    if flag("use_qk_norm", false) {
        t.push(vision(1, h, mul(r, f, depth, 2)?));
    }
    if !flag("use_mean_pooling", true) {
        t.push(vision(1, h, 2));
    }
    Ok((t, depth))
}

/// Qwen2-VL's and Qwen2.5-VL's tower (transformers 5.17 `Qwen2VisionTransformerPretrainedModel`
/// and `Qwen2_5_VisionTransformerPretrainedModel`): a Conv3d patch embedding without bias
/// (`in_channels` × `temporal_patch_size` × `patch_size`² → width), `depth` blocks of two norms,
/// a fused qkv and proj with bias and an MLP with biases, then the patch merger (a norm over the
/// width, width·merge² → width·merge² → output, with biases). Qwen2-VL: width `embed_dim`,
/// LayerNorms with bias, a fc1/fc2 MLP of `embed_dim · mlp_ratio`, output `hidden_size`.
/// Qwen2.5-VL: width `hidden_size`, RMSNorms, a gate/up/down MLP of `intermediate_size`, output
/// `out_hidden_size`.
fn qwen2(r: &Reader, v25: bool) -> Result<(Vec<TensorGroup>, u64), InputError> {
    let empty = Map::new();
    let v = vision_config(r, &empty)?;
    let f = "vision_config.hidden_size";
    let (h, inter, out) = if v25 {
        (
            field(r, v, "hidden_size", 3584)?,
            field(r, v, "intermediate_size", 3420)?,
            field(r, v, "out_hidden_size", 3584)?,
        )
    } else {
        let e = field(r, v, "embed_dim", 1280)?;
        let ratio = field(r, v, "mlp_ratio", 4)?;
        (
            e,
            mul(r, "vision_config.mlp_ratio", e, ratio)?,
            field(r, v, "hidden_size", 3584)?,
        )
    };
    let depth = field(r, v, "depth", 32)?;
    let channels = field(r, v, "in_channels", 3)?;
    let patch = field(r, v, "patch_size", 14)?;
    let temporal = field(r, v, "temporal_patch_size", 2)?;
    let merge = field(r, v, "spatial_merge_size", 2)?;
    let merged = mul(r, f, h, mul(r, f, merge, merge)?)?;
    let kernel = mul(
        r,
        f,
        mul(r, f, channels, temporal)?,
        mul(r, f, patch, patch)?,
    )?;
    let qkv = mul(r, f, h, 3)?;
    // a LayerNorm has a weight and a bias, an RMSNorm a weight
    let norm = if v25 { 1 } else { 2 };
    let mlp_mats = if v25 { 2 } else { 1 };
    let t = vec![
        vision(h, kernel, 1),
        vision(1, h, mul(r, f, depth, 2 * norm)?),
        vision(qkv, h, depth),
        vision(1, qkv, depth),
        vision(h, h, depth),
        vision(1, h, depth),
        // gate and up (fc1 for Qwen2-VL) with their biases, then down (fc2) with its bias
        vision(inter, h, mul(r, f, depth, mlp_mats)?),
        vision(1, inter, mul(r, f, depth, mlp_mats)?),
        vision(h, inter, depth),
        vision(1, h, depth),
        // the merger: its norm, then two linear layers with biases
        vision(1, h, norm),
        vision(merged, merged, 1),
        vision(1, merged, 1),
        vision(out, merged, 1),
        vision(1, out, 1),
    ];
    Ok((t, depth))
}

/// The vision tower's tensors and its depth, when the config's top level is a Qwen3-VL or
/// Qwen3.5 wrapper (transformers builds the tower from `vision_config`, or from its defaults
/// when the config has none); `None` for a text-only config.
fn qwen(r: &Reader) -> Result<Option<(Vec<TensorGroup>, u64)>, InputError> {
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
    Ok(Some((t, depth)))
}

#[cfg(test)]
mod tests {
    use crate::model::presets::load;

    fn tower(json: &str) -> u64 {
        let spec = load("t", json).expect("it parses");
        spec.vision.iter().map(|t| t.params()).sum()
    }

    const GEMMA3_TEXT: &str = r#""model_type":"gemma3","text_config":{"hidden_size":5376,
        "intermediate_size":21504,"model_type":"gemma3_text","num_attention_heads":32,
        "num_hidden_layers":62,"num_key_value_heads":16,"head_dim":128}"#;

    /// transformers 5.17 on the meta device: the Gemma-3-27B text config with no vision_config
    /// (SiglipVisionConfig's defaults, pooling head included) holds 97,013,760 vision parameters;
    /// the 27B tower with `vision_use_head` left out, 438,298,688.
    #[test]
    fn gemma3_takes_siglips_defaults_and_its_pooling_head() {
        assert_eq!(tower(&format!("{{{GEMMA3_TEXT}}}")), 97_013_760);
        let v = r#""vision_config":{"hidden_size":1152,"image_size":896,"intermediate_size":4304,
            "num_attention_heads":16,"num_hidden_layers":27,"patch_size":14}"#;
        assert_eq!(tower(&format!("{{{GEMMA3_TEXT},{v}}}")), 438_298_688);
    }

    const MISTRAL_TEXT: &str = r#""text_config":{"model_type":"mistral","hidden_size":5120,
        "intermediate_size":32768,"num_attention_heads":32,"num_hidden_layers":40,
        "num_key_value_heads":8,"head_dim":128,"vocab_size":131072}"#;

    /// transformers 5.17 on the meta device: Mistral3Config's own Pixtral (patch 14) when the
    /// config has no vision_config, 438,958,080 with the projector into 5,120; a LLaVA config
    /// with a SigLIP tower is left to the note.
    #[test]
    fn mistral3_without_vision_config_takes_its_own_pixtral_and_llava_siglip_is_left_out() {
        let m3 = format!(r#"{{"model_type":"mistral3",{MISTRAL_TEXT}}}"#);
        assert_eq!(tower(&m3), 438_958_080);
        let siglip = format!(
            r#"{{"model_type":"llava",{MISTRAL_TEXT},
            "vision_config":{{"model_type":"siglip_vision_model"}}}}"#
        );
        let spec = load("t", &siglip).expect("it parses");
        assert!(spec.vision.is_empty());
        assert!(spec
            .notes
            .iter()
            .any(|n| n == crate::model::config::VISION_NOT_COUNTED));
    }

    /// transformers 5.17 on the meta device (`LlavaNextForConditionalGeneration`):
    /// llava-v1.6-mistral-7b-hf holds 7,566,747,648 parameters, 324,491,264 of them outside the
    /// language model — LLaVA-1.5's CLIP and projector into 4,096 and the 4,096 of
    /// `image_newline`.
    #[test]
    fn llava_next_is_llavas_tower_and_its_image_newline() {
        let text = include_str!("../../../tests/fixtures/vision/llava-v1.6-mistral-7b-hf.json");
        let spec = load("t", text).expect("it parses");
        assert_eq!(tower(text), 324_491_264);
        assert_eq!(spec.parameters(), 7_566_747_648);
    }

    /// Phi-3.5-vision-instruct: 4,146,621,440 parameters, 325,541,888 of them its tower
    /// (`CLIPVisionModel` 303,507,456, the separators 8,192, the projector 22,026,240), as
    /// tests/derive_meta.rs builds its parts with transformers' classes on the meta device.
    #[test]
    fn phi3_v_is_clip_its_separators_and_a_two_layer_projector() {
        let text = include_str!("../../../tests/fixtures/vision/phi-3.5-vision-instruct.json");
        let spec = load("t", text).expect("it parses");
        assert_eq!(tower(text), 325_541_888);
        assert_eq!(spec.parameters(), 4_146_621_440);
        assert!(spec.fused_projections);
        // one linear without the HD transform's merge; another image processor is not counted
        let base = r#""model_type":"phi3_v","hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100"#;
        let img = r#""img_processor":{"image_dim_out":1024,"name":"clip_vision_model",
            "model_name":"openai/clip-vit-large-patch14-336"}"#;
        let linear = format!(r#"{{{base},{img},"embd_layer":{{"projection_cls":"linear"}}}}"#);
        assert_eq!(tower(&linear), 303_507_456 + 1024 * 64 + 64);
        let other = format!(r#"{{{base},"img_processor":{{"name":"siglip"}}}}"#);
        assert_eq!(tower(&other), 0);
        let bad = format!(
            r#"{{{base},"img_processor":{{"name":"clip_vision_model",
            "model_name":"openai/clip-vit-large-patch14-336","image_dim_out":"x"}}}}"#
        );
        assert!(load("t", &bad).is_err());
    }

    #[test]
    fn a_bad_vision_field_names_itself() {
        let v = r#""vision_config":{"patch_size":[14,14]}"#;
        let e = load("t", &format!("{{{GEMMA3_TEXT},{v}}}")).unwrap_err();
        assert!(e.to_string().contains("vision_config.patch_size"), "{e}");
        let v = r#""vision_config":{"embed_dim":1048576,"mlp_ratio":1048576}"#;
        let q = r#""model_type":"qwen2_vl","hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100"#;
        assert!(load("t", &format!("{{{q},{v}}}")).is_err());
    }
}
