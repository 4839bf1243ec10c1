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

/// `plan --json --engine vllm --vram 24GB --max-model-len 16384` with `extra`: the start-up check.
fn startup_json(extra: &[&str]) -> serde_json::Value {
    plan_json(extra)["vllm_startup"].clone()
}

/// The verdict's evidence of the same plan, one line each.
fn evidence(extra: &[&str]) -> String {
    let v = plan_json(extra);
    v["verdict"]["evidence"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn plan_json(extra: &[&str]) -> serde_json::Value {
    let home = temp();
    let mut args = vec![
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
    ];
    args.extend_from_slice(extra);
    let r = run(home.path(), &args);
    assert!(r.code <= 1, "{}{}", r.stdout, r.stderr);
    util::json(&r.stdout)
}

fn field(s: &serde_json::Value, key: &str) -> u64 {
    s[key].as_u64().unwrap_or_else(|| panic!("no {key} in {s}"))
}

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

#[test]
fn kv_cache_dtype_fp8_halves_the_cache_vllm_reserves() {
    // Llama-3.1-8B: 32 layers × 8 KV heads × 128 × 2 (K, V), one byte each in fp8.
    let fp8_token = 32 * 8 * 128 * 2;
    for name in ["fp8", "fp8_e4m3", "fp8_e5m2"] {
        let s = startup_json(&["--kv-cache-dtype", name]);
        assert_eq!(field(&s, "needed_kv_bytes"), 16_384 * fp8_token, "{name}");
        assert_eq!(
            field(&s, "num_blocks"),
            field(&s, "available_kv_bytes") / (16 * fp8_token),
            "{name}"
        );
    }
    // auto: the model's bf16, two bytes an element.
    let auto = startup_json(&["--kv-cache-dtype", "auto"]);
    assert_eq!(field(&auto, "needed_kv_bytes"), 16_384 * fp8_token * 2);
    assert_eq!(auto, startup_json(&[]));
    // --kv-dtype saying the same is accepted.
    assert_eq!(
        startup_json(&["--kv-cache-dtype", "fp8", "--kv-dtype", "fp8"]),
        startup_json(&["--kv-cache-dtype", "fp8"])
    );
}

#[test]
fn enforce_eager_gives_the_cuda_graphs_share_to_the_kv_cache() {
    let graphs = startup_json(&[]);
    let eager = startup_json(&["--enforce-eager"]);
    // The vLLM profile's 1 GiB of non-torch memory less the 652 MiB CUDA context: 372 MiB.
    assert_eq!(field(&graphs, "non_torch_bytes"), GIB);
    assert_eq!(field(&graphs, "cuda_graph_bytes"), GIB - 652 * MIB);
    assert_eq!(field(&eager, "non_torch_bytes"), 652 * MIB);
    assert_eq!(field(&eager, "cuda_graph_bytes"), 0);
    assert_eq!(
        field(&eager, "available_kv_bytes") - field(&graphs, "available_kv_bytes"),
        372 * MIB
    );
    assert_eq!(
        field(&eager, "num_blocks"),
        field(&eager, "available_kv_bytes") / (16 * 131_072)
    );
    assert_eq!(eager["enforce_eager"], true);
    let text = plan(&["--max-model-len", "16384", "--enforce-eager"]).stdout;
    assert!(
        text.contains("--enforce-eager: vLLM captures no CUDA graphs, so the 372 MiB"),
        "{text}"
    );
    let said = evidence(&["--enforce-eager"]);
    assert!(
        said.contains("− non-torch 652 MiB (eager: no CUDA graphs) ="),
        "{said}"
    );
}

#[test]
fn cpu_offload_gb_takes_that_much_of_the_weights_off_the_card() {
    let base = startup_json(&[]);
    let weights = field(&base, "weights_bytes");
    assert!(base.get("cpu_offload_bytes").is_none(), "{base}");
    // int(cpu_offload_gb * 1024**3)
    for (gb, bytes) in [("4", 4 * GIB), ("1.5", 3 * GIB / 2)] {
        let s = startup_json(&["--cpu-offload-gb", gb]);
        assert_eq!(field(&s, "cpu_offload_bytes"), bytes, "{gb}");
        assert_eq!(field(&s, "weights_bytes"), weights - bytes, "{gb}");
        assert_eq!(
            field(&s, "available_kv_bytes") - field(&base, "available_kv_bytes"),
            bytes,
            "{gb}"
        );
    }
    // More than the weights: all of them in CPU memory, none on the card.
    let all = startup_json(&["--cpu-offload-gb", "100"]);
    assert_eq!(field(&all, "cpu_offload_bytes"), weights);
    assert_eq!(field(&all, "weights_bytes"), 0);
    let text = plan(&["--max-model-len", "16384", "--cpu-offload-gb", "4"]).stdout;
    assert!(
        text.contains("--cpu-offload-gb: 4.00 GiB of the weights stay in CPU memory"),
        "{text}"
    );
    let said = evidence(&["--cpu-offload-gb", "4"]);
    assert!(said.contains("(4.00 GiB in CPU memory)"), "{said}");
}

#[test]
fn the_new_vllm_flags_with_another_engine_are_refused_in_one_line() {
    for (engine, flags) in [
        ("transformers", vec!["--kv-cache-dtype", "fp8"]),
        ("transformers", vec!["--enforce-eager"]),
        ("llama.cpp", vec!["--cpu-offload-gb", "2"]),
        ("sglang", vec!["--kv-cache-dtype", "fp8"]),
        ("sglang", vec!["--enforce-eager"]),
    ] {
        let home = temp();
        let mut args = vec!["plan", "-m", MODEL, "--vram", "24GB", "--engine", engine];
        args.extend_from_slice(&flags);
        let r = run(home.path(), &args);
        assert_eq!(r.code, 2, "{flags:?}: {}{}", r.stdout, r.stderr);
        assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
        assert!(
            r.stderr
                .contains(&format!("{} is a vLLM flag; add --engine vllm", flags[0])),
            "{}",
            r.stderr
        );
    }
}

#[test]
fn bad_values_and_a_disagreeing_kv_dtype_are_refused_in_one_line() {
    for (flags, says) in [
        (
            vec!["--kv-cache-dtype", "fp8", "--kv-dtype", "bf16"],
            "--kv-cache-dtype fp8 keeps the KV cache in fp8 but --kv-dtype says bf16",
        ),
        (
            vec!["--kv-cache-dtype", "auto", "--kv-dtype", "fp8"],
            "--kv-cache-dtype auto keeps the KV cache in bf16 but --kv-dtype says fp8",
        ),
        (
            vec!["--kv-cache-dtype", "int4"],
            "--kv-cache-dtype int4: write auto",
        ),
        (vec!["--cpu-offload-gb", "-1"], "--cpu-offload-gb -1"),
        (vec!["--cpu-offload-gb", "nan"], "--cpu-offload-gb NaN"),
    ] {
        let r = plan(&flags);
        assert_eq!(r.code, 2, "{flags:?}: {}{}", r.stdout, r.stderr);
        assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
        assert!(r.stderr.contains(says), "{says}\n{}", r.stderr);
    }
}

/// `plan` of Llama-3.1-8B-Instruct on an RTX 3090 (`--vram rtx3090`) with `extra`.
fn on_3090(extra: &[&str]) -> util::Run {
    let home = temp();
    let mut args = vec!["plan", "-m", MODEL, "--engine", "vllm", "--vram", "rtx3090"];
    args.extend_from_slice(extra);
    run(home.path(), &args)
}

/// vllm#10517: vLLM V0 on an RTX 3090 profiles the whole 29,000-token prefill (chunked prefill is
/// on by default only above 32,768) and refuses; at 35,000 chunked prefill is on and it starts.
#[test]
fn v0_refuses_29000_and_starts_35000_on_a_3090() {
    let r = on_3090(&["--max-model-len", "29000", "--vllm-version", "v0"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("✗ vLLM REFUSES TO START"), "{}", r.stdout);
    let said = r
        .stdout
        .lines()
        .find(|l| l.contains("vLLM would say: ValueError: The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache ("))
        .unwrap_or_else(|| panic!("V0's message:\n{}", r.stdout));
    assert!(
        said.ends_with("). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."),
        "{said}"
    );
    assert!(
        r.stdout.contains(
            "Start-up of vLLM V0 (v0.6.4): chunked prefill off, profiling run of 29,000 tokens"
        ),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("--enable-chunked-prefill"),
        "{}",
        r.stdout
    );

    let r = on_3090(&["--max-model-len", "35000", "--vllm-version", "v0"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("vLLM starts · # GPU blocks: "),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains(", # CPU blocks: 2048"), "{}", r.stdout);
    assert!(
        r.stdout.contains(
            "Start-up of vLLM V0 (v0.6.4): chunked prefill on, profiling run of 512 tokens"
        ),
        "{}",
        r.stdout
    );
}

#[test]
fn v0_message_numbers_are_its_blocks_and_json_names_the_vllm() {
    let home = temp();
    let json = |extra: &[&str]| {
        let mut args = vec![
            "--json", "plan", "-m", MODEL, "--engine", "vllm", "--vram", "rtx3090",
        ];
        args.extend_from_slice(extra);
        let r = run(home.path(), &args);
        (r.code, util::json(&r.stdout)["vllm_startup"].clone())
    };
    let (code, s) = json(&["--max-model-len", "29000", "--vllm-version", "v0"]);
    assert_eq!(code, 1);
    assert_eq!(s["vllm"], "vLLM V0 (v0.6.4)");
    assert_eq!(s["version"], "v0");
    assert_eq!(s["chunked_prefill"], false);
    assert_eq!(field(&s, "max_num_batched_tokens"), 29_000);
    let tokens = field(&s, "num_blocks") * 16;
    assert!(tokens < 29_000, "{tokens}");
    let msg = s["message"].as_str().expect("message");
    assert!(
        msg.contains(&format!("stored in KV cache ({tokens})")),
        "{msg}"
    );
    // V1, the default, is unchanged: it starts at both lengths and says so.
    for len in ["29000", "35000"] {
        let (code, v1) = json(&["--max-model-len", len]);
        assert_eq!(code, 0, "{v1}");
        assert_eq!(v1["vllm"], "vLLM V1 (vllm@001cabc1)");
        assert_eq!(v1["version"], "v1");
        assert_eq!(field(&v1, "max_num_batched_tokens"), 2048);
        let (_, named) = json(&["--max-model-len", len, "--vllm-version", "v1"]);
        assert_eq!(named, v1);
    }
}

#[test]
fn vllm_version_with_another_engine_or_unknown_is_refused_in_one_line() {
    let home = temp();
    for engine in ["transformers", "sglang"] {
        let r = run(
            home.path(),
            &[
                "plan",
                "-m",
                MODEL,
                "--vram",
                "rtx3090",
                "--engine",
                engine,
                "--vllm-version",
                "v0",
            ],
        );
        assert_eq!(r.code, 2, "{engine}: {}{}", r.stdout, r.stderr);
        assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
        assert!(
            r.stderr
                .contains("--vllm-version is a vLLM flag; add --engine vllm"),
            "{}",
            r.stderr
        );
    }
    let r = on_3090(&["--vllm-version", "v2"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("--vllm-version v2"), "{}", r.stderr);
}

#[test]
fn v0_over_several_gpus_says_it_is_not_modelled() {
    let home = temp();
    let args = [
        "plan",
        "-m",
        MODEL,
        "--engine",
        "vllm",
        "--vram",
        "2xrtx3090",
        "--max-model-len",
        "29000",
        "--vllm-version",
        "v0",
    ];
    let r = run(home.path(), &args);
    assert!(
        r.stdout
            .contains("note: --vllm-version v0 is read for one card's start-up check"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    let r = run(home.path(), &args[..args.len() - 2]);
    assert!(!r.stdout.contains("--vllm-version"), "{}", r.stdout);
}

/// gpt-oss-120b on one H100 at defaults: vLLM's Marlin MXFP4 MoE pads the experts (2880 → 2944
/// wide, 2880 → 3072 hidden), so the weights it holds are 65.9 GiB, not the checkpoint's 60.8 —
/// vLLM reports "Model loading took 64.4–66.0 GiB" — and the profiling run (8,192 tokens through
/// the fused MoE caches, the sampler warmed with 1,024 × 201,088 logits) leaves nothing for the
/// KV cache: vLLM logs "Available KV cache memory: -2.14 GiB" (vllm#23278, vllm#33155). At
/// `--gpu-memory-utilization 0.95` it still refuses 131,072 tokens (vllm#27508).
#[test]
fn gpt_oss_120b_on_one_h100_holds_padded_mxfp4_experts_and_refuses_to_start() {
    let home = temp();
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/presets/gpt-oss-120b.json");
    let r = run(
        home.path(),
        &["plan", "-m", model, "--engine", "vllm", "--vram", "h100"],
    );
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("weights 65.9 GiB"), "{}", r.stdout);
    assert!(r.stdout.contains("✗ vLLM REFUSES TO START"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("No available memory for the cache blocks"),
        "{}",
        r.stdout
    );
    let r = run(
        home.path(),
        &[
            "plan",
            "-m",
            model,
            "--engine",
            "vllm",
            "--vram",
            "h100",
            "--gpu-memory-utilization",
            "0.95",
        ],
    );
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("max seq len (131072)"), "{}", r.stdout);
    // The same checkpoint in transformers holds what is stored.
    let t = run(home.path(), &["plan", "-m", model, "--vram", "h100"]);
    assert!(t.stdout.contains("weights 60.8 GiB"), "{}", t.stdout);
}

/// An FP8 checkpoint's `ignored_layers` (what vLLM's `Fp8Config` reads) keeps those modules in
/// bf16: Qwen3-235B-A22B in FP8 blocks at TP 4 holds 56.7 GiB a rank with its attention kept in
/// bf16, 55.1 GiB with everything but embeddings, norms and router in fp8.
#[test]
fn fp8_ignored_layers_are_priced_bf16_per_rank_at_tp4() {
    let home = temp();
    let rank0 = |variant: &str| {
        let model = format!(
            "{}/tests/fixtures/fp8-ignored/{variant}/config.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let r = run(
            home.path(),
            &[
                "plan", "-m", &model, "--engine", "vllm", "--vram", "4xh100", "--tp", "4",
            ],
        );
        assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
        r.stdout
            .lines()
            .find(|l| l.contains("cuda:0"))
            .unwrap_or_else(|| panic!("no cuda:0 row:\n{}", r.stdout))
            .to_string()
    };
    let plain = rank0("plain");
    let ignored = rank0("ignored");
    assert!(plain.contains("┆ 55.1 GiB ┆"), "{plain}");
    assert!(plain.contains("┆ 11.7 GiB ┆"), "{plain}");
    assert!(ignored.contains("┆ 56.7 GiB ┆"), "{ignored}");
    assert!(ignored.contains("┆ 10.2 GiB ┆"), "{ignored}");
}

/// The remedies' flags, as pasted under each.
fn remedy_flags(out: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = out.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("Remedies"))
        .unwrap_or(lines.len());
    lines[start..]
        .iter()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.trim())
        .filter(|l| l.starts_with("--"))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// `--enable-chunked-prefill` is V0's flag: the 29,000 tokens vllm#10517 refused start with a
/// profiling run of 512 tokens, the remedy the refusal offers; `--no-enable-chunked-prefill`
/// turns V0's default off above 32,768.
#[test]
fn v0_chunked_prefill_flags_set_the_profiling_run() {
    let v0 = ["--vllm-version", "v0"];
    let r = on_3090(
        &[
            &v0[..],
            &["--max-model-len", "29000", "--enable-chunked-prefill"],
        ]
        .concat(),
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains(
            "Start-up of vLLM V0 (v0.6.4): chunked prefill on, profiling run of 512 tokens"
        ),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("chunked prefill on as given (--enable-chunked-prefill)"),
        "{}",
        r.stdout
    );
    let r = on_3090(
        &[
            &v0[..],
            &["--max-model-len", "35000", "--no-enable-chunked-prefill"],
        ]
        .concat(),
    );
    assert!(
        r.stdout.contains(
            "Start-up of vLLM V0 (v0.6.4): chunked prefill off, profiling run of 35,000 tokens"
        ),
        "{}",
        r.stdout
    );
    let r = on_3090(
        &[
            &v0[..],
            &["--enable-chunked-prefill", "--no-enable-chunked-prefill"],
        ]
        .concat(),
    );
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
}

/// V0's SchedulerConfig._verify_args: without chunked prefill, max_num_batched_tokens below
/// max_model_len is refused before anything loads; each remedy's flags pass it and start.
#[test]
fn v0_refuses_batched_tokens_below_max_model_len_without_chunked_prefill() {
    let given = [
        "--vllm-version",
        "v0",
        "--max-model-len",
        "8192",
        "--max-num-batched-tokens",
        "4096",
    ];
    let r = on_3090(&given);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("✗ vLLM REFUSES TO START"), "{}", r.stdout);
    assert!(
        r.stdout.contains(
            "  vLLM would say: ValueError: max_num_batched_tokens (4096) is smaller than \
             max_model_len (8192). This effectively limits the maximum sequence length to \
             max_num_batched_tokens and makes vLLM reject longer sequences. Please increase \
             max_num_batched_tokens or decrease max_model_len.\n"
        ),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("--tensor-parallel-size"), "{}", r.stdout);
    let flags = remedy_flags(&r.stdout);
    assert_eq!(
        flags,
        [
            vec!["--enable-chunked-prefill"],
            vec!["--max-num-batched-tokens", "8192"],
            vec!["--max-model-len", "4096"],
        ],
        "{}",
        r.stdout
    );
    for f in flags {
        // The remedy's flag in place of the one given.
        let mut args: Vec<&str> = Vec::new();
        for pair in given.chunks(2) {
            if pair[0] != f[0] {
                args.extend_from_slice(pair);
            }
        }
        args.extend(f.iter().map(String::as_str));
        let r = on_3090(&args);
        assert_eq!(r.code, 0, "{f:?}: {}{}", r.stdout, r.stderr);
    }
    // V1 always chunks: the same flags start.
    assert_eq!(on_3090(&given[2..]).code, 0);
}

/// V0 refuses max_num_batched_tokens below max_num_seqs (256 by default), chunked or not.
#[test]
fn v0_refuses_batched_tokens_below_max_num_seqs() {
    let given = [
        "--vllm-version",
        "v0",
        "--max-model-len",
        "8192",
        "--max-num-batched-tokens",
        "128",
        "--enable-chunked-prefill",
    ];
    let r = on_3090(&given);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains(
            "  vLLM would say: ValueError: max_num_batched_tokens (128) must be greater than or \
             equal to max_num_seqs (256).\n"
        ),
        "{}",
        r.stdout
    );
    let args: Vec<&str> = given
        .iter()
        .copied()
        .chain(["--max-num-seqs", "128"])
        .collect();
    assert_eq!(on_3090(&args).code, 0);
}
