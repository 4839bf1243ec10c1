//! `llm-oom explain snapshot.pickle`: PyTorch's own record of an out-of-memory (the allocator
//! snapshot a user dumps with `torch.cuda.memory._dump_snapshot`, or `watch`'s hook writes), read
//! without executing anything, every live byte attributed, and the verdict it supports.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::Result;
use crate::exit::ExitStatus;
use crate::snapshot::attribute::{attribute, SnapshotReport};
use crate::snapshot::read_snapshot;
use crate::verdict::snapshot::from_snapshot;
use crate::verdict::Verdict;

#[derive(Debug, Clone)]
pub struct SnapshotRequest {
    pub path: PathBuf,
}

/// Field names are the JSON contract (`command` stays "explain": it is what the user ran).
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotExplainReport {
    pub command: &'static str,
    pub version: &'static str,
    /// Always `pytorch_snapshot`: what was read.
    pub source: &'static str,
    pub file: String,
    pub verdict: Verdict,
    pub record: SnapshotReport,
}

impl SnapshotExplainReport {
    pub fn exit_status(&self) -> ExitStatus {
        ExitStatus::of(&self.verdict)
    }
}

/// Whether `path` is a pickle (protocol 2 or later starts with 0x80 and the protocol number), so
/// `explain` reads it as a snapshot rather than as a log.
pub fn is_snapshot(path: &Path) -> bool {
    let mut head = [0u8; 2];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| head[0] == 0x80 && (2..=5).contains(&head[1]))
}

pub fn explain_snapshot(req: &SnapshotRequest) -> Result<SnapshotExplainReport> {
    let snap = read_snapshot(&req.path)?;
    let record = attribute(&snap);
    let verdict = from_snapshot(&record);
    Ok(SnapshotExplainReport {
        command: "explain",
        version: env!("CARGO_PKG_VERSION"),
        source: "pytorch_snapshot",
        file: req.path.display().to_string(),
        verdict,
        record,
    })
}
