//! The road to a verdict from what a log says (`explain`, and `watch` on the program's output):
//! one primary cause, its stage, the evidence quoted with line numbers, and remedies in the
//! engine's words. Keyword matching (in `logparse`) finds the lines; here the figures are put
//! into one record (`Accounting`) and explicit rules decide from it (docs/explain.md lists them
//! with the corpus log that motivates each).

use serde::Serialize;

use super::remedy::Change;
use super::rules::Code;
use super::{Cause, Contributing, Evidence, Remedy, Stage, Verdict};
use crate::dtype::{KvDtype, WeightDtype};
use crate::error::{InputError, Result};
use crate::estimate::Engine;
use crate::holes;
use crate::logparse::catalogue::{Catalogued, RanOut, When};
use crate::logparse::clean::decode;
use crate::logparse::hints::{named_part, named_parts, Part};
use crate::logparse::parse::{
    Context, Event, Finding, LlamaBuffer, ModelHint, Source, StageHint, TorchOom, WorkloadHint,
};
use crate::logparse::{clean_lines, scan};
use crate::units::{group, Bytes};

mod confidence;
mod context;
mod devices;
mod figureless;
mod other_engines;
mod serving;
#[cfg(test)]
mod tests;
mod torch;
mod torch_rules;

pub use confidence::{confidence_band, ConfidenceBand};
pub use context::engine_of;
pub(crate) use context::stage_near;
pub(crate) use torch::{others, segment};
pub use torch::{weights_from_name, Accounting};

use context::*;
use devices::*;
use figureless::*;
use other_engines::*;
use serving::*;
use torch::*;
use torch_rules::*;

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
    /// How often verdicts at this confidence were right on real logs the rules had not seen.
    pub confidence_band: ConfidenceBand,
    /// The workload figures the log states.
    pub workload_hint: WorkloadHint,
    /// The model the log names.
    pub model_hint: Option<ModelHint>,
    /// Bytes skipped in the middle of an over-long input.
    pub skipped_bytes: Option<u64>,
    /// The input went on past the most the reader reads: the bytes read before it stopped.
    pub read_only_bytes: Option<u64>,
}

/// Text is binary when control characters (other than tab, line ends and ESC) dominate its start.
fn looks_binary(text: &str) -> bool {
    let head: Vec<char> = text.chars().take(8192).collect();
    let odd = head
        .iter()
        .filter(|&&c| c < ' ' && !matches!(c, '\t' | '\n' | '\r' | '\x1b' | '\x0c' | '\x0b'))
        .count();
    odd * 10 > head.len()
}

/// Read a log's bytes: an empty or binary input is bad input; a log without an out-of-memory
/// event is the `none` verdict. UTF-16 is decoded and NUL bytes dropped before either test.
pub fn read_log(raw: &[u8], engine: Engine) -> Result<LogReading> {
    let text = decode(raw);
    if text.chars().all(|c| c.is_whitespace()) {
        return Err(InputError::Usage(
            "the log is empty; paste the output of the run that failed (a file, or - for stdin)"
                .into(),
        )
        .into());
    }
    if looks_binary(&text) {
        return Err(InputError::Usage(
            "that looks like a binary file, not a log; pass the text the failing program printed"
                .into(),
        )
        .into());
    }
    let lines = clean_lines(text.as_bytes());
    let (findings, ctx) = scan(&lines);
    // A skipped input counts its lines as the input has them.
    let total = match ctx.resumed {
        Some((at, first)) => lines.len().saturating_add(first.saturating_sub(at + 1)),
        None => lines.len(),
    };
    let mut r = match findings.first() {
        Some(first) => classify(first, &findings, &ctx, engine),
        None => match ctx.unfinished {
            Some(at) => unfinished(at, total, &ctx),
            None => no_oom(total, &ctx),
        },
    };
    if let Some(first) = findings.first() {
        r.verdict
            .evidence
            .extend(context::part_of_the_deployment(&ctx, first.line));
    }
    // Remedies in the knobs of the engine that printed the log, none already in force.
    let source = findings.first().map(|f| f.source);
    let family = super::knobs::family(source, &lines);
    super::knobs::speak(&mut r.remedies, family, &super::knobs::in_force(&lines));
    // A CUDA driver message read first (TensorFlow's `cuda_driver.cc`, a TensorRT-LLM pool): the
    // record names the engine the log's own lines do, as the remedies speak it.
    if let (Some(Source::Candle | Source::Cuda), Some(name)) = (source, family.engine()) {
        if let Some(rec) = r.verdict.record.as_mut() {
            rec.engine = Some(name.into());
        }
    }
    Ok(LogReading {
        confidence_band: confidence_band(r.verdict.confidence),
        verdict: r.verdict,
        remedies: r.remedies,
        to_decide: r.to_decide,
        findings,
        lines: total,
        workload_hint: ctx.workload.clone(),
        model_hint: ctx.model.clone(),
        skipped_bytes: ctx.skipped_bytes,
        read_only_bytes: ctx.stopped_after,
    })
}

fn no_oom(lines: usize, ctx: &Context) -> Reading {
    let evidence = ctx
        .not_oom
        .iter()
        .map(|(line, text)| Evidence {
            text: text.clone(),
            bytes: None,
            line: Some(*line),
        })
        .collect();
    Reading {
        verdict: Verdict {
            record: None,
            rule: Some(Code::I5),
            cause: Cause::None,
            stage: Stage::Unknown,
            confidence: 0.8,
            summary: match ctx.stopped_after {
                Some(read) => format!(
                    "no out-of-memory error in {lines} lines, but llm-oom read the first {} only: the input went on and the rest was not read",
                    crate::units::Bytes(read)
                ),
                None => format!("no out-of-memory error in {lines} lines"),
            },
            evidence,
            contributing: Vec::new(),
        },
        remedies: Vec::new(),
        to_decide: None,
    }
}

/// A log that stops inside a Python traceback before any line says what failed (rule E80): it
/// shows a failure but not which, so it is not answered "no OOM". The verdict is `unknown` with
/// no event behind it, at the lowest confidence; the stage is the frames' (a load, a forward
/// pass), and what decides it is the exception line the paste left out — after its last line
/// (`lines`), whatever prefix its frames carry.
fn unfinished(at: usize, lines: usize, ctx: &Context) -> Reading {
    let end = lines.max(at);
    let stage = match (stage_near(ctx, end), hint_near(ctx, end)) {
        (Stage::Unknown, Some(StageHint::Load | StageHint::CacheAlloc)) => Stage::Load,
        (
            Stage::Unknown,
            Some(StageHint::EngineStep | StageHint::Serving | StageHint::PipelineStep),
        ) => Stage::FirstToken,
        (s, _) => s,
    };
    let during = match stage {
        Stage::Load => " while the model was loading",
        Stage::FirstToken => " in a forward pass",
        _ => "",
    };
    Reading {
        verdict: Verdict {
            record: None,
            rule: Some(Code::E80),
            cause: Cause::Unknown,
            stage,
            confidence: 0.2,
            summary: format!(
                "the log stops inside the traceback at line {at}{during}, before the line that says what failed: no out-of-memory line is in it, and nothing in it rules one out"
            ),
            evidence: vec![Evidence {
                text: "a Python traceback with no exception under it, and no error line anywhere in the log".into(),
                bytes: None,
                line: Some(at),
            }],
            contributing: Vec::new(),
        },
        remedies: Vec::new(),
        to_decide: Some(format!(
            "paste the rest of the output after line {end}: the exception under the traceback (its last line) names what failed"
        )),
    }
}

/// The verdict for the first fatal finding, with the rest of the log as context.
pub struct Reading {
    pub verdict: Verdict,
    pub remedies: Vec<Remedy>,
    /// The fact or command that would decide an `unknown`.
    pub to_decide: Option<String>,
}

/// What a verdict is built from before the shared tail (later events, default remedies).
struct Decision {
    rule: Code,
    cause: Cause,
    stage: Stage,
    confidence: f64,
    summary: String,
    evidence: Vec<Evidence>,
}

impl Decision {
    fn new(
        rule: Code,
        cause: Cause,
        stage: Stage,
        confidence: f64,
        summary: String,
        e: Vec<Evidence>,
    ) -> Self {
        Decision {
            rule,
            cause,
            stage,
            confidence,
            summary,
            evidence: e,
        }
    }
}

/// Everything a rule may need besides the finding: the rest of the log and what it adds.
struct Ask<'a> {
    f: &'a Finding,
    all: &'a [Finding],
    ctx: &'a Context,
    engine: Engine,
    contributing: Vec<Contributing>,
    remedies: Vec<Remedy>,
    to_decide: Option<String>,
    /// The record the deciding rules read (PyTorch's message road); any other road's is filled
    /// from its event once it has decided (`MemoryRecord::from_log`).
    record: Option<super::record::MemoryRecord>,
}

impl Ask<'_> {
    fn remedy(&mut self, change: Change, engine: Engine, saves: Option<u64>) {
        self.remedies.push(Remedy::advice(change, engine, saves));
    }
}

const UNKNOWN_TO_DECIDE: &str = "run `llm-oom plan --model <your model> --prompt-tokens <L> --max-new-tokens <N> --batch <B> --vram <card>` with the failing request's numbers, or pass them to `llm-oom explain` (--model, --prompt-tokens, --batch, --vram)";

pub fn classify(first: &Finding, all: &[Finding], ctx: &Context, asked: Engine) -> Reading {
    let (mut a, mut d) = decide_for(first, all, ctx, asked);
    if d.cause == Cause::Unknown {
        if let Some((a2, mut d2)) = later_decides(first, all, ctx, asked) {
            d2.confidence = d2.confidence.min(0.7);
            d2.evidence.push(Evidence {
                text: format!(
                    "the first out-of-memory error does not decide by itself ({})",
                    d.summary
                ),
                bytes: None,
                line: Some(first.line),
            });
            (a, d) = (a2, d2);
        }
    }
    if d.cause == Cause::Unknown && a.to_decide.is_none() {
        a.to_decide = Some(UNKNOWN_TO_DECIDE.to_string());
    }
    // Every road's verdict carries the figures its event and the log around it give; PyTorch's
    // message road has filled its own record (the one its rules read).
    if a.record.is_none() {
        a.record = Some(super::record::MemoryRecord::from_log(a.f, a.ctx, d.stage));
    }
    // Other fatal events than the deciding one are told in order.
    let decided = a.f.line;
    for f in all.iter().filter(|f| f.line != decided).take(8) {
        d.evidence.push(Evidence {
            text: format!("then: {}", kind_name(&f.event)),
            bytes: None,
            line: Some(f.line),
        });
    }
    if a.to_decide.is_some() && a.remedies.is_empty() {
        a.remedy(Change::AllocatorSettings, a.engine, None);
    }
    Reading {
        verdict: Verdict {
            rule: Some(d.rule),
            cause: d.cause,
            stage: d.stage,
            confidence: d.confidence,
            summary: d.summary,
            evidence: d.evidence,
            contributing: a.contributing,
            record: a.record,
        },
        remedies: a.remedies,
        to_decide: a.to_decide,
    }
}

fn decide_for<'a>(
    f: &'a Finding,
    all: &'a [Finding],
    ctx: &'a Context,
    asked: Engine,
) -> (Ask<'a>, Decision) {
    let mut a = Ask {
        f,
        all,
        ctx,
        engine: engine_of(f, asked),
        contributing: Vec::new(),
        remedies: Vec::new(),
        to_decide: None,
        record: None,
    };
    let d = decide(&mut a);
    (a, d)
}

/// When the first error's figures do not decide, a later GPU-side event of the same log that
/// names the part that ran out does (tgi-1356: an undecided CUDA OOM in prefill, then TGI's
/// "Out of available cache blocks"). Host-side events are not taken: a later kill of the
/// process for host RAM says nothing about what filled the GPU before.
fn later_decides<'a>(
    first: &Finding,
    all: &'a [Finding],
    ctx: &'a Context,
    asked: Engine,
) -> Option<(Ask<'a>, Decision)> {
    all.iter()
        .filter(|f| f.line > first.line && !host_side(&f.event))
        .filter(|f| !matches!(f.event, Event::OomWords | Event::EndsAtAllocation { .. }))
        .take(8)
        .find_map(|f| {
            let (a, d) = decide_for(f, all, ctx, asked);
            (d.cause != Cause::Unknown).then_some((a, d))
        })
}

fn host_side(e: &Event) -> bool {
    matches!(
        e,
        Event::HostOomKiller { .. }
            | Event::ContainerOomKilled
            | Event::JobMemoryLimit { .. }
            | Event::Exit137
            | Event::HostAllocFailed { .. }
            | Event::RayOomKill
            | Event::HostMemoryShort { .. }
            | Event::PagingFileTooSmall
            | Event::OomKillerTasks { .. }
    ) || matches!(e, Event::Catalogued(c) if c.ran_out == RanOut::Host)
}

/// One road per family of events.
fn decide(a: &mut Ask) -> Decision {
    let f = a.f;
    match &f.event {
        Event::TorchOom(t) => torch(a, t),
        Event::TorchMemorySummary {
            allocated,
            reserved,
            ..
        } => memory_summary(a, *allocated, *reserved),
        Event::VllmKvCapacity {
            max_seq_len,
            kv_tokens,
            needed,
            available,
            estimated_max_len,
        } => vllm_kv(
            a,
            *max_seq_len,
            VllmFit {
                kv_tokens: *kv_tokens,
                estimated_max_len: *estimated_max_len,
            },
            needed.zip(*available),
        ),
        Event::VllmNoCacheBlocks => vllm_no_blocks(a),
        Event::VllmStartupFree {
            free,
            total,
            utilization,
        } => vllm_startup(a, *free, *total, *utilization),
        Event::VllmSamplerWarmup { seqs } => vllm_sampler(a, *seqs),
        Event::VllmCpuKv {
            available,
            requested,
        } => vllm_cpu_kv(a, *available, *requested),
        Event::LlamaCppBuffer { buffer, bytes } => llama(a, *buffer, *bytes),
        Event::MetalWorkingSet {
            crossed,
            before,
            working_set,
        } => metal_working_set(a, *crossed, *before, *working_set),
        Event::EndsAtAllocation {
            buffer,
            bytes,
            working_set,
        } => ends_at_allocation(a, *buffer, *bytes, *working_set),
        Event::TgiPrefill { tokens } => tgi_prefill(a, *tokens),
        Event::TgiTotalTokens { tokens } => tgi_total_tokens(a, *tokens),
        Event::TurbomindOom { instance: true } => turbomind_instance(a),
        Event::TgiCacheBlocks { asked, free } => tgi_cache_blocks(a, *asked, *free),
        Event::BatchSizeExhausted => batch_size_exhausted(a),
        Event::CudnnFailure => {
            a.remedy(Change::UseSdpa, a.engine, None);
            Decision::new(Code::E86, Cause::Activations, Stage::FirstToken, 0.6, "activations: cuDNN's attention failed near the memory limit — an out-of-memory in disguise".into(), vec![ev(f, "cuDNN attention graph did not execute (is_good() false)".into())])
        }
        Event::TensorrtComponent {
            component,
            total,
            free,
        } => trt_component(a, component, *total, *free),
        Event::SglangNoKvRoom => sglang_no_kv(a),
        Event::SglangPoolFull => sglang_pool_full(a),
        Event::SglangRetract => sglang_retract(a),
        Event::WeightsDispatchedOff => dispatched_off(a),
        Event::MlxBufferTooLarge {
            requested,
            max_buffer,
        } => mlx_buffer(a, *requested, *max_buffer),
        Event::DeviceBufferOom {
            requested,
            total,
            allocated,
            free,
        } => device_buffer(a, *requested, *total, *allocated, *free),
        Event::DeviceFragmented {
            requested,
            free,
            largest,
        } => device_fragmented(a, *requested, *free, *largest),
        Event::ContextTooLarge { sequences } => context_too_large(a, *sequences),
        Event::TensorrtOom { .. } => trt_allocator(a),
        Event::HostOomKiller { .. }
        | Event::ContainerOomKilled
        | Event::JobMemoryLimit { .. }
        | Event::Exit137
        | Event::HostAllocFailed { .. }
        | Event::RayOomKill
        | Event::PagingFileTooSmall
        | Event::OomKillerTasks { .. }
        | Event::HostMemoryShort { .. } => host(a),
        Event::Catalogued(c) => catalogued(a, c),
        _ => undecided(a),
    }
}

pub fn kind_name(e: &Event) -> &'static str {
    match e {
        Event::TorchOom(_) => "pytorch_oom",
        Event::TorchMemorySummary { .. } => "pytorch_memory_summary",
        Event::AllocationExceeds { .. } => "allocation_exceeds",
        Event::VllmKvCapacity { .. } => "vllm_kv_capacity",
        Event::VllmNoCacheBlocks => "vllm_no_cache_blocks",
        Event::VllmStartupFree { .. } => "vllm_startup_free",
        Event::VllmSamplerWarmup { .. } => "vllm_sampler_warmup",
        Event::VllmCpuKv { .. } => "vllm_cpu_kv",
        Event::LlamaCppBuffer { .. } => "llama_cpp_buffer",
        Event::CandleDriverOom => "cuda_driver_oom",
        Event::TgiPrefill { .. } => "tgi_prefill",
        Event::TgiCacheBlocks { .. } => "tgi_cache_blocks",
        Event::TgiTotalTokens { .. } => "tgi_total_tokens",
        Event::TurbomindOom { .. } => "turbomind_oom",
        Event::BatchSizeExhausted => "batch_size_exhausted",
        Event::PagingFileTooSmall => "paging_file_too_small",
        Event::OomKillerTasks { .. } => "oom_killer_tasks",
        Event::TensorrtOom { .. } => "tensorrt_llm_oom",
        Event::TensorrtComponent { .. } => "tensorrt_llm_component",
        Event::SglangNoKvRoom => "sglang_no_kv_room",
        Event::SglangReqSlots => "sglang_req_slots",
        Event::SglangPoolFull => "sglang_pool_full",
        Event::SglangRetract => "sglang_retract",
        Event::ExllamaInsufficient => "exllamav2_insufficient_vram",
        Event::WeightsDispatchedOff => "weights_dispatched_off",
        Event::MetalOom => "metal_oom",
        Event::MetalWorkingSet { .. } => "metal_working_set",
        Event::MlxBufferTooLarge { .. } => "mlx_buffer_too_large",
        Event::DeviceFragmented { .. } => "device_fragmented",
        Event::DeviceBufferOom { .. } => "device_buffer_oom",
        Event::HipErrorOom => "hip_error_oom",
        Event::CublasAllocFailed => "cublas_alloc_failed",
        Event::CudnnFailure => "cudnn_failure",
        Event::CudaErrorOom => "cuda_error_oom",
        Event::HostOomKiller { .. } => "host_oom_killer",
        Event::RayOomKill => "ray_oom_kill",
        Event::HostMemoryShort { .. } => "host_memory_short",
        Event::ContainerOomKilled => "container_oom_killed",
        Event::JobMemoryLimit { .. } => "job_memory_limit",
        Event::ContextTooLarge { .. } => "context_too_large",
        Event::Exit137 => "exit_137",
        Event::HostAllocFailed { .. } => "host_alloc_failed",
        Event::OomWords => "oom_words",
        Event::Catalogued(c) => c.id,
        Event::EndsAtAllocation { .. } => "ends_at_allocation",
    }
}
