//! Hostile input to the command line, through the real binary: a GPU that is not there, a
//! `--python` that cannot work, an output path that cannot be written, a size without its unit,
//! and the card names people type. Each is refused in one line with exit 2 before any work, or
//! (a probe child that dies or hangs while starting) said as what happened.

mod util;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use util::{llm_oom, temp, Run};

fn fixture() -> String {
    format!("{}/tests/fixtures/tiny-llama", env!("CARGO_MANIFEST_DIR"))
}

fn diagnose(home: &Path, args: &[&str]) -> (Run, Duration) {
    let started = Instant::now();
    let r: Run = llm_oom(home)
        .args(["diagnose", "--model", &fixture()])
        .args(args)
        .output()
        .expect("the binary runs")
        .into();
    (r, started.elapsed())
}

/// The one line llm-oom printed on stderr (the test fails when there are more).
fn one_line(r: &Run) -> &str {
    let err = r.stderr.trim();
    assert_eq!(err.lines().count(), 1, "not one line:\n{err}");
    err
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

fn has_python3() -> bool {
    std::process::Command::new("python3")
        .args(["-c", "import sys"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn a_gpu_that_is_not_there_is_refused_before_any_work() {
    let home = temp();
    match llm_oom::meter::gpu::count() {
        // This machine has no GPU (CI): every CUDA spelling is refused, not run on the host's RAM.
        Err(_) | Ok(0) => {
            for device in ["cuda", "gpu", "cuda:7", "cuda:99", "cuda:0,cuda:1"] {
                let (r, took) = diagnose(home.path(), &["--device", device]);
                assert_eq!(r.code, 2, "{device}: {}{}", r.stdout, r.stderr);
                let line = one_line(&r);
                assert!(line.contains("no CUDA GPU found"), "{device}: {line}");
                assert!(line.contains("NVML"), "{line}");
                assert!(!r.stdout.contains("NO OOM"), "{}", r.stdout);
                assert!(took < Duration::from_secs(10), "{device}: {took:?}");
            }
        }
        // A GPU machine: an index past its GPUs names how many there are.
        Ok(n) => {
            let past = format!("cuda:{}", n + 7);
            let (r, _) = diagnose(home.path(), &["--device", &past]);
            assert_eq!(r.code, 2, "{}", r.stderr);
            let line = one_line(&r);
            assert!(line.contains(&format!("has {n} GPU")), "{line}");
        }
    }
}

#[test]
fn a_python_that_cannot_work_is_refused_first() {
    let home = temp();
    for (python, says) in [
        ("/bin/false", "is not a working Python"),
        ("/nonexistent/python3", "does not exist"),
        ("/", "is a folder"),
    ] {
        let (r, took) = diagnose(home.path(), &["--device", "cpu", "--python", python]);
        assert_eq!(r.code, 2, "{python}: {}", r.stderr);
        let line = one_line(&r);
        assert!(line.contains(says), "{python}: {line}");
        assert!(!line.contains("did not greet"), "{line}");
        assert!(took < Duration::from_secs(10), "{python}: {took:?}");
    }
    // One that hangs is stopped by the short sanity run, not after the probe's 180 s.
    let hangs = script(home.path(), "hangs", "exec sleep 600");
    let (r, took) = diagnose(
        home.path(),
        &[
            "--device",
            "cpu",
            "--python",
            hangs.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        one_line(&r).contains("did not run `import sys` within"),
        "{}",
        r.stderr
    );
    assert!(took < Duration::from_secs(30), "{took:?}");
}

#[test]
fn a_probe_that_dies_or_hangs_while_starting_is_said_as_such() {
    if !has_python3() {
        eprintln!("no python3 on PATH: the interpreter stand-ins need it for their sanity run");
        return;
    }
    let home = temp();
    // Runs `-c` (the sanity run) as python3 does; the probe script itself fails or hangs.
    let dies = script(
        home.path(),
        "dies",
        "if [ \"$1\" = \"-c\" ]; then exec python3 \"$@\"; fi\n\
         echo 'Traceback (most recent call last):' >&2\n\
         echo 'ImportError: no torch in this interpreter' >&2\nexit 7",
    );
    let (r, took) = diagnose(
        home.path(),
        &["--device", "cpu", "--python", dies.to_str().expect("utf-8")],
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "exited with code 7 before greeting: ImportError: no torch in this interpreter"
        ),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("did not greet"), "{}", r.stderr);
    assert!(took < Duration::from_secs(20), "{took:?}");

    let hangs = script(
        home.path(),
        "hangs",
        "if [ \"$1\" = \"-c\" ]; then exec python3 \"$@\"; fi\nexec sleep 600",
    );
    let (r, took) = diagnose(
        home.path(),
        &[
            "--device",
            "cpu",
            "--stage-timeout",
            "2",
            "--python",
            hangs.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    // At least 30 s for the start (a cold import of torch), not the 180 s it gets otherwise.
    assert!(
        r.stderr.contains("did not greet within 30 s"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("--stage-timeout 2 bounds the start"),
        "{}",
        r.stderr
    );
    assert!(took < Duration::from_secs(60), "{took:?}");
}

#[test]
fn an_output_path_that_cannot_be_written_is_refused_before_the_probe() {
    let home = temp();
    let folder = home.path().display().to_string();
    for path in ["/nonexistent/x.svg", folder.as_str()] {
        let (r, took) = diagnose(
            home.path(),
            &["--device", "cpu", "--engine", "candle", "--svg", path],
        );
        assert_eq!(r.code, 2, "{path}: {}", r.stderr);
        let line = one_line(&r);
        assert!(
            line.contains("cannot write") && line.contains(path),
            "{line}"
        );
        assert!(!line.contains("cannot read"), "{line}");
        assert!(!line.contains("probing"), "{line}");
        assert!(took < Duration::from_secs(5), "{path}: {took:?}");
    }
}

#[test]
fn a_size_without_its_unit_is_refused_like_vram() {
    let home = temp();
    let plan = |extra: &[&str]| -> Run {
        llm_oom(home.path())
            .args([
                "plan",
                "--model",
                "llama-3.3-70b-instruct",
                "--vram",
                "24GiB",
            ])
            .args(extra)
            .output()
            .expect("runs")
            .into()
    };
    let r = plan(&["--host-ram", "64"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        one_line(&r).contains("--host-ram 64 has no unit; add a unit, e.g. 64GiB"),
        "{}",
        r.stderr
    );
    let r = plan(&["--host-ram", "64B"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(one_line(&r).contains("floor"), "{}", r.stderr);
    let r = plan(&["--host-ram", "64GiB"]);
    assert!(matches!(r.code, 0 | 1), "{}", r.stderr);
    // --vram says the same about a bare number.
    let r: Run = llm_oom(home.path())
        .args(["plan", "--vram", "24"])
        .output()
        .expect("runs")
        .into();
    assert_eq!(r.code, 2);
    assert!(
        one_line(&r).contains("add a unit: write 24GiB"),
        "{}",
        r.stderr
    );
}

#[test]
fn the_card_names_people_type_are_cards() {
    let home = temp();
    let plan = |vram: &str| -> Run {
        llm_oom(home.path())
            .args([
                "plan",
                "--model",
                "qwen2.5-0.5b-instruct",
                "--json",
                "--vram",
                vram,
            ])
            .output()
            .expect("runs")
            .into()
    };
    for (vram, mib) in [
        ("rtx3060", "12,288 MiB"),
        ("rtx3070", "8,192 MiB"),
        ("rtx4090-laptop", "16,376 MiB"),
        ("RTX 4060 Laptop GPU", "8,188 MiB"),
        ("mi300x", "196,592 MiB"),
        ("NVIDIA GeForce RTX 4090", "24,564 MiB"),
    ] {
        let r = plan(vram);
        assert!(matches!(r.code, 0 | 1), "{vram}: {}", r.stderr);
        assert!(r.stdout.contains(mib), "{vram}: no {mib} in\n{}", r.stdout);
    }
    let r = plan("rtx9090");
    assert_eq!(r.code, 2, "{}", r.stdout);
    let line = one_line(&r);
    assert!(line.contains("not a card llm-oom knows"), "{line}");
    assert!(
        line.contains("close matches") && line.contains("rtx4090"),
        "{line}"
    );
}
