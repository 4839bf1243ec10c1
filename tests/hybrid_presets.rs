//! Falcon-H1 and Granite-4.0-H presets against transformers' own parameter count, the fields a
//! hybrid's config may carry that llm-oom refuses rather than guesses, and layer counts no model
//! has (2^62) answered at once with exit code 2 naming the bound.

mod util;

use std::path::Path;

use llm_oom::dtype::KvDtype;
use llm_oom::estimate::{kv_bytes_per_token, state_bytes, CachePolicy, Engine};
use llm_oom::model::config::parse_config;
use llm_oom::model::presets;
use util::{run, temp, write};

fn preset(id: &str) -> llm_oom::model::Spec {
    let (id, json) = presets::find(id).unwrap();
    presets::load(id, json).unwrap()
}

#[test]
fn falcon_h1_and_granite_h_match_transformers_parameter_counts() {
    // `sum(t.numel() for t in AutoModelForCausalLM.from_config(cfg).parameters())` on the meta
    // device, transformers 5.17 (docs/models.md shows the command).
    assert_eq!(
        preset("tiiuae/Falcon-H1-7B-Instruct").parameters(),
        7_585_513_568
    );
    assert_eq!(
        preset("ibm-granite/granite-4.0-h-tiny").parameters(),
        6_939_037_248
    );
}

#[test]
fn falcon_h1_caches_in_every_layer_and_granite_only_in_its_four_attention_layers() {
    let f = preset("tiiuae/Falcon-H1-7B-Instruct");
    // 44 layers × (K + V) × 2 kv heads × 128 × 2 bytes.
    assert_eq!(kv_bytes_per_token(&f, KvDtype::Bf16), 44 * 2 * 2 * 128 * 2);
    let g = preset("ibm-granite/granite-4.0-h-tiny");
    assert_eq!(kv_bytes_per_token(&g, KvDtype::Bf16), 4 * 2 * 4 * 128 * 2);
    // 36 Mamba-2 layers: conv (3072 + 2·128) × 4 and 48 heads × 64 × 128 of state, bf16.
    let t = CachePolicy::of(Engine::Transformers);
    assert_eq!(
        state_bytes(&g, KvDtype::Bf16, t),
        36 * ((3072 + 256) * 4 + 48 * 64 * 128) * 2
    );
}

#[test]
fn a_mamba_head_width_that_does_not_divide_the_mixer_is_refused() {
    let (_, json) = presets::find("tiiuae/Falcon-H1-7B-Instruct").unwrap();
    let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["mamba_d_head"] = 100.into();
    let e = parse_config(&v.to_string(), Path::new("config.json"), "m").unwrap_err();
    assert!(e.to_string().contains("mamba_d_head"), "{e}");
}

#[test]
fn two_to_the_62_layers_exit_2_at_once_naming_the_bound() {
    let home = temp();
    for id in [
        "meta-llama/Llama-2-7b-hf",
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "deepseek-ai/DeepSeek-V3",
        "ai21labs/Jamba-v0.1",
        "google/gemma-3-27b-it",
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    ] {
        let (_, json) = presets::find(id).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
        let cfg = if v.get("text_config").is_some() {
            &mut v["text_config"]
        } else {
            &mut v
        };
        cfg["num_hidden_layers"] = (1u64 << 62).into();
        // Layer-pattern lists must keep their length; drop them so the count alone decides.
        if let Some(o) = cfg.as_object_mut() {
            o.remove("layer_types");
            o.remove("no_rope_layers");
        }
        let path = write(
            &home.path().join(format!("{}.json", id.replace('/', "_"))),
            &v.to_string(),
        );
        let r = run(
            home.path(),
            &["plan", "--model", path.to_str().unwrap(), "--vram", "24GB"],
        );
        assert_eq!(r.code, 2, "{id}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains("10^15") && r.stderr.contains("num_hidden_layers"),
            "{id}: {}",
            r.stderr
        );
    }
}
