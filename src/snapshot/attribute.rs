//! Every live byte of a snapshot to a component (`classify`), the allocator's slack and its pieces,
//! the failed request, the allocated-vs-reserved timeline, and a verdict-ready summary.

use std::collections::HashMap;

use serde::Serialize;

use super::classify::{classify, short_path, Component, Sources};
use super::hook::ObservedOom;
use super::{Snapshot, TraceAction, TraceEntry};
use crate::units::Bytes;

/// Sites listed per component, and points kept in the timeline.
pub const TOP_SITES: usize = 5;
pub const TIMELINE_POINTS: usize = 200;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Site {
    /// `transformers/models/llama/modeling_llama.py:158 forward`
    pub label: String,
    pub bytes: u64,
    pub blocks: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub component: Component,
    pub label: &'static str,
    pub bytes: u64,
    /// Of all live bytes.
    pub share: f64,
    pub blocks: u64,
    pub sites: Vec<Site>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slack {
    /// Reserved by the allocator (sum of segments).
    pub reserved: u64,
    /// In blocks a tensor holds (`active_allocated`) or that wait for a stream (`active_pending_free`).
    pub live: u64,
    /// Reserved but free: the cache, reusable only in pieces of at most `largest_free_block`.
    pub cached_free: u64,
    pub largest_free_block: u64,
    pub segments: usize,
    /// Segments with at least one free block.
    pub segments_with_free: usize,
    pub free_blocks: usize,
    /// The segments with the most free bytes: (total size, free, largest free block).
    pub worst_segments: Vec<(u64, u64, u64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OomRecord {
    pub device: usize,
    /// The request that failed.
    pub request: u64,
    /// What CUDA still reported free at that moment.
    pub device_free: u64,
    pub time_us: i64,
    pub component: Option<Component>,
    pub site: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    pub time_us: i64,
    pub allocated: u64,
    pub reserved: u64,
}

/// What the record says caused the OOM, in the verdict's words (`verdict::snapshot` maps it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotCause {
    Weights,
    KvCache,
    Activations,
    Fragmentation,
    /// Another process holds the card: its total less what this process reserved and what CUDA
    /// still had free is large.
    OtherProcess,
    Other,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub cause: SnapshotCause,
    /// One sentence with the numbers, e.g. "the request of 1.07 GiB (activations: MLP, …) failed".
    pub text: String,
    pub weights: u64,
    pub kv_cache: u64,
    pub activations: u64,
    /// Live bytes with a stack the rules do not name (the program's own tensors).
    pub other: u64,
    /// Live bytes without a stack: allocated before the record began (or while it was off).
    pub unattributed: u64,
    /// What the card held beyond this process's allocator and CUDA's free bytes (other processes,
    /// and this process's CUDA context), when the limit is known and has no cap below the card.
    pub outside: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SnapshotReport {
    /// Whether stacks were recorded (`_record_memory_history` was on): without, only slack is known.
    pub history: bool,
    pub breakdown: Vec<Row>,
    pub slack: Slack,
    pub oom: Option<OomRecord>,
    /// Entries in the allocator's trace (0: history was off, so an OOM would not show in it).
    pub trace_entries: usize,
    pub timeline: Vec<Point>,
    /// What the allocator was allowed: the per-process cap, or the card's total without one (the
    /// OOM observer's third argument, in the `watch` hook's status file); None from a bare file.
    pub limit: Option<u64>,
    pub summary: Summary,
}

impl SnapshotReport {
    /// The limit the OOM observer reported (`set_per_process_memory_fraction`'s cap, else the
    /// card's total): it decides fragmentation and another process
    /// (the verdict's record rules, which the commands apply to the report).
    pub fn with_limit(mut self, limit: u64) -> Self {
        if limit > 0 {
            self.limit = Some(limit);
            self.summary = summarize(&self.breakdown, &self.slack, self.oom.as_ref(), self.limit);
        }
        self
    }

    /// What the hook's OOM observer reported, when it ran: the failed request and the limit
    /// (what `watch` collects and what `explain` finds beside a record).
    pub fn with_observed(self, observed: Option<&ObservedOom>) -> Self {
        match observed {
            Some(o) => self
                .with_failed_request(o.alloc, o.device_free)
                .with_limit(o.device_allocated),
            None => self,
        }
    }

    /// The failed request when the trace did not keep it (the hook's status file has the
    /// observer's `alloc`): it feeds the fragmentation rule and the summary.
    pub fn with_failed_request(mut self, request: u64, device_free: u64) -> Self {
        if self.oom.is_none() {
            self.oom = Some(OomRecord {
                device: 0,
                request,
                device_free,
                time_us: 0,
                component: None,
                site: None,
            });
            self.summary = summarize(&self.breakdown, &self.slack, self.oom.as_ref(), self.limit);
        }
        self
    }

    pub fn bytes_of(&self, pred: impl Fn(Component) -> bool) -> u64 {
        self.breakdown
            .iter()
            .filter(|r| pred(r.component))
            .map(|r| r.bytes)
            .fold(0u64, u64::saturating_add)
    }
}

fn site_label(f: &super::Frame) -> String {
    format!("{}:{} {}", short_path(&f.filename), f.line, f.name)
}

/// Attributes a snapshot (see the module docs).
pub fn attribute(snap: &Snapshot) -> SnapshotReport {
    let mut sources = Sources::default();
    let breakdown = breakdown(snap, &mut sources);
    let slack = slack(snap);
    let oom = last_oom(snap, &mut sources);
    let summary = summarize(&breakdown, &slack, oom.as_ref(), None);
    SnapshotReport {
        history: snap.has_frames(),
        breakdown,
        timeline: timeline(snap, &slack),
        slack,
        oom,
        trace_entries: snap.device_traces.iter().map(Vec::len).sum(),
        limit: None,
        summary,
    }
}

/// Bytes and blocks of a component, and per site.
type Tally = (u64, u64, HashMap<String, (u64, u64)>);

fn breakdown(snap: &Snapshot, sources: &mut Sources) -> Vec<Row> {
    let mut rows: HashMap<Component, Tally> = HashMap::new();
    let mut total = 0u64;
    for (_, b) in snap.blocks().filter(|(_, b)| b.state.is_active()) {
        let (c, site) = classify(&b.frames, sources);
        let label = site.map(site_label).unwrap_or_else(|| "(no frames)".into());
        let row = rows.entry(c).or_default();
        row.0 = row.0.saturating_add(b.size);
        row.1 += 1;
        let s = row.2.entry(label).or_default();
        s.0 = s.0.saturating_add(b.size);
        s.1 += 1;
        total = total.saturating_add(b.size);
    }
    let mut out: Vec<Row> = rows
        .into_iter()
        .map(|(component, (bytes, blocks, sites))| {
            let mut sites: Vec<Site> = sites
                .into_iter()
                .map(|(label, (bytes, blocks))| Site {
                    label,
                    bytes,
                    blocks,
                })
                .collect();
            sites.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.label.cmp(&b.label)));
            sites.truncate(TOP_SITES);
            Row {
                component,
                label: component.label(),
                bytes,
                share: if total == 0 {
                    0.0
                } else {
                    bytes as f64 / total as f64
                },
                blocks,
                sites,
            }
        })
        .collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.component.cmp(&b.component)));
    out
}

fn slack(snap: &Snapshot) -> Slack {
    let mut s = Slack {
        reserved: 0,
        live: 0,
        cached_free: 0,
        largest_free_block: 0,
        segments: snap.segments.len(),
        segments_with_free: 0,
        free_blocks: 0,
        worst_segments: Vec::new(),
    };
    for seg in &snap.segments {
        s.reserved = s.reserved.saturating_add(seg.total_size);
        let (mut free, mut largest) = (0u64, 0u64);
        for b in &seg.blocks {
            if b.state.is_active() {
                s.live = s.live.saturating_add(b.size);
            } else {
                free = free.saturating_add(b.size);
                largest = largest.max(b.size);
                s.free_blocks += 1;
            }
        }
        if free > 0 {
            s.segments_with_free += 1;
            s.worst_segments.push((seg.total_size, free, largest));
        }
        s.cached_free = s.cached_free.saturating_add(free);
        s.largest_free_block = s.largest_free_block.max(largest);
    }
    s.worst_segments.sort_by_key(|w| std::cmp::Reverse(w.1));
    s.worst_segments.truncate(TOP_SITES);
    s
}

fn last_oom(snap: &Snapshot, sources: &mut Sources) -> Option<OomRecord> {
    let (device, e) = snap
        .device_traces
        .iter()
        .enumerate()
        .flat_map(|(d, t)| t.iter().map(move |e| (d, e)))
        .filter(|(_, e)| e.action == TraceAction::Oom)
        .max_by_key(|(_, e)| e.time_us)?;
    let (component, site) = if e.frames.is_empty() {
        (None, None)
    } else {
        let (c, f) = classify(&e.frames, sources);
        (Some(c), f.map(site_label))
    };
    Some(OomRecord {
        device,
        request: e.size,
        device_free: e.device_free,
        time_us: e.time_us,
        component,
        site,
    })
}

/// Running allocated and reserved bytes over the trace, anchored so that the last point equals
/// what the segments hold at the snapshot (the trace is a ring buffer: its start is unknown).
fn timeline(snap: &Snapshot, slack: &Slack) -> Vec<Point> {
    let mut entries: Vec<&TraceEntry> = snap.device_traces.iter().flatten().collect();
    entries.sort_by_key(|e| e.time_us);
    let mut deltas = Vec::with_capacity(entries.len());
    let (mut a, mut r) = (0i128, 0i128);
    for e in entries {
        let size = i128::from(e.size);
        match e.action {
            TraceAction::Alloc => a += size,
            TraceAction::FreeCompleted => a -= size,
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => r += size,
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => r -= size,
            _ => continue,
        }
        deltas.push((e.time_us, a, r));
    }
    let a0 = i128::from(slack.live) - a;
    let r0 = i128::from(slack.reserved) - r;
    let clamp = |v: i128| u64::try_from(v.max(0)).unwrap_or(u64::MAX);
    let points: Vec<Point> = deltas
        .into_iter()
        .map(|(t, a, r)| Point {
            time_us: t,
            allocated: clamp(a0 + a),
            reserved: clamp(r0 + r),
        })
        .collect();
    downsample(points)
}

/// At most `TIMELINE_POINTS`, keeping the peak of each stretch and the last point.
fn downsample(points: Vec<Point>) -> Vec<Point> {
    if points.len() <= TIMELINE_POINTS {
        return points;
    }
    let step = points.len().div_ceil(TIMELINE_POINTS - 1);
    let mut out: Vec<Point> = points
        .chunks(step)
        .filter_map(|c| c.iter().copied().max_by_key(|p| p.allocated))
        .collect();
    if let Some(last) = points.last() {
        out.push(*last);
    }
    out
}

fn summarize(rows: &[Row], slack: &Slack, oom: Option<&OomRecord>, limit: Option<u64>) -> Summary {
    let sum = |p: &dyn Fn(Component) -> bool| {
        rows.iter()
            .filter(|r| p(r.component))
            .fold(0u64, |s, r| s.saturating_add(r.bytes))
    };
    let mut summary = Summary {
        cause: SnapshotCause::Unknown,
        text: String::new(),
        weights: sum(&|c| c == Component::Weights),
        kv_cache: sum(&|c| c == Component::KvCache),
        activations: sum(&|c| c.is_activation()),
        other: sum(&|c| c == Component::Other),
        unattributed: sum(&|c| c == Component::Unattributed),
        outside: None,
    };
    // The cause, what the card held outside and the sentence that says why are the verdict's:
    // its record rules fill them (`verdict::snapshot::settle`, applied by the commands).
    let mut text = format!(
        "{} weights, {} KV cache, {} activations, {} other live",
        Bytes(summary.weights),
        Bytes(summary.kv_cache),
        Bytes(summary.activations),
        Bytes(summary.other),
    );
    if summary.unattributed > 0 {
        text.push_str(&format!(
            ", {} unattributed (allocated before the record began: no stack)",
            Bytes(summary.unattributed)
        ));
    }
    text.push_str(&format!(
        "; {} cached free in {} of {} segments (largest free block {})",
        Bytes(slack.cached_free),
        slack.segments_with_free,
        slack.segments,
        Bytes(slack.largest_free_block)
    ));
    if let Some(o) = oom {
        let what = match (o.component, &o.site) {
            (Some(c), Some(s)) => format!(" for {} at {s}", c.label()),
            (Some(c), None) => format!(" for {}", c.label()),
            _ => String::new(),
        };
        text.push_str(&format!(
            "; the request of {}{what} failed",
            Bytes(o.request)
        ));
        if let Some(l) = limit {
            text.push_str(&format!(" with {} allowed", Bytes(l)));
        }
    }
    summary.text = text;
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Block, BlockState, Frame, Segment};
    // The cause and its sentence are the verdict layer's (its record rules); these tests read
    // them as the commands do.
    use crate::verdict::snapshot::settle;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn frames(names: &[(&str, &str)]) -> Vec<Frame> {
        names
            .iter()
            .map(|(file, name)| Frame {
                filename: format!("/usr/lib/python3.12/site-packages/{file}"),
                line: 1,
                name: (*name).to_string(),
            })
            .collect()
    }

    const MODEL: &str = "transformers/models/llama/modeling_llama.py";

    fn init() -> Vec<Frame> {
        frames(&[
            ("torch/nn/modules/linear.py", "__init__"),
            (MODEL, "__init__"),
            ("transformers/models/auto/auto_factory.py", "from_config"),
        ])
    }
    fn kv() -> Vec<Frame> {
        frames(&[
            ("transformers/cache_utils.py", "update"),
            (MODEL, "forward"),
            ("transformers/generation/utils.py", "_sample"),
        ])
    }
    fn mlp() -> Vec<Frame> {
        frames(&[
            ("transformers/activations.py", "forward"),
            (MODEL, "forward"),
            ("transformers/generation/utils.py", "_sample"),
        ])
    }

    /// A snapshot of one segment per block (`live` blocks, then `free` cached holes) and an `oom`
    /// entry for `request` from `at`.
    fn snap(
        live: &[(u64, Vec<Frame>)],
        free: &[u64],
        request: u64,
        device_free: u64,
        at: Vec<Frame>,
    ) -> Snapshot {
        let block = |size, state, frames| Segment {
            total_size: size,
            blocks: vec![Block {
                size,
                state,
                frames,
                ..Block::default()
            }],
            ..Segment::default()
        };
        let mut segments: Vec<Segment> = live
            .iter()
            .map(|(s, f)| block(*s, BlockState::ActiveAllocated, f.clone()))
            .collect();
        segments.extend(
            free.iter()
                .map(|s| block(*s, BlockState::Inactive, Vec::new())),
        );
        Snapshot {
            segments,
            device_traces: vec![vec![TraceEntry {
                action: TraceAction::Oom,
                size: request,
                device_free,
                frames: at,
                ..TraceEntry::default()
            }]],
            ..Snapshot::default()
        }
    }

    /// Llama-2-13B built by `from_config` on a 20 GiB cap: the constructor's request failed.
    #[test]
    fn a_model_built_past_the_cap_is_the_weights() {
        let s = snap(&[(19 * GIB, init())], &[], 100 * MIB, 60 * GIB, init());
        let r = settle(attribute(&s).with_limit(20 * GIB));
        assert_eq!(r.summary.cause, SnapshotCause::Weights);
        assert_eq!(r.summary.weights, 19 * GIB);
        assert_eq!(r.summary.activations, 0);
    }

    /// Llama-2-7B decoding at a 13.5 GiB cap: the cache's holes (each step frees the layer's
    /// shorter copy) sit free, 100 MiB of them beside a 64 MiB attention buffer, but live tensors
    /// already fill the cap: the KV cache that grew, not fragmentation.
    #[test]
    fn a_card_that_live_tensors_fill_is_what_filled_it() {
        let live = [(12_851 * MIB, init()), (820 * MIB, kv()), (40 * MIB, mlp())];
        let s = snap(&live, &[50 * MIB, 50 * MIB], 64 * MIB, 50 * GIB, mlp());
        let cap = 13 * GIB + 512 * MIB;
        let r = settle(attribute(&s).with_limit(cap));
        assert_eq!(
            r.summary.cause,
            SnapshotCause::KvCache,
            "{}",
            r.summary.text
        );
        // From the file alone (no limit): the cap is what the process reserved.
        assert_eq!(settle(attribute(&s)).summary.cause, SnapshotCause::KvCache);
    }

    /// The same holes when live bytes and the request fit under a cap they do not fill:
    /// fragmentation. Under a cap they fill (8.7 GiB live of 9), the cap's tail.
    #[test]
    fn fragmentation_only_when_the_step_fits_in_contiguous_memory() {
        let live = [(8 * GIB, init()), (700 * MIB, kv())];
        let holes = [60 * MIB; 10];
        let s = snap(&live, &holes, 64 * MIB, 50 * GIB, kv());
        let r = settle(attribute(&s).with_limit(14 * GIB));
        assert_eq!(r.summary.cause, SnapshotCause::Fragmentation);
        assert!(r.summary.text.contains("fit the"), "{}", r.summary.text);
        let r = settle(attribute(&s).with_limit(9 * GIB));
        assert_eq!(
            r.summary.cause,
            SnapshotCause::KvCache,
            "{}",
            r.summary.text
        );
        // A free block as large as the request: not fragmentation.
        let s = snap(&live, &[64 * MIB], 64 * MIB, 50 * GIB, kv());
        assert_eq!(
            settle(attribute(&s).with_limit(14 * GIB)).summary.cause,
            SnapshotCause::KvCache
        );
        // An activation's step needs its buffer twice: 900 MiB of holes do not hold 2 × 600 MiB.
        let holes = [300 * MIB; 3];
        let s = snap(&[(GIB, init())], &holes, 600 * MIB, 0, mlp());
        assert_eq!(
            settle(attribute(&s)).summary.cause,
            SnapshotCause::Activations
        );
        let holes = [300 * MIB; 4];
        let s = snap(&[(GIB, init())], &holes, 600 * MIB, 0, mlp());
        assert_eq!(
            settle(attribute(&s)).summary.cause,
            SnapshotCause::Fragmentation
        );
    }

    /// Mistral-7B at batch 4 × 8,000 on an 80 GB card that another process holds 64 GiB of.
    #[test]
    fn a_card_held_outside_the_process_is_another_process() {
        let live = [(13_500 * MIB, init()), (500 * MIB, mlp())];
        let s = snap(&live, &[], GIB, 300 * MIB, mlp());
        let r = settle(attribute(&s).with_limit(79 * GIB + 200 * MIB));
        assert_eq!(r.summary.cause, SnapshotCause::OtherProcess);
        assert!(r.summary.outside.is_some_and(|o| o > 60 * GIB));
        // Under a cap the card's free bytes run past it: nothing is outside.
        let s = snap(&live, &[], GIB, 60 * GIB, mlp());
        let r = settle(attribute(&s).with_limit(14 * GIB));
        assert_eq!(r.summary.outside, Some(0));
        assert_eq!(r.summary.cause, SnapshotCause::Activations);
    }

    #[test]
    fn bytes_without_a_stack_are_unattributed_and_said_so() {
        let s = snap(
            &[(GIB, Vec::new()), (8 * MIB, init())],
            &[],
            64 * MIB,
            0,
            Vec::new(),
        );
        let r = settle(attribute(&s));
        assert_eq!(r.summary.unattributed, GIB);
        assert_eq!(r.summary.other, 0);
        assert!(
            r.summary.text.contains("unattributed"),
            "{}",
            r.summary.text
        );
        assert_eq!(r.summary.cause, SnapshotCause::Unknown);
    }
}
