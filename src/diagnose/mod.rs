//! `llm-oom diagnose`: run the model on this device, stage by stage, in a child process; measure
//! each stage; name the cause of the first out-of-memory from the measurements; price remedies and
//! the safe token budget with a peak model fitted to this device.
//!
//! Stages: environment → load → first token → long generation → concurrency → fragmentation
//! (→ the largest prompt and batch with `--find-limits`). A stage after an out-of-memory is skipped
//! with the reason.

pub mod fit;
pub mod limits;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::budget::{Budget, Planner};
use crate::diagnosis::measured::{
    classify, CardFacts, Components, StageMemory, StageOutcome, StageRecord,
};
use crate::diagnosis::remedy::Change;
use crate::diagnosis::{Cause, Remedy, Stage, Verdict};
use crate::dtype::{GgufMix, WeightDtype};
use crate::error::{Error, InputError, Result};
use crate::estimate::candle::Compute;
use crate::estimate::{kv_bytes_per_token, Engine, MeasuredModel, Workload};
use crate::meter::gpu::{read_gpu, GpuInfo, GpuProcess};
use crate::meter::host::host_memory;
use crate::model::resolve;
use crate::plan::{facts, ModelFacts};
use crate::probe::protocol::{GenerateTask, Outcome, Setup, Task, TaskResult};
use crate::probe::session::{ChildRecord, Reply, Session};
use crate::runtime::run::{
    parse_quantize, runtime_dtype, runtime_err, runtime_weight_bytes, weight_source,
};
use crate::runtime::weights::{Quantize, WeightSource};
use crate::units::{group, Bytes};

use fit::{fit, FitInput, LongPoint, PrefillPoint};
pub use limits::FoundLimits;

#[derive(Debug, Clone)]
pub struct DiagnoseRequest {
    pub model: String,
    /// f32, f16 or bf16 (`None`: the checkpoint's).
    pub dtype: Option<String>,
    pub prompt_tokens: u64,
    pub max_new_tokens: u64,
    pub batch: u64,
    /// Whose knobs the remedies name; `transformers-eager` also makes the probe materialise scores.
    pub engine: Engine,
    /// `cpu`, `cuda`, `cuda:N`.
    pub device: String,
    pub vram_limit: Option<u64>,
    pub find_limits: bool,
    pub verify: bool,
    pub random_weights: bool,
    /// Quantize the linear layers at load (`q8_0`, `q4k`), to run the quantization remedy.
    pub quantize: Option<String>,
    /// The llm-oom binary that runs the stages (`__probe`).
    pub exe: PathBuf,
    pub stage_timeout: Duration,
}

/// The device the stages ran on.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeDevice {
    pub device: String,
    pub name: String,
    /// `cuda-pool` or `host-allocator`.
    pub meter: String,
    /// The card the stages ran against.
    pub capacity_bytes: u64,
    /// `--vram-limit`, and how it was held (`ballast` on CUDA, `allocator limit` on the CPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_how: Option<&'static str>,
    pub ballast_bytes: u64,
    /// Held before any tensor (CUDA context and libraries).
    pub base_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_total_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_available_bytes: Option<u64>,
}

/// What `plan` predicts for the user's engine on the same card, beside the measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    pub engine: Engine,
    pub peak_bytes: u64,
    pub fits: bool,
    pub max_prompt_tokens: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DiagnoseReport {
    pub command: &'static str,
    pub version: &'static str,
    pub verdict: Verdict,
    pub remedies: Vec<Remedy>,
    pub model: ModelFacts,
    pub workload: Workload,
    pub device: ProbeDevice,
    /// The probe's runtime: candle, with sliced (SDPA-like) or eager attention.
    pub probe: String,
    pub stages: Vec<StageRecord>,
    pub weights_bytes: u64,
    pub kv_cache_bytes_per_token: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<MeasuredModel>,
    /// The safe token budget from the measured model (absent when too little was measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<FoundLimits>,
    /// `--verify`: the failing stage run again with the top remedy applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification: Option<StageRecord>,
    pub prediction: Prediction,
    pub children: Vec<ChildRecord>,
    /// The warm-up before the stages (kernel compilation, library workspaces), timed apart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warmup_seconds: Option<f64>,
    pub seconds: f64,
    pub notes: Vec<String>,
}

impl DiagnoseReport {
    /// 0 no out-of-memory, 1 one was found, 3 the probe itself failed.
    pub fn exit_code(&self) -> i32 {
        match self.verdict.cause {
            Cause::None => 0,
            Cause::Unknown => 3,
            _ => 1,
        }
    }
}

/// Progress events for a terminal: the stage that starts now.
pub trait Progress {
    fn stage(&mut self, what: &str);
}

impl<F: FnMut(&str)> Progress for F {
    fn stage(&mut self, what: &str) {
        self(what)
    }
}

/// The least the CUDA pool is assumed to hold beyond live tensors at a peak (docs/accuracy.md).
const POOL_SLACK_FLOOR: u64 = 256 << 20;

pub fn diagnose(req: &DiagnoseRequest, progress: &mut dyn Progress) -> Result<DiagnoseReport> {
    let started = Instant::now();
    let resolved = resolve(&req.model)?;
    let spec = resolved.spec.clone();
    crate::runtime::weights::check_supported(&spec).map_err(runtime_err)?;
    let source = weight_source(&resolved, req.random_weights)?;
    let quantize = parse_quantize(req.quantize.as_deref())?;
    let gguf = matches!(source, WeightSource::Gguf(_));
    let dtype_name = match &req.dtype {
        Some(d) => d.clone(),
        None => match spec.native_dtype {
            WeightDtype::F32 => "f32".into(),
            WeightDtype::F16 => "f16".into(),
            WeightDtype::Bf16 => "bf16".into(),
            // a GGUF file's activations run in the device's usual compute dtype
            _ if spec.gguf.is_some() => {
                if crate::runtime::gpu_ordinal(&req.device).is_some() {
                    "bf16".into()
                } else {
                    "f32".into()
                }
            }
            other => {
                return Err(InputError::Usage(format!(
                    "the checkpoint is {other}-quantized; the probe runs f32, f16 or bf16 weights — pass --dtype bf16 to probe the unquantized shape, or use `llm-oom plan`"
                ))
                .into())
            }
        },
    };
    let (_, dense_dtype, kv_dtype) = runtime_dtype(&dtype_name)?;
    // What the weights are priced as: the GGUF file's types, the --quantize block type, or dense.
    let weight_dtype = match (gguf, quantize) {
        (true, _) => spec.native_dtype,
        (false, Some(Quantize::Q8_0)) => WeightDtype::Gguf(GgufMix::Q8_0),
        (false, Some(Quantize::Q4K)) => WeightDtype::Gguf(GgufMix::Q4KM),
        (false, None) => dense_dtype,
    };
    let expected_weights = runtime_weight_bytes(&spec, dense_dtype, &source, quantize);
    let workload = Workload {
        prompt_tokens: req.prompt_tokens,
        max_new_tokens: req.max_new_tokens,
        batch: req.batch,
        weight_dtype,
        kv_dtype,
        engine: req.engine,
    };
    let eager = req.engine == Engine::TransformersEager;
    let mut notes = spec.notes.clone();
    if let Some(max) = spec.max_position_embeddings {
        if workload.total_tokens() > max {
            notes.push(
                InputError::ContextTooLong {
                    model: spec.name.clone(),
                    requested: workload.total_tokens(),
                    max,
                }
                .to_string(),
            );
        }
    }

    // Stage 0: the environment, before the probe takes anything.
    progress.stage("environment");
    let gpu_index = crate::runtime::gpu_ordinal(&req.device);
    let on_gpu = gpu_index.is_some();
    let gpu = if let Some(index) = gpu_index {
        read_gpu(index).map_err(|why| notes.push(why)).ok()
    } else {
        None
    };
    let others: Vec<GpuProcess> = gpu
        .as_ref()
        .map(|g| {
            g.processes
                .iter()
                .filter(|p| p.bytes.unwrap_or(0) > 0)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let host = host_memory();

    let setup = Setup {
        model: req.model.clone(),
        device: req.device.clone(),
        dtype: dtype_name.clone(),
        vram_limit: req.vram_limit,
        random_weights: req.random_weights,
        quantize: req.quantize.clone(),
        shared_gpu_margin: (req.vram_limit.is_none() && !others.is_empty())
            .then(|| crate::estimate::safety_margin(gpu.as_ref().map_or(0, |g| g.total_bytes))),
        eager,
        seed: 42,
    };
    let mut session = Session::new(req.exe.clone(), setup, req.stage_timeout);
    let mut stages = Vec::new();

    // Stage 1: load.
    progress.stage("load");
    let load = session.run(&Task::Load)?;
    let hello = session
        .hello
        .clone()
        .ok_or_else(|| Error::Internal("the probe did not greet".into()))?;
    if !others.is_empty() && req.vram_limit.is_none() {
        let held: u64 = others.iter().filter_map(|p| p.bytes).sum();
        notes.push(format!(
            "{} other process(es) hold {} of this GPU; the probe ran in the {} they left",
            others.len(),
            Bytes(held),
            Bytes(hello.capacity_bytes)
        ));
    }
    notes.extend(hello.notes.iter().cloned());
    let base = hello.base_bytes;
    // What the device holds for the weights (pool slack included), and their tensors' bytes.
    let mut weights_measured = 0;
    let mut weights_tensors = 0;
    let load_record = match load {
        Reply::Done(r) => {
            let mut s = record(Stage::Load, &r, 0, "load the weights");
            s.components = match &r.oom {
                // What was loaded when it failed; the rest is what the model still needed.
                Some(o) => Components {
                    weights: o.held.saturating_sub(r.before),
                    kv_cache: 0,
                    activations: 0,
                    other: base,
                },
                None => {
                    weights_measured = r.after.saturating_sub(r.before);
                    weights_tensors = r.weights_bytes;
                    Components {
                        weights: weights_measured,
                        kv_cache: 0,
                        // The load's own transient (random weights are drawn in f32, then cast).
                        activations: r.peak.saturating_sub(r.after),
                        other: base,
                    }
                }
            };
            s
        }
        other => died(Stage::Load, other, "load the weights"),
    };
    let loaded = load_record.outcome == StageOutcome::Ok;
    stages.push(load_record);

    // Warm-up: kernels compiled, library workspaces allocated; timed apart from the stages.
    let mut prefill_points = Vec::new();
    let mut warmup_seconds = None;
    let mut held_base = base;
    let mut slack = 0;
    if loaded {
        progress.stage("warm-up");
        session.warmup_tokens = req.prompt_tokens as usize;
        let warm = Task::Warmup {
            prompt_tokens: req.prompt_tokens as usize,
        };
        if let Reply::Done(r) = session.run(&warm)? {
            if r.outcome == Outcome::Ok {
                warmup_seconds = Some(r.seconds);
                // Live bytes before the clean run, less the weights: context and workspaces.
                held_base = r.used.before.saturating_sub(weights_tensors).max(base);
                slack = slack.max(r.peak.saturating_sub(r.used.peak));
                prefill_points.push(prefill_point(&r, 16, 18));
            }
        }
    }

    // Stages 2–4: generation at the target lengths, batch 1 then B.
    let (p, n, b) = (
        req.prompt_tokens as usize,
        req.max_new_tokens as usize,
        req.batch as usize,
    );
    let mut failed = !loaded;
    let gen = |label: &str, prompt: usize, new: usize, batch: usize, steps: usize| GenerateTask {
        label: label.into(),
        prompt_tokens: prompt,
        new_tokens: new,
        batch,
        decode_steps: steps,
        eager: None,
    };
    let run_stage = |session: &mut Session,
                     stage: Stage,
                     task: GenerateTask,
                     detail: String,
                     failed: &mut bool|
     -> Result<(StageRecord, Option<Box<TaskResult>>)> {
        if *failed {
            return Ok((
                StageRecord::skipped(stage, "an earlier stage ran out of memory or failed"),
                None,
            ));
        }
        let reply = session.run(&Task::Generate(task.clone()))?;
        let (mut s, raw) = match reply {
            Reply::Done(r) => (record(stage, &r, weights_measured, &detail), Some(r)),
            other => (died(stage, other, &detail), None),
        };
        s.prompt_tokens = Some(task.prompt_tokens as u64);
        s.new_tokens = Some(task.new_tokens as u64);
        s.batch = Some(task.batch as u64);
        if s.outcome != StageOutcome::Ok {
            *failed = true;
        }
        Ok((s, raw.filter(|r| r.outcome == Outcome::Ok)))
    };

    progress.stage("first token");
    if p >= 64 && !failed {
        // A second prefill length, so the fit can tell the constant from the per-token part.
        if let Reply::Done(r) =
            session.run(&Task::Generate(gen("first_token_half", p / 2, 1, 1, 0)))?
        {
            if r.outcome == Outcome::Ok {
                prefill_points.push(prefill_point(&r, p / 2, p / 2 + 1));
            }
        }
    }
    let (first, first_raw) = run_stage(
        &mut session,
        Stage::FirstToken,
        gen("first_token", p, 1, 1, 0),
        format!("prefill {} tokens", group(p as u64)),
        &mut failed,
    )?;
    if let Some(r) = &first_raw {
        prefill_points.push(prefill_point(r, p, p + 1));
    }
    stages.push(first);

    progress.stage("long generation");
    let (long, long_raw) = run_stage(
        &mut session,
        Stage::LongGeneration,
        gen("long_generation", p, n, 1, n.saturating_sub(1).min(4)),
        format!("{} + {} tokens", group(p as u64), group(n as u64)),
        &mut failed,
    )?;
    // Without a long generation that ran, what grows with the context is measured on a shorter
    // one (a quarter, then a sixteenth of the new tokens), so the budget still accounts for it.
    let mut long_raw = long_raw.map(|r| (n, r));
    if long_raw.is_none() && long.outcome == StageOutcome::Oom {
        for new in [n / 4, n / 16].into_iter().filter(|&x| x > 1) {
            let task = gen("long_generation_scout", p, new, 1, 1);
            if let Reply::Done(r) = session.run(&Task::Generate(task))? {
                if r.outcome == Outcome::Ok {
                    long_raw = Some((new, r));
                    break;
                }
            }
        }
    }
    stages.push(long);

    progress.stage("concurrency");
    if b > 1 {
        let (c, _) = run_stage(
            &mut session,
            Stage::Concurrency,
            gen("concurrency", p, n, b, n.saturating_sub(1).min(2)),
            format!(
                "{} + {} tokens × {b} sequences",
                group(p as u64),
                group(n as u64)
            ),
            &mut failed,
        )?;
        stages.push(c);
    } else {
        stages.push(StageRecord::skipped(
            Stage::Concurrency,
            "one sequence asked (--concurrency 1)",
        ));
    }

    // Stage 5: fragmentation of what the stages left.
    progress.stage("fragmentation");
    if on_gpu && loaded {
        let reply = session.run(&Task::Fragmentation)?;
        let s = match reply {
            Reply::Done(r) => {
                let mut s = record(
                    Stage::Fragmentation,
                    &r,
                    weights_measured,
                    "largest free block",
                );
                s.fragmentation = r.fragmentation.clone();
                s.components.activations = 0;
                s
            }
            other => died(Stage::Fragmentation, other, "largest free block"),
        };
        stages.push(s);
    } else {
        stages.push(StageRecord::skipped(
            Stage::Fragmentation,
            if on_gpu {
                "the model did not load"
            } else {
                "the CPU has no device memory pool to fragment"
            },
        ));
    }

    let card = CardFacts {
        capacity: hello.capacity_bytes,
        emulated_limit: req.vram_limit,
        others: others.clone(),
        weights_bytes: expected_weights,
    };
    let mut verdict = classify(&stages, &card);

    let long_point = long_raw.map(|(new, r)| LongPoint {
        prompt_tokens: p as u64,
        total_tokens: (p + new) as u64,
        prefill_activations: r
            .used
            .prefill_peak
            .unwrap_or(r.used.peak)
            .saturating_sub(r.used.before + r.kv_bytes),
        decode_activations: r
            .used
            .decode_peak
            .map(|d| d.saturating_sub(r.used.before + r.kv_bytes)),
    });
    let measured = if loaded {
        fit(&FitInput {
            spec: &spec,
            compute: Compute {
                d: dense_dtype.compute_kv_dtype().elem_bytes().as_f64(),
                quantized: gguf || quantize.is_some(),
            },
            pool: on_gpu,
            base: held_base,
            weights: weights_tensors,
            // The load's own transients (f32 draws) are gone before any generation. On CUDA the
            // pool held 0.4–1.0 GB beyond live tensors at the limits of six models on the H200,
            // more than the short stages show: at least POOL_SLACK_FLOOR is kept for it.
            allocator_slack: stages
                .iter()
                .filter(|s| s.name != Stage::Load)
                .map(|s| s.allocator_slack)
                .fold(slack, u64::max)
                .max(if on_gpu { POOL_SLACK_FLOOR } else { 0 }),
            weight_dtype,
            kv_per_token: kv_bytes_per_token(&spec, kv_dtype),
            kv_elem_bytes: kv_dtype.elem_bytes().as_f64(),
            eager,
            attention_chunk: (!eager).then_some(crate::estimate::candle::ATTENTION_SLICE),
            prefill: &prefill_points,
            long: long_point,
        })
    } else {
        None
    };
    let capacity = hello.capacity_bytes;
    let planner = Planner {
        spec: &spec,
        vram: capacity,
        measured: measured.as_ref(),
    };
    let budget = measured.as_ref().map(|_| planner.budget(&workload));
    if measured.is_none() && loaded {
        notes.push("the first-token stage did not finish, so the budget below the card is not measured; `llm-oom plan` predicts it".into());
    }

    // Remedies: priced by the measured model where there is one, else by the engine profile.
    let profile_planner = Planner::new(&spec, capacity);
    let pricing = if measured.is_some() {
        &planner
    } else {
        &profile_planner
    };
    let mut remedies = Vec::new();
    if verdict.cause != Cause::None && verdict.cause != Cause::Unknown {
        let est = pricing.estimate(&workload);
        match verdict.cause {
            Cause::OtherProcess => {
                let held: u64 = others.iter().filter_map(|p| p.bytes).sum();
                remedies.push(Remedy::advice(
                    Change::FreeOtherProcesses,
                    req.engine,
                    Some(held),
                ));
            }
            Cause::Fragmentation => {
                remedies.push(Remedy::advice(Change::AllocatorSettings, req.engine, None));
            }
            _ => {}
        }
        remedies.extend(crate::plan::remedies(pricing, &workload, &est));
        // What the measurements name but cannot price on this runtime, after the priced ones.
        match verdict.cause {
            Cause::Activations => {
                remedies.push(Remedy::advice(Change::ChunkedPrefill(0), req.engine, None))
            }
            Cause::Weights => remedies.push(Remedy::advice(Change::CpuOffload, req.engine, None)),
            Cause::KvCache if req.engine != Engine::Vllm && req.engine != Engine::LlamaCpp => {
                remedies.push(Remedy::advice(
                    Change::QuantizeKv(crate::dtype::KvDtype::Q4_0),
                    req.engine,
                    None,
                ))
            }
            _ => {}
        }
    }

    let mut limits = None;
    if req.find_limits && loaded {
        progress.stage("limits");
        let at_one = Workload {
            batch: 1,
            ..workload
        };
        let context = spec
            .max_position_embeddings
            .unwrap_or(1 << 22)
            .max(workload.total_tokens());
        let predicted_prompt = crate::budget::largest(1, context, |p| {
            planner.fits(&Workload {
                prompt_tokens: p,
                ..at_one
            })
        });
        limits = Some(limits::find(
            &mut session,
            &workload,
            predicted_prompt,
            planner.max_batch(&workload),
        )?);
    }
    let mut verification = None;
    if req.verify {
        let (note, rerun) = verify(
            &mut session,
            &mut remedies,
            &workload,
            verdict.stage,
            weights_measured,
            progress,
        )?;
        notes.extend(note);
        verification = rerun;
    }

    let children = session.finish();
    for c in &children {
        if let Some(left) = c.leftover_gpu_bytes.filter(|&b| b > 0) {
            notes.push(format!(
                "probe process {} still held {} on the GPU after it ended",
                c.pid,
                Bytes(left)
            ));
        }
    }
    if verdict.cause == Cause::Unknown {
        verdict.summary = format!("unknown: {}", verdict.summary);
    }

    // plan's prediction for the user's engine on the same card: the profile planner above.
    let user = &profile_planner;
    let user_est = user.estimate(&workload);
    let prediction = Prediction {
        engine: req.engine,
        peak_bytes: user_est.total,
        fits: user_est.total <= capacity,
        max_prompt_tokens: user.budget(&workload).max_prompt_tokens,
    };
    let device = ProbeDevice {
        device: req.device.clone(),
        name: gpu.as_ref().map_or_else(
            || {
                if on_gpu {
                    "CUDA GPU".into()
                } else {
                    "CPU".into()
                }
            },
            |g| g.name.clone(),
        ),
        meter: hello.meter.clone(),
        capacity_bytes: capacity,
        limit_bytes: req.vram_limit,
        limit_how: req
            .vram_limit
            .map(|_| if on_gpu { "ballast" } else { "allocator limit" }),
        ballast_bytes: hello.ballast_bytes,
        base_bytes: base,
        gpu,
        host_total_bytes: host.map(|h| h.0),
        host_available_bytes: host.map(|h| h.1),
    };
    Ok(DiagnoseReport {
        command: "diagnose",
        version: env!("CARGO_PKG_VERSION"),
        verdict,
        remedies,
        model: facts(&spec, resolved.source),
        workload,
        device,
        probe: format!(
            "candle {} on {}, {} attention, preallocated KV cache",
            dtype_name,
            req.device,
            if eager { "eager" } else { "sliced (SDPA-like)" }
        ),
        stages,
        weights_bytes: weights_tensors,
        kv_cache_bytes_per_token: kv_bytes_per_token(&spec, kv_dtype),
        measured,
        budget,
        limits,
        verification,
        prediction,
        children,
        warmup_seconds,
        seconds: started.elapsed().as_secs_f64(),
        notes,
    })
}

/// Activations of a prefill: live bytes at its peak above those before it and the cache.
fn prefill_point(r: &TaskResult, tokens: usize, total: usize) -> PrefillPoint {
    PrefillPoint {
        tokens: tokens as u64,
        total_tokens: total as u64,
        activations: r
            .used
            .prefill_peak
            .unwrap_or(r.used.peak)
            .saturating_sub(r.used.before + r.kv_bytes),
    }
}

/// A stage record from a task's measurements.
fn record(stage: Stage, r: &TaskResult, weights: u64, detail: &str) -> StageRecord {
    let outcome = match r.outcome {
        Outcome::Ok => StageOutcome::Ok,
        Outcome::Oom => StageOutcome::Oom,
        Outcome::Error => StageOutcome::Error,
    };
    let peak = match (&r.oom, r.prefill_peak) {
        (Some(o), _) => o.held.max(r.peak),
        (None, Some(pp)) => pp.max(r.peak),
        _ => r.peak,
    };
    // A cache that failed part-way holds what it got so far; nothing ran after it.
    let (kv_cache, activations) = match &r.oom {
        Some(o) if o.part == crate::meter::host::Part::KvCache => {
            (peak.saturating_sub(r.before), 0)
        }
        _ => (r.kv_bytes, peak.saturating_sub(r.before + r.kv_bytes)),
    };
    StageRecord {
        name: stage,
        outcome,
        memory: StageMemory {
            before: r.before,
            peak,
            after: r.after,
        },
        components: Components {
            weights,
            kv_cache,
            activations,
            // What was held before the stage beside the weights: CUDA context, library workspaces.
            other: r.before.saturating_sub(weights),
        },
        seconds: r.seconds,
        detail: detail.to_string(),
        prompt_tokens: None,
        new_tokens: None,
        batch: None,
        ttft_seconds: r.prefill_seconds,
        tokens_per_second: r.decode_tokens_per_second,
        oom: r.oom.clone(),
        reason: r.error.clone(),
        fragmentation: None,
        allocator_slack: r.peak.saturating_sub(r.used.peak),
        timeline: r.timeline.clone(),
    }
}

/// A stage whose child died or hung: an out-of-memory if its last words say so, else an error.
fn died(stage: Stage, reply: Reply, detail: &str) -> StageRecord {
    let mut s = StageRecord::skipped(stage, "");
    s.detail = detail.to_string();
    match reply {
        Reply::Died { message, oom } => {
            s.outcome = if oom.is_some() {
                StageOutcome::Oom
            } else {
                StageOutcome::Error
            };
            s.memory.peak = oom.as_ref().map_or(0, |o| o.held);
            s.oom = oom;
            s.reason = Some(message);
        }
        Reply::TimedOut(t) => {
            s.outcome = StageOutcome::Error;
            s.reason = Some(format!(
                "no answer after {:.0} s; the probe was stopped (raise --stage-timeout)",
                t.as_secs_f64()
            ));
        }
        Reply::Done(_) => {}
    }
    s
}

/// `--verify`: run the failing workload again with the first remedy the probe can apply (a
/// shorter prompt, fewer new tokens, fewer sequences, SDPA-like attention) and record whether it
/// fits on this device.
fn verify(
    session: &mut Session,
    remedies: &mut [Remedy],
    w: &Workload,
    stage: Stage,
    weights: u64,
    progress: &mut dyn Progress,
) -> Result<(Option<String>, Option<StageRecord>)> {
    if remedies.is_empty() {
        return Ok((
            Some("--verify: nothing to verify, no stage ran out of memory".into()),
            None,
        ));
    }
    let Some(r) = remedies.iter_mut().find(|r| {
        r.fits()
            && matches!(
                r.change,
                Change::TruncatePrompt(_)
                    | Change::CapNewTokens(_)
                    | Change::LimitConcurrency(_)
                    | Change::UseSdpa
            )
    }) else {
        return Ok((
            Some("--verify: no remedy the probe can apply by itself (quantization and other engines are priced, not run)".into()),
            None,
        ));
    };
    progress.stage("verify");
    let (mut p, mut n, mut b, mut eager) = (w.prompt_tokens, w.max_new_tokens, w.batch, None);
    match r.change {
        Change::TruncatePrompt(x) => p = x,
        Change::CapNewTokens(x) => n = x,
        Change::LimitConcurrency(x) => b = x,
        Change::UseSdpa => eager = Some(false),
        _ => {}
    }
    let task = GenerateTask {
        label: "verify".into(),
        prompt_tokens: p as usize,
        new_tokens: n as usize,
        batch: b as usize,
        decode_steps: (n as usize).saturating_sub(1).min(2),
        eager,
    };
    let detail = format!(
        "{} + {} tokens × {b} with: {}",
        group(p),
        group(n),
        r.action
    );
    let record = match session.run(&Task::Generate(task))? {
        Reply::Done(t) => record(stage, &t, weights, &detail),
        other => died(stage, other, &detail),
    };
    r.verified = Some(record.outcome == StageOutcome::Ok);
    Ok((None, Some(record)))
}
