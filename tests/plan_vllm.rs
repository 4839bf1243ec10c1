//! `plan --engine vllm` on one card gives vLLM's own start-up verdict, with vLLM's own flags.

mod util;

use util::{run, temp};

const MODEL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/presets/llama-3.1-8b-instruct.json"
);

fn plan(extra: &[&str]) -> util::Run {
    let home = temp();
    let mut args = vec!["plan", "-m", MODEL, "--engine", "vllm", "--vram", "24GB"];
    args.extend_from_slice(extra);
    run(home.path(), &args)
}

/// The `--max-model-len N` the refusal suggests.
fn suggested(out: &str) -> String {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("--max-model-len "))
        .unwrap_or_else(|| panic!("no --max-model-len remedy:\n{out}"));
    line.trim()
        .trim_start_matches("--max-model-len ")
        .to_string()
}

#[test]
fn defaults_on_24gb_refuse_to_start_with_the_max_model_len_remedy() {
    let r = plan(&[]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("✗ vLLM REFUSES TO START"), "{}", r.stdout);
    assert!(r.stdout.contains("cause kv_cache"), "{}", r.stdout);
    assert!(
        r.stdout.contains(
            "To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is needed"
        ),
        "{}",
        r.stdout
    );
    let n: u64 = suggested(&r.stdout).parse().expect("a number");
    assert_eq!(n % 16, 0);
    assert!(n > 0 && n < 131_072);
}

#[test]
fn the_suggested_max_model_len_starts() {
    let n = suggested(&plan(&[]).stdout);
    let r = plan(&["--max-model-len", &n]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("vLLM starts"), "{}", r.stdout);
    assert!(r.stdout.contains("GPU KV cache size:"), "{}", r.stdout);
    assert!(
        r.stdout.contains("tokens per request: 1.0") || r.stdout.contains("tokens per request: 1."),
        "{}",
        r.stdout
    );
}

#[test]
fn a_batch_past_the_cache_waits_it_does_not_oom() {
    let r = plan(&[
        "--max-model-len",
        "8192",
        "-b",
        "64",
        "--prompt-tokens",
        "8000",
        "--max-new-tokens",
        "192",
    ]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("WOULD OOM"), "{}", r.stdout);
    assert!(r.stdout.contains("not an out-of-memory"), "{}", r.stdout);
}

#[test]
fn vllm_flags_with_another_engine_are_refused() {
    let home = temp();
    let r = run(
        home.path(),
        &[
            "plan",
            "-m",
            MODEL,
            "--vram",
            "24GB",
            "--gpu-memory-utilization",
            "0.5",
            "--engine",
            "transformers",
        ],
    );
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("--gpu-memory-utilization is a vLLM flag; add --engine vllm"),
        "{}",
        r.stderr
    );
}

#[test]
fn utilization_out_of_range_is_refused() {
    for u in ["0", "1.5", "-0.2"] {
        let r = plan(&["--gpu-memory-utilization", u]);
        assert_eq!(r.code, 2, "{u}: {}{}", r.stdout, r.stderr);
        assert_eq!(r.stderr.trim().lines().count(), 1, "{u}: {}", r.stderr);
    }
}

#[test]
fn a_start_quotes_vllms_two_capacity_lines() {
    let home = temp();
    let r = run(
        home.path(),
        &[
            "--json",
            "plan",
            "-m",
            MODEL,
            "--engine",
            "vllm",
            "--vram",
            "24GB",
            "--max-model-len",
            "16384",
        ],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let s = &util::json(&r.stdout)["vllm_startup"];
    let blocks = s["num_blocks"].as_u64().expect("blocks");
    // get_max_concurrency_for_kv_cache_config: blocks / cdiv(max_model_len, block_size)
    let concurrency = blocks as f64 / (16_384 / 16) as f64;
    let text = plan(&["--max-model-len", "16384"]).stdout;
    for line in [
        format!("GPU KV cache size: {} tokens", group(blocks * 16)),
        format!("Maximum concurrency for 16,384 tokens per request: {concurrency:.2}x"),
    ] {
        assert!(text.contains(&line), "{line}\n{text}");
    }
}

fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
