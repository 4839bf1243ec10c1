//! Reading a GGUF file's header (through candle's bounds-checked reader): the architecture facts
//! for the estimate, and every tensor's real block type, so weight bytes are exact.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::GgmlDType;

use super::spec::{Experts, GgufWeights, Numerics, Spec};
use crate::dtype::{GgufMix, WeightDtype};
use crate::error::InputError;

pub fn read_gguf(path: &Path, name: &str) -> Result<Spec, InputError> {
    let file = File::open(path).map_err(|source| InputError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let content = Content::read(&mut BufReader::new(file)).map_err(|e| InputError::Gguf {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    spec_from_content(&content, path, name)
}

fn spec_from_content(c: &Content, path: &Path, name: &str) -> Result<Spec, InputError> {
    let missing = |field: String| InputError::MissingField {
        path: path.to_path_buf(),
        field,
    };
    let arch = c
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .ok_or_else(|| missing("general.architecture".into()))?;
    let num =
        |key: &str| -> Option<u64> { c.metadata.get(&format!("{arch}.{key}")).and_then(as_u64) };
    let need = |key: &str| {
        num(key)
            .filter(|n| *n > 0)
            .ok_or_else(|| missing(format!("{arch}.{key}")))
    };

    let hidden = need("embedding_length")?;
    let layers = need("block_count")?;
    let heads = need("attention.head_count")?;
    let kv_heads = num("attention.head_count_kv")
        .filter(|n| *n > 0)
        .unwrap_or(heads);
    let head_dim = num("attention.key_length")
        .filter(|n| *n > 0)
        .unwrap_or(hidden / heads.max(1));
    let vocab = num("vocab_size")
        .or_else(|| {
            c.metadata
                .get("tokenizer.ggml.tokens")
                .and_then(|v| v.to_vec().ok())
                .map(|v| v.len() as u64)
        })
        .or_else(|| {
            c.tensor_infos
                .get("token_embd.weight")
                .and_then(|t| t.shape.dims().first().map(|&d| d as u64))
        })
        .ok_or_else(|| missing(format!("{arch}.vocab_size")))?;
    let expert_count = num("expert_count").unwrap_or(0);
    let intermediate = need("feed_forward_length")?;
    let experts = (expert_count > 0).then(|| Experts {
        count: expert_count,
        active: num("expert_used_count").unwrap_or(2),
        intermediate_size: num("expert_feed_forward_length").unwrap_or(intermediate),
        sparse_layers: layers,
        shared_intermediate_size: num("expert_shared_feed_forward_length").unwrap_or(0),
    });
    let window = num("attention.sliding_window").filter(|w| *w > 0);
    let sliding_layers = match (window, arch.as_str()) {
        (None, _) => 0,
        (Some(_), "gemma2") => layers.div_ceil(2),
        (Some(_), "gemma3") => layers - super::layout::every_nth(layers, 6),
        (Some(_), _) => layers,
    };

    // Exact bytes: each tensor's elements over its block size, times the block's bytes.
    let mut by_type: BTreeMap<String, u64> = BTreeMap::new();
    let (mut total, mut params) = (0u64, 0u64);
    let (mut widened_elements, mut widened_file_bytes) = (0u64, 0u64);
    for (name, info) in &c.tensor_infos {
        let elems = info.shape.elem_count() as u64;
        let block = info.ggml_dtype.block_size() as u64;
        let bytes = elems.div_ceil(block) * info.ggml_dtype.type_size() as u64;
        let wide = matches!(
            info.ggml_dtype,
            GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16
        );
        if name == "token_embd.weight" || info.shape.rank() == 1 || wide {
            widened_elements += elems;
            widened_file_bytes += bytes;
        }
        *by_type
            .entry(format!("{:?}", info.ggml_dtype).to_ascii_lowercase())
            .or_default() += bytes;
        total += bytes;
        params += elems;
    }
    let mut by_type: Vec<(String, u64)> = by_type.into_iter().collect();
    by_type.sort_by_key(|t| std::cmp::Reverse(t.1));
    let file_type = c
        .metadata
        .get("general.file_type")
        .and_then(as_u64)
        .map(file_type_name);

    Ok(Spec {
        name: name.to_string(),
        architecture: arch.clone(),
        hidden_size: hidden,
        intermediate_size: intermediate,
        num_layers: layers,
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim,
        vocab_size: vocab,
        max_position_embeddings: num("context_length"),
        tie_word_embeddings: !c.tensor_infos.contains_key("output.weight"),
        sliding_window: window.filter(|_| sliding_layers > 0),
        sliding_layers,
        experts,
        qkv_bias: c.tensor_infos.contains_key("blk.0.attn_q.bias"),
        qk_norm: c.tensor_infos.contains_key("blk.0.attn_q_norm.weight"),
        norms_per_layer: if c
            .tensor_infos
            .contains_key("blk.0.post_attention_norm.weight")
        {
            4
        } else {
            2
        },
        fused_projections: arch == "phi3",
        rope_theta: c
            .metadata
            .get(&format!("{arch}.rope.freq_base"))
            .and_then(|v| v.to_f32().ok())
            .map_or(10_000.0, f64::from),
        rms_norm_eps: c
            .metadata
            .get(&format!("{arch}.attention.layer_norm_rms_epsilon"))
            .and_then(|v| v.to_f32().ok())
            .map_or(1e-6, f64::from),
        numerics: Numerics {
            // llama.cpp permutes llama's q/k rows for GPT-J style (interleaved) RoPE.
            rope_interleaved: arch == "llama",
            ..Numerics::default()
        },
        native_dtype: match file_type.as_deref() {
            Some("MOSTLY_Q8_0") => WeightDtype::Gguf(GgufMix::Q8_0),
            Some("MOSTLY_Q6_K") => WeightDtype::Gguf(GgufMix::Q6K),
            Some("MOSTLY_Q5_K_M") => WeightDtype::Gguf(GgufMix::Q5KM),
            Some("MOSTLY_Q4_0") => WeightDtype::Gguf(GgufMix::Q4_0),
            Some("MOSTLY_F16") => WeightDtype::F16,
            Some("ALL_F32") => WeightDtype::F32,
            Some("MOSTLY_BF16") => WeightDtype::Bf16,
            _ => WeightDtype::Gguf(GgufMix::Q4KM),
        },
        checkpoint: None,
        gguf: Some(GgufWeights {
            total_bytes: total,
            tensor_count: c.tensor_infos.len() as u64,
            parameters: params,
            file_type,
            by_type,
            widened_elements,
            widened_file_bytes,
        }),
        notes: Vec::new(),
        layout: None,
        keep_dense: Vec::new(),
    })
}

fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::U8(n) => Some(*n as u64),
        Value::U16(n) => Some(*n as u64),
        Value::U32(n) => Some(*n as u64),
        Value::U64(n) => Some(*n),
        Value::I8(n) => u64::try_from(*n).ok(),
        Value::I16(n) => u64::try_from(*n).ok(),
        Value::I32(n) => u64::try_from(*n).ok(),
        Value::I64(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// llama.cpp's `llama_ftype` names.
fn file_type_name(n: u64) -> String {
    match n {
        0 => "ALL_F32",
        1 => "MOSTLY_F16",
        2 => "MOSTLY_Q4_0",
        3 => "MOSTLY_Q4_1",
        7 => "MOSTLY_Q8_0",
        8 => "MOSTLY_Q5_0",
        9 => "MOSTLY_Q5_1",
        10 => "MOSTLY_Q2_K",
        11 => "MOSTLY_Q3_K_S",
        12 => "MOSTLY_Q3_K_M",
        13 => "MOSTLY_Q3_K_L",
        14 => "MOSTLY_Q4_K_S",
        15 => "MOSTLY_Q4_K_M",
        16 => "MOSTLY_Q5_K_S",
        17 => "MOSTLY_Q5_K_M",
        18 => "MOSTLY_Q6_K",
        32 => "MOSTLY_BF16",
        other => return format!("type {other}"),
    }
    .to_string()
}
