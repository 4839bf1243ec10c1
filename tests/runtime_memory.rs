//! The runtime's memory, measured by the counting allocator this test binary installs (one test
//! per binary, so no other test allocates meanwhile): the KV cache takes exactly the formula's
//! bytes, and attention keeps `score_bytes(heads)` bytes per score element alive,
//! the figure the probe's budget is built on.

use candle_core::{DType, Device};
use llm_oom::dtype::KvDtype;
use llm_oom::estimate::kv_bytes;
use llm_oom::meter::host;
use llm_oom::model::config::parse_config;
use llm_oom::runtime::decoder::{score_bytes, sliced_score_bytes};
use llm_oom::runtime::generate::synthetic_prompt;
use llm_oom::runtime::weights::Weights;
use llm_oom::runtime::{Attention, CacheMode, Decoder, KvCache};

#[global_allocator]
static ALLOC: host::CountingAlloc = host::CountingAlloc;

#[test]
fn the_cache_is_the_formula_and_the_scores_cost_what_the_budget_assumes() {
    let json = r#"{"model_type":"llama","hidden_size":64,"intermediate_size":172,"num_hidden_layers":2,
        "num_attention_heads":4,"num_key_value_heads":2,"vocab_size":97,"max_position_embeddings":8192,
        "rms_norm_eps":1e-5,"rope_theta":10000.0,"tie_word_embeddings":false}"#;
    let spec = parse_config(json, std::path::Path::new("tiny"), "tiny").expect("config");
    let dev = Device::Cpu;
    let w = Weights::random(&spec, DType::F32, &dev, 1, None).expect("weights");

    // The cache: its tensors are the formula's bytes; the heap grows by that plus a little
    // bookkeeping (the per-layer vector).
    let before = host::current();
    let cache =
        KvCache::new(CacheMode::Preallocated, &spec, 3, 1000, DType::F32, &dev).expect("cache");
    let grew = host::current() - before;
    let formula = kv_bytes(&spec, KvDtype::F32, 1000, 3, false);
    assert_eq!(cache.bytes(), formula);
    assert!(
        grew >= formula && grew - formula < 4096,
        "{grew} vs {formula}"
    );
    drop(cache);

    // Prefill peaks at P, 2P, 4P: the quadratic coefficient is the score bytes. Eager holds all
    // queries' scores at once; sliced attention with a slice as long as the prompt does too, so
    // its coefficient is its own per-pair figure.
    let peak = |p: usize, attention: Attention| -> f64 {
        let d = Decoder::new(&spec, &w, attention, p, &dev).expect("decoder");
        let mut cache =
            KvCache::new(CacheMode::Preallocated, &spec, 1, p, DType::F32, &dev).expect("cache");
        let ids = synthetic_prompt(1, p, 97, &dev).expect("ids");
        let base = host::current();
        host::reset_peak();
        d.forward(&ids, &mut cache).expect("forward");
        (host::peak() - base) as f64
    };
    // The first forward pass also allocates the matmul library's per-thread workspace, for good.
    peak(1024, Attention::Eager);
    let p = 256.0;
    for (attention, assumed) in [
        (Attention::Eager, score_bytes(spec.num_heads) as f64),
        (
            Attention::Chunked(1024),
            sliced_score_bytes(spec.num_heads, 4.0),
        ),
    ] {
        let (y1, y2, y4) = (
            peak(256, attention),
            peak(512, attention),
            peak(1024, attention),
        );
        let q = (y4 - 3.0 * y2 + 2.0 * y1) / (6.0 * p * p);
        assert!(
            (q - assumed).abs() / assumed < 0.05,
            "{attention:?}: measured {q:.2} B per score element, the budget assumes {assumed}"
        );
    }
}
