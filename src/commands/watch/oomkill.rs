//! Kills by the kernel's OOM killer anywhere in the watched tree, from what this machine lets us
//! read: the kernel log (`/dev/kmsg`, from the moment watch started, matched to the tree's pids)
//! and the `oom_kill` counters of the memory cgroups the tree ran in (cgroup v2 `memory.events`,
//! v1 `memory.oom_control`), compared before and after.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use serde::Serialize;

/// One OOM kill that concerns the tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OomKill {
    /// `dmesg` (a kernel log line naming a pid of the tree) or `cgroup` (a counter that rose).
    pub source: &'static str,
    pub pid: Option<u32>,
    pub process: Option<String>,
    pub anon_rss_bytes: Option<u64>,
    /// The cgroup counter's file, and by how much it rose.
    pub cgroup: Option<String>,
    pub count: u64,
}

/// What watch opened at the start, and the counters it saw first.
#[derive(Debug, Default)]
pub struct OomWatch {
    kmsg: Option<File>,
    counters: BTreeMap<PathBuf, u64>,
}

impl OomWatch {
    /// Open the kernel log at its end (only what comes after is read), when readable.
    pub fn start() -> OomWatch {
        let kmsg = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg")
            .ok()
            .filter(|f| {
                use std::os::fd::AsRawFd;
                // SAFETY: lseek(2) on a descriptor we own; SEEK_END on /dev/kmsg skips to the
                // newest record.
                unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_END) >= 0 }
            });
        OomWatch {
            kmsg,
            counters: BTreeMap::new(),
        }
    }

    /// Whether the kernel log can be read here.
    pub fn reads_kernel_log(&self) -> bool {
        self.kmsg.is_some()
    }

    /// Note the memory cgroup of `pid`, with its counter as it is now, the first time it is seen.
    pub fn see(&mut self, pid: u32) {
        for path in counter_files(pid) {
            if let std::collections::btree_map::Entry::Vacant(slot) = self.counters.entry(path) {
                if let Some(n) = read_counter(slot.key()) {
                    slot.insert(n);
                }
            }
        }
    }

    /// The OOM kills since `start`: kernel-log kills of a pid in `pids` when the log is readable
    /// (it names the process), else the cgroup counters that rose.
    pub fn finish(mut self, pids: &HashSet<u32>) -> Vec<OomKill> {
        if let Some(f) = self.kmsg.as_mut() {
            return read_kmsg(f)
                .iter()
                .filter_map(|line| parse_kill(line))
                .filter(|k| k.pid.is_some_and(|p| pids.contains(&p)))
                .collect();
        }
        self.counters
            .iter()
            .filter_map(|(path, before)| {
                let now = read_counter(path)?;
                (now > *before).then(|| OomKill {
                    source: "cgroup",
                    pid: None,
                    process: None,
                    anon_rss_bytes: None,
                    cgroup: Some(path.display().to_string()),
                    count: now - before,
                })
            })
            .collect()
    }
}

/// The files that count OOM kills for the cgroups of `pid` (v2 and v1 memory).
fn counter_files(pid: u32) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if id == "0" && controllers.is_empty() {
            for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
                files.push(PathBuf::from(root).join(rel).join("memory.events"));
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            files.push(
                PathBuf::from("/sys/fs/cgroup/memory")
                    .join(rel)
                    .join("memory.oom_control"),
            );
        }
    }
    files.retain(|f| f.is_file());
    files
}

/// The `oom_kill N` line of a cgroup counter file.
fn read_counter(path: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.lines().find_map(|l| {
        l.strip_prefix("oom_kill ")
            .and_then(|n| n.trim().parse().ok())
    })
}

/// Every record the kernel log has now (one per read, until it would block), at most 64 MiB.
fn read_kmsg(f: &mut File) -> Vec<String> {
    let mut lines = Vec::new();
    let mut buf = vec![0u8; 8192];
    let mut total = 0usize;
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                total += n;
                lines.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                if total > 64 << 20 {
                    break;
                }
            }
            // EPIPE: records were overwritten while we read; the next read goes on.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => break,
        }
    }
    lines
}

/// "Killed process 18934 (python3) total-vm:540856kB, anon-rss:65280kB, …" (both the
/// "Out of memory:" and the "Memory cgroup out of memory:" forms).
pub fn parse_kill(record: &str) -> Option<OomKill> {
    let msg = record.split_once(';').map_or(record, |(_, m)| m);
    let rest = msg.split("Killed process ").nth(1)?;
    let (pid, rest) = rest.split_once(' ')?;
    let process = rest
        .strip_prefix('(')
        .and_then(|r| r.split_once(')'))
        .map(|(name, _)| name.to_string());
    let anon = rest
        .split("anon-rss:")
        .nth(1)
        .and_then(|r| r.split("kB").next())
        .and_then(|n| n.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024);
    Some(OomKill {
        source: "dmesg",
        pid: pid.parse().ok(),
        process,
        anon_rss_bytes: anon,
        cgroup: None,
        count: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_forms_of_the_kill_line() {
        let k = parse_kill("3,1234,5949178564,-;Memory cgroup out of memory: Killed process 18934 (python3) total-vm:540856kB, anon-rss:65280kB, file-rss:6548kB").unwrap();
        assert_eq!(k.pid, Some(18934));
        assert_eq!(k.process.as_deref(), Some("python3"));
        assert_eq!(k.anon_rss_bytes, Some(65280 * 1024));
        let k =
            parse_kill("Out of memory: Killed process 7 (a b) total-vm:1kB, anon-rss:2kB").unwrap();
        assert_eq!((k.pid, k.process.as_deref()), (Some(7), Some("a b")));
        assert!(parse_kill("oom-kill:constraint=CONSTRAINT_MEMCG,task=python3,pid=1").is_none());
    }
}
