//! `llm-oom plan`: does a model fit, with what prompt, new tokens and concurrency — from the config
//! alone, in milliseconds. Everything else (diagnose, explain) reuses this to make remedies concrete.

use serde::Serialize;

use crate::budget::{Budget, Planner, WhatIf};
use crate::diagnosis::remedy::Change;
use crate::diagnosis::{Cause, Contributing, Evidence, Remedy, Stage, Verdict};
use crate::dtype::{KvDtype, WeightDtype};
use crate::error::{InputError, Result};
use crate::estimate::{
    kv_bytes_per_token_at, CachePolicy, Calibration, Engine, Estimate, Phase, Profile, Workload,
};
use crate::meter::gpu::{read_gpu, GpuInfo};
use crate::model::{resolve, ModelSource, ResolvedModel, Spec};
use crate::units::{group, Bytes, GIB};

/// What the user asked, validated by the CLI.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    pub model: String,
    pub dtype: Option<WeightDtype>,
    pub kv_dtype: Option<KvDtype>,
    pub prompt_tokens: u64,
    pub max_new_tokens: u64,
    pub batch: u64,
    pub engine: Engine,
    /// The card to plan for; `None` = the detected GPU's free memory, else an assumed 24 GiB.
    pub vram: Option<u64>,
    pub gpu_index: u32,
}

/// Where the card size came from.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceFacts {
    pub vram_bytes: u64,
    /// `flag` (--vram), `nvml` (free memory of the detected GPU) or `assumed` (no GPU, no flag).
    pub source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelFacts {
    pub name: String,
    pub architecture: String,
    pub source: ModelSource,
    pub parameters: u64,
    pub layers: u64,
    pub hidden_size: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub vocab_size: u64,
    pub max_position_embeddings: Option<u64>,
    pub sliding_window: Option<u64>,
    pub sliding_layers: u64,
    pub experts: Option<u64>,
    pub native_dtype: WeightDtype,
}

#[derive(Debug, Clone, Serialize)]
pub struct EngineFacts {
    pub name: Engine,
    pub calibration: Calibration,
    pub note: String,
}

/// The plan, as one value every renderer reads. Field names are the JSON contract.
#[derive(Debug, Clone, Serialize)]
pub struct PlanReport {
    pub command: &'static str,
    pub version: &'static str,
    pub verdict: Verdict,
    pub remedies: Vec<Remedy>,
    pub model: ModelFacts,
    pub workload: Workload,
    pub device: DeviceFacts,
    pub engine: EngineFacts,
    pub weights_bytes: u64,
    pub kv_cache_bytes_per_token: u64,
    pub kv_cache_bytes: u64,
    pub components: Estimate,
    pub budget: Budget,
    pub quantization: Vec<WhatIf>,
    pub notes: Vec<String>,
}

/// Card sizes a "use a larger GPU" remedy names (GiB): 4090/3090, 5090, A100-40, L40S/A6000,
/// H100/A100-80, H100 NVL, H200, B200.
const CARDS_GIB: [u64; 8] = [24, 32, 40, 48, 80, 94, 141, 192];

pub fn plan(req: &PlanRequest) -> Result<PlanReport> {
    let resolved = resolve(&req.model)?;
    plan_for(req, resolved)
}

/// Plan for an already-resolved model (diagnose and explain call this with their own model).
pub fn plan_for(req: &PlanRequest, resolved: ResolvedModel) -> Result<PlanReport> {
    let ResolvedModel { spec, source } = resolved;
    let mut notes = spec.notes.clone();
    let weight_dtype = req.dtype.unwrap_or(spec.native_dtype);
    let kv_dtype = req
        .kv_dtype
        .unwrap_or_else(|| weight_dtype.compute_kv_dtype());
    let w = Workload {
        prompt_tokens: req.prompt_tokens,
        max_new_tokens: req.max_new_tokens,
        batch: req.batch,
        weight_dtype,
        kv_dtype,
        engine: req.engine,
    };
    if let Some(max) = spec.max_position_embeddings {
        if w.total_tokens() > max {
            // Not a memory question, but transformers only warns and runs on: plan the memory and
            // say that the model was not trained for that context.
            let warning = InputError::ContextTooLong {
                model: spec.name.clone(),
                requested: w.total_tokens(),
                max,
            };
            notes.push(warning.to_string());
        }
    }
    if spec.gguf.is_some() && !matches!(req.engine, Engine::LlamaCpp | Engine::Candle) {
        notes.push(format!(
            "a GGUF file runs in llama.cpp; planning with the {} profile as asked",
            req.engine
        ));
    }
    let device = device_facts(req, &mut notes);
    let vram = device.vram_bytes;
    let planner = Planner::new(&spec, vram);
    let est = planner.estimate(&w);
    let budget = planner.budget(&w);
    let verdict = verdict(&planner, &w, &est);
    let remedies = if verdict.cause == Cause::None {
        Vec::new()
    } else {
        remedies(&planner, &w, &est)
    };
    let profile = Profile::of(req.engine);
    Ok(PlanReport {
        command: "plan",
        version: env!("CARGO_PKG_VERSION"),
        verdict,
        remedies,
        model: facts(&spec, source),
        workload: w,
        device,
        engine: EngineFacts {
            name: req.engine,
            calibration: profile.calibration,
            note: profile.calibration_note(),
        },
        weights_bytes: est.weights,
        kv_cache_bytes_per_token: kv_bytes_per_token_at(
            &spec,
            kv_dtype,
            CachePolicy::of(req.engine),
            0,
        ),
        kv_cache_bytes: est.kv_cache_full,
        components: est,
        quantization: planner.quantization_what_if(&w),
        budget,
        notes,
    })
}

fn device_facts(req: &PlanRequest, notes: &mut Vec<String>) -> DeviceFacts {
    if let Some(v) = req.vram {
        notes.extend(crate::cards::describe(v).map(|d| format!("planned for {d}")));
        return DeviceFacts {
            vram_bytes: v,
            source: "flag",
            gpu: None,
        };
    }
    match read_gpu(req.gpu_index) {
        Ok(gpu) => {
            let others: u64 = gpu.processes.iter().filter_map(|p| p.bytes).sum();
            if others > 0 {
                notes.push(format!(
                    "planning for the {} free on {} (other processes hold {}); pass --vram to plan for the whole card",
                    Bytes(gpu.free_bytes), gpu.name, Bytes(others)
                ));
            }
            DeviceFacts {
                vram_bytes: gpu.free_bytes,
                source: "nvml",
                gpu: Some(gpu),
            }
        }
        Err(why) => {
            notes.push(format!(
                "{why}; planning for a 24 GiB card — pass --vram to choose"
            ));
            DeviceFacts {
                vram_bytes: 24 * GIB,
                source: "assumed",
                gpu: None,
            }
        }
    }
}

pub fn facts(spec: &Spec, source: ModelSource) -> ModelFacts {
    ModelFacts {
        name: spec.name.clone(),
        architecture: spec.architecture.clone(),
        source,
        parameters: spec.parameters(),
        layers: spec.num_layers,
        hidden_size: spec.hidden_size,
        heads: spec.num_heads,
        kv_heads: spec.num_kv_heads,
        head_dim: spec.head_dim,
        vocab_size: spec.vocab_size,
        max_position_embeddings: spec.max_position_embeddings,
        sliding_window: spec.sliding_window,
        sliding_layers: spec.sliding_layers,
        experts: spec.experts.as_ref().map(|e| e.count),
        native_dtype: spec.native_dtype,
    }
}

/// Name the one cause that breaks the budget, from the estimate's decomposition.
pub fn verdict(planner: &Planner, w: &Workload, est: &Estimate) -> Verdict {
    let vram = planner.vram;
    let fixed = est.weights + est.runtime + est.margin;
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
            est.runtime + est.margin + est.allocator,
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
            Bytes(est.weights), w.weight_dtype, Bytes(est.runtime + est.margin), Bytes(vram)
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
            group(w.prompt_tokens * w.batch), Bytes(est.activations), Bytes(est.kv_cache), Bytes(over), Bytes(vram)
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
            if c != cause && bytes * 10 >= est.total {
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
                est.kv_cache + est.activations,
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

/// Every change that lowers the peak, priced by re-running the estimate; those that make it fit
/// first, cheapest first.
pub fn remedies(planner: &Planner, w: &Workload, est: &Estimate) -> Vec<Remedy> {
    let vram = planner.vram;
    let mut out = Vec::new();
    let mut try_change = |change: Change, alt: Workload| {
        let new = planner.estimate(&alt).total;
        if new < est.total {
            out.push(Remedy::new(change, w.engine, est.total, new, vram));
        }
    };
    let fits = |alt: &Workload| planner.fits(alt);
    // A remedy never suggests more context than the model was trained for.
    let context = planner.spec.max_position_embeddings.unwrap_or(u64::MAX);
    let prompt_cap = w
        .prompt_tokens
        .saturating_sub(1)
        .min(context.saturating_sub(w.max_new_tokens));
    let new_cap = w
        .max_new_tokens
        .saturating_sub(1)
        .min(context.saturating_sub(w.prompt_tokens));
    if let Some(p) = crate::budget::largest(1, prompt_cap, |p| {
        fits(&Workload {
            prompt_tokens: p,
            ..*w
        })
    }) {
        try_change(
            Change::TruncatePrompt(p),
            Workload {
                prompt_tokens: p,
                ..*w
            },
        );
    }
    if let Some(n) = crate::budget::largest(1, new_cap, |n| {
        fits(&Workload {
            max_new_tokens: n,
            ..*w
        })
    }) {
        try_change(
            Change::CapNewTokens(n),
            Workload {
                max_new_tokens: n,
                ..*w
            },
        );
    }
    if w.batch > 1 {
        if let Some(b) =
            crate::budget::largest(1, w.batch - 1, |b| fits(&Workload { batch: b, ..*w }))
        {
            try_change(Change::LimitConcurrency(b), Workload { batch: b, ..*w });
        }
    }
    if w.engine == Engine::TransformersEager {
        try_change(
            Change::UseSdpa,
            Workload {
                engine: Engine::Transformers,
                ..*w
            },
        );
    }
    if w.weight_dtype == WeightDtype::F32 {
        try_change(
            Change::HalfPrecision(WeightDtype::Bf16),
            Workload {
                weight_dtype: WeightDtype::Bf16,
                kv_dtype: KvDtype::Bf16,
                ..*w
            },
        );
    }
    match w.engine {
        Engine::Vllm if w.kv_dtype.elem_bytes().as_f64() > 1.0 => try_change(
            Change::QuantizeKv(KvDtype::Fp8),
            Workload {
                kv_dtype: KvDtype::Fp8,
                ..*w
            },
        ),
        Engine::LlamaCpp if w.kv_dtype.elem_bytes().as_f64() > 1.1 => try_change(
            Change::QuantizeKv(KvDtype::Q8_0),
            Workload {
                kv_dtype: KvDtype::Q8_0,
                ..*w
            },
        ),
        _ => {}
    }
    let quants: &[&str] = match w.engine {
        Engine::LlamaCpp => &["q4_k_m"],
        Engine::Candle => &["q8_0", "q4_k_m"],
        _ => &["int8", "nf4"],
    };
    for q in quants {
        if let Ok(d) = q.parse::<WeightDtype>() {
            if crate::estimate::weight_bytes(planner.spec, d) < est.weights {
                let kv_dtype = if w.kv_dtype == w.weight_dtype.compute_kv_dtype() {
                    d.compute_kv_dtype()
                } else {
                    w.kv_dtype
                };
                try_change(
                    Change::QuantizeWeights(d),
                    Workload {
                        weight_dtype: d,
                        kv_dtype,
                        ..*w
                    },
                );
            }
        }
    }
    if w.engine == Engine::Vllm {
        // Spend the 10 % vLLM leaves unused by default, down to 5 %.
        let p = Profile::of(Engine::Vllm);
        let freed = ((0.95 - p.memory_fraction) * vram as f64) as u64;
        let new = est.total.saturating_sub(freed);
        out.push(Remedy::new(
            Change::RaiseUtilization(95),
            w.engine,
            est.total,
            new,
            vram,
        ));
    }
    // The smallest common card this workload fits on.
    if est.total > vram {
        if let Some(gib) = CARDS_GIB.iter().copied().find(|g| {
            let card = g * GIB;
            card > vram && planner.on_card(card).fits(w)
        }) {
            let card = gib * GIB;
            let new = planner.on_card(card).estimate(w).total;
            out.push(Remedy::new(
                Change::LargerGpu(card),
                w.engine,
                est.total,
                new,
                card,
            ));
        }
    }
    // Those that make it fit first; within each group, the order above is cheapest first.
    out.sort_by_key(|r| !r.fits());
    out
}
