//! The other engines' own messages: TGI (E13, E46), TurboMind (E47), TensorRT-LLM (E5, E30,
//! E36), accelerate's batch finder (E14) and transformers' dispatch check (E87).

use super::*;

pub(super) fn tgi_prefill(a: &mut Ask, tokens: Option<u64>) -> Decision {
    a.remedy(
        Change::ChunkedPrefill(tokens.map_or(0, |t| t / 2)),
        a.engine,
        None,
    );
    Decision::new(Code::E13, Cause::Activations, Stage::Load, 0.85, format!(
        "activations: TGI's warm-up could not prefill {} tokens at once (--max-batch-prefill-tokens)",
        tokens.map_or("the configured".into(), group)
    ), vec![ev(a.f, "TGI warm-up prefill failed".into())])
}

/// TGI's warm-up sizes its KV cache for `--max-batch-total-tokens`; when that many tokens do not
/// fit beside the weights it refuses to start (tgi-710: 16,000 tokens of Llama-2-70B on 8 A10G).
pub(super) fn tgi_total_tokens(a: &mut Ask, tokens: Option<u64>) -> Decision {
    a.remedy(Change::ReduceContext(0), a.engine, None);
    if let Some(r) = a.remedies.last_mut() {
        r.how = "lower --max-batch-total-tokens (and --max-total-tokens), or shard over more GPUs"
            .into();
    }
    let n = tokens.map_or("the configured".into(), group);
    Decision::new(Code::E46, Cause::KvCache, Stage::Load, 0.8, format!(
        "kv_cache: TGI's warm-up found no room beside the weights for a KV cache of {n} total tokens (--max-batch-total-tokens)"
    ), vec![ev(a.f, format!("TGI cannot hold {n} total tokens"))])
}

/// TurboMind creates the model instance with its KV cache, `cache_max_entry_count` of the free
/// memory (lmdeploy-1019, and the maintainers' answer in lmdeploy#978: lower it to 0.2).
pub(super) fn turbomind_instance(a: &mut Ask) -> Decision {
    a.remedy(Change::ReduceContext(0), a.engine, None);
    if let Some(r) = a.remedies.last_mut() {
        r.how = "lower --cache-max-entry-count (the KV cache's share of free memory, 0.8 by default), e.g. 0.2".into();
    }
    Decision::new(Code::E47, Cause::KvCache, Stage::Load, 0.7, "kv_cache: lmdeploy's TurboMind ran out creating the model instance, where it allocates its KV cache as a share of the free memory".into(), vec![ev(a.f, "TurboMind out of memory in create_model_instance".into())])
}

/// TGI's paged KV cache is a pool of blocks sized at warm-up; a request that needs more blocks
/// than are free fails (tgi-1356: asked 107, 4 free) — the KV cache is what ran out.
pub(super) fn tgi_cache_blocks(a: &mut Ask, asked: Option<u64>, free: Option<u64>) -> Decision {
    a.remedy(Change::LimitConcurrency(0), a.engine, None);
    if let Some(r) = a.remedies.last_mut() {
        r.how = "--max-total-tokens / --max-batch-total-tokens lower, or --max-concurrent-requests"
            .into();
    }
    a.remedy(Change::ReduceContext(0), a.engine, None);
    let g = |x: Option<u64>| x.map_or("?".into(), group);
    Decision::new(Code::E13, Cause::KvCache, Stage::FirstToken, 0.75, format!(
        "kv_cache: TGI's KV cache block pool is exhausted — a request asked for {} blocks, {} were free",
        g(asked), g(free)
    ), vec![ev(a.f, "TGI: out of available KV cache blocks".into())])
}

/// accelerate's batch-size finder reached zero: batch size 1 ran out too, so the batch is not
/// what does not fit — one sample (its length: activations) or the model with its optimizer
/// states (weights) is, and the log does not say which.
pub(super) fn batch_size_exhausted(a: &mut Ask) -> Decision {
    a.to_decide = Some(format!(
        "run one step at batch size 1 with the longest sample and read the out-of-memory message (or `torch.cuda.memory_summary()`): truncating long samples fixes activations, LoRA / 8-bit optimizers the weights; or {UNKNOWN_TO_DECIDE}"
    ));
    a.remedy(Change::TruncatePrompt(0), a.engine, None);
    a.remedy(Change::QuantizeWeights(nf4()), a.engine, None);
    Decision::new(Code::E14, Cause::Unknown, Stage::Unknown, 0.35, "unknown: accelerate's batch-size finder halved the batch down to zero — every batch size, 1 included, ran out of memory, so a single sample (its length) or the model itself does not fit".into(), vec![ev(a.f, "find_executable_batch_size: out of memory at every batch size".into())])
}

/// TensorRT-LLM names the component it could not create after the model: the KV cache pool
/// (trtllm-5872), the executor's runtime buffers (trtllm-5950), or the model itself.
pub(super) fn trt_component(
    a: &mut Ask,
    component: &str,
    total: Option<u64>,
    free: Option<u64>,
) -> Decision {
    let figures = match (free, total) {
        (Some(f), Some(t)) => format!(" with {} of {} free", Bytes(f), Bytes(t)),
        _ => String::new(),
    };
    let e = vec![ev(
        a.f,
        format!("the executor could not create: {component}{figures}"),
    )];
    let (cause, stage, what) = match component {
        c if c.contains("KV cache") => (
            Cause::KvCache,
            Stage::Load,
            "the KV cache pool did not fit after the model (lower kv_cache_config.free_gpu_memory_fraction or max_seq_len)",
        ),
        c if c.contains("Model") => (Cause::Weights, Stage::Load, "the model did not fit"),
        c if c.contains("Additional executor resources") || c.contains("Sampler") => (
            Cause::Activations,
            Stage::Load,
            "the executor's runtime buffers (max_batch_size × max_num_tokens, CUDA graphs) did not fit after the KV cache",
        ),
        _ => {
            return Decision::new(Code::E5, Cause::Unknown, Stage::Load, 0.3, format!("unknown: TensorRT-LLM could not create {component}"), e);
        }
    };
    match cause {
        Cause::KvCache => a.remedy(Change::ReduceContext(0), a.engine, None),
        Cause::Weights => a.remedy(Change::QuantizeWeights(WeightDtype::Int8), a.engine, None),
        _ => a.remedy(Change::LimitConcurrency(0), a.engine, None),
    }
    Decision::new(
        Code::E5,
        cause,
        stage,
        0.8,
        format!("{cause}: TensorRT-LLM: {what}"),
        e,
    )
}

/// TensorRT-LLM's runtime allocates its buffers for the engine's build-time `max_batch_size`
/// (× input and output lengths) when the model instance starts, whatever the traffic: a stated
/// ceiling of 64 sequences or more is what those buffers multiply (trtllm-401: 192 sequences of
/// 2,048 + 2,048 on a 40 GB A100). Without one the allocator's failure is left undecided.
pub(super) fn trt_allocator(a: &mut Ask) -> Decision {
    let Some(n) = a.ctx.workload.max_batch_size.filter(|&n| n >= 64) else {
        return trt_step_buffers(a).unwrap_or_else(|| undecided(a));
    };
    a.remedy(Change::LimitConcurrency(0), a.engine, None);
    let e = vec![ev(
        a.f,
        format!("TensorRT-LLM's allocator ran out; the engine was built for max_batch_size {n}"),
    )];
    Decision::new(Code::E30,
        Cause::Concurrency,
        Stage::Load,
        0.6,
        format!("concurrency: TensorRT-LLM sizes its runtime buffers for max_batch_size {n} sequences at start-up; rebuild the engine with a smaller max_batch_size (or max_num_tokens)"),
        e,
    )
}

/// TensorRT-LLM's batch manager resizes its runtime buffers (`RuntimeBuffers::reshape`, from
/// `prepareStep`) to the requests in flight at every step: an allocation failing there, while
/// serving, grew with the number of concurrent requests (trtllm-2857: fine until 5+ streams).
pub(super) fn trt_step_buffers(a: &mut Ask) -> Option<Decision> {
    let at = a.f.line;
    let near = a
        .ctx
        .runtime_step_lines
        .iter()
        .any(|&l| l >= at && l <= at.saturating_add(12));
    if !near {
        return None;
    }
    a.remedy(Change::LimitConcurrency(0), a.engine, None);
    let e = vec![ev(
        a.f,
        "TensorRT-LLM's allocator ran out resizing its runtime buffers for a step (RuntimeBuffers::reshape)".into(),
    )];
    Some(Decision::new(Code::E36,
        Cause::Concurrency,
        Stage::FirstToken,
        0.5,
        "concurrency: TensorRT-LLM resizes its per-step runtime buffers (logits, inputs) to the requests in flight, and a step with more of them did not fit; cap the concurrent requests (max_batch_size, max_num_tokens) or drop generation logits".into(),
        e,
    ))
}

/// transformers would put a quantized model's modules on the CPU or disk: the weights do not
/// fit the GPU(s) at that precision (the check before any allocation).
pub(super) fn dispatched_off(a: &mut Ask) -> Decision {
    a.remedy(Change::QuantizeWeights(nf4()), a.engine, None);
    a.remedy(Change::CpuOffload, a.engine, None);
    a.remedy(Change::LargerGpu(0), a.engine, None);
    Decision::new(Code::E87,
        Cause::Weights,
        Stage::Load,
        0.85,
        "weights: the quantized model does not fit the GPU(s) — device_map put modules on the CPU or disk".into(),
        vec![ev(a.f, "transformers dispatched modules off the GPU: not enough GPU RAM for the weights".into())],
    )
}
