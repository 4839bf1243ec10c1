//! Decode cost of the runtime on a tiny CPU model: one greedy step at a given context, with the
//! preallocated and the concatenated KV cache. (GPU decode speed is recorded in docs/accuracy.md.)

use candle_core::{DType, Device, Tensor};
use criterion::{criterion_group, criterion_main, Criterion};
use llm_oom::model::config::parse_config;
use llm_oom::runtime::weights::Weights;
use llm_oom::runtime::{Attention, CacheMode, Decoder, KvCache};

const TINY: &str = r#"{"model_type":"llama","hidden_size":256,"intermediate_size":688,"num_hidden_layers":4,
"num_attention_heads":8,"num_key_value_heads":2,"vocab_size":1000,"max_position_embeddings":4096}"#;

fn bench(c: &mut Criterion) {
    let Ok(spec) = parse_config(TINY, std::path::Path::new("tiny"), "tiny") else {
        return;
    };
    let dev = Device::Cpu;
    let Ok(w) = Weights::random(&spec, DType::F32, &dev, 1, None) else {
        return;
    };
    let Ok(decoder) = Decoder::new(&spec, &w, Attention::Chunked(64), 1024, &dev) else {
        return;
    };
    let Ok(prompt) = Tensor::arange(1u32, 513, &dev).and_then(|t| t.reshape((1, 512))) else {
        return;
    };
    let Ok(next) = Tensor::new(&[[7u32]], &dev) else {
        return;
    };
    for (name, mode) in [
        ("preallocated", CacheMode::Preallocated),
        ("concatenated", CacheMode::Concatenated),
    ] {
        c.bench_function(&format!("decode step at 512 tokens, {name} cache"), |b| {
            b.iter_batched(
                || {
                    let mut cache = KvCache::new(mode, &spec, 1, 1024, DType::F32, &dev).ok()?;
                    decoder.forward(&prompt, &mut cache).ok()?;
                    Some(cache)
                },
                |cache| {
                    if let Some(mut cache) = cache {
                        let _ = decoder.forward(&next, &mut cache);
                    }
                },
                criterion::BatchSize::LargeInput,
            )
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
