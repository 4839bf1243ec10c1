//! The driver's compilation of candle's kernels, done ahead of a card's first run, in processes
//! side by side.
//!
//! candle ships its CUDA kernels as PTX. The driver compiles a module for the card the first time
//! it is loaded and keeps the result in its compute cache (`~/.nv/ComputeCache`). candle loads each
//! module when one of its kernels is first called, one after another: on a fresh H200 machine that
//! was 18.1–19.5 s of the first `diagnose --engine candle`, against 0.3 s once the cache held them
//! (docs/accuracy.md). Loading the modules on threads of one process did not help (26.6 s for ten):
//! the driver compiles one module at a time within a process. Separate processes compile side by
//! side.
//!
//! [`compile_ahead_on`] runs before the probe opens its own CUDA context. Where this card, driver
//! and build have no marker yet, it starts helper processes (`llm-oom __compile-kernels`), each
//! loading its share of the modules in a context of its own (the driver compiles and keeps them),
//! waits for them, and leaves the marker. candle's own loads then read the driver's cache. The
//! helpers' contexts are gone before the probe measures anything; they are only started on a card
//! no other process holds memory on, each with room for its context beside a reserve. Nothing is
//! done with the driver's cache off (`CUDA_CACHE_DISABLE=1`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The hidden subcommand a helper process runs.
pub const HELPER_COMMAND: &str = "__compile-kernels";

/// GPU memory set aside for each helper's CUDA context, and kept free beside them all.
const CONTEXT_ALLOWANCE: u64 = 1 << 30;
const RESERVE: u64 = 2 << 30;
/// A helper that has not finished by then is stopped; candle compiles what it left, as before.
/// The slowest module took seconds; the probe's parent waits 180 s for the child's hello.
const HELPER_TIMEOUT: Duration = Duration::from_secs(60);

/// One kernel module: its name (what a helper is told) and its PTX.
#[derive(Debug, Clone, Copy)]
pub struct Module {
    pub name: &'static str,
    pub ptx: &'static str,
}

/// What [`compile_ahead_on`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Compiled {
    pub modules: usize,
    pub processes: usize,
    pub elapsed: Duration,
    /// The module that took longest in its helper, and its seconds (what sets the pace).
    pub slowest: Option<(String, f64)>,
}

/// The card the modules are compiled for, as NVML names it, the room it has now, and how many
/// other processes hold memory on it.
#[derive(Debug, Clone)]
pub struct Card {
    pub name: String,
    pub driver: String,
    pub free_bytes: u64,
    pub other_processes: usize,
}

/// Whether the driver keeps what it compiles (`CUDA_CACHE_DISABLE=1` turns its cache off).
pub fn cache_on(disable: Option<&std::ffi::OsStr>) -> bool {
    disable.is_none_or(|v| v.to_str().map(str::trim) != Some("1"))
}

/// The modules a decoder calls (with `quantized`, the quantized matmuls' too) and the runtime's
/// own; none without the `cuda` feature.
pub fn modules(quantized: bool) -> Vec<Module> {
    imp::modules(quantized)
}

/// How many helpers the card has room for: one context allowance each, beside a reserve; none
/// where another process holds memory on it (what it may still need is not the probe's to take:
/// candle then compiles as it loads, as without the helpers).
pub fn helpers_with_room(free_bytes: u64, other_processes: usize, wanted: usize) -> usize {
    if other_processes > 0 {
        return 0;
    }
    let room = free_bytes.saturating_sub(RESERVE) / CONTEXT_ALLOWANCE;
    usize::try_from(room).unwrap_or(usize::MAX).min(wanted)
}

/// `sizes` dealt into at most `workers` shares, the largest first onto the lightest share, so the
/// slowest share is as short as it can be made (compile time grows with the PTX's size). Each share
/// lists indexes into `sizes`; empty shares are dropped.
pub fn shares(sizes: &[usize], workers: usize) -> Vec<Vec<usize>> {
    let workers = workers.max(1).min(sizes.len().max(1));
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
    let mut out: Vec<(usize, Vec<usize>)> = vec![(0, Vec::new()); workers];
    for i in order {
        if let Some(lightest) = out.iter_mut().min_by_key(|(load, _)| *load) {
            lightest.0 = lightest.0.saturating_add(sizes[i]);
            lightest.1.push(i);
        }
    }
    out.into_iter()
        .map(|(_, share)| share)
        .filter(|s| !s.is_empty())
        .collect()
}

/// The marker's name: the card, its driver, where the driver keeps its cache, and every module's
/// PTX. A new build, driver or card kind gets a new marker (and the helpers once more).
pub fn marker_name(card: &str, driver: &str, cache_path: Option<&str>, mods: &[Module]) -> String {
    // FNV-1a, 64 bits: stable across builds of this tool, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    };
    feed(card.as_bytes());
    feed(driver.as_bytes());
    feed(cache_path.unwrap_or("").as_bytes());
    for m in mods {
        feed(m.name.as_bytes());
        feed(m.ptx.as_bytes());
    }
    format!("{h:016x}")
}

/// `$XDG_CACHE_HOME/llm-oom/cuda-kernels` (else `~/.cache/...`), made 0700; `None` unless this user
/// owns it and no one else may write there.
fn marker_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let dir = base.join("llm-oom").join("cuda-kernels");
    private_dir(&dir).ok()?;
    Some(dir)
}

fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::metadata(dir)?;
    // SAFETY: getuid has no failure mode.
    let me = unsafe { libc::getuid() };
    if meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::other("not private to this user"));
    }
    Ok(())
}

/// Before this process opens its CUDA context on CUDA device `gpu`: where this card (as NVML sees
/// it now), driver and build have no marker, compile the modules in helper processes (this
/// executable's `__compile-kernels`) side by side, wait for them, and leave the marker. `None` when
/// nothing was started: the cache is off, this build has no CUDA, NVML cannot read the card, the
/// marker is there, or the card has no room for a helper.
pub fn compile_ahead_on(gpu: u32, quantized: bool) -> Option<Compiled> {
    if !cache_on(std::env::var_os("CUDA_CACHE_DISABLE").as_deref()) {
        return None;
    }
    let mods = modules(quantized);
    if mods.is_empty() {
        return None;
    }
    let info = crate::meter::gpu::read_gpu(gpu).ok()?;
    let exe = std::env::current_exe().ok()?;
    let card = Card {
        name: info.name,
        driver: info.driver,
        free_bytes: info.free_bytes,
        other_processes: info.processes.len(),
    };
    let cache_path = std::env::var("CUDA_CACHE_PATH").ok();
    let marker = marker_dir()?.join(marker_name(
        &card.name,
        &card.driver,
        cache_path.as_deref(),
        &mods,
    ));
    run_helpers(&exe, gpu, &card, &mods, &marker, HELPER_TIMEOUT)
}

/// The helpers for `mods`, unless `marker` is there: started side by side, waited for at most
/// `timeout` in all (then killed), and `marker` left when every one succeeded.
fn run_helpers(
    exe: &Path,
    gpu: u32,
    card: &Card,
    mods: &[Module],
    marker: &Path,
    timeout: Duration,
) -> Option<Compiled> {
    if marker.exists() {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let workers = helpers_with_room(card.free_bytes, card.other_processes, cores.min(mods.len()));
    if workers == 0 {
        return None;
    }
    let sizes: Vec<usize> = mods.iter().map(|m| m.ptx.len()).collect();
    let started = Instant::now();
    let mut helpers = Vec::new();
    for share in shares(&sizes, workers) {
        let names: Vec<&str> = share.iter().map(|&i| mods[i].name).collect();
        let child = Command::new(exe)
            .arg(HELPER_COMMAND)
            .arg("--gpu")
            .arg(gpu.to_string())
            .args(&names)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        match child {
            Ok(c) => helpers.push(c),
            Err(e) => tracing::debug!("jit: could not start a helper: {e}"),
        }
    }
    let processes = helpers.len();
    let mut all_ok = processes > 0;
    let mut printed = String::new();
    for mut h in helpers {
        let ok = loop {
            match h.try_wait() {
                Ok(Some(status)) => break status.success(),
                Ok(None) if started.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = h.kill();
                    let _ = h.wait();
                    break false;
                }
            }
        };
        all_ok &= ok;
        // A few short lines, written before it exited by itself: read whole. A killed one's are
        // not read (whatever it left behind could hold the pipe open).
        if let (true, Some(mut out)) = (ok, h.stdout.take()) {
            use std::io::Read;
            let _ = out.read_to_string(&mut printed);
        }
    }
    if all_ok {
        if let Err(e) = std::fs::write(marker, b"") {
            tracing::debug!("jit: could not leave the marker {}: {e}", marker.display());
        }
    }
    Some(Compiled {
        modules: mods.len(),
        processes,
        elapsed: started.elapsed(),
        slowest: slowest(&printed),
    })
}

/// A note for the report when the helpers took a noticeable time.
pub fn note(c: &Compiled) -> Option<String> {
    (c.elapsed >= Duration::from_secs(1)).then(|| {
        let pace = c.slowest.as_ref().map_or(String::new(), |(m, s)| {
            format!(" (the slowest module, {m}, {s:.1} s)")
        });
        format!(
            "the CUDA driver compiled candle's {} kernel modules for this card in {:.1} s, in {} processes side by side{pace}; it keeps them, so later runs skip this",
            c.modules,
            c.elapsed.as_secs_f64(),
            c.processes
        )
    })
}

/// A helper's work: open a context on `gpu` and load each named module, so the driver compiles
/// and keeps it. `Err` names the first module that failed, or an unknown name.
pub fn compile_modules(gpu: u32, names: &[String]) -> Result<Vec<(String, f64)>, String> {
    let all = modules(true);
    if all.is_empty() {
        return Err(
            "this llm-oom was built without the `cuda` feature: no kernels to compile".into(),
        );
    }
    let chosen = names
        .iter()
        .map(|n| {
            all.iter()
                .find(|m| m.name == n.as_str())
                .copied()
                .ok_or_else(|| format!("no kernel module named {n:?}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // A helper never outlives the probe that started it (its context holds GPU memory).
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_PDEATHSIG only sets a signal number for this process.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    imp::load(gpu, &chosen)
}

/// What a helper prints for the probe: one `module seconds` line per module it loaded.
pub fn report_line(module: &str, seconds: f64) -> String {
    format!("{module} {seconds:.3}")
}

/// The slowest module of the helpers' lines ([`report_line`]), if any line reads.
pub fn slowest(lines: &str) -> Option<(String, f64)> {
    lines
        .lines()
        .filter_map(|l| {
            let (name, secs) = l.trim().rsplit_once(' ')?;
            let secs: f64 = secs.parse().ok()?;
            (secs.is_finite() && !name.is_empty()).then(|| (name.to_string(), secs))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

#[cfg(feature = "cuda")]
mod imp {
    use super::Module;
    use candle_core::cuda_backend::cudarc::driver::CudaContext;
    use candle_core::cuda_backend::cudarc::nvrtc::Ptx;
    use candle_core::cuda_backend::kernels;

    pub fn modules(quantized: bool) -> Vec<Module> {
        let mut out: Vec<Module> = [
            ("affine", &kernels::AFFINE),
            ("binary", &kernels::BINARY),
            ("cast", &kernels::CAST),
            ("fill", &kernels::FILL),
            ("indexing", &kernels::INDEXING),
            ("reduce", &kernels::REDUCE),
            ("ternary", &kernels::TERNARY),
            ("unary", &kernels::UNARY),
        ]
        .into_iter()
        .map(|(name, m)| Module { name, ptx: m.ptx() })
        .collect();
        if quantized {
            out.push(Module {
                name: "quantized",
                ptx: kernels::QUANTIZED.ptx(),
            });
        }
        out.push(Module {
            name: "masked_softmax",
            ptx: crate::runtime::masked_softmax::PTX,
        });
        out
    }

    pub fn load(gpu: u32, mods: &[Module]) -> Result<Vec<(String, f64)>, String> {
        let ctx = CudaContext::new(gpu as usize)
            .map_err(|e| format!("cannot open CUDA device {gpu}: {e}"))?;
        let mut took = Vec::new();
        for m in mods {
            let t = std::time::Instant::now();
            ctx.load_module(Ptx::from_src(m.ptx))
                .map_err(|e| format!("the driver could not load {}: {e}", m.name))?;
            took.push((m.name.to_string(), t.elapsed().as_secs_f64()));
        }
        Ok(took)
    }
}

#[cfg(not(feature = "cuda"))]
mod imp {
    use super::Module;

    pub fn modules(_quantized: bool) -> Vec<Module> {
        Vec::new()
    }

    pub fn load(_gpu: u32, _mods: &[Module]) -> Result<Vec<(String, f64)>, String> {
        Err("this llm-oom was built without the `cuda` feature".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn only_cuda_cache_disable_1_turns_the_cache_off() {
        assert!(cache_on(None));
        assert!(cache_on(Some(OsStr::new("0"))));
        assert!(cache_on(Some(OsStr::new(""))));
        assert!(!cache_on(Some(OsStr::new("1"))));
        assert!(!cache_on(Some(OsStr::new(" 1"))));
    }

    #[test]
    fn the_largest_modules_go_to_different_helpers() {
        // Sizes like candle's: two large modules, several small ones.
        let sizes = [30, 400, 60, 10, 120, 900, 20, 250];
        let s = shares(&sizes, 3);
        assert_eq!(s.len(), 3);
        let load = |share: &Vec<usize>| share.iter().map(|&i| sizes[i]).sum::<usize>();
        let loads: Vec<usize> = s.iter().map(load).collect();
        // The largest alone sets the pace; nothing is added to its share.
        assert_eq!(loads.iter().max(), Some(&900));
        assert_eq!(s.iter().find(|sh| sh.contains(&5)), Some(&vec![5]));
        // Every module is dealt exactly once.
        let mut all: Vec<usize> = s.concat();
        all.sort_unstable();
        assert_eq!(all, (0..sizes.len()).collect::<Vec<_>>());
    }

    #[test]
    fn no_more_shares_than_modules_or_workers() {
        assert_eq!(shares(&[5, 6], 16).len(), 2);
        assert_eq!(shares(&[5, 6, 7], 1), vec![vec![2, 1, 0]]);
        assert!(shares(&[], 4).is_empty());
        assert_eq!(shares(&[1, 2, 3], 0).len(), 1);
    }

    #[test]
    fn helpers_only_where_the_card_has_room_beside_a_reserve_and_no_one_else() {
        let gib = 1u64 << 30;
        assert_eq!(helpers_with_room(0, 0, 9), 0);
        assert_eq!(helpers_with_room(2 * gib, 0, 9), 0);
        assert_eq!(helpers_with_room(5 * gib + gib / 2, 0, 9), 3);
        assert_eq!(helpers_with_room(80 * gib, 0, 9), 9);
        // Another process on the card: nothing of what it may need is taken.
        assert_eq!(helpers_with_room(80 * gib, 1, 9), 0);
    }

    #[test]
    fn the_marker_changes_with_the_card_the_driver_the_cache_and_the_kernels() {
        let a = [Module {
            name: "unary",
            ptx: ".version 9.0",
        }];
        let b = [Module {
            name: "unary",
            ptx: ".version 9.0 ",
        }];
        let base = marker_name("NVIDIA H100 80GB HBM3", "580.159.04", None, &a);
        assert_eq!(base.len(), 16);
        assert_eq!(
            base,
            marker_name("NVIDIA H100 80GB HBM3", "580.159.04", None, &a)
        );
        for other in [
            marker_name("NVIDIA H200", "580.159.04", None, &a),
            marker_name("NVIDIA H100 80GB HBM3", "580.65.06", None, &a),
            marker_name("NVIDIA H100 80GB HBM3", "580.159.04", Some("/tmp/c"), &a),
            marker_name("NVIDIA H100 80GB HBM3", "580.159.04", None, &b),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn a_build_without_cuda_has_nothing_to_compile() {
        if cfg!(not(feature = "cuda")) {
            assert!(modules(true).is_empty());
            assert_eq!(compile_ahead_on(0, false), None);
        }
    }

    /// A stand-in for `llm-oom`: a shell script that writes the modules it was given to `log`,
    /// then sleeps `pause` seconds and exits `code`.
    fn fake_exe(dir: &Path, code: i32, pause: &str) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let log = dir.join("calls.log");
        let exe = dir.join("fake-llm-oom");
        let script = format!(
            "#!/bin/sh\n[ \"$1\" = {HELPER_COMMAND} ] && [ \"$2\" = --gpu ] || exit 9\nshift 3\necho \"$*\" >> '{}'\nfor m in \"$@\"; do echo \"$m ${{#m}}.5\"; done\nsleep {pause}\nexit {code}\n",
            log.display()
        );
        std::fs::write(&exe, script).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        (exe, log)
    }

    const MODS: [Module; 3] = [
        Module {
            name: "unary",
            ptx: "a long module, a long module, a long module",
        },
        Module {
            name: "fill",
            ptx: "short",
        },
        Module {
            name: "reduce",
            ptx: "a medium module",
        },
    ];

    fn roomy() -> Card {
        Card {
            name: "NVIDIA H100 80GB HBM3".into(),
            driver: "580.159.04".into(),
            free_bytes: 80 << 30,
            other_processes: 0,
        }
    }

    #[test]
    fn helpers_compile_every_module_once_then_the_marker_skips_them() {
        let dir = tempfile::tempdir().unwrap();
        let (exe, log) = fake_exe(dir.path(), 0, "0");
        let marker = dir.path().join("marker");
        let done = run_helpers(&exe, 0, &roomy(), &MODS, &marker, Duration::from_secs(30));
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let done = done.expect("helpers ran");
        assert_eq!(done.modules, 3);
        assert_eq!(done.processes, cores.min(3));
        let mut given: Vec<String> = std::fs::read_to_string(&log)
            .unwrap()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        given.sort();
        assert_eq!(given, ["fill", "reduce", "unary"]);
        assert!(marker.exists());
        // Each helper's `module seconds` lines are read back: the longest name took longest here.
        assert_eq!(done.slowest, Some(("reduce".to_string(), 6.5)));
        assert!(note(&Compiled {
            elapsed: Duration::from_secs(3),
            ..done
        })
        .is_some_and(|n| n.contains("the slowest module, reduce, 6.5 s")));
        // The marker is there: nothing is started again.
        std::fs::remove_file(&log).unwrap();
        assert_eq!(
            run_helpers(&exe, 0, &roomy(), &MODS, &marker, Duration::from_secs(30)),
            None
        );
        assert!(!log.exists());
    }

    #[test]
    fn a_failed_or_stuck_helper_leaves_no_marker_and_is_not_waited_for_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("marker");
        let (exe, _) = fake_exe(dir.path(), 1, "0");
        let failed = run_helpers(&exe, 0, &roomy(), &MODS, &marker, Duration::from_secs(30));
        assert!(failed.is_some() && !marker.exists());
        let (exe, _) = fake_exe(dir.path(), 0, "30");
        let t = Instant::now();
        let stuck = run_helpers(
            &exe,
            0,
            &roomy(),
            &MODS,
            &marker,
            Duration::from_millis(300),
        );
        assert!(stuck.is_some() && !marker.exists());
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }

    #[test]
    fn no_helper_starts_beside_another_process_or_without_room() {
        let dir = tempfile::tempdir().unwrap();
        let (exe, log) = fake_exe(dir.path(), 0, "0");
        let marker = dir.path().join("marker");
        let shared = Card {
            other_processes: 1,
            ..roomy()
        };
        let full = Card {
            free_bytes: 1 << 30,
            ..roomy()
        };
        for card in [shared, full] {
            assert_eq!(
                run_helpers(&exe, 0, &card, &MODS, &marker, Duration::from_secs(30)),
                None
            );
        }
        assert!(!log.exists() && !marker.exists());
    }

    #[test]
    fn the_slowest_of_the_helpers_lines_is_read_and_garbage_is_not() {
        let lines = format!(
            "{}\n{}\nnot a line\nnan nan\n",
            report_line("unary", 5.25),
            report_line("fill", 0.5)
        );
        assert_eq!(slowest(&lines), Some(("unary".to_string(), 5.25)));
        assert_eq!(slowest(""), None);
    }

    #[test]
    fn an_unknown_module_is_named() {
        let e = compile_modules(0, &["nope".to_string()]).unwrap_err();
        if cfg!(feature = "cuda") {
            assert!(e.contains("\"nope\""), "{e}");
        } else {
            assert!(e.contains("without the `cuda` feature"), "{e}");
        }
    }
}
