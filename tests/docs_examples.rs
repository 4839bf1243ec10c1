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

