//! The verdict from PyTorch's own record ([`crate::snapshot::SnapshotReport`]): measured, not read
//! from text, so it comes first when `watch` or `explain` has one. The record rules R1–R7
//! ([`decide`]) read only the evidence record ([`MemoryRecord`]) the report fills, so `watch`
//! decides from the record it merged with the log by the same rules.

use super::record::{MemoryRecord, Role};
use super::rules::Code;
use super::{Cause, Contributing, Evidence, Stage, Verdict};
use crate::holes;
use crate::snapshot::attribute::{SnapshotCause, SnapshotReport};
use crate::units::Bytes;

/// The report with what the record rules decide from it: the summary's cause, what the card held
/// outside this process, and the sentence that says why (fragmentation: the live bytes and the
/// step fit, no block is as large; another process: what it held). `crate::snapshot` measures;
/// the cause is decided here, after the report's limit and failed request are set.
pub fn settle(mut r: SnapshotReport) -> SnapshotReport {
    let figures = MemoryRecord::allocator_figures(&r.summary, &r.slack, r.oom.as_ref(), r.limit);
    r.summary.outside = outside(&figures);
    r.summary.cause = record_cause(&figures);
    if r.oom.is_some() {
        match r.summary.cause {
            SnapshotCause::Fragmentation => r.summary.text.push_str(&format!(
                "; live {} and this step's {} fit the {} it could hold, but no free block is as large",
                Bytes(r.slack.live),
                Bytes(step_need(&figures)),
                Bytes(capacity(&figures).unwrap_or(0))
            )),
            SnapshotCause::OtherProcess => r.summary.text.push_str(&format!(
                "; {} of the card is held outside this process, which reserved {}",
                Bytes(r.summary.outside.unwrap_or(0)),
                Bytes(r.slack.reserved)
            )),
            _ => {}
        }
    }
    r
}

/// The verdict a snapshot supports; `confidence` is high when stacks were recorded, lower when
/// only the segments are there (history off: fragmentation is still exact, attribution is not).
pub fn from_snapshot(r: &SnapshotReport) -> Verdict {
    from_record(r, MemoryRecord::from_snapshot(r))
}

/// The verdict of the allocator record `r`, decided from `record` (its figures, alone or merged
/// with the log's and what `watch` measured: [`MemoryRecord::merge`]); `r` gives the evidence's
/// rows and sites and the summary's sentence.
pub fn from_record(r: &SnapshotReport, record: MemoryRecord) -> Verdict {
    let s = &r.summary;
    let (cause, stage, rule) = decide(&record);
    let no_oom = rule == Code::R7;
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
        record: Some(record),
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

/// Another process is the cause when what the card held outside this process is at least a
/// quarter of the limit and 2 GiB (a CUDA context is a few hundred MiB).
const OUTSIDE_MIN: u64 = 2 << 30;

/// The request that failed, as the record holds it: its bytes, what CUDA still had free, and
/// the part it was for.
#[derive(Clone, Copy)]
struct Failed {
    request: u64,
    device_free: u64,
    part: Option<Role>,
}

fn failed(rec: &MemoryRecord) -> Option<Failed> {
    let (request, device_free) = rec.request.zip(rec.free)?;
    Some(Failed {
        request,
        device_free,
        part: rec.request_for,
    })
}

/// What the allocator reserved: its segments, else what is live and cached.
fn reserved(rec: &MemoryRecord) -> u64 {
    rec.reserved.unwrap_or_else(|| {
        rec.allocated
            .unwrap_or(0)
            .saturating_add(rec.reserved_unallocated.unwrap_or(0))
    })
}

/// What the card held outside this process's allocator when the limit is the card's total: the
/// limit less what this process reserved and what CUDA still had free. Under a cap the card's free
/// bytes run past the cap, and this is 0. `None` without a failed request or a limit.
pub fn outside(rec: &MemoryRecord) -> Option<u64> {
    let f = failed(rec)?;
    Some(
        rec.limit?
            .saturating_sub(reserved(rec).saturating_add(f.device_free)),
    )
}

/// What this process could have held at the failure: the limit when it is known, at most what it
/// reserved plus CUDA's free bytes; from a bare file, what it reserved plus CUDA's free bytes when
/// those were short of the request, else only what it reserved (free bytes on the card that did
/// not serve the request were past a cap). `None` without a failed request.
pub fn capacity(rec: &MemoryRecord) -> Option<u64> {
    let f = failed(rec)?;
    let reserved = reserved(rec);
    let card = reserved.saturating_add(f.device_free);
    Some(match rec.limit {
        Some(l) => l.min(card),
        None if f.device_free < f.request => card,
        None => reserved,
    })
}

/// The bytes the failing step needs at once beside what is live: the request, twice over for an
/// activation (a forward's buffer is followed by one of its size before any is freed: the MLP's
/// `up_proj` beside `act(gate_proj)`, then their product; attention's output beside its scores).
/// 0 without a failed request.
pub fn step_need(rec: &MemoryRecord) -> u64 {
    failed(rec).map_or(0, need_of)
}

fn need_of(f: Failed) -> u64 {
    match f.part {
        Some(Role::Activations) => f.request.saturating_mul(2),
        _ => f.request,
    }
}

/// What the allocator record says filled the limit, from its figures in `rec`. In order: another
/// process (what the card held outside this process is large); the weights while loading (the
/// load goes on after the request that failed); fragmentation only when the step would fit in
/// contiguous memory (live bytes + the step's need ≤ the capacity) while the largest free block is
/// below the request; else what filled the card: the larger of the KV cache and the activations,
/// the failed step's need counted toward the part it was growing (a decode step's small buffer
/// beside a grown cache is the cache; a prefill's MLP buffer is the activations); the weights
/// when only they are live; unknown when bytes without a stack outweigh the attributed ones and
/// the request has no stack either. The summary of `snapshot::attribute` says this one.
pub fn record_cause(rec: &MemoryRecord) -> SnapshotCause {
    let w = &rec.live;
    let (weights, kv_cache, activations) = (
        w.weights.unwrap_or(0),
        w.kv_cache.unwrap_or(0),
        w.activations.unwrap_or(0),
    );
    let (other, unattributed) = (w.other.unwrap_or(0), w.unattributed.unwrap_or(0));
    let attributed = weights.saturating_add(kv_cache).saturating_add(activations);
    if let Some(out) = outside(rec) {
        let limit = rec.limit.unwrap_or(0);
        if out >= OUTSIDE_MIN.max(limit / 4) {
            return SnapshotCause::OtherProcess;
        }
    }
    let oom = failed(rec);
    let live = rec.allocated.unwrap_or(0);
    let largest_free_block = rec.largest_free_block.unwrap_or(0);
    if let Some(f) = oom {
        if f.part == Some(Role::Weights) {
            return SnapshotCause::Weights;
        }
        let capacity = capacity(rec).unwrap_or(0);
        let fits = live.saturating_add(need_of(f)) <= capacity;
        // The one rule every reader shares: holes beside live tensors that fill the limit are
        // its tail, not the cause.
        let filled = holes::Pool {
            live,
            unallocated: rec.reserved_unallocated.unwrap_or(0),
            request: f.request,
            limit: capacity,
            steady: false,
        }
        .filled();
        if fits && !filled && f.request > largest_free_block {
            return SnapshotCause::Fragmentation;
        }
    }
    let request_was = oom.and_then(|f| f.part);
    if unattributed > attributed && request_was.is_none_or(|c| c == Role::Unattributed) {
        return SnapshotCause::Unknown;
    }
    if request_was == Some(Role::Other) && other > attributed {
        return SnapshotCause::Other;
    }
    // The failed step's need counts toward the part it was growing.
    let need = oom.map_or(0, need_of);
    let (mut kv, mut act) = (kv_cache, activations);
    match request_was {
        Some(Role::KvCache) => kv = kv.saturating_add(need),
        Some(Role::Activations) => act = act.saturating_add(need),
        _ => {}
    }
    if kv.max(act) > 0 {
        return if kv >= act {
            SnapshotCause::KvCache
        } else {
            SnapshotCause::Activations
        };
    }
    if weights > 0 {
        SnapshotCause::Weights
    } else {
        SnapshotCause::Unknown
    }
}

/// The allocator record's verdict from its figures in `rec`: the cause ([`record_cause`], in the
/// verdict's words), the stage it says, and the rule (R1–R7 of docs/explain.md) that gave it. A
/// trace with entries and no failed request is R7: the allocator never failed while it recorded.
pub fn decide(rec: &MemoryRecord) -> (Cause, Stage, Code) {
    let found = record_cause(rec);
    let no_oom = rec.request.is_none() && rec.allocator_events.is_some_and(|n| n > 0);
    if no_oom {
        return (Cause::None, Stage::Unknown, Code::R7);
    }
    let cause = match found {
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
    let weight_request = rec.request.is_some() && rec.request_for == Some(Role::Weights);
    let rule = match found {
        SnapshotCause::OtherProcess => Code::R1,
        SnapshotCause::Weights if weight_request => Code::R2,
        SnapshotCause::Fragmentation => Code::R3,
        SnapshotCause::Other => Code::R5,
        SnapshotCause::Unknown if rec.live.unattributed.unwrap_or(0) > 0 => Code::R4,
        _ => Code::R6,
    };
    (cause, stage, rule)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logparse::hints::Context;
    use crate::logparse::parse::TorchOom;
    use crate::verdict::record::LiveByRole;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// Live bytes by role: weights, KV cache, activations, other, unattributed.
    fn live(w: u64, kv: u64, act: u64, other: u64, un: u64) -> LiveByRole {
        LiveByRole {
            weights: Some(w),
            kv_cache: Some(kv),
            activations: Some(act),
            other: Some(other),
            unattributed: Some(un),
        }
    }

    /// An allocator record: `live` bytes, `cached` free in holes of at most `largest`, and the
    /// request of `request` for `part` that failed with `free` on the device.
    fn record(
        live: LiveByRole,
        cached: u64,
        largest: u64,
        failed: Option<(u64, u64, Role)>,
        limit: Option<u64>,
    ) -> MemoryRecord {
        let allocated = [
            live.weights,
            live.kv_cache,
            live.activations,
            live.other,
            live.unattributed,
        ]
        .into_iter()
        .flatten()
        .sum::<u64>();
        MemoryRecord {
            limit,
            free: failed.map(|f| f.1),
            allocated: Some(allocated),
            reserved_unallocated: Some(cached),
            reserved: Some(allocated + cached),
            largest_free_block: Some(largest),
            request: failed.map(|f| f.0),
            request_for: failed.map(|f| f.2),
            allocator_events: Some(1),
            live,
            ..MemoryRecord::default()
        }
    }

    /// Llama-2-13B built by `from_config` on a 20 GiB cap: the constructor's request failed.
    #[test]
    fn a_model_built_past_the_cap_is_the_weights() {
        let r = record(
            live(19 * GIB, 0, 0, 0, 0),
            0,
            0,
            Some((100 * MIB, 60 * GIB, Role::Weights)),
            Some(20 * GIB),
        );
        assert_eq!(record_cause(&r), SnapshotCause::Weights);
        assert_eq!(decide(&r), (Cause::Weights, Stage::Load, Code::R2));
        // Only weights live, the request without a stack: the weights, by what filled it.
        let r = MemoryRecord {
            request_for: Some(Role::Unattributed),
            ..r
        };
        assert_eq!(decide(&r), (Cause::Weights, Stage::Load, Code::R6));
    }

    /// Llama-2-7B decoding at a 13.5 GiB cap: 100 MiB of the cache's holes beside a 64 MiB
    /// attention buffer, but live tensors already fill the cap: the KV cache that grew.
    #[test]
    fn a_card_that_live_tensors_fill_is_what_filled_it() {
        let l = live(12_851 * MIB, 820 * MIB, 40 * MIB, 0, 0);
        let failed = Some((64 * MIB, 50 * GIB, Role::Activations));
        let r = record(
            l.clone(),
            100 * MIB,
            50 * MIB,
            failed,
            Some(13 * GIB + 512 * MIB),
        );
        assert_eq!(record_cause(&r), SnapshotCause::KvCache);
        assert_eq!(decide(&r), (Cause::KvCache, Stage::Unknown, Code::R6));
        // From the file alone (no limit): the cap is what the process reserved.
        let r = record(l, 100 * MIB, 50 * MIB, failed, None);
        assert_eq!(record_cause(&r), SnapshotCause::KvCache);
    }

    /// The same holes when live bytes and the request fit under a cap they do not fill:
    /// fragmentation. Under a cap they fill (8.7 GiB live of 9), the cap's tail.
    #[test]
    fn fragmentation_only_when_the_step_fits_in_contiguous_memory() {
        let l = live(8 * GIB, 700 * MIB, 0, 0, 0);
        let failed = Some((64 * MIB, 50 * GIB, Role::KvCache));
        let r = record(l.clone(), 600 * MIB, 60 * MIB, failed, Some(14 * GIB));
        assert_eq!(
            decide(&r),
            (Cause::Fragmentation, Stage::Fragmentation, Code::R3)
        );
        let r = record(l.clone(), 600 * MIB, 60 * MIB, failed, Some(9 * GIB));
        assert_eq!(record_cause(&r), SnapshotCause::KvCache);
        // A free block as large as the request: not fragmentation.
        let r = record(l, 64 * MIB, 64 * MIB, failed, Some(14 * GIB));
        assert_eq!(record_cause(&r), SnapshotCause::KvCache);
        // An activation's step needs its buffer twice: 900 MiB of holes do not hold 2 × 600 MiB.
        let failed = Some((600 * MIB, 0, Role::Activations));
        let r = record(live(GIB, 0, 0, 0, 0), 900 * MIB, 300 * MIB, failed, None);
        assert_eq!(step_need(&r), 1200 * MIB);
        assert_eq!(
            decide(&r),
            (Cause::Activations, Stage::FirstToken, Code::R6)
        );
        let r = record(live(GIB, 0, 0, 0, 0), 1200 * MIB, 300 * MIB, failed, None);
        assert_eq!(record_cause(&r), SnapshotCause::Fragmentation);
    }

    /// Mistral-7B at batch 4 × 8,000 on an 80 GB card that another process holds 64 GiB of.
    #[test]
    fn a_card_held_outside_the_process_is_another_process() {
        let l = live(13_500 * MIB, 0, 500 * MIB, 0, 0);
        let failed = Some((GIB, 300 * MIB, Role::Activations));
        let r = record(l.clone(), 0, 0, failed, Some(79 * GIB + 200 * MIB));
        assert!(outside(&r).is_some_and(|o| o > 60 * GIB));
        assert_eq!(
            decide(&r),
            (Cause::OtherProcess, Stage::Environment, Code::R1)
        );
        // Under a cap the card's free bytes run past it: nothing is outside.
        let failed = Some((GIB, 60 * GIB, Role::Activations));
        let r = record(l, 0, 0, failed, Some(14 * GIB));
        assert_eq!(outside(&r), Some(0));
        assert_eq!(record_cause(&r), SnapshotCause::Activations);
    }

    #[test]
    fn bytes_without_a_stack_are_unknown_and_the_programs_own_are_other() {
        let failed = Some((64 * MIB, 0, Role::Unattributed));
        let r = record(live(8 * MIB, 0, 0, 0, GIB), 0, 0, failed, None);
        assert_eq!(decide(&r), (Cause::Unknown, Stage::Unknown, Code::R4));
        let failed = Some((64 * MIB, 0, Role::Other));
        let r = record(live(8 * MIB, 0, 0, GIB, 0), 0, 0, failed, None);
        assert_eq!(record_cause(&r), SnapshotCause::Other);
        assert_eq!(decide(&r), (Cause::Unknown, Stage::Unknown, Code::R5));
    }

    #[test]
    fn a_trace_without_a_failed_request_is_no_out_of_memory() {
        let r = record(live(GIB, GIB, 0, 0, 0), 0, 0, None, None);
        assert_eq!(decide(&r), (Cause::None, Stage::Unknown, Code::R7));
        // History off: no trace, so no word on whether it failed; what is live decides.
        let r = MemoryRecord {
            allocator_events: Some(0),
            ..r
        };
        assert_eq!(decide(&r).0, Cause::KvCache);
    }

    /// `watch` merges PyTorch's message into the allocator record: its figures stay the
    /// allocator's, and the rules answer as they did from the record alone.
    #[test]
    fn the_record_merged_with_the_message_decides_alike() {
        let message = TorchOom {
            requested: Some(128 * MIB),
            total: Some(80 * GIB),
            free: Some(60 * GIB),
            allowed: Some(9 * GIB),
            allocated_by_pytorch: Some(8 * GIB),
            reserved_unallocated: Some(GIB),
            ..TorchOom::default()
        };
        let text = MemoryRecord::from_torch(&message, &Context::default(), 1);
        for limit in [9 * GIB, 14 * GIB] {
            let r = MemoryRecord {
                source: vec![crate::verdict::record::Provenance {
                    from: crate::verdict::record::Source::AllocatorRecord,
                    figures: vec!["request"],
                    overruled: Vec::new(),
                }],
                ..record(
                    live(8 * GIB, 700 * MIB, 0, 0, 0),
                    600 * MIB,
                    60 * MIB,
                    Some((64 * MIB, 50 * GIB, Role::KvCache)),
                    Some(limit),
                )
            };
            assert_eq!(decide(&r), decide(&r.clone().merge(text.clone())));
        }
    }
}
