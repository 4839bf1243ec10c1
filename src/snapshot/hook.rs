//! The hook `watch` puts into a Python program: the embedded `sitecustomize.py`, the environment a
//! child needs for it, what it wrote back (status files, snapshots), and whether a command is a
//! Python program at all.
//!
//! Wiring, for `watch`:
//! ```ignore
//! let hook = snapshot::hook::install(&private_dir, SnapshotMode::Oom)?;   // when is_python_command
//! for (k, v) in hook.env(std::env::var_os("PYTHONPATH")) { command.env(k, v); }
//! // … after the child exits:
//! let statuses = hook.statuses();   let snaps = hook.snapshots();
//! ```

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::Error;

/// The Python file, embedded in the binary.
pub const SITECUSTOMIZE: &str = include_str!("sitecustomize.py");
/// Environment variables the hook reads.
pub const ENV_DIR: &str = "LLM_OOM_SNAPSHOT_DIR";
pub const ENV_MODE: &str = "LLM_OOM_SNAPSHOT";
pub const ENV_MAX_ENTRIES: &str = "LLM_OOM_SNAPSHOT_MAX_ENTRIES";
pub const ENV_STACKS: &str = "LLM_OOM_SNAPSHOT_STACKS";

/// When the hook writes a snapshot: at the first OOM, or also at exit when none happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotMode {
    Oom,
    Always,
}

impl SnapshotMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotMode::Oom => "oom",
            SnapshotMode::Always => "always",
        }
    }
}

/// The installed hook: `python/` holds `sitecustomize.py`, `torch/` receives what it writes.
#[derive(Debug, Clone)]
pub struct Hook {
    pub python_dir: PathBuf,
    pub out_dir: PathBuf,
    pub mode: SnapshotMode,
}

/// Writes the sitecustomize under `private_dir` (created, owner-only) and returns the hook.
pub fn install(private_dir: &Path, mode: SnapshotMode) -> Result<Hook, Error> {
    let python_dir = private_dir.join("python");
    let out_dir = private_dir.join("torch");
    for d in [&python_dir, &out_dir] {
        make_private_dir(d)?;
    }
    let file = python_dir.join("sitecustomize.py");
    std::fs::write(&file, SITECUSTOMIZE)
        .map_err(|e| Error::Internal(format!("cannot write {}: {e}", file.display())))?;
    Ok(Hook {
        python_dir,
        out_dir,
        mode,
    })
}

fn make_private_dir(d: &Path) -> Result<(), Error> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(d)
        .map_err(|e| Error::Internal(format!("cannot create {}: {e}", d.display())))
}

impl Hook {
    /// The variables to set on the child; `pythonpath` is the one it would have had (usually
    /// `std::env::var_os("PYTHONPATH")`), which stays after the hook's folder.
    pub fn env(&self, pythonpath: Option<OsString>) -> Vec<(&'static str, OsString)> {
        let mut path = self.python_dir.clone().into_os_string();
        if let Some(old) = pythonpath.filter(|p| !p.is_empty()) {
            path.push(":");
            path.push(old);
        }
        vec![
            ("PYTHONPATH", path),
            (ENV_DIR, self.out_dir.clone().into_os_string()),
            (ENV_MODE, OsString::from(self.mode.as_str())),
        ]
    }

    /// What each Python process of the program reported (one file per pid), in pid order.
    pub fn statuses(&self) -> Vec<HookStatus> {
        let mut out: Vec<HookStatus> = self
            .files("status-", ".json")
            .iter()
            .filter_map(|p| read_small(p, 1 << 20))
            .filter_map(|t| serde_json::from_slice(&t).ok())
            .collect();
        out.sort_by_key(|s| s.pid);
        out
    }

    /// The snapshot pickles written, in name order (`snapshot-<pid>-<oom|exit>.pickle`).
    pub fn snapshots(&self) -> Vec<PathBuf> {
        self.files("snapshot-", ".pickle")
    }

    /// The hook's own error log, when it noted any.
    pub fn log(&self) -> Option<String> {
        read_small(&self.out_dir.join("hook.log"), 64 << 10)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    fn files(&self, prefix: &str, suffix: &str) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(&self.out_dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(OsStr::to_str)
                    .is_some_and(|n| n.starts_with(prefix) && n.ends_with(suffix))
            })
            .collect();
        out.sort();
        out
    }
}

/// The hook's status written beside a snapshot it dumped: `status-<pid>.json` for
/// `snapshot-<pid>-<reason>.pickle`, else a `status.json` in the same folder. It carries the failed
/// request and the limit the process had (the cap, or the card's total), which the pickle lacks.
pub fn status_beside(pickle: &Path) -> Option<HookStatus> {
    let dir = pickle.parent()?;
    let name = pickle.file_name().and_then(OsStr::to_str)?;
    let pid = name
        .strip_prefix("snapshot-")
        .and_then(|rest| rest.split('-').next())
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let candidates = pid
        .map(|p| dir.join(format!("status-{p}.json")))
        .into_iter()
        .chain(std::iter::once(dir.join("status.json")));
    candidates
        .filter_map(|p| read_small(&p, 1 << 20))
        .find_map(|t| serde_json::from_slice(&t).ok())
}

fn read_small(p: &Path, cap: u64) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    std::fs::File::open(p)
        .ok()?
        .take(cap)
        .read_to_end(&mut buf)
        .ok()?;
    Some(buf)
}

/// `status-<pid>.json` as the sitecustomize writes it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct HookStatus {
    pub hook: String,
    pub pid: u32,
    pub mode: String,
    pub argv: Vec<String>,
    pub torch_imported: bool,
    pub torch: Option<String>,
    pub cuda_initialised: bool,
    pub history: bool,
    pub max_entries: u64,
    pub stacks: String,
    pub oom: Option<ObservedOom>,
    pub dumps: Vec<Dump>,
    pub errors: u64,
}

/// The OOM observer's arguments: `alloc` is the request that failed; `device_allocated` is, in
/// torch's CUDACachingAllocator, what the process was allowed (`set_fraction ?
/// allowed_memory_maximum : device_total`), not what it had allocated.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ObservedOom {
    pub device: i64,
    pub alloc: u64,
    pub device_allocated: u64,
    pub device_free: u64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Dump {
    pub reason: String,
    pub path: PathBuf,
    pub bytes: u64,
    pub seconds: f64,
}

/// Launchers that run a Python program given after them.
const LAUNCHERS: &[&[&str]] = &[
    &["uv", "run"],
    &["accelerate", "launch"],
    &["poetry", "run"],
    &["pipenv", "run"],
    &["conda", "run"],
    &["torchrun"],
    &["deepspeed"],
    &["vllm"],
];

/// Whether `command` (program and arguments, as after `watch --`) runs Python: `python`,
/// `python3`, `python3.11`, a launcher above, `env VAR=x …` of one, or a script whose shebang
/// names python.
pub fn is_python_command(command: &[String]) -> bool {
    let mut args = command;
    if args.first().is_some_and(|p| base(p) == "env") {
        args = &args[1..];
        while args
            .first()
            .is_some_and(|a| a.contains('=') || a.starts_with('-'))
        {
            args = &args[1..];
        }
    }
    let Some(program) = args.first() else {
        return false;
    };
    let name = base(program);
    if is_python_name(name) {
        return true;
    }
    if LAUNCHERS.iter().any(|l| {
        l[0] == name && l[1..].iter().zip(&args[1..]).all(|(a, b)| a == b) && args.len() >= l.len()
    }) {
        return true;
    }
    shebang_names_python(program)
}

fn base(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

fn is_python_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("python") else {
        return false;
    };
    rest.is_empty()
        || rest
            .split('.')
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
}

fn shebang_names_python(program: &str) -> bool {
    let path = if program.contains('/') {
        Some(PathBuf::from(program))
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(program))
                .find(|p| p.is_file())
        })
    };
    let Some(head) = path.and_then(|p| read_small(&p, 256)) else {
        return false;
    };
    let Some(first) = head.split(|b| *b == b'\n').next() else {
        return false;
    };
    let line = String::from_utf8_lossy(first);
    line.starts_with("#!")
        && line[2..]
            .split_whitespace()
            .take(3)
            .any(|w| is_python_name(base(w)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = r#"{"hook": "on", "pid": 708, "mode": "oom", "argv": [], "torch_imported": true,
        "cuda_initialised": true, "history": true, "max_entries": 100000, "stacks": "python",
        "oom": {"device": 0, "alloc": 536870912, "device_allocated": 17179869183, "device_free": 67260055552},
        "dumps": [], "errors": 0}"#;

    #[test]
    fn the_status_beside_a_record_is_its_pids_then_a_plain_status_json() {
        let dir = tempfile::tempdir().unwrap();
        let pickle = dir.path().join("snapshot-708-oom.pickle");
        assert!(status_beside(&pickle).is_none());
        std::fs::write(dir.path().join("status.json"), STATUS.replace("708", "9")).unwrap();
        assert_eq!(status_beside(&pickle).map(|s| s.pid), Some(9));
        std::fs::write(dir.path().join("status-708.json"), STATUS).unwrap();
        let s = status_beside(&pickle).unwrap();
        assert_eq!((s.pid, s.oom.unwrap().device_allocated), (708, 17179869183));
        // Another name falls back to status.json; a file that is not a status is skipped.
        assert_eq!(
            status_beside(&dir.path().join("mine.pickle")).map(|s| s.pid),
            Some(9)
        );
        std::fs::write(dir.path().join("status.json"), "not json").unwrap();
        assert!(status_beside(&dir.path().join("mine.pickle")).is_none());
    }
}
