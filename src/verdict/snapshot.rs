//! The verdict from PyTorch's own record ([`crate::snapshot::SnapshotReport`]): measured, not read
//! from text, so it comes first when `watch` or `explain` has one.

use super::rules::Code;
use super::{Cause, Contributing, Evidence, Stage, Verdict};
use crate::snapshot::attribute::{SnapshotCause, SnapshotReport};
use crate::snapshot::classify::Component;
use crate::units::Bytes;

/// The verdict a snapshot supports; `confidence` is high when stacks were recorded, lower when
/// only the segments are there (history off: fragmentation is still exact, attribution is not).
pub fn from_snapshot(r: &SnapshotReport) -> Verdict {
    let s = &r.summary;
    let cause = match s.cause {
        SnapshotCause::Weights => Cause::Weights,
        SnapshotCause::KvCache => Cause::KvCache,
        SnapshotCause::Activations => Cause::Activations,
        SnapshotCause::Fragmentation => Cause::Fragmentation,
        SnapshotCause::OtherProcess => Cause::OtherProcess,
        SnapshotCause::Other | SnapshotCause::Unknown => Cause::Unknown,
    };
    let stage = match cause {
        Cause::Weights => Stage::Load,
        Cause::Activations => Stage::FirstToken,
        Cause::Fragmentation => Stage::Fragmentation,
        Cause::OtherProcess => Stage::Environment,
        _ => Stage::Unknown,
    };
    // A trace with no `oom` entry: the allocator never failed while it recorded.
    let no_oom = r.oom.is_none() && r.trace_entries > 0;
    let cause = if no_oom { Cause::None } else { cause };
    let stage = if no_oom { Stage::Unknown } else { stage };
    let mut evidence = Vec::new();
    if let Some(o) = &r.oom {
        let what = o
            .site
            .as_deref()
            .map(|s| format!(" from {s}"))
            .unwrap_or_default();
        evidence.push(Evidence::bytes(
            format!(
                "the allocator's request of {}{what} failed with {} free on the device",
                Bytes(o.request),
                Bytes(o.device_free)
            ),
            o.request,
        ));
    }
    for row in r.breakdown.iter().take(4) {
        let site = row
            .sites
            .first()
            .map(|s| format!(", most from {}", s.label))
            .unwrap_or_default();
        evidence.push(Evidence::bytes(
            format!(
                "{} live in {} blocks ({:.0} %){site}",
                row.label,
                row.blocks,
                row.share * 100.0
            ),
            row.bytes,
        ));
    }
    evidence.push(Evidence::bytes(
        format!(
            "{} reserved but free in {} blocks over {} segments; the largest free block is {}",
            Bytes(r.slack.cached_free),
            r.slack.free_blocks,
            r.slack.segments,
            Bytes(r.slack.largest_free_block)
        ),
        r.slack.cached_free,
    ));
    let holes_too = matches!(cause, Cause::Activations | Cause::KvCache)
        && r.oom
            .as_ref()
            .is_some_and(|o| r.slack.cached_free >= o.request && o.request > 0);
    let mut contributing = Vec::new();
    if cause != Cause::Fragmentation
        && r.slack.cached_free >= r.oom.as_ref().map_or(u64::MAX, |o| o.request)
    {
        contributing.push(Contributing {
            cause: Cause::Fragmentation,
            evidence: Evidence::bytes(
                "the cache held enough free bytes in total",
                r.slack.cached_free,
            ),
        });
    }
    let rule = rule_of(r, cause);
    // A prefill's activations filling the limit: a batch of sequences and one long prompt leave
    // the same record (it holds sizes, not shapes), so what multiplied them is not known here
    // (H100 same-oom batch-32 and batch-48 against long-prompt).
    let multiplier_unknown = rule == Code::R6 && cause == Cause::Activations;
    if multiplier_unknown {
        evidence.push(Evidence::text(
            "the record holds no batch size: a batch of sequences and one long prompt leave the \
             same activations; the program's batch line (`llm-oom watch -- <the command>`) or the \
             workload (--model, --prompt-tokens, --batch) tells which",
        ));
    }
    Verdict {
        record: Some(super::record::MemoryRecord::from_snapshot(r)),
        rule: Some(rule),
        cause,
        stage,
        confidence: match (r.history, cause) {
            (_, Cause::None) => 0.9,
            (_, Cause::Unknown) => 0.3,
            _ if multiplier_unknown => 0.5,
            // Cached holes that could hold the request beside a filled limit: what filled it is the
            // likelier cause, but a long-lived process's fragmentation leaves the same record
            // (rule W2; docs/calibration/same-oom-served-ramp-h100-2026-12-06.jsonl).
            _ if holes_too => 0.5,
            (true, _) | (false, Cause::Fragmentation) => 0.9,
            (false, _) => 0.5,
        },
        // The cause first, as every other verdict's summary says it.
        summary: if no_oom {
            format!(
                "no out-of-memory in this snapshot: its trace of {} allocator events has no `oom` entry; {}",
                r.trace_entries, s.text
            )
        } else {
            format!("{cause}: PyTorch's allocator record: {}", s.text)
        },
        evidence,
        contributing,
    }
}

/// The record rule (R1–R7 of docs/explain.md) that gave `cause`, by the conditions
/// `snapshot::attribute` decides by.
fn rule_of(r: &SnapshotReport, cause: Cause) -> Code {
    let s = &r.summary;
    let weight_request = r
        .oom
        .as_ref()
        .is_some_and(|o| o.component == Some(Component::Weights));
    match (cause, s.cause) {
        (Cause::None, _) => Code::R7,
        (_, SnapshotCause::OtherProcess) => Code::R1,
        (_, SnapshotCause::Weights) if weight_request => Code::R2,
        (_, SnapshotCause::Fragmentation) => Code::R3,
        (_, SnapshotCause::Other) => Code::R5,
        (_, SnapshotCause::Unknown) if s.unattributed > 0 => Code::R4,
        _ => Code::R6,
    }
}
