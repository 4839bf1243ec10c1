//! Readers for the families whose layers are not one llama-style block repeated: each follows the
//! transformers modeling file of its `model_type` and spells out every tensor and what each layer
//! caches, as a `Layout`. What they share lives here: the defaults transformers applies to fields
//! a published config leaves out, and the summary a `Spec` shows of a layout.

mod deepseek;
mod deepseek_v4;
mod falcon_h1;
mod gemma4;
mod gpt_oss;
mod granite_hybrid;
mod jamba;
mod kimi_k3;
mod llama4;
mod mamba2;
mod mimo_v2;
mod minimax_m2;
mod nemotron_h;
mod phimoe;
mod qwen3_next;
mod step3p7;
pub(crate) mod vision;

use serde_json::{json, Map, Value};

use super::config::Reader;
use super::layout::{Layout, Tensors};
use super::spec::Experts;
use crate::error::InputError;

/// The families read into a `Layout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// deepseek_v2, deepseek_v3 (also DeepSeek-R1 and Kimi-K2): MLA + shared/routed experts;
    /// deepseek_v32 (DeepSeek-V3.2) and glm_moe_dsa (GLM-5): the same with DeepSeek sparse
    /// attention's lightning indexer.
    Deepseek,
    /// deepseek_v4 (DeepSeek-V4): shared-KV multi-query attention with a sliding window, a
    /// compressor per layer (CSA with a lightning indexer, or HCA), hash-routed then learned
    /// experts, hyper-connection residual streams.
    DeepseekV4,
    /// llama4 / llama4_text: chunked local attention, NoPE global layers, interleaved MoE.
    Llama4,
    /// gpt_oss: alternating sliding/full attention with sinks, biased experts.
    GptOss,
    /// phimoe (Phi-3.5-MoE): LayerNorms and projections with biases, 16 experts.
    PhiMoe,
    /// jamba: one attention layer in `attn_layer_period`, Mamba in the rest, experts every other.
    Jamba,
    /// mamba2 (Codestral-Mamba): no attention at all.
    Mamba2,
    /// qwen3_next: Gated DeltaNet with full attention every `full_attention_interval`.
    Qwen3Next,
    /// qwen3_5 / qwen3_5_moe (Qwen3.5, Qwen3.6): Qwen3-Next's layers with the DeltaNet's
    /// projections split, a dense MLP in every layer or experts in every layer.
    Qwen35,
    /// granitemoehybrid (Granite-4.0-H): Mamba-2 / attention by `layer_types`, shared MLP + MoE.
    GraniteHybrid,
    /// falcon_h1: attention and Mamba-2 side by side in every layer.
    FalconH1,
    /// minimax_m2 (MiniMax-M2.x): full GQA attention with whole-width q/k norms, experts with a
    /// sigmoid router and its correction bias in every layer.
    MiniMaxM2,
    /// nemotron_h (Nemotron-H, Nemotron-3): one Mamba-2, MoE, attention or MLP block per layer,
    /// by `hybrid_override_pattern` / `layers_block_type`.
    NemotronH,
    /// gemma4 / gemma4_text (Gemma-4): sliding and full attention layers of their own KV heads
    /// and head_dim, full layers whose keys are their values, per-layer inputs, optional experts
    /// beside the dense MLP, layers reusing an earlier layer's cache.
    Gemma4,
    /// mimo_v2 / mimo_v2_flash (MiMo-V2.5, MiMo-V2-Flash): sliding layers of twice the KV heads
    /// with sinks, full layers every sixth, K and V of different head dims, experts after a
    /// dense first layer.
    MiMoV2,
    /// kimi_k3 (Kimi-K3, its `text_config` a remote-code `kimi_linear`): Kimi Delta Attention in
    /// three layers of four, gated MLA in the rest, SiTU experts on a latent of their own beside
    /// shared experts, attention residuals.
    KimiK3,
    /// step3p7 / step3p5 (Step-3.7-Flash's text model): sliding layers of their own query-head
    /// count beside full ones, a head-wise attention gate, a shared expert beside sigmoid-routed
    /// experts after dense first layers.
    Step3p7,
}

impl Kind {
    /// Memory-changing config keys this reader models (the guard refuses the others).
    pub(crate) fn models(self) -> &'static [&'static str] {
        match self {
            Kind::Deepseek => &[
                "kv_lora_rank",
                "q_lora_rank",
                "qk_rope_head_dim",
                "qk_nope_head_dim",
                "v_head_dim",
                "n_routed_experts",
                "n_shared_experts",
                "first_k_dense_replace",
                "moe_layer_freq",
                "moe_intermediate_size",
                "num_experts_per_tok",
                "index_n_heads",
                "index_head_dim",
                "index_topk",
                "indexer_types",
                "index_topk_freq",
                "index_skip_topk_offset",
                "index_topk_pattern",
            ],
            Kind::DeepseekV4 => &[
                "q_lora_rank",
                "qk_rope_head_dim",
                "n_routed_experts",
                "num_local_experts",
                "n_shared_experts",
                "moe_intermediate_size",
                "num_experts_per_tok",
                "index_n_heads",
                "index_head_dim",
                "index_topk",
                "layer_types",
                "mlp_layer_types",
                "num_hash_layers",
                "compress_ratios",
                "compress_rates",
                "compress_rate_csa",
                "compress_rate_hca",
                "hc_mult",
                "o_groups",
                "o_lora_rank",
            ],
            Kind::Llama4 => &[
                "num_local_experts",
                "num_experts_per_tok",
                "interleave_moe_layer_step",
                "moe_layers",
                "attention_chunk_size",
                "no_rope_layers",
                "intermediate_size_mlp",
                "layer_types",
            ],
            Kind::GptOss => &[
                "num_local_experts",
                "num_experts_per_tok",
                "experts_per_token",
                "layer_types",
            ],
            Kind::PhiMoe => &["num_local_experts", "num_experts_per_tok"],
            Kind::Jamba => &[
                "attn_layer_period",
                "attn_layer_offset",
                "expert_layer_period",
                "expert_layer_offset",
                "num_experts",
                "num_experts_per_tok",
                "mamba_",
            ],
            Kind::Mamba2 => &["state_size", "conv_kernel", "n_groups", "time_step_"],
            Kind::Qwen3Next => &[
                "linear_",
                "full_attention_interval",
                "num_experts",
                "num_experts_per_tok",
                "moe_intermediate_size",
                "shared_expert_intermediate_size",
                "decoder_sparse_step",
                "mlp_only_layers",
                "layer_types",
            ],
            // `mamba_ssm_dtype` is vLLM's state precision; transformers 5.25 does not read it.
            Kind::Qwen35 => &[
                "linear_",
                "full_attention_interval",
                "num_experts",
                "num_experts_per_tok",
                "moe_intermediate_size",
                "shared_expert_intermediate_size",
                "decoder_sparse_step",
                "mlp_only_layers",
                "layer_types",
                "mamba_ssm_dtype",
            ],
            Kind::GraniteHybrid => &[
                "mamba_",
                "num_local_experts",
                "num_experts_per_tok",
                "shared_intermediate_size",
                "layer_types",
            ],
            Kind::FalconH1 => &["mamba_", "ssm_", "attn_layer_indices"],
            Kind::MiniMaxM2 => &["num_local_experts", "num_experts", "num_experts_per_tok"],
            // `mamba_ssm_cache_dtype` and `n_shared_experts` are read by nothing in transformers
            // 5.25's modeling_nemotron_h.py; `num_local_experts` is its alias of
            // `n_routed_experts`.
            Kind::NemotronH => &[
                "hybrid_override_pattern",
                "layers_block_type",
                "layer_types",
                "mamba_",
                "ssm_state_size",
                "conv_kernel",
                "n_routed_experts",
                "num_local_experts",
                "n_shared_experts",
                "num_experts_per_tok",
                "moe_intermediate_size",
            ],
            // `attention_chunk_size` is read by nothing in transformers 5.25's
            // modeling_mimo_v2_flash.py; `moe_layer_freq` is checked against `mlp_layer_types`.
            Kind::MiMoV2 => &[
                "n_routed_experts",
                "num_local_experts",
                "moe_intermediate_size",
                "num_experts_per_tok",
                "moe_layer_freq",
                "attention_chunk_size",
                "layer_types",
                "mlp_layer_types",
            ],
            Kind::KimiK3 => &[
                "kv_lora_rank",
                "q_lora_rank",
                "qk_rope_head_dim",
                "first_k_dense_replace",
                "moe_layer_freq",
                "moe_intermediate_size",
                "num_experts",
                "linear_",
            ],
            // `moe_layers_enum` and `attention_other_setting` are the hub's spellings
            // `Step3p7TextConfig` reads.
            Kind::Step3p7 => &[
                "n_routed_experts",
                "num_local_experts",
                "moe_intermediate_size",
                "num_experts_per_tok",
                "layer_types",
            ],
            Kind::Gemma4 => &[
                "num_experts",
                "moe_intermediate_size",
                "top_k_experts",
                "num_kv_shared_layers",
                "layer_types",
            ],
        }
    }

    /// The `layer_types` values this reader understands.
    pub(crate) fn layer_types(self) -> &'static [&'static str] {
        match self {
            Kind::Llama4 => &["chunked_attention", "full_attention"],
            Kind::GptOss | Kind::Gemma4 | Kind::MiMoV2 | Kind::Step3p7 => {
                &["sliding_attention", "full_attention"]
            }
            Kind::Qwen3Next | Kind::Qwen35 => &["linear_attention", "full_attention"],
            Kind::GraniteHybrid => &["mamba", "attention"],
            Kind::Deepseek => &["deepseek_sparse_attention"],
            Kind::DeepseekV4 => &[
                "sliding_attention",
                "compressed_sparse_attention",
                "heavily_compressed_attention",
            ],
            Kind::NemotronH => &["linear_attention", "full_attention", "moe", "mlp"],
            _ => &[],
        }
    }
}

/// What a family reader hands back: a layout and the summary a `Spec` shows of it.
#[derive(Debug, Default)]
pub(crate) struct Built {
    pub hidden: u64,
    /// The dense MLP's width (layers without experts); 0 when every layer has experts.
    pub intermediate: u64,
    pub layers: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub vocab: u64,
    pub tie: bool,
    pub sliding_window: Option<u64>,
    pub sliding_layers: u64,
    pub experts: Option<Experts>,
    pub layout: Layout,
    pub notes: Vec<String>,
}

/// Whether `model_type` (the text model's) under `outer` is Kimi-K3's decoder.
pub(crate) fn claims_kimi_k3(model_type: &str, outer: &Map<String, Value>) -> bool {
    kimi_k3::claims(model_type, outer)
}

pub(crate) fn read(kind: Kind, r: &Reader) -> Result<Built, InputError> {
    match kind {
        Kind::Deepseek => deepseek::read(r),
        Kind::DeepseekV4 => deepseek_v4::read(r),
        Kind::Llama4 => llama4::read(r),
        Kind::GptOss => gpt_oss::read(r),
        Kind::PhiMoe => phimoe::read(r),
        Kind::Jamba => jamba::read(r),
        Kind::Mamba2 => mamba2::read(r),
        Kind::Qwen3Next => qwen3_next::read(r, qwen3_next::Variant::Next),
        Kind::Qwen35 => {
            let moe = r
                .str("model_type")
                .is_some_and(|t| t.starts_with("qwen3_5_moe"));
            let variant = if moe {
                qwen3_next::Variant::Qwen35Moe
            } else {
                qwen3_next::Variant::Qwen35
            };
            qwen3_next::read(r, variant)
        }
        Kind::GraniteHybrid => granite_hybrid::read(r),
        Kind::FalconH1 => falcon_h1::read(r),
        Kind::MiniMaxM2 => minimax_m2::read(r),
        Kind::NemotronH => nemotron_h::read(r),
        Kind::Gemma4 => gemma4::read(r),
        Kind::MiMoV2 => mimo_v2::read(r),
        Kind::KimiK3 => kimi_k3::read(r),
        Kind::Step3p7 => step3p7::read(r),
    }
}

/// The values transformers' configuration class of `model_type` gives the fields a config.json
/// may leave out (`configuration_<family>.py`, `__init__` defaults). Only fields that size memory.
pub fn defaults(model_type: &str) -> Map<String, Value> {
    let v = match model_type {
        // Gemma3TextConfig (configuration_gemma3.py): what gemma-3's published `text_config`
        // leaves out — vocab_size 262,208 and head_dim 256 among them.
        "gemma3" | "gemma3_text" => json!({
            "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216,
            "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
            "head_dim": 256, "max_position_embeddings": 131_072, "tie_word_embeddings": true,
            "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 256,
            "sliding_window": 4096, "sliding_window_pattern": 6,
            "hidden_activation": "gelu_pytorch_tanh"
        }),
        // MistralConfig (transformers 5.17, configuration_mistral.py): the sizes LLaVA-NeXT's
        // published `text_config` (llava-v1.6-mistral-7b-hf) leaves to the class. Its
        // num_key_value_heads (8) and context are not filled: that config gives both, as every
        // published Mistral config does, and a config without them keeps the llama-like reading.
        "mistral" => json!({
            "vocab_size": 32_000, "hidden_size": 4096, "intermediate_size": 14_336,
            "num_hidden_layers": 32, "num_attention_heads": 32, "tie_word_embeddings": false
        }),
        // DeepseekV3Config.
        "deepseek_v3" | "kimi_k2" => json!({
            "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 128, "v_head_dim": 128, "n_shared_experts": 1,
            "first_k_dense_replace": 3, "moe_layer_freq": 1, "num_experts_per_tok": 8,
            "tie_word_embeddings": false
        }),
        // DeepseekV32Config (transformers 5.17, configuration_deepseek_v32.py).
        "deepseek_v32" => json!({
            "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 128, "v_head_dim": 128, "n_shared_experts": 1,
            "first_k_dense_replace": 3, "num_experts_per_tok": 8, "index_topk": 2048,
            "index_head_dim": 128, "index_n_heads": 64, "n_routed_experts": 256,
            "tie_word_embeddings": false
        }),
        // GlmMoeDsaConfig (configuration_glm_moe_dsa.py).
        "glm_moe_dsa" => json!({
            "q_lora_rank": 2048, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 192, "v_head_dim": 256, "first_k_dense_replace": 3,
            "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8,
            "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 32,
            "tie_word_embeddings": false
        }),
        // DeepseekV4Config (configuration_deepseek_v4.py, transformers 5.25): V4-Flash's shape.
        "deepseek_v4" => json!({
            "vocab_size": 129_280, "hidden_size": 4096, "moe_intermediate_size": 2048,
            "num_hidden_layers": 43, "num_attention_heads": 64, "num_key_value_heads": 1,
            "head_dim": 512, "q_lora_rank": 1024, "num_experts_per_tok": 6,
            "n_routed_experts": 256, "n_shared_experts": 1, "hc_mult": 4, "sliding_window": 128,
            "o_groups": 8, "o_lora_rank": 1024, "index_n_heads": 64, "index_head_dim": 128,
            "index_topk": 512, "tie_word_embeddings": false
        }),
        // DeepseekV2Config.
        "deepseek_v2" => json!({
            "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 128, "v_head_dim": 128, "first_k_dense_replace": 0,
            "moe_layer_freq": 1, "tie_word_embeddings": false
        }),
        // Llama4TextConfig.
        "llama4" | "llama4_text" => json!({
            "vocab_size": 202_048, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
            "head_dim": 128, "num_local_experts": 16, "num_experts_per_tok": 1,
            "interleave_moe_layer_step": 1, "attention_chunk_size": 8192,
            "tie_word_embeddings": false
        }),
        // GptOssConfig.
        "gpt_oss" => json!({
            "vocab_size": 201_088, "intermediate_size": 2880, "head_dim": 64,
            "num_local_experts": 128, "experts_per_token": 4, "sliding_window": 128,
            "attention_bias": true, "tie_word_embeddings": false
        }),
        // PhimoeConfig.
        "phimoe" => json!({
            "num_local_experts": 16, "num_experts_per_tok": 2, "attention_bias": true,
            "lm_head_bias": true, "tie_word_embeddings": false
        }),
        // JambaConfig.
        "jamba" => json!({
            "vocab_size": 65_536, "attn_layer_period": 8, "attn_layer_offset": 4,
            "expert_layer_period": 2, "expert_layer_offset": 1, "num_experts": 16,
            "num_experts_per_tok": 2, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
            "mamba_conv_bias": true, "mamba_proj_bias": false, "tie_word_embeddings": false
        }),
        // Mamba2Config.
        "mamba2" => json!({
            "num_heads": 128, "head_dim": 64, "state_size": 128, "expand": 2, "conv_kernel": 4,
            "n_groups": 8, "use_bias": false, "use_conv_bias": true, "tie_word_embeddings": false
        }),
        // Qwen3NextConfig.
        "qwen3_next" => json!({
            "head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_num_key_heads": 16,
            "linear_num_value_heads": 32, "full_attention_interval": 4,
            "decoder_sparse_step": 1, "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512, "num_experts": 512,
            "num_experts_per_tok": 10, "tie_word_embeddings": false
        }),
        // Qwen3_5TextConfig (transformers 5.25; Qwen3.5-9B's shape), full attention every 4th
        // layer when `layer_types` is absent.
        "qwen3_5" | "qwen3_5_text" => json!({
            "vocab_size": 248_320, "hidden_size": 4096, "intermediate_size": 12288,
            "num_hidden_layers": 32, "num_attention_heads": 16, "num_key_value_heads": 4,
            "head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_num_key_heads": 16,
            "linear_num_value_heads": 32, "full_attention_interval": 4,
            "tie_word_embeddings": false
        }),
        // Qwen3_5MoeTextConfig (Qwen3.5-35B-A3B's shape).
        "qwen3_5_moe" | "qwen3_5_moe_text" => json!({
            "vocab_size": 248_320, "hidden_size": 2048, "num_hidden_layers": 40,
            "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
            "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_num_key_heads": 16,
            "linear_num_value_heads": 32, "full_attention_interval": 4,
            "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
            "num_experts_per_tok": 8, "num_experts": 256, "tie_word_embeddings": false
        }),
        // GraniteMoeHybridConfig.
        "granitemoehybrid" => json!({
            "mamba_n_heads": 128, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4,
            "mamba_expand": 2, "mamba_conv_bias": true, "mamba_proj_bias": false,
            "num_local_experts": 8, "num_experts_per_tok": 2, "shared_intermediate_size": 1024,
            "tie_word_embeddings": false
        }),
        // FalconH1Config.
        "falcon_h1" => json!({
            "mamba_n_heads": 128, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4,
            "mamba_expand": 2, "mamba_conv_bias": true, "mamba_proj_bias": false,
            "mamba_rms_norm": false, "projectors_bias": false, "attention_bias": false,
            "mamba_d_ssm": 1024,
            "mlp_bias": false, "tie_word_embeddings": false
        }),
        // MiniMaxM2Config (configuration_minimax_m2.py, transformers 5.25): head_dim 128 and 8
        // KV heads whatever the hidden size. Its 256 `num_local_experts` is the reader's own
        // fallback, after the `num_experts` alias.
        "minimax_m2" => json!({
            "vocab_size": 200_064, "hidden_size": 3072, "intermediate_size": 1536,
            "num_hidden_layers": 62, "num_attention_heads": 48, "num_key_value_heads": 8,
            "head_dim": 128, "num_experts_per_tok": 8, "tie_word_embeddings": false
        }),
        // NemotronHConfig (transformers 5.25): with neither `layers_block_type` nor
        // `hybrid_override_pattern`, its four default layers are read by `nemotron_h`.
        "nemotron_h" => json!({
            "vocab_size": 131_072, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 21_504,
            "ssm_state_size": 128, "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8,
            "conv_kernel": 4, "use_conv_bias": true, "use_bias": false, "mlp_bias": false,
            "n_routed_experts": 8, "moe_intermediate_size": 7688,
            "moe_shared_expert_intermediate_size": 7688, "num_experts_per_tok": 2,
            "tie_word_embeddings": false
        }),
        // Gemma4TextConfig (configuration_gemma4.py, transformers 5.25): the `global_head_dim`
        // of 512 and the 256-wide per-layer inputs apply when a config leaves them out.
        "gemma4" | "gemma4_text" => json!({
            "vocab_size": 262_144, "hidden_size": 2304, "intermediate_size": 9216,
            "num_hidden_layers": 30, "num_attention_heads": 8, "num_key_value_heads": 4,
            "head_dim": 256, "global_head_dim": 512, "max_position_embeddings": 131_072,
            "tie_word_embeddings": true, "rms_norm_eps": 1e-6, "sliding_window": 512,
            "vocab_size_per_layer_input": 262_144, "hidden_size_per_layer_input": 256,
            "hidden_activation": "gelu_pytorch_tanh"
        }),
        // MiMoV2FlashConfig (configuration_mimo_v2_flash.py, transformers 5.25): MiMo-V2-Flash's
        // shape; `mimo_v2` is read by the same class.
        "mimo_v2" | "mimo_v2_flash" => json!({
            "vocab_size": 152_576, "hidden_size": 4096, "intermediate_size": 16_384,
            "num_hidden_layers": 48, "num_attention_heads": 64, "num_key_value_heads": 4,
            "head_dim": 192, "v_head_dim": 128, "moe_intermediate_size": 2048,
            "n_routed_experts": 256, "num_experts_per_tok": 8, "sliding_window": 129,
            "attention_bias": false, "tie_word_embeddings": false
        }),
        // Step3p7TextConfig (configuration_step3p7.py, transformers 5.25): Step-3.7-Flash's
        // shape, but for the published vocabulary of 128,896.
        "step3p5" | "step3p7" => json!({
            "vocab_size": 128_815, "hidden_size": 4096, "intermediate_size": 11_264,
            "num_hidden_layers": 45, "num_attention_heads": 64, "num_key_value_heads": 8,
            "head_dim": 128, "moe_intermediate_size": 1280, "n_routed_experts": 288,
            "share_expert_dim": 1280, "num_experts_per_tok": 8, "attention_bias": false,
            "tie_word_embeddings": false
        }),
        _ => json!({}),
    };
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The error for sizes that overflow: it names `field`, or the layer count when that is what
/// made the product too large, and the bound.
fn too_large(r: &Reader, field: &str, value: u64) -> InputError {
    let layers = r
        .opt_u64(&["num_hidden_layers", "n_layer", "num_layers"])
        .ok()
        .flatten()
        .unwrap_or(0);
    let (field, value) = if layers > value {
        ("num_hidden_layers", layers)
    } else {
        (field, value)
    };
    r.bad(
        field,
        &Value::from(value),
        "too large: the sizes it implies overflow 64 bits; llm-oom sizes models up to 10^15 parameters",
    )
}

/// `a × b`, or the config error that says which product overflowed.
pub(crate) fn mul(r: &Reader, field: &str, a: u64, b: u64) -> Result<u64, InputError> {
    a.checked_mul(b).ok_or_else(|| too_large(r, field, a))
}

/// `a + b`, likewise.
pub(crate) fn add(r: &Reader, field: &str, a: u64, b: u64) -> Result<u64, InputError> {
    a.checked_add(b).ok_or_else(|| too_large(r, field, a))
}

/// The finished tensor list, or an error naming `field` when a size overflowed.
pub(crate) fn finish(
    r: &Reader,
    field: &str,
    t: Tensors,
) -> Result<Vec<super::spec::TensorGroup>, InputError> {
    let value = r.opt_u64(&[field]).ok().flatten().unwrap_or(0);
    t.finish().ok_or_else(|| too_large(r, field, value))
}

/// `layer_types` as strings, checked against what the family knows and against the layer count.
pub(crate) fn layer_types(
    r: &Reader,
    kind: Kind,
    layers: u64,
) -> Result<Option<Vec<String>>, InputError> {
    let Some(v) = r.get("layer_types") else {
        return Ok(None);
    };
    let Some(a) = v.as_array() else {
        return Err(r.bad("layer_types", v, "expected a list of strings"));
    };
    let mut out = Vec::with_capacity(a.len());
    for t in a {
        match t.as_str() {
            Some(s) if kind.layer_types().contains(&s) => out.push(s.to_string()),
            _ => {
                return Err(r.bad(
                    "layer_types",
                    t,
                    &format!(
                        "llm-oom models only {} layers for this family; it cannot size the rest",
                        kind.layer_types().join(" and ")
                    ),
                ))
            }
        }
    }
    if out.len() as u64 != layers {
        return Err(r.bad(
            "layer_types",
            v,
            &format!("has {} entries for {layers} layers", out.len()),
        ));
    }
    Ok(Some(out))
}

/// The embedding matrix, the final norm and the output head: the same in every family.
pub(crate) fn embeddings(t: &mut Tensors, vocab: u64, hidden: u64, tie: bool) {
    use super::spec::Role;
    t.add(Role::Embedding, vocab, hidden, 1);
    if !tie {
        t.add(Role::LmHead, vocab, hidden, 1);
    }
    t.vector(hidden, 1);
}

/// The experts block of an MoE family: `count` experts of `inter` in `sparse` layers, `active`
/// per token (the first of `keys` set, else `default`), a shared expert of `shared` (0: none);
/// `None` when no layer is sparse.
pub(crate) fn moe(
    r: &Reader,
    keys: &[&str],
    default: u64,
    count: u64,
    inter: u64,
    sparse: u64,
    shared: u64,
) -> Result<Option<Experts>, InputError> {
    let active = r.opt_u64(keys)?.unwrap_or(default);
    Ok((sparse > 0).then_some(Experts {
        count,
        active,
        intermediate_size: inter,
        sparse_layers: sparse,
        shared_intermediate_size: shared,
    }))
}

/// q/k/v/o of a grouped-query attention layer in `count` layers (with their biases if any).
pub(crate) struct Gqa {
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub qkv_bias: bool,
    pub o_bias: bool,
}

impl Gqa {
    /// The same bias (or none) on q, k, v and o.
    pub(crate) fn uniform(
        hidden: u64,
        heads: u64,
        kv_heads: u64,
        head_dim: u64,
        bias: bool,
    ) -> Gqa {
        Gqa {
            hidden,
            heads,
            kv_heads,
            head_dim,
            qkv_bias: bias,
            o_bias: bias,
        }
    }

    pub(crate) fn add(&self, r: &Reader, t: &mut Tensors, count: u64) -> Result<(), InputError> {
        use super::spec::Role;
        let q = mul(r, "num_attention_heads", self.heads, self.head_dim)?;
        let kv = mul(r, "num_key_value_heads", self.kv_heads, self.head_dim)?;
        t.add(Role::AttnQ, q, self.hidden, count);
        t.add(Role::AttnK, kv, self.hidden, count);
        t.add(Role::AttnV, kv, self.hidden, count);
        t.add(Role::AttnO, self.hidden, q, count);
        if self.qkv_bias {
            t.vector(q, count);
            t.vector(kv, count);
            t.vector(kv, count);
        }
        if self.o_bias {
            t.vector(self.hidden, count);
        }
        Ok(())
    }
}

/// The K and V row of a GQA layer.
pub(crate) fn gqa_row(
    r: &Reader,
    kv_heads: u64,
    head_dim: u64,
) -> Result<super::layout::KvRow, InputError> {
    let n = mul(r, "num_key_value_heads", kv_heads, head_dim)?;
    Ok(super::layout::KvRow::Heads { k: n, v: n })
}

/// Shared reads: the sizes every family has.
pub(crate) fn common(r: &Reader) -> Result<(u64, u64, u64), InputError> {
    Ok((
        r.u64(&["hidden_size", "d_model"])?,
        r.u64(&["num_hidden_layers", "n_layer", "num_layers"])?,
        r.u64(&["vocab_size"])?,
    ))
}

/// A fixture's config.json edited by `edit`, then parsed as `plan` parses it (the families' tests).
#[cfg(test)]
pub(crate) fn parse_edited(
    text: &str,
    name: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> Result<crate::model::Spec, String> {
    let mut v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    edit(&mut v);
    crate::model::config::parse_config(&v.to_string(), std::path::Path::new("config.json"), name)
        .map_err(|e| e.to_string())
}
