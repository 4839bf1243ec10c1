//! diagnose's rules D1–D3: the cause of a probe stage's out-of-memory, from its record alone
//! (`MemoryRecord::from_stages`), in order: other processes (D1), fragmentation (D2), the part the
//! failing stage names (D3). Their codes and docs are in `verdict::rules::codes`.

use super::super::record::{MemoryRecord, Role};
use super::super::rules::Code;
use super::super::{Cause, Stage};
use crate::holes;

/// Activations are named the cause only when they clearly outweigh the KV cache at the failing
/// moment: both grow with the prompt, but the cache stays for the whole generation.
const ACTIVATION_DOMINANCE: f64 = 1.5;

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
    Failed::of(r).map(|f| rule_for(r, &f))
}

/// The rules D1–D3 on a record and what its failing stage needed ([`Failed::of`] that record).
pub(super) fn rule_for(r: &MemoryRecord, f: &Failed) -> OomRule {
    if let Some(others) = other_processes(r, f) {
        OomRule::OtherProcess { others }
    } else if let Some(request) = fragmented(r, f) {
        OomRule::Fragmentation { request }
    } else {
        OomRule::Stage(stage_cause(f))
    }
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
pub(super) fn stage_cause(f: &Failed) -> Cause {
    match f.stage {
        Stage::Load => Cause::Weights,
        Stage::Concurrency => Cause::Concurrency,
        _ if f.part == Some(Role::Weights) => Cause::Weights,
        _ if f.part == Some(Role::KvCache) => Cause::KvCache,
        _ if f.act_need as f64 > ACTIVATION_DOMINANCE * f.kv as f64 => Cause::Activations,
        _ => Cause::KvCache,
    }
}
