//! The runtime's numbers against candle-transformers' own models, on the same weights: the
//! decoder is written for memory control, so these prove it still computes the model. Each family
//! is a tiny config; its random weights are saved as safetensors with Hugging Face names and loaded
//! by both. Logits of the prefill's last position and of two decode steps must agree within 1e-4
//! (f32). Chunked and one-pass prefill, sliced and eager attention, and a batch against single
//! sequences must agree as well.

mod util;

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models as ct;
use llm_oom::model::config::parse_config;
use llm_oom::model::Spec;
use llm_oom::runtime::weights::Weights;
use llm_oom::runtime::{Attention, CacheMode, Decoder, KvCache};

const PROMPT: [u32; 9] = [3, 17, 42, 5, 99, 64, 8, 23, 71];
const NEXT: [u32; 2] = [11, 57];

/// A model the test can step: prefill `ids` at `offset`, return the last position's logits.
trait Reference {
    fn step(&mut self, ids: &Tensor, offset: usize) -> candle_core::Result<Tensor>;
}

fn ids(v: &[u32]) -> Tensor {
    Tensor::new(v, &Device::Cpu).unwrap().unsqueeze(0).unwrap()
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Our logits for the prompt and the two decode steps.
fn ours(spec: &Spec, w: &Weights, attention: Attention, prefill_chunk: usize) -> Vec<Vec<f32>> {
    let dev = Device::Cpu;
    let total = PROMPT.len() + NEXT.len();
    let d = Decoder::new(spec, w, attention, total, &dev).unwrap();
    let mut cache =
        KvCache::new(CacheMode::Preallocated, spec, 1, total, DType::F32, &dev).unwrap();
    let mut last = None;
    for part in PROMPT.chunks(prefill_chunk) {
        last = Some(d.forward(&ids(part), &mut cache).unwrap());
    }
    let mut out = vec![flat(&last.unwrap())];
    for t in NEXT {
        out.push(flat(&d.forward(&ids(&[t]), &mut cache).unwrap()));
    }
    out
}

fn theirs(r: &mut dyn Reference) -> Vec<Vec<f32>> {
    let mut out = vec![flat(&r.step(&ids(&PROMPT), 0).unwrap())];
    for (i, t) in NEXT.iter().enumerate() {
        out.push(flat(&r.step(&ids(&[*t]), PROMPT.len() + i).unwrap()));
    }
    out
}

type Build = dyn Fn(&str, VarBuilder) -> Box<dyn Reference>;

/// Random weights for `config`, saved; both models built from the file.
fn check(family: &str, config: &str, build: &Build) {
    check_steps(family, config, 1 + NEXT.len(), build)
}

/// As `check`, comparing the first `steps` logits (the prefill's, then the decode steps').
fn check_steps(family: &str, config: &str, steps: usize, build: &Build) {
    let home = util::temp();
    let spec = parse_config(config, Path::new("config.json"), family).unwrap();
    let w = Weights::random(&spec, DType::F32, &Device::Cpu, 7, None).unwrap();
    let file = home.path().join("model.safetensors");
    let named: std::collections::HashMap<String, Tensor> =
        w.named().into_iter().map(|(n, t)| (n, t.clone())).collect();
    candle_core::safetensors::save(&named, &file).unwrap();
    // SAFETY: the test's own file, read-only.
    let vb =
        unsafe { VarBuilder::from_mmaped_safetensors(&[&file], DType::F32, &Device::Cpu) }.unwrap();
    let mut reference = build(config, vb);
    let want = theirs(reference.as_mut());
    let loaded = Weights::load(&spec, home.path(), DType::F32, &Device::Cpu, None).unwrap();
    for (what, got) in [
        (
            "sliced attention",
            ours(&spec, &loaded, Attention::Chunked(4), 9),
        ),
        ("eager attention", ours(&spec, &loaded, Attention::Eager, 9)),
        (
            "chunked prefill",
            ours(&spec, &loaded, Attention::Chunked(2), 4),
        ),
    ] {
        for (step, (g, r)) in got.iter().zip(&want).enumerate().take(steps) {
            let d = max_diff(g, r);
            assert!(
                d < 1e-4,
                "{family}, {what}, step {step}: logits differ by {d} from candle-transformers"
            );
        }
    }
}

struct Llama(ct::llama::Llama, ct::llama::Cache);
impl Reference for Llama {
    fn step(&mut self, ids: &Tensor, offset: usize) -> candle_core::Result<Tensor> {
        self.0.forward(ids, offset, &mut self.1)
    }
}

macro_rules! stepper {
    ($name:ident, $ty:ty) => {
        struct $name($ty);
        impl Reference for $name {
            fn step(&mut self, ids: &Tensor, offset: usize) -> candle_core::Result<Tensor> {
                self.0.forward(ids, offset)
            }
        }
    };
}
stepper!(Qwen3, ct::qwen3::ModelForCausalLM);
stepper!(Qwen2, ct::qwen2::ModelForCausalLM);
stepper!(Gemma2, ct::gemma2::Model);
stepper!(Phi3, ct::phi3::Model);
stepper!(Mixtral, ct::mixtral::Model);
stepper!(Mistral, ct::mistral::Model);

#[test]
fn llama_with_llama3_rope_scaling_matches_candle_transformers() {
    let config = r#"{"model_type":"llama","architectures":["LlamaForCausalLM"],"hidden_size":64,
        "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
        "vocab_size":101,"max_position_embeddings":256,"rms_norm_eps":1e-5,"rope_theta":500000.0,
        "tie_word_embeddings":false,"rope_scaling":{"rope_type":"llama3","factor":8.0,
        "low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":16}}"#;
    check("llama", config, &|json, vb| {
        let cfg: ct::llama::LlamaConfig = serde_json::from_str(json).unwrap();
        let cfg = cfg.into_config(false);
        let cache = ct::llama::Cache::new(true, DType::F32, &cfg, &Device::Cpu).unwrap();
        Box::new(Llama(ct::llama::Llama::load(vb, &cfg).unwrap(), cache))
    });
}

#[test]
fn mistral_with_a_sliding_window_matches_candle_transformers() {
    // A window of 4 over a 9-token prompt: the mask's window part is exercised. transformers
    // lets a query see the keys with i − w < j ≤ i; candle-transformers' mistral one more
    // (i − w ≤ j), so it gets a window one shorter, and it does not window decode steps at all:
    // only the prefill's logits are compared.
    let config = r#"{"model_type":"mistral","architectures":["MistralForCausalLM"],"hidden_size":64,
        "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
        "vocab_size":101,"max_position_embeddings":256,"rms_norm_eps":1e-5,"rope_theta":10000.0,
        "sliding_window":4,"hidden_act":"silu","tie_word_embeddings":false}"#;
    check_steps("mistral", config, 1, &|json, vb| {
        let json = json.replace("\"sliding_window\":4", "\"sliding_window\":3");
        let cfg: ct::mistral::Config = serde_json::from_str(&json).unwrap();
        Box::new(Mistral(ct::mistral::Model::new(&cfg, vb).unwrap()))
    });
}

#[test]
fn qwen2_with_biases_and_tied_embeddings_matches_candle_transformers() {
    let config = r#"{"model_type":"qwen2","architectures":["Qwen2ForCausalLM"],"hidden_size":64,
        "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
        "vocab_size":101,"max_position_embeddings":256,"rms_norm_eps":1e-6,"rope_theta":1000000.0,
        "sliding_window":4096,"max_window_layers":2,"use_sliding_window":false,"hidden_act":"silu",
        "tie_word_embeddings":true}"#;
    check("qwen2", config, &|json, vb| {
        let cfg: ct::qwen2::Config = serde_json::from_str(json).unwrap();
        Box::new(Qwen2(ct::qwen2::ModelForCausalLM::new(&cfg, vb).unwrap()))
    });
}

#[test]
fn qwen3_with_qk_norms_matches_candle_transformers() {
    let config = r#"{"model_type":"qwen3","architectures":["Qwen3ForCausalLM"],"hidden_size":64,
        "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
        "head_dim":32,"attention_bias":false,"vocab_size":101,"max_position_embeddings":256,
        "sliding_window":null,"max_window_layers":2,"tie_word_embeddings":false,"rope_theta":1000000.0,
        "rms_norm_eps":1e-6,"use_sliding_window":false,"hidden_act":"silu"}"#;
    check("qwen3", config, &|json, vb| {
        let cfg: ct::qwen3::Config = serde_json::from_str(json).unwrap();
        Box::new(Qwen3(ct::qwen3::ModelForCausalLM::new(&cfg, vb).unwrap()))
    });
}

#[test]
fn gemma2_with_soft_capping_and_four_norms_matches_candle_transformers() {
    // candle-transformers' gemma2 does not mask its sliding window (11 tokens stay inside it) and
    // scales queries by 1/√head_dim whatever query_pre_attn_scalar says (transformers uses the
    // scalar; they agree when it equals head_dim, as in Gemma-2-9B)
    let config = r#"{"model_type":"gemma2","architectures":["Gemma2ForCausalLM"],"hidden_size":64,
        "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
        "head_dim":16,"attention_bias":false,"hidden_activation":"gelu_pytorch_tanh","vocab_size":101,
        "max_position_embeddings":256,"rms_norm_eps":1e-6,"rope_theta":10000.0,
        "final_logit_softcapping":30.0,"attn_logit_softcapping":50.0,"query_pre_attn_scalar":16,
        "sliding_window":64}"#;
    check("gemma2", config, &|json, vb| {
        let cfg: ct::gemma2::Config = serde_json::from_str(json).unwrap();
        Box::new(Gemma2(ct::gemma2::Model::new(false, &cfg, vb).unwrap()))
    });
}

#[test]
fn phi3_with_fused_projections_matches_candle_transformers() {
    let config = r#"{"model_type":"phi3","architectures":["Phi3ForCausalLM"],"hidden_size":64,
        "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":4,
        "vocab_size":101,"max_position_embeddings":256,"rms_norm_eps":1e-5,"rope_theta":10000.0,
        "hidden_act":"silu","bos_token_id":1,"eos_token_id":2,"rope_scaling":null,
        "original_max_position_embeddings":256,"partial_rotary_factor":null,"tie_word_embeddings":false}"#;
    check("phi3", config, &|json, vb| {
        let cfg: ct::phi3::Config = serde_json::from_str(json).unwrap();
        Box::new(Phi3(ct::phi3::Model::new(&cfg, vb).unwrap()))
    });
}

#[test]
fn mixtral_experts_match_candle_transformers() {
    let config = r#"{"model_type":"mixtral","architectures":["MixtralForCausalLM"],"hidden_size":64,
        "intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
        "vocab_size":101,"max_position_embeddings":256,"rms_norm_eps":1e-5,"rope_theta":1000000.0,
        "hidden_act":"silu","sliding_window":4096,"num_experts_per_tok":2,"num_local_experts":4,
        "use_flash_attn":false,"tie_word_embeddings":false}"#;
    check("mixtral", config, &|json, vb| {
        let cfg: ct::mixtral::Config = serde_json::from_str(json).unwrap();
        Box::new(Mixtral(ct::mixtral::Model::new(&cfg, vb).unwrap()))
    });
}

#[test]
fn a_batch_row_equals_the_same_sequence_run_alone() {
    let spec = parse_config(util::TINY_LLAMA, Path::new("config.json"), "tiny").unwrap();
    let w = Weights::random(&spec, DType::F32, &Device::Cpu, 3, None).unwrap();
    let dev = Device::Cpu;
    let rows: [[u32; 6]; 3] = [
        [1, 2, 3, 4, 5, 6],
        [9, 8, 7, 6, 5, 4],
        [500, 3, 77, 12, 0, 999],
    ];
    let d = Decoder::new(&spec, &w, Attention::Chunked(4), 6, &dev).unwrap();
    let mut cache = KvCache::new(CacheMode::Preallocated, &spec, 3, 6, DType::F32, &dev).unwrap();
    let batch = Tensor::new(&rows, &dev).unwrap();
    let together = d.forward(&batch, &mut cache).unwrap();
    for (i, row) in rows.iter().enumerate() {
        let mut c = KvCache::new(CacheMode::Preallocated, &spec, 1, 6, DType::F32, &dev).unwrap();
        let alone = flat(&d.forward(&ids(row), &mut c).unwrap());
        let diff = max_diff(&flat(&together.get(i).unwrap()), &alone);
        assert!(diff < 1e-4, "row {i} differs by {diff}");
    }
}
