//! What transformers' own `generate()` keeps in its cache, against what `plan --engine
//! transformers` says one token costs: the real transformers (the CPU is enough — the cache's
//! shapes do not depend on the device) through `scripts/gpu/cache-real.py`, on small configs of
//! each attention kind. Needs LLM_OOM_TEST_PYTHON (`.ci/run` installs torch and transformers).

mod util;

use serde_json::Value;
use util::{llm_oom, temp, write};

const LLAMA_GQA: &str = r#"{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,
"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
"vocab_size":256,"max_position_embeddings":2048,"torch_dtype":"bfloat16","rms_norm_eps":1e-5}"#;

/// MLA with an MoE block: the latent (kv_lora_rank 32 + rope 16) is what transformers 5.17 caches.
const DEEPSEEK_V2: &str = r#"{"architectures":["DeepseekV2ForCausalLM"],"model_type":"deepseek_v2",
"hidden_size":64,"intermediate_size":128,"moe_intermediate_size":32,"num_hidden_layers":2,
"num_attention_heads":4,"num_key_value_heads":4,"n_routed_experts":4,"n_shared_experts":1,
"num_experts_per_tok":2,"first_k_dense_replace":1,"moe_layer_freq":1,"kv_lora_rank":32,
"q_lora_rank":null,"qk_rope_head_dim":16,"qk_nope_head_dim":16,"v_head_dim":16,"vocab_size":256,
"max_position_embeddings":2048,"torch_dtype":"bfloat16","tie_word_embeddings":false,
"topk_method":"greedy","n_group":1,"topk_group":1,"routed_scaling_factor":1.0,
"norm_topk_prob":false,"rms_norm_eps":1e-6}"#;

const QWEN2: &str = r#"{"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","hidden_size":64,
"intermediate_size":128,"num_hidden_layers":3,"num_attention_heads":8,"num_key_value_heads":1,
"vocab_size":256,"max_position_embeddings":2048,"torch_dtype":"bfloat16","rms_norm_eps":1e-6,
"use_sliding_window":false}"#;

/// Bytes per token transformers' cache grew by between two prompt lengths.
fn measured_per_token(python: &std::ffi::OsStr, config: &std::path::Path) -> u64 {
    let out = std::process::Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/gpu/cache-real.py"
        ))
        .arg(config)
        .args(["--lengths", "32", "96", "--device", "cpu"])
        .output()
        .expect("python runs");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let bytes = |i: usize| v["runs"][i]["cache_bytes"].as_u64().expect("cache_bytes");
    (bytes(1) - bytes(0)) / 64
}

#[test]
fn plans_kv_bytes_per_token_are_what_transformers_generate_keeps() {
    let Some(python) = std::env::var_os("LLM_OOM_TEST_PYTHON") else {
        eprintln!("LLM_OOM_TEST_PYTHON is not set: transformers' cache is not measured here");
        return;
    };
    let home = temp();
    for (name, json) in [
        ("llama", LLAMA_GQA),
        ("deepseek_v2", DEEPSEEK_V2),
        ("qwen2", QWEN2),
    ] {
        let config = write(&home.path().join(name).join("config.json"), json);
        let real = measured_per_token(&python, &config);
        let out = llm_oom(home.path())
            .args(["plan", "--engine", "transformers", "--json", "--model"])
            .arg(&config)
            .output()
            .expect("runs");
        let plan: Value = serde_json::from_slice(&out.stdout).expect("plan json");
        assert_eq!(
            plan["kv_cache_bytes_per_token"].as_u64(),
            Some(real),
            "{name}: transformers kept {real} B per token"
        );
    }
}
