//! `watch` under faults, with real process trees: an output path that cannot be written, a
//! report that cannot be written at the end, `kill -9` of watch, a program that ignores SIGTERM
//! and Ctrl-C, a grandchild killed by the OOM killer inside a small memory cgroup, an OOM followed
//! by megabytes of output, and a host-memory curve without NVML.

mod util;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use util::{llm_oom, run, temp};

fn alive(pid: u32) -> bool {
    // A zombie is not running: only a live state counts.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(") ")
                .map(|(_, r)| !r.starts_with('Z') && !r.starts_with('X'))
        })
        .unwrap_or(false)
}

/// Start `watch -- sh -c <script>` where the script prints its pids as `pid N` lines; return
/// watch and the first `n` pids.
fn start_tree(home: &Path, extra: &[&str], script: &str, n: usize) -> (Child, Vec<u32>) {
    let mut args = vec!["watch"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    let mut w = llm_oom(home)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(w.stdout.take().unwrap());
    let mut pids = Vec::new();
    while pids.len() < n {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the tree printed its pids"
        );
        if let Some(p) = line.trim().strip_prefix("pid ") {
            pids.push(p.parse().unwrap());
        }
    }
    // Keep draining so the program never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (w, pids)
}

fn wait_gone(pids: &[u32], within: Duration) -> Vec<u32> {
    let until = Instant::now() + within;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() || Instant::now() > until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a pid this test spawned, with a valid signal number.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// A shell, its background child and a grandchild, each printing its pid and sleeping.
const TREE: &str =
    "echo pid $$; sh -c 'echo pid $$; sleep 300 & echo pid $!; wait' & sleep 300; wait";

#[test]
fn an_unwritable_output_path_is_refused_before_the_program_runs() {
    let home = temp();
    let marker = home.path().join("ran");
    let script = format!("touch {}; exit 5", marker.display());
    for bad in ["missing-dir/report.md", "/proc/version/x.json"] {
        let path = home.path().join(bad);
        let r = run(
            home.path(),
            &[
                "watch",
                "-o",
                path.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(r.stderr.contains("nothing was run"), "{}", r.stderr);
        assert!(!marker.exists(), "the program did not run");
        let r = run(
            home.path(),
            &[
                "watch",
                "--svg",
                path.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(!marker.exists());
    }
}

#[test]
fn a_report_that_cannot_be_written_at_the_end_goes_to_stderr_and_keeps_the_exit_code() {
    let home = temp();
    // /dev/full opens, then every write fails (ENOSPC).
    let r = run(
        home.path(),
        &[
            "watch",
            "--json",
            "-o",
            "/dev/full",
            "--",
            "sh",
            "-c",
            "echo hi; exit 5",
        ],
    );
    assert_eq!(r.code, 5, "the program's own code: {}", r.stderr);
    assert_eq!(r.stdout, "hi\n");
    assert!(
        r.stderr.contains("cannot write the report to /dev/full"),
        "{}",
        r.stderr
    );
    let json = &r.stderr[r.stderr.find('{').unwrap()..];
    let j: Value = serde_json::from_str(json).unwrap();
    assert_eq!(j["exit"]["code"], 5);
}

#[test]
fn kill_9_of_watch_leaves_no_process_of_the_tree() {
    let home = temp();
    let (mut w, pids) = start_tree(home.path(), &[], TREE, 3);
    assert!(pids.iter().all(|&p| alive(p)), "{pids:?}");
    signal(w.id(), libc::SIGKILL);
    let _ = w.wait();
    let left = wait_gone(&pids, Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "left running after kill -9 of watch: {left:?}"
    );
}

#[test]
fn a_program_that_ignores_sigterm_is_killed_after_the_printed_grace() {
    let home = temp();
    let script = format!("trap '' INT TERM HUP; {TREE}");
    let (mut w, pids) = start_tree(home.path(), &["--json"], &script, 3);
    let t = Instant::now();
    signal(w.id(), libc::SIGTERM);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut w.stderr.take().unwrap(), &mut err).unwrap();
    let status = w.wait().unwrap();
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    assert!(err.contains("gets SIGKILL in 5 s unless it exits"), "{err}");
    assert_eq!(status.code(), Some(137), "{err}");
    assert!(wait_gone(&pids, Duration::from_secs(2)).is_empty());
    let j: Value = serde_json::from_str(&err[err.find("\n{").unwrap()..]).unwrap();
    assert_eq!(j["killed_by_watch"], true);
    assert_eq!(
        j["verdict"]["cause"], "none",
        "not an OOM: {}",
        j["verdict"]
    );
}

#[test]
fn a_second_ctrl_c_escalates_to_sigkill() {
    let home = temp();
    let script = format!("trap '' INT TERM; {TREE}");
    let (mut w, pids) = start_tree(home.path(), &[], &script, 3);
    signal(w.id(), libc::SIGINT);
    std::thread::sleep(Duration::from_millis(300));
    assert!(pids.iter().all(|&p| alive(p)), "one Ctrl-C only warns");
    signal(w.id(), libc::SIGINT);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut w.stderr.take().unwrap(), &mut err).unwrap();
    let status = w.wait().unwrap();
    assert!(err.contains("press Ctrl-C again"), "{err}");
    assert!(err.contains("SIGKILL in 2 s"), "{err}");
    assert_eq!(status.code(), Some(137));
    assert!(wait_gone(&pids, Duration::from_secs(2)).is_empty());
}

/// A memory cgroup of 64 MiB under /sys/fs/cgroup/memory (v1) or /sys/fs/cgroup (v2), if this
/// machine lets us make one.
fn small_cgroup(name: &str) -> Option<(std::path::PathBuf, &'static str)> {
    for (root, limit) in [
        ("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
        ("/sys/fs/cgroup", "memory.max"),
    ] {
        let dir = Path::new(root).join(name);
        if std::fs::create_dir(&dir).is_ok() || dir.is_dir() {
            if std::fs::write(dir.join(limit), (64u64 << 20).to_string()).is_ok() {
                return Some((dir, "cgroup.procs"));
            }
            let _ = std::fs::remove_dir(&dir);
        }
    }
    None
}

#[test]
fn a_grandchild_killed_by_the_oom_killer_behind_a_shell_is_found() {
    let name = format!("llm-oom-test-{}", std::process::id());
    let Some((dir, procs)) = small_cgroup(&name) else {
        eprintln!("SKIPPED: this machine does not let the test create a memory cgroup");
        return;
    };
    let home = temp();
    let report = home.path().join("r.json");
    // The shell moves itself into the cgroup; its grandchild allocates 512 MiB and is killed;
    // the wrapper survives and exits 0.
    let script = format!(
        "echo $$ > {}/{procs}; sh -c 'sleep 0.3; python3 -c \"a = bytearray(512 << 20)\"'; echo survived",
        dir.display()
    );
    let r = run(
        home.path(),
        &[
            "watch",
            "--json",
            "--fail-on-oom",
            "-o",
            report.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    let _ = std::fs::remove_dir(&dir);
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(r.stdout.contains("survived"));
    assert_eq!(j["verdict"]["cause"], "host_memory", "{}", j["verdict"]);
    assert_eq!(r.code, 1, "--fail-on-oom: {}", r.stderr);
    let kills = j["oom_kills"].as_array().unwrap();
    assert!(!kills.is_empty(), "{j}");
    if j["kernel_log_read"] == true {
        assert_eq!(kills[0]["process"], "python3");
    }
}

#[test]
fn fail_on_oom_holds_when_megabytes_of_output_follow_the_oom_line() {
    let home = temp();
    let report = home.path().join("r.json");
    // 2 MB, then the OOM, then 9 MB more: the line is neither in the kept head nor the tail.
    let py = "import sys\nfor _ in range(2000): print('x' * 999)\nprint('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.00 GiB is free.', flush=True)\nfor _ in range(9000): print('y' * 999)";
    let r = run(
        home.path(),
        &[
            "watch",
            "--json",
            "--fail-on-oom",
            "-o",
            report.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            py,
        ],
    );
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(j["output_bytes"].as_u64().unwrap() > 10_000_000);
    assert_ne!(j["verdict"]["cause"], "none", "{}", j["verdict"]);
    assert_eq!(r.code, 1);
}

#[test]
fn without_nvml_the_host_curve_does_not_name_a_gpu_component() {
    // A fast climb of host memory, then a bare CUDA OOM line that does not say what filled the
    // card: the host curve alone must not call it "weights".
    let (_, _, j) = {
        let home = temp();
        let report = home.path().join("r.json");
        let py = "import time\nx = b'w' * (300 << 20)\ntime.sleep(0.3)\nprint('RuntimeError: CUDA out of memory', flush=True)";
        let r = run(
            home.path(),
            &[
                "watch",
                "--json",
                "-o",
                report.to_str().unwrap(),
                "--",
                "python3",
                "-c",
                py,
            ],
        );
        let j: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        (r.code, r.stdout, j)
    };
    if j["peak_gpu_bytes"].is_null() {
        let cause = j["verdict"]["cause"].as_str().unwrap();
        assert!(
            !["weights", "kv_cache", "activations"].contains(&cause),
            "{}",
            j["verdict"]
        );
    }
}
