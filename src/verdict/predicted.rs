//! The predicted road to a verdict: from an estimate's decomposition of the peak (weights, KV
//! cache, activations, runtime) to the one cause that breaks the card. `plan` ends with it, and
//! `explain` and `diagnose` use it to set the user's workload beside what they read or measured.

use super::{Cause, Contributing, Evidence, Stage, Verdict};
use crate::budget::Planner;
use crate::estimate::{Calibration, Estimate, Phase, Profile, Workload};
use crate::units::{group, Bytes};

/// Name the one cause that breaks the budget, from the estimate's decomposition.
pub fn verdict(planner: &Planner, w: &Workload, est: &Estimate) -> Verdict {
    let vram = planner.vram;
    // Saturating: a component past 64 bits is `u64::MAX` (it never fits) and must not wrap.
    let fixed = est
        .weights
        .saturating_add(est.runtime)
        .saturating_add(est.margin);
    let confidence = match Profile::of(w.engine).calibration {
        Calibration::Measured { .. } => 0.85,
        Calibration::Derived => 0.7,
    };
    let over = est.total.saturating_sub(vram);
    let mut evidence = vec![
        Evidence::bytes(
            format!("weights: {} in {}", Bytes(est.weights), w.weight_dtype),
            est.weights,
        ),
        Evidence::bytes(
            format!(
                "KV cache: {} for {} × {} tokens",
                Bytes(est.kv_cache_full),
                w.batch,
                group(w.total_tokens())
            ),
            est.kv_cache_full,
        ),
        Evidence::bytes(
            format!(
                "activations at the {} peak: {}",
                est.peak_phase.describe(),
                Bytes(est.activations)
            ),
            est.activations,
        ),
        Evidence::bytes(
            format!(
                "runtime {} + margin {} + allocator {}",
                Bytes(est.runtime),
                Bytes(est.margin),
                Bytes(est.allocator)
            ),
            est.runtime
                .saturating_add(est.margin)
                .saturating_add(est.allocator),
        ),
        Evidence::bytes(
            format!("peak {} on a {} card", Bytes(est.total), Bytes(vram)),
            est.total,
        ),
    ];
    let (cause, stage, summary, conf) = if est.total <= vram {
        (
            Cause::None,
            Stage::Unknown,
            format!(
                "peak {} of {} ({} spare)",
                Bytes(est.total),
                Bytes(vram),
                Bytes(vram - est.total)
            ),
            confidence,
        )
    } else if fixed > vram {
        let s = format!(
            "weights: {} of {} weights plus {} of runtime and margin exceed the {} card before any token",
            Bytes(est.weights), w.weight_dtype, Bytes(est.runtime.saturating_add(est.margin)), Bytes(vram)
        );
        (Cause::Weights, Stage::Load, s, 0.95)
    } else if w.batch > 1 && planner.fits(&Workload { batch: 1, ..*w }) {
        let max = planner.max_batch(w).unwrap_or(0);
        evidence.push(Evidence::text(format!(
            "one sequence fits; at most {max} fit at these lengths"
        )));
        let s = format!(
            "concurrency: {} sequences need {}, {} over the {} card; {} fit",
            w.batch,
            Bytes(est.total),
            Bytes(over),
            Bytes(vram),
            max
        );
        (Cause::Concurrency, Stage::Concurrency, s, confidence)
    } else if est.peak_phase == Phase::Prefill && est.activations > est.kv_cache {
        let s = format!(
            "activations: the prefill of {} tokens needs {} of activations next to a {} KV cache, {} over the {} card",
            group(w.prompt_tokens.saturating_mul(w.batch)), Bytes(est.activations), Bytes(est.kv_cache), Bytes(over), Bytes(vram)
        );
        (Cause::Activations, Stage::FirstToken, s, confidence)
    } else {
        let stage = if est.peak_phase == Phase::Prefill {
            Stage::FirstToken
        } else {
            Stage::LongGeneration
        };
        let s = format!(
            "kv_cache: {} tokens per sequence need a {} KV cache, {} over the {} card",
            group(w.total_tokens()),
            Bytes(est.kv_cache_full),
            Bytes(over),
            Bytes(vram)
        );
        (Cause::KvCache, stage, s, confidence)
    };
    let mut contributing = Vec::new();
    if cause != Cause::None {
        let mut add = |c: Cause, bytes: u64, what: &str| {
            if c != cause && bytes.saturating_mul(10) >= est.total {
                contributing.push(Contributing {
                    cause: c,
                    evidence: Evidence::bytes(format!("{what}: {}", Bytes(bytes)), bytes),
                });
            }
        };
        add(Cause::Weights, est.weights, "weights");
        add(Cause::KvCache, est.kv_cache, "KV cache");
        add(Cause::Activations, est.activations, "activations");
        if w.batch > 1 {
            add(
                Cause::Concurrency,
                est.kv_cache.saturating_add(est.activations),
                &format!("{} sequences' KV cache and activations", w.batch),
            );
        }
    }
    Verdict {
        cause,
        stage,
        confidence: conf,
        summary,
        evidence,
        contributing,
    }
}

/// A workload's predicted peak on a card, the verdict it leads to and the remedies priced for it.
#[derive(Debug, Clone)]
pub struct Forecast {
    pub estimate: Estimate,
    pub verdict: Verdict,
    pub remedies: Vec<super::Remedy>,
}

pub fn forecast(planner: &Planner, w: &Workload) -> Forecast {
    let estimate = planner.estimate(w);
    let verdict = verdict(planner, w, &estimate);
    let remedies = if verdict.cause == Cause::None {
        Vec::new()
    } else {
        super::pricing::price(planner, w, &estimate)
    };
    Forecast {
        estimate,
        verdict,
        remedies,
    }
}
