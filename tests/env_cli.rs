//! `llm-oom env`, `--version` and the man page through the real binary; the Python facts from a
//! real interpreter (LLM_OOM_TEST_PYTHON when CI installed torch, else `python3`).

mod util;

use serde_json::Value;
use util::{llm_oom, temp};

fn python() -> std::ffi::OsString {
    std::env::var_os("LLM_OOM_TEST_PYTHON").unwrap_or_else(|| "python3".into())
}

#[test]
fn env_reports_the_build_the_host_and_the_python_packages() {
    let home = temp();
    let out = llm_oom(home.path())
        .args(["env", "--json", "--python"])
        .arg(python())
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["command"], "env");
    assert_eq!(v["build"]["cuda"], cfg!(feature = "cuda"));
    assert!(v["host_total_bytes"].as_u64().is_some_and(|b| b > 0));
    // Either a GPU list or the reason there is none.
    assert!(v["gpus"].as_array().is_some_and(|g| !g.is_empty()) || v["gpu_note"].is_string());
    let py = &v["python"];
    assert!(
        py["version"].as_str().is_some_and(|s| s.starts_with('3')),
        "{py}"
    );
    for p in ["torch", "transformers", "vllm", "bitsandbytes"] {
        assert!(py["packages"].get(p).is_some(), "{p}: {py}");
    }
    if std::env::var_os("LLM_OOM_TEST_PYTHON").is_some() {
        assert!(py["packages"]["torch"].is_string(), "{py}");
    }
}

#[test]
fn env_in_markdown_is_a_table_and_a_missing_python_is_said() {
    let home = temp();
    let out = llm_oom(home.path())
        .args(["env", "--markdown", "--python", "/nonexistent/python3"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.starts_with("### Environment"), "{md}");
    assert!(md.contains("| llm-oom | 0.1.0"), "{md}");
    assert!(md.contains("/nonexistent/python3 cannot be run"), "{md}");
}

#[test]
fn every_markdown_report_ends_with_the_environment() {
    let home = temp();
    let out = llm_oom(home.path())
        .args(["plan", "--markdown"])
        .output()
        .expect("runs");
    let md = String::from_utf8_lossy(&out.stdout);
    let last = md.trim_end().lines().last().unwrap_or_default();
    assert!(last.starts_with("<sub>environment: "), "{md}");
    assert!(last.contains("this build: "), "{last}");
}

#[test]
fn version_says_what_was_built_in_and_the_man_page_renders() {
    let home = temp();
    let out = llm_oom(home.path())
        .arg("--version")
        .output()
        .expect("runs");
    let v = String::from_utf8_lossy(&out.stdout);
    assert!(v.contains("features: "), "{v}");
    assert_eq!(v.contains("features: cuda"), cfg!(feature = "cuda"), "{v}");
    let out = llm_oom(home.path()).arg("man").output().expect("runs");
    let roff = String::from_utf8_lossy(&out.stdout);
    assert!(roff.contains(".TH llm-oom 1"), "{roff}");
    assert!(roff.contains("diagnose"), "the subcommands are listed");
}
