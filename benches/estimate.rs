//! In-process cost of the estimate and of a whole plan's searches (the budget table, the
//! quantization what-if). The whole-process figure is recorded in docs/accuracy.md.

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
    // The allocator model of transformers' generate(): one replay of the default workload
    // (5,815 + 256 tokens: ~740k allocations and frees), and the largest prompt it bisects.
    let shape = llm_oom::estimate::torch_program::Shape::of(&spec, false).expect("llama family");
    use llm_oom::estimate::torch_program::Generation;
    let g = Generation {
        batch: 1,
        prompt: 5815,
        new_tokens: 256,
    };
    let card = 16u64 << 30;
    let mut slow = c.benchmark_group("torch_program");
    slow.sample_size(10);
    slow.bench_function("replay (Mistral-7B, 5,815 + 256 tokens)", |b| {
        b.iter(|| llm_oom::estimate::torch_program::on_card(&shape, std::hint::black_box(g), card))
    });
    slow.bench_function("largest prompt (Mistral-7B, 256 new, 16 GiB)", |b| {
        b.iter(|| {
            llm_oom::budget::largest(1, 32768, |prompt| {
                llm_oom::estimate::torch_program::on_card(&shape, Generation { prompt, ..g }, card)
                    .ran()
            })
        })
    });
    // `plan --exact` on a 24 GiB card: the verdict, the budget's searches and the what-if, each
    // a bisection of replays (a fresh planner each time, so that no run is kept from the last).
    let default = Workload {
        prompt_tokens: 2048,
        max_new_tokens: 256,
        batch: 1,
        ..w
    };
    slow.bench_function(
        "plan --exact (Mistral-7B, 2,048 + 256 tokens, 24 GiB)",
        |b| {
            b.iter(|| {
                let planner = Planner::new(&spec, 24u64 << 30).with_pool();
                let w = std::hint::black_box(&default);
                (
                    llm_oom::verdict::predicted::forecast(&planner, w).replayed,
                    planner.budget(w),
                    planner.quantization_what_if(w),
                )
            })
        },
    );
    slow.finish();
    c.bench_function("preset parse", |b| {
        b.iter(|| presets::load(id, std::hint::black_box(json)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
