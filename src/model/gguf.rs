//! Reading a GGUF file's header (through candle's bounds-checked reader): the architecture facts
//! for the estimate, and every tensor's real block type, so weight bytes are exact.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
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
    read_gguf_from(&mut BufReader::new(file), path, name)
}

/// The `Spec` of GGUF bytes from any reader (`path` only names it in messages).
pub fn read_gguf_from<R: Read + Seek>(
    reader: &mut R,
    path: &Path,
    name: &str,
) -> Result<Spec, InputError> {
    let bad = |reason: String| InputError::Gguf {
        path: path.to_path_buf(),
        reason,
    };
    let content = read_content(reader).map_err(bad)?;
    spec_from_content(&content, path, name)
}

/// candle's `Content::read`, guarded: candle divides by `general.alignment` unchecked, so a header
/// that sets it to 0 is refused here (the runtime reads GGUF files through this too).
pub fn read_content<R: Read + Seek>(reader: &mut R) -> Result<Content, String> {
    let start = reader.stream_position().map_err(|e| e.to_string())?;
    if header_alignment(reader).ok().flatten() == Some(0) {
        return Err("`general.alignment` is 0".into());
    }
    reader
        .seek(SeekFrom::Start(start))
        .map_err(|e| e.to_string())?;
    Content::read(reader).map_err(|e| first_line(&e.to_string()))
}

/// candle appends a backtrace to its errors when `RUST_BACKTRACE` is set: the message is the
/// first line.
fn first_line(message: &str) -> String {
    message
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The integer `general.alignment` of a GGUF header, if it sets one (`None` when it does not, or
/// when the header ends first: candle's reader then says what is wrong).
fn header_alignment<R: Read>(r: &mut R) -> std::io::Result<Option<u64>> {
    let mut magic = [0u8; 4];
    r.read_exact(&mut magic)?;
    let version = read_u32(r)?;
    if &magic != b"GGUF" || version == 0 {
        return Ok(None);
    }
    let wide = version >= 2;
    let _tensors = read_len(r, wide)?;
    let kvs = read_len(r, wide)?;
    // candle keeps the last of repeated keys: so does this.
    let mut alignment = None;
    for _ in 0..kvs {
        let key_len = read_len(r, wide)?;
        if key_len > 1 << 20 {
            return Ok(None);
        }
        let mut key = vec![0u8; key_len as usize];
        r.read_exact(&mut key)?;
        let ty = read_u32(r)?;
        if key == b"general.alignment" {
            // the integer types candle reads it from (u8, i8, u16, i16, u32, i32)
            let width = match ty {
                0 | 1 => Some(1),
                2 | 3 => Some(2),
                4 | 5 => Some(4),
                _ => None,
            };
            if let Some(w) = width {
                alignment = Some(read_n(r, w)?);
                continue;
            }
            alignment = None;
        }
        skip_value(r, ty, wide, 0)?;
    }
    Ok(alignment)
}

fn read_u32<R: Read>(r: &mut R) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

/// A little-endian unsigned integer of `n` (≤ 8) bytes.
fn read_n<R: Read>(r: &mut R, n: usize) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b[..n])?;
    Ok(u64::from_le_bytes(b))
}

fn read_len<R: Read>(r: &mut R, wide: bool) -> std::io::Result<u64> {
    read_n(r, if wide { 8 } else { 4 })
}

fn skip<R: Read>(r: &mut R, n: u64) -> std::io::Result<()> {
    let copied = std::io::copy(&mut r.take(n), &mut std::io::sink())?;
    if copied < n {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Skip one metadata value of GGUF type `ty` (arrays nest at most 64 deep, as in candle).
fn skip_value<R: Read>(r: &mut R, ty: u32, wide: bool, depth: u32) -> std::io::Result<()> {
    let fixed = |ty: u32| match ty {
        0 | 1 | 7 => Some(1u64),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    };
    match ty {
        8 => {
            let n = read_len(r, wide)?;
            skip(r, n)
        }
        9 if depth < 64 => {
            let inner = read_u32(r)?;
            let n = read_len(r, wide)?;
            match fixed(inner) {
                Some(size) => skip(r, n.saturating_mul(size)),
                None => {
                    for _ in 0..n {
                        skip_value(r, inner, wide, depth + 1)?;
                    }
                    Ok(())
                }
            }
        }
        _ => match fixed(ty) {
            Some(size) => skip(r, size),
            None => Err(std::io::ErrorKind::InvalidData.into()),
        },
    }
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
    let num = |key: &str| -> Result<Option<u64>, InputError> {
        let full = format!("{arch}.{key}");
        match c.metadata.get(&full).and_then(as_u64) {
            Some(n) => within(path, &full, n).map(Some),
            None => Ok(None),
        }
    };
    let need = |key: &str| match num(key)? {
        Some(0) => {
            let full = format!("{arch}.{key}");
            let what = crate::limits::for_key(&full).1;
            Err(InputError::BadField {
                path: path.to_path_buf(),
                field: full,
                value: "0".into(),
                why: format!("0 is not a valid {what}"),
            })
        }
        Some(n) => Ok(n),
        None => Err(missing(format!("{arch}.{key}"))),
    };

    let hidden = need("embedding_length")?;
    let all_layers = need("block_count")?;
    // `block_count` includes the multi-token-prediction (`nextn`) blocks; llama.cpp b11312 skips
    // their tensors unless MTP is on (`TENSOR_SKIP` without `load_mtp`, src/models/deepseek2.cpp,
    // glm4-moe.cpp, qwen35.cpp) and the main context caches only the trunk (`n_layer()`).
    let nextn = num("nextn_predict_layers")?
        .unwrap_or(0)
        .min(all_layers.saturating_sub(1));
    let layers = all_layers - nextn;
    let heads = need("attention.head_count")?;
    let kv_heads = num("attention.head_count_kv")?
        .filter(|n| *n > 0)
        .unwrap_or(heads);
    let head_dim = num("attention.key_length")?
        .filter(|n| *n > 0)
        .unwrap_or(hidden / heads.max(1));
    let vocab = match num("vocab_size")? {
        Some(v) => Some(v),
        None => c
            .metadata
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.to_vec().ok())
            .map(|v| v.len() as u64)
            .or_else(|| {
                c.tensor_infos
                    .get("token_embd.weight")
                    .and_then(|t| t.shape.dims().first().map(|&d| d as u64))
            })
            .map(|v| within(path, &format!("{arch}.vocab_size"), v))
            .transpose()?,
    }
    .ok_or_else(|| missing(format!("{arch}.vocab_size")))?;
    let expert_count = num("expert_count")?.unwrap_or(0);
    let intermediate = need("feed_forward_length")?;
    let experts = match expert_count {
        0 => None,
        count => Some(Experts {
            count,
            active: num("expert_used_count")?.unwrap_or(2),
            intermediate_size: num("expert_feed_forward_length")?.unwrap_or(intermediate),
            sparse_layers: layers,
            shared_intermediate_size: num("expert_shared_feed_forward_length")?.unwrap_or(0),
        }),
    };
    let window = num("attention.sliding_window")?.filter(|w| *w > 0);
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
    let (mut nextn_bytes, mut nextn_params) = (0u64, 0u64);
    for (name, info) in &c.tensor_infos {
        let elems = elements(path, name, info.shape.dims())?;
        let block = (info.ggml_dtype.block_size() as u64).max(1);
        let bytes = elems
            .div_ceil(block)
            .saturating_mul(info.ggml_dtype.type_size() as u64);
        if nextn > 0 && block_index(name).is_some_and(|i| i >= layers) {
            nextn_bytes = nextn_bytes.saturating_add(bytes);
            nextn_params = nextn_params.saturating_add(elems);
            continue;
        }
        let wide = matches!(
            info.ggml_dtype,
            GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16
        );
        if name == "token_embd.weight" || info.shape.rank() == 1 || wide {
            widened_elements = widened_elements.saturating_add(elems);
            widened_file_bytes = widened_file_bytes.saturating_add(bytes);
        }
        let slot = by_type
            .entry(format!("{:?}", info.ggml_dtype).to_ascii_lowercase())
            .or_default();
        *slot = slot.saturating_add(bytes);
        total = total.saturating_add(bytes);
        params = params.saturating_add(elems);
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
        max_position_embeddings: num("context_length")?,
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
        notes: if nextn > 0 {
            vec![format!(
                "+ {nextn} multi-token-prediction (nextn) block(s) in the GGUF ({} parameters, {} \
                 bytes), not counted: llama.cpp loads them only with MTP on (load_mtp)",
                crate::units::group(nextn_params),
                crate::units::group(nextn_bytes)
            )]
        } else {
            Vec::new()
        },
        layout: None,
        keep_dense: Vec::new(),
        vision: Vec::new(),
        vision_layers: 0,
        images: None,
        mmproj_bytes: None,
    })
}

/// A header number within the ceiling of what it counts (`limits::for_key`).
pub(crate) fn within(path: &Path, key: &str, n: u64) -> Result<u64, InputError> {
    let (max, what) = crate::limits::for_key(key);
    if n > max {
        return Err(InputError::BadField {
            path: path.to_path_buf(),
            field: key.to_string(),
            value: n.to_string(),
            why: format!(
                "past llm-oom's ceiling of {} for a {what}; no real model comes near it",
                crate::units::group(max)
            ),
        });
    }
    Ok(n)
}

/// A tensor's element count, refused past `limits::MAX_TENSOR_ELEMENTS` (dims of 2^33 × 2^33
/// would wrap 64 bits to 0 bytes).
pub(crate) fn elements(path: &Path, name: &str, dims: &[usize]) -> Result<u64, InputError> {
    let n = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
        .filter(|n| *n <= crate::limits::MAX_TENSOR_ELEMENTS);
    n.ok_or_else(|| InputError::Gguf {
        path: path.to_path_buf(),
        reason: format!(
            "tensor `{name}` has dimensions {dims:?}, past llm-oom's ceiling of 2^44 elements"
        ),
    })
}

pub(crate) fn as_u64(v: &Value) -> Option<u64> {
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

/// The block a GGUF tensor belongs to (`blk.12.ffn_up.weight` → 12).
fn block_index(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("blk.")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}
