//! Engine profiles: what each inference engine allocates beyond weights and KV cache. Weights and
//! KV bytes are the same in every engine; activations, workspaces and allocator behaviour are not.
//! Every engine-dependent number lives in `Profile::of` below, so calibration edits one place.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use super::kv::{DsaCache, MlaCache};
use crate::error::InputError;
use crate::units::{GIB, MIB};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// Hugging Face transformers `generate()` with SDPA attention (its default).
    Transformers,
    /// transformers with `attn_implementation="eager"`: materialised L² attention scores.
    TransformersEager,
    /// vLLM: pre-allocates `gpu_memory_utilization` of the card, pages the KV cache.
    Vllm,
    /// SGLang (`sglang.launch_server`): weights and a token pool within `mem_fraction_static` of
    /// the card, the rest left to activations and CUDA graphs.
    Sglang,
    /// llama.cpp (`llama-server`, `llama-cli`): KV cache sized by `-c` up front, compute buffer by `-ub`.
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
    /// llm-oom's own candle runtime (what `diagnose` probes with): preallocated cache, attention
    /// in query slices, activations read off its code (`estimate::candle`).
    Candle,
}

impl Engine {
    pub const ALL: [Engine; 6] = [
        Engine::Transformers,
        Engine::TransformersEager,
        Engine::Vllm,
        Engine::Sglang,
        Engine::LlamaCpp,
        Engine::Candle,
    ];

    /// Hugging Face transformers, with SDPA or eager attention.
    pub fn is_transformers(self) -> bool {
        matches!(self, Engine::Transformers | Engine::TransformersEager)
    }
}

impl FromStr for Engine {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "transformers" | "hf" | "sdpa" | "transformers-sdpa" => Engine::Transformers,
            "transformers-eager" | "eager" => Engine::TransformersEager,
            "vllm" => Engine::Vllm,
            "sglang" => Engine::Sglang,
            "llama.cpp" | "llamacpp" | "llama-cpp" | "gguf" | "ollama" => Engine::LlamaCpp,
            "candle" | "llm-oom" => Engine::Candle,
            _ => {
                return Err(InputError::Usage(format!(
                    "`{s}` is not an engine llm-oom has a profile for; use transformers, transformers-eager, vllm, sglang, llama.cpp, ollama or candle"
                )))
            }
        })
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Engine::Transformers => "transformers",
            Engine::TransformersEager => "transformers-eager",
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
            Engine::LlamaCpp => "llama.cpp",
            Engine::Candle => "candle",
        })
    }
}

/// What llm-oom's candle runtime holds on the GPU besides tensors: the CUDA context with the
/// kernels and cuBLAS loaded (615,383,040 B, the same in every `diagnose` on the H200) and the
/// least the memory pool kept beyond live tensors at a peak (256 MiB; docs/accuracy.md).
pub const CANDLE_RUNTIME_OVERHEAD: u64 = 615_383_040 + 256 * MIB;

/// Where a profile's constants come from, printed in every report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Calibration {
    /// Fitted to measurements of the real engine (the record is under docs/calibration/).
    Measured { source: &'static str },
    /// Read off the engine's code and defaults; not yet checked on a GPU.
    Derived,
}

/// How the KV cache is laid out in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KvLayout {
    /// Grows by `torch.cat` each step: the old and new copy of one layer's K (or V) coexist briefly.
    Concatenated,
    /// Fixed blocks of `block` tokens per sequence (vLLM's PagedAttention).
    Paged { block: u64 },
    /// Allocated for the whole context up front (llama.cpp's `-c`).
    Preallocated,
}

/// The engine-dependent numbers. Activation terms count bytes per prompt token per sequence, in
/// units of the compute dtype's width, attached to the model dimension they scale with.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Profile {
    pub engine: Engine,
    pub calibration: Calibration,
    /// Device memory that is there before the first tensor and stays: CUDA context, cuBLAS workspace.
    pub runtime_overhead: u64,
    /// Hidden-size tensors alive through a layer (residual, input, norm output, norm's f32 temps).
    pub hidden_copies: f64,
    /// Head-dim tensors per token (RoPE cos and sin).
    pub rope_copies: f64,
    /// Bytes per token outside the model dimensions (position ids, attention mask).
    pub token_bytes: f64,
    /// Intermediate-size tensors alive at the MLP's peak (act(gate), up, product = 3).
    pub mlp_copies: f64,
    /// Materialised attention scores: bytes per score element, all copies alive at once.
    pub score_bytes: Option<f64>,
    /// Logits kept for how many positions of the prefill (1 = only the last, as `generate` does).
    pub logit_positions: LogitPositions,
    pub kv_layout: KvLayout,
    /// Allocator overhead on top of what tensors use (segments the caching allocator cannot hand
    /// back), as fractions of the KV cache and of the activations.
    pub kv_slack: f64,
    pub activation_slack: f64,
    /// Whether sliding-window layers keep only their window in the cache (transformers 5.17's
    /// `generate()` keeps every token for Gemma-2 and Phi-3: measured; vLLM and llama.cpp trim).
    pub caps_sliding_window: bool,
    /// What a multi-head latent attention layer caches per token (see `kv::MlaCache`).
    pub mla_cache: MlaCache,
    /// What a DeepSeek-sparse-attention layer caches per token (see `kv::DsaCache`).
    pub dsa_cache: DsaCache,
    /// The latent is decompressed to every head's K and V over the whole context in each
    /// layer's attention (transformers' `expand_kv`): one layer's worth is alive at a time.
    pub expands_mla: bool,
    /// Conv state of state-space layers: the whole kernel (transformers' Mamba caches keep
    /// `conv_kernel` columns) or kernel − 1 (vLLM, llama.cpp).
    pub conv_state_full_kernel: bool,
    /// Recurrent state kept in f32 (llama.cpp's recurrent cache), else in the 16-bit dtype.
    pub recurrent_state_f32: bool,
    /// Share of the card the engine may take (vLLM's `gpu_memory_utilization`); 1.0 for the rest.
    pub memory_fraction: f64,
    /// Tokens one forward pass processes at most (vLLM `max_num_batched_tokens`, llama.cpp `-ub`);
    /// `None` = the whole prompt of every sequence at once.
    pub prefill_chunk: Option<u64>,
    /// Sequences the engine warms its sampler with at start-up (vLLM `max_num_seqs`).
    pub sampler_warmup_seqs: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogitPositions {
    Last,
    All,
}

impl Profile {
    pub fn of(engine: Engine) -> Profile {
        // transformers 5.17 / torch 2.11 on an H200, bf16 and fp16, 7 architectures
        // (docs/calibration/transformers-h200-2026-11-30.jsonl, fit in docs/accuracy.md):
        // - SDPA prefill peak above weights + prompt KV is, per prompt token,
        //   (3·I + 4·H + 2·head_dim)·d + 32 bytes — exact to 0.1 % for Qwen2.5-0.5B, Mistral-7B,
        //   Llama-2-7B, Llama-3-8B, Qwen2.5-7B, Gemma-2-9B; Phi-3's fused gate_up holds 4·I.
        // - eager adds B·P²·(heads·10 + d): scores, scaled copy, f32 softmax, cast back (2+2+4+2
        //   bytes) and the 4-D mask; plus repeat_kv's 2·q_dim for GQA models.
        // - The largest prompt that survives generate(256) under a 24 GiB cap needs 1.09–1.28 ×
        //   the allocated bytes (the caching allocator's segments; reserved/allocated was 1.22 at
        //   16k tokens). Slack 0.24 on the KV cache and 0.16 on activations is the best fit that
        //   keeps all nine measured limits (6 models, batch 1–8, sdpa and eager) at or above the
        //   prediction (docs/calibration/transformers-limits-h200-2026-11-30.jsonl).
        // - Sliding windows do not shrink the cache in generate() (Gemma-2 and Phi-3 limits fit
        //   only with every token kept).
        // - CUDA context 619 MiB (NVML after init) + cuBLAS workspace 32 MiB.
        let transformers = Profile {
            engine,
            calibration: Calibration::Measured {
                source: "docs/calibration/transformers-h200-2026-11-30.jsonl",
            },
            runtime_overhead: 652 * MIB,
            hidden_copies: 4.0,
            rope_copies: 2.0,
            token_bytes: 32.0,
            mlp_copies: 3.0,
            score_bytes: None,
            logit_positions: LogitPositions::Last,
            kv_layout: KvLayout::Concatenated,
            kv_slack: 0.24,
            activation_slack: 0.16,
            caps_sliding_window: false,
            // transformers 5.17 caches MLA's compressed latent: modeling_deepseek_v2.py (and _v3,
            // kimi_linear) call `past_key_values.update(k_nope, k_pe, …)` with the kv_lora_rank
            // and rope parts viewed as one head, then `expand_kv` decompresses the whole context
            // for each layer's attention. Measured by tests/transformers_cache.rs through the real
            // generate(): 576 bf16 elements per token per layer at V2-Lite's widths.
            mla_cache: MlaCache::Latent,
            // DeepSeek sparse attention: the latent and the indexer's key, as 5.25 caches them
            // (`kv::DsaCache::Index`; 5.17 cached the expanded heads).
            dsa_cache: DsaCache::Index,
            expands_mla: true,
            conv_state_full_kernel: true,
            recurrent_state_f32: false,
            memory_fraction: 1.0,
            prefill_chunk: None,
            sampler_warmup_seqs: 0,
        };
        match engine {
            Engine::Transformers => transformers,
            Engine::TransformersEager => Profile {
                score_bytes: Some(10.0),
                ..transformers
            },
            Engine::Vllm => Profile {
                calibration: Calibration::Derived,
                runtime_overhead: GIB, // CUDA context + CUDA graphs of the decode batch sizes
                kv_layout: KvLayout::Paged { block: 16 },
                memory_fraction: 0.90,
                prefill_chunk: Some(8192),
                sampler_warmup_seqs: 256,
                kv_slack: 0.0,
                activation_slack: 0.0,
                caps_sliding_window: true,
                // the MLA attention backends cache the latent (kv_lora_rank + rope) per token
                mla_cache: MlaCache::Latent,
                dsa_cache: DsaCache::Fp8Index,
                expands_mla: false,
                conv_state_full_kernel: false,
                ..transformers
            },
            // SGLang: a token pool (page size 1) within mem_fraction_static, chunked prefill of
            // 2,048 tokens on cards under 35 GiB (server_args.py `_handle_gpu_memory_settings`);
            // the CUDA context before the model loads (`estimate::sglang_startup`).
            Engine::Sglang => Profile {
                calibration: Calibration::Derived,
                runtime_overhead: super::sglang_startup::CUDA_CONTEXT,
                kv_layout: KvLayout::Paged { block: 1 },
                // what SGLang's default leaves to activations on a 24 GB card (0.847)
                memory_fraction: 0.85,
                prefill_chunk: Some(2048),
                sampler_warmup_seqs: 0,
                kv_slack: 0.0,
                activation_slack: 0.0,
                caps_sliding_window: true,
                mla_cache: MlaCache::Latent,
                dsa_cache: DsaCache::Fp8Index,
                expands_mla: false,
                conv_state_full_kernel: false,
                ..transformers
            },
            // llm-oom's runtime: activations from `estimate::candle` (its code, measured by
            // tests/runtime_activations.rs on the CPU and by `diagnose` on the H200); the
            // constants here are the CUDA context and the libraries' workspaces.
            Engine::Candle => Profile {
                calibration: Calibration::Derived,
                runtime_overhead: CANDLE_RUNTIME_OVERHEAD,
                kv_layout: KvLayout::Preallocated,
                kv_slack: 0.0,
                activation_slack: 0.0,
                caps_sliding_window: false,
                ..transformers
            },
            // llama.cpp b11312 on an H200: its buffers (model, KV, compute), runtime and margin
            // are `estimate::llamacpp`, fitted to and replayed against 63 runs
            // (tests/llamacpp_replay.rs); here only what its cache keeps per layer kind.
            Engine::LlamaCpp => Profile {
                calibration: Calibration::Measured {
                    source: "docs/calibration/llamacpp-h200-2026-12-01.jsonl",
                },
                runtime_overhead: super::llamacpp::RUNTIME_BASE,
                kv_layout: KvLayout::Preallocated,
                caps_sliding_window: true,
                mla_cache: MlaCache::LatentKv,
                expands_mla: false,
                conv_state_full_kernel: false,
                recurrent_state_f32: true,
                ..transformers
            },
        }
    }

    pub fn calibration_note(&self) -> String {
        match self.calibration {
            Calibration::Measured { source } => {
                format!("calibrated against {} ({source})", self.engine)
            }
            Calibration::Derived => format!(
                "derived from {}'s code and defaults, not yet measured on a GPU",
                self.engine
            ),
        }
    }
}
