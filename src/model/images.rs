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
}

/// A vision-language model's image input: its token rule and its encoder's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ImageInput {
    /// `gemma3`, `qwen2_5_vl`, `qwen2_vl`, `qwen3_vl`, `qwen3_vl_moe`, `qwen3_5`, `qwen3_5_moe`,
    /// `llava`.
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
            })
        }
        _ => None,
    }
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
        }
    }

    /// The vision encoder's peak transient bytes for `images` images of `cost` at once, in a
    /// compute dtype of `d` bytes; `eager` holds the attention's score matrix.
    pub fn encoder_bytes(&self, cost: &ImageCost, images: u64, d: u64, eager: bool) -> u64 {
        let s = cost.encoder_positions;
        let stream = images.saturating_mul(s).saturating_mul(self.hidden);
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
            TokenRule::Fixed { .. } => self.cost(None),
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
