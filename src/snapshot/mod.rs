//! PyTorch's own record of GPU memory: the caching allocator's snapshot
//! (`torch.cuda.memory._snapshot()` written with `pickle.dump`, as the PyTorch docs' recipe and
//! the `watch` hook make it), read as data and attributed.
//!
//! - this file: the typed snapshot (segments, blocks, frames, the trace) and [`read_snapshot`];
//! - `guard`: the opcode pre-scan that keeps the reader bounded and refuses anything but data;
//! - `attribute`: every live byte to weights, KV cache, activations by module, or other; slack and
//!   fragmentation; the failed request ([`attribute::attribute`] → [`SnapshotReport`]);
//! - `hook`: the `sitecustomize.py` that makes the snapshot inside a watched Python program.
//!
//! Bounds: a file above [`MAX_FILE_BYTES`] is refused before it is read; see `guard` for depth and
//! decoded size. Unknown keys are ignored and missing ones default, across torch versions.

pub mod attribute;
pub mod classify;
mod decode;
pub mod guard;
pub mod hook;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::InputError;

pub use attribute::{attribute, SnapshotReport};

/// Largest snapshot file read. PyTorch's own viewer warns that snapshots "can easily be in the GB
/// range" with a large `max_entries`; the hook's (100,000 entries, python stacks) measured 11 MB.
pub const MAX_FILE_BYTES: u64 = 512 << 20;

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Snapshot {
    pub segments: Vec<Segment>,
    /// One list per device, oldest entry first.
    pub device_traces: Vec<Vec<TraceEntry>>,
    #[serde(deserialize_with = "settings")]
    pub allocator_settings: BTreeMap<String, String>,
}

/// Memory one `cudaMalloc` returned; the allocator splits it into blocks.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Segment {
    pub device: i64,
    pub address: u64,
    pub total_size: u64,
    pub allocated_size: u64,
    pub active_size: u64,
    pub requested_size: u64,
    pub stream: u64,
    /// `small` (the pool of ≤ 1 MiB requests) or `large`.
    pub segment_type: String,
    pub is_expandable: bool,
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Block {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    pub state: BlockState,
    /// Innermost call first; empty when history was off when it was allocated.
    pub frames: Vec<Frame>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(from = "String", rename_all = "snake_case")]
pub enum BlockState {
    /// Used by a tensor.
    ActiveAllocated,
    /// Freed, but another stream may still use it (`active_pending_free`, `active_awaiting_free`).
    ActivePendingFree,
    /// Cached: reserved by the allocator, free for reuse.
    #[default]
    Inactive,
    Other,
}

impl From<String> for BlockState {
    fn from(s: String) -> Self {
        match s.as_str() {
            "active_allocated" => BlockState::ActiveAllocated,
            "active_pending_free" | "active_awaiting_free" => BlockState::ActivePendingFree,
            "inactive" => BlockState::Inactive,
            _ => BlockState::Other,
        }
    }
}

impl BlockState {
    pub fn is_active(self) -> bool {
        matches!(
            self,
            BlockState::ActiveAllocated | BlockState::ActivePendingFree
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct Frame {
    pub filename: String,
    pub line: i64,
    pub name: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct TraceEntry {
    pub action: TraceAction,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub time_us: i64,
    /// Only on `oom`: what CUDA still reported free.
    pub device_free: u64,
    pub frames: Vec<Frame>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(from = "String", rename_all = "snake_case")]
pub enum TraceAction {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    /// The allocator failed; `size` is the request that did not succeed.
    Oom,
    Snapshot,
    #[default]
    Other,
}

impl From<String> for TraceAction {
    fn from(s: String) -> Self {
        match s.as_str() {
            "alloc" => TraceAction::Alloc,
            "free_requested" => TraceAction::FreeRequested,
            "free_completed" => TraceAction::FreeCompleted,
            "segment_alloc" => TraceAction::SegmentAlloc,
            "segment_free" => TraceAction::SegmentFree,
            "segment_map" => TraceAction::SegmentMap,
            "segment_unmap" => TraceAction::SegmentUnmap,
            "oom" => TraceAction::Oom,
            "snapshot" => TraceAction::Snapshot,
            _ => TraceAction::Other,
        }
    }
}

/// `allocator_settings` holds numbers, strings, bools and lists across versions: kept as text.
fn settings<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let raw = BTreeMap::<String, serde_pickle::Value>::deserialize(d)?;
    Ok(raw
        .into_iter()
        .map(|(k, v)| {
            let text = match v {
                serde_pickle::Value::String(s) => s,
                serde_pickle::Value::I64(i) => i.to_string(),
                serde_pickle::Value::F64(f) => f.to_string(),
                serde_pickle::Value::Bool(b) => b.to_string(),
                serde_pickle::Value::None => "None".into(),
                other => format!("{other:?}"),
            };
            (k, text)
        })
        .collect())
}

impl Snapshot {
    /// Every block with its segment's device, in file order.
    pub fn blocks(&self) -> impl Iterator<Item = (&Segment, &Block)> {
        self.segments
            .iter()
            .flat_map(|s| s.blocks.iter().map(move |b| (s, b)))
    }

    /// Whether any block or trace entry carries a stack (history was on).
    pub fn has_frames(&self) -> bool {
        self.blocks().any(|(_, b)| !b.frames.is_empty())
            || self
                .device_traces
                .iter()
                .flatten()
                .any(|t| !t.frames.is_empty())
    }
}

/// Reads a snapshot file; every failure is an [`InputError`] of one line (exit code 2).
pub fn read_snapshot(path: &Path) -> Result<Snapshot, InputError> {
    let bad = |reason: String| InputError::Snapshot {
        path: path.to_path_buf(),
        reason,
    };
    let io = |source| InputError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    if len > MAX_FILE_BYTES {
        return Err(bad(format!(
            "it is {} MiB, above the {} MiB llm-oom reads; record with a smaller max_entries",
            len >> 20,
            MAX_FILE_BYTES >> 20
        )));
    }
    let mut data = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(io)?;
    parse_snapshot(&data).map_err(bad)
}

/// Decodes the bytes of a snapshot pickle (after the `guard` pre-scan); `Err` is the reason.
pub fn parse_snapshot(data: &[u8]) -> Result<Snapshot, String> {
    if data.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "it is above the {} MiB llm-oom reads",
            MAX_FILE_BYTES >> 20
        ));
    }
    if data.first() != Some(&0x80) {
        return Err("it is not a pickle (pickle.dump of torch.cuda.memory._snapshot() starts with a protocol byte)".into());
    }
    guard::check(data)?;
    decode::decode_snapshot(data)
}
