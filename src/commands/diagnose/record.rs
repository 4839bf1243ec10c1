//! A probe task's measurements as a stage of the report: what each component held at its peak,
//! and what a child that died or hung leaves behind.

use super::fit::PrefillPoint;
use crate::meter::host::Part;
use crate::probe::protocol::{Outcome, TaskResult};
use crate::probe::session::Reply;
use crate::verdict::measured::{Components, StageMemory, StageRecord};
use crate::verdict::Stage;

/// Activations of a prefill: live bytes at its peak above those before it and the cache.
pub fn prefill_point(r: &TaskResult, tokens: usize, total: usize) -> PrefillPoint {
    PrefillPoint {
        tokens: tokens as u64,
        total_tokens: total as u64,
        activations: r
            .used
            .prefill_peak
            .unwrap_or(r.used.peak)
            .saturating_sub(r.used.before + r.kv_bytes),
    }
}

/// A stage record from a task's measurements.
pub fn record(stage: Stage, r: &TaskResult, weights: u64, detail: &str) -> StageRecord {
    let peak = match (&r.oom, r.prefill_peak) {
        (Some(o), _) => o.held.max(r.peak),
        (None, Some(pp)) => pp.max(r.peak),
        _ => r.peak,
    };
    // A cache that failed part-way holds what it got so far; nothing ran after it.
    let (kv_cache, activations) = match &r.oom {
        Some(o) if o.part == Part::KvCache => (peak.saturating_sub(r.before), 0),
        _ => (r.kv_bytes, peak.saturating_sub(r.before + r.kv_bytes)),
    };
    StageRecord {
        name: stage,
        outcome: r.outcome,
        memory: StageMemory {
            before: r.before,
            peak,
            after: r.after,
        },
        components: Components {
            weights,
            kv_cache,
            activations,
            // What was held before the stage beside the weights: CUDA context, library workspaces.
            other: r.before.saturating_sub(weights),
        },
        seconds: r.seconds,
        detail: detail.to_string(),
        prompt_tokens: None,
        new_tokens: None,
        batch: None,
        ttft_seconds: r.prefill_seconds,
        tokens_per_second: r.decode_tokens_per_second,
        oom: r.oom.clone(),
        reason: r.error.clone(),
        fragmentation: None,
        allocator_slack: r.peak.saturating_sub(r.used.peak),
        timeline: r.timeline.clone(),
        fresh_process: false,
    }
}

/// A stage whose child died or hung: an out-of-memory if its last words say so, else an error.
pub fn died(stage: Stage, reply: Reply, detail: &str) -> StageRecord {
    let mut s = StageRecord::skipped(stage, "");
    s.detail = detail.to_string();
    match reply {
        Reply::Died { message, oom } => {
            s.outcome = if oom.is_some() {
                Outcome::Oom
            } else {
                Outcome::Error
            };
            s.memory.peak = oom.as_ref().map_or(0, |o| o.held);
            s.oom = oom;
            s.reason = Some(message);
        }
        Reply::TimedOut { after, words } => {
            s.outcome = Outcome::Timeout;
            let last = if words.is_empty() {
                String::new()
            } else {
                format!("; its last words: {words}")
            };
            s.reason = Some(format!(
                "no answer after {:.0} s; the probe was stopped (raise --stage-timeout){last}",
                after.as_secs_f64()
            ));
        }
        Reply::Done(_) => {}
    }
    s
}

/// A stage record from a reply, whatever became of the child.
pub fn from_reply(stage: Stage, reply: Reply, weights: u64, detail: &str) -> StageRecord {
    match reply {
        Reply::Done(r) => record(stage, &r, weights, detail),
        other => died(stage, other, detail),
    }
}
