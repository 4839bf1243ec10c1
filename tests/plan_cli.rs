//! `llm-oom plan` run as a user runs it: every output mode, every model source, every bad input.

mod util;

use util::{json, run, temp, write, TINY_LLAMA};

const MISTRAL: &str = "mistralai/Mistral-7B-Instruct-v0.2";

#[test]
fn mistral_on_a_24_gib_card_in_all_three_modes() {
    let home = temp();
    let text = run(
        home.path(),
        &["plan", "--model", MISTRAL, "--vram", "24GiB"],
    );
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(text.stdout.contains("✓ FITS"), "{}", text.stdout);
    assert!(text.stdout.contains("13.5 GiB") && text.stdout.contains("128 KiB"));
    assert!(text.stdout.contains("Safe token budget"));
    assert!(
        !text.stdout.contains("\x1b["),
        "no colour when not a terminal"
    );

    let j = json(
        &run(
            home.path(),
            &["plan", "--model", MISTRAL, "--vram", "24GiB", "--json"],
        )
        .stdout,
    );
    assert_eq!(j["weights_bytes"], 14_483_464_192u64);
    assert_eq!(j["kv_cache_bytes_per_token"], 131_072);
    assert_eq!(j["budget"]["fits"], true);
    assert_eq!(j["verdict"]["cause"], "none");
    assert_eq!(j["budget"]["table"].as_array().unwrap().len(), 6);
    assert!(j["budget"]["max_prompt_tokens"].as_u64().unwrap() > 2048);
    assert!(j["budget"]["max_batch"].as_u64().unwrap() >= 1);
    assert_eq!(
        j["engine"]["calibration"]["measured"]["source"],
        "docs/calibration/transformers-h200-2026-11-30.jsonl"
    );

    let md = run(
        home.path(),
        &["plan", "--model", MISTRAL, "--vram", "24GiB", "--markdown"],
    );
    assert!(
        md.stdout.starts_with("### ✅ llm-oom plan"),
        "{}",
        md.stdout
    );
    assert!(md.stdout.contains("| weights | 13.5 GiB |"));
    assert!(md
        .stdout
        .contains("<details><summary>Safe token budget</summary>"));
}

#[test]
fn each_cause_is_named_with_exit_code_one() {
    let home = temp();
    let cause = |args: &[&str]| {
        let mut a = vec!["plan", "--json"];
        a.extend_from_slice(args);
        let r = run(home.path(), &a);
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        let j = json(&r.stdout);
        assert!(
            !j["remedies"].as_array().unwrap().is_empty(),
            "{args:?} has remedies"
        );
        (j["verdict"]["cause"].as_str().unwrap().to_string(), j)
    };
    assert_eq!(
        cause(&["--model", "meta-llama/Llama-2-13b-hf", "--vram", "24GiB"]).0,
        "weights"
    );
    let (c, j) = cause(&[
        "--model",
        MISTRAL,
        "--vram",
        "24GiB",
        "--prompt-tokens",
        "40000",
        "--max-new-tokens",
        "256",
    ]);
    assert_eq!(c, "kv_cache");
    assert!(j["notes"][0]
        .as_str()
        .unwrap()
        .contains("trained for at most 32768 tokens"));
    // The truncation it suggests stays inside the model's context (32,768 − 256 new tokens).
    let truncate = j["remedies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["change"]["kind"] == "truncate_prompt")
        .expect("a truncation remedy");
    assert!(
        truncate["change"]["value"].as_u64().unwrap() <= 32_768 - 256,
        "{truncate}"
    );
    // The cheapest remedy that fits comes first, and it fits.
    assert_eq!(j["remedies"][0]["new_budget"]["fits"], true);
    assert!(j["remedies"][0]["saves_bytes"].as_i64().unwrap() > 0);
    assert_eq!(
        cause(&[
            "--model",
            MISTRAL,
            "--vram",
            "24GiB",
            "--batch",
            "48",
            "--prompt-tokens",
            "2048"
        ])
        .0,
        "concurrency"
    );
    assert_eq!(
        cause(&[
            "--model",
            MISTRAL,
            "--vram",
            "24GiB",
            "--engine",
            "transformers-eager",
            "--prompt-tokens",
            "16000"
        ])
        .0,
        "activations"
    );
}

#[test]
fn a_13b_model_is_fixed_by_four_bit_weights() {
    let home = temp();
    let r = run(
        home.path(),
        &[
            "plan",
            "--model",
            "meta-llama/Llama-2-13b-hf",
            "--vram",
            "16GiB",
            "--json",
        ],
    );
    let j = json(&r.stdout);
    let nf4 = j["remedies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["change"]["value"] == "nf4")
        .expect("an nf4 remedy");
    assert_eq!(nf4["new_budget"]["fits"], true);
    assert!(nf4["how"]
        .as_str()
        .unwrap()
        .contains("BitsAndBytesConfig(load_in_4bit=True"));
    let what_if = j["quantization"].as_array().unwrap();
    // the checkpoint's own f16, then bf16, int8, nf4, q4_k_m
    assert_eq!(what_if.len(), 5);
    assert_eq!(what_if[0]["dtype"], "f16");
    assert_eq!(what_if[4]["engine"], "llama.cpp");
}

#[test]
fn local_directory_config_file_and_hf_cache_layout() {
    let home = temp();
    let dir = home.path().join("tiny");
    let cfg = write(&dir.join("config.json"), TINY_LLAMA);
    for model in [dir.to_str().unwrap(), cfg.to_str().unwrap()] {
        let j = json(
            &run(
                home.path(),
                &["plan", "--model", model, "--vram", "8GiB", "--json"],
            )
            .stdout,
        );
        assert_eq!(j["model"]["architecture"], "llama");
        // 2 × 4 layers × 2 kv heads × 32 head_dim × 2 bytes
        assert_eq!(j["kv_cache_bytes_per_token"], 1024);
    }
    // The Hugging Face cache layout: models--org--name/{refs/main, snapshots/<rev>/config.json}.
    let repo = home.path().join("hf/hub/models--acme--tiny-llama");
    write(&repo.join("refs/main"), "0123abcd");
    write(&repo.join("snapshots/0123abcd/config.json"), TINY_LLAMA);
    let j = json(
        &run(
            home.path(),
            &[
                "plan",
                "--model",
                "acme/tiny-llama",
                "--vram",
                "8GiB",
                "--json",
            ],
        )
        .stdout,
    );
    assert_eq!(j["model"]["source"]["kind"], "hf_cache");
    // embeddings 2 × 1000 × 256 + 4 × (attention 163,840 + MLP 528,384 + norms 512) + final norm
    assert_eq!(j["model"]["parameters"], 3_283_200);
}

#[test]
fn a_gguf_file_is_priced_from_its_real_tensor_table() {
    use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
    use candle_core::{Device, Tensor};
    let home = temp();
    let path = home.path().join("tiny.Q8_0.gguf");
    let dev = Device::Cpu;
    let q = |shape: &[usize], dtype: GgmlDType| {
        let t = Tensor::zeros(shape, candle_core::DType::F32, &dev).unwrap();
        QTensor::quantize(&t, dtype).unwrap()
    };
    let tensors = [
        ("token_embd.weight", q(&[1000, 256], GgmlDType::Q8_0)),
        ("blk.0.attn_q.weight", q(&[256, 256], GgmlDType::Q8_0)),
        ("blk.0.attn_v.weight", q(&[64, 256], GgmlDType::Q4K)),
        ("blk.0.attn_norm.weight", q(&[256], GgmlDType::F32)),
        ("output.weight", q(&[1000, 256], GgmlDType::Q6K)),
    ];
    let meta = [
        (
            "general.architecture",
            gguf_file::Value::String("llama".into()),
        ),
        ("llama.block_count", gguf_file::Value::U32(1)),
        ("llama.embedding_length", gguf_file::Value::U32(256)),
        ("llama.feed_forward_length", gguf_file::Value::U32(688)),
        ("llama.attention.head_count", gguf_file::Value::U32(8)),
        ("llama.attention.head_count_kv", gguf_file::Value::U32(2)),
        ("llama.context_length", gguf_file::Value::U32(2048)),
        ("llama.vocab_size", gguf_file::Value::U32(1000)),
        ("general.file_type", gguf_file::Value::U32(7)),
    ];
    let mut f = std::fs::File::create(&path).unwrap();
    let meta_refs: Vec<(&str, &gguf_file::Value)> = meta.iter().map(|(k, v)| (*k, v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (*k, v)).collect();
    gguf_file::write(&mut f, &meta_refs, &tensor_refs).unwrap();
    drop(f);

    let j = json(
        &run(
            home.path(),
            &[
                "plan",
                "--model",
                path.to_str().unwrap(),
                "--engine",
                "llama.cpp",
                "--vram",
                "8GiB",
                "--prompt-tokens",
                "512",
                "--json",
            ],
        )
        .stdout,
    );
    // q8_0: 34 B / 32; q4_K: 144 B / 256; q6_K: 210 B / 256; f32: 4 B.
    let expected =
        256_000 / 32 * 34 + 65_536 / 32 * 34 + 16_384 / 256 * 144 + 256 * 4 + 256_000 / 256 * 210;
    assert_eq!(j["weights_bytes"], expected);
    assert_eq!(j["model"]["source"]["kind"], "gguf");
    assert_eq!(j["model"]["max_position_embeddings"], 2048);
}

#[test]
fn bad_input_is_one_line_and_exit_code_two() {
    let home = temp();
    let bad_json = write(&home.path().join("bad/config.json"), "{ not json");
    let missing = write(
        &home.path().join("missing/config.json"),
        r#"{"model_type":"llama","hidden_size":64}"#,
    );
    let encoder = write(
        &home.path().join("bert/config.json"),
        r#"{"model_type":"bert","architectures":["BertModel"],"hidden_size":768}"#,
    );
    let broken_gguf = home.path().join("broken.gguf");
    std::fs::write(
        &broken_gguf,
        b"GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7f",
    )
    .unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--model", "nobody/no-such-model"],
            "unset HF_HUB_OFFLINE",
        ),
        (
            vec!["--model", bad_json.to_str().unwrap()],
            "not valid JSON",
        ),
        (
            vec!["--model", missing.to_str().unwrap()],
            "has no `num_hidden_layers`",
        ),
        (
            vec!["--model", encoder.to_str().unwrap()],
            "llm-oom has no family for `bert`",
        ),
        (
            vec!["--model", broken_gguf.to_str().unwrap()],
            "not a readable GGUF file",
        ),
        (vec!["--model", "./no/such/dir"], "cannot read"),
        (vec!["--vram", "24XB"], "not a memory size"),
        (vec!["--vram", "-3GiB"], "not a memory size"),
        (
            vec!["--prompt-tokens", "0"],
            "--prompt-tokens must be at least 1",
        ),
        (
            vec!["--max-new-tokens", "-5"],
            "--max-new-tokens must be at least 1",
        ),
        (vec!["--dtype", "int3"], "not a dtype"),
        (vec!["--engine", "tgi"], "not an engine"),
    ];
    for (args, needle) in cases {
        let mut a = vec!["plan"];
        a.extend(args.iter());
        if !args.contains(&"--vram") {
            a.extend(["--vram", "24GiB"]);
        }
        let r = run(home.path(), &a);
        assert_eq!(r.code, 2, "{args:?} → {}: {}", r.code, r.stderr);
        assert!(r.stderr.contains(needle), "{args:?}: {}", r.stderr);
        assert_eq!(
            r.stderr.trim().lines().count(),
            1,
            "{args:?}: one line: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("panicked"));
        assert!(r.stdout.is_empty());
    }
}

#[test]
fn help_version_completions_and_presets() {
    let home = temp();
    let h = run(home.path(), &["plan", "--help"]);
    assert_eq!(h.code, 0);
    assert!(h.stdout.contains("Examples:") && h.stdout.contains("--concurrency"));
    assert!(run(home.path(), &["--version"])
        .stdout
        .starts_with("llm-oom "));
    let c = run(home.path(), &["completions", "bash"]);
    assert!(c.code == 0 && c.stdout.contains("llm-oom"));
    let p = run(home.path(), &["plan", "--list-presets"]);
    assert!(
        p.stdout.contains("mistralai/Mistral-7B-Instruct-v0.2")
            && p.stdout.contains("7,241,732,096")
    );
    assert_eq!(run(home.path(), &["frobnicate"]).code, 2);
}

/// A word-level tokenizer.json: "hello", "world", everything else [UNK].
const TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
"model":{"type":"WordLevel","vocab":{"[UNK]":0,"hello":1,"world":2},"unk_token":"[UNK]"}}"#;

#[test]
fn a_prompt_file_is_counted_with_the_models_tokenizer() {
    let home = temp();
    let dir = home.path().join("ckpt");
    write(&dir.join("config.json"), TINY_LLAMA);
    write(&dir.join("tokenizer.json"), TOKENIZER);
    let prompt = write(
        &home.path().join("prompt.txt"),
        "hello world, hello there\nworld",
    );
    let dir_s = dir.display().to_string();
    let prompt_s = prompt.display().to_string();
    let r = run(
        home.path(),
        &[
            "plan",
            "--model",
            &dir_s,
            "--prompt-file",
            &prompt_s,
            "--json",
            "--vram",
            "24GiB",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
    // hello · world · , · hello · there · world
    assert_eq!(v["workload"]["prompt_tokens"], 6);
    assert!(r.stderr.contains("is 6 tokens with"), "{}", r.stderr);

    // A preset has no tokenizer: say what to do, exit 2.
    let r = run(
        home.path(),
        &[
            "plan",
            "--model",
            "mistralai/Mistral-7B-Instruct-v0.2",
            "--prompt-file",
            &prompt_s,
        ],
    );
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("needs mistralai/Mistral-7B-Instruct-v0.2's tokenizer.json"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    // A prompt file that is not there, and both flags at once.
    assert_eq!(
        run(
            home.path(),
            &[
                "plan",
                "--model",
                &dir_s,
                "--prompt-file",
                "/nonexistent.txt"
            ]
        )
        .code,
        2
    );
    assert_eq!(
        run(
            home.path(),
            &[
                "plan",
                "--model",
                &dir_s,
                "--prompt-file",
                &prompt_s,
                "-p",
                "5"
            ]
        )
        .code,
        2
    );
}

#[test]
fn vram_24gb_is_the_smallest_24_gb_cards_real_total_and_a_bare_number_is_refused() {
    let home = temp();
    let mib = 1u64 << 20;
    let readme = [
        "plan",
        "--model",
        MISTRAL,
        "--prompt-tokens",
        "8000",
        "--max-new-tokens",
        "1000",
        "--batch",
        "4",
        "--vram",
    ];
    // "24GB" is a class, a range of real totals: planned for its smallest card (an A10, 23,028
    // MiB), where the README's workload does not fit — as on an L4 — while the RTX 4090 it fits.
    for (card, mib_total, code) in [
        ("24GB", 23_028, 1),
        ("rtx4090", 24_564, 0),
        ("l4", 23_034, 1),
    ] {
        let mut a = readme.to_vec();
        a.extend([card, "--json"]);
        let r = run(home.path(), &a);
        let j = json(&r.stdout);
        assert_eq!(j["device"]["vram_bytes"], mib_total * mib, "{card}");
        assert_eq!(r.code, code, "{card}: {}", r.stdout);
    }
    let mut a = readme.to_vec();
    a.push("24GB");
    let text = run(home.path(), &a);
    assert!(
        text.stdout.contains("23,028–24,576 MiB") && text.stdout.contains("24,146,608,128 bytes"),
        "{}",
        text.stdout
    );
    // Binary units stay exact.
    let j = json(&run(home.path(), &["plan", "--vram", "24GiB", "--json"]).stdout);
    assert_eq!(j["device"]["vram_bytes"], 24u64 << 30);
    let r = run(home.path(), &["plan", "--vram", "24"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("write 24GiB, 24GB or a card name like rtx4090"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.trim().lines().count(), 1);
}

#[test]
fn deepseek_v3_is_planned_with_its_latent_cache_and_fp8_weights() {
    let home = temp();
    let plan = |engine: &str| {
        let r = run(
            home.path(),
            &[
                "plan",
                "--model",
                "deepseek-ai/DeepSeek-V3",
                "--engine",
                engine,
                "--vram",
                "h200",
                "--json",
            ],
        );
        // 671 B parameters do not fit one H200: a weights OOM, not a llama-sized "fits".
        assert_eq!(r.code, 1, "{engine}: {}", r.stderr);
        json(&r.stdout)
    };
    let vllm = plan("vllm");
    assert_eq!(vllm["kv_cache_bytes_per_token"], 61 * 576 * 2);
    assert_eq!(vllm["verdict"]["cause"], "weights");
    assert_eq!(vllm["model"]["native_dtype"], "fp8-block128x128");
    let p = vllm["model"]["parameters"].as_u64().unwrap();
    assert!((670_000_000_000..672_000_000_000).contains(&p), "{p}");
    assert_eq!(
        plan("transformers")["kv_cache_bytes_per_token"],
        61 * 576 * 2
    );
}

#[test]
fn a_config_with_fields_llm_oom_does_not_model_never_fits() {
    let home = temp();
    // DeepSeek-V2-Lite's MLA and MoE fields under a llama model_type, and a hybrid's.
    let mla = write(
        &home.path().join("mla/config.json"),
        r#"{"model_type":"llama","architectures":["LlamaForCausalLM"],"hidden_size":2048,"intermediate_size":10944,
        "num_hidden_layers":27,"num_attention_heads":16,"vocab_size":102400,"kv_lora_rank":512,"q_lora_rank":null}"#,
    );
    let ssm = write(
        &home.path().join("ssm/config.json"),
        r#"{"model_type":"zamba2","architectures":["Zamba2ForCausalLM"],"hidden_size":2048,"intermediate_size":8192,
        "num_hidden_layers":54,"num_attention_heads":32,"vocab_size":32000,"mamba_d_state":64}"#,
    );
    for (path, needle) in [(&mla, "`kv_lora_rank`"), (&ssm, "no family for `zamba2`")] {
        let r = run(
            home.path(),
            &["plan", "--model", path.to_str().unwrap(), "--vram", "80GB"],
        );
        assert_eq!(r.code, 2, "{}", r.stdout);
        assert!(r.stderr.contains(needle), "{}", r.stderr);
        assert!(!r.stdout.contains("FITS"));
        assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    }
}

#[test]
fn gemma3s_published_nested_config_is_planned() {
    let home = temp();
    // google/gemma-3-12b-it's config.json: no vocab_size or head_dim in text_config.
    let cfg = write(
        &home.path().join("gemma3/config.json"),
        r#"{"architectures":["Gemma3ForConditionalGeneration"],"boi_token_index":255999,"eoi_token_index":256000,
        "eos_token_id":[1,106],"image_token_index":262144,"initializer_range":0.02,"mm_tokens_per_image":256,
        "model_type":"gemma3","text_config":{"hidden_size":3840,"intermediate_size":15360,"model_type":"gemma3_text",
        "num_attention_heads":16,"num_hidden_layers":48,"num_key_value_heads":8,
        "rope_scaling":{"factor":8.0,"rope_type":"linear"},"sliding_window":1024},"torch_dtype":"bfloat16",
        "vision_config":{"hidden_size":1152,"image_size":896,"intermediate_size":4304,"model_type":"siglip_vision_model",
        "num_attention_heads":16,"num_hidden_layers":27,"patch_size":14,"vision_use_head":false}}"#,
    );
    let r = run(
        home.path(),
        &[
            "plan",
            "--model",
            cfg.to_str().unwrap(),
            "--vram",
            "48GB",
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json(&r.stdout);
    assert_eq!(j["model"]["head_dim"], 256);
    assert_eq!(j["model"]["vocab_size"], 262_208);
    assert_eq!(j["model"]["sliding_layers"], 40);
}

/// Past the model's trained context is in the verdict itself (headline and first evidence), not
/// only a note at the bottom: the memory may fit, the workload is still not what the model does.
#[test]
fn past_the_context_is_in_the_verdict() {
    let home = temp();
    let args = [
        "plan",
        "-m",
        "qwen2.5-7b-instruct",
        "-p",
        "100000",
        "--vram",
        "h200",
    ];
    let r = run(home.path(), &args);
    let headline = r
        .stdout
        .lines()
        .find(|l| l.contains("FITS"))
        .unwrap_or_default();
    assert!(
        headline.contains("past the model's 32,768-token context"),
        "{}",
        r.stdout
    );
    let mut a = args.to_vec();
    a.push("--json");
    let j = json(&run(home.path(), &a).stdout);
    assert!(j["verdict"]["evidence"][0]["text"]
        .as_str()
        .is_some_and(|t| t.starts_with("past the context")));
}

/// `plan --exact` answers transformers by replaying its allocation sequence: a held-out trial of
/// the H200 (Qwen2.5-0.5B, batch 32, 2,506 + 64 tokens on 6 GiB ran out in transformers; 2,505
/// ran; docs/calibration/transformers-limits-h200-2026-12-02-pool.jsonl) is an out-of-memory, with
/// a budget that never claims more than ran and at least 90 % of it. The replay has a hole below
/// that edge (2,412, the profile's budget, runs out in it; 2,375 and 2,505 run), and the search,
/// which starts at the profile's answer, stops below the hole.
#[test]
fn plan_exact_answers_with_transformers_allocation_sequence() {
    let home = temp();
    let args = [
        "plan",
        "--model",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "-b",
        "32",
        "-n",
        "64",
        "-p",
        "2506",
        "--vram",
        "6GiB",
        "--json",
    ];
    let profile = run(home.path(), &args);
    let v: serde_json::Value = serde_json::from_str(&profile.stdout).expect("json");
    assert_eq!(
        v["budget"]["max_prompt_tokens"], 2412,
        "the profile's answer: {v}"
    );
    let mut exact_args = args.to_vec();
    exact_args.push("--exact");
    let exact = run(home.path(), &exact_args);
    let v: serde_json::Value = serde_json::from_str(&exact.stdout).expect("json");
    assert_eq!(exact.code, 1, "{v}");
    assert_eq!(v["verdict"]["cause"], "concurrency", "{v}");
    let budget = v["budget"]["max_prompt_tokens"].as_u64().unwrap_or(0);
    assert!((2255..=2505).contains(&budget), "{v}");
    assert_eq!(v["budget"]["fits"], false, "{v}");
    assert!(
        v["notes"].as_array().is_some_and(|n| n
            .iter()
            .any(|s| s.as_str().is_some_and(|s| s.starts_with("--exact")))),
        "{v}"
    );
}
