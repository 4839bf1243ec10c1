//! The watched tree dies with `watch`, even after `kill -9` of watch: a guardian process (the
//! hidden `__watch-guard`, started before the program) reads the tree's pids from watch on a
//! pipe. When the pipe closes without the word `done` — watch died before it finished — the
//! guardian stops every process it was told of and everything below them, then kills them. It is
//! told of the program at once, so the tree under it is found whole; the pids the sampler sees
//! add what was reparented. Without a guardian the program gets `PR_SET_PDEATHSIG` (SIGKILL).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

use super::tree;

/// The guardian, from watch's side.
pub struct Guard {
    child: Child,
    stdin: Option<ChildStdin>,
    told: HashMap<u32, u64>,
}

impl Guard {
    /// Start `exe __watch-guard`; `None` when it cannot start (the direct child still has its
    /// death signal).
    pub fn start(exe: &Path) -> Option<Guard> {
        let mut child = Command::new(exe)
            .arg("__watch-guard")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let stdin = child.stdin.take();
        Some(Guard {
            child,
            stdin,
            told: HashMap::new(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Tell the guardian of pids it has not heard of yet.
    pub fn tell(&mut self, pids: &[u32]) {
        let Some(stdin) = self.stdin.as_mut() else {
            return;
        };
        let mut lines = String::new();
        for &p in pids {
            if self.told.contains_key(&p) {
                continue;
            }
            if let Some(start) = tree::start_time(p) {
                self.told.insert(p, start);
                lines.push_str(&format!("{p} {start}\n"));
            }
        }
        if !lines.is_empty() {
            let _ = stdin
                .write_all(lines.as_bytes())
                .and_then(|_| stdin.flush());
        }
    }

    /// watch finished: the guardian leaves the processes alone and exits.
    pub fn release(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"done\n");
        }
        let _ = self.child.wait();
    }
}

/// The guardian's side: read `pid start_time` lines until `done` (exit) or the end of input (watch
/// died: kill the tree). Terminal signals (Ctrl-C, a closed terminal) reach the whole foreground
/// group; the guardian ignores them so it outlives watch.
pub fn serve(input: impl BufRead) {
    // SAFETY: signal(2) with SIG_IGN for two valid signal numbers; changes this process only.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    let mut known: Vec<(u32, u64)> = Vec::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        if line.trim() == "done" {
            return;
        }
        let mut f = line.split_whitespace().map(str::parse::<u64>);
        if let (Some(Ok(pid)), Some(Ok(start))) = (f.next(), f.next()) {
            if let Ok(pid) = u32::try_from(pid) {
                known.push((pid, start));
            }
        }
    }
    kill_known(&known);
}

/// Stop (SIGSTOP, so nothing forks meanwhile) the known processes that are still the same
/// processes (same start time: a reused pid is left alone) and all their descendants, then kill
/// them.
fn kill_known(known: &[(u32, u64)]) {
    let mut doomed: Vec<u32> = Vec::new();
    for _round in 0..3 {
        let mut found = false;
        let roots: Vec<u32> = known
            .iter()
            .filter(|(p, s)| tree::start_time(*p) == Some(*s))
            .map(|(p, _)| *p)
            .chain(doomed.iter().copied())
            .collect();
        for r in roots {
            for p in tree::descendants(r) {
                if !doomed.contains(&p) {
                    signal(p, libc::SIGSTOP);
                    doomed.push(p);
                    found = true;
                }
            }
        }
        if !found {
            break;
        }
    }
    for &p in &doomed {
        signal(p, libc::SIGKILL);
    }
}

fn signal(pid: u32, sig: i32) {
    if pid <= 1 || pid == std::process::id() {
        return;
    }
    // SAFETY: kill(2) with a positive pid (never 0, -1 or init) and a valid signal number.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Kill the tree under `root` (and what was reparented to this process), but not the guardian:
/// what watch does when the program ignores its signals.
pub fn kill_tree(root: u32, guard: Option<u32>) -> usize {
    let mut killed = 0;
    for _ in 0..5 {
        let pids: Vec<u32> = tree::descendants_of_us(root)
            .into_iter()
            .filter(|p| Some(*p) != guard)
            .collect();
        if pids.is_empty() {
            break;
        }
        for &p in &pids {
            signal(p, libc::SIGKILL);
        }
        killed = killed.max(pids.len());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    killed
}
