//! `plan --engine sglang` on one card gives SGLang's own start-up verdict: its token pool
//! `max_total_num_tokens` within `--mem-fraction-static`, with SGLang's own flags.

mod util;

use util::{json, run, temp};

const MODEL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/presets/qwen2.5-7b-instruct.json"
);

fn plan(extra: &[&str]) -> util::Run {
    let home = temp();
    let mut args = vec![
        "plan", "-m", MODEL, "--engine", "sglang", "--vram", "rtx4090",
    ];
    args.extend_from_slice(extra);
    run(home.path(), &args)
}

/// The flag line a remedy prints (`--mem-fraction-static 0.68`), its value.
fn suggested(out: &str, flag: &str) -> Option<String> {
    out.lines()
        .map(str::trim)
        .find(|l| l.starts_with(&format!("{flag} ")))
        .map(|l| l.trim_start_matches(flag).trim().to_string())
}

/// model_runner_kv_cache_mixin.py `profile_max_num_token` by hand for Qwen2.5-7B in bf16 on an
/// RTX 4090 (24,564 MiB): total_gpu_memory is the card less the 512 MiB CUDA context; the pool
/// is what mem_fraction_static leaves after the weights; a token costs 28 layers × 4 KV heads ×
/// (128 + 128) × 2 bytes.
fn pool_by_hand(fraction: f64) -> u64 {
    let card: u64 = 24_564 << 20;
    let free = card - (512 << 20);
    let weights: u64 = 7_615_616_512 * 2; // Qwen2.5-7B's parameters in bf16
    let reserved = (free as f64 * (1.0 - fraction)) as u64;
    let cell = 28 * 4 * (128 + 128) * 2;
    (free - weights).saturating_sub(reserved) / cell
}

#[test]
fn qwen7b_at_mem_fraction_085_on_an_rtx4090_starts_with_the_pool_computed_by_hand() {
    let r = plan(&["--mem-fraction-static", "0.85"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let pool = pool_by_hand(0.85);
    assert_eq!(pool, 108_225);
    assert!(r.stdout.contains("SGLang starts"), "{}", r.stdout);
    assert!(
        r.stdout.contains(&format!(
            "max_total_num_tokens={pool}, max_running_requests=2048, context_len=32768"
        )),
        "{}",
        r.stdout
    );
    let fit = pool as f64 / 32_768.0;
    assert!(
        r.stdout.contains(&format!(
            "{fit:.2} requests of 32,768 tokens fit the pool at once"
        )),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("WOULD OOM"), "{}", r.stdout);
}

#[test]
fn the_report_carries_the_pool_and_sglangs_default_fraction() {
    let home = temp();
    let r = run(
        home.path(),
        &[
            "--json", "plan", "-m", MODEL, "--engine", "sglang", "--vram", "rtx4090",
        ],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let s = &json(&r.stdout)["sglang_startup"];
    // server_args.py: reserved_mem = 512 + 2048 × 1.5 + 24 × 2 + 1/8 × 1024 = 3,760 MiB
    let default = ((24_564.0 - 3_760.0) / 24_564.0 * 1000.0_f64).round() / 1000.0;
    assert_eq!(s["mem_fraction_static"].as_f64(), Some(default));
    assert_eq!(s["fraction_is_default"].as_bool(), Some(true));
    assert_eq!(
        s["max_total_num_tokens"].as_u64(),
        Some(pool_by_hand(default))
    );
    assert_eq!(s["cell_size"].as_u64(), Some(57_344));
}

#[test]
fn too_small_a_fraction_refuses_to_start_with_sglangs_message_and_the_fraction_that_starts() {
    let r = plan(&["--mem-fraction-static", "0.5"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("✗ SGLang REFUSES TO START"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. \
             Current value: self.server_args.mem_fraction_static=0.5"
        ),
        "{}",
        r.stdout
    );
    let f = suggested(&r.stdout, "--mem-fraction-static").expect("a fraction to paste");
    let ok = plan(&["--mem-fraction-static", &f]);
    assert_eq!(ok.code, 0, "{f}: {}", ok.stdout);
    let v: f64 = f.parse().expect("a fraction");
    assert!(pool_by_hand(v) >= 32_768, "{f} holds the context");
    assert!(
        pool_by_hand(v - 0.01) < 32_768,
        "{f} is the smallest that does"
    );
}

#[test]
fn a_pool_shorter_than_the_context_starts_and_names_the_context_length_it_holds() {
    let r = plan(&["--mem-fraction-static", "0.66"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let pool = pool_by_hand(0.66);
    assert!(pool < 32_768);
    assert_eq!(
        suggested(&r.stdout, "--context-length").as_deref(),
        Some(pool.to_string().as_str()),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains(&format!("max_req_len = {}", group(pool - 1))),
        "{}",
        r.stdout
    );
    let n = pool.to_string();
    let held = plan(&["--mem-fraction-static", "0.66", "--context-length", &n]);
    assert_eq!(held.code, 0, "{}", held.stdout);
    assert!(held.stdout.contains("1.00 requests of"), "{}", held.stdout);
    assert!(
        suggested(&held.stdout, "--context-length").is_none(),
        "{}",
        held.stdout
    );
}

#[test]
fn a_batch_past_the_pool_waits_it_does_not_oom() {
    let r = plan(&[
        "--mem-fraction-static",
        "0.85",
        "-b",
        "64",
        "--prompt-tokens",
        "8000",
        "--max-new-tokens",
        "192",
    ]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("WOULD OOM"), "{}", r.stdout);
    let held = pool_by_hand(0.85) / 8_192;
    assert!(
        r.stdout.contains(&format!("the pool holds {held} of them")),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("not an out-of-memory"), "{}", r.stdout);
}

fn refused(args: &[&str], says: &str) {
    let home = temp();
    let mut all = vec!["plan", "-m", MODEL];
    if !args.contains(&"--vram") {
        all.extend_from_slice(&["--vram", "24GB"]);
    }
    all.extend_from_slice(args);
    let r = run(home.path(), &all);
    assert_eq!(r.code, 2, "{args:?}: {}{}", r.stdout, r.stderr);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{args:?}: {}", r.stderr);
    assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
}

#[test]
fn every_sglang_flag_with_another_engine_is_refused() {
    for (flag, value, vllm) in [
        ("--mem-fraction-static", "0.8", "--gpu-memory-utilization"),
        ("--context-length", "4096", "--max-model-len"),
        ("--max-running-requests", "8", "--max-num-seqs"),
        ("--chunked-prefill-size", "1024", "--max-num-batched-tokens"),
    ] {
        refused(
            &[flag, value],
            &format!(
                "{flag} is an SGLang flag; add --engine sglang (this plan is for transformers)"
            ),
        );
        refused(
            &["--engine", "llama.cpp", flag, value],
            &format!("{flag} is an SGLang flag; add --engine sglang (this plan is for llama.cpp)"),
        );
        refused(
            &["--engine", "vllm", flag, value],
            &format!("{flag} is an SGLang flag; vLLM's is {vllm} (or add --engine sglang)"),
        );
        refused(
            &["--engine", "sglang", vllm, value],
            &format!("{vllm} is a vLLM flag; SGLang's is {flag} (or add --engine vllm)"),
        );
    }
}

#[test]
fn sglang_over_several_gpus_and_out_of_range_values_are_refused() {
    refused(
        &["--engine", "sglang", "--pp", "2"],
        "SGLang is planned on one node with --tp",
    );
    refused(
        &["--engine", "sglang", "--vram", "24GB,12GB"],
        "SGLang's --tp ranks run on cards of one kind",
    );
    refused(
        &["--engine", "sglang", "--vram", "2x24GB", "--tp", "4"],
        "--tp 4 with 2 cards in --vram",
    );
    // Qwen2.5-7B's 28 attention heads do not split over 8 ranks.
    refused(
        &["--engine", "sglang", "--tp", "8"],
        "--tp 8: SGLang splits the model's 28 attention heads",
    );
    for f in ["0", "1", "1.2", "-0.3"] {
        refused(
            &["--engine", "sglang", "--mem-fraction-static", f],
            "--mem-fraction-static",
        );
    }
    refused(
        &["--engine", "sglang", "--context-length", "0"],
        "--context-length",
    );
    let one = plan(&["--tp", "1"]);
    assert_eq!(one.code, 0, "{}{}", one.stdout, one.stderr);
}

/// 24660 → "24,660", as the report writes counts.
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

#[test]
fn a_context_no_fraction_holds_gets_the_flags_that_start_together() {
    let llama = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/presets/llama-3.1-8b-instruct.json"
    );
    let at = |extra: &[&str]| {
        let home = temp();
        let mut args = vec![
            "plan", "-m", llama, "--engine", "sglang", "--vram", "rtx4090",
        ];
        args.extend_from_slice(extra);
        run(home.path(), &args)
    };
    let r = at(&["--mem-fraction-static", "0.6"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let n = suggested(&r.stdout, "--mem-fraction-static 0.95 --context-length")
        .expect("the pair of flags");
    let ok = at(&["--mem-fraction-static", "0.95", "--context-length", &n]);
    assert_eq!(ok.code, 0, "{}", ok.stdout);
    assert!(
        ok.stdout.contains(&format!("max_total_num_tokens={n},")),
        "{}",
        ok.stdout
    );
    assert!(ok.stdout.contains("1.00 requests of"), "{}", ok.stdout);
}

/// `profile_max_num_token` on each of 2 ranks by hand: Qwen2.5-7B in bf16, `--tp 2` over two RTX
/// 4090s at mem_fraction_static 0.85. Each rank loads half the weights and keeps 2 of the 4 KV
/// heads: a token costs 28 layers × 2 heads × (128 + 128) × 2 bytes = 28,672.
#[test]
fn tp_2_on_two_4090s_gives_each_rank_the_pool_computed_by_hand() {
    let card: u64 = 24_564 << 20;
    let free = card - (512 << 20);
    let weights: u64 = 7_615_616_512; // half of 15,231,233,024 bytes
    let reserved = (free as f64 * 0.15) as u64;
    let pool = (free - weights - reserved) / 28_672;
    assert_eq!(pool, 482_061);
    for extra in [
        &["--vram", "rtx4090", "--tp", "2"][..],
        &["--vram", "2xrtx4090"][..],
    ] {
        let home = temp();
        let mut args = vec!["plan", "-m", MODEL, "--engine", "sglang"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--mem-fraction-static", "0.85", "--json"]);
        let r = run(home.path(), &args);
        assert_eq!(r.code, 0, "{extra:?}: {}{}", r.stdout, r.stderr);
        let s = &json(&r.stdout)["sglang_startup"];
        assert_eq!(s["tp"], 2);
        assert_eq!(s["kv_heads_per_rank"], 2);
        assert_eq!(s["weights_bytes"], weights);
        assert_eq!(s["cell_size"], 28_672);
        assert_eq!(s["max_total_num_tokens"], pool);
    }
    let r = plan(&["--tp", "2", "--mem-fraction-static", "0.85"]);
    assert!(
        r.stdout.contains(&format!(
            "max_total_num_tokens={pool}, max_running_requests=4096, context_len=32768"
        )),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("pool is one rank's: 482,061 tokens (12.9 GiB) on each GPU"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("--tp 2: one rank on each of 2 GPUs"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .lines()
            .next()
            .unwrap_or_default()
            .contains("· sglang · 2 GPUs: 24.0 GiB each, --tp 2 (--vram)"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("on each of 2 GPUs (--tp 2, one rank's share)"),
        "{}",
        r.stdout
    );
}

#[test]
fn tp_sets_sglangs_default_fraction_and_replicates_fewer_kv_heads_than_ranks() {
    // reserved = 512 + 2048 × 1.5 + 24 × 2 + 2 / 8 × 1024 = 3,888 MiB of 24,564: 0.842
    let j = json(&plan(&["--tp", "2", "--json"]).stdout);
    assert_eq!(j["sglang_startup"]["mem_fraction_static"], 0.842);
    // 4 ranks over 4 KV heads: one each; the CUDA-graph batch of 4 ranks is 80
    let j = json(&plan(&["--tp", "4", "--json"]).stdout);
    let s = &j["sglang_startup"];
    assert_eq!(
        (
            s["kv_heads_per_rank"].as_u64(),
            s["kv_heads_replicated"].as_bool()
        ),
        (Some(1), Some(false))
    );
    assert_eq!(s["cuda_graph_max_bs"], 80);
    assert_eq!(s["cell_size"], 28 * 256 * 2);
}
