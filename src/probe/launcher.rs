//! Which child a probe session starts: llm-oom's own candle runtime (`llm-oom __probe`), or the
//! user's transformers in a Python child that speaks the same protocol
//! (`transformers_probe.py`, embedded in this binary and written to a private folder).

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::error::{Error, InputError, Result};

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
        let dir = crate::scratch::private_dir("llm-oom-probe-")
            .map_err(|e| Error::Internal(format!("cannot write the transformers probe: {e}")))?;
        let script = dir.join("transformers_probe.py");
        std::fs::write(&script, TRANSFORMERS_PROBE).map_err(|e| {
            Error::Internal(format!(
                "cannot write the transformers probe to {}: {e}",
                script.display()
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

/// How long `--python` gets to run `import sys` before it is called broken (a cold interpreter
/// starts in well under a second; the probe's own imports come later and get their own bound).
pub const PYTHON_CHECK: Duration = Duration::from_secs(10);

/// `--python` checked before any work: it exists, is executable, and runs `import sys` within
/// [`PYTHON_CHECK`], printing what it was asked to. `Err`: one line on what is wrong.
pub fn check_python(python: &Path) -> std::result::Result<(), InputError> {
    let shown = python.display();
    let bad = |why: String| {
        InputError::Usage(format!(
            "--python {shown} {why}; pass the path of a Python 3 interpreter (e.g. --python $(which python3))"
        ))
    };
    if python.components().count() > 1 || python.is_absolute() {
        match std::fs::metadata(python) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(bad("does not exist".into()))
            }
            Err(e) => return Err(bad(format!("cannot be used ({e})"))),
            Ok(m) if m.is_dir() => return Err(bad("is a folder".into())),
            Ok(m) => {
                use std::os::unix::fs::PermissionsExt;
                if m.permissions().mode() & 0o111 == 0 {
                    return Err(bad("is not executable".into()));
                }
            }
        }
    }
    const MARK: &str = "llm-oom-python-ok";
    let mut child = Command::new(python)
        .args(["-c", &format!("import sys; sys.stdout.write('{MARK}')")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => bad("was not found".into()),
            _ => bad(format!("cannot be started ({e})")),
        })?;
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(p) = pipe {
                let _ = p.take(64 << 10).read_to_string(&mut text);
            }
            let _ = tx.send(text);
        });
        rx
    };
    let out = read(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = read(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if started.elapsed() < PYTHON_CHECK => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(bad(format!(
                    "did not run `import sys` within {} s and was stopped",
                    PYTHON_CHECK.as_secs()
                )));
            }
        }
    };
    // A grandchild that keeps the pipes open must not hold llm-oom: the text is waited for briefly.
    let grace = Duration::from_millis(500);
    let stdout = out.recv_timeout(grace).unwrap_or_default();
    let stderr = err.recv_timeout(grace).unwrap_or_default();
    if status.success() && stdout.contains(MARK) {
        return Ok(());
    }
    let last = stderr
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .map_or(String::new(), |l| format!(": {l}"));
    let how = match status.code() {
        Some(c) => format!("exited with code {c}"),
        None => "was killed by a signal".into(),
    };
    Err(bad(if status.success() {
        "ran but is not a Python (`-c 'import sys'` printed nothing)".into()
    } else {
        format!("is not a working Python (`-c 'import sys'` {how}{last})")
    }))
}

impl Drop for Launcher {
    fn drop(&mut self) {
        if let Some(dir) = &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_that_cannot_work_is_refused_in_one_line() {
        for (python, says) in [
            ("/nonexistent/python3", "does not exist"),
            ("/bin/false", "exited with code 1"),
            ("/bin/true", "printed nothing"),
            ("/", "is a folder"),
            ("no-such-python-llm-oom", "was not found"),
        ] {
            let e = check_python(Path::new(python)).unwrap_err().to_string();
            assert!(e.contains(says), "{python}: {e}");
            assert!(e.starts_with(&format!("--python {python} ")), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let python3 = std::process::Command::new("python3")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if python3 {
            assert!(check_python(Path::new("python3")).is_ok());
        }
    }
}
