//! Errors without figures: host memory (E12), a bare driver OOM (E10, E11, E40), the part an
//! error names (E23), the phase before it (E24), the innermost frame (E20), memory held before
//! the program started (E59), a context too large for its sequences (E22).

use super::*;

pub(super) fn host(a: &mut Ask) -> Decision {
    let f = a.f;
    a.remedy(Change::MoreHostMemory, a.engine, None);
    let (text, conf) = match &f.event {
        Event::HostOomKiller { process, rss } => {
            let rss_text = rss.map_or(String::new(), |b| format!(" at {} resident", Bytes(b)));
            let summary = format!(
                "host_memory: the Linux OOM killer ended {}{rss_text} — host RAM, not the GPU",
                process.as_deref().unwrap_or("the process")
            );
            return Decision::new(Code::E12, Cause::HostMemory, Stage::Unknown, 0.95, summary, vec![ev(f, "kernel OOM killer".into())]);
        }
        Event::ContainerOomKilled => ("the container hit its memory limit (OOMKilled)".to_string(), 0.9),
        Event::JobMemoryLimit { shm: false } => ("the batch scheduler killed the job over its memory limit (Slurm)".to_string(), 0.85),
        Event::JobMemoryLimit { shm: true } => {
            if let Some(r) = a.remedies.last_mut() {
                r.how = "give the container more shared memory (docker run --shm-size=8g, or --ipc=host), or fewer data-loader workers".into();
            }
            ("the data loader's workers ran out of the container's shared memory (/dev/shm)".to_string(), 0.8)
        }
        Event::HostAllocFailed { bytes: Some(b) } => (format!("the process could not allocate {} of host RAM", Bytes(*b)), 0.9),
        Event::HostAllocFailed { bytes: None } => ("Python raised MemoryError: the interpreter could not get host RAM".to_string(), 0.8),
        Event::RayOomKill => ("Ray's memory monitor killed workers for host memory pressure".to_string(), 0.9),
        Event::PagingFileTooSmall => {
            if let Some(r) = a.remedies.last_mut() {
                r.how = "enlarge the Windows paging file (System → Advanced → Performance → Virtual memory) or close programs: DLLs and memory-mapped weights count against RAM + paging file".into();
            }
            ("Windows' commit limit (RAM + paging file) is reached: \"the paging file is too small\" (error 1455)".to_string(), 0.85)
        }
        Event::OomKillerTasks { tasks } => (format!("the kernel's OOM killer listed {tasks} tasks' memory, the table it prints only when it kills one (the kill line itself is not in the log)"), 0.8),
        Event::HostMemoryShort { needed: Some(n), available } => (format!(
            "the model needs {} of system memory, {} is available",
            Bytes(*n),
            available.map_or("?".into(), |b| Bytes(b).to_string())
        ), 0.9),
        Event::HostMemoryShort { needed: None, available } => (format!(
            "the load failed with {} of system memory left unused: the host's RAM ran out",
            available.map_or("?".into(), |b| Bytes(b).to_string())
        ), 0.7),
        _ => ("the process was killed with SIGKILL (exit code 137), which is what the OOM killer sends; dmesg would confirm".to_string(), 0.6),
    };
    let stage = if matches!(f.event, Event::HostMemoryShort { .. }) {
        Stage::Load
    } else {
        Stage::Unknown
    };
    Decision::new(
        Code::E12,
        Cause::HostMemory,
        stage,
        conf,
        format!("host_memory: {text} — host RAM, not the GPU"),
        vec![ev(f, text)],
    )
}

/// Events without figures: the stage can still decide for a bare driver OOM — while loading it
/// is the weights (vllmv1-club3090-60, a repack); on the first request after an engine that
/// grows its KV cache per token came up it is the KV cache (mistralrs-44); after requests were
/// served successfully it is undecided (mistralrs-1446).
pub(super) fn undecided(a: &mut Ask) -> Decision {
    let f = a.f;
    if let Some(d) = held_before_start(a) {
        return d;
    }
    if let Some(d) = by_named_part(a) {
        return d;
    }
    if matches!(f.event, Event::CandleDriverOom | Event::CudaErrorOom) {
        if let Some(d) = driver_by_stage(a) {
            return d;
        }
    }
    if let Some(d) = by_innermost_frame(a) {
        return d;
    }
    // A message that names two parts ("Insufficient VRAM for model and cache") is not decided
    // by the weaker signal of the phase.
    let phase = if named_parts(&f.quote).len() > 1 {
        None
    } else {
        by_phase(a)
    };
    if let Some(d) = phase
        .or_else(|| driver_by_backtrace(a))
        .or_else(|| one_buffer(a))
    {
        return d;
    }
    a.to_decide = Some(match &f.event {
        // A tiny or first allocation failing usually means the card was already full.
        Event::CublasAllocFailed | Event::CudaErrorOom => format!(
            "run `nvidia-smi` while it fails: memory held by other processes makes it other_process; otherwise {UNKNOWN_TO_DECIDE}"
        ),
        Event::HipErrorOom => format!(
            "run `rocm-smi` while it fails: memory held by other processes makes it other_process; otherwise {UNKNOWN_TO_DECIDE}"
        ),
        _ => UNKNOWN_TO_DECIDE.to_string(),
    });
    let what = undecided_what(f);
    let stage = stage_near(a.ctx, f.line);
    Decision::new(
        Code::E11,
        Cause::Unknown,
        stage,
        0.3,
        format!("unknown: {what}"),
        vec![ev(f, what)],
    )
}

/// An error with no card's figures that still states what it asked for (rule E88): one request
/// of 4 GiB or more outside loading is one forward-pass buffer, as rule P4 reads PyTorch's — no
/// weight tensor (the largest, a 150k-vocabulary embedding of a 70B model at 16 bits, is 2.5 GB)
/// nor one layer's KV cache is that large (jax-alphafold-85: XLA asked 13.8 GB in `predict`).
/// Only where no loading phase or loader frame is above it: a loader may allocate all the
/// weights in one piece.
pub(super) fn one_buffer(a: &mut Ask) -> Option<Decision> {
    let Event::Catalogued(c) = &a.f.event else {
        return None;
    };
    let need = c.needed.filter(|&n| n >= ONE_BUFFER)?;
    if stage_near(a.ctx, a.f.line) == Stage::Load {
        return None;
    }
    step_remedies(a, Cause::Activations);
    let quote = undecided_what(a.f);
    Some(Decision::new(
        Code::E88,
        Cause::Activations,
        Stage::Unknown,
        0.45,
        format!(
            "activations: one request of {} outside loading is one forward-pass buffer (no weight tensor or layer's cache is that large); {quote}",
            Bytes(need)
        ),
        vec![ev_bytes(a.f, format!("one request of {}", Bytes(need)), need)],
    ))
}

/// Memory this program never held (rule E59). When it found the card, before it allocated
/// anything, most of it was already taken (TensorFlow's device discovery: `Total memory:
/// 7.92GiB`, `Free memory: 190.31MiB`; tensorflow-8170), or creating its CUDA context ran out
/// (`cuCtxCreate`, `cuDevicePrimaryCtxRetain` — a context needs a few hundred MiB before any
/// tensor exists; OSPREY3-67, tensorflow-30594): other processes held the card.
pub(super) fn held_before_start(a: &mut Ask) -> Option<Decision> {
    let at = a.f.line;
    let f = a.f;
    if let Some((line, total, free)) = a.ctx.free_at_start.filter(|s| s.0 <= at) {
        let others = total.saturating_sub(free);
        if total > 0 && others.saturating_mul(5) >= total.saturating_mul(4) {
            a.remedy(Change::FreeOtherProcesses, a.engine, Some(others));
            return Some(Decision::new(Code::E59,
                Cause::OtherProcess,
                Stage::Load,
                0.6,
                format!(
                    "other_process: when the program found the card, before it allocated anything, only {} of {} was free — other processes held {}",
                    Bytes(free),
                    Bytes(total),
                    Bytes(others)
                ),
                vec![
                    Evidence {
                        text: format!("free when the device was found: {} of {}", Bytes(free), Bytes(total)),
                        bytes: Some(others),
                        line: Some(line),
                    },
                    ev(f, undecided_what(f)),
                ],
            ));
        }
    }
    let context = a
        .ctx
        .context_create_lines
        .iter()
        .copied()
        .find(|&l| l.abs_diff(at) <= 20)?;
    a.remedy(Change::FreeOtherProcesses, a.engine, None);
    a.to_decide = Some(
        "run `nvidia-smi` while it fails: the processes it lists hold the card; if none does, this program's own earlier contexts (a worker per GPU on one card) do".into(),
    );
    Some(Decision::new(Code::E59,
        Cause::OtherProcess,
        Stage::Load,
        0.5,
        "other_process: creating the CUDA context itself ran out of memory — a context needs a few hundred MiB before any tensor exists, so the card was already full when this program started".into(),
        vec![
            Evidence {
                text: "the CUDA context could not be created".into(),
                bytes: None,
                line: Some(context),
            },
            ev(f, undecided_what(f)),
        ],
    ))
}

/// The message names the part that did not fit in its own words (rule E23): the KV cache
/// ("Not enough memory for KV cache", a KV-cache manager's "No free blocks left"), llama.cpp's
/// context (its KV cache, sized by the context length, is most of it), the model's weights
/// ("error loading model"), a workspace or activation buffer.
pub(super) fn by_named_part(a: &mut Ask) -> Option<Decision> {
    let part = named_part(&a.f.quote)?;
    let quote = undecided_what(a.f);
    let (cause, stage, what) = match part {
        Part::KvCache => {
            a.remedy(Change::ReduceContext(0), a.engine, None);
            a.remedy(Change::LimitConcurrency(0), a.engine, None);
            (Cause::KvCache, Stage::Load, "the KV cache")
        }
        Part::Context => {
            a.remedy(Change::ReduceContext(0), a.engine, None);
            a.remedy(Change::QuantizeKv(KvDtype::Q8_0), a.engine, None);
            (
                Cause::KvCache,
                Stage::Load,
                "the context (its KV cache, sized by the context length, with its compute buffer)",
            )
        }
        Part::Weights => {
            a.remedy(Change::QuantizeWeights(nf4()), a.engine, None);
            a.remedy(Change::CpuOffload, a.engine, None);
            (Cause::Weights, Stage::Load, "the model's weights")
        }
        Part::Activations => {
            a.remedy(Change::ChunkedPrefill(0), a.engine, None);
            a.remedy(Change::TruncatePrompt(0), a.engine, None);
            (
                Cause::Activations,
                Stage::FirstToken,
                "a workspace / activation buffer",
            )
        }
    };
    Some(Decision::new(
        Code::E23,
        cause,
        stage,
        0.55,
        format!("{cause}: the error names what did not fit — {what}; {quote}"),
        vec![ev(a.f, format!("the message names {what}"))],
    ))
}

/// The phase the log shows before an error without figures (rule E24): loading the weights →
/// weights; allocating the KV cache → kv_cache; capturing CUDA graphs, a profile / warm-up run
/// or a serving step → activations (sophgo-llmtpu-8: "Loading bmodel" above the TPU runtime's
/// `bm_alloc_gmem failed`). A weaker signal than a frame or the message's words: confidence 0.45.
pub(super) fn by_phase(a: &mut Ask) -> Option<Decision> {
    let (line, hint) = hint_line_near(a.ctx, a.f.line)?;
    let (cause, stage, what) = match hint {
        StageHint::Load => (Cause::Weights, Stage::Load, "loading the model's weights"),
        StageHint::CacheAlloc => (Cause::KvCache, Stage::Load, "allocating the KV cache"),
        StageHint::GraphCapture => (Cause::Activations, Stage::Load, "capturing CUDA graphs"),
        StageHint::Profile => (Cause::Activations, Stage::Load, "a profile / warm-up run"),
        StageHint::EngineStep => (Cause::Activations, Stage::FirstToken, "a serving step"),
        StageHint::PipelineStep => (
            Cause::Activations,
            Stage::FirstToken,
            "a pipeline's compute step (sampling, a VAE decode)",
        ),
        StageHint::Serving | StageHint::Loaded => return None,
    };
    match cause {
        Cause::Weights => {
            a.remedy(Change::QuantizeWeights(nf4()), a.engine, None);
            a.remedy(Change::CpuOffload, a.engine, None);
        }
        c => step_remedies(a, c),
    }
    let quote = undecided_what(a.f);
    Some(Decision::new(
        Code::E24,
        cause,
        stage,
        0.45,
        format!(
            "{cause}: the phase the log shows {} the error is {what}; {quote}",
            // vLLM and others print the error first and the phase's failure under it.
            if line > a.f.line {
                "just after"
            } else {
                "before"
            }
        ),
        vec![
            Evidence {
                text: format!("the log was {what} when it ran out"),
                bytes: None,
                line: Some(line),
            },
            ev(a.f, quote.clone()),
        ],
    ))
}

/// node-llama-cpp sizes the context's KV cache for every sequence before it allocates: with more
/// than one sequence the sequences multiply it (concurrency), with one the context itself is it.
pub(super) fn context_too_large(a: &mut Ask, sequences: Option<u64>) -> Decision {
    let f = a.f;
    let e = vec![ev(f, "the context's KV cache does not fit the VRAM".into())];
    match sequences {
        Some(s) if s > 1 => {
            a.remedy(Change::LimitConcurrency(1), a.engine, None);
            a.remedy(Change::ReduceContext(0), a.engine, None);
            Decision::new(Code::E22, Cause::Concurrency, Stage::Load, 0.75, format!("concurrency: a context for {s} sequences at once is too large for the VRAM; each sequence has its own KV cache"), e)
        }
        _ => {
            a.remedy(Change::ReduceContext(0), a.engine, None);
            Decision::new(
                Code::E22,
                Cause::KvCache,
                Stage::Load,
                0.75,
                "kv_cache: the context size is too large for the VRAM".into(),
                e,
            )
        }
    }
}

/// An out-of-memory without figures still has its traceback: the innermost frame above it
/// (within 40 lines) says what was being allocated, as rule P7 reads it for PyTorch's message —
/// eager attention or a forward-pass buffer → activations, the KV cache's update → kv_cache, a
/// weight loader → weights. At a lower confidence than with figures (ipex-llm-10677: XPU's
/// "Allocation is out of device memory" under `attn_weights = torch.matmul`).
pub(super) fn by_innermost_frame(a: &mut Ask) -> Option<Decision> {
    if let Some(line) = constructor_innermost(a.ctx, a.f.line) {
        a.remedy(Change::QuantizeWeights(nf4()), a.engine, None);
        a.remedy(Change::CpuOffload, a.engine, None);
        let quote = undecided_what(a.f);
        return Some(Decision::new(Code::E20,
            Cause::Weights,
            Stage::Load,
            0.45,
            format!("weights: the innermost frame above the error is a constructor (`__init__`) — the model being built or loaded onto the card; {quote}"),
            vec![
                Evidence {
                    text: "innermost frame: a constructor".into(),
                    bytes: None,
                    line: Some(line),
                },
                ev(a.f, quote),
            ],
        ));
    }
    // On one line the loader wins, then the cache, then a forward pass's buffer.
    let (line, frame) = innermost_frame(
        a.ctx,
        a.f.line,
        40,
        &[
            Frame::Load,
            Frame::Cache,
            Frame::Activation,
            Frame::EagerAttention,
        ],
    )?;
    let cause = match frame {
        Frame::Load => Cause::Weights,
        Frame::Cache => Cause::KvCache,
        _ => Cause::Activations,
    };
    let (stage, what) = match cause {
        Cause::Weights => {
            a.remedy(Change::QuantizeWeights(nf4()), a.engine, None);
            (Stage::Load, "a weight loader")
        }
        Cause::KvCache => {
            a.remedy(Change::ReduceContext(0), a.engine, None);
            (Stage::LongGeneration, "the KV cache's update")
        }
        _ => {
            a.remedy(Change::TruncatePrompt(0), a.engine, None);
            (
                Stage::FirstToken,
                "a forward pass's buffer (attention, MLP or logits)",
            )
        }
    };
    let quote = undecided_what(a.f);
    Some(Decision::new(
        Code::E20,
        cause,
        stage,
        0.45,
        format!("{cause}: the innermost frame above the error is {what}; {quote}"),
        vec![
            Evidence {
                text: format!("innermost frame: {what}"),
                bytes: None,
                line: Some(line),
            },
            ev(a.f, quote),
        ],
    ))
}

pub(super) fn undecided_what(f: &Finding) -> String {
    match &f.event {
        Event::CublasAllocFailed => "cuBLAS could not allocate its workspace: the card was already full (an OOM in disguise)".into(),
        Event::CudaErrorOom => "a CUDA call returned out of memory without saying how much was asked".into(),
        Event::TurbomindOom { .. } => "lmdeploy's TurboMind allocator ran out; the log does not say for what".into(),
        Event::TensorrtOom { .. } => "TensorRT-LLM's allocator ran out".into(),
        Event::HipErrorOom => "the HIP driver returned out of memory without saying for what".into(),
        Event::MetalOom => "a Metal command buffer failed for lack of memory; the log has no figures".into(),
        Event::ExllamaInsufficient => "exllamav2 found no device with room for the model and its cache; the log does not say which part did not fit".into(),
        Event::SglangReqSlots => "SGLang's request-slot pool ran out; the log does not say what held the slots".into(),
        Event::AllocationExceeds { .. } => "an allocation would exceed the allowed device memory; the log has no figures".into(),
        Event::DeviceBufferOom { requested, .. } => format!("the accelerator's allocator could not place a buffer of {}; the log does not give the device's size", requested.map_or("?".into(), |b| Bytes(b).to_string())),
        Event::OomWords => format!("an out-of-memory message in a wording llm-oom does not know: \"{}\"", f.quote),
        Event::Catalogued(c) => c.what.to_string(),
        _ => "the CUDA driver returned out of memory without saying for what".into(),
    }
}

pub(super) fn driver_by_stage(a: &mut Ask) -> Option<Decision> {
    let f = a.f;
    let served = a.ctx.served_ok.iter().any(|&l| l < f.line);
    let Some(hint) = hint_near(a.ctx, f.line) else {
        return driver_by_backtrace(a);
    };
    match hint {
        StageHint::Load => {
            a.remedy(Change::QuantizeWeights(nf4()), a.engine, None);
            a.remedy(Change::CpuOffload, a.engine, None);
            Some(Decision::new(
                Code::E10,
                Cause::Weights,
                Stage::Load,
                0.65,
                "weights: the driver ran out while the weights were being loaded or converted"
                    .into(),
                vec![ev(f, "out of memory inside the weight loading".into())],
            ))
        }
        StageHint::Serving if !served => {
            a.remedy(Change::ReduceContext(0), a.engine, None);
            a.remedy(Change::CapNewTokens(0), a.engine, None);
            Some(Decision::new(Code::E10, Cause::KvCache, Stage::LongGeneration, 0.55, "kv_cache: the model loaded and the first request ran out; an engine without a pre-allocated KV cache grows it with every token".into(), vec![ev(f, "out of memory on the first request after the model loaded".into())]))
        }
        _ => driver_by_backtrace(a),
    }
}

/// A Rust backtrace below a bare driver OOM lists the innermost frame first: a KV cache's append
/// is the KV cache; a layer's forward pass or its workspace (candle-xinfer-357: an MoE
/// activation pool under `forward_with_routing`) is activations. Weight loaders are a stage hint.
pub(super) fn driver_by_backtrace(a: &mut Ask) -> Option<Decision> {
    let at = a.f.line;
    let first_after = |lines: &[usize]| lines.iter().copied().find(|&l| l > at && l - at <= 40);
    let kv = first_after(&a.ctx.cache_lines);
    let act = first_after(&a.ctx.activation_lines);
    let f = a.f;
    match (kv, act) {
        (Some(k), a2) if a2.is_none_or(|x| k < x) => {
            a.remedy(Change::ReduceContext(0), a.engine, None);
            a.remedy(Change::QuantizeKv(KvDtype::Q8_0), a.engine, None);
            Some(Decision::new(
                Code::E40,
                Cause::KvCache,
                Stage::LongGeneration,
                0.6,
                "kv_cache: the backtrace below the out-of-memory error goes through the KV cache"
                    .into(),
                vec![
                    Evidence {
                        text: "innermost frame: the KV cache".into(),
                        bytes: None,
                        line: Some(k),
                    },
                    ev(f, undecided_what(f)),
                ],
            ))
        }
        (_, Some(x)) => {
            a.remedy(Change::ChunkedPrefill(0), a.engine, None);
            a.remedy(Change::TruncatePrompt(0), a.engine, None);
            Some(Decision::new(Code::E40, Cause::Activations, Stage::FirstToken, 0.6, "activations: the backtrace below the out-of-memory error is a layer's forward pass (its activation buffers / workspace), not the weight loader or the KV cache".into(), vec![Evidence { text: "innermost forward-pass frame".into(), bytes: None, line: Some(x) }, ev(f, undecided_what(f))]))
        }
        _ => None,
    }
}
