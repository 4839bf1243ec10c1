//! `llm-oom diagnose`: run the model on this device, stage by stage, in a child process; measure
//! each stage; name the cause of the first out-of-memory from the measurements; price remedies and
//! the safe token budget with a peak model fitted to this device.
//!
//! Stages: environment → load → first token → long generation → concurrency → fragmentation
//! (→ the largest prompt and batch with `--find-limits`). A stage after an out-of-memory is skipped
//! with the reason.

mod decisive;
pub mod engine;
mod environment;
pub mod fit;
pub mod limits;
mod prepare;
mod record;
mod stages;
mod tensor_parallel;
mod verify;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::budget::{Budget, Planner};
use crate::dtype::ComputeDtype;
use crate::error::{Error, InputError, Result};
use crate::estimate::candle::Compute;
use crate::estimate::{kv_bytes_per_token, Engine, Estimate, MeasuredModel, Workload};
use crate::exit::ExitStatus;
use crate::meter::gpu::GpuInfo;
use crate::meter::Meter;
use crate::model::{facts, ModelFacts};
use crate::probe::launcher::Launcher;
use crate::probe::protocol::{Hello, Outcome, Setup, Task};
use crate::probe::session::{ChildRecord, Session, Timing};
use crate::request::Device;
use crate::runtime::weights::Quantize;
use crate::units::Bytes;
use crate::verdict::measured::{classify, CardFacts, StageRecord};
use crate::verdict::pricing::{advice_first, advice_last, price};
use crate::verdict::{Cause, Remedy, Verdict};

pub use decisive::FreshRun;
use engine::{corrected_card, Mode, ProbeKind};
use environment::Environment;
use fit::{fit, FitInput};
pub use limits::FoundLimits;
use prepare::{prepare, Prepared};
use stages::Measured;

#[derive(Debug, Clone)]
pub struct DiagnoseRequest {
    pub model: String,
    /// The probe's compute dtype (`None`: the checkpoint's).
    pub dtype: Option<ComputeDtype>,
    pub prompt_tokens: u64,
    /// The prompt length is the default, not asked: shortened to fit the model's context.
    pub prompt_is_default: bool,
    pub max_new_tokens: u64,
    pub batch: u64,
    /// Whose knobs the remedies name; `transformers-eager` also makes the probe materialise scores.
    pub engine: Engine,
    pub device: Device,
    /// `--device cuda:0,cuda:1`: every GPU the transformers probe spreads the model over
    /// (`device` is the first); empty for one device.
    pub devices: Vec<Device>,
    /// `--engine candle --device cuda:0,cuda:1 --tensor-parallel-size 2`: one candle probe child
    /// per rank, rank r on `ranks[r]` (all GPUs over NCCL, or all the CPU over the loopback);
    /// empty for one child.
    pub ranks: Vec<Device>,
    pub vram_limit: Option<u64>,
    pub find_limits: bool,
    pub verify: bool,
    pub random_weights: bool,
    /// Quantize the linear layers at load, to run the quantization remedy.
    pub quantize: Option<Quantize>,
    /// The llm-oom binary that runs the candle stages (`__probe`).
    pub exe: PathBuf,
    /// The Python whose torch and transformers run the transformers stages.
    pub python: PathBuf,
    pub stage_timeout: Duration,
    /// `--stage-timeout` as given: it also bounds a child's start (imports, CUDA context), to no
    /// less than 30 s; without it the start gets at least 180 s.
    pub greet_timeout: Option<Duration>,
    /// Probe a workload past the model's trained context (refused otherwise).
    pub allow_past_context: bool,
    /// When the whole workload runs again in a fresh process to decide the verdict (transformers).
    pub fresh_run: FreshRun,
    /// Set by the CLI's Ctrl-C handler: the stages still to run are skipped and the report shows
    /// what was measured so far.
    pub interrupt: Option<Arc<AtomicBool>>,
}

impl DiagnoseRequest {
    pub fn interrupted(&self) -> bool {
        self.interrupt
            .as_ref()
            .is_some_and(|f| f.load(Ordering::SeqCst))
    }
}

/// The device the stages ran on.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeDevice {
    pub device: Device,
    pub name: String,
    pub meter: Meter,
    /// The card the stages ran against.
    pub capacity_bytes: u64,
    /// `--vram-limit`, and how it was held (`ballast` on CUDA, `allocator limit` on the CPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_how: Option<LimitHow>,
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

/// How `--vram-limit` makes the device look smaller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LimitHow {
    /// CUDA: the rest of the card is held in one allocation.
    #[serde(rename = "ballast")]
    Ballast,
    /// CPU: the counting allocator refuses the first allocation past the limit.
    #[serde(rename = "allocator limit")]
    AllocatorLimit,
}

impl std::fmt::Display for LimitHow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LimitHow::Ballast => "ballast",
            LimitHow::AllocatorLimit => "allocator limit",
        })
    }
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
    /// Which probe answered: the user's engine measured, or its profile predicted on this card.
    pub mode: Mode,
    /// The probe's runtime: transformers or candle, its dtype, device and attention.
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
    /// `--device cuda:0,cuda:1`: every task's memory on each GPU, and the GPU an out-of-memory
    /// names (empty on one device).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_device: Vec<crate::probe::protocol::TaskDevices>,
    /// The warm-up before the stages (kernel compilation, library workspaces), timed apart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warmup_seconds: Option<f64>,
    /// Where the time went, in order: preparing, the probe's start (imports, CUDA context,
    /// ballast), each task (load, warm-up, each stage, a fresh run); `-v` prints it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timings: Vec<Timing>,
    pub seconds: f64,
    pub notes: Vec<String>,
    /// Ctrl-C stopped the probe: a partial report (exit 130).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

impl DiagnoseReport {
    /// The exit policy: an `unknown` verdict with no stage out of memory is the probe's failure
    /// (a crash, a hang), not an out-of-memory.
    pub fn exit_status(&self) -> ExitStatus {
        let oom = self.stages.iter().any(|s| s.outcome == Outcome::Oom);
        if self.interrupted && !oom {
            return ExitStatus::Program(130);
        }
        match self.verdict.cause {
            Cause::Unknown if !oom => ExitStatus::Failure,
            _ => ExitStatus::of(&self.verdict),
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
/// On the CPU the counting allocator counts every allocation of the child at once, the worker
/// threads' scratch included, so the same trial peaks a little higher or lower with the
/// scheduling: `--find-limits` under a 16 MiB limit found 985 and 992 tokens in runs of the same
/// case (tests/diagnose_cli.rs). The budget keeps this much for it.
const HOST_SLACK_FLOOR: u64 = 256 << 10;

pub fn diagnose(req: &DiagnoseRequest, progress: &mut dyn Progress) -> Result<DiagnoseReport> {
    let started = Instant::now();
    let mut prep = prepare(req)?;
    if let Some(why) = crate::request::past_context(&prep.spec, &prep.workload) {
        if !req.allow_past_context {
            return Err(InputError::Usage(format!(
                "{why}, or pass --allow-past-context to probe it anyway"
            ))
            .into());
        }
    }
    // Tensor parallel: every figure below is one rank's (the model facts stay the whole model's).
    let model_facts = facts(&prep.spec, prep.source.clone());
    if !req.ranks.is_empty() {
        tensor_parallel::prepare(req, &mut prep)?;
    }
    progress.stage("environment");
    let env = Environment::read(req.device, &mut prep.notes);
    let mut setup = setup(req, &prep, &env);
    let (launcher, model_dir) = match engine::choose(req.engine, &prep.source) {
        ProbeKind::Candle => {
            crate::runtime::weights::check_supported(&prep.spec)
                .map_err(crate::runtime::setup::runtime_err)?;
            (Launcher::candle(req.exe.clone()), None)
        }
        ProbeKind::Transformers => {
            let dir = engine::model_dir(&req.model, &prep.source, req.random_weights)?;
            setup.model = dir.path.display().to_string();
            setup.random_weights = dir.random_weights;
            setup.quantize = None;
            (Launcher::transformers(&req.python)?, Some(dir))
        }
        ProbeKind::Predicted(why) => return Ok(predicted(req, prep, env, why, started)),
    };
    let random = match &model_dir {
        Some(_) => setup.random_weights,
        None => matches!(
            crate::runtime::setup::weight_source(&prep.source, req.random_weights),
            Ok(crate::runtime::weights::WeightSource::Random)
        ),
    };
    if random {
        prep.notes.push(
            "random weights of the model's real shapes (no checkpoint was read): the memory is the model's; any tokens it generates are noise".into(),
        );
    }
    let prepared = started.elapsed().as_secs_f64();
    let mut session = match req.ranks.is_empty() {
        true => Session::new(launcher, setup, req.stage_timeout),
        false => Session::tensor_parallel(launcher, setup, req.ranks.clone(), req.stage_timeout),
    };
    session.greet_timeout = req.greet_timeout;

    progress.stage("load");
    let load = match session.run(&Task::Load) {
        Err(Error::EngineUnavailable(why)) => {
            let why = format!("{why}: to measure in transformers itself, install torch and transformers (pip install torch transformers) or pass --python PATH");
            return Ok(predicted(req, prep, env, why, started));
        }
        other => other?,
    };
    let hello = session
        .hello
        .clone()
        .ok_or_else(|| Error::Internal("the probe did not greet".into()))?;
    note_others(&mut prep.notes, &env, req, &hello);
    prep.notes.extend(hello.notes.iter().cloned());
    let mut m = Measured {
        stop: req.interrupt.clone(),
        // A long prompt is prefilled once: the long generation's prefill is the first token's
        // (transformers' cache grows with the tokens; candle's is allocated whole, and the
        // difference is its cache of the new tokens).
        prefill_once: true,
        cache_preallocated: model_dir.is_none(),
        ..Measured::default()
    };
    stages::load(&mut m, hello.base_bytes, load);
    // A checkpoint that cannot be loaded (truncated, header-only, shapes that disagree with
    // config.json, a missing tensor) is bad input, not a probe fault and never an out-of-memory.
    if let Some(why) = broken_checkpoint(&m, random) {
        let _ = session.finish();
        let advice = if why.contains("re-download") {
            "or pass --random-weights to probe its shapes"
        } else {
            "re-download it, or pass --random-weights to probe its shapes"
        };
        return Err(InputError::Usage(format!(
            "the checkpoint of {} cannot be loaded: {why}; {advice}",
            req.model
        ))
        .into());
    }
    let (p, n, b) = (
        prep.workload.prompt_tokens as usize,
        prep.workload.max_new_tokens as usize,
        prep.workload.batch as usize,
    );
    let on_gpu = req.device.gpu().is_some();
    stages::run_all(&mut session, &mut m, (p, n, b), on_gpu, progress)?;
    let transformers = model_dir.is_some();
    let capacity = hello.capacity_bytes;
    let profile = Planner::new(&prep.spec, capacity);
    // The profile's answer for this request, asked once: the decisive run, the budget trial and
    // the report's prediction read it.
    let profile_estimate = profile.estimate(&prep.workload);
    let profile_budget = profile.budget(&prep.workload);
    if transformers {
        let predicted_peak = profile_estimate.total;
        if let Some(why) = decisive::needed(&m, req.fresh_run, capacity, predicted_peak, b) {
            prep.notes.extend(decisive::run(
                &mut session,
                &mut m,
                (p, n, b),
                capacity,
                &why,
                progress,
            )?);
        }
    }
    // What the verdict and the budget read: the warm probe's out-of-memories a fresh run of the
    // whole workload contradicted are left out (they stay in the report).
    let view = decisive::verdict_view(&m);

    let card = CardFacts {
        capacity,
        emulated_limit: req.vram_limit,
        others: env.others.clone(),
        weights_bytes: prep.expected_weights,
    };
    let mut verdict = classify(&view, &card);
    name_the_device(&mut verdict, &session.per_device);
    for s in &m.superseded {
        verdict.evidence.push(crate::verdict::Evidence::text(format!(
            "at the edge: {s} ran out in the probe's warm process, but a fresh process ran the whole workload"
        )));
    }
    context_finding(&mut verdict, &prep);
    let measured = (m.loaded && !transformers)
        .then(|| measure(&prep, &m, on_gpu))
        .flatten();
    if measured.is_none() && m.loaded && !transformers {
        prep.notes.push("the first-token stage did not finish, so the budget below the card is not measured; `llm-oom plan` predicts it".into());
    }
    // transformers: its profile on the card corrected by what transformers measured here;
    // candle: the peak model fitted to the candle stages.
    let mut points: Vec<StageRecord> = view.iter().chain(&m.points).cloned().collect();
    let mut corrected = corrected_card(&profile, &prep.workload, &points).planner(&prep.spec);
    // The corrected planner's budget, kept while that planner stands.
    let mut corrected_budget = None;
    if transformers && !req.interrupted() {
        let budget = corrected.budget(&prep.workload);
        let trial = decisive::budget_trial_prompt(
            &m,
            profile_budget.max_prompt_tokens.unwrap_or(0),
            budget.max_prompt_tokens.unwrap_or(0),
            p,
        );
        corrected_budget = Some(budget);
        if let Some(at) = trial {
            if let Some((point, note)) =
                decisive::budget_trial(&mut session, &m, (at, n, b), progress)?
            {
                prep.notes.push(note);
                points.push(point);
                corrected_budget = None;
                corrected = corrected_card(&profile, &prep.workload, &points).planner(&prep.spec);
            }
        }
    }
    let planner = match (&measured, transformers) {
        (_, true) => corrected,
        (Some(mm), false) => Planner::new(&prep.spec, capacity).with_measured(mm),
        (None, false) => profile.on_card(capacity),
    };
    // A budget is claimed only from what ran: a generation stage in transformers, the fit in candle.
    // (or, in transformers, an out-of-memory that bounds it from above).
    let ran = points.iter().any(|s| {
        (s.outcome == Outcome::Ok || (transformers && s.outcome == Outcome::Oom))
            && (s.fresh_process
                || matches!(
                    s.name,
                    crate::verdict::Stage::FirstToken
                        | crate::verdict::Stage::LongGeneration
                        | crate::verdict::Stage::Concurrency
                ))
    });
    let priced = (transformers && ran) || measured.is_some();
    let mut remedies = remedies(&verdict, &planner, &prep.workload, &env);

    let interrupted = req.interrupted();
    if interrupted {
        prep.notes.push(
            "interrupted (Ctrl-C): the report shows what was measured until then; the stages marked skipped did not run"
                .into(),
        );
    }
    let limits = if req.find_limits && m.loaded && !interrupted {
        progress.stage("limits");
        Some(find_limits(&mut session, &planner, &prep)?)
    } else {
        None
    };
    let mut verification = None;
    if req.verify && !req.interrupted() {
        let (note, rerun) = verify::verify(
            &mut session,
            &mut remedies,
            &prep.workload,
            verdict.stage,
            m.weights_measured,
            progress,
        )?;
        prep.notes.extend(note);
        verification = rerun;
    }
    let per_device = std::mem::take(&mut session.per_device);
    let mut timings = vec![Timing {
        what: "prepare: the model, the workload, the card".into(),
        seconds: prepared,
    }];
    timings.append(&mut session.timings);
    let children = finish(session, &mut prep.notes);
    let budget = priced.then(|| {
        corrected_budget
            .filter(|_| transformers)
            .unwrap_or_else(|| planner.budget(&prep.workload))
    });
    if let Some(b) = &budget {
        prep.notes.extend(crate::budget::long_lived::note(
            prep.workload.engine,
            b.max_prompt_tokens,
        ));
    }
    for t in &timings {
        tracing::info!(
            seconds = format!("{:.2}", t.seconds),
            "diagnose: {}",
            t.what
        );
    }
    drop(model_dir);
    if verdict.cause == Cause::Unknown {
        verdict.summary = format!("unknown: {}", verdict.summary);
    }
    let probe = probe_name(&prep, req, &hello, transformers);
    Ok(DiagnoseReport {
        command: "diagnose",
        version: env!("CARGO_PKG_VERSION"),
        verdict,
        remedies,
        model: model_facts,
        workload: prep.workload,
        device: probe_device(req, &hello, env),
        mode: Mode::Measured,
        probe,
        stages: m.stages,
        weights_bytes: m.weights_tensors,
        kv_cache_bytes_per_token: kv_bytes_per_token(&prep.spec, prep.dtype.kv()),
        budget,
        measured,
        limits,
        verification,
        prediction: prediction(&profile, &profile_estimate, &profile_budget, req.engine),
        children,
        per_device,
        warmup_seconds: m.warmup_seconds,
        timings,
        seconds: started.elapsed().as_secs_f64(),
        notes: prep.notes,
        interrupted: req.interrupted(),
    })
}

fn probe_name(prep: &Prepared, req: &DiagnoseRequest, hello: &Hello, transformers: bool) -> String {
    if transformers {
        let attn = if prep.eager { "eager" } else { "sdpa" };
        let on = if req.devices.is_empty() {
            req.device.to_string()
        } else {
            let all: Vec<String> = req.devices.iter().map(Device::to_string).collect();
            format!("{} (device_map=\"auto\")", all.join(" + "))
        };
        return format!(
            "transformers {} on {on}, {attn} attention, its own DynamicCache ({} meter)",
            prep.dtype,
            hello.meter.as_str()
        );
    }
    let on = match req.ranks.as_slice() {
        [] => req.device.to_string(),
        ranks => format!(
            "{} (tensor parallel: one process per rank, the figures are the fullest rank's)",
            ranks
                .iter()
                .map(Device::to_string)
                .collect::<Vec<_>>()
                .join(" + ")
        ),
    };
    format!(
        "candle {} on {on}, {} attention, preallocated KV cache",
        prep.dtype,
        if prep.eager {
            "eager"
        } else {
            "sliced (SDPA-like)"
        }
    )
}

/// Spread over several GPUs: the verdict says which one ran out, as the OOM message named it
/// (tensor parallel: with its rank).
fn name_the_device(verdict: &mut Verdict, per_device: &[crate::probe::protocol::TaskDevices]) {
    if let Some(d) = crate::probe::protocol::TaskDevices::first_oom_label(per_device) {
        verdict.summary = format!("{} — on {d}", verdict.summary);
    }
}

/// The load's failure when it is the checkpoint's: it failed (not out of memory, not a timeout)
/// while reading weights from files.
fn broken_checkpoint(m: &Measured, random: bool) -> Option<String> {
    let load = m.stages.first()?;
    (load.outcome == Outcome::Error && !random).then(|| {
        load.reason
            .clone()
            .unwrap_or_else(|| "the load failed".into())
    })
}

/// A workload past the model's trained context is a finding of the verdict, not a footnote.
fn context_finding(verdict: &mut Verdict, prep: &Prepared) {
    if let Some(why) = crate::request::past_context(&prep.spec, &prep.workload) {
        verdict.evidence.insert(
            0,
            crate::verdict::Evidence::text(format!("past the context: {why}")),
        );
    }
}

/// Nothing ran in the user's engine: its profile on this card answers, labelled `predicted`.
fn predicted(
    req: &DiagnoseRequest,
    mut prep: Prepared,
    env: Environment,
    why: String,
    started: Instant,
) -> DiagnoseReport {
    let capacity = req.vram_limit.unwrap_or_else(|| match &env.gpu {
        Some(g) => g.free_bytes,
        None => env.host.map_or(24 << 30, |h| h.1),
    });
    let profile = Planner::new(&prep.spec, capacity);
    // On a CUDA card, transformers' allocation sequence replayed through PyTorch's allocator
    // answers where it is known (the llama family in 16 bits); the profile elsewhere.
    let profile = if req.device.gpu().is_some() {
        profile.with_pool()
    } else {
        profile
    };
    let f = crate::verdict::predicted::forecast(&profile, &prep.workload);
    let pool = f.replayed;
    let mut verdict = f.verdict;
    verdict.summary = format!("predicted — {}", verdict.summary);
    context_finding(&mut verdict, &prep);
    let budget = profile.budget(&prep.workload);
    if !pool {
        if let Some(edge) = near_the_edge(prep.workload.prompt_tokens, budget.max_prompt_tokens) {
            verdict.evidence.push(crate::verdict::Evidence::text(edge));
        }
    }
    prep.notes
        .insert(0, format!("predicted, not measured: {why}"));
    prep.notes.extend(crate::budget::long_lived::note(
        prep.workload.engine,
        budget.max_prompt_tokens,
    ));
    let hello = Hello {
        pid: 0,
        device: req.device,
        meter: Meter::HostAllocator,
        base_bytes: 0,
        ballast_bytes: 0,
        capacity_bytes: capacity,
        device_total: env.gpu.as_ref().map(|g| g.total_bytes),
        device_free: env.gpu.as_ref().map(|g| g.free_bytes),
        notes: Vec::new(),
        devices: Vec::new(),
    };
    let stages = [
        crate::verdict::Stage::Load,
        crate::verdict::Stage::FirstToken,
        crate::verdict::Stage::LongGeneration,
        crate::verdict::Stage::Concurrency,
        crate::verdict::Stage::Fragmentation,
    ]
    .into_iter()
    .map(|s| StageRecord::skipped(s, "predicted: nothing ran in the user's engine"))
    .collect();
    let engine_name = req.engine.to_string();
    DiagnoseReport {
        command: "diagnose",
        version: env!("CARGO_PKG_VERSION"),
        verdict,
        remedies: f.remedies,
        model: facts(&prep.spec, prep.source.clone()),
        workload: prep.workload,
        device: probe_device(req, &hello, env),
        mode: Mode::Predicted,
        probe: if pool {
            format!("predicted: {engine_name}'s allocation sequence replayed through PyTorch's caching allocator on this card")
        } else {
            format!("predicted: the {engine_name} profile on this card")
        },
        stages,
        weights_bytes: f.estimate.weights,
        kv_cache_bytes_per_token: kv_bytes_per_token(&prep.spec, prep.dtype.kv()),
        prediction: Prediction {
            engine: req.engine,
            peak_bytes: budget.peak_bytes,
            fits: budget.fits,
            max_prompt_tokens: budget.max_prompt_tokens,
        },
        budget: Some(budget),
        measured: None,
        limits: None,
        verification: None,
        children: Vec::new(),
        per_device: Vec::new(),
        warmup_seconds: None,
        timings: Vec::new(),
        seconds: started.elapsed().as_secs_f64(),
        notes: prep.notes,
        interrupted: false,
    }
}

/// A prompt within 15 % of the predicted budget is at the edge of what a forecast can tell: on the
/// H200 the transformers profile's budget was 87–100 % of the largest prompt that really ran, and
/// "ran" and "ran out" were 1–4 % apart
/// (docs/calibration/transformers-limits-h200-2026-12-01*.jsonl). Said, so a reader measures.
fn near_the_edge(prompt: u64, budget: Option<u64>) -> Option<String> {
    let b = budget.filter(|&b| b > 0)?;
    let (lo, hi) = (b.saturating_mul(85) / 100, b.saturating_mul(115) / 100);
    (lo..=hi).contains(&prompt).then(|| {
        format!(
            "at the edge: {} tokens is within 15 % of the predicted budget ({}), closer than a forecast can tell (its budget was 87–100 % of what really ran at transformers' limits); measure with torch and transformers installed",
            crate::units::group(prompt),
            crate::units::group(b)
        )
    })
}

/// How the child is configured, for all its tasks.
fn setup(req: &DiagnoseRequest, prep: &Prepared, env: &Environment) -> Setup {
    let shared = req.vram_limit.is_none() && !env.others.is_empty();
    Setup {
        model: req.model.clone(),
        device: req.device,
        dtype: prep.dtype,
        vram_limit: req.vram_limit,
        random_weights: req.random_weights,
        quantize: req.quantize,
        shared_gpu_margin: shared
            .then(|| crate::estimate::safety_margin(env.gpu.as_ref().map_or(0, |g| g.total_bytes))),
        eager: prep.eager,
        seed: 42,
        devices: req.devices.clone(),
        tensor_parallel: None,
    }
}

fn note_others(notes: &mut Vec<String>, env: &Environment, req: &DiagnoseRequest, hello: &Hello) {
    if !env.others.is_empty() && req.vram_limit.is_none() {
        notes.push(format!(
            "{} other process(es) hold {} of this GPU; the probe ran in the {} they left",
            env.others.len(),
            Bytes(env.others_hold()),
            Bytes(hello.capacity_bytes)
        ));
    }
}

/// The peak model of this device fitted to what the stages measured.
fn measure(prep: &Prepared, m: &Measured, on_gpu: bool) -> Option<MeasuredModel> {
    fit(&FitInput {
        spec: &prep.spec,
        compute: Compute {
            d: prep.dtype.kv().elem_bytes().as_f64(),
            quantized: prep.quantized,
        },
        pool: on_gpu,
        base: m.held_base,
        weights: m.weights_tensors,
        // The load's own transients are gone before any generation. On CUDA the pool held
        // 0.4–1.0 GB beyond live tensors at the limits of six models on the H200, more than the
        // short stages show: at least POOL_SLACK_FLOOR is kept for it.
        allocator_slack: m
            .stages
            .iter()
            .filter(|s| s.name != crate::verdict::Stage::Load)
            .map(|s| s.allocator_slack)
            .fold(m.slack, u64::max)
            .max(if on_gpu {
                POOL_SLACK_FLOOR
            } else {
                HOST_SLACK_FLOOR
            }),
        weight_dtype: prep.weight_dtype,
        kv_per_token: kv_bytes_per_token(&prep.spec, prep.dtype.kv()),
        kv_elem_bytes: prep.dtype.kv().elem_bytes().as_f64(),
        eager: prep.eager,
        attention_chunk: (!prep.eager).then_some(crate::estimate::candle::ATTENTION_SLICE),
        prefill: &m.prefill_points,
        long: m.long_point,
    })
}

/// Remedies for the measured cause: advice for what no estimate sees, then every change priced
/// by the measured model (else the engine profile), then what the cause names but cannot price.
fn remedies(verdict: &Verdict, pricing: &Planner, w: &Workload, env: &Environment) -> Vec<Remedy> {
    if matches!(verdict.cause, Cause::None | Cause::Unknown) {
        return Vec::new();
    }
    let est = pricing.estimate(w);
    let mut out = advice_first(verdict.cause, w.engine, Some(env.others_hold()));
    out.extend(price(pricing, w, &est));
    out.extend(advice_last(verdict.cause, w.engine));
    out
}

/// `--find-limits` around what the measured model predicts.
fn find_limits(session: &mut Session, planner: &Planner, prep: &Prepared) -> Result<FoundLimits> {
    let w = &prep.workload;
    let at_one = Workload { batch: 1, ..*w };
    let context = prep
        .spec
        .max_position_embeddings
        .unwrap_or(1 << 22)
        .max(w.total_tokens());
    let predicted_prompt = planner.largest(1, context, |p| Workload {
        prompt_tokens: p,
        ..at_one
    });
    limits::find(session, w, predicted_prompt, planner.max_batch(w))
}

/// End the children; memory one of them left on the GPU is said.
fn finish(session: Session, notes: &mut Vec<String>) -> Vec<ChildRecord> {
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
    children
}

/// The profile's prediction for the user's engine on the same card, from its estimate and budget
/// of the request.
fn prediction(profile: &Planner, est: &Estimate, budget: &Budget, engine: Engine) -> Prediction {
    Prediction {
        engine,
        peak_bytes: est.total,
        fits: est.total <= profile.vram,
        max_prompt_tokens: budget.max_prompt_tokens,
    }
}

fn probe_device(req: &DiagnoseRequest, hello: &Hello, env: Environment) -> ProbeDevice {
    let on_gpu = req.device.gpu().is_some();
    ProbeDevice {
        device: req.device,
        name: env.gpu.as_ref().map_or_else(
            || if on_gpu { "CUDA GPU" } else { "CPU" }.to_string(),
            |g| g.name.clone(),
        ),
        meter: hello.meter,
        capacity_bytes: hello.capacity_bytes,
        limit_bytes: req.vram_limit,
        limit_how: req.vram_limit.map(|_| {
            if on_gpu {
                LimitHow::Ballast
            } else {
                LimitHow::AllocatorLimit
            }
        }),
        ballast_bytes: hello.ballast_bytes,
        base_bytes: hello.base_bytes,
        gpu: env.gpu,
        host_total_bytes: env.host.map(|h| h.0),
        host_available_bytes: env.host.map(|h| h.1),
    }
}

#[cfg(test)]
mod tests {
    use super::near_the_edge;

    #[test]
    fn a_prompt_near_the_predicted_budget_is_said_to_be_at_the_edge() {
        assert!(near_the_edge(4466, Some(3884)).is_some());
        assert!(near_the_edge(3500, Some(3884)).is_some());
        assert!(near_the_edge(2048, Some(32512)).is_none());
        assert!(near_the_edge(40000, Some(3884)).is_none());
        assert!(near_the_edge(10, None).is_none());
    }
}
