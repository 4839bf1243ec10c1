//! Which probe answers for the user's engine, and how its measurements become the budget.
//!
//! - `--engine candle`: llm-oom's own runtime is the user's engine; the candle probe answers.
//! - `--engine transformers` / `transformers-eager`: the user's own transformers, in a Python
//!   child of the same protocol, when `python3` (or `--python`) imports torch and transformers.
//! - otherwise (vLLM, llama.cpp, a GGUF file, transformers not installed): the engine's calibrated
//!   profile evaluated on this card, labelled `predicted`, with what to install to measure.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::budget::{Credit, Planner};
use crate::error::{Error, Result};
use crate::estimate::{Engine, Workload};
use crate::model::{presets, ModelSource, SourceKind};
use crate::probe::protocol::Outcome;
use crate::verdict::measured::StageRecord;
use crate::verdict::Stage;

/// Who produced the answer, as the report says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The stages ran in the user's engine (transformers, or candle for `--engine candle`).
    Measured,
    /// The engine's profile on this card: nothing ran in the user's engine.
    Predicted,
}

pub enum ProbeKind {
    Candle,
    Transformers,
    Predicted(String),
}

pub fn choose(engine: Engine, source: &ModelSource) -> ProbeKind {
    match engine {
        Engine::Candle => ProbeKind::Candle,
        Engine::Transformers | Engine::TransformersEager => match source.kind {
            SourceKind::Gguf => ProbeKind::Predicted(
                "a GGUF file is not a transformers checkpoint; pass its Hugging Face folder to measure transformers, or --engine llama.cpp".into(),
            ),
            _ => ProbeKind::Transformers,
        },
        other => ProbeKind::Predicted(format!(
            "llm-oom does not run {other} itself; the {other} profile is evaluated on this card"
        )),
    }
}

/// The folder the transformers child loads: the checkpoint's own (its weights are read with
/// `from_pretrained`), or a private folder with the config alone (random weights of the real
/// shapes, drawn on the device), which is removed when dropped.
pub struct ModelDir {
    pub path: PathBuf,
    pub random_weights: bool,
    scratch: Option<PathBuf>,
}

impl Drop for ModelDir {
    fn drop(&mut self) {
        if let Some(dir) = &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

pub fn model_dir(model: &str, source: &ModelSource, random: bool) -> Result<ModelDir> {
    let config_dir = source
        .path
        .as_deref()
        .and_then(Path::parent)
        .map(Path::to_path_buf);
    let named_config = source
        .path
        .as_deref()
        .and_then(Path::file_name)
        .is_some_and(|n| n == "config.json");
    if let (Some(dir), SourceKind::Directory | SourceKind::ConfigFile | SourceKind::HfCache, true) =
        (&config_dir, source.kind, named_config)
    {
        let has_weights = crate::runtime::weights::checkpoint_files(dir)
            .map(|f| !f.is_empty())
            .unwrap_or(false);
        return Ok(ModelDir {
            path: dir.clone(),
            random_weights: random || !has_weights,
            scratch: None,
        });
    }
    // A preset or a config.json fetched from the hub: the config alone, in a folder of ours.
    let json = match (source.kind, source.path.as_deref()) {
        (SourceKind::Preset, _) => presets::find(model).map(|(_, j)| j.to_string()),
        (_, Some(p)) => std::fs::read_to_string(p).ok(),
        _ => None,
    }
    .ok_or_else(|| Error::Internal(format!("no config.json to give transformers for {model}")))?;
    let dir = crate::scratch::private_dir("llm-oom-model-")
        .map_err(|e| Error::Internal(format!("no folder for the model's config.json: {e}")))?;
    let config = dir.join("config.json");
    std::fs::write(&config, json)
        .map_err(|e| Error::Internal(format!("cannot write {}: {e}", config.display())))?;
    Ok(ModelDir {
        path: dir.clone(),
        random_weights: true,
        scratch: Some(dir),
    })
}

/// The card the engine's profile must be priced on so that it agrees with what the engine did:
/// every stage that ran lowers it by what the profile under-predicted, and every stage that ran
/// out of memory caps it below the profile's peak for that workload — so the budget never claims a
/// size that ran out. What the profile over-predicted (at the stage it over-predicted least) is a
/// `Credit` beside the card, not a larger card: it holds up to the largest workload that ran and
/// shrinks past it.
pub fn corrected_card(profile: &Planner, w: &Workload, stages: &[StageRecord]) -> Corrected {
    let capacity = profile.vram as i128;
    let mut worst: Option<i128> = None;
    let mut cap = i128::MAX;
    // A workload a fresh process ran whole is inside the budget, whatever the other stages say.
    let mut floor = 0i128;
    let mut edge: Option<i128> = None;
    // The largest workload that ran: how far an over-prediction is credited in full.
    let mut reach = 0u64;
    for s in stages.iter().filter(|s| {
        matches!(
            s.name,
            Stage::FirstToken | Stage::LongGeneration | Stage::Concurrency
        )
    }) {
        let (Some(p), Some(n), Some(b)) = (s.prompt_tokens, s.new_tokens, s.batch) else {
            continue;
        };
        let at = Workload {
            prompt_tokens: p,
            max_new_tokens: n,
            batch: b,
            ..*w
        };
        let estimate = profile.estimate(&at);
        let predicted = estimate.total as i128;
        match s.outcome {
            Outcome::Ok => {
                reach = reach.max(estimate.workload_bytes());
                let under = s.memory.peak as i128 - predicted;
                worst = Some(worst.map_or(under, |x: i128| x.max(under)));
                if s.fresh_process {
                    floor = floor.max(predicted);
                    // Run whole at the edge of the card: this workload is the edge. The profile's
                    // slope is not trusted beyond it (on the H200 it claimed 1.5–9 % more prompt
                    // than ran out).
                    let spare = profile.vram.saturating_sub(s.memory.peak);
                    if spare < super::decisive::edge_band(profile.vram) {
                        edge = Some(edge.map_or(predicted, |x: i128| x.min(predicted)));
                    }
                }
            }
            // It needed at least what it held plus what it asked for when it failed: the profile's
            // figure for it, less that shortfall, is over the card.
            Outcome::Oom => {
                let short = s.oom.as_ref().map_or(0, |o| {
                    (o.held.saturating_add(o.requested.unwrap_or(0)) as i128 - capacity).max(0)
                });
                cap = cap.min(predicted - short - 1);
            }
            _ => {}
        }
    }
    let bytes = |card: i128| card.min(cap).clamp(0, u64::MAX as i128) as u64;
    if let Some(edge) = edge {
        return Corrected {
            card: bytes(edge),
            credit: None,
        };
    }
    let worst = worst.unwrap_or(0);
    let card = bytes((capacity - worst.max(0)).max(floor));
    // With the over-prediction: the card every workload up to the reach may use.
    let credited = bytes((capacity - worst).max(floor));
    let credit = (credited > card).then_some(Credit {
        bytes: credited - card,
        reach,
    });
    Corrected { card, credit }
}

/// `corrected_card`'s answer: the card, and what the profile over-predicted beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrected {
    pub card: u64,
    pub credit: Option<Credit>,
}

impl Corrected {
    /// The profile priced on this card with this credit.
    pub fn planner<'a>(&self, spec: &'a crate::model::Spec) -> Planner<'a> {
        Planner::new(spec, self.card).with_credit(self.credit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::{KvDtype, WeightDtype};
    use crate::meter::host::Part;
    use crate::model::{presets, Spec};
    use crate::probe::protocol::OomFacts;

    const GIB: u64 = 1 << 30;

    fn mistral() -> Spec {
        let (id, json) = presets::find("mistralai/Mistral-7B-Instruct-v0.2").expect("preset");
        presets::load(id, json).expect("loads")
    }

    fn work(p: u64) -> Workload {
        Workload {
            llama: Default::default(),
            prompt_tokens: p,
            max_new_tokens: 256,
            batch: 1,
            weight_dtype: WeightDtype::Bf16,
            kv_dtype: KvDtype::Bf16,
            engine: Engine::Transformers,
        }
    }

    fn ran(p: u64, peak: u64, fresh: bool) -> StageRecord {
        let mut s = StageRecord::skipped(Stage::LongGeneration, "").sized(p, 256, 1);
        s.outcome = Outcome::Ok;
        s.memory.peak = peak;
        s.fresh_process = fresh;
        s
    }

    #[test]
    fn a_workload_run_whole_at_the_edge_is_the_edge_of_the_budget() {
        let spec = mistral();
        let profile = Planner::new(&spec, 16 * GIB);
        let w = work(5815);
        // The fresh run left 100 MiB spare: inside the band; the profile over-predicts it.
        let s = ran(5815, 16 * GIB - (100 << 20), true);
        let card = corrected_card(&profile, &w, &[s]).card;
        assert_eq!(card, profile.estimate(&w).total);
        let budget = Planner::new(&spec, card).budget(&w).max_prompt_tokens;
        // The run itself, less the budget's own rounding: never more.
        assert!(
            budget.is_some_and(|p| (5815 * 99 / 100..=5815).contains(&p)),
            "{budget:?}"
        );
    }

    #[test]
    fn an_out_of_memory_caps_the_card_by_its_shortfall() {
        let spec = mistral();
        let profile = Planner::new(&spec, 16 * GIB);
        let w = work(5887);
        let mut s = ran(5887, 0, true);
        s.outcome = Outcome::Oom;
        s.oom = Some(OomFacts {
            requested: Some(300 << 20),
            held: 16 * GIB - (100 << 20),
            part: Part::Activations,
            message: "CUDA out of memory".into(),
            free: None,
            largest_block: None,
            cached: None,
            emulated: false,
        });
        let card = corrected_card(&profile, &w, &[s]).card;
        assert_eq!(
            card as i128,
            profile.estimate(&w).total as i128 - (200 << 20) - 1
        );
    }

    #[test]
    fn far_from_the_edge_the_worst_under_prediction_corrects_the_card() {
        let spec = mistral();
        let profile = Planner::new(&spec, 48 * GIB);
        let w = work(2048);
        let predicted = profile.estimate(&w).total;
        let s = ran(2048, predicted + GIB, false);
        assert_eq!(
            corrected_card(&profile, &w, &[s]),
            Corrected {
                card: 47 * GIB,
                credit: None
            }
        );
    }

    /// The H100's records (docs/calibration/find-limits-h100-2026-12-07.jsonl): the default
    /// workload's long generation peaked at 14.8 GiB, some 400 MB under the profile; batch 16 at
    /// 2,048 + 256 tokens ran and 17 ran out. Credited as a larger card, that over-prediction let
    /// the budget claim 17; credited only up to the workload that ran, it claims 16.
    #[test]
    fn an_over_prediction_is_credited_in_full_only_up_to_the_workload_that_ran() {
        let spec = mistral();
        let card = 24 * GIB;
        let profile = Planner::new(&spec, card);
        let w = work(2048);
        let predicted = profile.estimate(&w);
        let s = ran(2048, predicted.total - 410_000_000, false);
        let corrected = corrected_card(&profile, &w, &[s]);
        assert_eq!(corrected.card, card);
        let credit = corrected.credit.expect("an over-prediction is a credit");
        assert_eq!(credit.bytes, 410_000_000);
        assert_eq!(credit.reach, predicted.workload_bytes());
        let planner = corrected.planner(&spec);
        // Within the reach, the whole credit: the workload that ran fits with 410 MB to spare.
        assert_eq!(planner.room(&predicted), card + 410_000_000);
        assert_eq!(planner.max_batch(&w), Some(16));
        // The old reading, the credit as a larger card, claimed the batch that ran out.
        let larger = Planner::new(&spec, card + 410_000_000);
        assert_eq!(larger.max_batch(&w), Some(17));
        // The prompt stays within what ran (33,996 tokens at batch 1) and the model's context.
        let prompt = planner
            .budget(&w)
            .max_prompt_tokens
            .expect("a prompt budget");
        assert!((32_000..=32_768).contains(&prompt), "{prompt}");
    }

    #[test]
    fn a_credit_shrinks_in_proportion_past_its_reach() {
        let credit = Credit {
            bytes: 400,
            reach: 1_000,
        };
        assert_eq!(credit.at(10), 400);
        assert_eq!(credit.at(1_000), 400);
        assert_eq!(credit.at(2_000), 200);
        assert_eq!(credit.at(u64::MAX), 0);
    }
}
