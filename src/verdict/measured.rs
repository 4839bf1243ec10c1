//! The verdict from measured stages: which stage ran out of memory, what was being allocated, and
//! how the bytes held at that moment split into weights, KV cache, activations and the rest. Pure
//! arithmetic on recorded meter states, so every rule is tested without a device.

use serde::{Deserialize, Serialize};

use super::record::{MemoryRecord, Role};
use super::rules::Code;
use super::{Cause, Contributing, Evidence, Stage, Verdict};
use crate::holes;
use crate::meter::gpu::GpuProcess;
use crate::meter::host::Part;
use crate::probe::protocol::{FragmentationFacts, OomFacts};
use crate::units::Bytes;

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

/// Activations are named the cause only when they clearly outweigh the KV cache at the failing
/// moment: both grow with the prompt, but the cache stays for the whole generation.
const ACTIVATION_DOMINANCE: f64 = 1.5;
/// Free memory of which more than this share is not in the largest block is called fragmented.
const FRAGMENTED: f64 = 0.25;

/// One primary cause from the stages, with the numbers behind it and the record of them.
pub fn classify(stages: &[StageRecord], card: &CardFacts) -> Verdict {
    decide(stages, card)
}

/// The rule that names an out-of-memory's cause from the probe's record (D1–D3), in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OomRule {
    /// D1: other processes hold these bytes, and without them the stage would have fit.
    OtherProcess { others: u64 },
    /// D2: a request of these bytes failed for want of a block that large.
    Fragmentation { request: u64 },
    /// D3: the part the failing stage names (`stage_cause`).
    Stage(Cause),
}

impl OomRule {
    pub fn code(self) -> Code {
        match self {
            OomRule::OtherProcess { .. } => Code::D1,
            OomRule::Fragmentation { .. } => Code::D2,
            OomRule::Stage(_) => Code::D3,
        }
    }

    pub fn cause(self) -> Cause {
        match self {
            OomRule::OtherProcess { .. } => Cause::OtherProcess,
            OomRule::Fragmentation { .. } => Cause::Fragmentation,
            OomRule::Stage(c) => c,
        }
    }
}

/// What the failing stage needed, by part, from its record: `None` when no stage ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed {
    pub stage: Stage,
    /// What the failed request was for (the probe's meter); `None` when the probe said nothing.
    pub part: Option<Role>,
    /// What the stage needed: held at the failure plus the allocation that failed (`need`).
    pub need: u64,
    /// The KV cache it needed (a cache that failed part-way: what it held plus the request).
    pub kv: u64,
    /// What is left of `need` for activations.
    pub act_need: u64,
}

impl Failed {
    pub fn of(r: &MemoryRecord) -> Option<Failed> {
        let (stage, need) = (r.stage?, r.need?);
        let request = r.request.unwrap_or(0);
        let live_kv = r.live.kv_cache.unwrap_or(0);
        let kv = if r.request_for == Some(Role::KvCache) {
            live_kv.saturating_add(request)
        } else {
            live_kv
        };
        let held_apart = r
            .live
            .weights
            .unwrap_or(0)
            .saturating_add(r.live.other.unwrap_or(0))
            .saturating_add(kv);
        Some(Failed {
            stage,
            part: r.request_for,
            need,
            kv,
            act_need: need.saturating_sub(held_apart),
        })
    }
}

/// The rules D1–D3 on the record of a probe whose stage ran out of memory (`from_stages`):
/// `None` when no stage did (D4 and D5 read the stages).
pub fn oom_rule(r: &MemoryRecord) -> Option<OomRule> {
    let f = Failed::of(r)?;
    Some(if let Some(others) = other_processes(r, &f) {
        OomRule::OtherProcess { others }
    } else if let Some(request) = fragmented(r, &f) {
        OomRule::Fragmentation { request }
    } else {
        OomRule::Stage(stage_cause(&f))
    })
}

/// What other processes hold, when without them the stage would have fit (and no
/// `--vram-limit` made the card smaller on purpose: `limit_emulated`).
fn other_processes(r: &MemoryRecord, f: &Failed) -> Option<u64> {
    let limit = r.limit?;
    let others = r.other_processes?;
    (r.limit_emulated != Some(true) && others > 0 && f.need <= limit.saturating_add(others))
        .then_some(others)
}

/// The failed request, when fragmentation explains it: what the stage must hold at least fits
/// the card (weights that are simply too large, or a cache too long, stay the cause however
/// the pool looks), and the pool had the bytes cached or free but not in one block.
fn fragmented(r: &MemoryRecord, f: &Failed) -> Option<u64> {
    let limit = r.limit?;
    let (weights, other) = (r.live.weights.unwrap_or(0), r.live.other.unwrap_or(0));
    let model = r.model_weights.unwrap_or(weights);
    let must_hold = match f.stage {
        Stage::Load => model.saturating_add(other),
        _ => model
            .max(weights)
            .saturating_add(other)
            .saturating_add(f.kv),
    };
    r.request.filter(|&req| {
        // The rule every reader shares (src/holes.rs): holes beside live bytes that fill the
        // card are its tail, not the cause.
        let filled = holes::Pool {
            live: r.this_process.unwrap_or(0),
            unallocated: r.reserved_unallocated.unwrap_or(0),
            request: req,
            limit,
            steady: false,
        }
        .filled();
        !filled
            && f.need <= limit
            && must_hold.saturating_add(req) <= limit
            && (r.reserved_unallocated.is_some_and(|c| c >= req)
                || (r.free.is_some_and(|free| free >= req)
                    && r.largest_free_block.is_some_and(|l| l < req)))
    })
}

/// The cause a failing stage points to, before other processes and fragmentation are considered.
fn stage_cause(f: &Failed) -> Cause {
    match f.stage {
        Stage::Load => Cause::Weights,
        Stage::Concurrency => Cause::Concurrency,
        _ if f.part == Some(Role::Weights) => Cause::Weights,
        _ if f.part == Some(Role::KvCache) => Cause::KvCache,
        _ if f.act_need as f64 > ACTIVATION_DOMINANCE * f.kv as f64 => Cause::Activations,
        _ => Cause::KvCache,
    }
}

/// The record first (`MemoryRecord::from_stages`), then the rules: D1–D3 decide from it alone;
/// the stage that ran out gives the wording.
fn decide(stages: &[StageRecord], card: &CardFacts) -> Verdict {
    let record = MemoryRecord::from_stages(stages, card);
    let fragmentation = stages.iter().find_map(|s| s.fragmentation.clone());
    let (Some(failed), Some(n), Some(rule)) = (
        stages.iter().find(|s| s.outcome == StageOutcome::Oom),
        Failed::of(&record),
        oom_rule(&record),
    ) else {
        return Verdict {
            record: Some(record),
            ..broken_probe(stages).unwrap_or_else(|| fits(stages, card, fragmentation.as_ref()))
        };
    };
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
    need: u64,
    kv: u64,
    act_need: u64,
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
            need: n.need,
            kv: n.kv,
            act_need: n.act_need,
        }
    }

    fn evidence(&self, card: &CardFacts) -> Vec<Evidence> {
        let (oom, c, kv) = (&self.oom, &self.c, self.kv);
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
                format!("activations needed: at least {}", Bytes(self.act_need)),
                self.act_need,
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
                Bytes(self.need.saturating_sub(c.other + card.weights_bytes)),
                Bytes(card.capacity),
                Bytes(c.other)
            ),
            Cause::Concurrency => format!(
                "concurrency: one sequence fits, {} do not: {} needs more than {} on the {} card",
                failed.batch.unwrap_or(0),
                failed.detail,
                Bytes(self.need),
                Bytes(card.capacity)
            ),
            Cause::Activations => format!(
                "activations: {} needs at least {} of activations beside a {} KV cache, past the {} card",
                failed.detail,
                Bytes(self.act_need),
                Bytes(self.kv),
                Bytes(card.capacity)
            ),
            _ => format!(
                "kv_cache: {} needs a {} KV cache beside {} of weights, past the {} card",
                failed.detail,
                Bytes(self.kv),
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
                && bytes.saturating_mul(10) >= self.need
                && !out.iter().any(|c| c.cause == part)
            {
                out.push(Contributing {
                    cause: part,
                    evidence: Evidence::bytes(format!("{what}: {}", Bytes(bytes)), bytes),
                });
            }
        };
        add(Cause::Weights, self.c.weights, "weights".into());
        add(Cause::KvCache, self.kv, "KV cache".into());
        if failed.name != Stage::Load {
            add(Cause::Activations, self.act_need, "activations".into());
        }
        if failed.name == Stage::Concurrency {
            add(
                Cause::Concurrency,
                self.kv + self.act_need,
                format!(
                    "{} sequences' KV cache and activations",
                    failed.batch.unwrap_or(0)
                ),
            );
        }
        if cause == Cause::OtherProcess {
            add(by_stage, self.need, format!("what {} needed", failed.name));
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
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn stage(
        name: Stage,
        outcome: StageOutcome,
        c: Components,
        oom: Option<OomFacts>,
    ) -> StageRecord {
        StageRecord {
            name,
            outcome,
            memory: StageMemory {
                before: c.weights + c.other,
                peak: c.total(),
                after: c.weights + c.other,
            },
            components: c,
            seconds: 0.1,
            detail: "test".into(),
            prompt_tokens: None,
            new_tokens: None,
            batch: Some(8),
            ttft_seconds: None,
            tokens_per_second: None,
            oom,
            reason: None,
            fragmentation: None,
            allocator_slack: 0,
            timeline: Vec::new(),
            fresh_process: false,
        }
    }

    fn oom(requested: u64, held: u64, part: Part) -> OomFacts {
        OomFacts {
            requested: Some(requested),
            held,
            part,
            message: "CUDA_ERROR_OUT_OF_MEMORY".into(),
            free: Some(GIB / 2),
            largest_block: Some(GIB / 2),
            cached: Some(0),
            emulated: false,
        }
    }

    fn card(others: Vec<GpuProcess>, emulated: bool) -> CardFacts {
        CardFacts {
            capacity: 24 * GIB,
            emulated_limit: emulated.then_some(24 * GIB),
            others,
            weights_bytes: 13 * GIB,
        }
    }

    fn comp(w: u64, kv: u64, act: u64) -> Components {
        Components {
            weights: w,
            kv_cache: kv,
            activations: act,
            other: GIB / 2,
        }
    }

    #[test]
    fn each_failing_stage_names_its_cause() {
        let ok = stage(Stage::Load, StageOutcome::Ok, comp(13 * GIB, 0, 0), None);
        let c = card(vec![], true);
        let load = stage(
            Stage::Load,
            StageOutcome::Oom,
            comp(20 * GIB, 0, 0),
            Some(oom(GIB, 23 * GIB, Part::Weights)),
        );
        assert_eq!(classify(&[load], &c).cause, Cause::Weights);
        // A long context: the cache allocation itself fails.
        let kv = stage(
            Stage::FirstToken,
            StageOutcome::Oom,
            comp(13 * GIB, 0, 0),
            Some(oom(11 * GIB, 14 * GIB, Part::KvCache)),
        );
        let v = classify(&[ok.clone(), kv], &c);
        assert_eq!((v.cause, v.stage), (Cause::KvCache, Stage::FirstToken));
        // The cache fits, the prefill's activations are about as large: still the KV cache.
        let close = stage(
            Stage::LongGeneration,
            StageOutcome::Oom,
            comp(13 * GIB, 5 * GIB, 0),
            Some(oom(2 * GIB, 22 * GIB, Part::Activations)),
        );
        assert_eq!(classify(&[ok.clone(), close], &c).cause, Cause::KvCache);
        // Eager scores dwarf a small cache.
        let eager = stage(
            Stage::FirstToken,
            StageOutcome::Oom,
            comp(13 * GIB, GIB, 0),
            Some(oom(8 * GIB, 16 * GIB, Part::Activations)),
        );
        let v = classify(&[ok.clone(), eager], &c);
        assert_eq!(v.cause, Cause::Activations);
        assert!(v.contributing.iter().any(|x| x.cause == Cause::Weights));
        let conc = stage(
            Stage::Concurrency,
            StageOutcome::Oom,
            comp(13 * GIB, 8 * GIB, 0),
            Some(oom(2 * GIB, 23 * GIB, Part::KvCache)),
        );
        let v = classify(&[ok.clone(), conc], &c);
        assert_eq!(v.cause, Cause::Concurrency);
        assert!(v.summary.contains("8 do not"), "{}", v.summary);
    }

    #[test]
    fn other_processes_and_fragmentation_come_from_the_meters() {
        let ok = stage(Stage::Load, StageOutcome::Ok, comp(13 * GIB, 0, 0), None);
        let failed = stage(
            Stage::FirstToken,
            StageOutcome::Oom,
            comp(13 * GIB, GIB, 0),
            Some(oom(2 * GIB, 15 * GIB, Part::Activations)),
        );
        let notebook = GpuProcess {
            pid: 4121,
            name: "python".into(),
            bytes: Some(10 * GIB),
        };
        // Without a limit, 10 GiB held by a notebook is why 17 GiB do not fit on what is left.
        let shared = CardFacts {
            capacity: 14 * GIB,
            emulated_limit: None,
            others: vec![notebook.clone()],
            weights_bytes: 13 * GIB,
        };
        let v = classify(&[ok.clone(), failed.clone()], &shared);
        assert_eq!(v.cause, Cause::OtherProcess);
        assert!(v
            .evidence
            .iter()
            .any(|e| e.text.contains("process 4121 (python) holds 10.0 GiB")));
        // Under an emulated card, other processes are not the question.
        let emulated = CardFacts {
            emulated_limit: Some(14 * GIB),
            ..shared
        };
        assert_ne!(
            classify(&[ok.clone(), failed.clone()], &emulated).cause,
            Cause::OtherProcess
        );
        // 3 GiB free in total, the largest block 1 GiB: a 2 GiB request failed for want of a piece.
        let mut frag = failed;
        frag.oom = Some(OomFacts {
            free: Some(3 * GIB),
            largest_block: Some(GIB),
            ..oom(2 * GIB, 15 * GIB, Part::Activations)
        });
        let v = classify(&[ok.clone(), frag.clone()], &card(vec![], true));
        assert_eq!(v.cause, Cause::Fragmentation);
        // The pool had the bytes cached but not in one piece.
        frag.oom = Some(OomFacts {
            cached: Some(3 * GIB),
            ..oom(2 * GIB, 15 * GIB, Part::Activations)
        });
        assert_eq!(
            classify(&[ok, frag], &card(vec![], true)).cause,
            Cause::Fragmentation
        );
    }

    #[test]
    fn a_pool_with_cached_blocks_does_not_hide_weights_that_are_too_large() {
        // Llama-2-13B on a 24 GiB card (measured on the H200): the load failed for 270 MiB with
        // 1.25 GiB cached in the pool, but 24.2 GiB of weights never fit.
        let mut load = stage(Stage::Load, StageOutcome::Oom, comp(22 * GIB, 0, 0), None);
        load.oom = Some(OomFacts {
            free: Some(245 << 20),
            largest_block: Some(245 << 20),
            cached: Some(1280 << 20),
            ..oom(270 << 20, 23 * GIB, Part::Weights)
        });
        let mut c = card(vec![], true);
        c.weights_bytes = 24_826 << 20;
        assert_eq!(classify(&[load], &c).cause, Cause::Weights);
    }

    /// The record of a first-token step that ran out on a 24 GiB card: 13 GiB of weights, a
    /// 1 GiB cache, half a GiB of context, 15 GiB held and 2 GiB asked for activations.
    fn failed_record() -> MemoryRecord {
        MemoryRecord {
            limit: Some(24 * GIB),
            limit_emulated: Some(false),
            free: Some(GIB / 2),
            this_process: Some(15 * GIB),
            reserved_unallocated: Some(0),
            largest_free_block: Some(GIB / 2),
            other_processes: Some(0),
            request: Some(2 * GIB),
            request_for: Some(Role::Activations),
            need: Some(17 * GIB),
            live: super::super::record::LiveByRole {
                weights: Some(13 * GIB),
                kv_cache: Some(GIB),
                activations: Some(0),
                other: Some(GIB / 2),
                unattributed: None,
            },
            model_weights: Some(13 * GIB),
            stage: Some(Stage::FirstToken),
            ..MemoryRecord::default()
        }
    }

    #[test]
    fn the_d_rules_decide_from_the_record_alone() {
        let r = failed_record();
        let f = Failed::of(&r).expect("a stage ran out");
        assert_eq!(
            (f.need, f.kv, f.act_need),
            (17 * GIB, GIB, 2 * GIB + GIB / 2)
        );
        // 2.5 GiB of activations beside a 1 GiB cache: activations.
        assert_eq!(oom_rule(&r), Some(OomRule::Stage(Cause::Activations)));
        // A request for the cache counts toward it, and names it.
        let kv = MemoryRecord {
            request_for: Some(Role::KvCache),
            ..r.clone()
        };
        assert_eq!(Failed::of(&kv).map(|f| f.kv), Some(3 * GIB));
        assert_eq!(oom_rule(&kv), Some(OomRule::Stage(Cause::KvCache)));
        // The stage names the part before the request does.
        for (stage, cause) in [
            (Stage::Load, Cause::Weights),
            (Stage::Concurrency, Cause::Concurrency),
        ] {
            let at = MemoryRecord {
                stage: Some(stage),
                ..kv.clone()
            };
            assert_eq!(oom_rule(&at).map(OomRule::cause), Some(cause));
            assert_eq!(oom_rule(&at).map(OomRule::code), Some(Code::D3));
        }
        // D1: on a 14 GiB card with 10 GiB held by others, 17 GiB would fit without them …
        let shared = MemoryRecord {
            limit: Some(14 * GIB),
            other_processes: Some(10 * GIB),
            ..r.clone()
        };
        assert_eq!(
            oom_rule(&shared),
            Some(OomRule::OtherProcess { others: 10 * GIB })
        );
        // … unless `--vram-limit` made the card small on purpose.
        let emulated = MemoryRecord {
            limit_emulated: Some(true),
            ..shared
        };
        assert_eq!(oom_rule(&emulated).map(OomRule::code), Some(Code::D3));
        // D2: 3 GiB free, none of it in a 2 GiB piece.
        let holes = MemoryRecord {
            free: Some(3 * GIB),
            largest_free_block: Some(GIB),
            ..r.clone()
        };
        assert_eq!(
            oom_rule(&holes),
            Some(OomRule::Fragmentation { request: 2 * GIB })
        );
        // Weights that never fit stay the cause, however the pool looks.
        let too_large = MemoryRecord {
            model_weights: Some(23 * GIB),
            ..holes
        };
        assert_eq!(oom_rule(&too_large).map(OomRule::code), Some(Code::D3));
        // No stage ran out: no D rule.
        let fine = MemoryRecord {
            stage: None,
            need: None,
            ..r
        };
        assert_eq!(oom_rule(&fine), None);
    }

    #[test]
    fn the_verdict_carries_the_record_it_was_decided_from() {
        let ok = stage(Stage::Load, StageOutcome::Ok, comp(13 * GIB, 0, 0), None);
        let failed = stage(
            Stage::FirstToken,
            StageOutcome::Oom,
            comp(13 * GIB, GIB, 0),
            Some(oom(2 * GIB, 15 * GIB, Part::Activations)),
        );
        let c = card(vec![], false);
        let v = classify(&[ok, failed], &c);
        let r = v.record.as_ref().expect("a record");
        assert_eq!(oom_rule(r).map(OomRule::code), v.rule);
        assert_eq!(oom_rule(r).map(OomRule::cause), Some(v.cause));
        assert_eq!(r.need, Some(17 * GIB));
        assert_eq!(r.request_for, Some(Role::Activations));
        assert_eq!(r.model_weights, Some(13 * GIB));
        assert_eq!(r.limit_emulated, Some(false));
    }

    #[test]
    fn a_run_that_fits_says_so_and_notes_a_fragmented_card() {
        let mut ok = stage(
            Stage::LongGeneration,
            StageOutcome::Ok,
            comp(13 * GIB, GIB, GIB),
            None,
        );
        ok.fragmentation = Some(FragmentationFacts {
            free: 8 * GIB,
            largest_block: 2 * GIB,
            searched_up_to: 8 * GIB,
            reserved: 0,
            in_use: 0,
        });
        let v = classify(&[ok], &card(vec![], true));
        assert_eq!(v.cause, Cause::None);
        assert_eq!(crate::ExitStatus::of(&v).code(), 0);
        assert!(
            v.summary.starts_with("peak 15.5 GiB of 24.0 GiB"),
            "{}",
            v.summary
        );
        assert_eq!(v.contributing[0].cause, Cause::Fragmentation);
    }
}
