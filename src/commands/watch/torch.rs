//! PyTorch's own record for `watch`: the sitecustomize hook put into a Python program
//! (`snapshot::hook`), and after it ends what the hook wrote — whether it was on, the allocator
//! snapshot at the first OOM, attributed — for the verdict to use first.

use std::path::PathBuf;
use std::process::Command;

use serde::Serialize;

use crate::snapshot::attribute::{attribute, SnapshotReport};
use crate::snapshot::hook::{install, is_python_command, Hook, SnapshotMode};
use crate::snapshot::read_snapshot;

/// The hook installed for one watched program, and its private folder.
pub struct TorchHook {
    hook: Hook,
    dir: PathBuf,
}

/// What the record said, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct TorchRecord {
    /// The program imported torch and the hook saw it.
    pub torch: Option<String>,
    pub cuda_initialised: bool,
    /// `_record_memory_history` was on (allocation stacks recorded).
    pub history: bool,
    /// The snapshot kept for PyTorch's viewer (pytorch.org/memory_viz), when one was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_path: Option<PathBuf>,
    /// Seconds the dump took inside the program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dump_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<SnapshotReport>,
    /// The hook's own errors (it never raises into the program).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook_errors: Option<String>,
}

/// Put the hook into `command` when it runs Python and `mode` is not off; `None` otherwise (or
/// when the folder cannot be made: the program runs unwatched by torch, never not at all).
pub fn prepare(
    argv: &[String],
    mode: Option<SnapshotMode>,
    command: &mut Command,
) -> Option<TorchHook> {
    let mode = mode?;
    if !is_python_command(argv) {
        return None;
    }
    // A folder of its own each time: a kept snapshot from an earlier watch whose process id the
    // system reused would otherwise be read back as this program's record.
    let dir = crate::scratch::private_dir("llm-oom-watch-").ok()?;
    let hook = install(&dir, mode).ok()?;
    for (k, v) in hook.env(std::env::var_os("PYTHONPATH")) {
        command.env(k, v);
    }
    Some(TorchHook { hook, dir })
}

/// Read back what the hook wrote; the folder is removed unless it holds a snapshot (kept, and
/// named in the report, for PyTorch's own viewer).
pub fn collect(h: TorchHook) -> TorchRecord {
    let statuses = h.hook.statuses();
    let first = statuses.iter().find(|s| s.torch_imported);
    let snapshot = h.hook.snapshots().into_iter().next();
    let record = snapshot
        .as_ref()
        .and_then(|p| read_snapshot(p).ok())
        .map(|s| {
            crate::verdict::snapshot::settle(
                attribute(&s).with_observed(statuses.iter().find_map(|s| s.oom.as_ref())),
            )
        });
    let out = TorchRecord {
        torch: first.and_then(|s| s.torch.clone()),
        cuda_initialised: statuses.iter().any(|s| s.cuda_initialised),
        history: statuses.iter().any(|s| s.history),
        dump_seconds: statuses
            .iter()
            .flat_map(|s| s.dumps.iter())
            .map(|d| d.seconds)
            .reduce(f64::max),
        snapshot_path: snapshot.clone(),
        record,
        hook_errors: h.hook.log().filter(|l| !l.trim().is_empty()),
    };
    if snapshot.is_none() {
        let _ = std::fs::remove_dir_all(&h.dir);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_watched_program_gets_a_folder_of_its_own() {
        let argv = vec!["python3".to_string(), "-c".into(), "pass".into()];
        let prepared = || {
            let mut c = Command::new("python3");
            prepare(&argv, Some(SnapshotMode::Oom), &mut c).map(|h| h.dir)
        };
        let (Some(a), Some(b)) = (prepared(), prepared()) else {
            panic!("the hook was not installed");
        };
        assert_ne!(a, b, "two watches of one process share a folder");
        for d in [a, b] {
            assert!(d.join("python").join("sitecustomize.py").is_file());
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
