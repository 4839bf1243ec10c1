//! The stream readers against hostile input, through the real binary: `explain` on binary data
//! and `/dev/zero`, a corrupt GGUF under `RUST_BACKTRACE=1`, MPS's binary "GB", a large
//! allocator snapshot (bounded memory) and one with no OOM in it, and `watch` around a program
//! that leaves a process holding its output.

mod util;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use util::{json, llm_oom, run, temp};

#[test]
fn binary_input_is_refused_at_the_first_look() {
    let home = temp();
    let t = Instant::now();
    let r = run(home.path(), &["explain", "/dev/zero"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        r.stderr.trim(),
        "llm-oom: /dev/zero is not a text log (binary data: 65536 NUL bytes in the first 64 KiB); paste the program's output"
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());

    // 5 MB of NUL bytes, as a file and on stdin.
    let zeros = home.path().join("zeros.log");
    std::fs::write(&zeros, vec![0u8; 5_000_000]).unwrap();
    let r = run(home.path(), &["explain", zeros.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("is not a text log (binary data: 65536 NUL bytes in the first 64 KiB); paste the program's output"), "{}", r.stderr);
    let r: util::Run = llm_oom(home.path())
        .args(["explain", "-"])
        .stdin(std::fs::File::open(&zeros).unwrap())
        .output()
        .unwrap()
        .into();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .starts_with("llm-oom: standard input is not a text log"),
        "{}",
        r.stderr
    );

    // A UTF-16 log (NULs in every other byte) is still a log.
    let utf16: Vec<u8> = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    let wide = home.path().join("utf16.log");
    std::fs::write(&wide, utf16).unwrap();
    let r = run(home.path(), &["explain", wide.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
}

#[test]
fn a_corrupt_gguf_is_one_line_under_rust_backtrace() {
    let home = temp();
    let file = home.path().join("x.gguf");
    std::fs::write(&file, b"GGUF\x09\x00\x00\x00garbagegarbagegarbage").unwrap();
    let r: util::Run = llm_oom(home.path())
        .env("RUST_BACKTRACE", "1")
        .args(["plan", "-m", file.to_str().unwrap()])
        .output()
        .unwrap()
        .into();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("is not a readable GGUF file (gguf: unsupported magic/version"),
        "{}",
        r.stderr
    );
}

#[test]
fn mps_gb_is_a_gibibyte() {
    let home = temp();
    let log = util::write(
        &home.path().join("mps.log"),
        "RuntimeError: MPS backend out of memory (MPS allocated: 1.00 GB, other allocations: 512.00 MB, max allowed: 9.07 GB). Tried to allocate 56.25 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may cause system failure).\n",
    );
    let r = run(home.path(), &["explain", log.to_str().unwrap(), "--json"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let v = json(&r.stdout);
    let e = &v["findings"][0]["event"];
    assert_eq!(e["backend"], "mps");
    assert_eq!(e["allocated_by_pytorch"], 1u64 << 30);
    assert_eq!(e["this_process"], (1u64 << 30) + (512u64 << 20));
    assert_eq!(e["requested"], 58_982_400u64);
}

/// A snapshot pickle from python3 (no torch needed): `segments` segments of two blocks each,
/// one shared frame list, a trace with an `oom` entry or without one.
fn snapshot(dir: &Path, name: &str, segments: usize, oom: bool) -> std::path::PathBuf {
    let path = dir.join(name);
    let script = r#"
import pickle, sys
path, n, oom = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
frames = [{"filename": "model.py", "line": 10, "name": "forward"}]
segs = [{"device": 0, "address": i * 2097152, "total_size": 2097152, "allocated_size": 1048576,
         "active_size": 1048576, "requested_size": 1048576, "stream": 0, "segment_type": "large",
         "is_expandable": False,
         "blocks": [{"address": i * 2097152, "size": 1048576, "requested_size": 1048576,
                     "state": "active_allocated", "frames": frames},
                    {"address": i * 2097152 + 1048576, "size": 1048576, "requested_size": 0,
                     "state": "inactive", "frames": []}]} for i in range(n)]
trace = [{"action": "alloc", "addr": 0, "size": 1048576, "stream": 0, "time_us": 1, "frames": frames}]
if oom:
    trace.append({"action": "oom", "addr": 0, "size": 1 << 30, "stream": 0, "time_us": 2,
                  "device_free": 1 << 20, "frames": frames})
with open(path, "wb") as f:
    pickle.dump({"segments": segs, "device_traces": [trace], "allocator_settings": {}}, f, protocol=4)
"#;
    let ok = Command::new("python3")
        .args(["-c", script, path.to_str().unwrap(), &segments.to_string()])
        .arg(if oom { "1" } else { "0" })
        .status()
        .expect("python3 runs");
    assert!(ok.success());
    path
}

#[test]
fn a_snapshot_without_an_oom_is_no_oom_with_its_breakdown() {
    let home = temp();
    let none = snapshot(home.path(), "none.pickle", 3, false);
    let r = run(home.path(), &["explain", none.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .starts_with("✓ NO OOM — no out-of-memory in this snapshot: its trace of 1 allocator events has no `oom` entry"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("model.py:10 forward"), "{}", r.stdout);
    let oom = snapshot(home.path(), "oom.pickle", 3, true);
    let r = run(home.path(), &["explain", oom.to_str().unwrap(), "--json"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(json(&r.stdout)["record"]["oom"]["request"], 1u64 << 30);
}

#[test]
fn a_large_snapshot_is_read_in_bounded_memory() {
    let home = temp();
    let big = snapshot(home.path(), "big.pickle", 50_000, false);
    let size = std::fs::metadata(&big).unwrap().len();
    // The peak resident set of the binary alone: python3 waits for it and reports its children's.
    let measure = r#"
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"#;
    let out = Command::new("python3")
        .args(["-c", measure, env!("CARGO_BIN_EXE_llm-oom")])
        .args(["explain", big.to_str().unwrap()])
        .env("NO_COLOR", "1")
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace();
    let code: i32 = it
        .next()
        .and_then(|c| c.parse().ok())
        .expect("an exit code");
    let peak: u64 = it.next().and_then(|c| c.parse().ok()).expect("a peak");
    assert_eq!(code, 0, "{text}");
    // Through one Value tree it took about 42 times the file; typed item by item, about 12.
    assert!(
        peak < 20 * size,
        "peak {} MiB for a {} MiB snapshot",
        peak >> 20,
        size >> 20
    );
}

#[test]
fn watch_names_what_the_program_left_holding_its_output() {
    let home = temp();
    let report = home.path().join("report.json");
    let t = Instant::now();
    let r = run(
        home.path(),
        &[
            "watch",
            "--json",
            "-o",
            report.to_str().unwrap(),
            "--",
            "bash",
            "-c",
            "setsid sleep 2 & echo done",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(t.elapsed() >= Duration::from_millis(1900));
    let said = r
        .stderr
        .lines()
        .find(|l| l.starts_with("llm-oom: the program exited (code 0) after 0."))
        .unwrap_or_else(|| panic!("no line about the leftover: {}", r.stderr));
    assert!(
        said.contains("; waiting for 1 leftover process (pid ")
            && said.contains(", sleep) that holds its output — Ctrl-C"),
        "{said}"
    );
    let v = json(&std::fs::read_to_string(&report).unwrap());
    assert!(v["program_exit_ms"].as_u64().unwrap() < 1500, "{v}");
    assert!(v["duration_ms"].as_u64().unwrap() >= 1900, "{v}");
    assert_eq!(v["leftover"][0]["name"], "sleep");
    assert_eq!(v["leftover"][0]["holds_output"], true);
    assert!(v["verdict"]["summary"]
        .as_str()
        .unwrap()
        .contains("exited cleanly after 0."));

    let r = run(
        home.path(),
        &["watch", "--", "bash", "-c", "setsid sleep 1 & echo done"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The report goes where the program's output does not (stderr when stdout is piped).
    let both = format!("{}{}", r.stdout, r.stderr);
    assert!(
        both.contains("llm-oom watch `bash -c 'setsid sleep 1 & echo done'` · 0."),
        "{both}"
    );
    assert!(
        both.contains("Left running when the program exited: pid "),
        "{both}"
    );
}
