//! The road to a verdict from what a log says (`explain`, and `watch` on the program's output):
//! one primary cause, its stage, the evidence quoted with line numbers, and remedies in the
//! engine's words.

use super::remedy::Change;
use super::{Cause, Contributing, Evidence, Remedy, Stage, Verdict};
use crate::dtype::KvDtype;
use crate::error::{InputError, Result};
use crate::estimate::Engine;
use crate::logparse::parse::{Context, Event, Finding, LlamaBuffer, Source, TorchOom};
use crate::logparse::{clean_lines, scan};
use crate::units::{group, Bytes};

/// A whole log, read: every out-of-memory event in it and the verdict for the first fatal one.
#[derive(Debug, Clone)]
pub struct LogReading {
    pub verdict: Verdict,
    pub remedies: Vec<Remedy>,
    /// Every out-of-memory event in the log, in order.
    pub findings: Vec<Finding>,
    /// For an `unknown` verdict: the fact or command that would decide it.
    pub to_decide: Option<String>,
    pub lines: usize,
}

/// A log is binary when NUL bytes or control characters dominate its start.
fn looks_binary(raw: &[u8]) -> bool {
    let head = &raw[..raw.len().min(8192)];
    let odd = head
        .iter()
        .filter(|&&b| b == 0 || (b < 9) || (b > 13 && b < 32 && b != 27))
        .count();
    odd * 10 > head.len()
}

/// Read a log's bytes: an empty or binary input is bad input; a log without an out-of-memory
/// event is the `none` verdict.
pub fn read_log(raw: &[u8], engine: Engine) -> Result<LogReading> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Err(InputError::Usage(
            "the log is empty; paste the output of the run that failed (a file, or - for stdin)"
                .into(),
        )
        .into());
    }
    if looks_binary(raw) {
        return Err(InputError::Usage(
            "that looks like a binary file, not a log; pass the text the failing program printed"
                .into(),
        )
        .into());
    }
    let lines = clean_lines(raw);
    let (findings, ctx) = scan(&lines);
    let Some(first) = findings.first() else {
        return Ok(LogReading {
            verdict: Verdict {
                cause: Cause::None,
                stage: Stage::Unknown,
                confidence: 0.8,
                summary: format!("no out-of-memory error in {} lines", lines.len()),
                evidence: Vec::new(),
                contributing: Vec::new(),
            },
            remedies: Vec::new(),
            findings,
            to_decide: None,
            lines: lines.len(),
        });
    };
    let r = classify(first, &findings, &ctx, engine);
    Ok(LogReading {
        verdict: r.verdict,
        remedies: r.remedies,
        to_decide: r.to_decide,
        findings,
        lines: lines.len(),
    })
}

/// The verdict for the first fatal finding, with the rest of the log as context.
pub struct Reading {
    pub verdict: Verdict,
    pub remedies: Vec<Remedy>,
    /// The fact or command that would decide an `unknown`.
    pub to_decide: Option<String>,
}

fn ev(f: &Finding, text: String) -> Evidence {
    Evidence {
        text,
        bytes: None,
        line: Some(f.line),
    }
}

fn ev_bytes(f: &Finding, text: String, bytes: u64) -> Evidence {
    Evidence {
        text,
        bytes: Some(bytes),
        line: Some(f.line),
    }
}

/// The engine whose knobs remedies should name: the user's `--engine` unless the log says otherwise.
pub fn engine_of(f: &Finding, asked: Engine) -> Engine {
    match f.source {
        Source::Vllm => Engine::Vllm,
        Source::LlamaCpp => Engine::LlamaCpp,
        _ => asked,
    }
}

/// Which stage the log shows for a finding at line `at`: the nearest load or generation marker
/// before it (a traceback lists frames above the error).
fn stage_near(ctx: &Context, at: usize) -> Stage {
    let last_before = |v: &[usize]| v.iter().rev().copied().find(|&l| l <= at && at - l <= 200);
    match (
        last_before(&ctx.load_lines),
        last_before(&ctx.generation_lines),
    ) {
        (Some(_), None) => Stage::Load,
        (None, Some(_)) => Stage::FirstToken,
        (Some(l), Some(g)) if l > g => Stage::Load,
        (Some(_), Some(_)) => Stage::FirstToken,
        (None, None) => Stage::Unknown,
    }
}

fn near(lines: &[usize], at: usize) -> Option<usize> {
    lines
        .iter()
        .rev()
        .copied()
        .find(|&l| l <= at && at - l <= 200)
}

pub fn classify(first: &Finding, all: &[Finding], ctx: &Context, asked: Engine) -> Reading {
    let engine = engine_of(first, asked);
    let unknown_to_decide = "run `llm-oom plan --model <your model> --prompt-tokens <L> --max-new-tokens <N> --batch <B> --vram <card>` with the failing request's numbers, or pass them to `llm-oom explain` (--model, --prompt-tokens, --batch, --vram)".to_string();
    let mut contributing = Vec::new();
    let mut remedies = Vec::new();
    let mut to_decide = None;
    let (cause, stage, confidence, summary, mut evidence) = match &first.event {
        Event::TorchOom(t) => {
            let r = torch(first, t, all, ctx, engine, &mut contributing, &mut remedies);
            if r.0 == Cause::Unknown {
                to_decide = Some(unknown_to_decide.clone());
            }
            r
        }
        Event::VllmKvCapacity {
            max_seq_len,
            kv_tokens,
            needed,
            available,
            estimated_max_len,
        } => {
            let fit = estimated_max_len.or(*kv_tokens);
            let mut e = vec![ev(first, format!(
                "vLLM reserves KV cache for max_model_len = {} tokens; the memory left after weights and activations holds {}",
                max_seq_len.map_or("?".into(), group),
                fit.map_or("fewer".into(), |n| format!("{} tokens", group(n)))
            ))];
            if let (Some(n), Some(a)) = (needed, available) {
                e.push(ev_bytes(
                    first,
                    format!(
                        "one request at max_model_len needs {} of KV cache, {} is available",
                        Bytes(*n),
                        Bytes(*a)
                    ),
                    *n,
                ));
            }
            if let Some(n) = fit {
                remedies.push(Remedy::advice(Change::ReduceContext(n), Engine::Vllm, None));
            }
            remedies.push(Remedy::advice(
                Change::RaiseUtilization(95),
                Engine::Vllm,
                None,
            ));
            remedies.push(Remedy::advice(
                Change::QuantizeKv(KvDtype::Fp8),
                Engine::Vllm,
                None,
            ));
            (
                Cause::KvCache,
                Stage::Load,
                0.9,
                "kv_cache: vLLM cannot hold one request at the configured max_model_len"
                    .to_string(),
                e,
            )
        }
        Event::VllmNoCacheBlocks => {
            remedies.push(Remedy::advice(
                Change::RaiseUtilization(95),
                Engine::Vllm,
                None,
            ));
            remedies.push(Remedy::advice(
                Change::QuantizeWeights("nf4".parse().unwrap_or(crate::dtype::WeightDtype::Int8)),
                Engine::Vllm,
                None,
            ));
            remedies.push(Remedy::advice(Change::LargerGpu(0), Engine::Vllm, None));
            (Cause::Weights, Stage::Load, 0.8, "weights: after the weights and the profiling run nothing is left for vLLM's KV cache".into(), vec![ev(first, "vLLM found no memory for cache blocks".into())])
        }
        Event::VllmStartupFree {
            free,
            total,
            utilization,
        } => {
            let want = match (total, utilization) {
                (Some(t), Some(u)) => Some((*t as f64 * u) as u64),
                _ => None,
            };
            let held = match (free, total) {
                (Some(f), Some(t)) => Some(t - f),
                _ => None,
            };
            remedies.push(Remedy::advice(
                Change::FreeOtherProcesses,
                Engine::Vllm,
                held,
            ));
            (Cause::OtherProcess, Stage::Environment, 0.9, format!(
                "other_process: only {} of {} was free when vLLM started, below the {} that gpu_memory_utilization asks for",
                free.map_or("?".into(), |b| Bytes(b).to_string()), total.map_or("?".into(), |b| Bytes(b).to_string()), want.map_or("?".into(), |b| Bytes(b).to_string())
            ), vec![ev(first, "free memory at start-up is below gpu_memory_utilization × total".into())])
        }
        Event::VllmSamplerWarmup { seqs } => {
            if let Some(n) = seqs {
                remedies.push(Remedy::advice(
                    Change::LimitConcurrency((n / 4).max(1)),
                    Engine::Vllm,
                    None,
                ));
            }
            (Cause::Concurrency, Stage::Load, 0.8, format!(
                "concurrency: warming the sampler up with {} dummy requests (max_num_seqs) ran out of memory",
                seqs.map_or("max_num_seqs".into(), group)
            ), vec![ev(first, "the sampler's logits for every sequence at once did not fit".into())])
        }
        Event::LlamaCppBuffer { buffer, bytes } => {
            let size = bytes.map_or(String::new(), |b| format!(" of {}", Bytes(b)));
            match buffer {
                LlamaBuffer::KvCache => {
                    remedies.push(Remedy::advice(
                        Change::QuantizeKv(KvDtype::Q8_0),
                        Engine::LlamaCpp,
                        bytes.map(|b| b / 2),
                    ));
                    remedies.push(Remedy::advice(
                        Change::ReduceContext(0),
                        Engine::LlamaCpp,
                        None,
                    ));
                    (Cause::KvCache, Stage::Load, 0.9, format!("kv_cache: llama.cpp could not allocate the KV cache{size} for the context size (-c)"), vec![ev(first, format!("KV cache buffer{size} failed"))])
                }
                LlamaBuffer::Compute => {
                    remedies.push(Remedy::advice(
                        Change::ChunkedPrefill(256),
                        Engine::LlamaCpp,
                        None,
                    ));
                    remedies.push(Remedy::advice(
                        Change::ReduceContext(0),
                        Engine::LlamaCpp,
                        None,
                    ));
                    (Cause::Activations, Stage::Load, 0.85, format!("activations: llama.cpp's compute buffer{size} (sized by -ub and -c) did not fit"), vec![ev(first, format!("compute buffer{size} failed"))])
                }
                LlamaBuffer::Model | LlamaBuffer::Unknown => {
                    remedies.push(Remedy::advice(Change::CpuOffload, Engine::LlamaCpp, None));
                    remedies.push(Remedy::advice(
                        Change::QuantizeWeights(
                            "q4_k_m".parse().unwrap_or(crate::dtype::WeightDtype::Int8),
                        ),
                        Engine::LlamaCpp,
                        None,
                    ));
                    (
                        Cause::Weights,
                        Stage::Load,
                        if *buffer == LlamaBuffer::Model {
                            0.9
                        } else {
                            0.6
                        },
                        format!(
                            "weights: llama.cpp could not allocate the model's CUDA buffer{size}"
                        ),
                        vec![ev(first, format!("model buffer{size} failed"))],
                    )
                }
            }
        }
        Event::TgiPrefill { tokens } => {
            remedies.push(Remedy::advice(
                Change::ChunkedPrefill(tokens.map_or(0, |t| t / 2)),
                engine,
                None,
            ));
            (Cause::Activations, Stage::Load, 0.85, format!(
                "activations: TGI's warm-up could not prefill {} tokens at once (--max-batch-prefill-tokens)",
                tokens.map_or("the configured".into(), group)
            ), vec![ev(first, "TGI warm-up prefill failed".into())])
        }
        Event::CudnnFailure => {
            remedies.push(Remedy::advice(Change::UseSdpa, engine, None));
            (Cause::Activations, Stage::FirstToken, 0.6, "activations: cuDNN's attention failed near the memory limit — an out-of-memory in disguise".into(), vec![ev(first, "cuDNN attention graph did not execute (is_good() false)".into())])
        }
        Event::HostOomKiller { process, rss } => {
            remedies.push(Remedy::advice(Change::MoreHostMemory, engine, None));
            let rss_text = rss.map_or(String::new(), |b| format!(" at {} resident", Bytes(b)));
            (
                Cause::HostMemory,
                Stage::Unknown,
                0.95,
                format!(
                    "host_memory: the Linux OOM killer ended {}{rss_text} — host RAM, not the GPU",
                    process.as_deref().unwrap_or("the process")
                ),
                vec![ev(first, "kernel OOM killer".into())],
            )
        }
        Event::ContainerOomKilled | Event::Exit137 | Event::HostAllocFailed { .. } => {
            remedies.push(Remedy::advice(Change::MoreHostMemory, engine, None));
            let (text, conf) = match &first.event {
                Event::ContainerOomKilled => ("the container hit its memory limit (OOMKilled)".to_string(), 0.9),
                Event::HostAllocFailed { bytes } => (format!("PyTorch could not allocate {} of host RAM", bytes.map_or("?".into(), |b| Bytes(b).to_string())), 0.9),
                _ => ("the process was killed with SIGKILL (exit code 137), which is what the OOM killer sends; dmesg would confirm".to_string(), 0.6),
            };
            (
                Cause::HostMemory,
                Stage::Unknown,
                conf,
                format!("host_memory: {text} — host RAM, not the GPU"),
                vec![ev(first, text)],
            )
        }
        Event::CandleDriverOom
        | Event::CublasAllocFailed
        | Event::CudaErrorOom
        | Event::TensorrtOom { .. } => {
            to_decide = Some(match &first.event {
                // A tiny or first allocation failing usually means the card was already full.
                Event::CublasAllocFailed | Event::CudaErrorOom => format!(
                    "run `nvidia-smi` while it fails: memory held by other processes makes it other_process; otherwise {unknown_to_decide}"
                ),
                _ => unknown_to_decide.clone(),
            });
            let what = match &first.event {
                Event::CublasAllocFailed => "cuBLAS could not allocate its workspace: the card was already full (an OOM in disguise)",
                Event::CudaErrorOom => "a CUDA call returned out of memory without saying how much was asked",
                Event::TensorrtOom { .. } => "TensorRT-LLM's allocator ran out",
                _ => "the CUDA driver returned out of memory without saying for what",
            };
            let stage = stage_near(ctx, first.line);
            (
                Cause::Unknown,
                stage,
                0.3,
                format!("unknown: {what}"),
                vec![ev(first, what.to_string())],
            )
        }
    };
    // Other fatal events after the first are told in order.
    for f in all.iter().filter(|f| f.line != first.line).take(8) {
        evidence.push(Evidence {
            text: format!("then: {}", kind_name(&f.event)),
            bytes: None,
            line: Some(f.line),
        });
    }
    if to_decide.is_some() && remedies.is_empty() {
        remedies.push(Remedy::advice(Change::AllocatorSettings, engine, None));
    }
    Reading {
        verdict: Verdict {
            cause,
            stage,
            confidence,
            summary,
            evidence,
            contributing,
        },
        remedies,
        to_decide,
    }
}

pub fn kind_name(e: &Event) -> &'static str {
    match e {
        Event::TorchOom(_) => "pytorch_oom",
        Event::VllmKvCapacity { .. } => "vllm_kv_capacity",
        Event::VllmNoCacheBlocks => "vllm_no_cache_blocks",
        Event::VllmStartupFree { .. } => "vllm_startup_free",
        Event::VllmSamplerWarmup { .. } => "vllm_sampler_warmup",
        Event::LlamaCppBuffer { .. } => "llama_cpp_buffer",
        Event::CandleDriverOom => "cuda_driver_oom",
        Event::TgiPrefill { .. } => "tgi_prefill",
        Event::TensorrtOom { .. } => "tensorrt_llm_oom",
        Event::CublasAllocFailed => "cublas_alloc_failed",
        Event::CudnnFailure => "cudnn_failure",
        Event::CudaErrorOom => "cuda_error_oom",
        Event::HostOomKiller { .. } => "host_oom_killer",
        Event::ContainerOomKilled => "container_oom_killed",
        Event::Exit137 => "exit_137",
        Event::HostAllocFailed { .. } => "host_alloc_failed",
    }
}

type Classified = (Cause, Stage, f64, String, Vec<Evidence>);

/// PyTorch's message carries the numbers: request, free, other processes, cached-but-unused.
fn torch(
    f: &Finding,
    t: &TorchOom,
    all: &[Finding],
    ctx: &Context,
    engine: Engine,
    contributing: &mut Vec<Contributing>,
    remedies: &mut Vec<Remedy>,
) -> Classified {
    let req = t.requested.unwrap_or(0);
    // Under a memory cap (set_per_process_memory_fraction) the card is what is allowed.
    let capped = t.allowed.is_some();
    let total = t.allowed.or(t.total).unwrap_or(0);
    let free = match (t.allowed, t.this_process) {
        (Some(a), Some(used)) => a.saturating_sub(used),
        (Some(a), None) => a.saturating_sub(
            t.allocated_by_pytorch.unwrap_or(0) + t.reserved_unallocated.unwrap_or(0),
        ),
        _ => t.free.unwrap_or(0),
    };
    let others = t.others();
    let unalloc = t.reserved_unallocated.unwrap_or(0);
    let short = req.saturating_sub(free);
    let mut e = vec![ev_bytes(
        f,
        format!(
            "asked for {} with {} free of {}{}",
            Bytes(req),
            Bytes(free),
            if total > 0 {
                Bytes(total).to_string()
            } else {
                "?".into()
            },
            if capped {
                " allowed (a per-process memory cap)"
            } else {
                ""
            }
        ),
        req,
    )];
    if let Some(a) = t.allocated_by_pytorch {
        e.push(ev_bytes(f, format!("PyTorch tensors held {}", Bytes(a)), a));
    }
    if unalloc > 0 {
        e.push(ev_bytes(
            f,
            format!(
                "{} reserved by PyTorch but unallocated (cached blocks)",
                Bytes(unalloc)
            ),
            unalloc,
        ));
    }
    if others > 0 {
        e.push(ev_bytes(
            f,
            format!("other processes hold {}", Bytes(others)),
            others,
        ));
    }
    let stage = stage_near(ctx, f.line);
    let ooms = all
        .iter()
        .filter(|x| matches!(x.event, Event::TorchOom(_)))
        .count();
    let threads = ctx.thread_exceptions.len();
    // The seeds' check line belongs to the nearest OOM (stdout and stderr interleave, so it may
    // come just after the error in a captured log).
    let batch = ctx
        .batch_seq
        .iter()
        .filter(|b| b.0 <= f.line || b.0 - f.line <= 20)
        .min_by_key(|b| b.0.abs_diff(f.line))
        .copied();
    if let Some((line, b, s)) = batch {
        e.push(Evidence {
            text: format!(
                "the check line says batch {b}, sequence length {}",
                group(s)
            ),
            bytes: None,
            line: Some(line),
        });
    }
    let growth =
        near(&ctx.cache_lines, f.line).is_some() || batch.is_some_and(|(_, _, s)| s >= 4096);

    // Another process holds what was missing.
    // (Under a per-process cap, other processes do not shrink this one's allowance.)
    if !capped && others > 0 && others >= short && others * 20 >= total {
        remedies.push(Remedy::advice(
            Change::FreeOtherProcesses,
            engine,
            Some(others),
        ));
        return (
            Cause::OtherProcess,
            stage,
            0.85,
            format!(
            "other_process: other processes hold {} of the card; the request for {} was {} short",
            Bytes(others), Bytes(req), Bytes(short)
        ),
            e,
        );
    }
    // Loading, or one request the size of a model (transformers 5 reserves the whole model at once).
    if stage == Stage::Load || (total > 0 && req * 5 >= total * 2) {
        let why = if stage == Stage::Load {
            "while loading the model"
        } else {
            "in one request the size of a model"
        };
        remedies.push(Remedy::advice(
            Change::QuantizeWeights("nf4".parse().unwrap_or(crate::dtype::WeightDtype::Int8)),
            engine,
            None,
        ));
        remedies.push(Remedy::advice(
            Change::QuantizeWeights(crate::dtype::WeightDtype::Int8),
            engine,
            None,
        ));
        remedies.push(Remedy::advice(Change::CpuOffload, engine, None));
        remedies.push(Remedy::advice(Change::LargerGpu(0), engine, None));
        return (
            Cause::Weights,
            Stage::Load,
            0.8,
            format!(
                "weights: out of memory {why} — {} asked, {} free",
                Bytes(req),
                Bytes(free)
            ),
            e,
        );
    }
    // Enough cached-but-unused memory for the request, yet no block of that size: fragmentation —
    // when that cache is a real share of the card. PyTorch prints its expandable_segments hint on
    // every OOM; a few hundred MiB cached next to a context that is simply too long is still the
    // context's fault, so a growing cache must show twice the share.
    let share = |min_pct: u64| {
        if total > 0 {
            unalloc * 100 >= total * min_pct
        } else {
            unalloc >= 1 << 30
        }
    };
    let fragmented = unalloc >= req && unalloc > 0 && share(5);
    if fragmented && (!growth || share(10)) {
        remedies.push(Remedy::advice(
            Change::AllocatorSettings,
            engine,
            Some(unalloc),
        ));
        return (Cause::Fragmentation, stage, 0.7, format!(
            "fragmentation: {} is cached by PyTorch but unallocated — more than the {} asked — yet no block is large enough",
            Bytes(unalloc), Bytes(req)
        ), e);
    }
    if fragmented {
        contributing.push(Contributing {
            cause: Cause::Fragmentation,
            evidence: ev_bytes(
                f,
                format!("{} cached but unallocated", Bytes(unalloc)),
                unalloc,
            ),
        });
        remedies.push(Remedy::advice(
            Change::AllocatorSettings,
            engine,
            Some(unalloc),
        ));
    }
    if ooms > 1 || threads > 0 || batch.is_some_and(|(_, b, _)| b > 1) {
        let why = if threads > 0 {
            format!("{threads} worker thread(s) died")
        } else if ooms > 1 {
            format!("{ooms} out-of-memory errors in one log")
        } else {
            format!("{} sequences at once", batch.map_or(0, |b| b.1))
        };
        remedies.push(Remedy::advice(
            Change::LimitConcurrency(batch.map_or(1, |b| (b.1 / 2).max(1))),
            engine,
            None,
        ));
        remedies.push(Remedy::advice(Change::CapNewTokens(0), engine, None));
        return (
            Cause::Concurrency,
            stage,
            0.65,
            format!("concurrency: {why}; each sequence adds its own KV cache and activations"),
            e,
        );
    }
    // The innermost frame before the error says what was being allocated.
    let eager = near(&ctx.eager_attention_lines, f.line);
    let act = near(&ctx.activation_lines, f.line);
    let cache = near(&ctx.cache_lines, f.line);
    let innermost = [(eager, 0), (act, 1), (cache, 2)]
        .into_iter()
        .filter_map(|(l, k)| l.map(|l| (l, k)))
        .max();
    let long_context = batch.is_some_and(|(_, _, s)| s >= 4096);
    match innermost.map(|x| x.1) {
        Some(0) => {
            remedies.push(Remedy::advice(Change::UseSdpa, engine, None));
            remedies.push(Remedy::advice(Change::TruncatePrompt(0), engine, None));
            return (Cause::Activations, Stage::FirstToken, 0.75, format!("activations: eager attention materialises the full L × L score matrix; it asked for {}", Bytes(req)), e);
        }
        Some(1) => {
            if long_context {
                let seq = batch.map_or(0, |b| b.2);
                contributing.push(Contributing {
                    cause: Cause::KvCache,
                    evidence: Evidence {
                        text: format!(
                            "the KV cache of a {}-token context fills the card alongside",
                            group(seq)
                        ),
                        bytes: None,
                        line: batch.map(|b| b.0),
                    },
                });
            }
            remedies.push(Remedy::advice(Change::TruncatePrompt(0), engine, None));
            remedies.push(Remedy::advice(Change::ChunkedPrefill(0), engine, None));
            return (
                Cause::Activations,
                Stage::FirstToken,
                0.65,
                format!(
                    "activations: the prefill's MLP / logits buffers asked for {} in one piece",
                    Bytes(req)
                ),
                e,
            );
        }
        Some(_) => {}
        None if long_context => {}
        None => {
            return (Cause::Unknown, stage, 0.3, format!("unknown: PyTorch ran out asking for {} with {} free; the log does not say what grew", Bytes(req), Bytes(free)), e);
        }
    }
    remedies.push(Remedy::advice(Change::CapNewTokens(0), engine, None));
    remedies.push(Remedy::advice(Change::TruncatePrompt(0), engine, None));
    remedies.push(Remedy::advice(
        Change::QuantizeKv(KvDtype::Q4_0),
        engine,
        None,
    ));
    (
        Cause::KvCache,
        Stage::LongGeneration,
        0.65,
        "kv_cache: the KV cache grew past the card while generating".into(),
        e,
    )
}
