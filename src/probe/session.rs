//! The parent's side of the probe: start the child, hand it tasks, wait for each answer within a
//! time limit, and survive the child's death (out of memory, panic, abort, hang). A dead child is
//! replaced by a fresh one, which loads the model again, for the next task. Every child is waited
//! for, and NVML is asked whether it left memory on the GPU.
//!
//! Tensor parallel ([`Session::tensor_parallel`]): one child per rank, every task sent to all of
//! them and answered by all (see [`super::world`]). The first rank that fails — out of memory,
//! an error, death, a timeout — ends the world: the other ranks may be waiting in a collective
//! that will never complete, so they are killed, and the answer names the rank and its device.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::launcher::Launcher;
use super::protocol::{Hello, OomFacts, Outcome, Setup, Task, TaskDevices, TaskResult};
use super::world;
use crate::error::{Error, InputError, Result};
use crate::meter::host::Part;
use crate::request::Device;

/// What came back for a task.
/// The least time a child gets to start and greet (Python imports torch and transformers in
/// 5–30 s on a cold disk).
const HELLO_TIMEOUT: Duration = Duration::from_secs(180);

/// The least time a child gets to greet when `--stage-timeout` bounds the start: a cold import of
/// torch and transformers takes up to this.
const HELLO_FLOOR: Duration = Duration::from_secs(30);

/// After one rank failed, how long the others' answers already on their way are waited for.
const WORLD_GRACE: Duration = Duration::from_millis(250);

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

/// Where a diagnose's time went: a child's start (imports, CUDA context, ballast) and each task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timing {
    pub what: String,
    pub seconds: f64,
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
    /// The probe's own pid, as its greeting says: the transformers child may be forked by a warm
    /// process (transformers_probe.py's zygote), and `child` is then its relay. NVML's figures
    /// and the leftover check are for this pid.
    pid: u32,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Arc<Mutex<Vec<u8>>>,
    device: Device,
}

pub struct Session {
    launcher: Launcher,
    setup: Setup,
    timeout: Duration,
    /// `--stage-timeout` as given: a child then gets that long to greet, but at least
    /// [`HELLO_FLOOR`]; `None`: at least [`HELLO_TIMEOUT`].
    pub greet_timeout: Option<Duration>,
    /// The prompt a fresh child warms up with.
    pub warmup_tokens: usize,
    /// A fresh child warms up before its task (so its tasks measure like the first child's);
    /// off for a task that must run as a user's new program does, cold.
    pub warm_fresh: bool,
    /// The live children: one, or one per tensor-parallel rank (empty: none alive).
    running: Vec<Running>,
    /// Tensor parallel: rank r's device is `world[r]` (empty: one child).
    world: Vec<Device>,
    /// The first child's greeting (device, base bytes, capacity).
    pub hello: Option<Hello>,
    pub children: Vec<ChildRecord>,
    /// Where the time went, in order: each start and each task.
    pub timings: Vec<Timing>,
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

/// What the children said next.
enum Event {
    Line(usize, String),
    /// Child `i`'s output closed: it died (or could not be written to).
    Gone(usize),
    Timeout,
}

/// The next line from any child still `pending`, until `deadline`.
fn next_event(running: &[Running], pending: &[bool], deadline: Instant) -> Event {
    let waiting: Vec<usize> = (0..running.len()).filter(|&i| pending[i]).collect();
    if let [only] = waiting.as_slice() {
        let left = deadline.saturating_duration_since(Instant::now());
        return match running[*only].lines.recv_timeout(left) {
            Ok(line) => Event::Line(*only, line),
            Err(RecvTimeoutError::Timeout) => Event::Timeout,
            Err(RecvTimeoutError::Disconnected) => Event::Gone(*only),
        };
    }
    loop {
        for &i in &waiting {
            match running[i].lines.try_recv() {
                Ok(line) => return Event::Line(i, line),
                Err(TryRecvError::Disconnected) => return Event::Gone(i),
                Err(TryRecvError::Empty) => {}
            }
        }
        if waiting.is_empty() || Instant::now() >= deadline {
            return Event::Timeout;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

impl Session {
    pub fn new(launcher: Launcher, setup: Setup, timeout: Duration) -> Session {
        Session {
            launcher,
            setup,
            timeout,
            greet_timeout: None,
            warmup_tokens: 256,
            warm_fresh: true,
            running: Vec::new(),
            world: Vec::new(),
            hello: None,
            children: Vec::new(),
            timings: Vec::new(),
            per_device: Vec::new(),
        }
    }

    /// A tensor-parallel session: rank r runs on `devices[r]`, each in its own child.
    pub fn tensor_parallel(
        launcher: Launcher,
        setup: Setup,
        devices: Vec<Device>,
        timeout: Duration,
    ) -> Session {
        let mut s = Session::new(launcher, setup, timeout);
        s.world = devices;
        s
    }

    /// A rank's prefix for what is said about it (nothing with one child).
    fn who(&self, i: usize) -> String {
        match self.world.get(i) {
            Some(d) if self.world.len() > 1 => format!("rank {i} ({d}): "),
            _ => String::new(),
        }
    }

    fn start(&self, setup: &Setup) -> Result<Running> {
        let json = serde_json::to_string(setup).map_err(|e| Error::Internal(e.to_string()))?;
        let mut child = Command::new(&self.launcher.program)
            .args(&self.launcher.args)
            .arg("--setup")
            .arg(json)
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
            let _ = child.wait();
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
        Ok(Running {
            pid: child.id(),
            child,
            stdin,
            lines: rx,
            stderr,
            device: setup.device,
        })
    }

    /// Start every child (one, or one per rank) and wait for each one's greeting.
    fn spawn(&mut self) -> Result<()> {
        let setups = world::rank_setups(&self.setup, &self.world)?;
        let spawned = Instant::now();
        tracing::debug!(children = setups.len(), "probe: starting");
        for s in &setups {
            match self.start(s) {
                Ok(r) => self.running.push(r),
                Err(e) => {
                    self.end_all(|_| true);
                    return Err(e);
                }
            }
        }
        // Starting (importing torch and transformers, creating the CUDA context, holding the
        // ballast, joining the other ranks) is not a stage: it gets at least HELLO_TIMEOUT,
        // unless the user bounded it (--stage-timeout).
        let greet_within = match self.greet_timeout {
            Some(t) => t.max(HELLO_FLOOR),
            None => self.timeout.max(HELLO_TIMEOUT),
        };
        let deadline = Instant::now() + greet_within;
        let mut hellos: Vec<Option<Hello>> = vec![None; self.running.len()];
        while hellos.iter().any(Option::is_none) {
            let pending: Vec<bool> = hellos.iter().map(Option::is_none).collect();
            let (failed, exited) = match next_event(&self.running, &pending, deadline) {
                Event::Line(i, line) => match serde_json::from_str::<Hello>(&line) {
                    Ok(h) => {
                        tracing::debug!(
                            child = i,
                            seconds = spawned.elapsed().as_secs_f64(),
                            "probe: greeted (imports, CUDA, ballast)"
                        );
                        if i == 0 {
                            let again = self.timings.iter().any(|t| t.what.starts_with("start"));
                            let what = match again {
                                false => "start of the probe (imports, CUDA context, ballast)",
                                true => "start of a fresh process (imports, CUDA context, ballast)",
                            };
                            self.timings.push(Timing {
                                what: what.into(),
                                seconds: spawned.elapsed().as_secs_f64(),
                            });
                        }
                        if let Some(r) = self.running.get_mut(i) {
                            r.pid = h.pid;
                        }
                        hellos[i] = Some(h);
                        continue;
                    }
                    Err(e) => {
                        self.end_all(|_| true);
                        world::remove_id_file(&setups);
                        return Err(unavailable(&line).unwrap_or_else(|| {
                            Error::Internal(format!("the probe greeted with {line:?} ({e})"))
                        }));
                    }
                },
                Event::Gone(i) => (i, true),
                Event::Timeout => (pending.iter().position(|&p| p).unwrap_or(0), false),
            };
            world::remove_id_file(&setups);
            return Err(self.not_greeted(failed, exited, greet_within));
        }
        world::remove_id_file(&setups);
        let hellos: Vec<Hello> = hellos.into_iter().flatten().collect();
        if self.hello.is_none() {
            self.hello = Some(world::merge_hellos(hellos, !self.world.is_empty()));
        }
        Ok(())
    }

    /// Child `i` died (`exited`) or hung before greeting: bad input the parent did not catch, or
    /// a device that cannot be opened. Its last line says which. Every child is ended.
    fn not_greeted(&mut self, i: usize, exited: bool, greet_within: Duration) -> Error {
        let who = self.who(i);
        let ended = self.end_all(|_| true);
        let (status, words) = ended.into_iter().nth(i).unwrap_or_default();
        let own = words
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("llm-oom: "))
            .map(str::to_string);
        let last = own.unwrap_or_else(|| tail_lines(&words, 1));
        // Exit 2 is the child refusing its input (its own one line says why).
        if status.as_deref() == Some("exited 2") && !last.is_empty() {
            return InputError::Usage(format!("{who}{last}")).into();
        }
        let said = if last.is_empty() {
            " without a word on stderr".to_string()
        } else {
            format!(": {last}")
        };
        let message = if exited {
            let how = match status.as_deref().and_then(|s| s.strip_prefix("exited ")) {
                Some(code) => format!("exited with code {code}"),
                None => status.unwrap_or_else(|| "ended".into()),
            };
            format!("it {how} before greeting{said}")
        } else {
            let bound = match self.greet_timeout {
                Some(t) => format!(
                    " (--stage-timeout {} bounds the start too, to no less than {} s; without it the start gets {} s)",
                    t.as_secs(),
                    HELLO_FLOOR.as_secs(),
                    HELLO_TIMEOUT.as_secs()
                ),
                None => String::new(),
            };
            format!(
                "it did not greet within {:.0} s{bound} and was stopped{said}",
                greet_within.as_secs_f64()
            )
        };
        Error::Internal(format!("the probe could not start: {who}{message}"))
    }

    /// Run one task; a fresh child (which loads the model first) if none is alive.
    pub fn run(&mut self, task: &Task) -> Result<Reply> {
        if self.running.is_empty() {
            if matches!(task, Task::Load) {
                self.spawn()?;
            } else {
                if let Some(failed) = self.start_loaded()? {
                    return Ok(failed);
                }
                // A fresh child warms up like the first did, so its tasks measure alike.
                if self.warm_fresh && !matches!(task, Task::Warmup { .. }) {
                    let _ = self.exchange(&Task::Warmup {
                        prompt_tokens: self.warmup_tokens,
                    });
                    // A world whose warm-up ran out has ended: the task runs cold in a fresh one,
                    // so its answer is its own and not "no probe is running".
                    if self.running.is_empty() {
                        if let Some(failed) = self.start_loaded()? {
                            return Ok(failed);
                        }
                    }
                }
            }
        }
        Ok(self.exchange(task))
    }

    /// Start a fresh child (or world) and load the model; the reply to answer with if the load
    /// did not succeed.
    fn start_loaded(&mut self) -> Result<Option<Reply>> {
        self.spawn()?;
        Ok(match self.exchange(&Task::Load) {
            Reply::Done(r) if r.outcome == Outcome::Ok => None,
            Reply::Done(r) => Some(Reply::Died {
                message: format!(
                    "a fresh probe could not load the model again: {}",
                    r.oom.map(|o| o.message).or(r.error).unwrap_or_default()
                ),
                oom: None,
            }),
            other => Some(other),
        })
    }

    /// Send `task` to every child and wait for every answer (or the first failure).
    fn exchange(&mut self, task: &Task) -> Reply {
        if self.running.is_empty() {
            return Reply::Died {
                message: "no probe is running".into(),
                oom: None,
            };
        }
        let line = serde_json::to_string(task).unwrap_or_default();
        let mut unwritable = None;
        for (i, r) in self.running.iter_mut().enumerate() {
            let sent = writeln!(r.stdin, "{line}").and_then(|_| r.stdin.flush());
            if sent.is_err() && unwritable.is_none() {
                unwritable = Some(i);
            }
        }
        let started = Instant::now();
        let deadline = started + self.timeout;
        let mut results: Vec<Option<TaskResult>> = vec![None; self.running.len()];
        while results.iter().any(Option::is_none) {
            if let Some(i) = unwritable {
                return self.died(i);
            }
            let pending: Vec<bool> = results.iter().map(Option::is_none).collect();
            match next_event(&self.running, &pending, deadline) {
                Event::Line(i, line) => match serde_json::from_str::<TaskResult>(&line) {
                    Ok(r) => {
                        let failed = r.outcome != Outcome::Ok;
                        results[i] = Some(r);
                        if failed && !self.world.is_empty() {
                            return self.world_failed(i, results);
                        }
                    }
                    Err(e) => {
                        self.end_all(|_| true);
                        return Reply::Died {
                            message: format!("{}the probe answered {line:?} ({e})", self.who(i)),
                            oom: None,
                        };
                    }
                },
                Event::Gone(i) => return self.died(i),
                Event::Timeout => {
                    let i = pending.iter().position(|&p| p).unwrap_or(0);
                    let who = self.who(i);
                    let ended = self.end_all(|_| true);
                    let words = ended.into_iter().nth(i).map(|e| e.1).unwrap_or_default();
                    return Reply::TimedOut {
                        after: started.elapsed(),
                        words: format!("{who}{}", tail_lines(&words, 5)),
                    };
                }
            }
        }
        let r = match self.world.is_empty() {
            true => results.into_iter().flatten().next(),
            false => world::merge_results(results, &self.world, self.hello.as_ref(), None),
        };
        match r {
            Some(r) => {
                tracing::debug!(
                    task = %r.label,
                    seconds = started.elapsed().as_secs_f64(),
                    "probe: answered"
                );
                self.timings.push(Timing {
                    what: r.label.clone(),
                    seconds: started.elapsed().as_secs_f64(),
                });
                self.per_device.extend(r.devices());
                Reply::Done(Box::new(r))
            }
            None => Reply::Died {
                message: "the probe gave no answer".into(),
                oom: None,
            },
        }
    }

    /// Child `i` died before answering: every child is ended (the others may wait on it).
    fn died(&mut self, i: usize) -> Reply {
        let who = self.who(i);
        let ended = self.end_all(|j| j != i);
        let (status, words) = ended.into_iter().nth(i).unwrap_or_default();
        Reply::Died {
            message: format!("{who}{}", death_message(status.as_deref(), &words)),
            oom: allocation_failure(&words),
        }
    }

    /// Rank `i` answered with a failure: the answers already on their way are taken, then the
    /// world is ended (the other ranks may be waiting for it in a collective) and the answer is
    /// rank `i`'s, naming its device.
    ///
    /// A rank that died in the meantime is the cause (the others' all-reduces failed because of
    /// it), and an out-of-memory is a cause before an error.
    fn world_failed(&mut self, i: usize, mut results: Vec<Option<TaskResult>>) -> Reply {
        let deadline = Instant::now() + WORLD_GRACE;
        loop {
            let pending: Vec<bool> = results.iter().map(Option::is_none).collect();
            match next_event(&self.running, &pending, deadline) {
                Event::Line(j, line) => {
                    results[j] = serde_json::from_str(&line).ok();
                    if results[j].is_none() {
                        break;
                    }
                }
                Event::Gone(j) => return self.died(j),
                Event::Timeout => break,
            }
        }
        let lead = results
            .iter()
            .position(|r| r.as_ref().is_some_and(|r| r.outcome == Outcome::Oom))
            .unwrap_or(i);
        self.end_all(|_| true);
        match world::merge_results(results, &self.world, self.hello.as_ref(), Some(lead)) {
            Some(r) => {
                self.per_device.extend(r.devices());
                Reply::Done(Box::new(r))
            }
            None => Reply::Died {
                message: format!("{}the probe failed", self.who(i)),
                oom: None,
            },
        }
    }

    /// End every child (killing those `kill` names), wait for each and record how it ended; its
    /// exit and last words, in rank order.
    fn end_all(&mut self, kill: impl Fn(usize) -> bool) -> Vec<(Option<String>, String)> {
        let mut running = std::mem::take(&mut self.running);
        for (i, r) in running.iter_mut().enumerate() {
            if kill(i) {
                let _ = r.child.kill();
            }
        }
        let mut out = Vec::with_capacity(running.len());
        for r in running {
            let Running {
                mut child,
                pid,
                stdin,
                stderr,
                device,
                ..
            } = r;
            drop(stdin);
            let ending = Instant::now();
            let status = wait_for(&mut child, Duration::from_secs(10));
            tracing::debug!(
                seconds = ending.elapsed().as_secs_f64(),
                "probe: child exited"
            );
            // The reader threads see the pipes close; give stderr a moment to drain.
            std::thread::sleep(Duration::from_millis(20));
            let words = last_words(&stderr);
            let exit = self.record(pid, status, device.gpu());
            tracing::debug!(
                seconds = ending.elapsed().as_secs_f64(),
                "probe: child ended and its GPU memory checked"
            );
            out.push((Some(exit), words));
        }
        out
    }

    fn record(
        &mut self,
        pid: u32,
        status: Option<std::process::ExitStatus>,
        gpu: Option<u32>,
    ) -> String {
        let exit = describe_exit(status);
        let leftover_gpu_bytes = gpu.and_then(|i| leftover(i, pid));
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
        self.end_all(|_| false);
    }

    /// End the last child (it exits when its input closes) and return every child's record.
    pub fn finish(mut self) -> Vec<ChildRecord> {
        self.end_all(|_| false);
        std::mem::take(&mut self.children)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for r in self.running.iter_mut() {
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
