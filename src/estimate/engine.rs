//! Engine profiles: what each inference engine allocates beyond weights and KV cache. Weights and
//! KV bytes are the same in every engine; activations, workspaces and allocator behaviour are not.
//! Every engine-dependent number lives in `Profile::of` below, so calibration edits one place.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

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
    /// llama.cpp (`llama-server`, `llama-cli`): KV cache sized by `-c` up front, compute buffer by `-ub`.
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
}

impl Engine {
    pub const ALL: [Engine; 4] = [
        Engine::Transformers,
        Engine::TransformersEager,
        Engine::Vllm,
        Engine::LlamaCpp,
    ];
}

impl FromStr for Engine {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "transformers" | "hf" | "sdpa" | "transformers-sdpa" => Engine::Transformers,
            "transformers-eager" | "eager" => Engine::TransformersEager,
            "vllm" => Engine::Vllm,
            "llama.cpp" | "llamacpp" | "llama-cpp" | "gguf" | "ollama" => Engine::LlamaCpp,
            _ => {
                return Err(InputError::Usage(format!(
                    "`{s}` is not an engine llm-oom has a profile for; use transformers, transformers-eager, vllm or llama.cpp"
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
            Engine::LlamaCpp => "llama.cpp",
        })
    }
}

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

/// The engine-dependent numbers. Activation coefficients count bytes per prompt token per sequence
/// in units of the compute dtype's width, attached to the model dimension they scale with.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Profile {
    pub engine: Engine,
    pub calibration: Calibration,
    /// Device memory outside the allocator's view: CUDA context, cuBLAS/cuDNN workspaces.
    pub runtime_overhead: u64,
    /// Hidden-state copies alive through a layer (residual stream, norm output, norm's f32 temps).
    pub hidden_copies: f64,
    /// Intermediate-size tensors alive at the MLP's peak (gate·act, up, product = 3).
    pub mlp_copies: f64,
    /// q-sized tensors alive at the attention's peak (q, RoPE temporaries, output, its transpose).
    pub q_copies: f64,
    /// Materialised attention scores: bytes per score element (scores + f32 softmax + cast back).
    pub score_bytes: Option<f64>,
    /// Logits kept for how many positions of the prefill (1 = only the last, as `generate` does).
    pub logit_positions: LogitPositions,
    pub kv_layout: KvLayout,
    /// Allocator rounding and caching on top of what tensors use (fraction of KV + activations).
    pub allocator_slack: f64,
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
        let transformers = Profile {
            engine,
            calibration: Calibration::Derived,
            runtime_overhead: 512 * MIB,
            hidden_copies: 4.0,
            mlp_copies: 3.0,
            q_copies: 4.0,
            score_bytes: None,
            logit_positions: LogitPositions::Last,
            kv_layout: KvLayout::Concatenated,
            allocator_slack: 0.02,
            memory_fraction: 1.0,
            prefill_chunk: None,
            sampler_warmup_seqs: 0,
        };
        match engine {
            Engine::Transformers => transformers,
            // eager: scores in the compute dtype, softmax in f32, cast back: 2 + 4 + 2 bytes.
            Engine::TransformersEager => Profile {
                score_bytes: Some(8.0),
                ..transformers
            },
            Engine::Vllm => Profile {
                runtime_overhead: GIB, // CUDA context + CUDA graphs of the decode batch sizes
                kv_layout: KvLayout::Paged { block: 16 },
                memory_fraction: 0.90,
                prefill_chunk: Some(8192),
                sampler_warmup_seqs: 256,
                allocator_slack: 0.0,
                ..transformers
            },
            Engine::LlamaCpp => Profile {
                runtime_overhead: 384 * MIB,
                hidden_copies: 6.0,
                mlp_copies: 3.0,
                q_copies: 3.0,
                // KQ in f32 without flash attention, for a micro-batch against the whole context.
                score_bytes: Some(4.0),
                kv_layout: KvLayout::Preallocated,
                allocator_slack: 0.0,
                prefill_chunk: Some(512),
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
