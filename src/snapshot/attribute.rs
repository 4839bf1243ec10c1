//! Every live byte of a snapshot to a component (`classify`), the allocator's slack and its pieces,
//! the failed request, the allocated-vs-reserved timeline, and a verdict-ready summary.

use std::collections::HashMap;

use serde::Serialize;

use super::classify::{classify, short_path, Component, Sources};
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
    pub other: u64,
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
    pub summary: Summary,
}

impl SnapshotReport {
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
            self.summary = summarize(&self.breakdown, &self.slack, self.oom.as_ref());
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
    let summary = summarize(&breakdown, &slack, oom.as_ref());
    SnapshotReport {
        history: snap.has_frames(),
        breakdown,
        timeline: timeline(snap, &slack),
        slack,
        oom,
        trace_entries: snap.device_traces.iter().map(Vec::len).sum(),
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

fn summarize(rows: &[Row], slack: &Slack, oom: Option<&OomRecord>) -> Summary {
    let sum = |p: &dyn Fn(Component) -> bool| {
        rows.iter()
            .filter(|r| p(r.component))
            .fold(0u64, |s, r| s.saturating_add(r.bytes))
    };
    let weights = sum(&|c| c == Component::Weights);
    let kv_cache = sum(&|c| c == Component::KvCache);
    let activations = sum(&|c| c.is_activation());
    let other = sum(&|c| matches!(c, Component::Other | Component::Unattributed));
    // A load goes on allocating the rest of the model after the request that failed: free bytes
    // that would have served that one request do not make the weights fit (the H200's load OOM,
    // 118 MiB cached free in 4 MiB pieces against a 112 MiB tensor of a 13.5 GiB model on 12 GiB).
    let loading = oom.is_some_and(|o| o.component == Some(Component::Weights));
    let fragmented = !loading
        && oom.is_some_and(|o| {
            o.request > slack.largest_free_block && o.request <= slack.cached_free
        });
    let by_request = oom.and_then(|o| o.component).map(|c| match c {
        Component::Weights => SnapshotCause::Weights,
        Component::KvCache => SnapshotCause::KvCache,
        c if c.is_activation() => SnapshotCause::Activations,
        _ => SnapshotCause::Other,
    });
    let cause = if fragmented {
        SnapshotCause::Fragmentation
    } else if let Some(c) = by_request {
        c
    } else if kv_cache == 0 && activations == 0 && weights > 0 {
        SnapshotCause::Weights
    } else if kv_cache.max(activations) > 0 {
        if kv_cache >= activations {
            SnapshotCause::KvCache
        } else {
            SnapshotCause::Activations
        }
    } else {
        SnapshotCause::Unknown
    };
    let mut text = format!(
        "{} weights, {} KV cache, {} activations, {} other live; {} cached free in {} of {} segments (largest free block {})",
        Bytes(weights),
        Bytes(kv_cache),
        Bytes(activations),
        Bytes(other),
        Bytes(slack.cached_free),
        slack.segments_with_free,
        slack.segments,
        Bytes(slack.largest_free_block)
    );
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
    }
    Summary {
        cause,
        text,
        weights,
        kv_cache,
        activations,
        other,
    }
}
