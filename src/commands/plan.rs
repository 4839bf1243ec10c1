//! `llm-oom plan`: does a model fit, with what prompt, new tokens and concurrency — from the config
//! alone, in milliseconds.

use serde::Serialize;

use crate::budget::card::{self, DeviceFacts};
use crate::budget::{Budget, Planner, WhatIf};
use crate::error::Result;
use crate::estimate::{
    kv_bytes_per_token_at, CachePolicy, Calibration, Engine, Estimate, Profile, Workload,
};
use crate::model::{facts, resolve, ModelFacts, ResolvedModel};
use crate::request::{past_context, WorkloadRequest};
use crate::verdict::predicted::forecast;
use crate::verdict::{Remedy, Verdict};

/// What `plan` takes: a model, a workload and a card.
pub type PlanRequest = WorkloadRequest;

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

pub fn plan(req: &PlanRequest) -> Result<PlanReport> {
    req.check()?;
    let ResolvedModel { spec, source } = resolve(&req.model)?;
    let mut notes = spec.notes.clone();
    let w = req.workload(&spec);
    notes.extend(past_context(&spec, &w));
    if spec.gguf.is_some() && !matches!(req.engine, Engine::LlamaCpp | Engine::Candle) {
        notes.push(format!(
            "a GGUF file runs in llama.cpp; planning with the {} profile as asked",
            req.engine
        ));
    }
    let device = card::choose(req.vram, req.gpu_index, &mut notes);
    let planner = Planner::new(&spec, device.vram_bytes);
    let f = forecast(&planner, &w);
    let profile = Profile::of(req.engine);
    Ok(PlanReport {
        command: "plan",
        version: env!("CARGO_PKG_VERSION"),
        verdict: f.verdict,
        remedies: f.remedies,
        model: facts(&spec, source),
        workload: w,
        device,
        engine: EngineFacts {
            name: req.engine,
            calibration: profile.calibration,
            note: profile.calibration_note(),
        },
        weights_bytes: f.estimate.weights,
        kv_cache_bytes_per_token: kv_bytes_per_token_at(
            &spec,
            w.kv_dtype,
            CachePolicy::of(req.engine),
            0,
        ),
        kv_cache_bytes: f.estimate.kv_cache_full,
        budget: planner.budget(&w),
        quantization: planner.quantization_what_if(&w),
        components: f.estimate,
        notes,
    })
}
