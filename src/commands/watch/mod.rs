//! `llm-oom watch -- <command>`: run the user's own program, pass its input and output through,
//! record the memory of its whole process tree, and when it ends say where the memory went.

pub mod capture;
pub mod guard;
pub mod oomkill;
pub mod signals;
pub mod timeline;
pub mod torch;
pub mod tree;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, InputError, Result};
use crate::estimate::Engine;
use crate::exit::ExitStatus;
use crate::logparse::Finding;
use crate::meter::gpu::GpuSampler;
use crate::units::Bytes;
use crate::verdict::read::read_log;
use crate::verdict::record::MemoryRecord;
use crate::verdict::remedy::Change;
use crate::verdict::{Cause, Evidence, Remedy, Stage, Verdict};
use capture::Capture;
use guard::Guard;
use oomkill::{OomKill, OomWatch};
use signals::{Armed, Forwarder};
use timeline::{phases, Phase, PhaseKind, Sample, Timeline};

#[derive(Debug, Clone)]
pub struct WatchRequest {
    pub command: Vec<String>,
    pub interval: Duration,
    pub gpu_index: u32,
    pub engine: Engine,
    /// The llm-oom binary, to start the guardian that kills the tree if watch is killed
    /// (`guard`); `None`: only the program's own death signal.
    pub guard_exe: Option<PathBuf>,
    /// PyTorch's record through the sitecustomize hook (Python programs only); `None`: off.
    pub torch: Option<crate::snapshot::hook::SnapshotMode>,
}

/// How the program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Exit {
    /// The exit code, or 128 + signal number for a signal (as a shell reports it).
    pub code: i32,
    pub signal: Option<i32>,
}

/// A process of the tree still running when the program itself exited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Leftover {
    pub pid: u32,
    pub name: String,
    /// It held the program's stdout or stderr open, so the output had not ended.
    pub holds_output: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct WatchReport {
    pub command: &'static str,
    pub version: &'static str,
    pub verdict: Verdict,
    pub remedies: Vec<Remedy>,
    pub argv: Vec<String>,
    pub exit: Exit,
    /// From the start to the end of watching: the program and whatever it left running that
    /// kept its output open.
    pub duration_ms: u64,
    /// When the program itself (the process watch started) exited.
    pub program_exit_ms: u64,
    /// Processes the program left running when it exited; watch waited for them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leftover: Vec<Leftover>,
    pub peak_host_bytes: u64,
    pub peak_gpu_bytes: Option<u64>,
    pub peak_other_processes_bytes: Option<u64>,
    pub gpu_total_bytes: Option<u64>,
    /// The limit the program ran into: a per-process cap PyTorch printed ("24.00 GiB allowed"),
    /// else the card.
    pub limit_bytes: Option<u64>,
    /// How GPU memory was read ("nvml") or why it was not.
    pub gpu_note: String,
    pub phases: Vec<Phase>,
    pub oom_at_ms: Option<u64>,
    pub findings: Vec<Finding>,
    /// Kills by the kernel's OOM killer in the tree (kernel log or cgroup counters).
    pub oom_kills: Vec<OomKill>,
    /// Whether the kernel log could be read (else only cgroup counters say).
    pub kernel_log_read: bool,
    /// watch killed the tree itself after the program ignored SIGTERM or a second Ctrl-C.
    pub killed_by_watch: bool,
    pub output_bytes: u64,
    pub output_kept_bytes: u64,
    /// Up to 400 samples (maxima kept when thinned).
    pub timeline: Vec<Sample>,
    pub interval_ms: u64,
    /// PyTorch's own record, when the hook ran in a Python program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torch: Option<torch::TorchRecord>,
}

impl WatchReport {
    /// PyTorch's record decides when it has a snapshot of the OOM: measured, not read from the
    /// text; what the text said is kept as evidence when it disagrees.
    fn use_torch_record(&mut self, t: torch::TorchRecord) {
        // A record without a failed request does not overrule an out-of-memory the output shows.
        let decides = t
            .record
            .as_ref()
            .filter(|rec| rec.oom.is_some() || self.verdict.cause == Cause::None);
        if let Some(rec) = decides {
            let from_text = self.verdict.cause;
            // One record of both: the allocator's figures over the message's, the program's
            // batch line and the card's total from the text; the record rules decide from it.
            let mut merged = MemoryRecord::from_snapshot(rec);
            if merged.engine_version.is_none() {
                if let Some(version) = &t.torch {
                    merged.engine_version = Some(version.clone());
                    if let Some(p) = merged.source.first_mut() {
                        p.figures.push("engine_version");
                    }
                }
            }
            if let Some(text) = self.verdict.record.take() {
                merged = merged.merge(text);
            }
            let mut v = crate::verdict::snapshot::from_record(rec, merged);
            let merged = v.record.take().unwrap_or_default();
            // The record sees what filled the limit, not how many sequences filled it: when the
            // program's output names a batch, the batch is the sharper answer, and the record
            // stands beside it as evidence.
            // Likewise when the output shows the same work running before (progress lines) and
            // the record's cached holes could hold the request: a long-lived process's
            // fragmentation, which one record cannot tell from a workload that outgrew the limit.
            let sharper = match from_text {
                Cause::Concurrency => Some(crate::verdict::rules::Code::W1),
                Cause::Fragmentation => Some(crate::verdict::rules::Code::W2),
                _ => None,
            };
            if let (Some(code), true) = (
                sharper,
                matches!(v.cause, Cause::Activations | Cause::KvCache),
            ) {
                self.verdict.evidence.push(Evidence::text(format!(
                    "PyTorch's record: {} filled the limit ({})",
                    v.cause, rec.summary.text
                )));
                self.verdict.rule = Some(code);
                self.verdict.record = Some(merged);
                self.torch = Some(t);
                return;
            }
            if from_text != v.cause && from_text != Cause::None {
                v.evidence.push(Evidence::text(format!(
                    "the program's output alone reads as {from_text}: {}",
                    self.verdict.summary
                )));
            }
            if self.verdict.stage != Stage::Unknown && v.stage == Stage::Unknown {
                v.stage = self.verdict.stage;
            }
            v.record = Some(merged);
            self.verdict = v;
        }
        self.torch = Some(t);
    }

    /// The program's own exit code, or 1 with `--fail-on-oom` when an OOM was seen.
    pub fn exit_status(&self, fail_on_oom: bool) -> ExitStatus {
        if fail_on_oom && self.verdict.cause != Cause::None && self.exit.code == 0 {
            ExitStatus::OutOfMemory
        } else {
            ExitStatus::Program(self.exit.code.clamp(0, 255) as u8)
        }
    }
}

fn tee(
    mut from: impl Read + Send + 'static,
    to_stderr: bool,
    cap: Arc<Mutex<Capture>>,
    start: Instant,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        // The copy for analysis takes whole lines, so stdout and stderr never splice mid-line.
        let mut pending: Vec<u8> = Vec::new();
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // The user sees their program as always; a closed terminal does not stop the copy.
            let _ = if to_stderr {
                std::io::stderr()
                    .write_all(&buf[..n])
                    .and_then(|_| std::io::stderr().flush())
            } else {
                std::io::stdout()
                    .write_all(&buf[..n])
                    .and_then(|_| std::io::stdout().flush())
            };
            pending.extend_from_slice(&buf[..n]);
            if let Some(end) = pending.iter().rposition(|&b| b == b'\n') {
                let lines: Vec<u8> = pending.drain(..=end).collect();
                if let Ok(mut c) = cap.lock() {
                    c.add(&lines, start.elapsed().as_millis() as u64);
                }
            } else if pending.len() > 1 << 20 {
                // A megabyte without a newline (a progress bar): keep it as it is.
                if let Ok(mut c) = cap.lock() {
                    c.add(&pending, start.elapsed().as_millis() as u64);
                }
                pending.clear();
            }
        }
        if !pending.is_empty() {
            pending.push(b'\n');
            if let Ok(mut c) = cap.lock() {
                c.add(&pending, start.elapsed().as_millis() as u64);
            }
        }
    })
}

pub fn watch(req: &WatchRequest) -> Result<WatchReport> {
    let Some((program, args)) = req.command.split_first() else {
        return Err(InputError::Usage(
            "nothing to watch: put the command after --, as in `llm-oom watch -- python app.py`"
                .into(),
        )
        .into());
    };
    // Orphans of the program (it forked and exited) become our children, so the tree stays whole.
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integer arguments and changes only
    // this process's own attribute.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let guard = req.guard_exe.as_deref().and_then(Guard::start);
    let guard_pid = guard.as_ref().map(Guard::pid);
    let oom = OomWatch::start();
    let start = Instant::now();
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Without a guardian the program gets SIGKILL when watch dies, however it dies. With one it
    // must outlive watch for a moment: the guardian walks the tree down from it, whole.
    if guard.is_none() {
        // SAFETY: between fork and exec the closure calls only prctl(2), which is
        // async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                Ok(())
            });
        }
    }
    let torch_hook = torch::prepare(&req.command, req.torch, &mut command);
    let armed = Armed::new()?;
    let mut child = command.spawn().map_err(|e| {
        InputError::Usage(format!(
            "cannot start `{program}`: {e}; check the command after --"
        ))
    })?;
    let root = child.id();
    let mut guard = guard;
    if let Some(g) = guard.as_mut() {
        g.tell(&[root]);
    }
    let done = Arc::new(AtomicBool::new(false));
    let forwarder = Forwarder::start(armed, root, guard_pid, Arc::clone(&done));

    let cap = Arc::new(Mutex::new(Capture::default()));
    let pipes: Vec<u64> = {
        use std::os::fd::AsRawFd;
        [
            child.stdout.as_ref().map(|s| s.as_raw_fd()),
            child.stderr.as_ref().map(|s| s.as_raw_fd()),
        ]
        .into_iter()
        .flatten()
        .filter_map(tree::pipe_inode)
        .collect()
    };
    let out = child
        .stdout
        .take()
        .map(|s| tee(s, false, Arc::clone(&cap), start));
    let err = child
        .stderr
        .take()
        .map(|s| tee(s, true, Arc::clone(&cap), start));

    let (gpu, gpu_note) = match GpuSampler::open(req.gpu_index) {
        Ok(g) => (
            Some(g),
            "GPU memory read through NVML, per process".to_string(),
        ),
        Err(note) => (None, note),
    };
    let timeline = Arc::new(Mutex::new(Timeline::new(20_000)));
    let gpu_total = Arc::new(Mutex::new(None));
    let watched = Arc::new(Mutex::new(Watched {
        guard,
        oom,
        seen: HashSet::new(),
    }));
    let sampler = {
        let (timeline, done, gpu_total, watched) = (
            Arc::clone(&timeline),
            Arc::clone(&done),
            Arc::clone(&gpu_total),
            Arc::clone(&watched),
        );
        let interval = req.interval;
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let mut pids = tree::descendants_of_us(root);
                pids.retain(|p| Some(*p) != guard_pid);
                if let Ok(mut w) = watched.lock() {
                    w.see(&pids);
                }
                let host: u64 = pids.iter().map(|&p| tree::rss_bytes(p)).sum();
                let reading = gpu.as_ref().and_then(|g| g.read(&pids));
                if let (Some(r), Ok(mut t)) = (reading, gpu_total.lock()) {
                    *t = Some(r.device_total);
                }
                if let Ok(mut t) = timeline.lock() {
                    t.push(Sample {
                        t_ms: start.elapsed().as_millis() as u64,
                        host_bytes: host,
                        gpu_bytes: reading.map(|r| r.tree),
                        device_used: reading.map(|r| r.device_used),
                        others_bytes: reading.map(|r| r.others),
                        processes: pids.len() as u32,
                    });
                }
                std::thread::sleep(interval);
            }
        })
    };

    let status = child
        .wait()
        .map_err(|e| Error::Internal(format!("waiting for the program: {e}")))?;
    let program_exit_ms = start.elapsed().as_millis() as u64;
    let mut leftover = leftovers(guard_pid, &pipes);
    if !leftover.is_empty() {
        // A process forked a moment ago may not have exec'd its program yet (`setsid sleep`).
        std::thread::sleep(Duration::from_millis(100));
        leftover = leftovers(guard_pid, &pipes);
    }
    if !leftover.is_empty() {
        eprintln!(
            "llm-oom: {}",
            waiting_line(exit_of(status), program_exit_ms, &leftover)
        );
    }
    // Descendants that outlived the program were reparented to us: wait for them too (the
    // guardian, our child as well, is waited for when it is released).
    reap_orphans(guard_pid);
    for t in [out, err].into_iter().flatten() {
        let _ = t.join();
    }
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let killed_by_watch = forwarder.escalated.load(Ordering::Relaxed);
    forwarder.stop();
    let (oom_kills, kernel_log_read) = match Arc::try_unwrap(watched)
        .ok()
        .and_then(|m| m.into_inner().ok())
    {
        Some(w) => {
            if let Some(g) = w.guard {
                g.release();
            }
            let read = w.oom.reads_kernel_log();
            (w.oom.finish(&w.seen), read)
        }
        None => (Vec::new(), false),
    };

    let exit = exit_of(status);
    let duration_ms = start.elapsed().as_millis() as u64;
    let timeline = timeline
        .lock()
        .map(|t| t.clone())
        .unwrap_or_else(|_| Timeline::new(4));
    let capture = cap
        .lock()
        .map(|c| (c.text(), c.total, c.kept(), c.oom_at_ms))
        .unwrap_or_default();
    let gpu_total = gpu_total.lock().ok().and_then(|g| *g);
    let ended = Ended {
        exit,
        duration_ms,
        program_exit_ms,
        leftover,
        oom_kills,
        kernel_log_read,
        killed_by_watch,
    };
    let torch = torch_hook.map(torch::collect);
    let mut r = report(req, ended, &timeline, capture, gpu_total, gpu_note);
    if let Some(t) = torch {
        r.use_torch_record(t);
    }
    Ok(r)
}

/// What the sampler keeps about the tree besides its memory: every pid seen (for the kernel
/// log), their cgroups' counters, and the guardian to tell.
struct Watched {
    guard: Option<Guard>,
    oom: OomWatch,
    seen: HashSet<u32>,
}

impl Watched {
    fn see(&mut self, pids: &[u32]) {
        let new: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| self.seen.insert(*p))
            .collect();
        if new.is_empty() {
            return;
        }
        for &p in &new {
            self.oom.see(p);
        }
        if let Some(g) = self.guard.as_mut() {
            g.tell(&new);
        }
    }
}

/// How the run ended, beside the output and the timeline.
struct Ended {
    exit: Exit,
    duration_ms: u64,
    program_exit_ms: u64,
    leftover: Vec<Leftover>,
    oom_kills: Vec<OomKill>,
    kernel_log_read: bool,
    killed_by_watch: bool,
}

/// How a process ended, as a shell reports it.
fn exit_of(status: std::process::ExitStatus) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => Exit {
            code: c,
            signal: None,
        },
        (None, Some(s)) => Exit {
            code: 128 + s,
            signal: Some(s),
        },
        (None, None) => Exit {
            code: 1,
            signal: None,
        },
    }
}

/// The processes of the tree still running once the program exited (reparented to us).
fn leftovers(guard: Option<u32>, pipes: &[u64]) -> Vec<Leftover> {
    let me = std::process::id();
    tree::descendants(me)
        .into_iter()
        .filter(|p| *p != me && Some(*p) != guard)
        .map(|pid| Leftover {
            pid,
            name: tree::name(pid),
            holds_output: tree::holds_pipe(pid, pipes),
        })
        .collect()
}

/// "1 leftover process (pid 42, sleep)", the first three named.
fn leftover_list(left: &[Leftover]) -> String {
    let named: Vec<String> = left
        .iter()
        .take(3)
        .map(|l| format!("pid {}, {}", l.pid, l.name))
        .collect();
    let more = match left.len().saturating_sub(3) {
        0 => String::new(),
        n => format!(", and {n} more"),
    };
    format!(
        "{} leftover process{} ({}{more})",
        left.len(),
        if left.len() == 1 { "" } else { "es" },
        named.join("; ")
    )
}

/// What watch says at once when the program exits but processes it started run on.
fn waiting_line(exit: Exit, at_ms: u64, left: &[Leftover]) -> String {
    let how = match exit.signal {
        Some(s) => format!("was killed by signal {s}"),
        None => format!("exited (code {})", exit.code),
    };
    let holds = if left.iter().any(|l| l.holds_output) {
        if left.len() == 1 {
            "that holds its output"
        } else {
            "that hold its output"
        }
    } else {
        "it left running"
    };
    format!(
        "the program {how} after {:.1} s; waiting for {} {holds} — Ctrl-C twice stops them",
        at_ms as f64 / 1000.0,
        leftover_list(left)
    )
}

/// Wait for every process that was reparented to us, so none is left behind.
fn reap_orphans(guard: Option<u32>) {
    loop {
        let others: Vec<u32> = tree::descendants(std::process::id())
            .into_iter()
            .filter(|p| *p != std::process::id() && Some(*p) != guard)
            .collect();
        if others.is_empty() {
            break;
        }
        let mut status = 0;
        // SAFETY: waitpid(-1) on our own children; status is a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid <= 0 {
            break;
        }
    }
}

fn report(
    req: &WatchRequest,
    ended: Ended,
    timeline: &Timeline,
    (text, total, kept, oom_at_ms): (Vec<u8>, u64, u64, Option<u64>),
    gpu_total: Option<u64>,
    gpu_note: String,
) -> WatchReport {
    let Ended {
        exit,
        duration_ms,
        program_exit_ms,
        leftover,
        oom_kills,
        kernel_log_read,
        killed_by_watch,
    } = ended;
    let phases = phases(&timeline.series());
    let explained = if text.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        read_log(&text, req.engine).ok()
    };
    // The program's whole output and its exit are known here: output that stops inside a
    // traceback (explain's undecided reading, with no event) is left to the exit and the kernel.
    let (mut verdict, mut remedies, findings) = match explained {
        Some(e) if e.verdict.cause == Cause::None || !e.findings.is_empty() => {
            (e.verdict, e.remedies, e.findings)
        }
        _ => (
            Verdict {
                record: None,
                rule: None,
                cause: Cause::None,
                stage: Stage::Unknown,
                confidence: 0.7,
                summary: String::new(),
                evidence: Vec::new(),
                contributing: Vec::new(),
            },
            Vec::new(),
            Vec::new(),
        ),
    };
    let peak_gpu = timeline.peak_gpu().filter(|b| *b > 0);
    let peak_host = timeline.peak_host();

    if verdict.cause == Cause::None {
        if let Some(why) = host_oom(
            &oom_kills,
            exit,
            peak_host,
            kernel_log_read,
            killed_by_watch,
        ) {
            verdict.cause = Cause::HostMemory;
            verdict.stage = Stage::Unknown;
            verdict.confidence = if oom_kills.is_empty() { 0.5 } else { 0.9 };
            verdict.summary = format!("host_memory: {why}");
            remedies.push(Remedy::advice(Change::MoreHostMemory, req.engine, None));
        }
    }
    for k in &oom_kills {
        verdict.evidence.push(Evidence::text(match (k.source, k.pid) {
            ("dmesg", Some(pid)) => format!(
                "the kernel's OOM killer killed pid {pid} ({}) of the tree, {} anonymous resident (dmesg)",
                k.process.as_deref().unwrap_or("?"),
                Bytes(k.anon_rss_bytes.unwrap_or(0))
            ),
            _ => format!(
                "{} OOM kill(s) counted during the run in {}",
                k.count,
                k.cgroup.as_deref().unwrap_or("the tree's cgroup")
            ),
        }));
    }
    // An OOM the text could not place: let the curve decide — a GPU curve only: without NVML the
    // curve is host memory, which does not say what filled the card.
    if verdict.cause == Cause::Unknown {
        if let Some((cause, stage, why)) = from_curve(&phases, oom_at_ms) {
            if peak_gpu.is_some() {
                verdict.cause = cause;
                verdict.stage = stage;
                verdict.confidence = 0.55;
                verdict.summary = format!(
                    "{cause}: {why} (from the memory timeline; the output alone did not decide)"
                );
            } else {
                verdict.evidence.push(Evidence::text(format!(
                    "host memory: {why}; on a GPU's curve that shape would point to {cause}, but GPU memory was not read ({gpu_note})"
                )));
            }
        }
    }
    if verdict.cause == Cause::None && exit.signal == Some(libc::SIGKILL) {
        verdict.summary = if killed_by_watch {
            "no out-of-memory: llm-oom killed the process tree after the program ignored its signals".to_string()
        } else {
            format!(
                "no out-of-memory seen: the program was killed with SIGKILL at {} resident, with no OOM kill in {}; something else sent it",
                Bytes(peak_host),
                if kernel_log_read { "the kernel log" } else { "the cgroup counters llm-oom could read" }
            )
        };
    }
    if verdict.cause == Cause::None && exit.signal != Some(libc::SIGKILL) {
        verdict.summary = match exit.code {
            0 => format!(
                "no out-of-memory: the program exited cleanly after {:.1} s",
                program_exit_ms as f64 / 1000.0
            ),
            c => format!("no out-of-memory in the output; the program exited with code {c}"),
        };
    }
    if !leftover.is_empty() {
        verdict.evidence.push(Evidence::text(format!(
            "the program exited after {:.1} s and left {} running; llm-oom waited for {} until {:.1} s",
            program_exit_ms as f64 / 1000.0,
            leftover_list(&leftover),
            if leftover.len() == 1 { "it" } else { "them" },
            duration_ms as f64 / 1000.0
        )));
    }
    if let Some(g) = peak_gpu {
        verdict.evidence.push(Evidence::bytes(
            format!("peak GPU memory of the process tree: {}", Bytes(g)),
            g,
        ));
    }
    verdict.evidence.push(Evidence::bytes(
        format!("peak host memory of the process tree: {}", Bytes(peak_host)),
        peak_host,
    ));
    for p in &phases {
        if p.kind != PhaseKind::Steady {
            verdict.evidence.push(Evidence::text(format!(
                "{} phase from {:.1} s to {:.1} s: {} → {}",
                p.kind.as_str(),
                p.start_ms as f64 / 1000.0,
                p.end_ms as f64 / 1000.0,
                Bytes(p.from_bytes),
                Bytes(p.to_bytes)
            )));
        }
    }
    // What watch measured itself, beside the figures the output printed.
    let observed = MemoryRecord::observed(
        gpu_total,
        timeline.peak_others(),
        peak_gpu,
        peak_host,
        &req.command,
    );
    verdict.record = Some(match verdict.record.take() {
        Some(text) => text.merge(observed),
        None => observed,
    });
    WatchReport {
        command: "watch",
        version: env!("CARGO_PKG_VERSION"),
        verdict,
        remedies,
        argv: req.command.clone(),
        exit,
        duration_ms,
        program_exit_ms,
        leftover,
        peak_host_bytes: peak_host,
        peak_gpu_bytes: peak_gpu,
        peak_other_processes_bytes: timeline.peak_others(),
        gpu_total_bytes: gpu_total,
        limit_bytes: findings
            .iter()
            .find_map(|f| match &f.event {
                crate::logparse::Event::TorchOom(t) => t.allowed,
                _ => None,
            })
            .or(gpu_total),
        gpu_note,
        phases,
        oom_at_ms,
        findings,
        oom_kills,
        kernel_log_read,
        killed_by_watch,
        output_bytes: total,
        output_kept_bytes: kept,
        timeline: timeline.thinned(400),
        interval_ms: req.interval.as_millis() as u64,
        torch: None,
    }
}

/// Why the end looks like the host running out of memory, if it does: the OOM killer killed a
/// process of the tree (kernel log or a cgroup counter), or — when neither can be read — the
/// program died of SIGKILL holding at least half the host's memory. A SIGKILL with little resident
/// and no recorded kill (`sh -c 'kill -9 $$'`) is not one.
fn host_oom(
    kills: &[OomKill],
    exit: Exit,
    peak_host: u64,
    kernel_log_read: bool,
    killed_by_watch: bool,
) -> Option<String> {
    if let Some(k) = kills.first() {
        return Some(match (k.pid, &k.process) {
            (Some(pid), Some(name)) => format!(
                "the kernel's OOM killer killed {name} (pid {pid}) of the program's tree at {} resident",
                Bytes(k.anon_rss_bytes.unwrap_or(0))
            ),
            _ => format!(
                "{} OOM kill(s) in the program's memory cgroup during the run",
                k.count
            ),
        });
    }
    if killed_by_watch || exit.signal != Some(libc::SIGKILL) || kernel_log_read {
        return None;
    }
    let host = tree::mem_total()?;
    (peak_host >= host / 2).then(|| {
        format!(
            "the program was killed with SIGKILL at {} resident, half the host's {} or more — what the Linux OOM killer sends (the kernel log was not readable to confirm it)",
            Bytes(peak_host),
            Bytes(host)
        )
    })
}

/// What the shape of the curve says about an OOM at `oom_at_ms`: a death during the first climb is
/// the weights; during a steady climb, the KV cache; right after a jump, the prefill's activations.
fn from_curve(phases: &[Phase], oom_at_ms: Option<u64>) -> Option<(Cause, Stage, String)> {
    let at = oom_at_ms?;
    // The last climb before the error; a flat stretch after it (the process idling into its
    // error) does not change what filled the memory.
    let last = phases
        .iter()
        .rev()
        .find(|p| p.start_ms <= at && p.kind != PhaseKind::Steady)?;
    Some(match last.kind {
        PhaseKind::Load => (
            Cause::Weights,
            Stage::Load,
            format!(
                "it died while memory was still climbing to the model's size ({})",
                Bytes(last.to_bytes)
            ),
        ),
        PhaseKind::Growth => (
            Cause::KvCache,
            Stage::LongGeneration,
            format!(
                "memory grew steadily from {} to {} before it died",
                Bytes(last.from_bytes),
                Bytes(last.to_bytes)
            ),
        ),
        PhaseKind::Spike => (
            Cause::Activations,
            Stage::FirstToken,
            format!(
                "memory jumped from {} to {} just before it died",
                Bytes(last.from_bytes),
                Bytes(last.to_bytes)
            ),
        ),
        PhaseKind::Steady => return None,
    })
}
