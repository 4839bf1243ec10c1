//! Which child a probe session starts: llm-oom's own candle runtime (`llm-oom __probe`), or the
//! user's transformers in a Python child that speaks the same protocol
//! (`transformers_probe.py`, embedded in this binary and written to a private folder).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The transformers child, embedded so the binary needs no install step beside it.
pub const TRANSFORMERS_PROBE: &str = include_str!("transformers_probe.py");

/// How to start one probe child; the session appends `--setup <json>`.
#[derive(Debug, Clone)]
pub struct Launcher {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(&'static str, &'static str)>,
    /// A folder this launcher wrote (the script) and removes when dropped.
    scratch: Option<PathBuf>,
}

impl Launcher {
    /// The candle runtime: the llm-oom binary itself.
    pub fn candle(exe: PathBuf) -> Launcher {
        Launcher {
            program: exe,
            args: vec!["__probe".into()],
            // Library errors would capture (and cache the symbols of) a backtrace each: tens of
            // MB held for good, which the meters would count as the workload's.
            env: vec![("RUST_LIB_BACKTRACE", "0")],
            scratch: None,
        }
    }

    /// transformers under `python`: the embedded script written to a folder of this process.
    pub fn transformers(python: &Path) -> Result<Launcher> {
        let dir = std::env::temp_dir().join(format!("llm-oom-probe-{}", std::process::id()));
        let script = dir.join("transformers_probe.py");
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&script, TRANSFORMERS_PROBE))
            .map_err(|e| {
                Error::Internal(format!(
                    "cannot write the transformers probe to {}: {e}",
                    dir.display()
                ))
            })?;
        Ok(Launcher {
            program: python.to_path_buf(),
            args: vec![script.into_os_string()],
            env: vec![
                ("PYTHONUNBUFFERED", "1"),
                ("TRANSFORMERS_VERBOSITY", "error"),
                ("TOKENIZERS_PARALLELISM", "false"),
            ],
            scratch: Some(dir),
        })
    }
}

/// The user's Python: `LLM_OOM_PYTHON`, else `python3`.
pub fn default_python() -> PathBuf {
    std::env::var_os("LLM_OOM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"))
}

impl Drop for Launcher {
    fn drop(&mut self) {
        if let Some(dir) = &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
