//! The verdict wing: the one vocabulary of causes and every road to a verdict — predicted from an
//! estimate (`predicted`), measured from probe stages (`measured`), read from a log (`read`) —
//! and the remedies with their price (`remedy`, `pricing`).

pub mod knobs;
pub mod llama_refusal;
pub mod llama_server;
pub mod measured;
pub mod placed;
pub mod predicted;
pub mod pricing;
pub mod read;
pub mod record;
pub mod remedy;
pub mod rules;
pub mod sglang_startup;
pub mod snapshot;
pub mod split;
pub mod startup;

use std::fmt;

use serde::Serialize;

pub use remedy::{Remedy, RemedyBudget};

/// Where GPU memory went. One primary cause per verdict; others may contribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The parameters alone do not fit.
    Weights,
    /// Context length (prompt + new tokens) grows the KV cache past the budget at batch 1.
    KvCache,
    /// Prefill buffers: attention scores, logits, MLP intermediates.
    Activations,
    /// Batch size or parallel requests multiply KV cache and activations.
    Concurrency,
    /// Enough memory is free in total but not in one piece.
    Fragmentation,
    /// Memory held outside this workload.
    OtherProcess,
    /// Host RAM, not the GPU, ran out (the Linux OOM killer, a container limit).
    HostMemory,
    /// It fits / no OOM happened.
    None,
    /// The evidence does not decide.
    Unknown,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Weights => "weights",
            Cause::KvCache => "kv_cache",
            Cause::Activations => "activations",
            Cause::Concurrency => "concurrency",
            Cause::Fragmentation => "fragmentation",
            Cause::OtherProcess => "other_process",
            Cause::HostMemory => "host_memory",
            Cause::None => "none",
            Cause::Unknown => "unknown",
        }
    }

    /// A sentence fragment for the headline: "the KV cache".
    pub fn describe(self) -> &'static str {
        match self {
            Cause::Weights => "the weights alone do not fit",
            Cause::KvCache => "the KV cache grows past the budget with the context length",
            Cause::Activations => {
                "prefill activations (attention scores, MLP intermediates, logits) overflow"
            }
            Cause::Concurrency => "concurrent sequences multiply the KV cache and activations",
            Cause::Fragmentation => "free memory is fragmented: no block is large enough",
            Cause::OtherProcess => "another process holds the memory this workload needs",
            Cause::HostMemory => "host RAM ran out, not GPU memory",
            Cause::None => "it fits",
            Cause::Unknown => "the evidence does not decide the cause",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The moments of a generation where memory can run out (also the probe's stage names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Environment,
    Load,
    FirstToken,
    LongGeneration,
    Concurrency,
    Fragmentation,
    Unknown,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Environment => "environment",
            Stage::Load => "load",
            Stage::FirstToken => "first_token",
            Stage::LongGeneration => "long_generation",
            Stage::Concurrency => "concurrency",
            Stage::Fragmentation => "fragmentation",
            Stage::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One fact behind a verdict: a sentence, and the number it rests on when there is one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Line of the log it was read from (explain, watch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
}

impl Evidence {
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            bytes: None,
            line: None,
        }
    }
    pub fn bytes(text: impl Into<String>, bytes: u64) -> Self {
        Self {
            text: text.into(),
            bytes: Some(bytes),
            line: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Contributing {
    pub cause: Cause,
    pub evidence: Evidence,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub cause: Cause,
    pub stage: Stage,
    /// 0–1: exact arithmetic ≈ 0.95, a calibrated prediction lower, a guess from a log lower still.
    pub confidence: f64,
    pub summary: String,
    pub evidence: Vec<Evidence>,
    pub contributing: Vec<Contributing>,
    /// The rule that decided it (`rules::Code`: `P5`, `E72`, `R6` …), where a reader's rule did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<rules::Code>,
    /// The figures it was decided from, where a road reads them into one record (PyTorch's
    /// message, its allocator record, `watch`'s merge of both, `diagnose`'s stages).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<record::MemoryRecord>,
}
