//! Remedy pricing: every change that lowers the predicted peak, priced by running the estimate
//! again with the change applied; and the advice each cause calls for when no estimate can price
//! it (the bytes another process holds, the allocator's cached blocks).

use super::remedy::{Change, Remedy};
use super::Cause;
use crate::budget::Planner;
use crate::dtype::{KvDtype, WeightDtype};
use crate::estimate::deployment::Deployment;
use crate::estimate::{Engine, Estimate, Profile, Workload};
use crate::units::GIB;

/// Card sizes a "use a larger GPU" remedy names (GiB): 4090/3090, 5090, A100-40, L40S/A6000,
/// H100/A100-80, H100 NVL, H200, B200.
const CARDS_GIB: [u64; 8] = [24, 32, 40, 48, 80, 94, 141, 192];

/// Every change that lowers the peak, priced by re-running the estimate; those that make it fit
/// first, cheapest first.
pub fn price(planner: &Planner, w: &Workload, est: &Estimate) -> Vec<Remedy> {
    let mut p = Pricer {
        planner,
        w,
        est,
        out: Vec::new(),
    };
    p.shorter_or_fewer();
    p.deployment();
    p.engine_settings();
    p.quantized_weights();
    p.utilization_and_card();
    // Those that make it fit first; within each group, the order above is cheapest first.
    let mut out = p.out;
    out.sort_by_key(|r| !r.fits());
    out
}

struct Pricer<'a> {
    planner: &'a Planner<'a>,
    w: &'a Workload,
    est: &'a Estimate,
    out: Vec<Remedy>,
}

impl Pricer<'_> {
    /// Keep `change` when the workload it makes peaks lower.
    fn try_change(&mut self, change: Change, alt: Workload) {
        let new = self.planner.estimate(&alt);
        if new.total < self.est.total {
            self.out.push(Remedy::new(
                change,
                self.w.engine,
                self.est.total,
                new.total,
                self.planner.room(&new),
            ));
        }
    }

    /// The largest prompt, output and batch that fit — never more context than the model was
    /// trained for.
    fn shorter_or_fewer(&mut self) {
        let (w, planner) = (*self.w, self.planner);
        let context = planner.spec.max_position_embeddings.unwrap_or(u64::MAX);
        let prompt_cap = w
            .prompt_tokens
            .saturating_sub(1)
            .min(context.saturating_sub(w.max_new_tokens));
        let new_cap = w
            .max_new_tokens
            .saturating_sub(1)
            .min(context.saturating_sub(w.prompt_tokens));
        let with_prompt = |p| Workload {
            prompt_tokens: p,
            ..w
        };
        let with_new = |n| Workload {
            max_new_tokens: n,
            ..w
        };
        if let Some(p) = planner.largest(1, prompt_cap, with_prompt) {
            self.try_change(Change::TruncatePrompt(p), with_prompt(p));
        }
        if let Some(n) = planner.largest(1, new_cap, with_new) {
            self.try_change(Change::CapNewTokens(n), with_new(n));
        }
        if w.batch > 1 {
            if let Some(b) = planner.largest(1, w.batch - 1, |b| Workload { batch: b, ..w }) {
                self.try_change(Change::LimitConcurrency(b), Workload { batch: b, ..w });
            }
        }
    }

    /// The same workload without the draft model, and with the adapters merged into the weights.
    fn deployment(&mut self) {
        let d = self.planner.deployment;
        let without = |deployment| self.planner.clone().with_deployment(deployment);
        let mut alts = Vec::new();
        if d.draft.is_some() {
            alts.push((Change::DropDraft, without(Deployment { draft: None, ..d })));
        }
        if d.lora.is_some() {
            alts.push((
                Change::MergeAdapters,
                without(Deployment { lora: None, ..d }),
            ));
        }
        for (change, planner) in alts {
            let new = planner.estimate(self.w);
            if new.total < self.est.total {
                self.out.push(Remedy::new(
                    change,
                    self.w.engine,
                    self.est.total,
                    new.total,
                    self.planner.room(&new),
                ));
            }
        }
    }

    /// SDPA instead of eager attention, half precision instead of f32, a quantized KV cache.
    fn engine_settings(&mut self) {
        let w = *self.w;
        if w.engine == Engine::TransformersEager {
            self.try_change(
                Change::UseSdpa,
                Workload {
                    engine: Engine::Transformers,
                    ..w
                },
            );
        }
        if w.weight_dtype == WeightDtype::F32 {
            self.try_change(
                Change::HalfPrecision(WeightDtype::Bf16),
                Workload {
                    weight_dtype: WeightDtype::Bf16,
                    kv_dtype: KvDtype::Bf16,
                    ..w
                },
            );
        }
        let kv = match w.engine {
            Engine::Vllm if w.kv_dtype.elem_bytes().as_f64() > 1.0 => Some(KvDtype::Fp8),
            Engine::LlamaCpp if w.kv_dtype.elem_bytes().as_f64() > 1.1 => Some(KvDtype::Q8_0),
            _ => None,
        };
        if let Some(kv_dtype) = kv {
            self.try_change(Change::QuantizeKv(kv_dtype), Workload { kv_dtype, ..w });
        }
    }

    /// The weight quantizations the engine runs, when they are smaller than what is loaded.
    fn quantized_weights(&mut self) {
        let w = *self.w;
        let quants: &[&str] = match w.engine {
            Engine::LlamaCpp => &["q4_k_m"],
            Engine::Candle => &["q8_0", "q4_k_m"],
            _ => &["int8", "nf4"],
        };
        for d in quants.iter().filter_map(|q| q.parse::<WeightDtype>().ok()) {
            if crate::estimate::weight_bytes(self.planner.spec, d) >= self.est.weights {
                continue;
            }
            let kv_dtype = if w.kv_dtype == w.weight_dtype.compute_kv_dtype() {
                d.compute_kv_dtype()
            } else {
                w.kv_dtype
            };
            self.try_change(
                Change::QuantizeWeights(d),
                Workload {
                    weight_dtype: d,
                    kv_dtype,
                    ..w
                },
            );
        }
    }

    /// vLLM's unused share of the card, and the smallest common card the workload fits on.
    fn utilization_and_card(&mut self) {
        let (w, est, vram) = (self.w, self.est, self.planner.vram);
        if w.engine == Engine::Vllm {
            // Spend the 10 % vLLM leaves unused by default, down to 5 %.
            let p = Profile::of(Engine::Vllm);
            let freed = ((0.95 - p.memory_fraction) * vram as f64) as u64;
            let new = est.total.saturating_sub(freed);
            self.out.push(Remedy::new(
                Change::RaiseUtilization(95),
                w.engine,
                est.total,
                new,
                vram,
            ));
        }
        if est.total <= self.planner.room(est) {
            return;
        }
        let planner = self.planner;
        if let Some(gib) = CARDS_GIB.iter().copied().find(|g| {
            let card = g * GIB;
            card > vram && planner.on_card(card).fits(w)
        }) {
            let card = gib * GIB;
            let new = planner.on_card(card).estimate(w).total;
            self.out.push(Remedy::new(
                Change::LargerGpu(card),
                w.engine,
                est.total,
                new,
                card,
            ));
        }
    }
}

/// Advice that comes before the priced remedies: what no estimate of the workload sees (the
/// memory other processes hold, the allocator's cached blocks).
pub fn advice_first(cause: Cause, engine: Engine, others_hold: Option<u64>) -> Vec<Remedy> {
    match cause {
        Cause::OtherProcess => vec![Remedy::advice(
            Change::FreeOtherProcesses,
            engine,
            others_hold,
        )],
        Cause::Fragmentation => vec![Remedy::advice(Change::AllocatorSettings, engine, None)],
        Cause::HostMemory => vec![Remedy::advice(Change::MoreHostMemory, engine, None)],
        _ => Vec::new(),
    }
}

/// Advice after the priced remedies: what a cause names but the estimate cannot price.
pub fn advice_last(cause: Cause, engine: Engine) -> Vec<Remedy> {
    match cause {
        Cause::Activations => vec![Remedy::advice(Change::ChunkedPrefill(0), engine, None)],
        Cause::Weights => vec![Remedy::advice(Change::CpuOffload, engine, None)],
        Cause::KvCache if engine != Engine::Vllm && engine != Engine::LlamaCpp => {
            vec![Remedy::advice(
                Change::QuantizeKv(KvDtype::Q4_0),
                engine,
                None,
            )]
        }
        _ => Vec::new(),
    }
}
