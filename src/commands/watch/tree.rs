//! The watched program's process tree, read from /proc: which pids descend from the root, and how
//! much host memory (resident set) they hold together.

use std::collections::{HashMap, HashSet};

/// Every live descendant of `root` (and `root` itself while it lives), from /proc's parent links.
pub fn descendants(root: u32) -> Vec<u32> {
    let mut parent_of: HashMap<u32, u32> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![root];
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(ppid) = read_ppid(pid) {
            parent_of.insert(pid, ppid);
        }
    }
    let mut tree: HashSet<u32> = HashSet::new();
    if parent_of.contains_key(&root) {
        tree.insert(root);
    }
    // Walk up from every pid; whatever reaches `root` belongs to the tree.
    for &pid in parent_of.keys() {
        let mut p = pid;
        let mut path = Vec::new();
        for _ in 0..64 {
            if p == root || tree.contains(&p) {
                tree.extend(path.iter().copied());
                tree.insert(pid);
                break;
            }
            path.push(p);
            match parent_of.get(&p) {
                Some(&pp) if pp != 0 && pp != p => p = pp,
                _ => break,
            }
        }
    }
    let mut v: Vec<u32> = tree.into_iter().collect();
    v.sort_unstable();
    v
}

/// The parent pid from /proc/PID/stat (the command name may hold spaces and parentheses).
fn read_ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.get(stat.rfind(')')? + 2..)?;
    after.split_whitespace().nth(1)?.parse().ok()
}

/// When a process started (field 22 of /proc/PID/stat, in clock ticks since boot): with the pid it
/// names one process, even after the pid is reused.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.get(stat.rfind(')')? + 2..)?;
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Resident bytes of one process (VmRSS), 0 if it is gone.
pub fn rss_bytes(pid: u32) -> u64 {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Host memory the machine can still give (MemAvailable), for "was host RAM the limit?".
pub fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// The host's memory (MemTotal).
pub fn mem_total() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// The tree of `root`, plus processes that were reparented to us after `root`'s parent died (we
/// are their subreaper): every descendant of this process, which only runs the watched program.
pub fn descendants_of_us(root: u32) -> Vec<u32> {
    let mut v = descendants(std::process::id());
    v.retain(|&p| p != std::process::id());
    if v.is_empty() {
        v = descendants(root);
    }
    v
}

/// A process's command name (`/proc/PID/comm`), or `?`.
pub fn name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The inode of the pipe behind a file descriptor of ours (`None` when it is not one).
pub fn pipe_inode(fd: std::os::fd::RawFd) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    inode_of(&link.to_string_lossy())
}

fn inode_of(link: &str) -> Option<u64> {
    link.strip_prefix("pipe:[")?.strip_suffix(']')?.parse().ok()
}

/// Whether `pid` holds one of `pipes` (by inode) open.
pub fn holds_pipe(pid: u32, pipes: &[u64]) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .ok()
            .and_then(|l| inode_of(&l.to_string_lossy()))
            .is_some_and(|i| pipes.contains(&i))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_grandchild_and_its_memory() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & sleep 5; wait"])
            .spawn()
            .expect("sh runs");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let tree = descendants(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(tree.len() >= 3, "sh and two sleeps: {tree:?}");
        assert!(rss_bytes(std::process::id()) > 0);
        assert!(mem_available().is_some());
    }

    #[test]
    fn a_pipe_link_names_its_inode() {
        assert_eq!(super::inode_of("pipe:[123456]"), Some(123456));
        assert_eq!(super::inode_of("/dev/null"), None);
        assert_eq!(super::inode_of("socket:[5]"), None);
    }
}
