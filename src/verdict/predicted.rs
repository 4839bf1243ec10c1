//! The predicted road to a verdict: from an estimate's decomposition of the peak (weights, KV
//! cache, activations, runtime) to the one cause that breaks the card. `plan` ends with it, and
//! `explain` and `diagnose` use it to set the user's workload beside what they read or measured.

use super::{Cause, Contributing, Evidence, Stage, Verdict};
use crate::budget::Planner;
use crate::estimate::torch_program::{
    OnCard, Phase as TorchPhase, Shape, DECODE_BESIDE_SDPA, TORCH_CONTEXT,
};
use crate::estimate::{Calibration, Estimate, Phase, Profile, Workload};
use crate::units::{group, Bytes};

/// Name the one cause that breaks the budget, from the estimate's decomposition.
pub fn verdict(planner: &Planner, w: &Workload, est: &Estimate) -> Verdict {
    let vram = planner.vram;
    // Saturating: a component past 64 bits is `u64::MAX` (it never fits) and must not wrap.
    let fixed = est
        .weights
        .saturating_add(est.runtime)
        .saturating_add(est.margin)
        .saturating_add(est.adapters)
        .saturating_add(est.draft_weights);
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
    ];
    for (what, bytes) in [
        ("LoRA adapters", est.adapters),
        ("draft model's weights", est.draft_weights),
        ("draft model's KV cache", est.draft_kv_cache),
        ("vision encoder's activations", est.vision_encoder),
    ] {
        if bytes > 0 {
            evidence.push(Evidence::bytes(format!("{what}: {}", Bytes(bytes)), bytes));
        }
    }
    evidence.push(Evidence::bytes(
        format!("peak {} on a {} card", Bytes(est.total), Bytes(vram)),
        est.total,
    ));
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
        let beside = [
            ("LoRA adapters", est.adapters),
            ("the draft model's weights", est.draft_weights),
        ]
        .into_iter()
        .filter(|&(_, b)| b > 0)
        .map(|(what, b)| format!(", {} of {what}", Bytes(b)))
        .collect::<String>();
        let s = format!(
            "weights: {} of {} weights{beside} plus {} of runtime and margin exceed the {} card before any token",
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
        record: None,
        rule: None,
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
    /// The verdict is the allocator model's replay of transformers' allocation sequence.
    pub replayed: bool,
}

/// The forecast of a workload: the profile's, or where the planner answers with the allocator
/// model (`Planner::with_pool`) and it knows the model, the replay's verdict over the profile's
/// decomposition. Past the replayed decode steps the profile must fit the rest too
/// (`Planner::fits`): where it does not, its verdict stands.
pub fn forecast(planner: &Planner, w: &Workload) -> Forecast {
    let estimate = planner.estimate(w);
    let pool = planner
        .pool_shape(w)
        .zip(planner.pool_run(w))
        .filter(|(_, run)| {
            !run.ran()
                || w.max_new_tokens <= crate::budget::POOL_NEW_TOKENS_EXACT
                || estimate.total <= planner.vram
        });
    let verdict = match &pool {
        Some((shape, run)) => pool_verdict(planner, w, &estimate, run, shape),
        None => verdict(planner, w, &estimate),
    };
    let remedies = if verdict.cause == Cause::None {
        Vec::new()
    } else {
        super::pricing::price(planner, w, &estimate)
    };
    Forecast {
        estimate,
        verdict,
        remedies,
        replayed: pool.is_some(),
    }
}

/// The verdict from the allocator model's run of transformers' `generate()` (`Planner::pool_run`):
/// the profile's decomposition stays as evidence; whether it runs, where it fails and the cause
/// are the replay's.
pub fn pool_verdict(
    planner: &Planner,
    w: &Workload,
    est: &Estimate,
    run: &OnCard,
    shape: &Shape,
) -> Verdict {
    let mut v = verdict(planner, w, est);
    let vram = planner.vram;
    let peak = run.peak_on_card(shape);
    v.evidence.push(Evidence::bytes(
        format!(
            "transformers' allocation sequence replayed through PyTorch's caching allocator: {} reserved at the peak of a {} pool (the card's {} less the CUDA context, what kernels take beside the pool and the driver's reserve, as measured on the H200 with driver 580 and torch 2.11)",
            Bytes(run.peak_reserved),
            Bytes(run.limit),
            Bytes(vram)
        ),
        run.peak_reserved,
    ));
    let one_fits = w.batch > 1 && planner.fits(&Workload { batch: 1, ..*w });
    let (cause, stage, summary) = match run.failed {
        None if !run.short_beside => {
            v.contributing.clear();
            (
                Cause::None,
                Stage::Unknown,
                format!(
                    "peak {} of {} ({} spare)",
                    Bytes(peak),
                    Bytes(vram),
                    Bytes(vram.saturating_sub(peak))
                ),
            )
        }
        None => (
            if one_fits { Cause::Concurrency } else { Cause::Activations },
            Stage::LongGeneration,
            format!(
                "{}: SDPA's decode (cuDNN) needs about {} beside the pool and {} leaves {} there on the {} card",
                if one_fits {
                    format!("concurrency: one sequence fits, {} do not", w.batch)
                } else {
                    "activations".to_string()
                },
                Bytes(DECODE_BESIDE_SDPA),
                Bytes(run.peak_reserved),
                Bytes(vram.saturating_sub(TORCH_CONTEXT).saturating_sub(run.peak_reserved)),
                Bytes(vram)
            ),
        ),
        Some(stop) => {
            let at = format!(
                "the allocator cannot get a {} segment for a {} tensor with {} of its {} reserved",
                Bytes(stop.oom.segment),
                Bytes(stop.oom.requested),
                Bytes(stop.oom.reserved),
                Bytes(run.limit)
            );
            match stop.phase {
                TorchPhase::Load => (
                    Cause::Weights,
                    Stage::Load,
                    format!("weights: {} of {} weights do not load: {at}", Bytes(est.weights), w.weight_dtype),
                ),
                _ if one_fits => (
                    Cause::Concurrency,
                    Stage::Concurrency,
                    format!(
                        "concurrency: one sequence fits, {} do not: {at}",
                        w.batch
                    ),
                ),
                TorchPhase::Prefill => (
                    Cause::Activations,
                    Stage::FirstToken,
                    format!(
                        "activations: the prefill of {} tokens runs out: {at}",
                        group(w.prompt_tokens.saturating_mul(w.batch))
                    ),
                ),
                TorchPhase::Decode(step) => (
                    Cause::KvCache,
                    Stage::LongGeneration,
                    format!(
                        "kv_cache: the cache grows past the card at new token {}: {at}",
                        group(step)
                    ),
                ),
            }
        }
    };
    v.cause = cause;
    v.stage = stage;
    v.summary = summary;
    v.confidence = 0.85;
    v
}
