//! The examples in README.md and the per-command pages under docs/ are run here, on the CPU, by
//! trycmd: each ```console block's `$ llm-oom …` line runs the real binary and its output must
//! match the block (`...` and `[..]` elide what varies by machine). An example that goes stale
//! fails CI. GPU examples stay in ```text blocks that say where and when they were recorded.

#[test]
fn docs_examples() {
    trycmd::TestCases::new()
        .register_bin("llm-oom", trycmd::cargo::cargo_bin!("llm-oom"))
        // Predicted, never measured, whatever Python the CI machine has: the example's output is the
        // profile's, and the same everywhere.
        .env("LLM_OOM_PYTHON", "/nonexistent/python3")
        .env("NO_COLOR", "1")
        .env("HF_HUB_OFFLINE", "1")
        .case("README.md")
        .case("docs/plan.md")
        .case("docs/diagnose.md")
        .case("docs/watch.md")
        .case("docs/engines.md");
}

/// Each command's `--help` ends with two or three examples, the README's vocabulary.
#[test]
fn every_command_help_ends_with_a_few_examples() {
    let bin = env!("CARGO_BIN_EXE_llm-oom");
    for command in ["plan", "explain", "diagnose", "watch", "env"] {
        let out = std::process::Command::new(bin)
            .args([command, "--help"])
            .env("NO_COLOR", "1")
            .output()
            .expect("the binary runs");
        let help = String::from_utf8_lossy(&out.stdout);
        let examples = help
            .split("Examples:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("`{command} --help` has no examples:\n{help}"));
        let lines = examples
            .lines()
            .take_while(|l| !l.trim().is_empty())
            .filter(|l| l.trim_start().starts_with("llm-oom ") || l.contains("| llm-oom "))
            .count();
        assert!(
            (2..=3).contains(&lines),
            "`{command} --help` shows {lines} examples, not 2 or 3:\n{help}"
        );
    }
}
