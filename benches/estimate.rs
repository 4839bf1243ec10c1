//! In-process cost of the estimate and of a whole plan's searches (the budget table, the
//! quantization what-if). The whole-process figure is recorded in docs/gpu-runs.md.

use criterion::{criterion_group, criterion_main, Criterion};
use llm_oom::budget::Planner;
use llm_oom::dtype::{KvDtype, WeightDtype};
use llm_oom::estimate::{estimate, Engine, Workload};
use llm_oom::model::presets;

fn bench(c: &mut Criterion) {
    let (id, json) = presets::find("mistralai/Mistral-7B-Instruct-v0.2").expect("preset");
    let spec = presets::load(id, json).expect("preset parses");
    let w = Workload {
        llama: Default::default(),
        prompt_tokens: 4096,
        max_new_tokens: 512,
        batch: 4,
        weight_dtype: WeightDtype::Bf16,
        kv_dtype: KvDtype::Bf16,
        engine: Engine::Transformers,
    };
    let vram = 24u64 << 30;
    c.bench_function("estimate (Mistral-7B, one workload)", |b| {
        b.iter(|| estimate(std::hint::black_box(&spec), std::hint::black_box(&w), vram))
    });
    let planner = Planner::new(&spec, vram);
    c.bench_function("budget (limits + 6-row table)", |b| {
        b.iter(|| planner.budget(std::hint::black_box(&w)))
    });
    c.bench_function("preset parse", |b| {
        b.iter(|| presets::load(id, std::hint::black_box(json)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
