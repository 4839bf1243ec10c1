//! Parsing cost per byte of log: `explain` must stay linear in the log's size.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use llm_oom::commands::explain::{explain, ExplainRequest};
use llm_oom::estimate::Engine;

fn bench(c: &mut Criterion) {
    let oom = include_bytes!("../tests/fixtures/logs/pytorch_threads.log");
    let filler = b"step 12345 \x1b[2mloss\x1b[0m 1.2345 lr 3e-4 |##########| 97%\r step done\n";
    let req = ExplainRequest {
        plan: None,
        engine: Engine::Transformers,
    };
    let mut group = c.benchmark_group("explain");
    for mb in [1usize, 4] {
        let mut log = filler.repeat(mb * 1024 * 1024 / filler.len());
        log.extend_from_slice(oom);
        group.throughput(Throughput::Bytes(log.len() as u64));
        group.bench_function(format!("{mb} MB log"), |b| {
            b.iter(|| explain(std::hint::black_box(&log), &req))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
