//! llama.cpp's multimodal projector file (`--mmproj`): a GGUF holding a vision tower and its
//! projector, as `convert_hf_to_gguf.py --mmproj` writes it and tools/mtmd/clip.cpp reads it.
//!
//! What is read (tools/mtmd/clip-impl.h's `KEY_*` names, clip.cpp `load_hparams`):
//! - `clip.projector_type` (else `clip.vision.projector_type`, the key of mixed-modality files):
//!   which family's token rule applies;
//! - `clip.vision.image_size`, `clip.vision.patch_size`, `clip.vision.embedding_length`,
//!   `clip.vision.feed_forward_length`, `clip.vision.block_count`,
//!   `clip.vision.attention.head_count`: the ViT's geometry, required as clip.cpp requires them;
//! - `clip.vision.projector.scale_factor` (Gemma-3's pooling, 4 by default),
//!   `clip.vision.spatial_merge_size` (Qwen-VL's merge, 2 by default),
//!   `clip.vision.projection_dim` and `clip.vision.is_deepstack_layers` (Qwen3-VL's DeepStack
//!   features, one `projection_dim` vector a token for each flagged layer);
//! - `clip.has_vision_encoder`: an audio-only projector has no image rule;
//! - every tensor's ggml type and shape: the weights are their real bytes, as `gguf.rs` prices a
//!   language model's.
//!
//! clip.cpp's own bounds are kept (`load_hparams`' sanity check): `image_size` at most 8,192,
//! `patch_size` and the merge 1 to 65,535; the widths and counts within `crate::limits`.

use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};

use super::gguf::{as_u64, elements, read_content, within};
use super::images::{ImageInput, TokenRule, LLAMACPP_QWEN_MAX_TOKENS, LLAMACPP_QWEN_MIN_TOKENS};
use crate::error::InputError;

/// The projector types llm-oom has an image rule for (clip-impl.h `PROJECTOR_TYPE_NAMES`).
pub const KNOWN_PROJECTORS: [&str; 6] = [
    "gemma3",
    "qwen2vl_merger",
    "qwen2.5vl_merger",
    "qwen3vl_merger",
    "mlp",
    "mlp_norm",
];

/// clip.cpp's ceiling on `image_size` ("cap prevents int32 overflow in n_patches").
pub const MAX_IMAGE_SIZE: u64 = 8192;
/// clip.cpp's bound on `patch_size` and the merge: below 65,536.
pub const MAX_PATCH: u64 = 65_535;

/// An mmproj file as the planner needs it: its image rule and its weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mmproj {
    /// `clip.projector_type` as written (`gemma3`, `qwen2.5vl_merger`…).
    pub projector: String,
    /// The family's image input with the file's geometry, as llama.cpp sees it
    /// (`ImageInput::for_llamacpp` applied).
    pub input: ImageInput,
    /// Every tensor's bytes, by its ggml type: what llama.cpp loads (f16 as converted, or
    /// whatever type the file holds).
    pub total_bytes: u64,
    pub parameters: u64,
    pub tensor_count: u64,
    /// `clip.vision.block_count`.
    pub blocks: u64,
}

pub fn read_mmproj(path: &Path) -> Result<Mmproj, InputError> {
    let file = File::open(path).map_err(|source| InputError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    read_mmproj_from(&mut BufReader::new(file), path)
}

/// The `Mmproj` of GGUF bytes from any reader (`path` only names it in messages).
pub fn read_mmproj_from<R: Read + Seek>(reader: &mut R, path: &Path) -> Result<Mmproj, InputError> {
    let content = read_content(reader).map_err(|reason| InputError::Gguf {
        path: path.to_path_buf(),
        reason,
    })?;
    from_content(&content, path)
}

fn bad(path: &Path, field: &str, value: impl ToString, why: impl Into<String>) -> InputError {
    InputError::BadField {
        path: path.to_path_buf(),
        field: field.to_string(),
        value: value.to_string(),
        why: why.into(),
    }
}

fn from_content(c: &Content, path: &Path) -> Result<Mmproj, InputError> {
    let string = |key: &str| {
        c.metadata
            .get(key)
            .and_then(|v| v.to_string().ok())
            .filter(|s| !s.is_empty())
            .cloned()
    };
    let projector = string("clip.projector_type")
        .or_else(|| string("clip.vision.projector_type"))
        .ok_or_else(|| InputError::MissingField {
            path: path.to_path_buf(),
            field: "clip.projector_type".into(),
        })?;
    if !KNOWN_PROJECTORS.contains(&projector.as_str()) {
        let shown: String = projector.chars().take(64).collect();
        return Err(bad(
            path,
            "clip.projector_type",
            shown.escape_debug(),
            format!(
                "llm-oom has an image rule for the projectors {}; this one is not modelled",
                KNOWN_PROJECTORS.join(", ")
            ),
        ));
    }
    if matches!(
        c.metadata.get("clip.has_vision_encoder"),
        Some(Value::Bool(false))
    ) {
        return Err(bad(
            path,
            "clip.has_vision_encoder",
            "false",
            "the file has no vision tower (an audio projector); --mmproj takes a vision one",
        ));
    }
    // A number the file may give: within its ceiling; `None` when absent or not an integer.
    let num = |key: &str| -> Result<Option<u64>, InputError> {
        match c.metadata.get(key).and_then(as_u64) {
            Some(n) => within(path, key, n).map(Some),
            None => Ok(None),
        }
    };
    // A number clip.cpp requires: present and above 0.
    let need = |key: &str| -> Result<u64, InputError> {
        match num(key)? {
            Some(0) => Err(bad(
                path,
                key,
                0,
                format!("0 is not a valid {}", crate::limits::for_key(key).1),
            )),
            Some(n) => Ok(n),
            None => Err(InputError::MissingField {
                path: path.to_path_buf(),
                field: key.to_string(),
            }),
        }
    };
    // A side length within clip.cpp's bounds (`load_hparams`' sanity check).
    let side = |key: &str, n: u64, max: u64| -> Result<u64, InputError> {
        if n == 0 || n > max {
            return Err(bad(
                path,
                key,
                n,
                format!(
                    "llama.cpp takes 1 to {} here (tools/mtmd/clip.cpp, load_hparams)",
                    crate::units::group(max)
                ),
            ));
        }
        Ok(n)
    };
    let image_size = side(
        "clip.vision.image_size",
        need("clip.vision.image_size")?,
        MAX_IMAGE_SIZE,
    )?;
    let patch = side(
        "clip.vision.patch_size",
        need("clip.vision.patch_size")?,
        MAX_PATCH,
    )?;
    let hidden = need("clip.vision.embedding_length")?;
    let heads = need("clip.vision.attention.head_count")?;
    let intermediate = need("clip.vision.feed_forward_length")?;
    let blocks = need("clip.vision.block_count")?;
    let has = |name: &str| c.tensor_infos.contains_key(name);
    let fixed = |tokens: u64, extra_positions: u64| ImageInput {
        model_type: "",
        rule: TokenRule::Fixed { tokens },
        native: Some((image_size, image_size)),
        patch,
        hidden,
        heads,
        intermediate,
        extra_positions,
        batched_attention: true,
        held_per_token: 0,
        rotary_fp32: false,
        gated_mlp: has("v.blk.0.ffn_gate.weight"),
        one_sequence: false,
    };
    let input = match projector.as_str() {
        // clip.cpp: `n_merge = 4` unless `clip.vision.projector.scale_factor` says otherwise;
        // (image_size / patch / n_merge)² tokens (`clip_n_output_tokens`).
        "gemma3" => {
            let key = "clip.vision.projector.scale_factor";
            let merge = side(key, num(key)?.unwrap_or(4), MAX_PATCH)?;
            let per_side = image_size / patch / merge;
            if per_side == 0 {
                return Err(bad(
                    path,
                    "clip.vision.image_size",
                    image_size,
                    format!(
                        "an image of {image_size} px in patches of {patch} merged {merge} × \
                         {merge} gives no token"
                    ),
                ));
            }
            ImageInput {
                model_type: "gemma3",
                ..fixed(per_side.saturating_mul(per_side), 0)
            }
        }
        // LLaVA's CLIP: (image_size / patch)² tokens, beside the CLS token when the file has one.
        "mlp" | "mlp_norm" => {
            if c.metadata.contains_key("clip.vision.image_grid_pinpoints") {
                return Err(bad(
                    path,
                    "clip.vision.image_grid_pinpoints",
                    "(set)",
                    "LLaVA-1.6's any-resolution tiling is not modelled",
                ));
            }
            let per_side = image_size / patch;
            if per_side == 0 {
                return Err(bad(
                    path,
                    "clip.vision.image_size",
                    image_size,
                    format!("an image of {image_size} px in patches of {patch} gives no token"),
                ));
            }
            ImageInput {
                model_type: "llava",
                ..fixed(
                    per_side.saturating_mul(per_side),
                    u64::from(has("v.class_embd")),
                )
            }
        }
        // Qwen-VL: `n_merge = 2` unless `clip.vision.spatial_merge_size` says otherwise, and
        // llama.cpp's own 8 to 4,096 tokens an image (`set_limit_image_tokens(8, 4096)`).
        qwen => {
            let key = "clip.vision.spatial_merge_size";
            let merge = side(key, num(key)?.unwrap_or(2), MAX_PATCH)?;
            let area = patch.saturating_mul(merge).saturating_pow(2);
            let deepstack = match c.metadata.get("clip.vision.is_deepstack_layers") {
                Some(Value::Array(flags)) => flags
                    .iter()
                    .filter(|v| matches!(v, Value::Bool(true)))
                    .count() as u64,
                _ => 0,
            };
            let projection = match deepstack {
                0 => 0,
                _ => need("clip.vision.projection_dim")?,
            };
            ImageInput {
                model_type: match qwen {
                    "qwen2vl_merger" => "qwen2_vl",
                    "qwen2.5vl_merger" => "qwen2_5_vl",
                    _ => "qwen3_vl",
                },
                rule: TokenRule::Dynamic {
                    patch,
                    merge,
                    min_pixels: area.saturating_mul(LLAMACPP_QWEN_MIN_TOKENS),
                    max_pixels: area.saturating_mul(LLAMACPP_QWEN_MAX_TOKENS),
                },
                native: None,
                batched_attention: false,
                held_per_token: deepstack.saturating_mul(projection),
                rotary_fp32: true,
                ..fixed(0, 0)
            }
        }
    };

    // Exact bytes: each tensor's elements over its block size, times the block's bytes.
    let (mut total, mut params) = (0u64, 0u64);
    for (name, info) in &c.tensor_infos {
        let elems = elements(path, name, info.shape.dims())?;
        let block = (info.ggml_dtype.block_size() as u64).max(1);
        let bytes = elems
            .div_ceil(block)
            .saturating_mul(info.ggml_dtype.type_size() as u64);
        total = total.saturating_add(bytes);
        params = params.saturating_add(elems);
    }
    if c.tensor_infos.is_empty() {
        return Err(InputError::Gguf {
            path: path.to_path_buf(),
            reason: "the mmproj holds no tensors".into(),
        });
    }
    Ok(Mmproj {
        projector,
        input: input.for_llamacpp(),
        total_bytes: total,
        parameters: params,
        tensor_count: c.tensor_infos.len() as u64,
        blocks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    const F32: u32 = 0;
    const F16: u32 = 1;
    const Q8_0: u32 = 8;

    /// A metadata value as a GGUF v3 header writes it.
    enum Meta {
        Str(&'static str),
        U32(u32),
        U64(u64),
        Bool(bool),
        Bools(Vec<bool>),
    }

    /// GGUF v3 bytes: the metadata, then the tensor infos (no data).
    fn gguf(meta: &[(&str, Meta)], tensors: &[(String, Vec<u64>, u32)]) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend((tensors.len() as u64).to_le_bytes());
        b.extend((meta.len() as u64).to_le_bytes());
        let string = |b: &mut Vec<u8>, s: &str| {
            b.extend((s.len() as u64).to_le_bytes());
            b.extend(s.as_bytes());
        };
        for (k, v) in meta {
            string(&mut b, k);
            match v {
                Meta::Str(s) => {
                    b.extend(8u32.to_le_bytes());
                    string(&mut b, s);
                }
                Meta::U32(n) => {
                    b.extend(4u32.to_le_bytes());
                    b.extend(n.to_le_bytes());
                }
                Meta::U64(n) => {
                    b.extend(10u32.to_le_bytes());
                    b.extend(n.to_le_bytes());
                }
                Meta::Bool(x) => {
                    b.extend(7u32.to_le_bytes());
                    b.push(u8::from(*x));
                }
                Meta::Bools(xs) => {
                    b.extend(9u32.to_le_bytes());
                    b.extend(7u32.to_le_bytes());
                    b.extend((xs.len() as u64).to_le_bytes());
                    b.extend(xs.iter().map(|x| u8::from(*x)));
                }
            }
        }
        for (name, dims, dtype) in tensors {
            string(&mut b, name);
            b.extend((dims.len() as u32).to_le_bytes());
            for d in dims {
                b.extend(d.to_le_bytes());
            }
            b.extend(dtype.to_le_bytes());
            b.extend(0u64.to_le_bytes());
        }
        b
    }

    /// Gemma-3's SigLIP as `convert_hf_to_gguf.py --mmproj` writes it (896 px, 14 px patches,
    /// 27 blocks of 1,152 wide with 16 heads and 4,304 in the MLP), projecting to `text` wide.
    fn gemma3_meta() -> Vec<(&'static str, Meta)> {
        vec![
            ("general.architecture", Meta::Str("clip")),
            ("clip.projector_type", Meta::Str("gemma3")),
            ("clip.has_vision_encoder", Meta::Bool(true)),
            ("clip.use_gelu", Meta::Bool(true)),
            ("clip.vision.image_size", Meta::U32(896)),
            ("clip.vision.patch_size", Meta::U32(14)),
            ("clip.vision.embedding_length", Meta::U32(1152)),
            ("clip.vision.feed_forward_length", Meta::U32(4304)),
            ("clip.vision.block_count", Meta::U32(27)),
            ("clip.vision.attention.head_count", Meta::U32(16)),
            ("clip.vision.projection_dim", Meta::U32(2560)),
        ]
    }

    fn siglip_tensors(text: u64) -> Vec<(String, Vec<u64>, u32)> {
        let mut t = vec![
            (
                "v.patch_embd.weight".to_string(),
                vec![14, 14, 3, 1152],
                F16,
            ),
            ("v.patch_embd.bias".to_string(), vec![1152], F32),
            ("v.position_embd.weight".to_string(), vec![1152, 4096], F16),
            ("v.post_ln.weight".to_string(), vec![1152], F32),
            ("v.post_ln.bias".to_string(), vec![1152], F32),
            (
                "mm.input_projection.weight".to_string(),
                vec![1152, text],
                F16,
            ),
            ("mm.soft_emb_norm.weight".to_string(), vec![1152], F32),
        ];
        for i in 0..27 {
            let n = |s: &str| format!("v.blk.{i}.{s}");
            for m in ["attn_q", "attn_k", "attn_v", "attn_out"] {
                t.push((n(&format!("{m}.weight")), vec![1152, 1152], F16));
                t.push((n(&format!("{m}.bias")), vec![1152], F32));
            }
            for m in ["ln1", "ln2"] {
                t.push((n(&format!("{m}.weight")), vec![1152], F32));
                t.push((n(&format!("{m}.bias")), vec![1152], F32));
            }
            t.push((n("ffn_up.weight"), vec![1152, 4304], F16));
            t.push((n("ffn_up.bias"), vec![4304], F32));
            t.push((n("ffn_down.weight"), vec![4304, 1152], F16));
            t.push((n("ffn_down.bias"), vec![1152], F32));
        }
        t
    }

    /// The SigLIP table's bytes: f16 matrices, f32 vectors.
    fn siglip_bytes(text: u64) -> u64 {
        let f16 = 14 * 14 * 3 * 1152 + 1152 * 4096 + 1152 * text;
        let f32 = 1152 * 3 + 1152;
        let block_f16 = 4 * 1152 * 1152 + 2 * 1152 * 4304;
        let block_f32 = 4 * 1152 + 4 * 1152 + 4304 + 1152;
        (f16 + 27 * block_f16) * 2 + (f32 + 27 * block_f32) * 4
    }

    fn read(meta: &[(&str, Meta)], tensors: &[(String, Vec<u64>, u32)]) -> Result<Mmproj, String> {
        read_mmproj_from(
            &mut Cursor::new(gguf(meta, tensors)),
            Path::new("mmproj.gguf"),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn gemma3_mmproj_gives_the_config_paths_siglip() {
        let m = read(&gemma3_meta(), &siglip_tensors(2560)).unwrap();
        assert_eq!(m.projector, "gemma3");
        assert_eq!(m.blocks, 27);
        // the same tower as config.json's Gemma-3 gives llama.cpp
        let v: serde_json::Value =
            serde_json::from_str(include_str!("../../presets/gemma-3-27b-it.json")).unwrap();
        let from_config = super::super::images::read(v.as_object().unwrap())
            .unwrap()
            .for_llamacpp();
        assert_eq!(m.input, from_config);
        // (896 / 14 / 4)² = 256 tokens over 4,096 patches
        let c = m.input.llamacpp_warmup();
        assert_eq!((c.tokens, c.encoder_positions), (256, 4096));
        // the CLIP compute buffer llama.cpp logged for this tower: 121.25 MiB with flash attention
        assert_eq!(m.input.llamacpp_clip_bytes(&c, true), 127_139_840);
        // the weights: every tensor's real bytes, 419,816,304 parameters (4B's 2,560-wide
        // projection), the matrices in f16 and the vectors in f32
        assert_eq!(m.total_bytes, siglip_bytes(2560));
        assert_eq!(m.parameters, 419_816_304);
        assert_eq!(m.total_bytes, 840_434_112);
        assert_eq!(m.tensor_count, 7 + 27 * 16);
    }

    #[test]
    fn tensor_types_are_priced_by_their_blocks() {
        // one Q8_0 matrix: 34 bytes a block of 32
        let t = vec![(
            "mm.input_projection.weight".to_string(),
            vec![1152, 2560],
            Q8_0,
        )];
        let m = read(&gemma3_meta(), &t).unwrap();
        assert_eq!(m.total_bytes, 1152 * 2560 / 32 * 34);
    }

    #[test]
    fn qwen_mergers_take_llamacpps_token_limits() {
        let meta = |projector: &'static str| {
            vec![
                ("clip.projector_type", Meta::Str(projector)),
                ("clip.vision.image_size", Meta::U32(560)),
                ("clip.vision.patch_size", Meta::U32(14)),
                ("clip.vision.embedding_length", Meta::U32(1280)),
                ("clip.vision.feed_forward_length", Meta::U32(3420)),
                ("clip.vision.block_count", Meta::U32(32)),
                ("clip.vision.attention.head_count", Meta::U32(16)),
                ("clip.vision.projection_dim", Meta::U32(3584)),
                ("clip.vision.spatial_merge_size", Meta::U32(2)),
                ("clip.vision.n_wa_pattern", Meta::U32(8)),
            ]
        };
        let gated = vec![("v.blk.0.ffn_gate.weight".to_string(), vec![1280, 3420], F16)];
        let q = read(&meta("qwen2.5vl_merger"), &gated).unwrap();
        assert_eq!(q.input.model_type, "qwen2_5_vl");
        assert!(q.input.gated_mlp && q.input.rotary_fp32 && !q.input.batched_attention);
        // the warm-up image: 46 × 46 merged tokens, 92² patches
        let w = q.input.llamacpp_warmup();
        assert_eq!((w.tokens, w.encoder_positions), (2116, 8464));
        // the most llama.cpp takes: 4,096 tokens, 1,792 px a side
        assert_eq!(q.input.cost(None).tokens, 4096);
        // Qwen2-VL: no gate
        let plain = vec![("v.blk.0.ffn_up.weight".to_string(), vec![1280, 5120], F16)];
        let q2 = read(&meta("qwen2vl_merger"), &plain).unwrap();
        assert_eq!(q2.input.model_type, "qwen2_vl");
        assert!(!q2.input.gated_mlp);
        // Qwen3-VL: three DeepStack layers of 27 keep a 3,584-wide vector a token each
        let mut m3 = meta("qwen3vl_merger");
        let mut flags = vec![false; 27];
        for i in [8, 16, 24] {
            flags[i] = true;
        }
        m3.push(("clip.vision.is_deepstack_layers", Meta::Bools(flags)));
        let q3 = read(&m3, &plain).unwrap();
        assert_eq!(q3.input.model_type, "qwen3_vl");
        assert_eq!(q3.input.held_per_token, 3 * 3584);
    }

    #[test]
    fn llava_mlp_counts_the_cls_position() {
        let meta = vec![
            ("clip.projector_type", Meta::Str("mlp")),
            ("clip.vision.image_size", Meta::U32(336)),
            ("clip.vision.patch_size", Meta::U32(14)),
            ("clip.vision.embedding_length", Meta::U32(1024)),
            ("clip.vision.feed_forward_length", Meta::U32(4096)),
            ("clip.vision.block_count", Meta::U32(23)),
            ("clip.vision.attention.head_count", Meta::U32(16)),
        ];
        let t = vec![("v.class_embd".to_string(), vec![1024], F32)];
        let l = read(&meta, &t).unwrap();
        let c = l.input.llamacpp_warmup();
        assert_eq!(
            (l.input.model_type, c.tokens, c.encoder_positions),
            ("llava", 576, 577)
        );
    }

    #[test]
    fn hostile_files_are_refused_in_one_line() {
        let tensors = siglip_tensors(8);
        let with = |key: &'static str, value: Meta| {
            let mut m: Vec<_> = gemma3_meta()
                .into_iter()
                .filter(|(k, _)| *k != key)
                .collect();
            m.push((key, value));
            read(&m, &tensors).unwrap_err()
        };
        let e = with("clip.vision.patch_size", Meta::U32(0));
        assert!(
            e.contains("clip.vision.patch_size") && e.contains("= 0"),
            "{e}"
        );
        let e = with("clip.vision.image_size", Meta::U32(u32::MAX));
        assert!(e.contains("clip.vision.image_size"), "{e}");
        let e = with("clip.vision.image_size", Meta::U32(8193));
        assert!(e.contains("1 to 8,192"), "{e}");
        // an image smaller than one merged patch
        let e = with("clip.vision.image_size", Meta::U32(20));
        assert!(e.contains("gives no token"), "{e}");
        let e = with("clip.vision.projector.scale_factor", Meta::U32(0));
        assert!(e.contains("scale_factor"), "{e}");
        let e = with("clip.vision.block_count", Meta::U32(0));
        assert!(e.contains("block_count"), "{e}");
        let e = with("clip.projector_type", Meta::Str("resampler"));
        assert!(
            e.contains("`clip.projector_type` = resampler")
                && e.contains("gemma3, qwen2vl_merger, qwen2.5vl_merger, qwen3vl_merger, mlp"),
            "{e}"
        );
        let e = with("clip.has_vision_encoder", Meta::Bool(false));
        assert!(e.contains("no vision tower"), "{e}");
        // no projector type at all, a missing width, a tensor past 2^44 elements
        let none: Vec<_> = gemma3_meta()
            .into_iter()
            .filter(|(k, _)| *k != "clip.projector_type")
            .collect();
        assert!(read(&none, &tensors)
            .unwrap_err()
            .contains("clip.projector_type"));
        let no_width: Vec<_> = gemma3_meta()
            .into_iter()
            .filter(|(k, _)| *k != "clip.vision.embedding_length")
            .collect();
        assert!(read(&no_width, &tensors)
            .unwrap_err()
            .contains("embedding_length"));
        let huge = vec![("v.x".to_string(), vec![1 << 33, 1 << 33], F16)];
        assert!(read(&gemma3_meta(), &huge).unwrap_err().contains("2^44"));
        assert!(read(&gemma3_meta(), &[])
            .unwrap_err()
            .contains("no tensors"));
        // truncated bytes and garbage
        let bytes = gguf(&gemma3_meta(), &tensors);
        for cut in [0, 3, 8, 40, bytes.len() / 2] {
            let r = read_mmproj_from(&mut Cursor::new(&bytes[..cut]), Path::new("m.gguf"));
            assert!(r.is_err());
        }
        for e in [
            with("clip.vision.image_size", Meta::U32(0)),
            with("clip.projector_type", Meta::Str("x\ny")),
        ] {
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    proptest::proptest! {
        /// Any numbers in the geometry keys, any projector llm-oom knows: refused, or read and
        /// priced (tokens, warm-up, CLIP buffer) without a panic or an overflow.
        #[test]
        fn hostile_geometry_is_refused_or_priced(
            values in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(0u64),
                    proptest::strategy::Just(1u64),
                    0u64..100_000,
                    proptest::prelude::any::<u64>(),
                ],
                10,
            ),
            projector in 0usize..KNOWN_PROJECTORS.len(),
            dims in proptest::collection::vec(proptest::prelude::any::<u32>(), 1..4),
        ) {
            let keys = [
                "clip.vision.image_size",
                "clip.vision.patch_size",
                "clip.vision.embedding_length",
                "clip.vision.feed_forward_length",
                "clip.vision.block_count",
                "clip.vision.attention.head_count",
                "clip.vision.projection_dim",
                "clip.vision.projector.scale_factor",
                "clip.vision.spatial_merge_size",
                "clip.vision.n_wa_pattern",
            ];
            let names: [&'static str; 6] = KNOWN_PROJECTORS;
            let mut meta = vec![("clip.projector_type", Meta::Str(names[projector]))];
            for (k, v) in keys.iter().zip(values) {
                meta.push((k, Meta::U64(v)));
            }
            meta.push(("clip.vision.is_deepstack_layers", Meta::Bools(vec![true; 3])));
            let tensors = vec![(
                "v.blk.0.ffn_up.weight".to_string(),
                dims.into_iter().map(u64::from).collect(),
                F16,
            )];
            if let Ok(m) = read(&meta, &tensors) {
                let i = m.input;
                for size in [None, Some((1, 1)), Some((65_536, 65_536))] {
                    let c = i.cost(size);
                    let _ = i.llamacpp_clip_bytes(&c, true);
                    let _ = i.llamacpp_clip_bytes(&c, false);
                }
                let w = i.llamacpp_warmup();
                let _ = i.llamacpp_clip_bytes(&w, false);
            }
        }
    }
}
