//! Qwen3-VL (qwen3 / qwen3_moe text, vision tower) and Qwen3.5 / Qwen3.6 (Gated DeltaNet + gated
//! full attention, dense or MoE, vision tower) against transformers' own parameter counts: the
//! presets' counts written down, and — with a Python that has transformers — every config here
//! built on the meta device and counted. Qwen3-VL needs LLM_OOM_TEST_PYTHON (transformers 5.17
//! knows it); Qwen3.5 needs transformers ≥ 5.2x, named by LLM_OOM_TEST_PYTHON_TF525 (an
//! interpreter, or a script that runs one with such a transformers on its path).

mod util;

use std::ffi::OsStr;
use std::path::Path;

use llm_oom::dtype::KvDtype;
use llm_oom::estimate::{kv_bytes_per_token, state_bytes, CachePolicy, Engine};
use llm_oom::model::config::parse_config;
use llm_oom::model::presets;
use util::{temp, write};

fn preset(id: &str) -> llm_oom::model::Spec {
    let (id, json) = presets::find(id).unwrap();
    presets::load(id, json).unwrap()
}

fn ours(json: &str) -> u64 {
    parse_config(json, Path::new("config.json"), "m")
        .unwrap_or_else(|e| panic!("{e}"))
        .parameters()
}

#[test]
fn qwen3_vl_30b_a3b_is_transformers_count_with_its_vision_tower() {
    // `sum(p.numel() for p in Qwen3VLMoeForConditionalGeneration(cfg).parameters())` on the meta
    // device, transformers 5.17 and 5.25 alike: text 30,532,122,624 + vision 538,631,408.
    let s = preset("Qwen/Qwen3-VL-30B-A3B-Instruct");
    assert_eq!(s.parameters(), 31_070_754_032);
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("vision tower (27 layers, 538,631,408 parameters)")),
        "{:?}",
        s.notes
    );
}

#[test]
fn qwen3_vl_caches_keys_and_values_in_all_48_layers() {
    let s = preset("Qwen/Qwen3-VL-30B-A3B-Instruct");
    // 48 layers × (K + V) × 4 KV heads × 128 × 2 bytes.
    assert_eq!(kv_bytes_per_token(&s, KvDtype::Bf16), 48 * 2 * 4 * 128 * 2);
}

#[test]
fn qwen3_5_35b_a3b_is_transformers_count_with_its_vision_tower() {
    // transformers 5.25, meta device: text 34,660,610,688 (the published text-decoder count)
    // + vision 446,571,248 (Qwen3-VL's tower without DeepStack).
    let s = preset("Qwen/Qwen3.5-35B-A3B");
    assert_eq!(s.parameters(), 35_107_181_936);
}

#[test]
fn qwen3_5_caches_keys_and_values_only_in_its_10_full_attention_layers() {
    let s = preset("Qwen/Qwen3.5-35B-A3B");
    // layers 3, 7, …, 39: 10 × (K + V) × 2 KV heads × 256 × 2 bytes.
    assert_eq!(kv_bytes_per_token(&s, KvDtype::Bf16), 10 * 2 * 2 * 256 * 2);
    // The other 30 keep a DeltaNet state: conv (2·16·128 + 32·128) × 4 and 32 × 128 × 128.
    let t = CachePolicy::of(Engine::Transformers);
    assert_eq!(
        state_bytes(&s, KvDtype::Bf16, t),
        30 * ((2 * 16 * 128 + 32 * 128) * 4 + 32 * 128 * 128) * 2
    );
}

/// Small configs of each shape: dense and MoE, text-only and wrapped, tied both ways.
const QWEN3_VL: &[(&str, &str)] = &[(
    "qwen3_vl dense, DeepStack at two layers, tied by the wrapper",
    r#"{"architectures":["Qwen3VLForConditionalGeneration"],"model_type":"qwen3_vl","tie_word_embeddings":true,
 "text_config":{"model_type":"qwen3_vl_text","hidden_size":64,"intermediate_size":96,"num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"vocab_size":300,"tie_word_embeddings":false},
 "vision_config":{"depth":3,"hidden_size":32,"intermediate_size":48,"num_heads":2,"out_hidden_size":64,"num_position_embeddings":64,"patch_size":4,"spatial_merge_size":2,"temporal_patch_size":2,"deepstack_visual_indexes":[0,2]}}"#,
)];

const QWEN3_5: &[(&str, &str)] = &[
    (
        "qwen3_5_text dense, tied, full attention every 3rd layer",
        r#"{"architectures":["Qwen3_5ForCausalLM"],"model_type":"qwen3_5_text","hidden_size":64,"intermediate_size":96,"num_hidden_layers":6,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,"vocab_size":300,"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":16,"linear_value_head_dim":24,"linear_conv_kernel_dim":3,"full_attention_interval":3,"tie_word_embeddings":true}"#,
    ),
    (
        "qwen3_5 wrapper, untied by the wrapper whatever text_config says",
        r#"{"architectures":["Qwen3_5ForConditionalGeneration"],"model_type":"qwen3_5","tie_word_embeddings":false,
 "text_config":{"model_type":"qwen3_5_text","hidden_size":64,"intermediate_size":96,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":1,"head_dim":16,"vocab_size":300,"linear_num_key_heads":2,"linear_num_value_heads":2,"linear_key_head_dim":16,"linear_value_head_dim":16,"layer_types":["linear_attention","full_attention","linear_attention","full_attention"],"tie_word_embeddings":true},
 "vision_config":{"depth":2,"hidden_size":32,"intermediate_size":48,"num_heads":2,"out_hidden_size":64,"num_position_embeddings":64,"patch_size":4,"spatial_merge_size":2,"temporal_patch_size":2}}"#,
    ),
    (
        "qwen3_5_moe_text: experts in every layer, mlp_only_layers and decoder_sparse_step ignored",
        r#"{"architectures":["Qwen3_5MoeForCausalLM"],"model_type":"qwen3_5_moe_text","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"vocab_size":300,"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":16,"linear_value_head_dim":16,"num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":32,"shared_expert_intermediate_size":48,"mlp_only_layers":[1],"decoder_sparse_step":2,"mamba_ssm_dtype":"float32"}"#,
    ),
];

/// What transformers builds from `config` on the meta device, counted.
const META_COUNT: &str = r#"
import json, sys, torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText
d = json.load(open(sys.argv[1]))
cfg = AutoConfig.for_model(**d)
auto = AutoModelForImageTextToText if "vision_config" in d else AutoModelForCausalLM
with torch.device("meta"):
    model = auto.from_config(cfg)
print(sum(p.numel() for p in model.parameters()))
"#;

fn meta_count(python: &OsStr, dir: &Path, name: &str, json: &str) -> u64 {
    let script = write(&dir.join("meta_count.py"), META_COUNT);
    let config = write(&dir.join(format!("{name}.json")), json);
    let out = std::process::Command::new(python)
        .arg(&script)
        .arg(&config)
        .output()
        .expect("python runs");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

fn against_transformers(var: &str, configs: &[(&str, &str)], presets_: &[&str]) {
    let Some(python) = std::env::var_os(var) else {
        eprintln!("{var} is not set: these counts are not checked against transformers here");
        return;
    };
    let home = temp();
    for (i, (what, json)) in configs.iter().enumerate() {
        let real = meta_count(&python, home.path(), &format!("c{i}"), json);
        assert_eq!(ours(json), real, "{what}");
    }
    for id in presets_ {
        let (_, json) = presets::find(id).unwrap();
        let real = meta_count(&python, home.path(), "preset", json);
        assert_eq!(preset(id).parameters(), real, "{id}");
    }
}

#[test]
fn qwen3_vl_counts_are_transformers_meta_device_counts() {
    against_transformers(
        "LLM_OOM_TEST_PYTHON",
        QWEN3_VL,
        &["Qwen/Qwen3-VL-30B-A3B-Instruct"],
    );
}

#[test]
fn qwen3_5_counts_are_transformers_5_25_meta_device_counts() {
    against_transformers(
        "LLM_OOM_TEST_PYTHON_TF525",
        QWEN3_5,
        &["Qwen/Qwen3.5-35B-A3B"],
    );
}
