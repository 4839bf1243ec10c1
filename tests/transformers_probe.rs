//! `diagnose --engine transformers` in the user's own transformers, through the real binary and a
//! real Python child on the CPU (a tiny random llama). Needs a Python with torch and transformers:
//! `.ci/run` installs one and names it in LLM_OOM_TEST_PYTHON; without it the test says so and
//! checks the fallback only.

mod util;

use serde_json::Value;
use util::{llm_oom, temp};

fn fixture() -> String {
    format!("{}/tests/fixtures/tiny-llama", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn transformers_answers_for_transformers() {
    let Some(python) = std::env::var_os("LLM_OOM_TEST_PYTHON") else {
        eprintln!("LLM_OOM_TEST_PYTHON is not set: the measured transformers path is not run here");
        return;
    };
    let home = temp();
    let out = llm_oom(home.path())
        .args([
            "diagnose",
            "--model",
            &fixture(),
            "--device",
            "cpu",
            "-p",
            "48",
            "-n",
            "8",
        ])
        .args(["-b", "2", "--dtype", "f32", "--json", "--python"])
        .arg(&python)
        .output()
        .expect("runs");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(v["mode"], "measured");
    assert!(
        v["probe"]
            .as_str()
            .is_some_and(|p| p.starts_with("transformers")),
        "{v}"
    );
    for s in ["load", "first_token", "long_generation", "concurrency"] {
        let st = v["stages"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == s));
        assert_eq!(
            st.map(|x| x["outcome"].clone()),
            Some("ok".into()),
            "{s}: {v}"
        );
    }
    assert_eq!(v["device"]["meter"], "torch-cpu");
}

#[test]
fn without_transformers_the_answer_is_predicted_and_says_so() {
    let home = temp();
    let out = llm_oom(home.path())
        .args([
            "diagnose",
            "--model",
            &fixture(),
            "--device",
            "cpu",
            "--json",
        ])
        .env("LLM_OOM_PYTHON", "/nonexistent/python3")
        .output()
        .expect("runs");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["mode"], "predicted");
    assert!(v["verdict"]["summary"]
        .as_str()
        .is_some_and(|s| s.starts_with("predicted")));
    assert!(v["stages"]
        .as_array()
        .is_some_and(|a| a.iter().all(|s| s["outcome"] == "skipped")));
    assert_eq!(out.status.code(), Some(0), "{v}");
}

/// On the H200 a non-CUDA llm-oom defaulted the transformers child to the CPU (the default device
/// asked for candle's CUDA build), so every "GPU" run measured RSS. Now the device is the user's
/// torch's business: `--device cuda` reaches the child, which says what its torch can do.
#[test]
fn the_transformers_child_is_given_the_gpu_whatever_this_binary_was_built_with() {
    let Some(python) = std::env::var_os("LLM_OOM_TEST_PYTHON") else {
        eprintln!("LLM_OOM_TEST_PYTHON is not set: the transformers device path is not run here");
        return;
    };
    let home = temp();
    let out = llm_oom(home.path())
        .args([
            "diagnose",
            "--model",
            &fixture(),
            "--device",
            "cuda",
            "-p",
            "16",
        ])
        .args(["-n", "2", "--dtype", "f32", "--python"])
        .arg(&python)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if cfg!(feature = "cuda") || stderr.contains("probing") && out.status.code() == Some(0) {
        return; // a machine whose torch sees a GPU: nothing to refuse
    }
    assert!(
        !stderr.contains("built without the `cuda` feature"),
        "the transformers child must not need llm-oom's CUDA build: {stderr}"
    );
    // Without a GPU NVML sees, llm-oom refuses the device itself before starting the child.
    assert!(
        stderr.contains("CUDA is not available to torch") || stderr.contains("no CUDA GPU found"),
        "{stderr}"
    );
    assert_eq!(out.status.code(), Some(2), "{stderr}");
}

/// A long prompt is prefilled once in transformers: the first-token stage is read off the long
/// generation's prefill (its own detail says so), with the prompt's cache and its time to first
/// token; the long generation has the whole.
#[test]
fn a_long_prompt_is_prefilled_once() {
    let Some(python) = std::env::var_os("LLM_OOM_TEST_PYTHON") else {
        eprintln!("LLM_OOM_TEST_PYTHON is not set: the transformers path is not run here");
        return;
    };
    let home = temp();
    let config = util::write(
        &home.path().join("long/config.json"),
        r#"{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,
        "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
        "vocab_size":256,"max_position_embeddings":65536,"torch_dtype":"float32","rms_norm_eps":1e-5}"#,
    );
    let out = llm_oom(home.path())
        .args([
            "diagnose", "--device", "cpu", "-p", "8192", "-n", "16", "--json", "--model",
        ])
        .arg(config.parent().expect("dir"))
        .arg("--python")
        .arg(&python)
        .output()
        .expect("runs");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{v}");
    let stage = |name: &str| {
        v["stages"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == name))
            .cloned()
            .unwrap_or_default()
    };
    let (first, long) = (stage("first_token"), stage("long_generation"));
    assert_eq!(first["outcome"], "ok", "{v}");
    assert!(first["detail"]
        .as_str()
        .is_some_and(|d| d.contains("the long generation's")));
    assert_eq!(first["new_tokens"], 1);
    assert_eq!(long["outcome"], "ok");
    assert_eq!(long["new_tokens"], 16);
    assert_eq!(first["ttft_seconds"], long["ttft_seconds"]);
    // 2 layers × 2 KV heads × 16 × (K + V) × f32 = 512 B per token.
    assert_eq!(first["components"]["kv_cache"], 8192 * 512);
    assert!(long["components"]["kv_cache"].as_u64() > first["components"]["kv_cache"].as_u64());
}

fn stage_of(v: &Value, name: &str) -> Value {
    v["stages"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == name))
        .cloned()
        .unwrap_or_default()
}

fn tiny_diagnose(python: &std::ffi::OsStr, extra: &[&str]) -> (Option<i32>, Value) {
    tiny_diagnose_new(python, 8, extra)
}

/// The tiny model's batch of 2 × 48 tokens with `new` new tokens, on the CPU.
fn tiny_diagnose_new(python: &std::ffi::OsStr, new: usize, extra: &[&str]) -> (Option<i32>, Value) {
    let home = temp();
    let out = llm_oom(home.path())
        .args(["diagnose", "--model", &fixture(), "--device", "cpu"])
        .args(["-p", "48", "-n", &new.to_string(), "-b", "2"])
        .args(["--dtype", "f32", "--json"])
        .args(extra)
        .arg("--python")
        .arg(python)
        .output()
        .expect("runs");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), v)
}

/// `--fresh-run always`: the asked workload (here the batch of 2) runs once more in a new child,
/// cold and whole, and that record is the concurrency stage's.
#[test]
fn the_whole_workload_runs_in_a_fresh_process_when_asked() {
    let Some(python) = std::env::var_os("LLM_OOM_TEST_PYTHON") else {
        eprintln!("LLM_OOM_TEST_PYTHON is not set: the transformers path is not run here");
        return;
    };
    let (code, v) = tiny_diagnose(&python, &["--fresh-run", "always"]);
    assert_eq!(code, Some(0), "{v}");
    let c = stage_of(&v, "concurrency");
    assert_eq!(c["outcome"], "ok", "{v}");
    assert_eq!(c["fresh_process"], true, "{c}");
    assert!(c["detail"]
        .as_str()
        .is_some_and(|d| d.contains("in a fresh process") && d.contains("warm probe: peak")));
    assert_eq!(c["new_tokens"], 8);
    assert!(
        v["children"].as_array().is_some_and(|a| a.len() >= 2),
        "{v}"
    );
    assert!(v["notes"]
        .to_string()
        .contains("decided by a fresh process"));
    // Without it, nothing is far enough from the whole host to be at the edge: no fresh run.
    let (_, plain) = tiny_diagnose(&python, &[]);
    assert!(
        stage_of(&plain, "concurrency")
            .get("fresh_process")
            .is_none(),
        "{plain}"
    );
}

/// With more new tokens than the short run's last passes, the decisive run is the short one
/// where its decode side is far from the card: a real prefill, the cache grown, the last 8 decode
/// passes real, in a fresh child; its record is the asked stage's and says so.
#[test]
fn the_short_fresh_run_decides_where_its_decode_side_is_clear_of_the_card() {
    let Some(python) = std::env::var_os("LLM_OOM_TEST_PYTHON") else {
        eprintln!("LLM_OOM_TEST_PYTHON is not set: the transformers path is not run here");
        return;
    };
    let (code, v) = tiny_diagnose_new(&python, 24, &["--fresh-run", "always"]);
    assert_eq!(code, Some(0), "{v}");
    let c = stage_of(&v, "concurrency");
    assert_eq!(c["outcome"], "ok", "{v}");
    assert_eq!(c["fresh_process"], true, "{c}");
    assert_eq!(c["new_tokens"], 24);
    assert!(
        c["detail"].as_str().is_some_and(
            |d| d.contains("the last 8 decode passes real") && d.contains("warm probe: peak")
        ),
        "{c}"
    );
    assert!(
        v["notes"].to_string().contains("its decode side with"),
        "{v}"
    );
    // One fresh child, not two: the full run was not needed.
    let fresh = v["timings"]
        .to_string()
        .matches("start of a fresh process")
        .count();
    assert_eq!(fresh, 1, "{v}");
}

/// A card just above the staged peak is the edge: the fresh run decides, and the asked workload
/// is inside the printed budget when it ran.
#[test]
fn a_peak_at_the_edge_of_the_card_is_decided_by_a_fresh_process() {
    let Some(python) = std::env::var_os("LLM_OOM_TEST_PYTHON") else {
        eprintln!("LLM_OOM_TEST_PYTHON is not set: the transformers path is not run here");
        return;
    };
    let (_, v) = tiny_diagnose(&python, &["--fresh-run", "never"]);
    let peak = stage_of(&v, "concurrency")["memory"]["peak"]
        .as_u64()
        .expect("a peak");
    // 128 MiB above the staged peak: inside the edge band (at least 256 MiB), and far enough
    // above it that the resident set's noise on the CPU does not make a stage run out.
    let limit = format!("{}B", peak + (128 << 20));
    let (code, v) = tiny_diagnose(&python, &["--vram-limit", &limit]);
    let c = stage_of(&v, "concurrency");
    assert_eq!(c["fresh_process"], true, "{v}");
    if c["outcome"] == "ok" {
        assert_eq!(code, Some(0), "{v}");
        let budget = v["budget"]["max_prompt_tokens"].as_u64().unwrap_or(0);
        assert!(
            budget >= 48,
            "the workload ran, the budget says {budget}: {v}"
        );
    } else {
        assert_eq!(code, Some(1), "{v}");
    }
}

/// Without transformers, a CUDA card is answered by transformers' allocation sequence replayed
/// through PyTorch's allocator (the llama family; tests/torch_program.rs checks it against the
/// ground truth): the report says so, a card too small for the weights and the torch context is
/// a load failure, and a card that holds them runs.
#[test]
fn without_transformers_a_cuda_card_is_answered_by_the_allocator_replay() {
    let home = temp();
    let run = |limit: &str| {
        let out = llm_oom(home.path())
            .args([
                "diagnose",
                "--device",
                "cuda",
                "-p",
                "256",
                "-n",
                "8",
                "--vram-limit",
                limit,
                "--json",
            ])
            .env("LLM_OOM_PYTHON", "/nonexistent/python3")
            .output()
            .expect("runs");
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        (out.status.code(), v)
    };
    let (code, v) = run("2GiB");
    assert_eq!(v["mode"], "predicted", "{v}");
    assert!(
        v["probe"]
            .as_str()
            .is_some_and(|p| p.contains("allocation sequence replayed")),
        "{v}"
    );
    assert_eq!(v["verdict"]["cause"], "none", "{v}");
    assert_eq!(code, Some(0), "{v}");
    let (code, v) = run("700MiB");
    assert_eq!(v["verdict"]["cause"], "weights", "{v}");
    assert_eq!(v["verdict"]["stage"], "load", "{v}");
    assert_eq!(code, Some(1), "{v}");
}

/// The warm process (`LLM_OOM_ZYGOTE`, transformers_probe.py): a second diagnose's child is
/// forked from the interpreter the first one started, says so, is recorded by its own pid (not
/// its relay's), and answers as a child of its own interpreter does.
#[test]
fn a_warm_process_forks_the_child_and_the_answer_is_the_same() {
    let Some(python) = std::env::var_os("LLM_OOM_TEST_PYTHON") else {
        eprintln!("LLM_OOM_TEST_PYTHON is not set: the warm transformers process is not run here");
        return;
    };
    let (run_dir, home) = (temp(), temp());
    let run = |zygote: &str| -> Value {
        let out = llm_oom(home.path())
            .args(["diagnose", "--model", &fixture(), "--device", "cpu"])
            .args(["-p", "48", "-n", "8", "-b", "2", "--dtype", "f32", "--json"])
            .arg("--python")
            .arg(&python)
            .env("XDG_RUNTIME_DIR", run_dir.path())
            .env("LLM_OOM_ZYGOTE", zygote)
            .env("LLM_OOM_ZYGOTE_IDLE_S", "5")
            .output()
            .expect("runs");
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    let warm_pid = |v: &Value| -> Option<u32> {
        v["notes"].as_array()?.iter().find_map(|n| {
            n.as_str()?
                .strip_prefix("forked from llm-oom's warm transformers process (pid ")?
                .split(')')
                .next()?
                .parse()
                .ok()
        })
    };
    let (first, second, own) = (run("cpu"), run("cpu"), run("0"));
    let (a, b) = (warm_pid(&first), warm_pid(&second));
    assert!(
        a.is_some() && a == b,
        "one warm process forked both: {a:?} {b:?}"
    );
    assert_eq!(
        warm_pid(&own),
        None,
        "LLM_OOM_ZYGOTE=0 runs the probe in its own process"
    );
    for v in [&first, &second] {
        let children = v["children"].as_array().expect("children");
        assert!(!children.is_empty());
        for c in children {
            let pid = c["pid"].as_u64().expect("pid");
            assert_ne!(Some(pid as u32), a, "a child is recorded by its own pid");
            assert_eq!(c["exit"], "exited 0", "{c}");
        }
    }
    for key in ["cause", "stage"] {
        assert_eq!(first["verdict"][key], own["verdict"][key], "{key}");
        assert_eq!(second["verdict"][key], own["verdict"][key], "{key}");
    }
    for key in [
        "fits",
        "max_prompt_tokens",
        "max_new_tokens",
        "context_limit",
    ] {
        assert_eq!(first["budget"][key], own["budget"][key], "budget {key}");
    }
}
