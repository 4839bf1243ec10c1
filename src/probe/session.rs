//! The parent's side of the probe: start the child, hand it tasks, wait for each answer within a
//! time limit, and survive the child's death (out of memory, panic, abort, hang). A dead child is
//! replaced by a fresh one, which loads the model again, for the next task. Every child is waited
//! for, and NVML is asked whether it left memory on the GPU.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::launcher::Launcher;
use super::protocol::{Hello, OomFacts, Outcome, Setup, Task, TaskDevices, TaskResult};
use crate::error::{Error, InputError, Result};
use crate::meter::host::Part;

/// What came back for a task.
/// The least time a child gets to start and greet (Python imports torch and transformers in
/// 5–30 s on a cold disk).
const HELLO_TIMEOUT: Duration = Duration::from_secs(180);

#[derive(Debug, Clone)]
pub enum Reply {
    Done(Box<TaskResult>),
    /// The child died before answering; `oom` when its last words were an allocation failure.
    Died {
        message: String,
        oom: Option<OomFacts>,
    },
    /// No answer within the stage timeout; the child was killed. `words`: its last stderr lines.
    TimedOut {
        after: Duration,
        words: String,
    },
}

/// One child process, after it ended.
#[derive(Debug, Clone, Serialize)]
pub struct ChildRecord {
    pub pid: u32,
    /// `exited 0`, `exited 101`, `killed by signal 6`…
    pub exit: String,
    /// GPU bytes NVML still attributed to it after it ended (`None`: no NVML or not on a GPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leftover_gpu_bytes: Option<u64>,
}

struct Running {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

pub struct Session {
    launcher: Launcher,
    setup: Setup,
    timeout: Duration,
    gpu_index: Option<u32>,
    /// The prompt a fresh child warms up with.
    pub warmup_tokens: usize,
    /// A fresh child warms up before its task (so its tasks measure like the first child's);
    /// off for a task that must run as a user's new program does, cold.
    pub warm_fresh: bool,
    running: Option<Running>,
    /// The first child's greeting (device, base bytes, capacity).
    pub hello: Option<Hello>,
    pub children: Vec<ChildRecord>,
    /// Each task's memory per GPU when the probe is spread over several (empty on one device).
    pub per_device: Vec<TaskDevices>,
}

/// A Python child that cannot import its engine says so in one JSON line instead of a greeting.
fn unavailable(line: &str) -> Option<Error> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    (v.get("kind")?.as_str()? == "missing_python_package").then(|| {
        Error::EngineUnavailable(
            v.get("error")
                .and_then(|e| e.as_str())
                .unwrap_or("the engine is not installed")
                .to_string(),
        )
    })
}

/// Stderr kept per child: its last words are what matters.
const STDERR_KEEP: usize = 64 << 10;

impl Session {
    pub fn new(launcher: Launcher, setup: Setup, timeout: Duration) -> Session {
        let gpu_index = setup.device.gpu();
        Session {
            launcher,
            setup,
            timeout,
            gpu_index,
            warmup_tokens: 256,
            warm_fresh: true,
            running: None,
            hello: None,
            children: Vec::new(),
            per_device: Vec::new(),
        }
    }

    fn spawn(&mut self) -> Result<()> {
        let setup =
            serde_json::to_string(&self.setup).map_err(|e| Error::Internal(e.to_string()))?;
        let mut child = Command::new(&self.launcher.program)
            .args(&self.launcher.args)
            .arg("--setup")
            .arg(setup)
            .envs(self.launcher.env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| match e.kind() {
                // No such interpreter: the engine is not there to measure in.
                std::io::ErrorKind::NotFound => Error::EngineUnavailable(format!(
                    "the Python interpreter {} was not found",
                    self.launcher.program.display()
                )),
                _ => Error::Internal(format!(
                    "cannot start the probe ({}): {e}",
                    self.launcher.program.display()
                )),
            })?;
        let (Some(stdin), Some(stdout), Some(mut err)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            return Err(Error::Internal("the probe's pipes were not opened".into()));
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut kept) = sink.lock() {
                    kept.extend_from_slice(&buf[..n]);
                    let excess = kept.len().saturating_sub(STDERR_KEEP);
                    kept.drain(..excess);
                }
            }
        });
        let mut running = Running {
            child,
            stdin,
            lines: rx,
            stderr,
        };
        // Starting (importing torch and transformers, creating the CUDA context, holding the
        // ballast) is not a stage: it gets at least HELLO_TIMEOUT whatever --stage-timeout says.
        let greet_within = self.timeout.max(HELLO_TIMEOUT);
        match running.lines.recv_timeout(greet_within) {
            Ok(line) => {
                let hello: Hello = match serde_json::from_str(&line) {
                    Ok(h) => h,
                    Err(e) => {
                        let _ = running.child.kill();
                        let status = running.child.wait().ok();
                        self.record(running.child.id(), status);
                        return Err(unavailable(&line).unwrap_or_else(|| {
                            Error::Internal(format!("the probe greeted with {line:?} ({e})"))
                        }));
                    }
                };
                if self.hello.is_none() {
                    self.hello = Some(hello);
                }
                self.running = Some(running);
                Ok(())
            }
            Err(_) => {
                // It died (or hung) before greeting: bad input the parent did not catch, or a device
                // that cannot be opened. Its last line says which.
                let _ = running.child.kill();
                let status = running.child.wait().ok();
                let words = last_words(&running.stderr);
                self.record(running.child.id(), status);
                let message = words
                    .lines()
                    .rev()
                    .find_map(|l| l.strip_prefix("llm-oom: "))
                    .map_or_else(|| words.trim().to_string(), str::to_string);
                let message = if message.is_empty() {
                    format!(
                        "it did not greet within {:.0} s and was stopped",
                        greet_within.as_secs_f64()
                    )
                } else {
                    message
                };
                Err(match status.and_then(|s| s.code()) {
                    Some(2) => InputError::Usage(message).into(),
                    _ => Error::Internal(format!("the probe could not start: {message}")),
                })
            }
        }
    }

    /// Run one task; a fresh child (which loads the model first) if none is alive.
    pub fn run(&mut self, task: &Task) -> Result<Reply> {
        if self.running.is_none() {
            self.spawn()?;
            if !matches!(task, Task::Load) {
                match self.exchange(&Task::Load) {
                    Reply::Done(r) if r.outcome == Outcome::Ok => {
                        // A fresh child warms up like the first did, so its tasks measure alike.
                        if self.warm_fresh && !matches!(task, Task::Warmup { .. }) {
                            let _ = self.exchange(&Task::Warmup {
                                prompt_tokens: self.warmup_tokens,
                            });
                        }
                    }
                    Reply::Done(r) => {
                        return Ok(Reply::Died {
                            message: format!(
                                "a fresh probe could not load the model again: {}",
                                r.oom.map(|o| o.message).or(r.error).unwrap_or_default()
                            ),
                            oom: None,
                        })
                    }
                    other => return Ok(other),
                }
            }
        }
        Ok(self.exchange(task))
    }

    fn exchange(&mut self, task: &Task) -> Reply {
        let Some(running) = self.running.as_mut() else {
            return Reply::Died {
                message: "no probe is running".into(),
                oom: None,
            };
        };
        let sent = serde_json::to_string(task)
            .map_err(|e| e.to_string())
            .and_then(|line| {
                writeln!(running.stdin, "{line}")
                    .and_then(|_| running.stdin.flush())
                    .map_err(|e| e.to_string())
            });
        let started = Instant::now();
        let answer = match sent {
            Ok(()) => running.lines.recv_timeout(self.timeout),
            Err(_) => Err(RecvTimeoutError::Disconnected),
        };
        match answer {
            Ok(line) => match serde_json::from_str::<TaskResult>(&line) {
                Ok(r) => {
                    self.per_device.extend(r.devices());
                    Reply::Done(Box::new(r))
                }
                Err(e) => {
                    self.end(true);
                    Reply::Died {
                        message: format!("the probe answered {line:?} ({e})"),
                        oom: None,
                    }
                }
            },
            Err(RecvTimeoutError::Timeout) => {
                let (_, words) = self.end(true);
                Reply::TimedOut {
                    after: started.elapsed(),
                    words: tail_lines(&words, 5),
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                let (status, words) = self.end(false);
                Reply::Died {
                    message: death_message(status.as_deref(), &words),
                    oom: allocation_failure(&words),
                }
            }
        }
    }

    /// Stop the running child (killing it when `kill`), wait for it, and record how it ended.
    fn end(&mut self, kill: bool) -> (Option<String>, String) {
        let Some(mut running) = self.running.take() else {
            return (None, String::new());
        };
        drop(running.stdin);
        if kill {
            let _ = running.child.kill();
        }
        let status = wait_for(&mut running.child, Duration::from_secs(10));
        // The reader threads see the pipes close; give stderr a moment to drain.
        std::thread::sleep(Duration::from_millis(20));
        let words = last_words(&running.stderr);
        let exit = self.record(running.child.id(), status);
        (Some(exit), words)
    }

    fn record(&mut self, pid: u32, status: Option<std::process::ExitStatus>) -> String {
        let exit = describe_exit(status);
        let leftover_gpu_bytes = self.gpu_index.and_then(|i| leftover(i, pid));
        self.children.push(ChildRecord {
            pid,
            exit: exit.clone(),
            leftover_gpu_bytes,
        });
        exit
    }

    /// End the running child now; the next task starts a fresh one (which loads and warms up).
    /// After an out-of-memory the search does this: on the H200 a child that had run out found
    /// its later limits 8–20 % lower than a fresh process, which is what a user's program is.
    pub fn retire(&mut self) {
        self.end(false);
    }

    /// End the last child (it exits when its input closes) and return every child's record.
    pub fn finish(mut self) -> Vec<ChildRecord> {
        self.end(false);
        std::mem::take(&mut self.children)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(mut r) = self.running.take() {
            let _ = r.child.kill();
            let _ = r.child.wait();
        }
    }
}

/// Wait at most `limit` for `child`, then kill it; its status (`None`: it could not be waited for).
pub fn wait_for(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                return child.wait().ok();
            }
            Err(_) => return None,
        }
    }
}

/// What to quote of a child's stderr: after a Python stack dump (faulthandler, "most recent call
/// first") its innermost `n` frames; otherwise the last `n` non-empty lines. Joined with " | ".
fn tail_lines(words: &str, n: usize) -> String {
    if let Some(at) = words.rfind("most recent call first") {
        let frames: Vec<&str> = words[at..]
            .lines()
            .skip(1)
            .map(str::trim)
            .filter(|l| l.starts_with("File ") && !l.starts_with("File \"<frozen"))
            .take(n)
            .collect();
        if !frames.is_empty() {
            return frames.join(" | ");
        }
    }
    let mut lines: Vec<&str> = words
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .rev()
        .take(n)
        .collect();
    lines.reverse();
    lines.join(" | ")
}

fn last_words(stderr: &Arc<Mutex<Vec<u8>>>) -> String {
    stderr
        .lock()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn describe_exit(status: Option<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exited {c}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            _ => "ended".into(),
        },
        None => "unknown".into(),
    }
}

/// One line on how a child died, from its exit and the end of its stderr.
fn death_message(exit: Option<&str>, words: &str) -> String {
    let exit = exit.unwrap_or("ended");
    let lines: Vec<&str> = words
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if let Some(i) = lines.iter().position(|l| l.contains("panicked at")) {
        let what = lines.get(i + 1).copied().unwrap_or_default();
        return format!("the probe panicked ({exit}): {what}");
    }
    if let Some(l) = lines
        .iter()
        .rev()
        .find(|l| l.contains("memory allocation of"))
    {
        return format!("the probe ran out of host memory ({exit}): {l}");
    }
    match lines.last() {
        Some(l) => format!("the probe died ({exit}): {l}"),
        None => format!("the probe died ({exit}) without a word"),
    }
}

/// Rust's allocation-failure abort: "memory allocation of N bytes failed".
fn allocation_failure(words: &str) -> Option<OomFacts> {
    let line = words
        .lines()
        .rev()
        .find(|l| l.contains("memory allocation of"))?;
    let requested = line
        .split("memory allocation of ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok();
    Some(OomFacts {
        requested,
        held: 0,
        part: Part::Other,
        message: line.trim().to_string(),
        free: None,
        largest_block: None,
        cached: None,
        emulated: false,
    })
}

/// Bytes NVML still lists for `pid` on GPU `index`, waiting up to 2 s for the driver to release
/// them (`None` without NVML).
fn leftover(index: u32, pid: u32) -> Option<u64> {
    let start = Instant::now();
    loop {
        let gpu = crate::meter::gpu::read_gpu(index).ok()?;
        let held = gpu
            .processes
            .iter()
            .find(|p| p.pid == pid)
            .map_or(0, |p| p.bytes.unwrap_or(0));
        if held == 0 || start.elapsed() > Duration::from_secs(2) {
            return Some(held);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_stack_dump_is_quoted_by_its_innermost_frames() {
        let words = "loading\nTimeout (0:00:20)!\nThread 0x7f (most recent call first):\n  File \"/x/init.py\", line 10 in normal_\n  File \"/x/modeling.py\", line 5 in _init_weights\n  File \"/p.py\", line 1 in main\n";
        assert_eq!(
            tail_lines(words, 2),
            "File \"/x/init.py\", line 10 in normal_ | File \"/x/modeling.py\", line 5 in _init_weights"
        );
        assert_eq!(tail_lines("a\n\nb\nc\n", 2), "b | c");
    }
    use super::*;

    #[test]
    fn a_death_is_described_from_its_last_words() {
        let panic = "thread 'main' panicked at src/probe/child.rs:1:2:\ninjected fault at first_token\nnote: run with RUST_BACKTRACE=1\n";
        assert_eq!(
            death_message(Some("exited 101"), panic),
            "the probe panicked (exited 101): injected fault at first_token"
        );
        let abort = "memory allocation of 1073741824 bytes failed\n";
        assert!(death_message(Some("killed by signal 6"), abort).contains("out of host memory"));
        let facts = allocation_failure(abort).expect("Rust's allocation failure line");
        assert_eq!(facts.requested, Some(1 << 30));
        assert_eq!(
            death_message(None, ""),
            "the probe died (ended) without a word"
        );
    }
}
