//! Sizes past what a real model or card has, through the binary: each one used to print a
//! wrong answer (FITS from a wrapped sum, 0 B from a wrapped product), hang, or panic; now it is
//! exit 2 with the bound named, or an honest verdict.

mod util;

use util::{gguf_header, json, run, temp, write};

#[test]
fn a_prompt_past_the_ceiling_is_refused_not_planned_as_fitting() {
    let home = temp();
    // This printed "✓ FITS — peak 18.3 GiB": the paged KV cache saturated and then wrapped.
    let r = run(
        home.path(),
        &[
            "plan",
            "--engine",
            "vllm",
            "--prompt-tokens",
            "140737488355327",
            "--model",
            "mistralai/Mistral-7B-Instruct-v0.2",
            "--vram",
            "24GiB",
        ],
    );
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("--prompt-tokens = 140737488355327"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("ceiling of 10,000,000"), "{}", r.stderr);
    assert_eq!(r.stderr.trim().lines().count(), 1);
    for (flag, v) in [
        ("--batch", "65537"),
        ("--max-new-tokens", "10000001"),
        ("--vram", "2048TiB"),
    ] {
        let r = run(home.path(), &["plan", flag, v]);
        assert_eq!(r.code, 2, "{flag} {v}: {}", r.stderr);
        assert!(r.stderr.contains("ceiling"), "{flag}: {}", r.stderr);
    }
    let r = run(home.path(), &["plan", "--vram", "24B"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("floor of 64 MiB"), "{}", r.stderr);
}

const MOE: &str = r#"{"model_type":"mixtral","hidden_size":HIDDEN,"intermediate_size":INTER,"num_hidden_layers":LAYERS,
"num_attention_heads":HEADS,"num_key_value_heads":8,"vocab_size":32000,"num_local_experts":EXPERTS,"num_experts_per_tok":2,
"max_position_embeddings":32768}"#;

fn moe(hidden: u64, inter: u64, layers: u64, heads: u64, experts: u64) -> String {
    MOE.replace("HIDDEN", &hidden.to_string())
        .replace("INTER", &inter.to_string())
        .replace("LAYERS", &layers.to_string())
        .replace("HEADS", &heads.to_string())
        .replace("EXPERTS", &experts.to_string())
}

#[test]
fn huge_counts_in_a_config_are_refused_by_name_or_never_fit() {
    let home = temp();
    let plan = |cfg: &str, name: &str| {
        let path = write(&home.path().join(name).join("config.json"), cfg);
        run(
            home.path(),
            &[
                "plan",
                "--model",
                path.to_str().unwrap(),
                "--vram",
                "80GiB",
                "--json",
            ],
        )
    };
    // Past a ceiling: refused with the field and the bound.
    for (cfg, field) in [
        (moe(4096, 14336, 32, 32, 1 << 40), "num_local_experts"),
        (moe(4096, 14336, 1 << 62, 32, 8), "num_hidden_layers"),
        (moe(4096, 14336, 32, 1 << 33, 8), "num_attention_heads"),
        (moe(1 << 33, 14336, 32, 32, 8), "hidden_size"),
    ] {
        let r = plan(&cfg, field);
        assert_eq!(r.code, 2, "{field}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains(field) && r.stderr.contains("ceiling"),
            "{}",
            r.stderr
        );
    }
    // Zero active experts, or more than there are, planned as FITS before.
    for (active, name) in [(0, "active0"), (9, "active9")] {
        let cfg = moe(4096, 14336, 32, 32, 8).replace(
            r#""num_experts_per_tok":2"#,
            &format!(r#""num_experts_per_tok":{active}"#),
        );
        let r = plan(&cfg, name);
        assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains("num_experts_per_tok"), "{}", r.stderr);
    }
    // Within every per-field ceiling, but the bytes pass 64 bits: this came out as FITS with 0 B
    // weights. Now the parameter bound (model::layout, 10^15) refuses it by its largest field.
    let r = plan(&moe(1 << 20, 1 << 20, 65_536, 64, 65_536), "wide");
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("10^15 parameters"), "{}", r.stderr);
    // Below that bound a model that cannot fit is WOULD OOM on weights, never FITS.
    let r = plan(&moe(16_384, 65_536, 256, 64, 64), "big");
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let j = json(&r.stdout);
    assert_eq!(j["verdict"]["cause"], "weights");
    assert!(j["weights_bytes"].as_u64().unwrap() > 80 << 30);
}

#[test]
fn gguf_headers_with_impossible_numbers_are_refused() {
    let home = temp();
    let base: Vec<(String, u64)> = [
        ("llama.block_count", 2u64),
        ("llama.embedding_length", 64),
        ("llama.feed_forward_length", 128),
        ("llama.attention.head_count", 4),
        ("llama.vocab_size", 100),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), *v))
    .collect();
    let plan = |name: &str, meta: &[(String, u64)], tensors: &[(String, Vec<u64>, u32)]| {
        let path = home.path().join(name);
        std::fs::write(&path, gguf_header(meta, tensors)).unwrap();
        run(
            home.path(),
            &[
                "plan",
                "--model",
                path.to_str().unwrap(),
                "--vram",
                "24GiB",
                "--json",
            ],
        )
    };
    // 2^33 × 2^33 elements wrapped to 0 bytes and planned as FITS.
    let huge = vec![("blk.0.ffn_up.weight".to_string(), vec![1 << 33, 1 << 33], 0)];
    let r = plan("dims.gguf", &base, &huge);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("2^44 elements"), "{}", r.stderr);
    // A huge expert count.
    let mut meta = base.clone();
    meta.push(("llama.expert_count".into(), 1 << 40));
    let r = plan("experts.gguf", &meta, &[]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("llama.expert_count") && r.stderr.contains("ceiling"),
        "{}",
        r.stderr
    );
    // general.alignment 0 panicked inside candle's reader (a division by zero).
    let mut meta = base.clone();
    meta.push(("general.alignment".into(), 0));
    let r = plan("align.gguf", &meta, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("general.alignment"), "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"));
    // diagnose reads the same file through the runtime's loader: refused too, never a panic.
    let path = home.path().join("align.gguf");
    let r = run(
        home.path(),
        &[
            "diagnose",
            "--model",
            path.to_str().unwrap(),
            "--engine",
            "candle",
            "--device",
            "cpu",
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

#[test]
fn a_gguf_without_engine_is_planned_as_llama_cpp() {
    let home = temp();
    let meta: Vec<(String, u64)> = [
        ("llama.block_count", 2u64),
        ("llama.embedding_length", 64),
        ("llama.feed_forward_length", 128),
        ("llama.attention.head_count", 4),
        ("llama.vocab_size", 100),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), *v))
    .collect();
    let path = home.path().join("m.Q4_K_M.gguf");
    let tensors = vec![("token_embd.weight".to_string(), vec![64, 100], 0)];
    std::fs::write(&path, gguf_header(&meta, &tensors)).unwrap();
    let p = path.to_str().unwrap();
    let r = run(
        home.path(),
        &["plan", "--model", p, "--vram", "8GiB", "--json"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json(&r.stdout);
    assert_eq!(j["engine"]["name"], "llama.cpp");
    assert!(!r.stdout.contains("as asked"));
    // Asked for explicitly, transformers it is, and the note says so.
    let r = run(
        home.path(),
        &[
            "plan",
            "--model",
            p,
            "--vram",
            "8GiB",
            "--engine",
            "transformers",
            "--json",
        ],
    );
    let j = json(&r.stdout);
    assert_eq!(j["engine"]["name"], "transformers");
    assert!(r.stdout.contains("as asked"));
}

#[test]
fn the_margin_does_not_grow_with_a_huge_host() {
    let home = temp();
    let r = run(
        home.path(),
        &[
            "plan",
            "--model",
            "mistralai/Mistral-7B-Instruct-v0.2",
            "--vram",
            "1536GiB",
            "--json",
        ],
    );
    assert_eq!(r.code, 0);
    let j = json(&r.stdout);
    let margin = j["components"]["margin"].as_u64().unwrap();
    assert!(margin <= 4 << 30, "{margin}");
    // A 7B at 2k tokens: about 15 GiB, not the 45 GiB "peak" a 2 % margin of 1.5 TiB gave.
    assert!(j["budget"]["peak_bytes"].as_u64().unwrap() < 21 << 30);
}

#[test]
fn help_and_hints_say_what_is_true() {
    let home = temp();
    let diagnose = run(home.path(), &["diagnose", "--help"]).stdout;
    assert!(
        diagnose.contains("HuggingFaceTB/SmolLM2-135M-Instruct"),
        "{diagnose}"
    );
    assert!(
        !diagnose.contains("Qwen/Qwen2.5-0.5B-Instruct"),
        "{diagnose}"
    );
    let plan = run(home.path(), &["plan", "--help"]).stdout;
    assert!(!plan.contains("explain: none"), "{plan}");
    assert!(plan.contains("[default: Qwen/Qwen2.5-0.5B-Instruct]"));
    let explain = run(home.path(), &["explain", "--help"]).stdout;
    assert!(explain.contains("[default: none"), "{explain}");
    // Every dtype the help and the error offer is accepted.
    let bad = run(home.path(), &["plan", "--dtype", "fp9"]).stderr;
    let offered = bad.split("use one of ").nth(1).unwrap_or("");
    for d in offered.trim().split(", ") {
        let r = run(home.path(), &["plan", "--dtype", d, "--vram", "24GiB"]);
        assert!(r.code == 0 || r.code == 1, "--dtype {d}: {}", r.stderr);
    }
    // Without HF_HUB_OFFLINE the hint does not tell the user to unset it.
    let r = util::llm_oom(home.path())
        .env_remove("HF_HUB_OFFLINE")
        .args(["plan", "--model", "no-slash-model"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2));
    assert!(
        !err.contains("HF_HUB_OFFLINE") && err.contains("owner/name"),
        "{err}"
    );
    let r = run(home.path(), &["plan", "--model", "no-slash-model"]);
    assert!(r.stderr.contains("unset HF_HUB_OFFLINE"));
    // Two output formats at once.
    assert_eq!(run(home.path(), &["plan", "--json", "--markdown"]).code, 2);
    assert_eq!(run(home.path(), &["plan", "--vram", "24"]).code, 2);
}
