//! llama.cpp's buffers on every backend (E4, E45, I7), MLX (E7), accelerators' own figures (E8,
//! E52) and PyTorch's memory summary (E9).

use super::*;

pub(super) fn llama(a: &mut Ask, buffer: LlamaBuffer, bytes: Option<u64>) -> Decision {
    let f = a.f;
    let size = bytes.map_or(String::new(), |b| format!(" of {}", Bytes(b)));
    let l = Engine::LlamaCpp;
    match buffer {
        LlamaBuffer::KvCache => {
            a.remedy(Change::QuantizeKv(KvDtype::Q8_0), l, bytes.map(|b| b / 2));
            a.remedy(Change::ReduceContext(0), l, None);
            Decision::new(Code::E4, Cause::KvCache, Stage::Load, 0.9, format!("kv_cache: llama.cpp could not allocate the KV cache{size} for the context size (-c)"), vec![ev(f, format!("KV cache buffer{size} failed"))])
        }
        LlamaBuffer::Compute => {
            a.remedy(Change::ChunkedPrefill(256), l, None);
            a.remedy(Change::ReduceContext(0), l, None);
            Decision::new(Code::E4, Cause::Activations, Stage::Load, 0.85, format!("activations: llama.cpp's compute buffer{size} (sized by -ub and -c) did not fit"), vec![ev(f, format!("compute buffer{size} failed"))])
        }
        LlamaBuffer::Pool => {
            a.remedy(Change::ChunkedPrefill(256), l, None);
            a.remedy(Change::CpuOffload, l, None);
            Decision::new(Code::E4, Cause::Activations, Stage::FirstToken, 0.7, "activations: ggml's CUDA memory pool could not grow — it holds the temporary buffers of the graph's operations (sized by the batch, -b / -ub), not the weights or the KV cache, which were allocated before".into(), vec![ev(f, "CUDA out of memory in ggml's CUDA pool (CUDA_CHECK names the pool's alloc)".into())])
        }
        LlamaBuffer::Model | LlamaBuffer::Unknown if host_buffer(&f.quote) => {
            a.remedy(Change::MoreHostMemory, l, None);
            if let Some(r) = a.remedies.last_mut() {
                r.how = "use mmap (drop --no-mmap / mmap = false), offload more layers to the GPU (-ngl), or add RAM".into();
            }
            a.remedy(
                Change::QuantizeWeights("q4_k_m".parse().unwrap_or(WeightDtype::Int8)),
                l,
                None,
            );
            Decision::new(Code::E4, Cause::HostMemory, Stage::Load, 0.8, format!("host_memory: llama.cpp could not allocate the model's CPU buffer{size} — the layers kept in system RAM do not fit the host's memory"), vec![ev(f, format!("CPU (host RAM) model buffer{size} failed"))])
        }
        LlamaBuffer::Model | LlamaBuffer::Unknown => {
            a.remedy(Change::CpuOffload, l, None);
            let q4 = "q4_k_m".parse().unwrap_or(WeightDtype::Int8);
            a.remedy(Change::QuantizeWeights(q4), l, None);
            let conf = if buffer == LlamaBuffer::Model {
                0.9
            } else {
                0.6
            };
            Decision::new(
                Code::E4,
                Cause::Weights,
                Stage::Load,
                conf,
                format!(
                    "weights: llama.cpp could not allocate the model's {} buffer{size}",
                    backend_of(&f.quote)
                ),
                vec![ev(f, format!("model buffer{size} failed"))],
            )
        }
    }
}

/// llama.cpp on Metal went past the recommended working set and Metal gave no buffer. When the
/// buffers allocated before the first one past it already held ≥ 90 % of the set, the weights
/// are the story (h2ogpt-1311: 3,946 of 4,096 MiB before the KV cache); else that buffer is.
pub(super) fn metal_working_set(
    a: &mut Ask,
    crossed: LlamaBuffer,
    before: u64,
    working_set: u64,
) -> Decision {
    let share = before.saturating_mul(100) / working_set.max(1);
    let weights = share >= 90;
    let (held, set) = (Bytes(before), Bytes(working_set));
    let mut d = if weights {
        let mut d = llama(a, LlamaBuffer::Model, Some(before));
        d.rule = Code::E45;
        d
    } else {
        let mut d = llama(a, crossed, None);
        d.rule = Code::E45;
        d
    };
    d.confidence = 0.7;
    d.summary = if weights {
        format!("weights: the model's buffers took {held} ({share} %) of Metal's {set} working set before the next buffer — no room was left for the KV cache and compute buffers")
    } else {
        format!("{}: llama.cpp's buffers held {held} of Metal's {set} working set; the next buffer went past it and Metal gave none", d.cause)
    };
    d.evidence.insert(
        0,
        ev(
            a.f,
            format!("{held} of the {set} working set held before the buffer that went past it"),
        ),
    );
    d
}

/// The log stops right after a buffer was allocated (llamafile-42: the model's `data` buffer
/// on an 8 GB M1): the engine died there, so that buffer's part is the cause — said with low
/// confidence, since the error line itself is missing.
pub(super) fn ends_at_allocation(
    a: &mut Ask,
    buffer: LlamaBuffer,
    bytes: Option<u64>,
    working_set: Option<u64>,
) -> Decision {
    let mut d = llama(a, buffer, bytes);
    d.rule = Code::I7;
    let size = bytes.map_or(String::new(), |b| format!(" of {}", Bytes(b)));
    let of_set = match (bytes, working_set) {
        (Some(b), Some(w)) if w > 0 => format!(
            " ({} % of Metal's {} working set)",
            b.saturating_mul(100) / w,
            Bytes(w)
        ),
        _ => String::new(),
    };
    let part = match buffer {
        LlamaBuffer::KvCache => "the KV cache",
        LlamaBuffer::Compute | LlamaBuffer::Pool => "the compute buffer",
        _ => "the model's weights",
    };
    d.confidence = 0.35;
    d.summary = format!(
        "{}: the log stops right after allocating {part}{size}{of_set} — the engine died there; the error line after it is not in the log (paste the rest to confirm)",
        d.cause
    );
    d.evidence = vec![ev(
        a.f,
        format!("the last line allocates a buffer{size}{of_set}"),
    )];
    d
}

/// A ggml buffer of the CPU backend: host RAM (`ggml_backend_cpu_buffer_type_alloc_buffer`,
/// `failed to allocate CPU buffer`).
pub(super) fn host_buffer(quote: &str) -> bool {
    quote.contains("cpu_buffer") || quote.contains("CPU buffer")
}

/// The backend a llama.cpp line names (its buffers are per backend).
pub(super) fn backend_of(quote: &str) -> &'static str {
    let q = quote.to_ascii_lowercase();
    if q.contains("metal") {
        "Metal"
    } else if q.contains("vulkan") || q.contains("ggml_vk") {
        "Vulkan"
    } else if q.contains("sycl") {
        "SYCL"
    } else {
        "CUDA"
    }
}

/// MLX asks Metal for one buffer above its maximum: one tensor, so never the weights. Under the
/// prompt cache it is the KV cache (mlx-lmstudio-2240); elsewhere an activation.
pub(super) fn mlx_buffer(a: &mut Ask, requested: Option<u64>, max: Option<u64>) -> Decision {
    let b = |x: Option<u64>| x.map_or("?".into(), |b| Bytes(b).to_string());
    let e = vec![ev(
        a.f,
        format!(
            "one Metal buffer of {} asked, the maximum buffer is {}",
            b(requested),
            b(max)
        ),
    )];
    if near(&a.ctx.cache_lines, a.f.line).is_some() {
        a.remedy(Change::ReduceContext(0), a.engine, None);
        a.remedy(Change::QuantizeKv(KvDtype::Q8_0), a.engine, None);
        return Decision::new(Code::E7, Cause::KvCache, Stage::FirstToken, 0.7, "kv_cache: the prompt cache needs one buffer larger than Metal allows; shorten the context or quantize the cache".into(), e);
    }
    a.remedy(Change::ChunkedPrefill(0), a.engine, None);
    Decision::new(Code::E7, Cause::Activations, Stage::FirstToken, 0.6, "activations: one buffer larger than Metal allows — a prefill tensor; process the prompt in smaller steps".into(), e)
}

/// An accelerator's own figures (tt-xla): a single buffer that is a quarter of the device is a
/// forward-pass tensor (ttxla-5863: a 12 GB attention score matrix).
pub(super) fn device_buffer(
    a: &mut Ask,
    requested: Option<u64>,
    total: Option<u64>,
    allocated: Option<u64>,
    free: Option<u64>,
) -> Decision {
    let f = a.f;
    let (Some(r), Some(t)) = (requested, total) else {
        return undecided(a);
    };
    let text = format!(
        "one buffer of {} asked on a device of {} ({} allocated, {} free)",
        Bytes(r),
        Bytes(t),
        allocated.map_or("?".into(), |x| Bytes(x).to_string()),
        free.map_or("?".into(), |x| Bytes(x).to_string())
    );
    let e = vec![ev_bytes(f, text, r)];
    if r.saturating_mul(4) >= t {
        a.remedy(Change::UseSdpa, a.engine, None);
        a.remedy(Change::TruncatePrompt(0), a.engine, None);
        return Decision::new(Code::E8, Cause::Activations, Stage::FirstToken, 0.7, format!("activations: one buffer of {} — a quarter of the device or more — is a forward-pass tensor (attention scores, logits)", Bytes(r)), e);
    }
    Decision::new(
        Code::E8,
        Cause::Unknown,
        Stage::Unknown,
        0.3,
        "unknown: the device's allocator ran out; the log does not say what grew".into(),
        e,
    )
}

/// XLA's own account of a failed request: more free than asked, but in pieces smaller than it
/// (jax-trax-431: 31.06M asked, 58.64M free, the largest piece 30.56M).
pub(super) fn device_fragmented(a: &mut Ask, requested: u64, free: u64, largest: u64) -> Decision {
    let f = a.f;
    let e = vec![ev_bytes(
        f,
        format!(
            "{} asked with {} free, but the largest contiguous free piece is {}",
            Bytes(requested),
            Bytes(free),
            Bytes(largest)
        ),
        requested,
    )];
    if free >= requested && largest < requested {
        return Decision::new(
            Code::E52,
            Cause::Fragmentation,
            stage_near(a.ctx, f.line),
            0.8,
            format!(
                "fragmentation: {} is free in all but split into pieces smaller than the {} asked",
                Bytes(free),
                Bytes(requested)
            ),
            e,
        );
    }
    Decision::new(
        Code::E52,
        Cause::Unknown,
        Stage::Unknown,
        0.3,
        "unknown: the device's allocator ran out; the log does not say what grew".into(),
        e,
    )
}

/// PyTorch's memory summary: reserved far above allocated is the allocator's cache split into
/// pieces no request fits (pytorch-35901: 12,420 MB reserved, 1,062 MB allocated).
pub(super) fn memory_summary(
    a: &mut Ask,
    allocated: Option<u64>,
    reserved: Option<u64>,
) -> Decision {
    let f = a.f;
    let (Some(al), Some(re)) = (allocated, reserved) else {
        return undecided(a);
    };
    let cached = re.saturating_sub(al);
    let e = vec![ev_bytes(
        f,
        format!(
            "the memory summary shows {} reserved, {} allocated",
            Bytes(re),
            Bytes(al)
        ),
        cached,
    )];
    if cached >= (1 << 30) && cached.saturating_mul(2) >= re {
        a.remedy(Change::AllocatorSettings, a.engine, Some(cached));
        return Decision::new(Code::E9, Cause::Fragmentation, Stage::Unknown, 0.7, format!("fragmentation: {} is reserved by PyTorch but not allocated — the cache is split into blocks the request does not fit", Bytes(cached)), e);
    }
    Decision::new(
        Code::E9,
        Cause::Unknown,
        Stage::Unknown,
        0.3,
        "unknown: the memory summary does not show where the memory went".into(),
        e,
    )
}
