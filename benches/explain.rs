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
    // The worst case: every line has memory words, so every reader and the OOM-words net run on
    // each (a vLLM start-up log repeated; its advice line must not become an event).
    let busy = b"INFO 05-01 worker.py:267] Memory profiling takes 4.2 seconds; the rest of the memory reserved for KV Cache is 60.1GiB. If you are running out of memory, consider decreasing `gpu_memory_utilization`.\n";
    let mut log = busy.repeat(4 * 1024 * 1024 / busy.len());
    log.extend_from_slice(oom);
    group.throughput(Throughput::Bytes(log.len() as u64));
    group.bench_function("4 MB of memory-word lines", |b| {
        b.iter(|| explain(std::hint::black_box(&log), &req))
    });
    // A log dense with distinct OOM messages: the corpus's logs (every folder) concatenated in
    // path order, once (no line repeats from one log to the next), and repeated to 8 MB (what a
    // long log of many OOMs and restarts looks like; the repeated lines reuse their looks).
    let corpus = corpus_logs();
    group.throughput(Throughput::Bytes(corpus.len() as u64));
    group.bench_function("corpus logs once", |b| {
        b.iter(|| explain(std::hint::black_box(&corpus), &req))
    });
    let mut dense = Vec::new();
    while !corpus.is_empty() && dense.len() < 8_000_000 {
        dense.extend_from_slice(&corpus);
    }
    dense.truncate(8_000_000);
    group.throughput(Throughput::Bytes(dense.len() as u64));
    group.bench_function("8 MB of corpus logs", |b| {
        b.iter(|| explain(std::hint::black_box(&dense), &req))
    });
    group.finish();
}

/// Every `.log` file under tests/fixtures/logs, concatenated in path order.
fn corpus_logs() -> Vec<u8> {
    let mut dirs =
        vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs")];
    let mut paths = Vec::new();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for path in entries.flatten().map(|e| e.path()) {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "log") {
                paths.push(path);
            }
        }
    }
    paths.sort();
    paths
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .flatten()
        .collect()
}

criterion_group!(benches, bench);
criterion_main!(benches);
