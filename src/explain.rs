//! `llm-oom explain`: what a pasted OOM log means — the same verdict and remedies `diagnose` gives,
//! without a GPU. With the user's model and workload, the remedies carry `plan`'s exact bytes.

use serde::Serialize;

use crate::diagnosis::{Cause, Evidence, Remedy, Stage, Verdict};
use crate::error::{InputError, Result};
use crate::estimate::Engine;
use crate::logparse::{classify, clean_lines, scan, Event, Finding};
use crate::plan::{plan, PlanRequest};
use crate::units::Bytes;

/// The optional facts the user adds to a log.
#[derive(Debug, Clone)]
pub struct ExplainRequest {
    /// The model and workload; `None` when only the log is known.
    pub plan: Option<PlanRequest>,
    pub engine: Engine,
}

/// `plan`'s numbers for the user's workload, when a model was given.
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

pub fn explain(raw: &[u8], req: &ExplainRequest) -> Result<ExplainReport> {
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

    // The card: --vram, else the capacity PyTorch printed, else what plan decides (NVML / 24 GiB).
    let mut plan_req = req.plan.clone();
    if let Some(p) = plan_req.as_mut() {
        if p.vram.is_none() {
            p.vram = findings.iter().find_map(|f| match &f.event {
                Event::TorchOom(t) => t.total,
                _ => None,
            });
        }
    }
    let planned = match &plan_req {
        Some(p) => Some(plan(p)?),
        None => None,
    };

    let Some(first) = findings.first() else {
        let verdict = Verdict {
            cause: Cause::None,
            stage: Stage::Unknown,
            confidence: 0.8,
            summary: format!("no out-of-memory error in {} lines", lines.len()),
            evidence: Vec::new(),
            contributing: Vec::new(),
        };
        return Ok(ExplainReport {
            command: "explain",
            version: env!("CARGO_PKG_VERSION"),
            verdict,
            remedies: Vec::new(),
            findings,
            to_decide: None,
            plan: None,
            lines: lines.len(),
        });
    };
    let reading = classify(first, &findings, &ctx, req.engine);
    let mut verdict = reading.verdict;
    let mut remedies = reading.remedies;
    let mut to_decide = reading.to_decide;

    let plan_numbers = match planned {
        None => None,
        Some(p) => {
            verdict.evidence.push(Evidence::bytes(
                format!(
                    "plan for {}: weights {}, KV cache {} per token, peak {} on a {} card ({})",
                    p.model.name,
                    Bytes(p.weights_bytes),
                    Bytes(p.kv_cache_bytes_per_token),
                    Bytes(p.components.total),
                    Bytes(p.device.vram_bytes),
                    p.verdict.cause
                ),
                p.components.total,
            ));
            if p.verdict.cause == Cause::None && verdict.cause != Cause::None {
                verdict.evidence.push(Evidence::text(
                "the plan predicts this fits, yet the log ran out: the difference is something the plan does not see — another process, fragmentation, or a request larger than the flags say",
            ));
            }
            // The log names the moment, the plan the decomposition: an undecided log takes the plan's
            // cause; a decided one keeps its own and gains the plan's priced remedies.
            if verdict.cause == Cause::Unknown && p.verdict.cause != Cause::None {
                verdict.cause = p.verdict.cause;
                verdict.confidence = 0.6;
                verdict.summary = format!(
                    "{} (from the plan of your workload; the log alone did not decide)",
                    p.verdict.summary
                );
                to_decide = None;
            }
            if p.verdict.cause != Cause::None
                && matches!(
                    verdict.cause,
                    Cause::Weights | Cause::KvCache | Cause::Activations | Cause::Concurrency
                )
            {
                let mut priced = p.remedies.clone();
                priced.extend(remedies.into_iter().filter(|r| {
                    !p.remedies.iter().any(|q| {
                        std::mem::discriminant(&q.change) == std::mem::discriminant(&r.change)
                    })
                }));
                remedies = priced;
            }
            Some(PlanNumbers {
                model: p.model.name.clone(),
                weights_bytes: p.weights_bytes,
                kv_cache_bytes_per_token: p.kv_cache_bytes_per_token,
                peak_bytes: p.components.total,
                vram_bytes: p.device.vram_bytes,
                cause: p.verdict.cause,
            })
        }
    };
    Ok(ExplainReport {
        command: "explain",
        version: env!("CARGO_PKG_VERSION"),
        verdict,
        remedies,
        findings,
        to_decide,
        plan: plan_numbers,
        lines: lines.len(),
    })
}
