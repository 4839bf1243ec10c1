//! The tensor-parallel runtime against the whole model, on the CPU: a tiny model's random weights
//! are saved as safetensors; each of N ranks (threads, the in-process all-reduce) loads only its
//! part of that file and runs the same prompt and two decode steps. Every rank's logits must equal
//! the unsharded decoder's within 1e-4 (f32), for N = 1, 2, 4: a GQA shape (4 ranks over 2 KV
//! heads replicate them, as vLLM does), an MHA shape with fused projections, biases with tied
//! embeddings, gemma2's four norms and soft-capping, and experts. Each rank's weight and KV bytes
//! equal what `plan --engine vllm --tp N` prices per rank (src/placement/vllm.rs).

mod util;

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use llm_oom::dtype::{KvDtype, WeightDtype};
use llm_oom::estimate::{Engine, Workload};
use llm_oom::model::config::parse_config;
use llm_oom::model::Spec;
use llm_oom::placement::vllm::{plan_parallel, Parallel};
use llm_oom::runtime::parallel::{rank_spec, run_ranks, Communicator, Rank};
use llm_oom::runtime::weights::Weights;
use llm_oom::runtime::{Attention, CacheMode, Decoder, KvCache};

const PROMPT: [u32; 9] = [3, 17, 42, 5, 99, 64, 8, 23, 71];
const NEXT: [u32; 2] = [11, 57];

fn ids(v: &[u32]) -> Tensor {
    Tensor::new(v, &Device::Cpu).unwrap().unsqueeze(0).unwrap()
}

/// The prompt's last logits and two decode steps', from `spec` (a rank's or the model's).
fn logits(
    spec: &Spec,
    w: &Weights,
    comm: Option<&dyn Communicator>,
    chunk: usize,
) -> Vec<Vec<f32>> {
    let dev = Device::Cpu;
    let total = PROMPT.len() + NEXT.len();
    let mut d = Decoder::new(spec, w, Attention::Chunked(4), total, &dev).unwrap();
    d.comm = comm;
    let mut cache =
        KvCache::new(CacheMode::Preallocated, spec, 1, total, DType::F32, &dev).unwrap();
    let mut last = None;
    for part in PROMPT.chunks(chunk) {
        last = Some(d.forward(&ids(part), &mut cache).unwrap());
    }
    let flat = |t: Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let mut out = vec![flat(last.unwrap())];
    for t in NEXT {
        out.push(flat(d.forward(&ids(&[t]), &mut cache).unwrap()));
    }
    out
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Every rank of every world in `worlds` gives the unsharded logits.
fn check(config: &str, worlds: &[usize]) {
    let home = util::temp();
    let spec = parse_config(config, Path::new("config.json"), "tiny").unwrap();
    let w = Weights::random(&spec, DType::F32, &Device::Cpu, 7, None).unwrap();
    let named: std::collections::HashMap<String, Tensor> =
        w.named().into_iter().map(|(n, t)| (n, t.clone())).collect();
    candle_core::safetensors::save(&named, home.path().join("model.safetensors")).unwrap();
    let whole = Weights::load(&spec, home.path(), DType::F32, &Device::Cpu, None).unwrap();
    let want = logits(&spec, &whole, None, PROMPT.len());
    assert_eq!(want[0].len(), spec.vocab_size as usize);
    for &world in worlds {
        let got = run_ranks(world, |c| {
            let r = c.rank();
            let part =
                Weights::load_part(&spec, home.path(), DType::F32, &Device::Cpu, None, Some(r))
                    .unwrap();
            // chunked prefill: the cache's positions and the all-reduces line up across passes
            logits(&rank_spec(&spec, world), &part, Some(c), 4)
        })
        .unwrap();
        for (rank, g) in got.iter().enumerate() {
            let d = max_diff(&want, g);
            assert!(
                d < 1e-4,
                "{} rank {rank} of {world}: {d}",
                spec.architecture
            );
        }
    }
}

const GQA: &str = r#"{"model_type":"llama","hidden_size":64,"intermediate_size":128,
    "num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,"vocab_size":101,
    "max_position_embeddings":256,"rms_norm_eps":1e-5,"rope_theta":10000.0,"tie_word_embeddings":false}"#;

#[test]
fn a_gqa_model_split_over_one_two_and_four_ranks_computes_the_whole_model() {
    // four ranks over two KV heads: each KV head replicated on two ranks
    check(GQA, &[1, 2, 4]);
}

#[test]
fn an_mha_model_with_fused_projections_splits_each_part_of_them() {
    let phi3 = r#"{"model_type":"phi3","hidden_size":64,"intermediate_size":128,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":4,"vocab_size":101,
        "max_position_embeddings":256,"rms_norm_eps":1e-5,"rope_theta":10000.0,
        "hidden_act":"silu","tie_word_embeddings":false}"#;
    check(phi3, &[1, 2, 4]);
}

#[test]
fn biases_tied_embeddings_soft_capping_and_experts_split_too() {
    let qwen2 = r#"{"model_type":"qwen2","hidden_size":64,"intermediate_size":128,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":101,
        "max_position_embeddings":256,"rms_norm_eps":1e-6,"rope_theta":1000000.0,
        "use_sliding_window":false,"hidden_act":"silu","tie_word_embeddings":true}"#;
    check(qwen2, &[2, 4]);
    let gemma2 = r#"{"model_type":"gemma2","hidden_size":64,"intermediate_size":128,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,
        "hidden_activation":"gelu_pytorch_tanh","vocab_size":101,"max_position_embeddings":256,
        "rms_norm_eps":1e-6,"rope_theta":10000.0,"final_logit_softcapping":30.0,
        "attn_logit_softcapping":50.0,"query_pre_attn_scalar":16,"sliding_window":64}"#;
    check(gemma2, &[2]);
    let mixtral = r#"{"model_type":"mixtral","hidden_size":64,"intermediate_size":96,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":101,
        "max_position_embeddings":256,"rms_norm_eps":1e-5,"rope_theta":1000000.0,
        "hidden_act":"silu","num_experts_per_tok":2,"num_local_experts":4,"tie_word_embeddings":false}"#;
    check(mixtral, &[2]);
}

#[test]
fn a_model_that_does_not_divide_is_refused_in_one_line() {
    let spec = parse_config(GQA, Path::new("config.json"), "tiny").unwrap();
    let rank = Rank { rank: 0, world: 3 };
    let Err(e) = Weights::random_part(&spec, DType::F32, &Device::Cpu, 1, None, Some(rank)) else {
        panic!("8 heads over 3 ranks must be refused");
    };
    let msg = e.to_string();
    assert!(
        msg.contains("--tensor-parallel-size 3") && !msg.contains('\n'),
        "{msg}"
    );
}

#[test]
fn each_rank_holds_the_weights_and_kv_cache_the_vllm_plan_prices_per_rank() {
    // TINY_LLAMA: 8 heads, 2 KV heads, vocab 1000 (padded to 1024), untied; and a tied shape
    let tied = util::TINY_LLAMA.replace(
        "\"tie_word_embeddings\":false",
        "\"tie_word_embeddings\":true",
    );
    for config in [util::TINY_LLAMA, tied.as_str()] {
        let spec = parse_config(config, Path::new("config.json"), "tiny").unwrap();
        for tp in [1u64, 2, 4] {
            let (prompt, new, batch) = (96u64, 32u64, 3u64);
            let w = Workload {
                prompt_tokens: prompt,
                max_new_tokens: new,
                batch,
                weight_dtype: WeightDtype::Bf16,
                kv_dtype: KvDtype::Bf16,
                engine: Engine::Vllm,
                llama: Default::default(),
            };
            let p = Parallel {
                tensor: tp,
                pipeline: 1,
                nodes: 1,
                gpus_per_node: tp,
                gpu_memory_utilization: 0.9,
            };
            let plan = plan_parallel(&spec, &w, &vec![24 << 30; tp as usize], &p);
            let local = rank_spec(&spec, tp as usize);
            for r in 0..tp as usize {
                let rank = Rank {
                    rank: r,
                    world: tp as usize,
                };
                let part =
                    Weights::random_part(&spec, DType::BF16, &Device::Cpu, 1, None, Some(rank))
                        .unwrap();
                assert_eq!(
                    part.bytes(),
                    plan.devices[r].weights_bytes,
                    "tp {tp} rank {r} weights"
                );
                // 128 tokens: a whole number of vLLM's 16-token blocks
                let cache = KvCache::new(
                    CacheMode::Preallocated,
                    &local,
                    batch as usize,
                    (prompt + new) as usize,
                    DType::BF16,
                    &Device::Cpu,
                )
                .unwrap();
                assert_eq!(
                    cache.bytes(),
                    plan.devices[r].kv_cache_bytes,
                    "tp {tp} rank {r} KV"
                );
            }
        }
    }
}
