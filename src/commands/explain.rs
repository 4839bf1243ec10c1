//! `llm-oom explain`: what a pasted OOM log means — the same verdict and remedies `diagnose` gives,
//! without a GPU. With the user's model and workload, the remedies carry the predicted bytes.

use serde::Serialize;

use crate::budget::card;
use crate::budget::Planner;
use crate::error::Result;
use crate::estimate::{kv_bytes_per_token, Engine};
use crate::logparse::parse::{ModelHint, WorkloadHint};
use crate::logparse::{Event, Finding};
use crate::model::resolve;
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
    /// How often verdicts at this confidence were right on the tune corpus.
    pub confidence_band: ConfidenceBand,
    /// The workload figures the log states (`batch=`, `max_model_len`, `n_ctx`, …).
    pub workload_hint: WorkloadHint,
    /// The model the log names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_hint: Option<ModelHint>,
    /// Bytes left out of the middle of an over-long input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_bytes: Option<u64>,
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
    };
    let Some(asked) = &req.plan else {
        return Ok(report);
    };
    // The card: --vram, else the capacity PyTorch printed, else the detected GPU / 24 GiB.
    let vram = asked.vram.or_else(|| {
        report.findings.iter().find_map(|f| match &f.event {
            Event::TorchOom(t) => t.total,
            _ => None,
        })
    });
    let resolved = resolve(&asked.model)?;
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
    };
    if report.findings.is_empty() {
        // No out-of-memory in the log: nothing to price.
        return Ok(report);
    }
    merge(&mut report, &numbers, predicted);
    report.plan = Some(numbers);
    Ok(report)
}

/// The log names the moment, the prediction the decomposition: an undecided log takes the
/// prediction's cause; a decided one keeps its own and gains the priced remedies.
fn merge(report: &mut ExplainReport, p: &PlanNumbers, predicted: Forecast) {
    let verdict = &mut report.verdict;
    verdict.evidence.push(Evidence::bytes(
        format!(
            "plan for {}: weights {}, KV cache {} per token, peak {} on a {} card ({})",
            p.model,
            Bytes(p.weights_bytes),
            Bytes(p.kv_cache_bytes_per_token),
            Bytes(p.peak_bytes),
            Bytes(p.vram_bytes),
            p.cause
        ),
        p.peak_bytes,
    ));
    if p.cause == Cause::None && verdict.cause != Cause::None {
        verdict.evidence.push(Evidence::text(
            "the plan predicts this fits, yet the log ran out: the difference is something the plan does not see — another process, fragmentation, or a request larger than the flags say",
        ));
    }
    if verdict.cause == Cause::Unknown && p.cause != Cause::None {
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
