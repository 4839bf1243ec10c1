//! The rules P1–P9 that decide a PyTorch out-of-memory message, in the order `torch` runs them
//! (docs/explain.md, "PyTorch's message").

use super::*;

/// Free memory the driver reports but does not hand out (page tables, the context's growth):
/// a margin below this after the segment is no room (pytorch-gpt-sovits-1516: 2 MiB asked with
/// 2.69 MiB free; rocm-flux-webui-25: 80 MiB with 84 MiB).
pub(super) const DRIVER_SLACK: u64 = 64 << 20;

/// The request fits in what is free (and no cap explains it): the figures do not explain the
/// failure — another device, a driver limit, or a different allocator (rocm-autotrain-737,
/// transformers-taggui-188, vllmv1-xpu-llmscaler-672).
pub(super) fn contradiction(a: &mut Ask, t: &TorchOom, acc: &Accounting) -> Option<Decision> {
    let fits = t.requested.is_some()
        && t.free.is_some()
        && segment(acc.request).saturating_add(DRIVER_SLACK) <= acc.free;
    // A request larger than the whole card cannot fit whatever "free" says (TheRock-4598: an APU
    // reports 84.98 GiB free of a 15.49 GiB card — the system RAM it shares — and 16 GiB fails).
    let larger_than_card = acc.total > 0 && acc.request > acc.total;
    if !fits || acc.capped || t.backend == Some("mps") || larger_than_card {
        return None;
    }
    a.to_decide = Some("run `nvidia-smi` while it fails and check which device the process uses (CUDA_VISIBLE_DEVICES): the printed figures say the request fits".into());
    Some(Decision::new(Code::P1, Cause::Unknown, stage_near(a.ctx, a.f.line), 0.4, format!("unknown: PyTorch ran out asking for {} with {} free — the figures say it fits, so they do not decide", Bytes(acc.request), Bytes(acc.free)), torch_evidence(a, t, acc)))
}

/// Another process holds what was missing (pytorch_other_process.log, accelerate-idmvton-11).
/// Under a per-process cap other processes do not shrink this one's allowance; a request larger
/// than the card is not theirs to free (chatchat-3992).
pub(super) fn other_process(a: &mut Ask, t: &TorchOom, acc: &Accounting) -> Option<Decision> {
    let (others, total) = (acc.others, acc.total);
    let held = others > 0 && others >= acc.short() && others.saturating_mul(20) >= total;
    if acc.capped || !held || (total > 0 && acc.request > total) {
        return None;
    }
    a.remedy(Change::FreeOtherProcesses, a.engine, Some(others));
    let e = torch_evidence(a, t, acc);
    Some(Decision::new(Code::P2,
        Cause::OtherProcess,
        stage_near(a.ctx, a.f.line),
        0.85,
        match t.requested {
            Some(r) => format!(
                "other_process: other processes hold {} of the card; the request for {} was {} short",
                Bytes(others),
                Bytes(r),
                Bytes(acc.short())
            ),
            None => format!(
                "other_process: other processes hold {} of the card, which this process's figures leave unexplained",
                Bytes(others)
            ),
        },
        e,
    ))
}

/// What the engine was doing decides when its figures cannot: CUDA-graph capture and profile /
/// warm-up runs are activation peaks (sglang-5285); a cache allocation right after loading is
/// the KV cache (exllamav2-677); a vLLM engine step runs after the KV cache was sized by the
/// profile, so what grew is the step's activations (vllm-9290-multistep, vllm-15039).
pub(super) fn stage_signal(a: &mut Ask, t: &TorchOom, acc: &Accounting) -> Option<Decision> {
    let (cause, stage, summary) = stage_of(acc.stage_hint?, &request_text(t))?;
    let e = torch_evidence(a, t, acc);
    step_remedies(a, cause);
    Some(Decision::new(Code::P3, cause, stage, 0.75, summary, e))
}

/// Memory in PyTorch's private pools ("allocated in private pools (e.g., CUDA Graphs)") means
/// CUDA graphs were captured: a serving engine (vLLM, SGLang) captures them after loading the
/// weights and sizing its KV cache, so an OOM after it, with no frame or stage saying more, is
/// a step's buffers (sglang-4547, vllm-v1-club3090-16).
pub(super) fn after_graph_capture(a: &mut Ask, t: &TorchOom, acc: &Accounting) -> Option<Decision> {
    if !matches!(
        acc.stage_hint,
        None | Some(StageHint::Serving | StageHint::Loaded)
    ) {
        return None;
    }
    let pools = t.private_pools.filter(|&p| p > 0)?;
    let summary = format!("activations: CUDA graphs were already captured ({} in private pools), so the engine was past start-up — weights loaded, KV cache sized; a step's buffers asked for {}", Bytes(pools), Bytes(acc.request));
    let e = torch_evidence(a, t, acc);
    step_remedies(a, Cause::Activations);
    Some(Decision::new(
        Code::P7b,
        Cause::Activations,
        Stage::FirstToken,
        0.7,
        summary,
        e,
    ))
}

/// The remedies for a stage signal's cause: a shorter context for the KV cache, else the
/// engine's share of the card and smaller steps.
pub(super) fn step_remedies(a: &mut Ask, cause: Cause) {
    match cause {
        Cause::KvCache => a.remedy(Change::ReduceContext(0), a.engine, None),
        _ => {
            a.remedy(Change::RaiseUtilization(85), a.engine, None);
            if let Some(r) = a.remedies.last_mut() {
                r.how
                    .push_str(" (or --enforce-eager, or fewer tokens per step)");
            }
            a.remedy(Change::ChunkedPrefill(0), a.engine, None);
        }
    }
}

/// What a stage signal says of a PyTorch OOM: (cause, stage, summary); loading and serving do
/// not decide by themselves.
pub(super) fn stage_of(hint: StageHint, req: &str) -> Option<(Cause, Stage, String)> {
    Some(match hint {
        StageHint::GraphCapture => (Cause::Activations, Stage::Load, format!("activations: capturing CUDA graphs asked for {req} after the KV cache took its share; lower gpu_memory_utilization (or --mem-fraction-static) or run eager")),
        StageHint::Profile => (Cause::Activations, Stage::Load, format!("activations: the profile / warm-up run asked for {req}: the peak of one batch at the configured sizes does not fit")),
        StageHint::CacheAlloc => (Cause::KvCache, Stage::Load, format!("kv_cache: allocating the KV cache after the weights asked for {req}; shorten the maximum sequence length")),
        StageHint::EngineStep => (Cause::Activations, Stage::FirstToken, format!("activations: a serving step asked for {req} beyond what the profile left; the KV cache was already sized, so the step's buffers (long prompts, LoRA, multi-step) grew")),
        StageHint::PipelineStep => (Cause::Activations, Stage::FirstToken, format!("activations: a pipeline's compute step (sampling, a VAE decode) asked for {req} with the model loaded: its working tensors grow with the image or video size (tile it, or lower the resolution or frames)")),
        StageHint::Load | StageHint::Serving | StageHint::Loaded => return None,
    })
}

/// Loading is the weights (pytorch_load_weights.log, vllm-636). A single request of a quarter
/// of the card or more outside loading is one forward-pass buffer — weights load tensor by
/// tensor (chatchat-3992: 128 GiB on a 24 GiB card; megatron-92: fp32 logits of 9.3 GiB on
/// 10.8; vllm-7721: 16 GiB of 44.5 at start-up, whatever gpu_memory_utilization).
pub(super) fn load_or_huge(a: &mut Ask, t: &TorchOom, acc: &Accounting) -> Option<Decision> {
    let above = stage_near(a.ctx, a.f.line) == Stage::Load
        || acc.stage_hint == Some(StageHint::Load)
        || constructor_innermost(a.ctx, a.f.line).is_some();
    let quoted_below = if above {
        None
    } else {
        loader_quoted_below(a.ctx, a.f.line)
    };
    // Weights load tensor by tensor: a request larger than any weight tensor is not the load,
    // whatever the log says above it (inseq-240: 15 GiB asked under a script that had called
    // `load_model` before), unless the loader allocates for all weights at once
    // (transformers' `caching_allocator_warmup`).
    let one_piece_loader = || near(&a.ctx.one_piece_load_lines, a.f.line).is_some();
    let loading =
        (above || quoted_below.is_some()) && (acc.request < ONE_BUFFER || one_piece_loader());
    // A quarter of the card, as for other accelerators' figures (rule E8); a request the
    // allocator's cache could have held is left to the fragmentation rule (pytorch-mgfn-35).
    // Or larger than any one tensor of a model's weights or of a per-layer KV cache (the
    // largest weight, a 150k-vocabulary embedding of a 70B model at 16 bits, is 2.5 GB):
    // transformers-starcoder-46 asked 6.59 GiB of 31.75 in one piece while generating.
    // A frame that names the buffer (P7) says more than its size: the size alone decides only
    // without one.
    let framed = || {
        let kinds = [
            Frame::EagerAttention,
            Frame::Activation,
            Frame::Cache,
            Frame::Optimizer,
        ];
        innermost_frame(a.ctx, a.f.line, 200, &kinds).is_some()
    };
    let quarter = (acc.total > 0 && acc.request.saturating_mul(4) >= acc.total
        || acc.request >= ONE_BUFFER && !framed())
        && acc.reserved_unallocated < acc.request;
    let huge = quarter || (t.requested.is_none() && t.requested_as_written.is_some());
    let e = torch_evidence(a, t, acc);
    if loading {
        a.remedy(Change::QuantizeWeights(nf4()), a.engine, None);
        a.remedy(Change::QuantizeWeights(WeightDtype::Int8), a.engine, None);
        a.remedy(Change::CpuOffload, a.engine, None);
        a.remedy(Change::LargerGpu(0), a.engine, None);
        // Without figures the loading frame is all there is.
        let figureless = t.requested.is_none() && t.free.is_none();
        let summary = if figureless {
            "weights: out of memory while loading the model (the log gives no figures)".to_string()
        } else {
            format!(
                "weights: out of memory while loading the model — {} asked, {} free",
                request_text(t),
                Bytes(acc.free)
            )
        };
        let sure = if figureless { 0.6 } else { 0.8 };
        let Some(line) = quoted_below else {
            return Some(Decision::new(
                Code::P4,
                Cause::Weights,
                Stage::Load,
                sure,
                summary,
                e,
            ));
        };
        let mut e = e;
        e.push(Evidence {
            text: "the frame quoted below the error moves the model to the device".into(),
            bytes: None,
            line: Some(line),
        });
        return Some(Decision::new(
            Code::P4,
            Cause::Weights,
            Stage::Load,
            0.6,
            summary,
            e,
        ));
    }
    if !huge {
        return None;
    }
    a.remedy(Change::TruncatePrompt(0), a.engine, None);
    a.remedy(Change::ChunkedPrefill(0), a.engine, None);
    let pct = match acc.total {
        0 => "?".to_string(),
        t => (acc.request.saturating_mul(100) / t).to_string(),
    };
    Some(Decision::new(Code::P4, Cause::Activations, Stage::FirstToken, 0.75, format!("activations: one request for {} ({pct} % of the card) outside loading is a single forward-pass buffer (logits, attention scores) — weights load tensor by tensor", request_text(t)), e))
}

/// A paste without a traceback above its error may quote the failing frame below it
/// (rocm-flux-webui-25: "It seems to happen around here: … pipe.to(device)"): with no frame of
/// any kind within 200 lines above, a loader frame within 12 lines below is where it ran out.
pub(super) fn loader_quoted_below(ctx: &Context, at: usize) -> Option<usize> {
    let kinds = [
        &ctx.load_lines,
        &ctx.generation_lines,
        &ctx.eager_attention_lines,
        &ctx.activation_lines,
        &ctx.cache_lines,
        &ctx.optimizer_lines,
    ];
    if kinds.iter().any(|v| near(v, at).is_some()) {
        return None;
    }
    let first_below = kinds
        .iter()
        .filter_map(|v| v.iter().copied().find(|&l| l > at && l - at <= 12))
        .min()?;
    ctx.load_lines.contains(&first_below).then_some(first_below)
}

/// A single request this large is no weight tensor nor one layer's KV cache (rule P4).
pub(super) const ONE_BUFFER: u64 = 4 << 30;

/// Enough cached-but-unused memory for the request, yet no block of that size: fragmentation —
/// when that cache is a real share of the card and live tensors are well below it. PyTorch
/// prints its expandable_segments hint on every OOM; with live tensors at ~90 % of the card the
/// cache is slack and the cause is what filled the card (tgi-1374, vllm-9290-multistep). A
/// growing cache must show twice the share (a long context is still the context's fault).
pub(super) fn fragmentation(a: &mut Ask, t: &TorchOom, acc: &Accounting) -> Option<Decision> {
    let (unalloc, req, total) = (acc.reserved_unallocated, acc.request, acc.total);
    let share = |min_pct: u64| {
        if total > 0 {
            unalloc.saturating_mul(100) >= total.saturating_mul(min_pct)
        } else {
            unalloc >= 1 << 30
        }
    };
    // Live tensors above the card (Windows lets the driver spill into shared system memory:
    // LARS-23, 26.4 GiB live on 24) say nothing of how full the card is.
    let slack = acc.live_pct().is_some_and(|p| (88..=100).contains(&p));
    // The same work ran and fit before (a serving or training loop's progress lines): holes
    // beside a filled limit are the long-lived process's fragmentation (two H100 runs: a process
    // serving growing prompts ran out at 7,840 and 4,548 tokens, which a fresh process ran, and
    // went 4–5 requests further with expandable segments).
    let steady = steady(a);
    let fragmented = unalloc >= req && unalloc > 0 && share(5) && contiguous_would_fit(acc, steady);
    let growth = near(&a.ctx.cache_lines, a.f.line).is_some()
        || batch_line(a).is_some_and(|(_, _, s)| s >= 4096);
    // One forward or backward buffer larger than any weight tensor, named by its frame
    // (accelerate-1864: 12 GiB for softmax's backward at 8k tokens, 12.19 GiB cached): the
    // buffer is the story — the cache only decides whether it fails now or a little later.
    let big_buffer = req >= ONE_BUFFER
        && innermost_frame(
            a.ctx,
            a.f.line,
            200,
            &[Frame::EagerAttention, Frame::Activation],
        )
        .is_some();
    // With the card full of live tensors the cache still contributes (the allocator setting
    // would return it), but it is not the cause.
    if fragmented && !big_buffer && (steady || (!slack && (!growth || share(10)))) {
        a.remedy(Change::AllocatorSettings, a.engine, Some(unalloc));
        let e = torch_evidence(a, t, acc);
        let before = if steady {
            let n = a.ctx.steps_done.iter().filter(|&&l| l < a.f.line).count();
            format!("; the program printed {n} progress lines before it: the same work ran within this limit")
        } else {
            String::new()
        };
        return Some(Decision::new(Code::P5, Cause::Fragmentation, stage_near(a.ctx, a.f.line), 0.7, format!(
            "fragmentation: {} is cached by PyTorch but unallocated — more than the {} asked — yet no block is large enough{before}",
            Bytes(unalloc), Bytes(req)
        ), e));
    }
    // Holes that could serve the request beside live tensors that fill the limit: which of the
    // two is the cause, only a rerun with every hole returned can say.
    let tail = unalloc >= req && unalloc > 0 && share(5) && !fragmented;
    if tail && a.to_decide.is_none() {
        a.to_decide = Some(format!(
            "run it again with PYTORCH_ALLOC_CONF=expandable_segments:True, which returns the {} of cached holes: if it then runs, the cause was fragmentation; if it runs out again, it is what filled the card (measured on an H100: four single runs of that shape ran out again; two long-lived processes serving growing prompts went further). `llm-oom watch -- <the command>` records which part filled it",
            Bytes(unalloc)
        ));
    }
    if fragmented || tail {
        let text = format!("{} cached but unallocated", Bytes(unalloc));
        a.contributing.push(Contributing {
            cause: Cause::Fragmentation,
            evidence: ev_bytes(a.f, text, unalloc),
        });
        a.remedy(Change::AllocatorSettings, a.engine, Some(unalloc));
    }
    None
}

/// The work ran and fit before: at least two progress lines (`step 1180 loss 1.92`, a Trainer's
/// `{'loss': …}`) ahead of the error.
pub(super) fn steady(a: &Ask) -> bool {
    a.ctx.steps_done.iter().filter(|&&l| l < a.f.line).count() >= 2
}

/// Fragmentation needs the memory to be there, only not in one piece — the one rule of
/// [`crate::holes`], shared with the allocator-record reader: live tensors plus the request within
/// the limit (the cap under `set_per_process_memory_fraction`, else the card), and live tensors
/// not already filling it (Mistral-7B, batch 48 × 2,048 under a 20 GiB cap: 1.50 GiB asked,
/// 2.00 GiB cached, 16.94 GiB live — run again with expandable segments, it ran out anyway).
pub(super) fn contiguous_would_fit(acc: &Accounting, steady: bool) -> bool {
    let Some(live) = acc.allocated else {
        return true;
    };
    // The card, not the card less "other" processes: a message that lists this process by its
    // pid lists it among them (pytorch-152135).
    holes::Pool {
        live,
        unallocated: acc.reserved_unallocated,
        request: acc.request,
        limit: acc.total,
        steady,
    }
    .fragmented()
}

/// Several OOMs, dead worker threads, or a batch above one in the log (pytorch_threads.log).
pub(super) fn concurrency(a: &mut Ask, t: &TorchOom, acc: &Accounting) -> Option<Decision> {
    let ooms = a
        .all
        .iter()
        .filter(|x| matches!(x.event, Event::TorchOom(_)))
        .count();
    let threads = a.ctx.thread_exceptions.len();
    let batch = batch_line(a);
    if !(ooms > 1 || threads > 0 || batch.is_some_and(|(_, b, _)| b > 1)) {
        return None;
    }
    let why = if threads > 0 {
        format!("{threads} worker thread(s) died")
    } else if ooms > 1 {
        format!("{ooms} out-of-memory errors in one log")
    } else {
        format!("{} sequences at once", batch.map_or(0, |b| b.1))
    };
    let limit = batch.map_or(1, |b| (b.1 / 2).max(1));
    a.remedy(Change::LimitConcurrency(limit), a.engine, None);
    a.remedy(Change::CapNewTokens(0), a.engine, None);
    let e = torch_evidence(a, t, acc);
    Some(Decision::new(
        Code::P6,
        Cause::Concurrency,
        stage_near(a.ctx, a.f.line),
        0.65,
        format!("concurrency: {why}; each sequence adds its own KV cache and activations"),
        e,
    ))
}

/// The innermost frame before the error says what was being allocated: eager attention's
/// scores, an MLP / logits / attention buffer (metal-rlswarm-355), or the KV cache's update.
pub(super) fn frames(a: &mut Ask, t: &TorchOom, acc: &Accounting) -> Option<Decision> {
    // The innermost line wins; on one line, eager attention over a generic softmax.
    let innermost = innermost_frame(
        a.ctx,
        a.f.line,
        200,
        &[
            Frame::EagerAttention,
            Frame::Activation,
            Frame::Cache,
            Frame::Optimizer,
        ],
    )
    .map(|x| x.1);
    let batch = batch_line(a);
    let long_context = batch.is_some_and(|(_, _, s)| s >= 4096);
    let e = torch_evidence(a, t, acc);
    let req = Bytes(acc.request);
    match innermost {
        Some(Frame::EagerAttention) => {
            a.remedy(Change::UseSdpa, a.engine, None);
            a.remedy(Change::TruncatePrompt(0), a.engine, None);
            Some(Decision::new(Code::P7, Cause::Activations, Stage::FirstToken, 0.75, format!("activations: eager attention materialises the full L × L score matrix; it asked for {req}"), e))
        }
        Some(Frame::Activation) => {
            if let (true, Some((line, _, seq))) = (long_context, batch) {
                a.contributing.push(Contributing {
                    cause: Cause::KvCache,
                    evidence: Evidence {
                        text: format!(
                            "the KV cache of a {}-token context fills the card alongside",
                            group(seq)
                        ),
                        bytes: None,
                        line: Some(line),
                    },
                });
            }
            a.remedy(Change::TruncatePrompt(0), a.engine, None);
            a.remedy(Change::ChunkedPrefill(0), a.engine, None);
            Some(Decision::new(
                Code::P7,
                Cause::Activations,
                Stage::FirstToken,
                0.65,
                format!(
                    "activations: the prefill's MLP / logits buffers asked for {req} in one piece"
                ),
                e,
            ))
        }
        Some(Frame::Optimizer) => Some(optimizer_states(a, e)),
        Some(_) => Some(kv_growth(a, e)),
        None if long_context => Some(kv_growth(a, e)),
        None => None,
    }
}

/// The optimizer's step: Adam keeps two fp32 states per trainable parameter (`exp_avg`,
/// `exp_avg_sq`), made on the first step — memory that scales with the weights trained, not
/// with the batch (deepspeed-llamafactory-7532: `exp_avg_sq = torch.zeros_like(...)`;
/// deepspeed-llamafactory-1221: the step's `exp_avg_sq.sqrt()`).
pub(super) fn optimizer_states(a: &mut Ask, e: Vec<Evidence>) -> Decision {
    a.remedy(Change::CpuOffload, a.engine, None);
    if let Some(r) = a.remedies.last_mut() {
        r.how = "offload the optimizer states (DeepSpeed ZeRO offload_optimizer, or ZeRO-3 across the GPUs), train LoRA adapters, or use an 8-bit optimizer (bitsandbytes AdamW8bit)".into();
    }
    a.remedy(Change::QuantizeWeights(nf4()), a.engine, None);
    a.remedy(Change::LargerGpu(0), a.engine, None);
    Decision::new(Code::E61,
        Cause::Weights,
        Stage::Unknown,
        0.65,
        "weights: the optimizer's step ran out — its per-parameter states (Adam: two fp32 copies of every trainable weight) scale with the weights trained, not with the batch".into(),
        e,
    )
}

pub(super) fn kv_growth(a: &mut Ask, e: Vec<Evidence>) -> Decision {
    a.remedy(Change::CapNewTokens(0), a.engine, None);
    a.remedy(Change::TruncatePrompt(0), a.engine, None);
    a.remedy(Change::QuantizeKv(KvDtype::Q4_0), a.engine, None);
    Decision::new(
        Code::P7,
        Cause::KvCache,
        Stage::LongGeneration,
        0.65,
        "kv_cache: the KV cache grew past the card while generating".into(),
        e,
    )
}

/// The model the log names, at the dtype it names, is larger than the card: the weights
/// (vllm-188: Mistral-7B with --dtype half, 14 GB, on a 10.7 GiB card).
pub(super) fn model_too_large(a: &mut Ask, t: &TorchOom, acc: &Accounting) -> Option<Decision> {
    let m = a.ctx.model.as_ref()?;
    let weights = weights_from_name(&m.name)?;
    if acc.total == 0 || weights.saturating_mul(10) < acc.total.saturating_mul(9) {
        return None;
    }
    a.remedy(Change::QuantizeWeights(nf4()), a.engine, None);
    a.remedy(Change::LargerGpu(0), a.engine, None);
    let mut e = torch_evidence(a, t, acc);
    e.push(Evidence {
        text: format!(
            "the log names {}: about {} of weights",
            m.name,
            Bytes(weights)
        ),
        bytes: Some(weights),
        line: Some(m.line),
    });
    Some(Decision::new(
        Code::P8,
        Cause::Weights,
        Stage::Load,
        0.6,
        format!(
            "weights: {} is about {} of weights, more than the {} card",
            m.name,
            Bytes(weights),
            Bytes(acc.total)
        ),
        e,
    ))
}
