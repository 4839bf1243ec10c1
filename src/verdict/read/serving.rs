//! vLLM's and SGLang's own messages: vLLM (E1–E3, E66, E85), SGLang (E6, E16, E25), and the
//! catalogue of every engine's wording (E72). TGI, TurboMind, TensorRT-LLM, accelerate and
//! transformers' dispatch check are in [`super::other_engines`].

use super::*;
use crate::estimate::vllm_startup as startup_rules;

/// An engine's own message, from the catalogue of what its source prints (rule E72): the part
/// the code path says ran out, at the stage it prints it, with the figures the message gives.
pub(super) fn catalogued(a: &mut Ask, c: &Catalogued) -> Decision {
    let f = a.f;
    let stage = match (c.when, c.ran_out) {
        (When::Load, _) => Stage::Load,
        (When::Request, _) => Stage::FirstToken,
        (When::Any, RanOut::Host) => Stage::Unknown,
        (When::Any, _) => stage_near(a.ctx, f.line),
    };
    let short = match (c.needed, c.available) {
        (Some(n), Some(h)) => n.checked_sub(h),
        _ => None,
    };
    let cause = match c.ran_out {
        RanOut::Weights => {
            a.remedy(Change::QuantizeWeights(nf4()), a.engine, short);
            a.remedy(Change::CpuOffload, a.engine, None);
            Cause::Weights
        }
        RanOut::KvCache => {
            a.remedy(Change::ReduceContext(0), a.engine, short);
            a.remedy(Change::LimitConcurrency(0), a.engine, None);
            a.remedy(Change::QuantizeKv(KvDtype::Q8_0), a.engine, None);
            Cause::KvCache
        }
        RanOut::Activations => {
            a.remedy(Change::ChunkedPrefill(0), a.engine, short);
            a.remedy(Change::TruncatePrompt(0), a.engine, None);
            Cause::Activations
        }
        RanOut::Concurrency => {
            a.remedy(Change::LimitConcurrency(0), a.engine, None);
            Cause::Concurrency
        }
        RanOut::OtherProcess => {
            a.remedy(Change::FreeOtherProcesses, a.engine, short);
            Cause::OtherProcess
        }
        RanOut::Host => {
            a.remedy(Change::MoreHostMemory, a.engine, None);
            Cause::HostMemory
        }
        RanOut::Unknown => return undecided(a),
    };
    let figures = match (c.needed, c.available) {
        (Some(n), Some(h)) => format!(": {} needed, {} there", Bytes(n), Bytes(h)),
        (Some(n), None) => format!(": {} asked", Bytes(n)),
        (None, Some(h)) => format!(": {} there", Bytes(h)),
        (None, None) => String::new(),
    };
    let host = if cause == Cause::HostMemory {
        " — host RAM, not the GPU"
    } else {
        ""
    };
    Decision::new(
        Code::E72,
        cause,
        stage,
        c.confidence,
        format!("{cause}: {}{figures}{host}", c.what),
        vec![ev(f, format!("{} ({})", c.what, c.from))],
    )
}

/// vLLM refused to start: one request of `max_model_len` tokens needs more KV cache than is left.
/// The remedies carry the log's own figures, through the rules `plan --engine vllm` uses
/// (`estimate::vllm_startup`): `--max-model-len` the whole blocks the KV cache holds, and
/// `--gpu-memory-utilization` the smallest 0.01 step that adds the deficit to what the card's
/// share holds now (with the card's total and the utilization stated); fp8 halves the need.
/// What vLLM's message says fits: the KV cache's tokens (v0), or its own estimate of the largest
/// `max_model_len` (v1's bisection, already whole blocks).
pub(super) struct VllmFit {
    pub kv_tokens: Option<u64>,
    pub estimated_max_len: Option<u64>,
}

pub(super) fn vllm_kv(
    a: &mut Ask,
    max_seq_len: Option<u64>,
    said: VllmFit,
    bytes: Option<(u64, u64)>,
) -> Decision {
    let (f, ctx) = (a.f, a.ctx);
    let v = &ctx.vllm;
    let block = v.block();
    let max_len = max_seq_len.or(ctx.workload.max_model_len);
    let fit = said.estimated_max_len.or(said.kv_tokens);
    let tokens = said.kv_tokens.or_else(|| v.tokens()).filter(|&t| t > 0);
    // The bytes of one request and of the KV cache: the v1 message's, else the v0 cache's size
    // over its tokens, times the request's whole blocks.
    let kv = bytes.or_else(|| {
        let (avail, t, len) = (v.available_kv?, tokens?, max_len?);
        let need =
            u128::from(avail) * u128::from(startup_rules::blocks_of(len, block)) / u128::from(t);
        Some((u64::try_from(need).ok()?, avail))
    });
    let mut e = vec![ev(f, format!(
        "vLLM reserves KV cache for max_model_len = {} tokens; the memory left after weights and activations holds {}",
        max_seq_len.map_or("?".into(), group),
        fit.map_or("fewer".into(), |n| format!("{} tokens", group(n)))
    ))];
    if let Some((n, av)) = kv {
        let text = format!(
            "one request at max_model_len needs {} of KV cache, {} is available",
            Bytes(n),
            Bytes(av)
        );
        e.push(ev_bytes(f, text, n));
    }
    if let Some((line, w, _)) = ctx.weights_loaded {
        e.push(Evidence {
            text: format!("the model's weights took {}", Bytes(w)),
            bytes: Some(w),
            line: Some(line),
        });
    }
    // vLLM's estimate as it is; KV tokens rounded down to whole blocks, as `plan` does.
    let largest = said
        .estimated_max_len
        .or_else(|| tokens.map(|t| startup_rules::whole_blocks(t, block)));
    if let Some(len) = largest {
        if len > 0 {
            a.remedy(Change::ReduceContext(len), Engine::Vllm, None);
            if let Some(r) = a.remedies.last_mut() {
                r.action = match said.estimated_max_len {
                    Some(_) => format!(
                        "size the context for {} tokens → vLLM's own estimate of the longest request its KV cache holds",
                        group(len)
                    ),
                    None => format!(
                        "size the context for {} tokens → the KV cache's tokens in whole {block}-token blocks: one request fits",
                        group(len)
                    ),
                };
            }
        }
    }
    let share = v.total.zip(v.utilization);
    match (kv, share) {
        (Some((need, avail)), Some((total, now))) => {
            let deficit = need.saturating_sub(avail);
            let requested = (total as f64 * now) as u64;
            let want = startup_rules::utilization_for(requested.saturating_add(deficit), total);
            if let Some(u) = want.filter(|&u| u > now) {
                a.remedy(
                    Change::RaiseUtilization((u * 100.0).round() as u64),
                    Engine::Vllm,
                    None,
                );
                if let Some(r) = a.remedies.last_mut() {
                    r.action = format!(
                        "let vLLM use {u:.2} of the {} card instead of {now:.2} → {} more for the KV cache, one request of max_model_len fits",
                        Bytes(total),
                        Bytes(deficit)
                    );
                    r.saves_bytes = Some(-(i64::try_from(deficit).unwrap_or(i64::MAX)));
                }
            }
        }
        _ => a.remedy(Change::RaiseUtilization(95), Engine::Vllm, None),
    }
    a.remedy(Change::QuantizeKv(KvDtype::Fp8), Engine::Vllm, None);
    if let (Some(r), Some((need, avail))) = (a.remedies.last_mut(), kv) {
        let half = need / 2;
        r.action = format!(
            "store the KV cache in fp8 → one request of max_model_len needs {} of the {} available{}",
            Bytes(half),
            Bytes(avail),
            if half <= avail { "" } else { " — still too much" }
        );
        r.saves_bytes = Some(i64::try_from(need - half).unwrap_or(i64::MAX));
    }
    Decision::new(
        Code::E1,
        Cause::KvCache,
        Stage::Load,
        0.9,
        "kv_cache: vLLM cannot hold one request at the configured max_model_len".to_string(),
        e,
    )
}

pub(super) fn nf4() -> WeightDtype {
    "nf4".parse().unwrap_or(WeightDtype::Int8)
}

pub(super) fn vllm_no_blocks(a: &mut Ask) -> Decision {
    a.remedy(Change::RaiseUtilization(95), Engine::Vllm, None);
    a.remedy(Change::ReduceContext(0), Engine::Vllm, None);
    a.remedy(Change::QuantizeKv(KvDtype::Fp8), Engine::Vllm, None);
    a.remedy(Change::QuantizeWeights(nf4()), Engine::Vllm, None);
    a.remedy(Change::LargerGpu(0), Engine::Vllm, None);
    // The KV cache got no room: the cause users and maintainers name (three threads of the fresh
    // corpus), with raising gpu_memory_utilization first and smaller weights after.
    Decision::new(Code::E85,
        Cause::KvCache,
        Stage::Load,
        0.8,
        "kv_cache: after the weights and the profiling run nothing is left for vLLM's KV cache (0 blocks within gpu_memory_utilization)"
            .into(),
        vec![ev(a.f, "vLLM found no memory for cache blocks".into())],
    )
}

/// SGLang's scheduler had to retract a running request and found no token left in the KV pool:
/// the running requests' caches filled it (the context × the requests running at once).
/// More KV room for SGLang's token pool, or fewer requests sharing it.
pub(super) fn sglang_kv_room(a: &mut Ask) {
    a.remedy(Change::RaiseUtilization(92), a.engine, None);
    if let Some(r) = a.remedies.last_mut() {
        r.how =
            "--mem-fraction-static 0.92, or fewer running requests (--max-running-requests)".into();
    }
}

pub(super) fn sglang_pool_full(a: &mut Ask) -> Decision {
    sglang_kv_room(a);
    Decision::new(Code::E16,
        Cause::KvCache,
        Stage::Unknown,
        0.7,
        "kv_cache: the running requests filled SGLang's KV token pool; the scheduler could not keep even one".into(),
        vec![ev(a.f, "SGLang's KV token pool had 0 tokens available".into())],
    )
}

/// SGLang said its decode ran out of memory and retracted requests: the KV token pool is full. It
/// goes on (the retracted requests are recomputed), so the cost is throughput; more KV room or
/// fewer running requests stops it.
pub(super) fn sglang_retract(a: &mut Ask) -> Decision {
    sglang_kv_room(a);
    Decision::new(Code::E25,
        Cause::KvCache,
        Stage::LongGeneration,
        0.6,
        "kv_cache: SGLang's KV token pool filled while decoding; it retracted requests to recompute them later (slower, not failed)".into(),
        vec![ev(a.f, "SGLang: \"Decode out of memory happened\", requests retracted".into())],
    )
}

pub(super) fn vllm_startup(
    a: &mut Ask,
    free: Option<u64>,
    total: Option<u64>,
    utilization: Option<f64>,
) -> Decision {
    let want = total.zip(utilization).map(|(t, u)| (t as f64 * u) as u64);
    let held = free.zip(total).map(|(f, t)| t.saturating_sub(f));
    a.remedy(Change::FreeOtherProcesses, Engine::Vllm, held);
    let b = |x: Option<u64>| x.map_or("?".into(), |b| Bytes(b).to_string());
    if total.is_some_and(is_dgx_spark_total) {
        if let Some(r) = a.remedies.last_mut() {
            r.how = "sync; echo 3 | sudo tee /proc/sys/vm/drop_caches   (then start vLLM again; keep --gpu-memory-utilization near 0.85 so the OS keeps room)".into();
        }
        return Decision::new(Code::E2, Cause::OtherProcess, Stage::Environment, 0.8, format!(
            "other_process: only {} of {} was free when vLLM started, below the {} that gpu_memory_utilization asks for; {} is a DGX Spark's (GB10) unified memory, where CUDA's free figure is the kernel's MemFree and the page cache (the weights a load just read) counts as used",
            b(free), b(total), b(want), b(total)
        ), vec![
            ev(a.f, "free memory at start-up is below gpu_memory_utilization × total".into()),
            ev(a.f, "a total of 121.69 GiB is a GB10's: its GPU shares the machine's RAM (vllm-project/vllm#48140)".into()),
        ]);
    }
    Decision::new(Code::E2, Cause::OtherProcess, Stage::Environment, 0.9, format!(
        "other_process: only {} of {} was free when vLLM started, below the {} that gpu_memory_utilization asks for",
        b(free), b(total), b(want)
    ), vec![ev(a.f, "free memory at start-up is below gpu_memory_utilization × total".into())])
}

/// CUDA's total on a DGX Spark (GB10): 121.69 GiB of its 128 GB of unified memory, as vLLM prints
/// it (vllm-project/vllm#48140, llamastash#80).
fn is_dgx_spark_total(total: u64) -> bool {
    // Hundredths of a GiB, read from a figure printed with two decimals.
    (12_165..=12_173).contains(&(total.saturating_mul(100) / crate::units::GIB))
}

/// vLLM's CPU backend pre-allocates its KV cache in host RAM (`VLLM_CPU_KVCACHE_SPACE`, in GiB)
/// and checks the node's available memory first (rule E66, vllm-45086: 206.54 GiB asked,
/// 149.11 GiB available): the KV cache asked for does not fit.
pub(super) fn vllm_cpu_kv(a: &mut Ask, available: Option<u64>, requested: Option<u64>) -> Decision {
    a.remedy(Change::ReduceContext(0), Engine::Vllm, None);
    if let Some(r) = a.remedies.last_mut() {
        r.how = "lower VLLM_CPU_KVCACHE_SPACE (GiB of host RAM for the KV cache) below what the node or container has free, or --max-model-len".into();
    }
    let b = |x: Option<u64>| x.map_or("?".into(), |b| Bytes(b).to_string());
    Decision::new(Code::E66,
        Cause::KvCache,
        Stage::Load,
        0.85,
        format!(
            "kv_cache: vLLM's CPU backend was asked to pre-allocate {} of host RAM for its KV cache with {} available on the node",
            b(requested),
            b(available)
        ),
        vec![ev(a.f, "the KV cache asked for is more than the node's available memory".into())],
    )
}

/// vLLM's sampler warm-up runs `max_num_seqs` dummy requests at once. At the default (256) the
/// logits of the warm-up are an activation peak (vllmv1-17939); a count above the default is a
/// concurrency the user chose (tests/fixtures/logs/vllm_sampler.log, 1024).
pub(super) fn vllm_sampler(a: &mut Ask, seqs: Option<u64>) -> Decision {
    const DEFAULT_MAX_NUM_SEQS: u64 = 256;
    let f = a.f;
    let chosen = seqs.is_some_and(|n| n > DEFAULT_MAX_NUM_SEQS)
        || a.ctx
            .workload
            .max_num_seqs
            .is_some_and(|n| n > DEFAULT_MAX_NUM_SEQS);
    if let Some(n) = seqs {
        a.remedy(Change::LimitConcurrency((n / 4).max(1)), Engine::Vllm, None);
    }
    let e = vec![ev(
        f,
        "the sampler's logits for every sequence at once did not fit".into(),
    )];
    if chosen {
        return Decision::new(Code::E3, Cause::Concurrency, Stage::Load, 0.8, format!(
            "concurrency: warming the sampler up with {} dummy requests (max_num_seqs) ran out of memory",
            seqs.map_or("max_num_seqs".into(), group)
        ), e);
    }
    a.remedy(Change::RaiseUtilization(85), Engine::Vllm, None);
    Decision::new(Code::E3, Cause::Activations, Stage::Load, 0.75, format!(
        "activations: the sampler's warm-up over {} dummy requests (the default max_num_seqs) ran out: its logits are a peak the profile did not leave room for",
        seqs.map_or("max_num_seqs".into(), group)
    ), e)
}

/// SGLang: the weights leave no (or a negative) KV pool under --mem-fraction-static.
/// With the weights' footprint from `Load weight end` the evidence says how much they took
/// (sglang-7691: 166.59 GB of weights, 21.73 GB left, a negative profiled pool).
pub(super) fn sglang_no_kv(a: &mut Ask) -> Decision {
    a.remedy(Change::RaiseUtilization(92), a.engine, None);
    if let Some(r) = a.remedies.last_mut() {
        r.how = "--mem-fraction-static 0.92 (SGLang's share of the card for weights and KV pool)"
            .into();
    }
    a.remedy(Change::QuantizeWeights(nf4()), a.engine, None);
    let mut e = vec![ev(
        a.f,
        "SGLang's KV pool after the weights is empty or negative".into(),
    )];
    // Only weights that fill most of the static share are what does not fit; without their
    // footprint the log says only that the pool under the fraction is too small (sglang-4330,
    // gpustack-3831): the KV cache's share is short.
    let filling = a.ctx.weights_loaded.filter(|&(_, weights, free)| {
        let budget = free.map_or(weights, |f| weights.saturating_add(f));
        weights.saturating_mul(5) >= budget.saturating_mul(4)
    });
    let Some((line, weights, free)) = filling else {
        let summary = match a.ctx.weights_loaded {
            Some((_, weights, free)) => format!("kv_cache: the weights took {} with {} left, yet SGLang's KV pool does not fit under --mem-fraction-static; raise the fraction", Bytes(weights), free.map_or("?".into(), |f| Bytes(f).to_string())),
            None => "kv_cache: SGLang's KV pool does not fit in what --mem-fraction-static leaves after the weights; raise the fraction (or shorten --context-length, or use fewer CUDA graphs / speculative tokens)".into(),
        };
        return Decision::new(Code::E6, Cause::KvCache, Stage::Load, 0.6, summary, e);
    };
    let left = free.map_or(String::new(), |f| {
        format!(", {} left on the card", Bytes(f))
    });
    let text = format!("the weights took {}{left}", Bytes(weights));
    let summary = format!("weights: {text} — no room for SGLang's KV pool under --mem-fraction-static (more GPUs, tensor parallelism, or quantized weights)");
    e.insert(
        0,
        Evidence {
            text,
            bytes: Some(weights),
            line: Some(line),
        },
    );
    Decision::new(Code::E6, Cause::Weights, Stage::Load, 0.8, summary, e)
}
