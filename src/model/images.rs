//! What an image costs a vision-language model in transformers: the tokens it adds to the prompt
//! (each model's processor rule) and the vision encoder's activations while it is encoded.
//!
//! The rules, from transformers 5.17.0:
//! - Gemma-3 (`models/gemma3/processing_gemma3.py`, `Gemma3Processor`): every image becomes
//!   `image_seq_length` image tokens (the config's `mm_tokens_per_image`, 256), whatever its
//!   size: `Gemma3ImageProcessor` resizes it to the SigLIP's `image_size` (896), whose
//!   (896/14)² = 4,096 patches are pooled to 256. The `<start_of_image>` / `<end_of_image>` and
//!   blank lines around them are the prompt's own text, not counted here.
//! - Qwen2-VL / Qwen2.5-VL (`models/qwen2_vl/image_processing_qwen2_vl.py`, `smart_resize`):
//!   the image is resized to multiples of patch × merge (14 × 2 = 28), its pixels kept within
//!   `min_pixels` 56 × 56 and `max_pixels` 28 × 28 × 1280; it then has (H/14)·(W/14) patches,
//!   merged 2 × 2 into (H/28)·(W/28) tokens.
//! - Qwen3-VL / Qwen3.5 (`models/qwen3_vl/processing_qwen3_vl.py`, `Qwen3VLProcessor`, whose
//!   image processor `models/auto/image_processing_auto.py` maps to `Qwen2VLImageProcessor`):
//!   the same `smart_resize` with the published `preprocessor_config.json`'s patch_size 16,
//!   merge_size 2 (factor 32) and `size` shortest_edge 65,536 (256²) / longest_edge 16,777,216
//!   (4096²); (H/16)·(W/16) patches, (H/32)·(W/32) tokens.
//! - LLaVA (`models/llava/processing_llava.py`): (image_size / patch_size)² tokens, 576 for
//!   336/14 (the CLS token is dropped by the `default` feature select strategy).
//! - LLaVA-NeXT (`models/llava_next/processing_llava_next.py`, `_get_number_of_features`):
//!   [`TokenRule::AnyRes`], a grid of 336 px crops picked from `image_grid_pinpoints` beside the
//!   whole image, the padding's rows and columns cut off and one `image_newline` a row.
//! - Mistral-Small-3.x and Pixtral (`models/pixtral/processing_pixtral.py`): [`TokenRule::Rows`].
//! - Llama-4, InternVL and Phi-4-multimodal: tiles, [`TokenRule::Tiles`] and [`Canvas`].
//! - Phi-3.5-vision ([`Canvas::Phi3V`]): its processor is the checkpoint's remote code
//!   (`image_processing_phi3_v.py`, not in transformers); its HD transform and token count are
//!   vLLM's port of it (vllm/model_executor/models/phi3v.py, `calc_hd_transform_size`,
//!   `get_num_image_tokens`).
//!
//! The new families' encoder rules (Pixtral, Llama-4, InternVL, Phi-4-multimodal, LLaVA-NeXT:
//! CLIP over each image's 1 + rows × columns crops as one batch, Phi-3.5-vision: CLIP over
//! `num_crops` + 1 crops an image, the grid's padded with blank crops) follow the same counting from
//! the transformers source; unlike Gemma-3's they are derived, not measured on
//! a GPU.
//!
//! The encoder (`models/siglip/modeling_siglip.py`, `models/qwen2_5_vl/modeling_qwen2_5_vl.py`,
//! `models/clip/modeling_clip.py`): a ViT over the image's patches. Its largest moment is one
//! block's attention (the residual stream, q, k, v and, in eager, the score matrix heads × S × S
//! in the compute dtype beside its float32 softmax) or its MLP (the residual stream, the normed
//! input and two intermediate-wide tensors). SigLIP and CLIP run the images as one batch, so
//! eager holds every image's scores at once; Qwen2.5-VL's attention splits the patches by
//! `cu_seqlens` and attends one image (or window) at a time, and so does Qwen3-VL's
//! (`models/qwen3_vl/modeling_qwen3_vl.py`, `Qwen3VLVisionAttention`; its MLP is fc1, act, fc2;
//! Qwen3.5's `Qwen3_5VisionModel` is the same model). Qwen3-VL's DeepStack features (one merged
//! tensor per `deepstack_visual_indexes` entry, tokens × out_hidden_size) are kept beside the
//! blocks after the last index, so they join both the attention and the MLP moment.

use serde::Serialize;
use serde_json::{Map, Value};

/// How a model turns an image into prompt tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "rule")]
pub enum TokenRule {
    /// The same tokens for every image (Gemma-3, LLaVA): the processor resizes to one size.
    Fixed { tokens: u64 },
    /// Qwen2-VL's `smart_resize`: tokens follow the image's size.
    Dynamic {
        patch: u64,
        merge: u64,
        min_pixels: u64,
        max_pixels: u64,
    },
    /// Pixtral's processor (Mistral-Small-3.x, Pixtral-12B): the image is shrunk (never grown)
    /// to fit `longest_edge`, each side rounded up to a multiple of patch × merge; a row of cells
    /// ends in `[IMG_BREAK]`, the last in `[IMG_END]`.
    Rows {
        patch: u64,
        merge: u64,
        longest_edge: u64,
    },
    /// Tiles of `tile` px (Llama-4, InternVL): the processor picks a grid of at most `max_tiles`
    /// tiles for the image's shape, adds one whole-image tile when the grid has more than one,
    /// and each tile gives `tokens_per_tile` tokens.
    Tiles {
        tile: u64,
        max_tiles: u64,
        tokens_per_tile: u64,
        canvas: Canvas,
    },
    /// LLaVA-NeXT's any resolution (`LlavaNextProcessor._get_number_of_features`,
    /// transformers 5.17): `select_best_resolution` picks the canvas of `pinpoints` that keeps the
    /// most of the image's pixels (then wastes the fewest); the canvas is cut into `tile` px
    /// crops and the whole image resized to one more. The base crop gives (tile / patch)² tokens
    /// (`base_extra` more under the `full` feature select strategy, its CLS); the canvas's
    /// (tile / patch)·rows × (tile / patch)·columns features lose the rows (or columns) of
    /// padding the aspect ratio leaves, and each remaining row gets one `image_newline`.
    AnyRes {
        tile: u64,
        patch: u64,
        base_extra: u64,
        pinpoints: Pinpoints,
    },
}

/// The most `image_grid_pinpoints` an [`TokenRule::AnyRes`] rule holds (LLaVA-NeXT ships 5,
/// LLaVA-OneVision 36); kept small, with sides of 16 bits, so the rule stays a small `Copy`
/// value.
pub const MAX_PINPOINTS: usize = 40;

/// `image_grid_pinpoints`: the canvases (height, width) in px an any-resolution processor picks
/// from, in the config's order (its ties go to the first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pinpoints {
    len: u8,
    grid: [(u16, u16); MAX_PINPOINTS],
}

impl Pinpoints {
    /// Every entry a [height, width] pair of sides from `tile` to 65,535; `None` for an
    /// empty list, a longer one than [`MAX_PINPOINTS`] or another entry (the processor would
    /// fail on a side under the crop).
    fn read(v: &Value, tile: u64) -> Option<Pinpoints> {
        let list = v.as_array()?;
        if list.is_empty() || list.len() > MAX_PINPOINTS {
            return None;
        }
        let mut grid = [(0, 0); MAX_PINPOINTS];
        for (slot, entry) in grid.iter_mut().zip(list) {
            let side = |i: usize| {
                entry
                    .as_array()
                    .filter(|a| a.len() == 2)
                    .and_then(|a| a[i].as_u64())
                    .filter(|&n| n >= tile)
                    .and_then(|n| u16::try_from(n).ok())
            };
            *slot = (side(0)?, side(1)?);
        }
        Some(Pinpoints {
            len: u8::try_from(list.len()).ok()?,
            grid,
        })
    }

    /// The canvases (height, width) in px.
    pub fn to_vec(&self) -> Vec<(u64, u64)> {
        self.grid[..usize::from(self.len)]
            .iter()
            .map(|&(h, w)| (u64::from(h), u64::from(w)))
            .collect()
    }
}

impl Serialize for Pinpoints {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.to_vec().into_iter().map(|(h, w)| [h, w]))
    }
}

/// How a tiled processor picks its grid and spells the image in the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Canvas {
    /// `Llama4ImageProcessor` (`models/llama4/image_processing_llama4.py`, `get_best_fit`): the
    /// canvas the image reaches with the least upscaling (else the least downscaling), the
    /// smallest such; `Llama4Processor._prompt_split_image` writes `<|image_start|>`, each tile's
    /// tokens followed by `<|tile_x_separator|>` (or `<|tile_y_separator|>` at a row's end),
    /// `<|image|>`, the global tile's tokens and `<|image_end|>`.
    Llama4,
    /// `GotOcr2ImageProcessor` with `crop_to_patches` (`models/got_ocr2/image_processing_pil_got_ocr2.py`,
    /// `get_optimal_tiled_canvas`): the grid whose aspect ratio is nearest the image's, ties to
    /// more tiles while the image's area exceeds half the grid's; `InternVLProcessor` writes
    /// `<img>`, the tiles' tokens (the thumbnail's last) and `</img>`.
    InternVl,
    /// `Phi4MultimodalImageProcessor` (`models/phi4_multimodal/image_processing_phi4_multimodal.py`,
    /// `dynamic_preprocess`): ⌈W / 448⌉ × ⌈H / 448⌉ crops when at most `dynamic_hd` (36), else
    /// the nearest aspect ratio as InternVL picks it; the image is resized into that canvas and
    /// padded, and the tokens are 256 + 1 + the padding mask's kept cells at half resolution
    /// (R × C) + one a row (R) + 16. A global crop always joins the grid.
    Phi4,
    /// Phi-3.5-vision's `HD_transform` (the checkpoint's `image_processing_phi3_v.py`; vLLM's
    /// `calc_hd_transform_size`): the image, laid landscape, is scaled to the widest `scale` × 336
    /// px with scale · ⌈scale / ratio⌉ ≤ `num_crops` (4), its height padded up to whole 336 px
    /// crops; the tokens are (rows · columns + 1) · 144 + 1 + (rows + 1) · 12: each crop's
    /// 24 × 24 patches merged 2 × 2 into 12 × 12, one `sub_GN` a row of the grid and of the global
    /// crop, one `glb_GN` between them. The processor pads every image to `num_crops` + 1 crops
    /// (`pad_to_max_num_crops_tensor`), and the tower encodes them all.
    Phi3V,
}

impl TokenRule {
    /// The rule in words, for `plan`'s note.
    pub fn describe(&self) -> &'static str {
        match self {
            TokenRule::Fixed { .. } => "a fixed count per image, as the processor expands it",
            TokenRule::Dynamic { .. } => {
                "smart_resize to multiples of patch × merge, then one token per merged patch"
            }
            TokenRule::Rows { .. } => {
                "fit to the longest edge in whole patch × merge cells, one token per cell and one \
                 [IMG_BREAK] / [IMG_END] per row"
            }
            TokenRule::Tiles { .. } => {
                "a grid of tiles for the image's shape and one whole-image tile, a fixed count \
                 per tile with the separators the processor writes"
            }
            TokenRule::AnyRes { .. } => {
                "the best image_grid_pinpoints canvas in crops and the whole image as one more, \
                 the padding's features cut and one image_newline a row"
            }
        }
    }
}

/// The families whose image rule is known, as the refusal names them.
pub const KNOWN_FAMILIES: &str =
    "Gemma-3, Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5, LLaVA, LLaVA-NeXT, Mistral-Small-3.x, \
     Pixtral, Llama-4, InternVL, Phi-4-multimodal and Phi-3.5-vision are";

/// A vision-language model's image input: its token rule and its encoder's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ImageInput {
    /// `gemma3`, `qwen2_5_vl`, `qwen2_vl`, `qwen3_vl`, `qwen3_vl_moe`, `qwen3_5`, `qwen3_5_moe`,
    /// `llava`, `llava_next`, `mistral3`, `pixtral`, `llama4`, `internvl`, `phi4_multimodal`,
    /// `phi3_v`.
    pub model_type: &'static str,
    pub rule: TokenRule,
    /// The size the processor resizes to (fixed rules); `None` for a dynamic rule.
    pub native: Option<(u64, u64)>,
    pub patch: u64,
    pub hidden: u64,
    pub heads: u64,
    pub intermediate: u64,
    /// Extra positions beside the patches (CLIP's CLS token).
    pub extra_positions: u64,
    /// Every image's attention at once (SigLIP, CLIP), or one image at a time (Qwen).
    pub batched_attention: bool,
    /// Values a token the encoder keeps beside its later blocks: Qwen3-VL's DeepStack features,
    /// one `out_hidden_size` vector a token for each `deepstack_visual_indexes` entry.
    pub held_per_token: u64,
    /// Qwen's vision attention turns q and k to float32 for its rotary embedding
    /// (`apply_rotary_pos_emb_vision`: `q, k = q.float(), k.float()`), SigLIP and CLIP have none.
    pub rotary_fp32: bool,
    /// A gated MLP (Qwen2.5-VL's gate/up/down) holds three intermediate tensors at its peak, a
    /// plain one (fc1, act, fc2) two.
    pub gated_mlp: bool,
    /// Every image's patches in one sequence under a block-diagonal mask (Pixtral): the mask,
    /// (images × positions)² in the compute dtype, is held through the tower (SDPA and eager
    /// alike), and eager's scores cover the whole sequence.
    pub one_sequence: bool,
}

/// One image as the processor sees it: its size after resizing, its patches and its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ImageCost {
    pub height: u64,
    pub width: u64,
    /// Positions the encoder attends over (patches, plus CLIP's CLS).
    pub encoder_positions: u64,
    /// Tokens the image adds to the language model's prompt.
    pub tokens: u64,
}

/// `--images` as planned: the model's rule, one image's cost and the images per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLoad {
    pub input: ImageInput,
    pub cost: ImageCost,
    pub per_request: u64,
    /// vLLM's `--limit-mm-per-prompt` for images ([`VLLM_DEFAULT_LIMIT`] when not given).
    pub limit_mm_per_prompt: u64,
    /// vLLM: what its start-up profile of the encoder takes off the KV cache
    /// ([`VllmEncoderProfile::peak_with`] less the language model's own peak), the same for
    /// every workload; `None` for the other engines.
    pub vllm_reserve: Option<u64>,
}

impl ImageLoad {
    /// Tokens the images add to each prompt.
    pub fn tokens(&self) -> u64 {
        self.per_request.saturating_mul(self.cost.tokens)
    }

    /// llama.cpp: the CLIP compute buffer, reserved once for the warm-up image and grown to the
    /// largest image it encodes (one at a time, whatever `--images`).
    pub fn llamacpp_clip_bytes(&self, flash_attn: bool) -> u64 {
        let warmup = self.input.llamacpp_warmup();
        let graph = if self.cost.encoder_positions > warmup.encoder_positions {
            self.cost
        } else {
            warmup
        };
        self.input.llamacpp_clip_bytes(&graph, flash_attn)
    }

    /// The encoder's peak for `w`: transformers encodes every sequence's images in the prefill's
    /// first forward; eager holds the score matrix.
    pub fn encoder_bytes(&self, w: &crate::estimate::Workload) -> u64 {
        use crate::estimate::Engine;
        if w.engine == Engine::Vllm {
            return self.vllm_reserve.unwrap_or(0);
        }
        if w.engine == Engine::LlamaCpp {
            return self.llamacpp_clip_bytes(crate::estimate::llamacpp::flash_attn(w));
        }
        let eager = w.engine == Engine::TransformersEager;
        let d = w
            .weight_dtype
            .compute_kv_dtype()
            .elem_bytes()
            .as_f64()
            .ceil() as u64;
        self.input.encoder_bytes(
            &self.cost,
            self.per_request.saturating_mul(w.batch),
            d.max(1),
            eager,
        )
    }
}

/// vLLM's default `--limit-mm-per-prompt` for every modality (vllm/config/multimodal.py,
/// `MultiModalConfig.limit_per_prompt`: "Defaults to 999 for each modality").
pub const VLLM_DEFAULT_LIMIT: u64 = 999;

/// What vLLM V1 reserves for a vision-language model's images at start-up: `profile_run`
/// (vllm/v1/worker/gpu_model_runner.py) encodes a dummy batch of `items` images of the largest
/// size (`_get_mm_dummy_batch(dummy_modality, max_mm_items_per_batch)`, then
/// `self.model.embed_multimodal`), keeps their outputs in `self.encoder_cache` and only then runs
/// the language model's `_dummy_run(self.max_num_tokens)`; the peak of that profile comes off the
/// KV cache (`determine_available_memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VllmEncoderProfile {
    /// `max_mm_items_per_batch`: the images encoded at once in the profile.
    pub items: u64,
    /// `mm_max_toks_per_item`: one image of the largest size the processor keeps.
    pub tokens_per_item: u64,
    /// `get_encoder_budget()`: min(`encoder_compute_budget`, `encoder_cache_size`), in tokens.
    pub encoder_budget: u64,
    /// The vision tower's transient peak for `items` images at once (vLLM's ViTs attend with
    /// flash attention or SDPA: no score matrix).
    pub encoder_bytes: u64,
    /// The encoder cache at its fullest: the `items` outputs, `tokens_per_item` vectors of the
    /// language model's hidden size each, kept through the language model's dummy run.
    pub cache_bytes: u64,
}

impl VllmEncoderProfile {
    /// The profile's peak with the language model's `lm_peak` beside it: the tower's transient is
    /// freed before `_dummy_run`, the cache is not, so max(tower, LM) + cache.
    pub fn peak_with(&self, lm_peak: u64) -> u64 {
        self.encoder_bytes
            .max(lm_peak)
            .saturating_add(self.cache_bytes)
    }
}

impl ImageInput {
    /// vLLM V1's encoder profile for this model (`None`: `--limit-mm-per-prompt 0`, which skips
    /// the tower: vllm/multimodal/encoder_budget.py keeps only modalities whose limit is above 0).
    ///
    /// - `encoder_compute_budget` and `encoder_cache_size` (vllm/v1/core/encoder_cache_manager.py,
    ///   `compute_mm_encoder_budget`, `_get_max_num_batched_encoder_embeds`,
    ///   `_get_encoder_cache_size`): both max(`max_num_batched_tokens`, tokens of the largest
    ///   item) when not set; the budget is their minimum.
    /// - `MultiModalBudget._get_max_items` (vllm/multimodal/encoder_budget.py): encoder items =
    ///   budget // tokens per item; per prompt max(1, min(limit, max_model_len // tokens));
    ///   decoder items = max_num_seqs × per prompt (V1 chunks prefill); the batch is
    ///   max(1, min(encoder items, decoder items)).
    ///
    /// `text_hidden` is the language model's hidden size (the projector's output), `d` the
    /// compute dtype's bytes.
    pub fn vllm_profile(
        &self,
        max_num_batched_tokens: u64,
        max_num_seqs: u64,
        max_model_len: u64,
        limit: u64,
        text_hidden: u64,
        d: u64,
    ) -> Option<VllmEncoderProfile> {
        if limit == 0 {
            return None;
        }
        let largest = self.cost(None);
        let tokens = largest.tokens.max(1);
        let budget = max_num_batched_tokens.max(tokens);
        let per_prompt = limit.min(max_model_len / tokens).max(1);
        let items = (budget / tokens)
            .min(max_num_seqs.saturating_mul(per_prompt))
            .max(1);
        Some(VllmEncoderProfile {
            items,
            tokens_per_item: tokens,
            encoder_budget: budget,
            encoder_bytes: self.encoder_bytes(&largest, items, d, false),
            cache_bytes: items
                .saturating_mul(tokens)
                .saturating_mul(text_hidden)
                .saturating_mul(d),
        })
    }
}

/// The most images `--images` takes per request.
pub const MAX_IMAGES: u64 = 4096;

/// The largest side `--image-size` takes.
pub const MAX_SIDE: u64 = 1 << 16;

fn field(v: &Map<String, Value>, key: &str, default: u64) -> u64 {
    v.get(key)
        .and_then(Value::as_u64)
        .filter(|&n| n > 0 && n <= 1 << 20)
        .unwrap_or(default)
}

/// The image input of a config.json's top level, for the families whose rule is known;
/// `None` for a text-only model or a family not covered.
pub fn read(outer: &Map<String, Value>) -> Option<ImageInput> {
    let model_type = outer.get("model_type").and_then(Value::as_str)?;
    let empty = Map::new();
    let v = match outer.get("vision_config") {
        Some(Value::Object(o)) => o,
        _ => &empty,
    };
    match model_type {
        // Gemma3Config / SiglipVisionConfig as Gemma-3 ships it.
        "gemma3" => {
            let size = field(v, "image_size", 896);
            Some(ImageInput {
                model_type: "gemma3",
                rule: TokenRule::Fixed {
                    tokens: field(outer, "mm_tokens_per_image", 256),
                },
                native: Some((size, size)),
                patch: field(v, "patch_size", 14),
                hidden: field(v, "hidden_size", 1152),
                heads: field(v, "num_attention_heads", 16),
                intermediate: field(v, "intermediate_size", 4304),
                extra_positions: 0,
                batched_attention: true,
                held_per_token: 0,
                rotary_fp32: false,
                gated_mlp: false,
                one_sequence: false,
            })
        }
        // Qwen2_5_VLVisionConfig (hidden_size 1280 in the published configs; the class default
        // is 3584) and Qwen2-VL's (embed_dim, mlp_ratio 4).
        "qwen2_5_vl" | "qwen2_vl" => {
            let qwen2 = model_type == "qwen2_vl";
            let hidden = if qwen2 {
                field(v, "embed_dim", 1280)
            } else {
                field(v, "hidden_size", 1280)
            };
            let intermediate = if qwen2 {
                hidden.saturating_mul(field(v, "mlp_ratio", 4))
            } else {
                field(v, "intermediate_size", 3420)
            };
            let patch = field(v, "patch_size", 14);
            let merge = field(v, "spatial_merge_size", 2);
            Some(ImageInput {
                model_type: if qwen2 { "qwen2_vl" } else { "qwen2_5_vl" },
                rule: TokenRule::Dynamic {
                    patch,
                    merge,
                    min_pixels: 56 * 56,
                    max_pixels: 28 * 28 * 1280,
                },
                native: None,
                patch,
                hidden,
                heads: field(v, "num_heads", 16),
                intermediate,
                extra_positions: 0,
                batched_attention: false,
                held_per_token: 0,
                rotary_fp32: true,
                gated_mlp: !qwen2,
                one_sequence: false,
            })
        }
        // Qwen3VLVisionConfig / Qwen3_5VisionConfig (hidden_size 1152, intermediate_size 4304,
        // num_heads 16, patch_size 16, spatial_merge_size 2), and the processor's size as the
        // published preprocessor_config.json sets it (the class defaults are Qwen2-VL's).
        "qwen3_vl" | "qwen3_vl_moe" | "qwen3_5" | "qwen3_5_moe" => {
            let patch = field(v, "patch_size", 16);
            let merge = field(v, "spatial_merge_size", 2);
            // the class default is (8, 16, 24); Qwen3.5's configs set [].
            let deepstack = match v.get("deepstack_visual_indexes") {
                Some(Value::Array(a)) => a.len() as u64,
                _ => 3,
            };
            Some(ImageInput {
                model_type: match model_type {
                    "qwen3_vl" => "qwen3_vl",
                    "qwen3_vl_moe" => "qwen3_vl_moe",
                    "qwen3_5" => "qwen3_5",
                    _ => "qwen3_5_moe",
                },
                rule: TokenRule::Dynamic {
                    patch,
                    merge,
                    min_pixels: 256 * 256,
                    max_pixels: 4096 * 4096,
                },
                native: None,
                patch,
                hidden: field(v, "hidden_size", 1152),
                heads: field(v, "num_heads", 16),
                intermediate: field(v, "intermediate_size", 4304),
                extra_positions: 0,
                batched_attention: false,
                held_per_token: deepstack.saturating_mul(field(v, "out_hidden_size", 3584)),
                rotary_fp32: true,
                gated_mlp: false,
                one_sequence: false,
            })
        }
        // Mistral3Config (Mistral-Small-3.1/3.2: its PixtralVisionConfig defaults image_size
        // 1540, patch_size 14, and the top level's spatial_merge_size 2), LlavaConfig with a
        // Pixtral tower (Pixtral-12B: 1024, 16, no merge) and a bare PixtralVisionConfig.
        "mistral3" => Some(pixtral(
            v,
            field(outer, "spatial_merge_size", 2),
            "mistral3",
        )),
        "llava" if v.get("model_type").and_then(Value::as_str) == Some("pixtral") => {
            Some(pixtral(v, 1, "llava"))
        }
        "pixtral" => Some(pixtral(outer, 1, "pixtral")),
        // Llama4VisionConfig (hidden_size 768, intermediate_size 5632, num_attention_heads 16,
        // image_size 448, patch_size 14, pixel_shuffle_ratio 0.5; Llama-4-Scout/Maverick ship
        // 1408 and 336) and the processor's max_patches 16. Tokens a tile: (image_size /
        // patch_size)² / round(1 / ratio²), 144 for 336 / 14. The tower runs the tiles as one
        // batch of 1 + patches positions (its CLS), its rotary embedding in float32
        // (`vision_apply_rotary_emb`), a plain fc1 / fc2 MLP.
        "llama4" => {
            let tile = field(v, "image_size", 448);
            let patch = field(v, "patch_size", 14);
            let ratio = v
                .get("pixel_shuffle_ratio")
                .and_then(Value::as_f64)
                .filter(|r| *r > 0.0 && *r <= 1.0)
                .unwrap_or(0.5);
            let downsample = ((1.0 / (ratio * ratio)).round() as u64).max(1);
            let side = tile / patch.max(1);
            Some(ImageInput {
                model_type: "llama4",
                rule: TokenRule::Tiles {
                    tile,
                    max_tiles: 16,
                    tokens_per_tile: side.saturating_mul(side) / downsample,
                    canvas: Canvas::Llama4,
                },
                native: None,
                patch,
                hidden: field(v, "hidden_size", 768),
                heads: field(v, "num_attention_heads", 16),
                intermediate: field(v, "intermediate_size", 5632),
                extra_positions: 1,
                batched_attention: true,
                held_per_token: 0,
                rotary_fp32: true,
                gated_mlp: false,
                one_sequence: false,
            })
        }
        // InternVLConfig / InternVLVisionConfig (hidden_size 1024, intermediate_size 4096,
        // num_attention_heads 16, image_size and patch_size [448, 448] / [14, 14]) and the
        // top level's downsample_ratio 0.5: `InternVLProcessor`'s image_seq_length is
        // (448 / 14)² × 0.5² = 256 a tile, max_patches 12 (`GotOcr2ImageProcessor`). The tower is
        // a ViT over 1 + patches positions a tile (its CLS), the tiles as one batch, fc1 / fc2.
        "internvl" => {
            let tile = side_field(v, "image_size", 448);
            let patch = side_field(v, "patch_size", 14);
            let ratio = outer
                .get("downsample_ratio")
                .and_then(Value::as_f64)
                .filter(|r| *r > 0.0 && *r <= 1.0)
                .unwrap_or(0.5);
            let side = tile / patch.max(1);
            let tokens = (side.saturating_mul(side) as f64 * ratio * ratio) as u64;
            Some(ImageInput {
                model_type: "internvl",
                rule: TokenRule::Tiles {
                    tile,
                    max_tiles: 12,
                    tokens_per_tile: tokens,
                    canvas: Canvas::InternVl,
                },
                native: None,
                patch,
                hidden: field(v, "hidden_size", 1024),
                heads: field(v, "num_attention_heads", 16),
                intermediate: field(v, "intermediate_size", 4096),
                extra_positions: 1,
                batched_attention: true,
                held_per_token: 0,
                rotary_fp32: false,
                gated_mlp: false,
                one_sequence: false,
            })
        }
        // Phi4MultimodalConfig / Phi4MultimodalVisionConfig (a SigLIP: hidden_size 1152,
        // intermediate_size 4304, num_attention_heads 16, image_size (crop_size) 448,
        // patch_size 14) and the processor's dynamic_hd 36. The tower runs every crop (the global
        // one and the grid's) as one batch of 32² positions.
        "phi4_multimodal" => {
            let tile = field(v, "crop_size", field(v, "image_size", 448));
            Some(ImageInput {
                model_type: "phi4_multimodal",
                rule: TokenRule::Tiles {
                    tile,
                    max_tiles: 36,
                    tokens_per_tile: 256,
                    canvas: Canvas::Phi4,
                },
                native: None,
                patch: field(v, "patch_size", 14),
                hidden: field(v, "hidden_size", 1152),
                heads: field(v, "num_attention_heads", 16),
                intermediate: field(v, "intermediate_size", 4304),
                extra_positions: 0,
                batched_attention: true,
                held_per_token: 0,
                rotary_fp32: false,
                gated_mlp: false,
                one_sequence: false,
            })
        }
        // Phi3VConfig (remote code): the `img_processor` is clip-vit-large-patch14-336 (hidden
        // 1024, intermediate 4096, 16 heads, 336/14, a CLS) whatever else the config says — the
        // modeling code refuses any other — and `num_img_tokens` (144) a crop; `num_crops` is the
        // processor's (preprocessor_config.json: 4 for Phi-3.5-vision, the config has none).
        "phi3_v" => {
            let img = match outer.get("img_processor") {
                Some(Value::Object(o)) => o,
                _ => return None,
            };
            let clip = img.get("name").and_then(Value::as_str) == Some("clip_vision_model")
                && img.get("model_name").and_then(Value::as_str)
                    == Some("openai/clip-vit-large-patch14-336");
            if !clip {
                return None;
            }
            Some(ImageInput {
                model_type: "phi3_v",
                rule: TokenRule::Tiles {
                    tile: 336,
                    max_tiles: 4,
                    tokens_per_tile: field(img, "num_img_tokens", 144),
                    canvas: Canvas::Phi3V,
                },
                native: None,
                patch: 14,
                hidden: 1024,
                heads: 16,
                intermediate: 4096,
                extra_positions: 1,
                batched_attention: true,
                held_per_token: 0,
                rotary_fp32: false,
                gated_mlp: false,
                one_sequence: false,
            })
        }
        // LlavaNextConfig (configuration_llava_next.py): its CLIPVisionConfig (336/14 when it has
        // none), `image_grid_pinpoints` (the class's five canvases when absent; the processor
        // reads its own preprocessor_config.json's, the same list in the published checkpoints)
        // and `vision_feature_select_strategy` (`default` drops the CLS, `full` keeps it). CLIP
        // runs the 1 + rows × columns crops as one batch of 1 + (336/14)² positions each.
        "llava_next" => {
            let tile = field(v, "image_size", 336);
            let patch = field(v, "patch_size", 14);
            let default_pinpoints =
                serde_json::json!([[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]);
            let pinpoints = match outer.get("image_grid_pinpoints") {
                None | Some(Value::Null) => Pinpoints::read(&default_pinpoints, tile)?,
                Some(given) => Pinpoints::read(given, tile)?,
            };
            let full = outer
                .get("vision_feature_select_strategy")
                .and_then(Value::as_str)
                == Some("full");
            Some(ImageInput {
                model_type: "llava_next",
                rule: TokenRule::AnyRes {
                    tile,
                    patch,
                    base_extra: u64::from(full),
                    pinpoints,
                },
                native: None,
                patch,
                hidden: field(v, "hidden_size", 1024),
                heads: field(v, "num_attention_heads", 16),
                intermediate: field(v, "intermediate_size", 4096),
                extra_positions: 1,
                batched_attention: true,
                held_per_token: 0,
                rotary_fp32: false,
                gated_mlp: false,
                one_sequence: false,
            })
        }
        // LlavaConfig's CLIPVisionConfig (336/14 for llava-1.5).
        "llava" => {
            let size = field(v, "image_size", 336);
            let patch = field(v, "patch_size", 14);
            let side = size / patch.max(1);
            Some(ImageInput {
                model_type: "llava",
                rule: TokenRule::Fixed {
                    tokens: side.saturating_mul(side),
                },
                native: Some((size, size)),
                patch,
                hidden: field(v, "hidden_size", 1024),
                heads: field(v, "num_attention_heads", 16),
                intermediate: field(v, "intermediate_size", 4096),
                extra_positions: 1,
                batched_attention: true,
                held_per_token: 0,
                rotary_fp32: false,
                gated_mlp: false,
                one_sequence: false,
            })
        }
        _ => None,
    }
}

/// A side given as one number or as [height, width] (InternVL's vision config): its first.
fn side_field(v: &Map<String, Value>, key: &str, default: u64) -> u64 {
    match v.get(key) {
        Some(Value::Array(a)) => a
            .first()
            .and_then(Value::as_u64)
            .filter(|&n| n > 0 && n <= 1 << 20)
            .unwrap_or(default),
        _ => field(v, key, default),
    }
}

/// `Llama4ImageProcessor`'s grid (rows, columns) for an image of (height, width):
/// `find_supported_resolutions` lists every rows × columns with at most `max_tiles` tiles (in
/// its dictionary's order), `get_best_fit` takes the least upscale at or above 1 (else the
/// largest downscale), float32 as torch computes it, and among equal scales the smallest area,
/// the first on a tie.
fn llama4_grid(height: u64, width: u64, tile: u64, max_tiles: u64) -> (u64, u64) {
    let mut groups: Vec<(f64, Vec<(u64, u64)>)> = Vec::new();
    for chunks in (1..=max_tiles.max(1)).rev() {
        for a in (1..=chunks).filter(|a| chunks % a == 0) {
            let b = chunks / a;
            let ratio = a as f64 / b as f64;
            match groups.iter_mut().find(|(r, _)| *r == ratio) {
                Some((_, g)) => g.push((a, b)),
                None => groups.push((ratio, vec![(a, b)])),
            }
        }
    }
    let grids: Vec<(u64, u64)> = groups.into_iter().flat_map(|(_, g)| g).collect();
    let (oh, ow) = (height.max(1) as f32, width.max(1) as f32);
    let t = tile.max(1);
    let scale = |&(a, b): &(u64, u64)| {
        let sh = a.saturating_mul(t) as f32 / oh;
        let sw = b.saturating_mul(t) as f32 / ow;
        if sh > sw {
            sw
        } else {
            sh
        }
    };
    let up = grids
        .iter()
        .map(scale)
        .filter(|s| *s >= 1.0)
        .fold(None, |m: Option<f32>, s| Some(m.map_or(s, |m| m.min(s))));
    let chosen = up.unwrap_or_else(|| {
        grids
            .iter()
            .map(scale)
            .filter(|s| *s < 1.0)
            .fold(f32::MIN, f32::max)
    });
    grids
        .iter()
        .filter(|g| scale(g) == chosen)
        .fold(None, |best: Option<(u64, u64)>, &g| match best {
            Some(b) if b.0 * b.1 <= g.0 * g.1 => Some(b),
            _ => Some(g),
        })
        .unwrap_or((1, 1))
}

/// `select_best_resolution` (transformers 5.17 `image_processing_utils.py`): the canvas
/// (height, width) of `pinpoints` that keeps the most of an image of (height, width) once it is
/// fit inside (`int` of each side times the float scale), ties to the one wasting the fewest
/// pixels, then to the first.
fn select_best_resolution(height: u64, width: u64, pinpoints: &[(u64, u64)]) -> (u64, u64) {
    let (oh, ow) = (height.max(1), width.max(1));
    let original = oh.saturating_mul(ow);
    let mut best = None;
    let (mut max_effective, mut min_wasted) = (0u64, u64::MAX);
    for &(h, w) in pinpoints {
        let scale = (w as f64 / ow as f64).min(h as f64 / oh as f64);
        let (dw, dh) = ((ow as f64 * scale) as u64, (oh as f64 * scale) as u64);
        let effective = dw.saturating_mul(dh).min(original);
        let wasted = w.saturating_mul(h).saturating_sub(effective);
        if effective > max_effective || (effective == max_effective && wasted < min_wasted) {
            max_effective = effective;
            min_wasted = wasted;
            best = Some((h, w));
        }
    }
    best.unwrap_or((oh, ow))
}

/// `LlavaNextProcessor._get_number_of_features` and `_get_unpadded_features`
/// (`models/llava_next/processing_llava_next.py`, 5.17) for an image of (height, width), with
/// the `default` strategy's CLS dropped: the canvas (height, width), its crops (the base one
/// included, as `image_size_to_num_patches` counts them) and the image's tokens.
fn anyres(
    height: u64,
    width: u64,
    tile: u64,
    patch: u64,
    base_extra: u64,
    pinpoints: &[(u64, u64)],
) -> ((u64, u64), u64, u64) {
    let (oh, ow) = (height.max(1), width.max(1));
    let t = tile.max(1);
    let (bh, bw) = select_best_resolution(oh, ow, pinpoints);
    let (sh, sw) = (bh / t, bw / t);
    let side = t / patch.max(1);
    let (mut ch, mut cw) = (side.saturating_mul(sh), side.saturating_mul(sw));
    // Python's `int(round(x, 7))`: to 7 decimals, then toward zero.
    let round7 = |x: f64| ((x * 1e7).round() / 1e7) as u64;
    if ch > 0 && cw > 0 {
        if ow as f64 / oh as f64 > cw as f64 / ch as f64 {
            let new_h = round7(oh as f64 * (cw as f64 / ow as f64));
            ch = ch.saturating_sub(ch.saturating_sub(new_h) / 2 * 2);
        } else {
            let new_w = round7(ow as f64 * (ch as f64 / oh as f64));
            cw = cw.saturating_sub(cw.saturating_sub(new_w) / 2 * 2);
        }
    }
    let tokens = ch
        .saturating_mul(cw)
        .saturating_add(ch)
        .saturating_add(side.saturating_mul(side))
        .saturating_add(base_extra);
    let crops = sh.saturating_mul(sw).saturating_add(1);
    ((bh, bw), crops, tokens)
}

/// `get_optimal_tiled_canvas` (`models/got_ocr2/image_processing_pil_got_ocr2.py`) for InternVL:
/// (rows, columns) for an image of (height, width), between 1 and `max_tiles` tiles.
fn internvl_grid(height: u64, width: u64, tile: u64, max_tiles: u64) -> (u64, u64) {
    let max = max_tiles.max(1);
    let mut grids: Vec<(u64, u64)> = (1..=max)
        .flat_map(|w| (1..=max).map(move |h| (w, h)))
        .filter(|(w, h)| w * h <= max)
        .collect();
    // Python's sorted is stable, as is sort_by_key.
    grids.sort_by_key(|(w, h)| w * h);
    let (h, w) = (height.max(1) as f64, width.max(1) as f64);
    let aspect = w / h;
    let area = w * h;
    let t = tile as f64;
    let mut best_diff = f64::INFINITY;
    let mut best = (1, 1);
    for (gw, gh) in grids {
        let diff = (aspect - gw as f64 / gh as f64).abs();
        if diff < best_diff {
            best_diff = diff;
            best = (gw, gh);
        } else if diff == best_diff && area > 0.5 * t * t * (gw * gh) as f64 {
            best = (gw, gh);
        }
    }
    (best.1, best.0)
}

/// `Phi4MultimodalImageProcessor.dynamic_preprocess` and `_preprocess` for an image of
/// (height, width): the grid (rows, columns) and the image's tokens. The padding mask is
/// `tile / patch` cells a crop side; a pad of at least one patch blanks ⌊pad / patch⌋ of its last
/// rows (or columns); the mask's even rows and columns kept give R × C, and the tokens are
/// 256 + 1 + R × C + R + 16. Among grids of one area, Python's `sorted` over a set keeps the
/// set's order, which this walks width-major; an aspect-ratio tie between two such grids could
/// differ.
fn phi4_grid(height: u64, width: u64, tile: u64, patch: u64, max_tiles: u64) -> (u64, u64, u64) {
    let (oh, ow) = (height.max(1), width.max(1));
    let t = tile.max(1);
    let p = patch.max(1);
    let (cw, ch) = (ow.div_ceil(t), oh.div_ceil(t));
    let (rows, cols) = if cw.saturating_mul(ch) > max_tiles {
        internvl_grid(oh, ow, t, max_tiles)
    } else {
        (ch, cw)
    };
    let (tw, th) = (cols.saturating_mul(t), rows.saturating_mul(t));
    let rw = tw as f64 / ow as f64;
    let rh = th as f64 / oh as f64;
    let (pad_w, pad_h) = if rw < rh {
        (0, th.saturating_sub((oh as f64 * rw) as u64))
    } else {
        (tw.saturating_sub((ow as f64 * rh) as u64), 0)
    };
    let mask = t / p;
    let blank = |pad: u64| if pad >= p { pad / p } else { 0 };
    let kept_rows = mask.saturating_mul(rows).saturating_sub(blank(pad_h));
    let kept_cols = mask.saturating_mul(cols).saturating_sub(blank(pad_w));
    let (r, c) = (kept_rows.div_ceil(2), kept_cols.div_ceil(2));
    let tokens = r
        .saturating_mul(c)
        .saturating_add(r)
        .saturating_add(256 + 1 + 16);
    (rows, cols, tokens)
}

/// Phi-3.5-vision's `HD_transform` (the checkpoint's `image_processing_phi3_v.py`, vLLM's
/// `calc_hd_transform_size` in vllm/model_executor/models/phi3v.py) for an image of (height,
/// width) and `hd_num` crops: the grid (rows, columns) of `tile` px crops of the padded image.
/// A portrait image is transposed first and back after; the width becomes the largest
/// `scale` × tile with scale · ⌈scale / ratio⌉ ≤ `hd_num`, the height `int` of width / ratio,
/// padded up to whole tiles (at least one: a sliver the processor could not resize to a pixel
/// still gets one row).
fn phi3v_grid(height: u64, width: u64, tile: u64, hd_num: u64) -> (u64, u64) {
    let (h, w) = (height.max(1), width.max(1));
    let t = tile.max(1);
    let (long, short, transposed) = if w < h { (h, w, true) } else { (w, h, false) };
    let ratio = long as f64 / short as f64;
    // scale · ⌈scale / ratio⌉ ≥ scale, so the search ends by hd_num + 1
    let scale = (1..=hd_num.max(1).saturating_add(1))
        .find(|&s| s as f64 * (s as f64 / ratio).ceil() > hd_num as f64)
        .map_or(1, |s| s.saturating_sub(1))
        .max(1);
    let new_w = scale.saturating_mul(t);
    let new_h = (new_w as f64 / ratio) as u64;
    let rows = new_h.div_ceil(t).max(1);
    if transposed {
        (scale, rows)
    } else {
        (rows, scale)
    }
}

/// A Pixtral tower (`models/pixtral/configuration_pixtral.py`, `PixtralVisionConfig`: hidden_size
/// 1024, intermediate_size 4096, num_attention_heads 16, image_size 1024, patch_size 16) and its
/// processor (`models/pixtral/processing_pixtral.py`, `PixtralProcessor`, which hands the image
/// processor patch_size × spatial_merge_size): the published preprocessor configs' longest_edge
/// is the tower's image_size (1540 for Mistral-Small-3.1, 1024 for Pixtral-12B).
fn pixtral(v: &Map<String, Value>, merge: u64, model_type: &'static str) -> ImageInput {
    let patch = field(v, "patch_size", 16);
    ImageInput {
        model_type,
        rule: TokenRule::Rows {
            patch,
            merge,
            longest_edge: field(v, "image_size", 1024),
        },
        native: None,
        patch,
        hidden: field(v, "hidden_size", 1024),
        heads: field(v, "num_attention_heads", 16),
        intermediate: field(v, "intermediate_size", 4096),
        extra_positions: 0,
        batched_attention: true,
        held_per_token: 0,
        rotary_fp32: false,
        gated_mlp: true,
        one_sequence: true,
    }
}

/// Pixtral's `get_resize_output_image_size` (`models/pixtral/image_processing_pil_pixtral.py`,
/// 5.17.0): with ratio = max(H / L, W / L) above 1 each side becomes ⌊side / ratio⌋; then each is
/// rounded up to a multiple of `cell`. (height, width) in, (height, width) out.
pub fn pixtral_resize(height: u64, width: u64, longest_edge: u64, cell: u64) -> (u64, u64) {
    let (h, w) = (height.max(1), width.max(1));
    let l = longest_edge.max(1) as f64;
    let ratio = (h as f64 / l).max(w as f64 / l);
    let (h, w) = if ratio > 1.0 {
        (
            (h as f64 / ratio).floor() as u64,
            (w as f64 / ratio).floor() as u64,
        )
    } else {
        (h, w)
    };
    let cell = cell.max(1);
    let up = |n: u64| (n.saturating_sub(1) / cell + 1).saturating_mul(cell);
    (up(h), up(w))
}

/// Python's `round(n / d)` for integers: half to even, as `smart_resize` rounds.
fn round_half_even(n: u64, d: u64) -> u64 {
    let (q, r) = (n / d, n % d);
    match (2 * r).cmp(&d) {
        std::cmp::Ordering::Greater => q + 1,
        std::cmp::Ordering::Equal => q + (q & 1),
        std::cmp::Ordering::Less => q,
    }
}

/// transformers' `smart_resize` (`models/qwen2_vl/image_processing_qwen2_vl.py`, 5.17.0):
/// (height, width) resized to multiples of `factor` with min_pixels ≤ H·W ≤ max_pixels.
/// `height` and `width` are 1..=`MAX_SIDE`.
pub fn smart_resize(
    height: u64,
    width: u64,
    factor: u64,
    min_pixels: u64,
    max_pixels: u64,
) -> (u64, u64) {
    let factor = factor.max(1);
    let (h, w) = (height.max(1), width.max(1));
    let h_bar = round_half_even(h, factor).saturating_mul(factor);
    let w_bar = round_half_even(w, factor).saturating_mul(factor);
    let (hf, wf, ff) = (h as f64, w as f64, factor as f64);
    if h_bar.saturating_mul(w_bar) > max_pixels {
        let beta = (hf * wf / max_pixels as f64).sqrt();
        let h_bar = factor.max(((hf / beta / ff).floor() as u64).saturating_mul(factor));
        let w_bar = factor.max(((wf / beta / ff).floor() as u64).saturating_mul(factor));
        (h_bar, w_bar)
    } else if h_bar.saturating_mul(w_bar) < min_pixels {
        let beta = (min_pixels as f64 / (hf * wf)).sqrt();
        (
            ((hf * beta / ff).ceil() as u64).saturating_mul(factor),
            ((wf * beta / ff).ceil() as u64).saturating_mul(factor),
        )
    } else {
        (h_bar, w_bar)
    }
}

impl ImageInput {
    /// One image of `size` (height, width; `None`: the native size, or for a dynamic rule the
    /// largest image the processor keeps, `max_pixels`).
    pub fn cost(&self, size: Option<(u64, u64)>) -> ImageCost {
        match self.rule {
            TokenRule::Fixed { tokens } => {
                let (h, w) = self.native.unwrap_or((0, 0));
                let p = self.patch.max(1);
                ImageCost {
                    height: h,
                    width: w,
                    encoder_positions: (h / p)
                        .saturating_mul(w / p)
                        .saturating_add(self.extra_positions),
                    tokens,
                }
            }
            TokenRule::Dynamic {
                patch,
                merge,
                min_pixels,
                max_pixels,
            } => {
                let factor = patch.saturating_mul(merge).max(1);
                let (h, w) = match size {
                    Some((h, w)) => smart_resize(h, w, factor, min_pixels, max_pixels),
                    // The most tokens the processor gives one image: max_pixels / factor², as a
                    // (factor·a) × (factor·b) image with a·b at most that.
                    None => {
                        let cells = max_pixels / factor.saturating_mul(factor);
                        let a = (1..=cells.isqrt().max(1))
                            .rev()
                            .find(|a| cells % a == 0)
                            .unwrap_or(1);
                        (a.saturating_mul(factor), (cells / a).saturating_mul(factor))
                    }
                };
                let p = patch.max(1);
                let m = merge.max(1);
                ImageCost {
                    height: h,
                    width: w,
                    encoder_positions: (h / p).saturating_mul(w / p),
                    tokens: (h / p / m).saturating_mul(w / p / m),
                }
            }
            TokenRule::Rows {
                patch,
                merge,
                longest_edge,
            } => {
                let cell = patch.saturating_mul(merge).max(1);
                // no size: the largest image kept, longest_edge on both sides.
                let (h, w) = size.unwrap_or((longest_edge, longest_edge));
                let (h, w) = pixtral_resize(h, w, longest_edge, cell);
                let p = patch.max(1);
                let (rows, cols) = (h / cell, w / cell);
                ImageCost {
                    height: h,
                    width: w,
                    encoder_positions: (h / p).saturating_mul(w / p),
                    // `_get_num_multimodal_tokens`: (cols + 1) × rows, the break or end per row.
                    tokens: rows.saturating_mul(cols.saturating_add(1)),
                }
            }
            TokenRule::Tiles {
                tile,
                max_tiles,
                tokens_per_tile,
                canvas,
            } => {
                let (rows, cols) = match (size, canvas) {
                    (Some((h, w)), Canvas::Llama4) => llama4_grid(h, w, tile, max_tiles),
                    (Some((h, w)), Canvas::InternVl) => internvl_grid(h, w, tile, max_tiles),
                    (Some((h, w)), Canvas::Phi4) => {
                        let (r, c, _) = phi4_grid(h, w, tile, self.patch, max_tiles);
                        (r, c)
                    }
                    (Some((h, w)), Canvas::Phi3V) => phi3v_grid(h, w, tile, max_tiles),
                    // no size, Phi-4 and Phi-3.5-vision: the most tokens, a column of crops (one
                    // token more a row); Phi-3.5-vision's is vLLM's
                    // `get_image_size_with_most_features`, an image 160 times taller than wide.
                    (None, Canvas::Phi4 | Canvas::Phi3V) => (max_tiles.max(1), 1),
                    // no size: a grid of the most tiles, as near square as they divide.
                    (None, _) => {
                        let n = max_tiles.max(1);
                        let a = (1..=n.isqrt().max(1))
                            .rev()
                            .find(|a| n % a == 0)
                            .unwrap_or(1);
                        (a, n / a)
                    }
                };
                let grid = rows.saturating_mul(cols);
                let tiles = match canvas {
                    // padded to num_crops + 1 for the encoder, whatever the grid
                    Canvas::Phi3V => max_tiles.saturating_add(1),
                    Canvas::Phi4 => grid.saturating_add(1),
                    _ if grid > 1 => grid.saturating_add(1),
                    _ => 1,
                };
                let per = tokens_per_tile;
                let tokens = match canvas {
                    // start, <|image|>, end, the global tile; each grid tile and its separator
                    Canvas::Llama4 => {
                        let tiled = if grid > 1 {
                            grid.saturating_mul(per.saturating_add(1))
                        } else {
                            0
                        };
                        per.saturating_add(3).saturating_add(tiled)
                    }
                    // <img>, the tiles, </img>
                    Canvas::InternVl => tiles.saturating_mul(per).saturating_add(2),
                    // the grid and the global crop, glb_GN, one sub_GN a merged row of each
                    Canvas::Phi3V => {
                        let half = (tile / self.patch.max(1)) / 2;
                        grid.saturating_add(1)
                            .saturating_mul(per)
                            .saturating_add(1)
                            .saturating_add(rows.saturating_add(1).saturating_mul(half))
                    }
                    Canvas::Phi4 => match size {
                        Some((h, w)) => phi4_grid(h, w, tile, self.patch, max_tiles).2,
                        // an image filling the canvas: no padding
                        None => {
                            let half = (tile / self.patch.max(1)).div_ceil(2);
                            let r = half.saturating_mul(rows);
                            r.saturating_mul(half.saturating_mul(cols))
                                .saturating_add(r)
                                .saturating_add(256 + 1 + 16)
                        }
                    },
                };
                ImageCost {
                    height: rows.saturating_mul(tile),
                    width: cols.saturating_mul(tile),
                    encoder_positions: tiles.saturating_mul(self.tile_positions()),
                    tokens,
                }
            }
            TokenRule::AnyRes {
                tile,
                patch,
                base_extra,
                pinpoints,
            } => {
                let canvases = pinpoints.to_vec();
                let at = |(h, w)| anyres(h, w, tile, patch, base_extra, &canvases);
                let ((h, w), crops, tokens) = match size {
                    Some(s) => at(s),
                    // no size: the most tokens, an image the size of the best canvas for it
                    // (vLLM's `get_image_size_with_most_features` walks the same pinpoints).
                    None => canvases
                        .iter()
                        .map(|&p| at(p))
                        .fold(None, |best: Option<((u64, u64), u64, u64)>, c| match best {
                            Some(b) if b.2 >= c.2 => Some(b),
                            _ => Some(c),
                        })
                        .unwrap_or_else(|| at((tile, tile))),
                };
                ImageCost {
                    height: h,
                    width: w,
                    encoder_positions: crops.saturating_mul(self.tile_positions()),
                    tokens,
                }
            }
        }
    }

    /// The vision encoder's peak transient bytes for `images` images of `cost` at once, in a
    /// compute dtype of `d` bytes; `eager` holds the attention's score matrix.
    pub fn encoder_bytes(&self, cost: &ImageCost, images: u64, d: u64, eager: bool) -> u64 {
        if let TokenRule::Tiles { .. } | TokenRule::AnyRes { .. } = self.rule {
            // a tiled tower encodes each tile (LLaVA-NeXT: each crop) as one image of the batch
            let per_tile = self.tile_positions().max(1);
            let tile = ImageCost {
                encoder_positions: per_tile,
                tokens: 0,
                ..*cost
            };
            let tiles = images.saturating_mul(cost.encoder_positions / per_tile);
            return self.encoder_bytes_of(&tile, tiles, d, eager);
        }
        self.encoder_bytes_of(cost, images, d, eager)
    }

    /// Positions one tile gives the encoder: its patches and the CLS.
    fn tile_positions(&self) -> u64 {
        match self.rule {
            TokenRule::Tiles { tile, .. } | TokenRule::AnyRes { tile, .. } => {
                let side = tile / self.patch.max(1);
                side.saturating_mul(side)
                    .saturating_add(self.extra_positions)
            }
            _ => 0,
        }
    }

    fn encoder_bytes_of(&self, cost: &ImageCost, images: u64, d: u64, eager: bool) -> u64 {
        let s = cost.encoder_positions;
        let stream = images.saturating_mul(s).saturating_mul(self.hidden);
        if self.one_sequence {
            return self.one_sequence_bytes(s, images, d, eager);
        }
        let scores = if eager {
            let at_once = if self.batched_attention { images } else { 1 };
            // the scores in the compute dtype and their float32 softmax
            at_once
                .saturating_mul(self.heads)
                .saturating_mul(s.saturating_mul(s))
                .saturating_mul(d.saturating_add(4))
        } else {
            0
        };
        // Copies of the residual stream alive at each peak. SigLIP/CLIP: the embeddings' output
        // (the vision model's frame keeps it through the encoder), the layer's input (the encoder's
        // loop keeps it), then in attention layer_norm1's output, in the MLP the post-attention
        // residual and layer_norm2's output. Qwen reassigns the patch embedding's output (its
        // window reorder is a copy), so one fewer. Measured on the H200 (transformers 5.17,
        // docs/calibration/vlm-images-h200-2026-12-06.jsonl): Gemma-3's SigLIP, 4 images of 896²,
        // 433,061,888 B above what was allocated before, this rule's figure to the byte.
        let (held_attention, held_mlp) = if self.rotary_fp32 { (2, 3) } else { (3, 4) };
        // q, k and v (one qkv tensor in Qwen), and in SigLIP/CLIP the attention's output.
        let projections = if self.rotary_fp32 { 3 } else { 4 };
        // Qwen's rotary in float32: q and k cast, q's embedding, and while k's is computed
        // `k * cos`, `rotate_half(k)` and `rotate_half(k) * sin` — six float32 copies of the stream.
        let rotary = if self.rotary_fp32 {
            stream.saturating_mul(6 * 4)
        } else {
            0
        };
        let attention = stream
            .saturating_mul(held_attention + projections)
            .saturating_mul(d)
            .saturating_add(rotary)
            .saturating_add(scores);
        let inner = if self.gated_mlp { 3 } else { 2 };
        let mlp = stream
            .saturating_mul(held_mlp)
            .saturating_mul(d)
            .saturating_add(
                images
                    .saturating_mul(s)
                    .saturating_mul(self.intermediate)
                    .saturating_mul(inner)
                    .saturating_mul(d),
            );
        let held = images
            .saturating_mul(cost.tokens)
            .saturating_mul(self.held_per_token)
            .saturating_mul(d);
        attention.max(mlp).saturating_add(held)
    }

    /// Pixtral's tower (`models/pixtral/modeling_pixtral.py`, `PixtralVisionModel`): every image's
    /// `s` patches are one sequence of n = images × s positions, and outside flash attention
    /// `generate_block_attention_mask` builds an n × n mask in the compute dtype that lives through
    /// every block. Held beside it at the attention's peak: the patch conv's output (the
    /// `patch_embeds_list` views keep it), `ln_pre`'s output, the layer's input and
    /// `attention_norm`'s output, with q, k, v and, while `apply_rotary_pos_emb` (in the compute
    /// dtype) makes k's embedding, q's embedding, `k * cos` and `rotate_half(k) * sin`: 4 + 6
    /// copies of the stream; eager adds heads × n² scores and their float32 softmax. At the MLP's:
    /// five copies (the post-attention residual and `ffn_norm`'s output for the last two) and the
    /// gated MLP's three intermediate tensors. Derived from the source, not measured on a GPU.
    fn one_sequence_bytes(&self, s: u64, images: u64, d: u64, eager: bool) -> u64 {
        let n = images.saturating_mul(s);
        let stream = n.saturating_mul(self.hidden);
        let mask = n.saturating_mul(n).saturating_mul(d);
        let scores = if eager {
            self.heads
                .saturating_mul(n.saturating_mul(n))
                .saturating_mul(d.saturating_add(4))
        } else {
            0
        };
        let attention = stream
            .saturating_mul(10)
            .saturating_mul(d)
            .saturating_add(scores);
        let mlp = stream.saturating_mul(5).saturating_mul(d).saturating_add(
            n.saturating_mul(self.intermediate)
                .saturating_mul(3)
                .saturating_mul(d),
        );
        attention.max(mlp).saturating_add(mask)
    }
}

/// llama.cpp's Qwen-VL limits (tools/mtmd/clip.cpp, `load_hparams`, projectors `qwen2vl_merger`,
/// `qwen2.5vl_merger`, `qwen3vl_merger`): `set_limit_image_tokens(8, 4096)`, from 8 to 4,096 tokens
/// an image, and `set_warmup_n_tokens(46*46)`, the graph reserved at load for a 2,116-token image.
pub const LLAMACPP_QWEN_MIN_TOKENS: u64 = 8;
pub const LLAMACPP_QWEN_MAX_TOKENS: u64 = 4096;
pub const LLAMACPP_QWEN_WARMUP_SIDE_TOKENS: u64 = 46;

impl ImageInput {
    /// The same tower as llama.cpp's `mtmd` sees it: Gemma-3 and LLaVA keep their fixed count
    /// (clip.cpp `clip_n_output_tokens`: (896/14)² / 4² = 256, (336/14)² = 576); Qwen-VL resizes
    /// to multiples of patch × merge between llama.cpp's own 8 and 4,096 tokens an image
    /// (`set_limit_image_tokens(8, 4096)`), not the transformers processor's `max_pixels`.
    pub fn for_llamacpp(self) -> ImageInput {
        let rule = match self.rule {
            TokenRule::Dynamic { patch, merge, .. } => {
                let area = patch.saturating_mul(merge).saturating_pow(2);
                TokenRule::Dynamic {
                    patch,
                    merge,
                    min_pixels: area.saturating_mul(LLAMACPP_QWEN_MIN_TOKENS),
                    max_pixels: area.saturating_mul(LLAMACPP_QWEN_MAX_TOKENS),
                }
            }
            fixed => fixed,
        };
        ImageInput { rule, ..self }
    }

    /// The image llama.cpp reserves its CLIP graph for at load (clip.cpp `warmup`: a dummy image
    /// of `warmup_image_size` square): the native size of a fixed rule, 46 × 46 merged tokens for
    /// Qwen-VL (`set_warmup_n_tokens(46*46)`).
    pub fn llamacpp_warmup(&self) -> ImageCost {
        match self.rule {
            // (plan refuses the tiled and row families with llama.cpp: their native size here)
            TokenRule::Fixed { .. }
            | TokenRule::Rows { .. }
            | TokenRule::Tiles { .. }
            | TokenRule::AnyRes { .. } => self.cost(None),
            TokenRule::Dynamic { patch, merge, .. } => {
                let side = LLAMACPP_QWEN_WARMUP_SIDE_TOKENS
                    .saturating_mul(merge)
                    .saturating_mul(patch);
                ImageCost {
                    height: side,
                    width: side,
                    encoder_positions: (LLAMACPP_QWEN_WARMUP_SIDE_TOKENS * merge).saturating_pow(2),
                    tokens: LLAMACPP_QWEN_WARMUP_SIDE_TOKENS.pow(2),
                }
            }
        }
    }

    /// llama.cpp's CLIP compute buffer (`alloc_compute_meta: CUDA0 compute buffer size`) for one
    /// image of `cost`: ggml-alloc's peak over the encoder graph, every activation float32.
    ///
    /// tools/mtmd/clip.cpp encodes one image per graph (`clip_image_build_graph`: "n_batch > 1
    /// is not supported"), so the buffer is one image's whatever `--images`; `warmup` reserves it
    /// for the warm-up image and `ggml_backend_sched_alloc_graph` only grows it for a larger one.
    /// `warmup` tries flash attention first (`CLIP_FLASH_ATTN_TYPE_AUTO`, kept where the backend
    /// runs `ggml_flash_attn_ext`, as CUDA does).
    ///
    /// - the MLP (`build_vit` / `build_ffn`): `n_pos × (k·n_ff + 3·n_embd) × 4` — the up
    ///   projection (and the gate's, for Qwen2.5-VL's SwiGLU: k = 2) beside three stream-wide
    ///   tensors (the residual, the normed input and the block that ggml-alloc cannot hand the
    ///   intermediate-wide tensor). Gemma-3's SigLIP at 896² gives 121.25 MiB, the CUDA0 buffer
    ///   llama.cpp printed for gemma-3-4b's mmproj (ggml-org/llama.cpp#22790);
    /// - the attention without flash attention: the f32 `KQ` scores of every head,
    ///   `n_head × n_pos² × 4` (`ggml_soft_max_ext` runs in place), beside five stream-wide
    ///   tensors (residual, Q, K, V made contiguous, the free block above); with flash attention
    ///   it stays under the MLP. LLaVA's CLIP ViT-L/14-336 gives 31.59 MiB, 4 % under the 32.89
    ///   MiB a 2024 clip.cpp printed for llava-v1.6-7b's mmproj (ollama/ollama#2706), the one
    ///   log found without flash attention;
    /// - Qwen2.5-VL's window attention (tools/mtmd/models/qwen2vl.cpp): the `window_mask` input,
    ///   `n_pos² × 4`, live through every layer, and with flash attention its f16 cast,
    ///   `n_pos² × 2`, beside it;
    /// - Qwen3-VL's DeepStack features, one f32 `projection_dim` vector a token per index.
    pub fn llamacpp_clip_bytes(&self, cost: &ImageCost, flash_attn: bool) -> u64 {
        let n = cost.encoder_positions;
        let f32_of = |values: u64| values.saturating_mul(4);
        let stream = n.saturating_mul(self.hidden);
        let k = if self.gated_mlp { 2 } else { 1 };
        let mlp = f32_of(
            n.saturating_mul(self.intermediate)
                .saturating_mul(k)
                .saturating_add(stream.saturating_mul(3)),
        );
        let attention = if flash_attn {
            0
        } else {
            f32_of(
                self.heads
                    .saturating_mul(n.saturating_mul(n))
                    .saturating_add(stream.saturating_mul(5)),
            )
        };
        let mask = if self.model_type == "qwen2_5_vl" {
            let per = if flash_attn { 4 + 2 } else { 4 };
            n.saturating_mul(n).saturating_mul(per)
        } else {
            0
        };
        let held = f32_of(cost.tokens.saturating_mul(self.held_per_token));
        mlp.max(attention).saturating_add(mask).saturating_add(held)
    }
}

/// `--image-size WxH` (width × height, as image tools say it): (height, width).
pub fn parse_size(s: &str) -> Result<(u64, u64), String> {
    let bad = || {
        format!(
            "--image-size {s}: give width x height in pixels, e.g. 1024x768 (each 1 to {MAX_SIDE})"
        )
    };
    let (w, h) = s.trim().split_once(['x', 'X', '×']).ok_or_else(bad)?;
    let side = |t: &str| {
        t.trim()
            .parse::<u64>()
            .ok()
            .filter(|&n| (1..=MAX_SIDE).contains(&n))
    };
    match (side(w), side(h)) {
        (Some(w), Some(h)) if w.max(h) / w.min(h) <= 200 => Ok((h, w)),
        (Some(_), Some(_)) => Err(format!(
            "--image-size {s}: the processor refuses an aspect ratio past 200:1"
        )),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> ImageInput {
        let v: Value = serde_json::from_str(text).unwrap();
        read(v.as_object().unwrap()).unwrap()
    }

    fn gemma3() -> ImageInput {
        config(include_str!("../../presets/gemma-3-27b-it.json"))
    }

    fn qwen25() -> ImageInput {
        config(
            r#"{"model_type":"qwen2_5_vl","vision_config":{"hidden_size":1280,"intermediate_size":3420,"num_heads":16,"patch_size":14,"spatial_merge_size":2,"out_hidden_size":3584}}"#,
        )
    }

    #[test]
    fn gemma3_gives_256_tokens_an_image_whatever_its_size() {
        let g = gemma3();
        let c = g.cost(Some((1024, 1024)));
        assert_eq!(c.tokens, 256);
        // 4 images: 4 × 256 = 1,024 prompt tokens
        assert_eq!(4 * c.tokens, 1024);
        // SigLIP at 896 px, 14 px patches: 64 × 64 = 4,096 positions
        assert_eq!(c.encoder_positions, 4096);
        assert_eq!((c.height, c.width), (896, 896));
    }

    #[test]
    fn qwen_resizes_as_smart_resize_does() {
        // 1024 / 28 = 36.57 → 37 → 1036; 1036² = 1,073,296 > 1,003,520 (28·28·1280), so
        // beta = sqrt(1024² / 1,003,520) = 1.02220, 1024 / 1.02220 / 28 = 35.78 → 35 → 980.
        assert_eq!(smart_resize(1024, 1024, 28, 3136, 1_003_520), (980, 980));
        let c = qwen25().cost(Some((1024, 1024)));
        // 980 / 14 = 70 patches a side, 4,900 patches; merged 2 × 2: 35 × 35 = 1,225 tokens
        assert_eq!((c.encoder_positions, c.tokens), (4900, 1225));
        // 448 × 448 stays (16 × 16 tokens); 10 × 10 grows to min_pixels: 56 × 56, 4 tokens
        assert_eq!(qwen25().cost(Some((448, 448))).tokens, 256);
        assert_eq!(smart_resize(10, 10, 28, 3136, 1_003_520), (56, 56));
        // half to even: 42 / 28 = 1.5 → 2, 14 / 28 = 0.5 → 0 (then min_pixels lifts it)
        assert_eq!(round_half_even(42, 28), 2);
        assert_eq!(round_half_even(14, 28), 0);
        // no size: the most the processor keeps, 1,280 tokens
        let most = qwen25().cost(None);
        assert_eq!(most.tokens, 1280);
        assert!(most.height * most.width <= 1_003_520);
    }

    fn qwen3_vl() -> ImageInput {
        config(include_str!("../../presets/qwen3-vl-30b-a3b-instruct.json"))
    }

    #[test]
    fn qwen3_resizes_to_multiples_of_32_within_256_and_4096_squared() {
        // 1024 / 32 = 32 exactly → 1024; 1024² = 1,048,576 is within 65,536 ..= 16,777,216, so
        // it stays: 64 × 64 = 4,096 patches of 16 px, merged 2 × 2: 32 × 32 = 1,024 tokens.
        assert_eq!(
            smart_resize(1024, 1024, 32, 65_536, 16_777_216),
            (1024, 1024)
        );
        let q = qwen3_vl();
        assert_eq!(q.model_type, "qwen3_vl_moe");
        let c = q.cost(Some((1024, 1024)));
        assert_eq!((c.height, c.width), (1024, 1024));
        assert_eq!((c.encoder_positions, c.tokens), (4096, 1024));
        // 3000 × 4000: 3000 / 32 = 93.75 → 94 → 3008, 4000 / 32 = 125 → 4000; 12,032,000 px
        // pass: 188 × 250 = 47,000 patches, 94 × 125 = 11,750 tokens.
        let c = q.cost(Some((3000, 4000)));
        assert_eq!((c.height, c.width), (3008, 4000));
        assert_eq!((c.encoder_positions, c.tokens), (47_000, 11_750));
        // 10 × 10: 10 / 32 rounds to 0, under min_pixels; beta = √(65,536 / 100) = 25.6 and
        // ⌈10 × 25.6 / 32⌉ × 32 = 256: 8 × 8 = 64 tokens.
        let c = q.cost(Some((10, 10)));
        assert_eq!((c.height, c.width, c.tokens), (256, 256, 64));
        // 8000 × 8000: 8000 / 32 = 250 → 8000, 64,000,000 px > 16,777,216; beta = √(8000² /
        // 4096²) = 1.953125, ⌊8000 / 1.953125 / 32⌋ × 32 = 4096.
        assert_eq!(q.cost(Some((8000, 8000))).height, 4096);
        // no size: the most the processor keeps, 16,777,216 / 32² = 16,384 tokens, 4096 × 4096.
        let most = q.cost(None);
        assert_eq!((most.height, most.width, most.tokens), (4096, 4096, 16_384));
        // Qwen3.5 / Qwen3.6 have the same tower and processor.
        let q36 = config(include_str!(
            "../../tests/fixtures/configs-2026/qwen3.6-27b/config.json"
        ));
        assert_eq!(q36.model_type, "qwen3_5");
        assert_eq!(q36.cost(Some((1024, 1024))), q.cost(Some((1024, 1024))));
        let q35 = config(include_str!("../../presets/qwen3.5-35b-a3b.json"));
        assert_eq!(q35.model_type, "qwen3_5_moe");
    }

    #[test]
    fn qwen3_attends_one_image_at_a_time() {
        let q = qwen3_vl();
        let c = q.cost(Some((1024, 1024)));
        // DeepStack: 3 indexes × 2,048 (out_hidden_size) values for each of 2 × 1,024 tokens
        assert_eq!(q.held_per_token, 3 * 2048);
        let deepstack = 2 * 1024 * 3 * 2048 * 2;
        // SDPA: the attention's peak, 2 images × 4,096 patches × 1,152 × (two copies of the
        // stream and the qkv tensor in bf16, q, k, q's rotary embedding and three temporaries of
        // k's in float32)
        assert_eq!(
            q.encoder_bytes(&c, 2, 2, false),
            2 * 4096 * 1152 * (5 * 2 + 6 * 4) + deepstack
        );
        assert_eq!(q.encoder_bytes(&c, 2, 2, false), 346_030_080);
        // eager: beside them, one image's 16 × 4,096² scores (bf16 and their f32 softmax)
        assert_eq!(
            q.encoder_bytes(&c, 2, 2, true),
            2 * 4096 * 1152 * 34 + 16 * 4096 * 4096 * 6 + deepstack
        );
        assert_eq!(q.encoder_bytes(&c, 2, 2, true), 1_956_642_816);
        // Qwen3.5 has no DeepStack mergers
        let q35 = config(include_str!("../../presets/qwen3.5-35b-a3b.json"));
        assert_eq!(q35.held_per_token, 0);
        assert_eq!(q35.encoder_bytes(&c, 2, 2, false), 320_864_256);
    }

    #[test]
    fn llava_gives_576_tokens() {
        let l = config(
            r#"{"model_type":"llava","vision_config":{"image_size":336,"patch_size":14,"hidden_size":1024}}"#,
        );
        let c = l.cost(None);
        assert_eq!((c.tokens, c.encoder_positions), (576, 577));
    }

    fn llava_next() -> ImageInput {
        config(include_str!(
            "../../tests/fixtures/vision/llava-v1.6-mistral-7b-hf.json"
        ))
    }

    /// (height, width, tokens, crops) from transformers 5.17.0's `LlavaNextProcessor` with
    /// llava-v1.6-mistral-7b-hf's processor settings (patch_size 14,
    /// vision_feature_select_strategy `default`, num_additional_image_tokens 1, the five
    /// pinpoints, size 336): `_get_num_multimodal_tokens(image_sizes=[(h, w), …])` for the
    /// tokens and `modeling_llava_next.image_size_to_num_patches((h, w), pinpoints, 336)` for
    /// the crops. The image processor itself needs torchvision and PIL, absent from the venv;
    /// `_get_num_multimodal_tokens` is the same `_get_number_of_features` its `__call__` runs.
    const LLAVA_NEXT_PROCESSOR: [(u64, u64, u64, u64); 22] = [
        (768, 1024, 2340, 5),
        (1024, 768, 2352, 5),
        (336, 336, 1176, 3),
        (672, 672, 2928, 5),
        (1024, 1024, 2928, 5),
        (480, 640, 2340, 5),
        (640, 480, 2352, 5),
        (1080, 1920, 1948, 5),
        (1920, 1080, 1968, 5),
        (100, 100, 1176, 3),
        (500, 2000, 1890, 4),
        (2000, 500, 1944, 4),
        (336, 1008, 2328, 4),
        (1008, 336, 2376, 4),
        (600, 800, 2340, 5),
        (720, 1280, 1948, 5),
        (3000, 4000, 2340, 5),
        (224, 224, 1176, 3),
        (1000, 350, 2276, 4),
        (350, 1000, 2232, 4),
        (400, 500, 2438, 5),
        (900, 13, 792, 4),
    ];

    #[test]
    fn llava_next_tokens_equal_transformers_processor() {
        let l = llava_next();
        assert_eq!(l.model_type, "llava_next");
        for (h, w, tokens, crops) in LLAVA_NEXT_PROCESSOR {
            let c = l.cost(Some((h, w)));
            assert_eq!(
                (c.tokens, c.encoder_positions),
                (tokens, crops * 577),
                "{w}x{h}"
            );
        }
        // 1024 × 768 (w × h): the 672² canvas, 2 × 2 crops; 48 × 48 features less 6 padding
        // rows on each side: 36 × 48 + 36 newlines + the base crop's 576 = 2,340.
        let c = l.cost(Some((768, 1024)));
        assert_eq!((c.height, c.width), (672, 672));
        // no size: the most tokens, a 672² image
        let most = l.cost(None);
        assert_eq!((most.tokens, most.encoder_positions), (2928, 5 * 577));
    }

    #[test]
    fn llava_next_encodes_each_crop_as_one_clip_image() {
        let l = llava_next();
        let c = l.cost(Some((768, 1024)));
        // 2 images × 5 crops, each 577 positions: the CLIP rule with a batch of 10
        let llava = config(
            r#"{"model_type":"llava","vision_config":{"image_size":336,"patch_size":14,"hidden_size":1024,"intermediate_size":4096,"num_attention_heads":16}}"#,
        );
        let one = llava.cost(None);
        for eager in [false, true] {
            assert_eq!(
                l.encoder_bytes(&c, 2, 2, eager),
                llava.encoder_bytes(&one, 10, 2, eager)
            );
        }
        assert_eq!(l.encoder_bytes(&c, 2, 2, false), 141_803_520);
    }

    #[test]
    fn llava_next_pinpoints_are_read_or_refused() {
        // the class default when absent; `full` keeps the base crop's CLS
        let d = config(r#"{"model_type":"llava_next","vision_feature_select_strategy":"full"}"#);
        assert_eq!(d.cost(Some((768, 1024))).tokens, 2341);
        for bad in [
            r#"[]"#,
            r#"[[336]]"#,
            r#"[[100, 672]]"#,
            r#"[[336, "672"]]"#,
            r#"[[336, 65536]]"#,
            r#""anyres""#,
        ] {
            let text = format!(r#"{{"model_type":"llava_next","image_grid_pinpoints":{bad}}}"#);
            let v: Value = serde_json::from_str(&text).unwrap();
            assert!(read(v.as_object().unwrap()).is_none(), "{bad}");
        }
        // a single canvas: every image gets it
        let one = config(r#"{"model_type":"llava_next","image_grid_pinpoints":[[672,672]]}"#);
        assert_eq!(one.cost(Some((336, 336))).tokens, 576 + 48 * 48 + 48);
        assert_eq!(
            select_best_resolution(1, 1, &[(336, 672), (672, 336)]),
            (336, 672)
        );
    }

    fn phi3_v() -> ImageInput {
        config(include_str!(
            "../../tests/fixtures/vision/phi-3.5-vision-instruct.json"
        ))
    }

    /// (height, width, padded height, padded width, tokens) from vLLM's port of the
    /// checkpoint's processor (vllm/model_executor/models/phi3v.py, run with numpy):
    /// `calc_hd_transform_size(width=w, height=h, hd_num=4)` and `get_num_image_tokens`'s
    /// `(h // 336 * w // 336 + 1) * 144 + 1 + (h // 336 + 1) * 12` on the padded size.
    const PHI3_V_PROCESSOR: [(u64, u64, u64, u64, u64); 25] = [
        (768, 1024, 672, 672, 757),
        (1024, 768, 672, 672, 757),
        (336, 336, 672, 672, 757),
        (672, 672, 672, 672, 757),
        (1024, 1024, 672, 672, 757),
        (480, 640, 672, 672, 757),
        (640, 480, 672, 672, 757),
        (1080, 1920, 672, 672, 757),
        (1920, 1080, 672, 672, 757),
        (100, 100, 672, 672, 757),
        (500, 2000, 336, 1344, 745),
        (2000, 500, 1344, 336, 781),
        (336, 1008, 336, 1008, 601),
        (1008, 336, 1008, 336, 625),
        (600, 800, 672, 672, 757),
        (720, 1280, 672, 672, 757),
        (3000, 4000, 672, 672, 757),
        (224, 224, 672, 672, 757),
        (1000, 350, 672, 336, 469),
        (350, 1000, 336, 672, 457),
        (400, 500, 672, 672, 757),
        (900, 13, 1344, 336, 781),
        (13, 900, 336, 1344, 745),
        (8000, 50, 1344, 336, 781),
        (777, 1333, 672, 672, 757),
    ];

    #[test]
    fn phi3_v_tokens_equal_the_hd_transform() {
        let p = phi3_v();
        assert_eq!(p.model_type, "phi3_v");
        for (h, w, ph, pw, tokens) in PHI3_V_PROCESSOR {
            let c = p.cost(Some((h, w)));
            // every image is padded to num_crops + 1 = 5 crops of 577 positions
            assert_eq!(
                (c.height, c.width, c.tokens, c.encoder_positions),
                (ph, pw, tokens, 5 * 577),
                "{w}x{h}"
            );
        }
        // no size: vLLM's most features, a 4 × 1 column of crops
        let most = p.cost(None);
        assert_eq!((most.height, most.width, most.tokens), (1344, 336, 781));
        // a sliver whose scaled height is under a pixel keeps one row of crops (the processor
        // cannot resize to zero pixels)
        assert_eq!(p.cost(Some((1, 3000))).height, 336);
        // another image processor has no rule here
        let v: Value = serde_json::from_str(
            r#"{"model_type":"phi3_v","img_processor":{"name":"siglip_vision_model"}}"#,
        )
        .unwrap();
        assert!(read(v.as_object().unwrap()).is_none());
    }

    #[test]
    fn phi3_v_encodes_five_clip_crops_an_image() {
        let p = phi3_v();
        let c = p.cost(Some((768, 1024)));
        // 2 images × 5 crops of 577 positions: LLaVA-NeXT's 2 × 5 crops to the byte
        let next = llava_next();
        let n = next.cost(Some((768, 1024)));
        for eager in [false, true] {
            assert_eq!(
                p.encoder_bytes(&c, 2, 2, eager),
                next.encoder_bytes(&n, 2, 2, eager)
            );
        }
        assert_eq!(p.encoder_bytes(&c, 2, 2, false), 141_803_520);
    }

    #[test]
    fn eager_holds_every_siglip_images_scores() {
        let g = gemma3();
        let c = g.cost(None);
        // 4 images × 16 heads × 4096² × (2 + 4) bytes = 6 GiB
        let eager = g.encoder_bytes(&c, 4, 2, true);
        assert_eq!(eager, 4 * 4096 * 1152 * 7 * 2 + 4 * 16 * 4096 * 4096 * 6);
        // SDPA: the MLP's 4 copies of the stream and its 2 intermediate tensors — on the H200,
        // transformers 5.17 allocated 433,061,888 B for these 4 images (vlm-images calibration)
        let sdpa = g.encoder_bytes(&c, 4, 2, false);
        assert_eq!(sdpa, 4 * 4096 * 1152 * 4 * 2 + 4 * 4096 * 4304 * 2 * 2);
        assert_eq!(sdpa, 433_061_888);
        // Qwen attends one image at a time: 2 images of 4,900 patches, one image's scores
        let q = qwen25();
        let qc = q.cost(Some((1024, 1024)));
        assert_eq!(
            q.encoder_bytes(&qc, 2, 2, true),
            2 * 4900 * 1280 * (5 * 2 + 6 * 4) + 16 * 4900 * 4900 * 6
        );
        assert_eq!(q.encoder_bytes(&qc, 2, 2, true), 2_731_456_000);
    }

    #[test]
    fn vllm_profiles_as_many_largest_images_as_the_encoder_budget_holds() {
        let g = gemma3();
        // 8,192 tokens of budget / 256 a Gemma-3 image = 32 images; 1,024 sequences allow more
        let p = g.vllm_profile(8192, 1024, 131_072, 999, 5376, 2).unwrap();
        assert_eq!(
            (p.items, p.tokens_per_item, p.encoder_budget),
            (32, 256, 8192)
        );
        assert_eq!(p.cache_bytes, 32 * 256 * 5376 * 2);
        // the decoder side: 1 sequence × min(limit 2, 131,072 / 256) images
        assert_eq!(
            g.vllm_profile(8192, 1, 131_072, 2, 5376, 2).unwrap().items,
            2
        );
        // a budget below one image is lifted to it: max(2,048, 1,280) for Qwen2.5-VL's largest
        let q = qwen25()
            .vllm_profile(1024, 256, 128_000, 999, 3584, 2)
            .unwrap();
        assert_eq!((q.items, q.encoder_budget), (1, 1280));
        // --limit-mm-per-prompt 0: the tower is not profiled
        assert!(g.vllm_profile(8192, 1024, 131_072, 0, 5376, 2).is_none());
        // the tower's transient is freed before the language model's run; the cache is not
        assert_eq!(p.peak_with(0), p.encoder_bytes + p.cache_bytes);
        assert_eq!(p.peak_with(u64::MAX), u64::MAX);
    }

    fn mistral3() -> ImageInput {
        config(include_str!(
            "../../tests/fixtures/vision/mistral3-defaults.json"
        ))
    }

    // The token counts below are what transformers 5.17.0's processor gives a blank image of
    // that size (image processor only; the tokens as `PixtralProcessor.replace_image_token`
    // expands them, (cols + 1) × rows). Run with Pillow beside the venv's python:
    //   python -c 'from PIL import Image; from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil as P; L,p,m=1540,14,2; w,h=4000,3000; H,W=P(size={"longest_edge":L},patch_size=p*m)(Image.new("RGB",(w,h)))["image_sizes"][0]; print(H,W,(H//(p*m))*(W//(p*m)+1),(H//p)*(W//p))'
    // (L, p, m = 1024, 16, 1 for Pixtral-12B).
    #[test]
    fn mistral3_fits_the_longest_edge_in_28_px_cells_with_a_break_per_row() {
        let m = mistral3();
        assert_eq!(m.model_type, "mistral3");
        assert_eq!(
            m.rule,
            TokenRule::Rows {
                patch: 14,
                merge: 2,
                longest_edge: 1540
            }
        );
        // 1024 × 1024 is not grown: ⌈1024 / 28⌉ = 37 cells → 1036 px; 37 × 38 = 1,406 tokens
        // (processor: 1036 1036 1406 5476), 74² = 5,476 patches of 14 px.
        let c = m.cost(Some((1024, 1024)));
        assert_eq!(
            (c.height, c.width, c.tokens, c.encoder_positions),
            (1036, 1036, 1406, 5476)
        );
        // 4000 wide × 3000 high: ratio 4000 / 1540, 3000 → 1155 → 1176, 4000 → 1540;
        // 42 rows × 56 = 2,352 tokens (processor: 1176 1540 2352 9240).
        let c = m.cost(Some((3000, 4000)));
        assert_eq!(
            (c.height, c.width, c.tokens, c.encoder_positions),
            (1176, 1540, 2352, 9240)
        );
        // 300 wide × 500 high: 18 rows × 12 = 216 tokens (processor: 504 308 216 792).
        let c = m.cost(Some((500, 300)));
        assert_eq!(
            (c.height, c.width, c.tokens, c.encoder_positions),
            (504, 308, 216, 792)
        );
        // 2000 wide × 1000 high: 28 rows × 56 = 1,568 tokens (processor: 784 1540 1568 6160).
        assert_eq!(m.cost(Some((1000, 2000))).tokens, 1568);
        // no size: 1540², 55 rows × 56 = 3,080 tokens, 110² patches
        let most = m.cost(None);
        assert_eq!((most.tokens, most.encoder_positions), (3080, 12_100));
    }

    #[test]
    fn pixtral_12b_has_16_px_patches_and_no_merge() {
        let p = config(
            r#"{"model_type":"llava","vision_config":{"model_type":"pixtral","image_size":1024,"patch_size":16,"hidden_size":1024,"intermediate_size":4096,"num_attention_heads":16}}"#,
        );
        assert_eq!(p.model_type, "llava");
        // processor: 1024 1024 4160 4096; 768 1024 3120 3072; 512 304 640 608
        let c = p.cost(Some((1024, 1024)));
        assert_eq!((c.tokens, c.encoder_positions), (4160, 4096));
        let c = p.cost(Some((3000, 4000)));
        assert_eq!(
            (c.height, c.width, c.tokens, c.encoder_positions),
            (768, 1024, 3120, 3072)
        );
        let c = p.cost(Some((500, 300)));
        assert_eq!(
            (c.height, c.width, c.tokens, c.encoder_positions),
            (512, 304, 640, 608)
        );
        // a bare PixtralVisionConfig reads the same
        let bare = config(r#"{"model_type":"pixtral"}"#);
        assert_eq!(bare.cost(Some((1024, 1024))), p.cost(Some((1024, 1024))));
        // a CLIP LLaVA is still the fixed rule
        let clip =
            config(r#"{"model_type":"llava","vision_config":{"model_type":"clip_vision_model"}}"#);
        assert_eq!(clip.rule, TokenRule::Fixed { tokens: 576 });
    }

    #[test]
    fn pixtral_holds_one_mask_over_every_images_patches() {
        let m = mistral3();
        let c = m.cost(Some((1024, 1024)));
        let n = 2 * 5476u64;
        // SDPA: the MLP's five copies of the stream and three 4,096-wide tensors, beside the
        // n × n bf16 mask
        let mlp = n * 1024 * 5 * 2 + n * 4096 * 3 * 2;
        assert_eq!(m.encoder_bytes(&c, 2, 2, false), mlp + n * n * 2);
        assert_eq!(m.encoder_bytes(&c, 2, 2, false), 621_197_440);
        // eager: 16 heads × n² scores (bf16 and their f32 softmax) over both images at once
        assert_eq!(
            m.encoder_bytes(&c, 2, 2, true),
            n * 1024 * 10 * 2 + 16 * n * n * 6 + n * n * 2
        );
    }

    // `Llama4ImageProcessor` (torchvision backend) on a blank image, and the tokens
    // `Llama4Processor._prompt_split_image` writes for its aspect ratio (every special token
    // counted):
    //   python -c 'from PIL import Image; from transformers.models.llama4.image_processing_llama4 import Llama4ImageProcessor as P; from transformers.models.llama4.processing_llama4 import Llama4Processor as Q; w,h=4000,3000; o=P(size={"height":336,"width":336},max_patches=16)(Image.new("RGB",(w,h))); ar=o["aspect_ratios"][0].tolist(); print(ar, Q._prompt_split_image(None, ar, (336//14)**2//4).count("<|"))'
    #[test]
    fn llama4_tiles_336_px_with_a_global_tile_and_separators() {
        let l = config(include_str!(
            "../../presets/llama-4-scout-17b-16e-instruct.json"
        ));
        assert_eq!(l.model_type, "llama4");
        assert_eq!(
            l.rule,
            TokenRule::Tiles {
                tile: 336,
                max_tiles: 16,
                tokens_per_tile: 144,
                canvas: Canvas::Llama4
            }
        );
        // 1024²: processor [4, 4], 2,467 tokens: 16 tiles and the global one × 144, 16
        // separators, <|image_start|>, <|image|>, <|image_end|>; 17 tiles × 577 positions
        let c = l.cost(Some((1024, 1024)));
        assert_eq!((c.height, c.width), (1344, 1344));
        assert_eq!((c.tokens, c.encoder_positions), (2467, 17 * 577));
        // 4000 wide × 3000 high: [3, 4], 1,887 tokens
        let c = l.cost(Some((3000, 4000)));
        assert_eq!((c.height, c.width, c.tokens), (1008, 1344, 1887));
        // 300 wide × 500 high: [2, 1], 437 tokens
        let c = l.cost(Some((500, 300)));
        assert_eq!((c.height, c.width, c.tokens), (672, 336, 437));
        // 336²: [1, 1], one tile and no global: 147 tokens
        assert_eq!(l.cost(Some((336, 336))).tokens, 147);
        // 2000 wide × 500 high: [2, 6], 1,887 tokens
        let c = l.cost(Some((500, 2000)));
        assert_eq!((c.height, c.width, c.tokens), (672, 2016, 1887));
        // no size: 16 tiles, 2,467 tokens
        assert_eq!(l.cost(None).tokens, 2467);
        // the tiles are the tower's batch: 2 images × 17 tiles of 577 positions, Qwen's
        // attention peak (float32 rotary) at 1,408 wide
        assert_eq!(l.encoder_bytes(&c, 1, 2, false), 13 * 577 * 1408 * 34);
        let c = l.cost(Some((1024, 1024)));
        assert_eq!(l.encoder_bytes(&c, 2, 2, false), 939_152_896);
        assert_eq!(
            l.encoder_bytes(&c, 2, 2, true),
            34 * 577 * 1408 * 34 + 34 * 16 * 577 * 577 * 6
        );
    }

    // `GotOcr2ImageProcessorPil` as `InternVLProcessor` runs it (crop_to_patches, 448 px,
    // max_patches 12) on a blank image; tokens 2 + 256 × num_patches
    // (`InternVLProcessor._get_num_multimodal_tokens`):
    //   python -c 'from PIL import Image; from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil as P; w,h=4000,3000; n=int(P(size={"height":448,"width":448},crop_to_patches=True,min_patches=1,max_patches=12)(Image.new("RGB",(w,h)))["num_patches"][0]); print(n, 2+256*n)'
    #[test]
    fn internvl_tiles_448_px_with_a_thumbnail() {
        let i = config(include_str!(
            "../../tests/fixtures/vision/internvl-defaults.json"
        ));
        assert_eq!(i.model_type, "internvl");
        assert_eq!(
            i.rule,
            TokenRule::Tiles {
                tile: 448,
                max_tiles: 12,
                tokens_per_tile: 256,
                canvas: Canvas::InternVl
            }
        );
        // 1024²: 3 × 3 and the thumbnail, 10 patches, 2,562 tokens (processor: 10 2562)
        let c = i.cost(Some((1024, 1024)));
        assert_eq!((c.tokens, c.encoder_positions), (2562, 10 * 1025));
        // 4000 wide × 3000 high: 4 × 3 + 1 = 13, 3,330 (processor: 13 3330)
        assert_eq!(i.cost(Some((3000, 4000))).tokens, 3330);
        // 300 wide × 500 high: 7, 1,794 (processor: 7 1794)
        assert_eq!(i.cost(Some((500, 300))).tokens, 1794);
        // 448²: one tile, no thumbnail, 258 (processor: 1 258)
        assert_eq!(i.cost(Some((448, 448))).tokens, 258);
        // 2000 wide × 500 high: 4 × 1 + 1 = 5, 1,282 (processor: 5 1282)
        assert_eq!(i.cost(Some((500, 2000))).tokens, 1282);
        // 800 wide × 600 high: 13, 3,330 (processor: 13 3330)
        assert_eq!(i.cost(Some((600, 800))).tokens, 3330);
        // no size: 12 tiles and the thumbnail
        assert_eq!(i.cost(None).tokens, 13 * 256 + 2);
        // SigLIP's rule over 2 × 10 tiles of 1,025 positions: the MLP's peak
        let n = 20 * 1025u64;
        assert_eq!(
            i.encoder_bytes(&c, 2, 2, false),
            n * 1024 * 4 * 2 + n * 4096 * 2 * 2
        );
        assert_eq!(i.encoder_bytes(&c, 2, 2, false), 503_808_000);
    }

    // `Phi4MultimodalImageProcessor` (torchvision backend) on a blank image:
    //   python -c 'from PIL import Image; from transformers.models.phi4_multimodal.image_processing_phi4_multimodal import Phi4MultimodalImageProcessor as P; w,h=800,600; o=P(size={"height":448,"width":448},patch_size=14,dynamic_hd=36)(Image.new("RGB",(w,h))); print(o["num_img_tokens"][0], o["image_sizes"][0].tolist(), tuple(o["image_pixel_values"].shape))'
    #[test]
    fn phi4_multimodal_counts_the_padding_masks_kept_cells() {
        let p = config(include_str!(
            "../../tests/fixtures/vision/phi4-multimodal-defaults.json"
        ));
        assert_eq!(p.model_type, "phi4_multimodal");
        // 1024²: 3 × 3 crops of 448, no padding: 256 + 1 + 48 × 48 + 48 + 16 = 2,625
        // (processor: 2625 [1344, 1344], 10 crops)
        let c = p.cost(Some((1024, 1024)));
        assert_eq!((c.height, c.width, c.tokens), (1344, 1344, 2625));
        assert_eq!(c.encoder_positions, 10 * 1024);
        // 4000 wide × 3000 high: 4 × 3 crops (processor: 3393 [1344, 1792], 13 crops)
        let c = p.cost(Some((3000, 4000)));
        assert_eq!((c.height, c.width, c.tokens), (1344, 1792, 3393));
        // 300 wide × 500 high: 1 × 2 crops, 150 px of padding blank 10 mask rows: 27 × 16
        // kept (processor: 732 [896, 448], 3 crops)
        let c = p.cost(Some((500, 300)));
        assert_eq!((c.height, c.width, c.tokens), (896, 448, 732));
        // 448²: one crop and the global one (processor: 545 [448, 448], 2 crops)
        let c = p.cost(Some((448, 448)));
        assert_eq!((c.tokens, c.encoder_positions), (545, 2 * 1024));
        // 2000 wide × 500 high (processor: 1893 [896, 2240], 11 crops)
        assert_eq!(p.cost(Some((500, 2000))).tokens, 1893);
        // 800 wide × 600 high (processor: 1065 [896, 896], 5 crops)
        assert_eq!(p.cost(Some((600, 800))).tokens, 1065);
        // 8000 wide × 500 high: 18 × 2 = 36 crops fit dynamic_hd (processor: 5475 [896, 8064])
        let c = p.cost(Some((500, 8000)));
        assert_eq!((c.height, c.width, c.tokens), (896, 8064, 5475));
        // past 36 crops the nearest aspect ratio: 10000 × 1000 → 10 × 1 (processor: 2849
        // [448, 4480]); 3000² → 6 × 6 (9585 [2688, 2688]); 5000 × 2000 → 5 × 2 (2865 [896, 2240])
        let c = p.cost(Some((1000, 10_000)));
        assert_eq!((c.height, c.width, c.tokens), (448, 4480, 2849));
        let c = p.cost(Some((3000, 3000)));
        assert_eq!((c.height, c.width, c.tokens), (2688, 2688, 9585));
        let c = p.cost(Some((2000, 5000)));
        assert_eq!((c.height, c.width, c.tokens), (896, 2240, 2865));
        // no size: a column of 36 crops, 256 + 1 + 576 × 16 + 576 + 16
        assert_eq!(p.cost(None).tokens, 10_065);
    }

    #[test]
    fn text_models_have_no_image_input() {
        let v: Value =
            serde_json::from_str(include_str!("../../presets/qwen2.5-7b-instruct.json")).unwrap();
        assert!(read(v.as_object().unwrap()).is_none());
    }

    #[test]
    fn outlandish_configs_do_not_overflow() {
        let huge = config(
            r#"{"model_type":"qwen2_5_vl","vision_config":{"patch_size":1048576,"spatial_merge_size":1048576,"hidden_size":1048576,"intermediate_size":1048576,"num_heads":1048576}}"#,
        );
        for size in [None, Some((MAX_SIDE, MAX_SIDE)), Some((1, 200))] {
            let c = huge.cost(size);
            let _ = huge.encoder_bytes(&c, MAX_IMAGES * 1024, 4, true);
        }
        for tiled in [
            r#"{"model_type":"llama4","vision_config":{"image_size":1048576,"patch_size":1,"hidden_size":1048576,"pixel_shuffle_ratio":1e-9}}"#,
            r#"{"model_type":"internvl","downsample_ratio":1.0,"vision_config":{"image_size":[1048576,1048576],"patch_size":[1,1]}}"#,
            r#"{"model_type":"mistral3","spatial_merge_size":1048576,"vision_config":{"image_size":1048576,"patch_size":1048576}}"#,
        ] {
            let t = config(tiled);
            for size in [None, Some((MAX_SIDE, MAX_SIDE)), Some((1, 200))] {
                let c = t.cost(size);
                let _ = t.encoder_bytes(&c, MAX_IMAGES * 1024, 4, true);
            }
        }
        let g = config(
            r#"{"model_type":"gemma3","vision_config":{"image_size":1048576,"patch_size":1,"num_attention_heads":1048576}}"#,
        );
        assert_eq!(
            g.encoder_bytes(&g.cost(None), MAX_IMAGES, 4, true),
            u64::MAX
        );
    }

    #[test]
    fn image_size_is_width_by_height() {
        assert_eq!(parse_size("1024x768"), Ok((768, 1024)));
        assert!(parse_size("0x5").is_err());
        assert!(parse_size("big").is_err());
        assert!(parse_size("1x1000").is_err());
    }

    /// llama.cpp's CLIP compute buffer against what llama.cpp printed. The one log found with a
    /// mmproj's `alloc_compute_meta` line on a current build: gemma-3-4b-it's (SigLIP 27 × 1152,
    /// 16 heads, n_ff 4304, 896²), CUDA0, flash attention enabled,
    /// "alloc_compute_meta: CUDA0 compute buffer size = 121.25 MiB"
    /// (https://github.com/ggml-org/llama.cpp/pull/22790). Gemma-3 12B and 27B ship the same
    /// tower, so the same buffer.
    #[test]
    fn llamacpp_gemma3_clip_buffer_is_the_logged_121_25_mib() {
        let g = gemma3().for_llamacpp();
        let c = g.llamacpp_warmup();
        assert_eq!((c.width, c.encoder_positions, c.tokens), (896, 4096, 256));
        // 4,096 patches × (4,304 + 3 × 1,152) f32 values: 121.25 MiB, the logged figure exactly
        let fa = g.llamacpp_clip_bytes(&c, true);
        assert_eq!(fa, 4096 * (4304 + 3 * 1152) * 4);
        assert_eq!(fa, 127_139_840);
        assert_eq!(fa * 100 / (1 << 20), 12_125);
        // without flash attention the 16 heads' f32 scores, 1 GiB, lead (no log found to pin)
        assert_eq!(
            g.llamacpp_clip_bytes(&c, false),
            16 * 4096 * 4096 * 4 + 5 * 4096 * 1152 * 4
        );
        // one image per graph: the same buffer for 1 or 16 images
        let load = |n| ImageLoad {
            input: g,
            cost: c,
            per_request: n,
            limit_mm_per_prompt: VLLM_DEFAULT_LIMIT,
            vllm_reserve: None,
        };
        assert_eq!(load(1).llamacpp_clip_bytes(true), fa);
        assert_eq!(load(16).llamacpp_clip_bytes(true), fa);
    }

    #[test]
    fn llamacpp_qwen_takes_8_to_4096_tokens_and_warms_up_at_46_squared() {
        let q = qwen25().for_llamacpp();
        // llama.cpp's max: 4,096 tokens, 64 × 28 = 1,792 px a side, where transformers keeps 1,280
        let most = q.cost(None);
        assert_eq!((most.height, most.width, most.tokens), (1792, 1792, 4096));
        // 1024²: round(1024 / 28) × 28 = 1,036, within llama.cpp's max (transformers: 980)
        assert_eq!(q.cost(Some((1024, 1024))).height, 1036);
        assert_eq!(qwen25().cost(Some((1024, 1024))).height, 980);
        let warm = q.llamacpp_warmup();
        assert_eq!(
            (warm.height, warm.encoder_positions, warm.tokens),
            (1288, 8464, 2116)
        );
        // the SwiGLU MLP (gate and up) and the window mask in f32 and its f16 cast
        let n: u64 = 8464;
        assert_eq!(
            q.llamacpp_clip_bytes(&warm, true),
            n * (2 * 3420 + 3 * 1280) * 4 + n * n * 6
        );
        assert_eq!(
            q.llamacpp_clip_bytes(&warm, false),
            16 * n * n * 4 + 5 * n * 1280 * 4 + n * n * 4
        );
        // a smaller image reuses the warm-up's buffer, a larger one grows it
        let load = |cost| ImageLoad {
            input: q,
            cost,
            per_request: 2,
            limit_mm_per_prompt: VLLM_DEFAULT_LIMIT,
            vllm_reserve: None,
        };
        let small = q.cost(Some((448, 448)));
        assert_eq!(
            load(small).llamacpp_clip_bytes(true),
            q.llamacpp_clip_bytes(&warm, true)
        );
        assert_eq!(
            load(most).llamacpp_clip_bytes(true),
            q.llamacpp_clip_bytes(&most, true)
        );
        // Gemma-3 keeps its fixed 256 tokens
        assert_eq!(gemma3().for_llamacpp(), gemma3());
    }

    #[test]
    fn llamacpp_llava_attends_577_positions() {
        let l = config(
            r#"{"model_type":"llava","vision_config":{"image_size":336,"patch_size":14,"hidden_size":1024,"intermediate_size":4096,"num_attention_heads":16}}"#,
        );
        let c = l.llamacpp_warmup();
        assert_eq!((c.tokens, c.encoder_positions), (576, 577));
        assert_eq!(l.llamacpp_clip_bytes(&c, true), 577 * (4096 + 3 * 1024) * 4);
        // Without flash attention: 16 heads × 577² f32 scores beside five copies of the stream,
        // 31.59 MiB. A 2024 clip.cpp (no flash attention in the encoder yet) printed
        // "clip_model_load: compute allocated memory: 32.89 MB" (MiB) for llava-v1.6-7b's mmproj,
        // the same CLIP ViT-L/14-336 (https://github.com/ollama/ollama/issues/2706): the rule is
        // 4.0 % under that older graph.
        let no_fa = l.llamacpp_clip_bytes(&c, false);
        assert_eq!(no_fa, 16 * 577 * 577 * 4 + 5 * 577 * 1024 * 4);
        assert_eq!(no_fa, 33_124_416);
        let logged = 32.89 * (1u64 << 20) as f64;
        let gap = (no_fa as f64 - logged) / logged;
        assert!((-0.045..-0.035).contains(&gap), "{gap}");
    }
}
