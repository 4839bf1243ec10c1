//! `diagnose --engine candle --tensor-parallel-size N` end to end on the CPU: the real binary
//! starts one real `__probe` child per rank; the ranks all-reduce over the loopback (on GPUs the
//! same children all-reduce over NCCL). Every task is answered by every rank; the first rank that
//! fails — a child that aborts, one that hangs, an out-of-memory — is named with its device, and
//! no child is left running.

mod util;

use serde_json::Value;
use util::{llm_oom_one_thread, temp, write, Run};

/// The probe's tiny llama (tests/util.rs).
const TINY: &str = util::TINY_PROBE;

struct Case {
    home: tempfile::TempDir,
    model: String,
}

fn case() -> Case {
    let home = temp();
    let model = write(&home.path().join("tiny/config.json"), TINY);
    Case {
        model: model.display().to_string(),
        home,
    }
}

impl Case {
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        // One compute thread: the measured figures do not move with the host's cores.
        let mut c = llm_oom_one_thread(self.home.path());
        c.args(["diagnose", "--model", &self.model]).args(args);
        if !args.contains(&"--engine") {
            c.args(["--engine", "candle"]);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("the binary runs").into()
    }

    fn json(&self, args: &[&str], env: &[(&str, &str)]) -> (i32, Value) {
        let mut a = vec!["--json", "--device", "cpu"];
        a.extend_from_slice(args);
        let r = self.run(&a, env);
        let v: Value = serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("JSON ({e}): {}\n{}", r.stdout, r.stderr));
        (r.code, v)
    }
}

fn stage<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["stages"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("stage {name} in {v}"))
}

/// Every child the report lists has ended: none of their pids is alive.
fn none_left(v: &Value) {
    let children = v["children"].as_array().expect("children");
    assert!(!children.is_empty());
    for c in children {
        let pid = c["pid"].as_i64().expect("pid") as libc::pid_t;
        // SAFETY: signal 0 only asks whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        assert!(!alive, "probe child {pid} is still running: {c}");
    }
}

#[test]
fn every_rank_answers_every_stage_with_its_part_of_the_model() {
    let c = case();
    let (code, v) = c.json(&["--tp", "2", "-p", "64", "-n", "16", "-b", "2"], &[]);
    assert_eq!(code, 0, "{v}");
    let tasks = v["per_device"].as_array().expect("per_device");
    for t in tasks {
        let ranks: Vec<i64> = t["devices"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["rank"].as_i64())
            .collect();
        assert_eq!(ranks, vec![0, 1], "{t}");
    }
    // each rank holds what `plan --engine vllm --tp 2` prices per rank
    let plan = util::run(
        c.home.path(),
        &[
            "plan", "--model", &c.model, "--engine", "vllm", "--tp", "2", "--vram", "2x24GiB",
            "--dtype", "f32", "--json",
        ],
    );
    let p: Value = serde_json::from_str(&plan.stdout).expect("plan JSON");
    let per_rank = p["placement"]["devices"][0]["weights_bytes"]
        .as_u64()
        .unwrap();
    // the tensors each rank holds (the stage's own figure is the meter's, bookkeeping included)
    assert_eq!(v["weights_bytes"].as_u64(), Some(per_rank));
    for d in tasks[0]["devices"].as_array().unwrap() {
        assert_eq!(d["weights_bytes"].as_u64(), Some(per_rank));
    }
    assert_eq!(v["children"].as_array().map(Vec::len), Some(2));
    none_left(&v);
}

#[test]
fn a_rank_that_dies_is_named_and_the_others_are_stopped() {
    let c = case();
    let (code, v) = c.json(
        &["--tp", "2", "-p", "64", "-n", "16"],
        &[("LLM_OOM_PROBE_FAULT", "abort:first_token@1")],
    );
    assert_eq!(code, 3, "{v}");
    let failed = stage(&v, "first_token");
    assert_eq!(failed["outcome"], "error");
    let why = failed["reason"].as_str().unwrap_or_default();
    assert!(why.starts_with("rank 1 (cpu): the probe died"), "{why}");
    let exits: Vec<&str> = v["children"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["exit"].as_str())
        .collect();
    // rank 0 waited for rank 1 in an all-reduce and was stopped; rank 1 aborted
    assert!(exits.contains(&"killed by signal 6"), "{exits:?}");
    none_left(&v);
}

#[test]
fn a_rank_that_hangs_is_stopped_with_the_whole_world() {
    let c = case();
    let (code, v) = c.json(
        &["--tp", "2", "-p", "64", "-n", "16", "--stage-timeout", "3"],
        &[("LLM_OOM_PROBE_FAULT", "hang:long_generation@1")],
    );
    assert_eq!(code, 3, "{v}");
    assert_eq!(stage(&v, "long_generation")["outcome"], "timeout");
    assert_eq!(stage(&v, "first_token")["outcome"], "ok");
    none_left(&v);
}

/// The fullest rank's peak in each task the unlimited run `v` answered, by the task's label.
fn peak(v: &Value, label: &str) -> u64 {
    v["per_device"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["label"] == label)
        .flat_map(|t| t["devices"].as_array().into_iter().flatten())
        .filter_map(|d| d["peak"].as_u64())
        .max()
        .unwrap_or_else(|| panic!("a {label} task in {v}"))
}

/// The same workload unlimited, on this machine: what each task peaked at. The CPU runtime's
/// matrix-multiply scratch is sized by the host's caches and threads, so a fixed limit that
/// fits one sequence here runs out at warm-up on another host (a CI run on another host).
fn unlimited(c: &Case, args: &[&str]) -> Value {
    let mut a = vec!["--tp", "2"];
    a.extend_from_slice(args);
    let (code, v) = c.json(&a, &[]);
    assert_eq!(code, 0, "{v}");
    v
}

/// A limit halfway between two measured peaks, as `--vram-limit` reads it.
fn between(low: u64, high: u64) -> String {
    assert!(
        high > low + 200_000,
        "{low} and {high} are too close to part"
    );
    format!("{}KB", (low + high) / 2 / 1000)
}

#[test]
fn an_out_of_memory_on_a_rank_names_that_rank_and_its_device() {
    let c = case();
    let args = ["-p", "64", "-n", "16", "-b", "64"];
    let v = unlimited(&c, &args);
    // one sequence fits each rank's limit; 64 sequences' cache does not
    let one = ["warmup", "first_token", "long_generation"]
        .iter()
        .map(|l| peak(&v, l))
        .max()
        .unwrap_or(0);
    let limit = between(one, peak(&v, "concurrency"));
    let mut a = vec!["--tp", "2", "--vram-limit", &limit];
    a.extend_from_slice(&args);
    let (code, v) = c.json(&a, &[]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["verdict"]["cause"], "concurrency", "{}", v["verdict"]);
    let summary = v["verdict"]["summary"].as_str().unwrap_or_default();
    let failed = v["per_device"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["outcome"] == "oom"))
        .expect("the task that ran out");
    let rank = failed["failed_rank"].as_u64().expect("failed_rank");
    assert!(
        summary.ends_with(&format!("— on cpu (rank {rank} of 2)")),
        "{summary}"
    );
    assert_eq!(failed["oom_device"], "cpu");
    assert_eq!(stage(&v, "long_generation")["outcome"], "ok");
    none_left(&v);
}

#[test]
fn a_fresh_world_that_runs_out_warming_up_answers_with_the_stage_own_out_of_memory() {
    let c = case();
    let args = ["-p", "64", "-n", "16"];
    let v = unlimited(&c, &args);
    // the weights load; the warm-up's prefill does not fit beside them, in the first world or in
    // the fresh one each stage then starts (which used to answer "no probe is running")
    let limit = between(peak(&v, "load"), peak(&v, "warmup"));
    let mut a = vec!["--tp", "2", "--vram-limit", &limit];
    a.extend_from_slice(&args);
    let (code, v) = c.json(&a, &[]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["verdict"]["cause"], "activations", "{}", v["verdict"]);
    assert_eq!(v["verdict"]["stage"], "first_token", "{}", v["verdict"]);
    let summary = v["verdict"]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("(rank "), "{summary}");
    assert_eq!(stage(&v, "first_token")["outcome"], "oom");
    none_left(&v);
}

#[test]
fn a_world_the_model_does_not_split_into_is_refused_before_any_child_starts() {
    let c = case();
    let r = c.run(&["--device", "cpu", "--tp", "3"], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("--tensor-parallel-size 3"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    // transformers' multi-GPU probe is layer-wise
    let r = c.run(
        &["--device", "cpu", "--tp", "2", "--engine", "transformers"],
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--engine candle"), "{}", r.stderr);
    // one rank per listed GPU
    let r = c.run(&["--device", "cuda:0,cuda:1", "--tp", "4"], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("one rank per GPU"), "{}", r.stderr);
}
