//! `llm-oom explain`: what a pasted OOM log means — the same verdict and remedies `diagnose` gives,
//! without a GPU. With the user's model and workload, the remedies carry the predicted bytes.

use serde::Serialize;

use crate::budget::card;
use crate::budget::Planner;
use crate::error::Result;
use crate::estimate::{kv_bytes_per_token, Engine};
use crate::logparse::parse::{ModelHint, WorkloadHint};
use crate::logparse::{Event, Finding};
use crate::model::presets;
use crate::model::resolve;
use crate::model::source::hf_hub_cache_dir;
use crate::request::WorkloadRequest;
use crate::units::Bytes;
use crate::verdict::predicted::{forecast, Forecast};
use crate::verdict::read::{read_log, ConfidenceBand};
use crate::verdict::{Cause, Evidence, Remedy, Verdict};

/// The optional facts the user adds to a log.
#[derive(Debug, Clone)]
pub struct ExplainRequest {
    /// The model and workload; `None` when only the log is known.
    pub plan: Option<WorkloadRequest>,
    pub engine: Engine,
}

/// The prediction for the user's workload, when a model was given.
#[derive(Debug, Clone, Serialize)]
pub struct PlanNumbers {
    pub model: String,
    pub weights_bytes: u64,
    pub kv_cache_bytes_per_token: u64,
    pub peak_bytes: u64,
    pub vram_bytes: u64,
    pub cause: Cause,
    /// Where the model and workload came from: `flags` (--model …) or `log` (the model and the
    /// figures the log itself names, when no --model was given).
    pub from: &'static str,
    /// The workload priced: prompt tokens, new tokens, sequences at once.
    pub prompt_tokens: u64,
    pub max_new_tokens: u64,
    pub batch: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExplainReport {
    pub command: &'static str,
    pub version: &'static str,
    pub verdict: Verdict,
    pub remedies: Vec<Remedy>,
    /// Every out-of-memory event in the log, in order.
    pub findings: Vec<Finding>,
    /// For an `unknown` verdict: the fact or command that would decide it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_decide: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanNumbers>,
    pub lines: usize,
    /// How often verdicts at this confidence were right on real logs the rules had not seen.
    pub confidence_band: ConfidenceBand,
    /// The workload figures the log states (`batch=`, `max_model_len`, `n_ctx`, …).
    pub workload_hint: WorkloadHint,
    /// The model the log names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_hint: Option<ModelHint>,
    /// Bytes left out of the middle of an over-long input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_bytes: Option<u64>,
    /// The input went on past the most that is read (1 GiB): the bytes read; the rest was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_bytes: Option<u64>,
}

pub fn explain(raw: &[u8], req: &ExplainRequest) -> Result<ExplainReport> {
    let reading = read_log(raw, req.engine)?;
    let mut report = ExplainReport {
        command: "explain",
        version: env!("CARGO_PKG_VERSION"),
        verdict: reading.verdict,
        remedies: reading.remedies,
        findings: reading.findings,
        to_decide: reading.to_decide,
        plan: None,
        lines: reading.lines,
        confidence_band: reading.confidence_band,
        workload_hint: reading.workload_hint,
        model_hint: reading.model_hint,
        skipped_bytes: reading.skipped_bytes,
        read_only_bytes: reading.read_only_bytes,
    };
    let (asked, from) = match &req.plan {
        Some(asked) => (asked.clone(), "flags"),
        None => match from_log(&report, req.engine) {
            Some(asked) => (asked, "log"),
            None => return Ok(report),
        },
    };
    // The card: --vram, else the capacity PyTorch printed, else the detected GPU / 24 GiB.
    let vram = asked.vram.or_else(|| card_in_log(&report.findings));
    let resolved = match (resolve(&asked.model), from) {
        (Ok(r), _) => r,
        (Err(e), "flags") => return Err(e.into()),
        // A name the log gives that does not resolve here is left unpriced.
        (Err(_), _) => return Ok(report),
    };
    let spec = resolved.spec;
    let w = asked.workload(&spec);
    let device = card::choose(vram, asked.gpu_index, &mut Vec::new());
    let planner = Planner::new(&spec, device.vram_bytes);
    let predicted = forecast(&planner, &w);
    let numbers = PlanNumbers {
        model: spec.name.clone(),
        weights_bytes: predicted.estimate.weights,
        kv_cache_bytes_per_token: kv_bytes_per_token(&spec, w.kv_dtype),
        peak_bytes: predicted.estimate.total,
        vram_bytes: device.vram_bytes,
        cause: predicted.verdict.cause,
        from,
        prompt_tokens: w.prompt_tokens,
        max_new_tokens: w.max_new_tokens,
        batch: w.batch,
    };
    if report.findings.is_empty() {
        // No out-of-memory in the log: nothing to price.
        return Ok(report);
    }
    merge(&mut report, &numbers, predicted);
    report.plan = Some(numbers);
    Ok(report)
}

/// The card the log's own figures give (PyTorch's total capacity, or its per-process cap).
fn card_in_log(findings: &[Finding]) -> Option<u64> {
    findings.iter().find_map(|f| match &f.event {
        Event::TorchOom(t) => t.allowed.or(t.total),
        Event::VllmStartupFree { total, .. } => *total,
        _ => None,
    })
}

/// Tokens priced for a new sequence when the log states only a context length.
const NEW_TOKENS: u64 = 256;

/// Without --model: the model the log names, when it resolves on this machine without a
/// download (a local path, the Hugging Face cache, a preset), with the workload the log states —
/// batch (`batch=`, `--parallel`, `num_seqs`), and the context (`seq=`, `n_ctx`,
/// `max_model_len`, split over llama.cpp's parallel slots).
fn from_log(report: &ExplainReport, engine: Engine) -> Option<WorkloadRequest> {
    let name = report.model_hint.as_ref()?.name.clone();
    if !resolvable_here(&name) {
        return None;
    }
    let h = &report.workload_hint;
    let batch = h.batch.or(h.parallel).or(h.num_seqs).unwrap_or(1).max(1);
    let (prompt, new) = match (h.seq_len, h.n_ctx.or(h.max_model_len)) {
        (Some(seq), _) => (seq.max(1), 1),
        (None, Some(ctx)) => {
            let per_slot = match (h.n_ctx, h.parallel) {
                (Some(n), Some(p)) if p > 1 => n / p,
                _ => ctx,
            };
            (per_slot.saturating_sub(NEW_TOKENS).max(1), NEW_TOKENS)
        }
        (None, None) => (2048, NEW_TOKENS),
    };
    let engine = report
        .findings
        .first()
        .map_or(engine, |f| crate::verdict::read::engine_of(f, engine));
    Some(WorkloadRequest {
        model: name,
        dtype: None,
        kv_dtype: None,
        prompt_tokens: prompt,
        max_new_tokens: new,
        batch,
        engine,
        vram: None,
        vram_read: None,
        vram_card: None,
        gpu_index: 0,
        gpus: Vec::new(),
        host_ram: None,
        parallel: Default::default(),
        llama: Default::default(),
        llama_server: None,
        exact: false,
        vllm: Default::default(),
        sglang: Default::default(),
        ollama: None,
        python: None,
        deployment: Default::default(),
    })
}

/// A model name from a log is priced only from what is on this machine — never a download.
fn resolvable_here(name: &str) -> bool {
    let path = std::path::Path::new(name);
    path.exists()
        || presets::find(name).is_some()
        || hf_hub::Cache::new(hf_hub_cache_dir())
            .model(name.to_string())
            .get("config.json")
            .is_some()
}

/// The log names the moment, the prediction the decomposition: an undecided log takes the
/// prediction's cause; a decided one keeps its own and gains the priced remedies.
///
/// A plan from the log's own hints (no --model) is said to be one, and decides an undecided log
/// only when the weights alone are larger than the card — the one figure the log's partial
/// workload cannot get wrong.
fn merge(report: &mut ExplainReport, p: &PlanNumbers, predicted: Forecast) {
    let verdict = &mut report.verdict;
    let whence = if p.from == "log" {
        format!(
            " — priced from the model and workload the log names (no --model given): {} prompt + {} new tokens × {}",
            p.prompt_tokens, p.max_new_tokens, p.batch
        )
    } else {
        String::new()
    };
    verdict.evidence.push(Evidence::bytes(
        format!(
            "plan for {}: weights {}, KV cache {} per token, peak {} on a {} card ({}){whence}",
            p.model,
            Bytes(p.weights_bytes),
            Bytes(p.kv_cache_bytes_per_token),
            Bytes(p.peak_bytes),
            Bytes(p.vram_bytes),
            p.cause
        ),
        p.peak_bytes,
    ));
    let decides = p.from != "log" || p.weights_bytes > p.vram_bytes;
    if p.cause == Cause::None && verdict.cause != Cause::None {
        verdict.evidence.push(Evidence::text(
            "the plan predicts this fits, yet the log ran out: the difference is something the plan does not see — another process, fragmentation, or a request larger than the flags say",
        ));
    }
    if verdict.cause == Cause::Unknown && p.cause != Cause::None && decides {
        verdict.cause = p.cause;
        verdict.confidence = 0.6;
        report.confidence_band = crate::verdict::read::confidence_band(0.6);
        verdict.summary = format!(
            "{} (from the plan of your workload; the log alone did not decide)",
            predicted.verdict.summary
        );
        report.to_decide = None;
    }
    if p.cause != Cause::None
        && matches!(
            verdict.cause,
            Cause::Weights | Cause::KvCache | Cause::Activations | Cause::Concurrency
        )
    {
        let mut priced = predicted.remedies;
        let own = std::mem::take(&mut report.remedies);
        let extra: Vec<Remedy> = own
            .into_iter()
            .filter(|r| {
                !priced
                    .iter()
                    .any(|q| std::mem::discriminant(&q.change) == std::mem::discriminant(&r.change))
            })
            .collect();
        priced.extend(extra);
        report.remedies = priced;
    }
}
