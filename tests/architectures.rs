//! Architectures beyond the uniform llama block, sized from their published configs: parameter
//! counts against the model cards, KV cache per engine for MLA, sliding and state-space layers,
//! quantized checkpoints, and the refusal of configs llm-oom would misread.

use std::path::Path;

use llm_oom::dtype::{KvDtype, WeightDtype};
use llm_oom::error::InputError;
use llm_oom::estimate::{
    kv_bytes_in, kv_bytes_per_token, kv_bytes_per_token_at, state_bytes, weight_bytes, CachePolicy,
    Engine,
};
use llm_oom::model::config::parse_config;
use llm_oom::model::{presets, Spec, TensorGroup};

fn preset(id: &str) -> Spec {
    let (id, json) = presets::find(id).unwrap_or_else(|| panic!("no preset {id}"));
    presets::load(id, json).unwrap_or_else(|e| panic!("{id}: {e}"))
}

fn parse(json: &str) -> Result<Spec, InputError> {
    parse_config(json, Path::new("config.json"), "m")
}

fn within(ours: u64, card: f64, tolerance: f64) -> bool {
    (ours as f64 / card - 1.0).abs() <= tolerance
}

#[test]
fn deepseek_v3_is_671b_and_v2_lite_is_15_7b() {
    let v3 = preset("deepseek-ai/DeepSeek-V3").parameters();
    assert!(within(v3, 671e9, 0.002), "DeepSeek-V3: {v3}");
    let lite = preset("deepseek-ai/DeepSeek-V2-Lite").parameters();
    assert!(within(lite, 15.7e9, 0.002), "DeepSeek-V2-Lite: {lite}");
    // R1 is V3's shape.
    assert_eq!(preset("deepseek-ai/DeepSeek-R1").parameters(), v3);
}

#[test]
fn every_new_preset_is_within_one_percent_of_its_card() {
    for (id, card) in [
        ("openai/gpt-oss-20b", 21e9),
        ("openai/gpt-oss-120b", 117e9),
        ("ai21labs/Jamba-v0.1", 52e9),
        ("Qwen/Qwen3-Next-80B-A3B-Instruct", 80e9),
        ("Qwen/Qwen3-235B-A22B", 235e9),
        ("microsoft/Phi-3.5-MoE-instruct", 41.9e9),
        ("meta-llama/Llama-3.3-70B-Instruct", 70.6e9),
    ] {
        let p = preset(id).parameters();
        assert!(within(p, card, 0.01), "{id}: {p} vs {card}");
    }
    // Cards that state the exact count.
    assert_eq!(
        preset("mistralai/Mamba-Codestral-7B-v0.1").parameters(),
        7_285_403_648
    );
    assert_eq!(
        preset("Qwen/Qwen3-Next-80B-A3B-Instruct").parameters(),
        79_674_391_296
    );
    // Gemma-3-27B-it: the card's 27 B is the text model (27,009,346,304); the SigLIP tower and
    // projector (423,060,336) are counted too, as transformers 5.17 builds them.
    assert_eq!(preset("google/gemma-3-27b-it").parameters(), 27_432_406_640);
    // Llama-4-Scout's "109B total" includes its vision tower, which is counted.
    let scout = preset("meta-llama/Llama-4-Scout-17B-16E-Instruct");
    assert!(within(scout.parameters(), 108.9e9, 0.01));
    assert!(scout.notes.iter().any(|n| n.contains("the vision tower")));
}

#[test]
fn jamba_caches_keys_and_values_only_in_its_attention_layers() {
    let j = preset("ai21labs/Jamba-v0.1");
    // 4 of 32 layers attend: 4 × (K + V) × 8 kv heads × 128 × 2 bytes.
    assert_eq!(kv_bytes_per_token(&j, KvDtype::Bf16), 4 * 2 * 1024 * 2);
    // The 28 Mamba layers keep inner × (d_conv + d_state) per sequence, whatever the length.
    let t = CachePolicy::of(Engine::Transformers);
    let state = state_bytes(&j, KvDtype::Bf16, t);
    assert_eq!(state, 28 * 8192 * (4 + 16) * 2);
    let at = |n| kv_bytes_in(&j, KvDtype::Bf16, n, 1, t);
    assert_eq!(at(0), state);
    assert_eq!(at(10_000) - at(0), 10_000 * 16_384);
    // Mamba-2 has no KV cache at all, only its state.
    let m = preset("mistralai/Mamba-Codestral-7B-v0.1");
    assert_eq!(kv_bytes_per_token(&m, KvDtype::Bf16), 0);
    assert_eq!(
        kv_bytes_in(&m, KvDtype::Bf16, 100_000, 2, t),
        2 * kv_bytes_in(&m, KvDtype::Bf16, 1, 1, t)
    );
}

#[test]
fn gemma3_published_text_config_takes_transformers_defaults() {
    // google/gemma-3-12b-it: its text_config names neither vocab_size nor head_dim.
    let s = parse(
        r#"{"architectures":["Gemma3ForConditionalGeneration"],"model_type":"gemma3",
        "text_config":{"hidden_size":3840,"intermediate_size":15360,"model_type":"gemma3_text",
        "num_attention_heads":16,"num_hidden_layers":48,"num_key_value_heads":8,
        "rope_scaling":{"factor":8.0,"rope_type":"linear"},"sliding_window":1024},
        "vision_config":{"hidden_size":1152,"model_type":"siglip_vision_model"}}"#,
    )
    .unwrap();
    assert_eq!((s.vocab_size, s.head_dim), (262_208, 256));
    // 5 local layers to each global one.
    assert_eq!((s.sliding_layers, s.sliding_window), (40, Some(1024)));
    assert!(s.tie_word_embeddings);
    // The 27B preset is the published nested config.
    let g = preset("google/gemma-3-27b-it");
    assert_eq!(
        (g.vocab_size, g.head_dim, g.sliding_layers),
        (262_208, 128, 52)
    );
}

#[test]
fn fields_no_reader_models_are_refused_naming_the_field() {
    let base = r#""hidden_size":64,"intermediate_size":128,"num_hidden_layers":4,"num_attention_heads":4,"vocab_size":10"#;
    for (extra, field) in [
        (r#""model_type":"llama","kv_lora_rank":512"#, "kv_lora_rank"),
        (
            r#""model_type":"mistral","mamba_d_state":16"#,
            "mamba_d_state",
        ),
        (
            r#""model_type":"mixtral","num_local_experts":8,"attn_layer_period":8"#,
            "attn_layer_period",
        ),
        (
            r#""model_type":"qwen3","linear_num_value_heads":32"#,
            "linear_num_value_heads",
        ),
        (
            r#""model_type":"qwen3","sliding_window":8,"layer_types":["linear_attention","full_attention","full_attention","full_attention"]"#,
            "layer_types",
        ),
    ] {
        let json = format!("{{{extra},{base}}}");
        match parse(&json) {
            Err(InputError::BadField { field: f, .. }) => assert_eq!(f, field, "{json}"),
            other => panic!("{json} was not refused: {other:?}"),
        }
    }
    // An unknown model_type is not sized as llama.
    let unknown =
        format!(r#"{{"model_type":"zamba2","architectures":["Zamba2ForCausalLM"],{base}}}"#);
    assert!(matches!(
        parse(&unknown),
        Err(InputError::UnknownArchitecture { .. })
    ));
    // A hybrid whose layer_types name a mixer the reader does not know.
    let granite = r#"{"model_type":"granitemoehybrid","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
        "vocab_size":10,"shared_intermediate_size":32,"layer_types":["mamba","cross_attention"]}"#;
    assert!(matches!(parse(granite), Err(InputError::BadField { .. })));
}

#[test]
fn mla_caches_the_latent_in_vllm_transformers_and_llama_cpp() {
    let v3 = preset("deepseek-ai/DeepSeek-V3");
    let per = |e| kv_bytes_per_token_at(&v3, KvDtype::Bf16, CachePolicy::of(e), 0);
    // vLLM: (kv_lora_rank 512 + rope 64) × 61 layers × 2 bytes.
    assert_eq!(per(Engine::Vllm), 61 * 576 * 2);
    // llama.cpp: that latent as K plus kv_lora_rank as V.
    assert_eq!(per(Engine::LlamaCpp), 61 * (576 + 512) * 2);
    // transformers 5.17: the latent too (k_nope 512 + k_rot 64 as one head; measured through
    // generate() by tests/transformers_cache.rs).
    assert_eq!(per(Engine::Transformers), 61 * 576 * 2);
    // The bound every engine stays under: 128 heads × (128 + 64) for K and 128 × 128 for V.
    assert_eq!(
        kv_bytes_per_token(&v3, KvDtype::Bf16),
        61 * (128 * 192 + 128 * 128) * 2
    );
    // V2-Lite likewise, 27 layers of 16 heads.
    let lite = preset("deepseek-ai/DeepSeek-V2-Lite");
    assert_eq!(
        kv_bytes_per_token_at(&lite, KvDtype::Bf16, CachePolicy::of(Engine::Vllm), 0),
        27 * 576 * 2
    );
}

#[test]
fn sliding_layers_stop_growing_in_vllm_but_not_in_transformers() {
    let g = preset("openai/gpt-oss-20b");
    let (vllm, hf) = (
        CachePolicy::of(Engine::Vllm),
        CachePolicy::of(Engine::Transformers),
    );
    let row = 2 * 8 * 64 * 2; // K + V, 8 kv heads × 64, bf16
                              // Under the 128-token window every layer grows; past it only the 12 full layers do in vLLM.
    assert_eq!(
        kv_bytes_per_token_at(&g, KvDtype::Bf16, vllm, 100),
        24 * row
    );
    assert_eq!(
        kv_bytes_per_token_at(&g, KvDtype::Bf16, vllm, 128),
        12 * row
    );
    assert_eq!(kv_bytes_per_token_at(&g, KvDtype::Bf16, hf, 128), 24 * row);
    let grow = |p| {
        kv_bytes_in(&g, KvDtype::Bf16, 20_000, 1, p) - kv_bytes_in(&g, KvDtype::Bf16, 10_000, 1, p)
    };
    assert_eq!(grow(vllm), 10_000 * 12 * row);
    assert_eq!(grow(hf), 10_000 * 24 * row);
    // Llama-4's chunked layers: 36 of 48 keep at most 8,192 tokens in vLLM.
    let scout = preset("meta-llama/Llama-4-Scout-17B-16E-Instruct");
    assert_eq!(
        kv_bytes_per_token_at(&scout, KvDtype::Bf16, vllm, 8192),
        12 * 2 * 1024 * 2
    );
}

fn split(spec: &Spec, f: impl Fn(&TensorGroup) -> bool) -> (u64, u64) {
    let (a, b): (Vec<_>, Vec<_>) = spec.tensors().into_iter().partition(|t| f(t));
    let p = |v: Vec<TensorGroup>| v.iter().map(TensorGroup::params).sum::<u64>();
    (p(a), p(b))
}

#[test]
fn quantized_checkpoints_are_priced_from_their_quantization_config() {
    // gpt-oss: MXFP4 experts (17 bytes per 32 weights), everything else bf16.
    let g = preset("openai/gpt-oss-20b");
    assert_eq!(g.native_dtype, WeightDtype::Mxfp4);
    let (experts, rest) = split(&g, |t| t.routed);
    assert_eq!(
        weight_bytes(&g, g.native_dtype),
        experts / 32 * 17 + 2 * rest
    );
    // DeepSeek-V3: FP8 with an f32 scale per 128×128 block; just over a byte per weight.
    let v3 = preset("deepseek-ai/DeepSeek-V3");
    let per_weight = weight_bytes(&v3, v3.native_dtype) as f64 / v3.parameters() as f64;
    assert!((1.0..1.01).contains(&per_weight), "{per_weight}");

    let cfg = |q: &str| {
        parse(&format!(
            r#"{{"model_type":"llama","hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,
            "num_attention_heads":4,"vocab_size":1000,"quantization_config":{q}}}"#
        ))
        .unwrap()
    };
    let dense = |s: &Spec| split(s, |t| t.role.is_linear());
    // fbgemm FP8, per output channel: one byte per weight + 4 per row; ignore keeps lm_head.
    let fp8 = cfg(r#"{"quant_method":"fbgemm_fp8","modules_to_not_convert":["lm_head"]}"#);
    let rows: u64 = fp8
        .tensors()
        .iter()
        .filter(|t| t.role.is_linear())
        .map(|t| t.rows * t.count)
        .sum();
    let (linear, other) = dense(&fp8);
    assert_eq!(
        weight_bytes(&fp8, fp8.native_dtype),
        linear + 4 * rows + 2 * other
    );
    // NVFP4 (ModelOpt): 9 bytes per 16 weights + 8 per tensor; attention kept by `ignore`.
    let nv = cfg(
        r#"{"quant_method":"modelopt","quant_algo":"NVFP4","ignore":["model.layers.*.self_attn*"]}"#,
    );
    let (mlp, rest) = split(&nv, |t| {
        t.role.is_linear() && !format!("{:?}", t.role).starts_with("Attn")
    });
    let tensors = nv
        .tensors()
        .iter()
        .filter(|t| t.role.is_linear() && !format!("{:?}", t.role).starts_with("Attn"))
        .map(|t| t.count)
        .sum::<u64>();
    assert_eq!(
        weight_bytes(&nv, nv.native_dtype),
        mlp / 16 * 9 + 8 * tensors + 2 * rest
    );
    // compressed-tensors FP8 and HQQ are recognised, not sized as bf16.
    let ct = cfg(
        r#"{"quant_method":"compressed-tensors","config_groups":{"group_0":{"weights":{"num_bits":8,"type":"float","strategy":"channel"}}}}"#,
    );
    assert_eq!(ct.native_dtype, fp8.native_dtype);
    let hqq = cfg(
        r#"{"quant_method":"hqq","quant_config":{"weight_quant_params":{"nbits":4,"group_size":64}}}"#,
    );
    assert_eq!(
        hqq.native_dtype,
        WeightDtype::Hqq {
            bits: 4,
            group_size: 64
        }
    );
    // 4-bit packed + an f16 scale and zero per 64 weights.
    let (linear, other) = dense(&hqq);
    assert_eq!(
        weight_bytes(&hqq, hqq.native_dtype),
        linear / 2 + linear / 64 * 4 + 2 * other
    );
}

#[test]
fn hybrids_size_every_layer_kind() {
    // Falcon-H1: attention and Mamba-2 in every layer → KV in every layer plus a state.
    let f = parse(
        r#"{"model_type":"falcon_h1","architectures":["FalconH1ForCausalLM"],"hidden_size":64,"intermediate_size":128,
        "num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"vocab_size":100,
        "mamba_d_ssm":64,"mamba_n_heads":4,"mamba_n_groups":1,"mamba_d_state":8,"mamba_d_conv":4,"mamba_rms_norm":true}"#,
    )
    .unwrap();
    assert_eq!(kv_bytes_per_token(&f, KvDtype::Bf16), 3 * 2 * 32 * 2);
    let hf = CachePolicy::of(Engine::Transformers);
    // conv over 64 + 2·8 channels × 4 columns, SSM 4 heads × 16 × 8.
    assert_eq!(
        state_bytes(&f, KvDtype::Bf16, hf),
        3 * (80 * 4 + 4 * 16 * 8) * 2
    );
    // Granite-4.0-H: attention only where layer_types says so.
    let g = parse(
        r#"{"model_type":"granitemoehybrid","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
        "num_key_value_heads":2,"vocab_size":100,"shared_intermediate_size":32,"num_local_experts":0,
        "mamba_n_heads":8,"mamba_d_state":8,"layer_types":["mamba","attention","mamba","mamba"]}"#,
    )
    .unwrap();
    assert_eq!(kv_bytes_per_token(&g, KvDtype::Bf16), 2 * 32 * 2);
    assert_eq!(g.state_groups()[0].layers, 3);
}

#[test]
fn sizes_that_overflow_are_a_config_error_not_a_panic() {
    let r = parse(
        r#"{"model_type":"deepseek_v3","hidden_size":7168,"num_hidden_layers":61,"num_attention_heads":128,
        "vocab_size":129280,"intermediate_size":18432,"moe_intermediate_size":2048,
        "n_routed_experts":18446744073709551615}"#,
    );
    assert!(matches!(r, Err(InputError::BadField { .. })), "{r:?}");
    let j = parse(
        r#"{"model_type":"jamba","hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,"vocab_size":65536,
        "intermediate_size":14336,"mamba_d_state":9223372036854775807}"#,
    );
    assert!(matches!(j, Err(InputError::BadField { .. })), "{j:?}");
}
