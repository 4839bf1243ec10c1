//! The JSON contract CI users parse: every command's `--json` on fixed inputs, compared with the
//! output recorded in `tests/fixtures/contract/` before the redesign of the command layer.
//!
//! The contract is "keep these names stable, add freely": every key and value recorded must be
//! there, unchanged; new keys may appear. Values that measure time, processes or this machine
//! (seconds, pids, the host's memory, the diagnose peaks of the CPU probe) are compared by kind
//! only. `LLM_OOM_BLESS=1 cargo test --test json_contract` records the files anew.

mod util;

use std::path::{Path, PathBuf};

use serde_json::Value;
use util::{run, temp, write};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Keys whose values depend on the moment or the machine: compared by JSON kind only.
const VOLATILE: &[&str] = &[
    "seconds",
    "warmup_seconds",
    "ttft_seconds",
    "tokens_per_second",
    "pid",
    "host_total_bytes",
    "host_available_bytes",
    "timeline",
    "children",
    "version",
];

/// In diagnose, what the CPU probe measures varies by a few bytes between runs: numbers there are
/// compared by kind, strings and keys exactly.
fn compare(path: &str, want: &Value, got: &Value, numbers_exact: bool, errs: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let p = format!("{path}.{k}");
                match g.get(k) {
                    None => errs.push(format!("{p}: missing")),
                    Some(gv) if VOLATILE.contains(&k.as_str()) => {
                        if kind_changed(wv, gv) {
                            errs.push(format!("{p}: kind changed"));
                        }
                    }
                    Some(gv) => compare(&p, wv, gv, numbers_exact, errs),
                }
            }
        }
        // A measured diagnose ranks its remedies by what the probe measured: one near the limit
        // lands on either side of it from one machine to another (39.2 or 39.7 MiB of 40), and
        // the list reorders. Each remedy keeps its keys and their kinds; which ones and in what
        // order is the probe's measurement, tested in diagnose_cli.
        (Value::Array(w), Value::Array(g)) if !numbers_exact && path.ends_with(".remedies") => {
            let Some(shape) = w.first() else {
                return;
            };
            for (i, gv) in g.iter().enumerate() {
                same_keys(&format!("{path}[{i}]"), shape, gv, errs);
            }
        }
        (Value::Array(w), Value::Array(g)) => {
            if w.len() != g.len() {
                errs.push(format!("{path}: {} items, was {}", g.len(), w.len()));
                return;
            }
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                compare(&format!("{path}[{i}]"), wv, gv, numbers_exact, errs);
            }
        }
        (Value::Number(_), Value::Number(_)) if !numbers_exact => {}
        // Sentences that quote measured figures: compared with the figures masked.
        (Value::String(w), Value::String(g)) if !numbers_exact => {
            // A measured size can change its unit too ("0 B" or "4.00 KiB" of a short-lived
            // process tree's host memory, as the sampler caught it).
            let mask = |s: &str| -> String {
                ["KiB", "MiB", "GiB", "TiB"]
                    .iter()
                    .fold(s.to_string(), |s, u| s.replace(u, "B"))
                    .chars()
                    .map(|c| {
                        if c.is_ascii_digit() || c == '.' || c == ',' {
                            '#'
                        } else {
                            c
                        }
                    })
                    .collect::<String>()
                    .split('#')
                    .filter(|p| !p.is_empty())
                    .collect::<Vec<_>>()
                    .join("#")
            };
            if mask(w) != mask(g) {
                errs.push(format!("{path}: {g:?} (was {w:?})"));
            }
        }
        (w, g) if w != g => errs.push(format!("{path}: {g} (was {w})")),
        _ => {}
    }
}

/// Two values of different JSON kinds, neither null (a null stands for an optional value).
fn kind_changed(want: &Value, got: &Value) -> bool {
    std::mem::discriminant(want) != std::mem::discriminant(got) && !want.is_null() && !got.is_null()
}

/// The keys of `want` at the top of an object, each present in `got` with a value of its kind
/// (a key that is null in either is optional).
fn same_keys(path: &str, want: &Value, got: &Value, errs: &mut Vec<String>) {
    let (Value::Object(w), Value::Object(g)) = (want, got) else {
        if std::mem::discriminant(want) != std::mem::discriminant(got) {
            errs.push(format!("{path}: kind changed"));
        }
        return;
    };
    for (k, wv) in w {
        match g.get(k) {
            None if !wv.is_null() => errs.push(format!("{path}.{k}: missing")),
            Some(gv) if kind_changed(wv, gv) => errs.push(format!("{path}.{k}: kind changed")),
            _ => {}
        }
    }
}

/// Run the binary (on one compute thread: `util::llm_oom_one_thread`) and compare its JSON with the
/// recorded contract.
fn check(name: &str, args: &[&str], numbers_exact: bool) {
    let home = temp();
    let out: util::Run = util::llm_oom_one_thread(home.path())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{name}: the binary does not run: {e}"))
        .into();
    check_output(name, &out.stdout, &out, numbers_exact);
}

fn check_output(name: &str, json: &str, out: &util::Run, numbers_exact: bool) {
    let got: Value = serde_json::from_str(json).unwrap_or_else(|e| {
        panic!(
            "{name}: not JSON ({e}); exit {}\n{}\n{}",
            out.code, out.stdout, out.stderr
        )
    });
    let file = fixtures().join("contract").join(format!("{name}.json"));
    let record = serde_json::json!({"exit": out.code, "report": got});
    if std::env::var_os("LLM_OOM_BLESS").is_some() {
        write(
            &file,
            &(serde_json::to_string_pretty(&record).unwrap_or_default() + "\n"),
        );
        return;
    }
    let want: Value = serde_json::from_str(
        &std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{}: {e} (record with LLM_OOM_BLESS=1)", file.display())),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut errs = Vec::new();
    compare("", &want, &record, numbers_exact, &mut errs);
    assert!(
        errs.is_empty(),
        "{name}: the JSON contract changed:\n  {}",
        errs.join("\n  ")
    );
}

#[test]
fn plan_json_keeps_its_contract() {
    let cases: &[(&str, &[&str])] = &[
        (
            "plan-fits",
            &[
                "plan",
                "--model",
                "mistralai/Mistral-7B-Instruct-v0.2",
                "--vram",
                "24GiB",
                "-p",
                "8000",
                "-n",
                "1000",
                "-b",
                "4",
                "--json",
            ],
        ),
        (
            "plan-weights",
            &[
                "plan",
                "--model",
                "meta-llama/Llama-2-13b-hf",
                "--vram",
                "16GiB",
                "--json",
            ],
        ),
        (
            "plan-concurrency-vllm",
            &[
                "plan",
                "--model",
                "Qwen/Qwen2.5-7B-Instruct",
                "--vram",
                "24GiB",
                "-p",
                "4096",
                "-b",
                "64",
                "--engine",
                "vllm",
                "--json",
            ],
        ),
        (
            "plan-sglang",
            &[
                "plan",
                "--model",
                "Qwen/Qwen2.5-7B-Instruct",
                "--vram",
                "rtx4090",
                "--engine",
                "sglang",
                "--mem-fraction-static",
                "0.85",
                "--json",
            ],
        ),
        (
            "plan-eager-nf4",
            &[
                "plan",
                "--model",
                "meta-llama/Llama-2-7b-hf",
                "--vram",
                "8GiB",
                "--dtype",
                "nf4",
                "-p",
                "6000",
                "--engine",
                "transformers-eager",
                "--json",
            ],
        ),
        (
            "plan-llamacpp",
            &[
                "plan",
                "--model",
                "meta-llama/Meta-Llama-3-8B",
                "--dtype",
                "q4_k_m",
                "--engine",
                "llama.cpp",
                "--vram",
                "8GiB",
                "-p",
                "30000",
                "--json",
            ],
        ),
        ("plan-presets", &["plan", "--list-presets", "--json"]),
        (
            "plan-vllm-tp",
            &[
                "plan",
                "--model",
                "mistralai/Mixtral-8x7B-Instruct-v0.1",
                "--engine",
                "vllm",
                "--vram",
                "2xa100-40gb",
                "--tp",
                "2",
                "--json",
            ],
        ),
    ];
    for (name, args) in cases {
        // The offload tier defaults to this machine's available RAM: fixed, so what is recorded
        // does not depend on where the test runs.
        let mut args = args.to_vec();
        if !args.contains(&"--list-presets") && !args.contains(&"--host-ram") {
            args.extend(["--host-ram", "64GiB"]);
        }
        check(name, &args, true);
    }
}

#[test]
fn explain_json_keeps_its_contract() {
    let logs = fixtures().join("logs");
    let mut names: Vec<String> = std::fs::read_dir(&logs)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".log"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    assert!(names.len() >= 20, "the fixture logs are there");
    for n in &names {
        let path = logs.join(n);
        let p = path.display().to_string();
        check(
            &format!("explain-{}", n.trim_end_matches(".log")),
            &["explain", &p, "--json"],
            true,
        );
    }
    let kv = logs.join("pytorch_generate_kv.log").display().to_string();
    check(
        "explain-priced",
        &[
            "explain",
            &kv,
            "--model",
            "mistralai/Mistral-7B-Instruct-v0.2",
            "-p",
            "30000",
            "--json",
        ],
        true,
    );
}

#[test]
fn watch_json_keeps_its_contract() {
    let home = temp();
    let report = home.path().join("report.json");
    let r = report.display().to_string();
    let out = run(
        home.path(),
        &[
            "watch",
            "--json",
            "-o",
            &r,
            "--",
            "sh",
            "-c",
            "echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.52 GiB of which 1.00 GiB is free.'; exit 1",
        ],
    );
    let json = std::fs::read_to_string(&report).unwrap_or_default();
    check_output("watch-exit", &json, &out, false);
}

#[test]
fn diagnose_json_keeps_its_contract() {
    // A committed tiny llama, named by a relative path so the recorded `source` is stable.
    let model = "tests/fixtures/contract-model";
    check(
        "diagnose-cpu",
        &[
            "diagnose", "--model", model, "--engine", "candle", "--device", "cpu", "-p", "64",
            "-n", "8", "-b", "2", "--dtype", "f32", "--json",
        ],
        false,
    );
    check(
        "diagnose-cpu-oom",
        &[
            "diagnose",
            "--model",
            model,
            "--engine",
            "candle",
            "--device",
            "cpu",
            "-p",
            "64",
            "-n",
            "8",
            "-b",
            "64",
            "--dtype",
            "f32",
            "--vram-limit",
            "40MiB",
            "--json",
        ],
        false,
    );
}
