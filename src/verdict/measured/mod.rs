//! The verdict from measured stages: which stage ran out of memory, what was being allocated, and
//! how the bytes held at that moment split into weights, KV cache, activations and the rest. Pure
//! arithmetic on recorded meter states, so every rule is tested without a device.

use serde::{Deserialize, Serialize};

use super::record::MemoryRecord;
use super::rules::Code;
use super::{Cause, Contributing, Evidence, Stage, Verdict};
use crate::meter::gpu::GpuProcess;
use crate::meter::host::Part;
use crate::probe::protocol::{FragmentationFacts, OomFacts};
use crate::units::Bytes;

mod rules;

pub use rules::{oom_rule, Failed, OomRule};
use rules::{rule_for, stage_cause};

/// A stage's outcome is its task's (`skipped` when it did not run).
pub use crate::probe::protocol::Outcome as StageOutcome;

/// Device bytes the probe held, base included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageMemory {
    pub before: u64,
    pub peak: u64,
    pub after: u64,
}

/// The peak of a stage, by component.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Components {
    pub weights: u64,
    pub kv_cache: u64,
    pub activations: u64,
    /// CUDA context and libraries (the heap's baseline on the CPU).
    pub other: u64,
}

impl Components {
    pub fn total(&self) -> u64 {
        self.weights + self.kv_cache + self.activations + self.other
    }
}

/// One stage of the probe, as the report and the JSON contract show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRecord {
    pub name: Stage,
    pub outcome: StageOutcome,
    pub memory: StageMemory,
    pub components: Components,
    pub seconds: f64,
    /// What ran: "prefill 2,048 tokens", "2,048 + 256 tokens × 8 sequences".
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// Time to first token (first_token), decode tokens/s (long_generation, concurrency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_second: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom: Option<OomFacts>,
    /// Why it was skipped, or how it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fragmentation: Option<FragmentationFacts>,
    /// Bytes the allocator held beyond live tensors at the stage's peak (CUDA's pool).
    #[serde(default)]
    pub allocator_slack: u64,
    /// Memory sampled through the stage (host heap; GPU through NVML).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<crate::meter::sampler::MemorySnapshot>,
    /// Run in a fresh process, as the user's program runs it (the decisive run at the edge).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fresh_process: bool,
}

impl StageRecord {
    /// The same record with the workload it ran: prompt tokens, new tokens, sequences.
    pub fn sized(mut self, prompt: u64, new: u64, batch: u64) -> StageRecord {
        self.prompt_tokens = Some(prompt);
        self.new_tokens = Some(new);
        self.batch = Some(batch);
        self
    }

    pub fn skipped(name: Stage, reason: impl Into<String>) -> StageRecord {
        StageRecord {
            name,
            outcome: StageOutcome::Skipped,
            memory: StageMemory::default(),
            components: Components::default(),
            seconds: 0.0,
            detail: String::new(),
            prompt_tokens: None,
            new_tokens: None,
            batch: None,
            ttft_seconds: None,
            tokens_per_second: None,
            oom: None,
            reason: Some(reason.into()),
            fragmentation: None,
            allocator_slack: 0,
            timeline: Vec::new(),
            fresh_process: false,
        }
    }
}

/// What the probe knows about the card beyond the stages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardFacts {
    /// The card the stages ran against (the limit, or what the device had).
    pub capacity: u64,
    /// Set when `--vram-limit` emulated a smaller card: other processes are then not the question.
    pub emulated_limit: Option<u64>,
    /// Other processes holding memory on the GPU.
    pub others: Vec<GpuProcess>,
    /// The model's weights in the probed dtype, exact from the shapes.
    pub weights_bytes: u64,
}

/// Free memory of which more than this share is not in the largest block is called fragmented.
const FRAGMENTED: f64 = 0.25;

/// One primary cause from the stages, with the numbers behind it and the record of them: the
/// record first (`MemoryRecord::from_stages`), then the rules, D1–D3 deciding from it alone; the
/// stage that ran out gives the wording.
pub fn classify(stages: &[StageRecord], card: &CardFacts) -> Verdict {
    let record = MemoryRecord::from_stages(stages, card);
    let fragmentation = stages.iter().find_map(|s| s.fragmentation.clone());
    let (Some(failed), Some(n)) = (
        stages.iter().find(|s| s.outcome == StageOutcome::Oom),
        Failed::of(&record),
    ) else {
        return Verdict {
            record: Some(record),
            ..broken_probe(stages).unwrap_or_else(|| fits(stages, card, fragmentation.as_ref()))
        };
    };
    let rule = rule_for(&record, &n);
    let f = Failure::of(failed, n);
    let mut evidence = f.evidence(card);
    let by_stage = stage_cause(&n);
    let cause = rule.cause();
    let summary = match rule {
        OomRule::OtherProcess { others } => {
            evidence.extend(card.others.iter().map(|p| {
                Evidence::bytes(
                    format!(
                        "process {} ({}) holds {}",
                        p.pid,
                        p.name,
                        p.bytes
                            .map_or("an unknown amount".into(), |b| Bytes(b).to_string())
                    ),
                    p.bytes.unwrap_or(0),
                )
            }));
            format!(
                "other_process: {} needed {} at {}; other processes hold {} of this GPU, without them it would fit",
                failed.name,
                Bytes(n.need),
                failed.detail,
                Bytes(others)
            )
        }
        OomRule::Fragmentation { request } => format!(
            "fragmentation: a {} request failed with {} free and {} cached, but no block that large",
            Bytes(request),
            Bytes(f.oom.free.unwrap_or(0)),
            Bytes(f.oom.cached.unwrap_or(0))
        ),
        OomRule::Stage(by_stage) => f.summary(by_stage, card),
    };
    Verdict {
        record: Some(record),
        rule: Some(rule.code()),
        cause,
        stage: failed.name,
        confidence: if f.oom.emulated { 0.9 } else { 0.95 },
        summary,
        evidence,
        contributing: f.contributing(cause, by_stage),
    }
}

/// A stage that failed (or timed out) with no out-of-memory: the probe's fault, said as such.
fn broken_probe(stages: &[StageRecord]) -> Option<Verdict> {
    let broken = stages
        .iter()
        .find(|s| matches!(s.outcome, StageOutcome::Error | StageOutcome::Timeout))?;
    let why = broken.reason.clone().unwrap_or_else(|| "it failed".into());
    Some(Verdict {
        record: None,
        rule: Some(Code::D4),
        cause: Cause::Unknown,
        stage: broken.name,
        confidence: 0.0,
        summary: format!(
            "the probe failed at {} before any out-of-memory: {why}",
            broken.name
        ),
        evidence: vec![Evidence::text(why)],
        contributing: Vec::new(),
    })
}

/// The stage that ran out of memory, for the wording, with what the record says it needed.
struct Failure<'a> {
    stage: &'a StageRecord,
    oom: OomFacts,
    c: Components,
    /// What the rules read it needed.
    n: Failed,
}

impl<'a> Failure<'a> {
    fn of(failed: &'a StageRecord, n: Failed) -> Failure<'a> {
        let oom = failed.oom.clone().unwrap_or(OomFacts {
            requested: None,
            held: failed.memory.peak,
            part: Part::Other,
            message: "out of memory".into(),
            free: None,
            largest_block: None,
            cached: None,
            emulated: false,
        });
        Failure {
            stage: failed,
            oom,
            c: failed.components,
            n,
        }
    }

    fn evidence(&self, card: &CardFacts) -> Vec<Evidence> {
        let (oom, c, kv) = (&self.oom, &self.c, self.n.kv);
        vec![
            Evidence::text(format!(
                "{} ran out of memory{}: {}",
                self.stage.name,
                match oom.requested {
                    Some(r) => format!(" allocating {} for the {}", Bytes(r), part_name(oom.part)),
                    None => String::new(),
                },
                oom.message
            )),
            Evidence::bytes(
                format!("held at that moment: {}", Bytes(oom.held)),
                oom.held,
            ),
            Evidence::bytes(format!("weights: {}", Bytes(c.weights)), c.weights),
            Evidence::bytes(format!("KV cache: {}", Bytes(kv)), kv),
            Evidence::bytes(
                format!("activations needed: at least {}", Bytes(self.n.act_need)),
                self.n.act_need,
            ),
            Evidence::bytes(
                format!("CUDA context and libraries: {}", Bytes(c.other)),
                c.other,
            ),
            Evidence::bytes(
                format!("the card for the probe: {}", Bytes(card.capacity)),
                card.capacity,
            ),
        ]
    }

    fn summary(&self, cause: Cause, card: &CardFacts) -> String {
        let (failed, c) = (self.stage, &self.c);
        match cause {
            Cause::Weights => format!(
                "weights: the model's {} of weights (and {} more while loading) do not fit the {} card beside {} of CUDA context",
                Bytes(card.weights_bytes),
                Bytes(self.n.need.saturating_sub(c.other + card.weights_bytes)),
                Bytes(card.capacity),
                Bytes(c.other)
            ),
            Cause::Concurrency => format!(
                "concurrency: one sequence fits, {} do not: {} needs more than {} on the {} card",
                failed.batch.unwrap_or(0),
                failed.detail,
                Bytes(self.n.need),
                Bytes(card.capacity)
            ),
            Cause::Activations => format!(
                "activations: {} needs at least {} of activations beside a {} KV cache, past the {} card",
                failed.detail,
                Bytes(self.n.act_need),
                Bytes(self.n.kv),
                Bytes(card.capacity)
            ),
            _ => format!(
                "kv_cache: {} needs a {} KV cache beside {} of weights, past the {} card",
                failed.detail,
                Bytes(self.n.kv),
                Bytes(c.weights),
                Bytes(card.capacity)
            ),
        }
    }

    /// The other parts that took at least a tenth of what was needed.
    fn contributing(&self, cause: Cause, by_stage: Cause) -> Vec<Contributing> {
        let failed = self.stage;
        let mut out: Vec<Contributing> = Vec::new();
        let mut add = |part: Cause, bytes: u64, what: String| {
            if part != cause
                && bytes > 0
                && bytes.saturating_mul(10) >= self.n.need
                && !out.iter().any(|c| c.cause == part)
            {
                out.push(Contributing {
                    cause: part,
                    evidence: Evidence::bytes(format!("{what}: {}", Bytes(bytes)), bytes),
                });
            }
        };
        add(Cause::Weights, self.c.weights, "weights".into());
        add(Cause::KvCache, self.n.kv, "KV cache".into());
        if failed.name != Stage::Load {
            add(Cause::Activations, self.n.act_need, "activations".into());
        }
        if failed.name == Stage::Concurrency {
            add(
                Cause::Concurrency,
                self.n.kv + self.n.act_need,
                format!(
                    "{} sequences' KV cache and activations",
                    failed.batch.unwrap_or(0)
                ),
            );
        }
        if cause == Cause::OtherProcess {
            add(
                by_stage,
                self.n.need,
                format!("what {} needed", failed.name),
            );
        }
        out
    }
}

fn part_name(p: Part) -> &'static str {
    match p {
        Part::Weights => "weights",
        Part::KvCache => "KV cache",
        Part::Activations => "activations",
        Part::Other => "runtime",
    }
}

fn fits(stages: &[StageRecord], card: &CardFacts, frag: Option<&FragmentationFacts>) -> Verdict {
    // The fragmentation stage fills the card on purpose to find its largest block: its peak is
    // the probe's, not the workload's.
    let peak = stages
        .iter()
        .filter(|s| s.outcome == StageOutcome::Ok && s.name != Stage::Fragmentation)
        .max_by_key(|s| s.memory.peak);
    let mut evidence = Vec::new();
    let mut contributing = Vec::new();
    let summary = match peak {
        Some(s) => {
            evidence.push(Evidence::bytes(
                format!(
                    "highest stage: {} at {} ({})",
                    s.name,
                    Bytes(s.memory.peak),
                    s.detail
                ),
                s.memory.peak,
            ));
            format!(
                "peak {} of {} at {} ({} spare)",
                Bytes(s.memory.peak),
                Bytes(card.capacity),
                s.name,
                Bytes(card.capacity.saturating_sub(s.memory.peak))
            )
        }
        None => "no stage ran".into(),
    };
    if let Some(f) = frag.filter(|f| f.free > 0 && f.searched_up_to > 0) {
        let ratio = 1.0 - f.largest_block as f64 / f.free.min(f.searched_up_to) as f64;
        evidence.push(Evidence::bytes(
            format!(
                "largest free block {}{} of {} free ({:.0} % fragmented)",
                if f.largest_block >= f.searched_up_to {
                    "at least "
                } else {
                    ""
                },
                Bytes(f.largest_block),
                Bytes(f.free),
                ratio * 100.0
            ),
            f.largest_block,
        ));
        if ratio > FRAGMENTED {
            contributing.push(Contributing {
                cause: Cause::Fragmentation,
                evidence: Evidence::bytes(
                    format!(
                        "only {} of {} free is in one piece",
                        Bytes(f.largest_block),
                        Bytes(f.free)
                    ),
                    f.free - f.largest_block,
                ),
            });
        }
    }
    Verdict {
        record: None,
        rule: Some(Code::D5),
        cause: if peak.is_some() {
            Cause::None
        } else {
            Cause::Unknown
        },
        stage: peak.map_or(Stage::Unknown, |s| s.name),
        confidence: 0.95,
        summary,
        evidence,
        contributing,
    }
}

#[cfg(test)]
mod tests;
