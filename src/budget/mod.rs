//! The budget: does a workload fit a card, and what is the largest prompt, batch and per-request
//! token total that does. Every answer is a search over the estimate, so it is exactly as safe as
//! the estimate (which carries the safety margin).

pub mod card;
pub mod long_lived;
pub mod pool;
pub mod unified;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::dtype::WeightDtype;
use crate::estimate::torch_program::{lengths, on_card, Generation, Lengths, OnCard, Shape};
use crate::estimate::{Engine, Estimate, MeasuredModel, Workload};
use crate::model::Spec;

/// One `generate()` of the workload.
pub fn generation(w: &Workload) -> Generation {
    Generation {
        batch: w.batch,
        prompt: w.prompt_tokens,
        new_tokens: w.max_new_tokens,
    }
}

/// Rows of the safe token budget table.
pub const CONCURRENCY_ROWS: [u64; 6] = [1, 2, 4, 8, 16, 32];
/// No search goes past this many tokens per sequence, whatever the model claims.
const TOKEN_CEILING: u64 = 10_000_000;
const BATCH_CEILING: u64 = 65_536;

#[derive(Debug, Clone, Serialize)]
pub struct Budget {
    pub vram_bytes: u64,
    pub fits: bool,
    pub peak_bytes: u64,
    /// Largest prompt that fits at this batch and max_new_tokens (`None`: not even one token).
    pub max_prompt_tokens: Option<u64>,
    /// Largest max_new_tokens that fits with this prompt and batch.
    pub max_new_tokens: Option<u64>,
    /// Largest batch (concurrent sequences) that fits at these lengths.
    pub max_batch: Option<u64>,
    /// The model's own context limit (`max_position_embeddings`), which caps every row.
    pub context_limit: Option<u64>,
    pub table: Vec<BudgetRow>,
}

/// One row of the safe token budget: at this concurrency, each request may use this many tokens.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetRow {
    pub concurrency: u64,
    /// Largest prompt + new tokens per request (0: nothing fits at this concurrency).
    pub max_total_tokens: u64,
    /// The total split at the user's prompt : new-token ratio.
    pub prompt_tokens: u64,
    pub new_tokens: u64,
    pub limited_by: Limit,
}

impl BudgetRow {
    /// The row of `c` requests of `t` tokens each, split at the workload's prompt : new ratio.
    pub fn at(c: u64, t: u64, limited_by: Limit, w: &Workload) -> BudgetRow {
        let (p, n) = if t == 0 { (0, 0) } else { split_at_ratio(w, t) };
        BudgetRow {
            concurrency: c,
            max_total_tokens: t,
            prompt_tokens: p,
            new_tokens: n,
            limited_by,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    Memory,
    Context,
    /// The longest request the serving engine was started for (`--max-model-len`,
    /// `--context-length`), below the model's context.
    MaxRequest,
    Nothing,
}

/// Largest `n` in `lo..=hi` with `ok(n)`, given `ok` is monotone (true then false). `None` if `ok(lo)` fails.
pub fn largest(lo: u64, hi: u64, ok: impl Fn(u64) -> bool) -> Option<u64> {
    if hi < lo || !ok(lo) {
        return None;
    }
    if ok(hi) {
        return Some(hi);
    }
    Some(bisect(lo, hi, u64::MAX, ok))
}

/// `largest`, starting where `guess` says the answer is and stopping once it is known to within
/// `1 / resolution` of itself (at least to one): from the guess it steps out (1/64 of it,
/// doubling) until it has a fitting `n` and a failing one, then bisects between them. The `n`
/// returned fits, and one at most that far beyond it did not. A guess within a few per cent
/// asks a handful of questions where a bisection of the whole range asks fifteen or more.
pub fn largest_near(
    lo: u64,
    hi: u64,
    guess: u64,
    resolution: u64,
    ok: impl Fn(u64) -> bool,
) -> Option<u64> {
    if hi < lo || !ok(lo) {
        return None;
    }
    let g = guess.clamp(lo, hi);
    let first_step = (g / 64).max(1);
    let (good, bad) = if g == lo || ok(g) {
        let (mut good, mut step) = (g, first_step);
        loop {
            if good == hi {
                return Some(hi);
            }
            let next = good.saturating_add(step).min(hi);
            if !ok(next) {
                break (good, next);
            }
            good = next;
            step = step.saturating_mul(2);
        }
    } else {
        let (mut bad, mut step) = (g, first_step);
        loop {
            let next = bad.saturating_sub(step).max(lo);
            if next == lo || ok(next) {
                break (next, bad);
            }
            bad = next;
            step = step.saturating_mul(2);
        }
    };
    Some(bisect(good, bad, resolution, ok))
}

/// The last fitting `n` of a bisection between `good` (fits) and `bad` (does not), to within
/// `1 / resolution` of it.
fn bisect(mut good: u64, mut bad: u64, resolution: u64, ok: impl Fn(u64) -> bool) -> u64 {
    while bad.saturating_sub(good) > (good / resolution.max(1)).max(1) {
        let mid = good + (bad - good) / 2;
        if ok(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    good
}

/// Allocator-model runs already made, by the sequence, the batch, the prompt and the card: each
/// answers every generation of as many new tokens as it made, or more where it failed.
type Runs = Arc<Mutex<HashMap<(Shape, u64, u64, u64), Lengths>>>;

#[derive(Clone)]
pub struct Planner<'a> {
    pub spec: &'a Spec,
    pub vram: u64,
    /// Peaks from the probe's measurements instead of the engine profile.
    pub measured: Option<&'a MeasuredModel>,
    /// Answer transformers' workloads by replaying its allocation sequence through PyTorch's
    /// allocator (`estimate::torch_program`) where that sequence is known: `vram` is then the
    /// memory free for transformers' process.
    pub pool: bool,
    /// The allocator model's runs so far, shared by this planner's copies (`on_card`, threads):
    /// a run is deterministic, so a repeated question is answered from here.
    runs: Runs,
    /// What sits beside the model on the card: LoRA adapters, a draft model.
    pub deployment: crate::estimate::deployment::Deployment<'a>,
    /// The images in each prompt (`plan --images`): their encoder's activations.
    pub images: Option<crate::model::images::ImageLoad>,
    /// What a measured run showed the profile over-predicts, beside `vram` (`Credit`).
    pub credit: Option<Credit>,
}

/// The profile over-predicted what the engine measured by `bytes`, at workloads whose own bytes
/// (`Estimate::workload_bytes`) reached `reach`. Up to that reach a workload may use those bytes
/// beside the card; past it they shrink in proportion, as the profile's error is not a constant:
/// on the H100, Mistral-7B at 2,048 + 256 tokens peaked ~410 MB under the profile, but batch 16
/// only 154 MB under it and a 33,996-token prompt 188 MB under it, and batch 17 ran out where the
/// whole 410 MB credited to it said it fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credit {
    pub bytes: u64,
    pub reach: u64,
}

impl Credit {
    /// The credit for a workload of `workload_bytes`.
    pub fn at(&self, workload_bytes: u64) -> u64 {
        if workload_bytes <= self.reach {
            return self.bytes;
        }
        (self.bytes as u128 * self.reach as u128 / workload_bytes as u128) as u64
    }
}

/// The allocator model's searches stop within this fraction of their answer (1/512: 55 tokens of
/// 28,000). Each step is a replay of up to 1,024 decode steps, and near the card's limit the
/// replay's answer is not monotone in the count anyway (docs/plan.md): the last steps of a
/// search to the token cost the most replays and tell the least.
pub const POOL_SEARCH_RESOLUTION: u64 = 512;

/// Past this many new tokens a replay is long (~3,000 events per token of a 7B): the allocator
/// model runs this many decode steps and the profile must fit the rest as well.
pub const POOL_NEW_TOKENS_EXACT: u64 = 1024;

impl<'a> Planner<'a> {
    /// A planner from the engine profiles.
    pub fn new(spec: &'a Spec, vram: u64) -> Planner<'a> {
        Planner {
            spec,
            vram,
            measured: None,
            pool: false,
            deployment: Default::default(),
            images: None,
            runs: Runs::default(),
            credit: None,
        }
    }

    /// The same planner with a measured over-prediction credited (`Credit`).
    pub fn with_credit(self, credit: Option<Credit>) -> Planner<'a> {
        Planner { credit, ..self }
    }

    /// What a workload of this estimate may use: the card, and the credit at its size.
    pub fn room(&self, e: &Estimate) -> u64 {
        let credit = self.credit.map_or(0, |c| c.at(e.workload_bytes()));
        self.vram.saturating_add(credit)
    }

    /// The same planner answering from the probe's measured model.
    pub fn with_measured(self, m: &'a MeasuredModel) -> Planner<'a> {
        Planner {
            measured: Some(m),
            ..self
        }
    }

    /// The same planner answering transformers' workloads with the allocator model.
    pub fn with_pool(self) -> Planner<'a> {
        Planner { pool: true, ..self }
    }

    /// The same planner with adapters and a draft model beside the model.
    pub fn with_deployment(
        self,
        deployment: crate::estimate::deployment::Deployment<'a>,
    ) -> Planner<'a> {
        Planner { deployment, ..self }
    }

    /// The same planner pricing the prompt's images.
    pub fn with_images(self, images: Option<crate::model::images::ImageLoad>) -> Planner<'a> {
        Planner { images, ..self }
    }

    /// The traced sequence for this workload, when the allocator model answers it.
    pub fn pool_shape(&self, w: &Workload) -> Option<Shape> {
        if !self.pool || self.measured.is_some() {
            return None;
        }
        let eager = match w.engine {
            Engine::Transformers => false,
            Engine::TransformersEager => true,
            _ => return None,
        };
        let sixteen = matches!(w.weight_dtype, WeightDtype::Bf16 | WeightDtype::F16)
            && matches!(
                w.kv_dtype,
                crate::dtype::KvDtype::Bf16 | crate::dtype::KvDtype::F16
            );
        let shape = Shape::of(self.spec, eager).filter(|_| sixteen)?;
        shape.covers(generation(w)).then_some(shape)
    }

    /// The allocator model's run of this workload (decode capped at `POOL_NEW_TOKENS_EXACT`).
    pub fn pool_run(&self, w: &Workload) -> Option<OnCard> {
        let shape = self.pool_shape(w)?;
        let mut g = generation(w);
        g.new_tokens = g.new_tokens.min(POOL_NEW_TOKENS_EXACT);
        Some(self.replayed(shape, g))
    }

    /// `on_card` for this card, from a run already made of the same batch and prompt where it
    /// tells (`Lengths::at`), else from a new one, kept.
    fn replayed(&self, shape: Shape, g: Generation) -> OnCard {
        let key = (shape, g.batch, g.prompt, self.vram);
        let kept = self
            .runs
            .lock()
            .ok()
            .and_then(|m| m.get(&key).and_then(|run| run.at(g.new_tokens)));
        if let Some(run) = kept {
            return run;
        }
        let run = lengths(&shape, g, self.vram);
        let answer = run.at(g.new_tokens);
        if let Ok(mut m) = self.runs.lock() {
            m.insert(key, run);
        }
        answer.unwrap_or_else(|| on_card(&shape, g, self.vram))
    }

    /// The same model of peaks on another card size.
    pub fn on_card(&self, vram: u64) -> Planner<'a> {
        Planner {
            vram,
            runs: Arc::clone(&self.runs),
            ..*self
        }
    }

    pub fn estimate(&self, w: &Workload) -> Estimate {
        let extra = crate::estimate::deployment::decode_extra(self.spec, w, &self.deployment);
        let mut e = match self.measured {
            Some(m) => m.estimate(self.spec, w, self.vram),
            None => crate::estimate::estimate_with_decode(self.spec, w, self.vram, extra),
        };
        crate::estimate::deployment::add(&mut e, self.spec, w, &self.deployment);
        if let Some(images) = &self.images {
            e.vision_encoder = images.encoder_bytes(w);
            e.total = e.total.saturating_add(e.vision_encoder);
        }
        e
    }

    pub fn fits(&self, w: &Workload) -> bool {
        let ran = || self.pool_run(w).is_some_and(|run| run.ran());
        match self.pool_shape(w) {
            // Past the replayed steps the profile must fit the whole workload too: asked first,
            // as it takes microseconds where a replay takes tens of milliseconds, and where it
            // does not fit the replay cannot change the answer.
            Some(_) if w.max_new_tokens > POOL_NEW_TOKENS_EXACT => self.estimate_fits(w) && ran(),
            Some(_) => ran(),
            None => self.estimate_fits(w),
        }
    }

    /// Whether the profile's (or the measured model's) peak for `w` fits its room.
    fn estimate_fits(&self, w: &Workload) -> bool {
        let e = self.estimate(w);
        e.total <= self.room(&e)
    }

    /// The peak the budget reports: the allocator model's peak on the card where it answers.
    fn peak(&self, w: &Workload) -> (u64, bool) {
        match (self.pool_shape(w), self.pool_run(w)) {
            // The same rule as `fits`, on the run already made (a replay takes up to 0.3 s).
            (Some(shape), Some(run)) => (
                run.peak_on_card(&shape),
                run.ran() && (w.max_new_tokens <= POOL_NEW_TOKENS_EXACT || self.estimate_fits(w)),
            ),
            _ => {
                let est = self.estimate(w);
                (est.total, est.total <= self.room(&est))
            }
        }
    }

    fn context_limit(&self) -> u64 {
        self.spec
            .max_position_embeddings
            .unwrap_or(TOKEN_CEILING)
            .min(TOKEN_CEILING)
    }

    /// The largest `n` in `lo..=hi` whose workload `at(n)` fits. From the profile, to the unit.
    /// Where the allocator model answers, each question is a replay: the profile's own answer
    /// (microseconds) is where the search starts, and it stops within `POOL_SEARCH_RESOLUTION`.
    pub fn largest(&self, lo: u64, hi: u64, at: impl Fn(u64) -> Workload) -> Option<u64> {
        if !self.pool || self.measured.is_some() {
            return largest(lo, hi, |n| self.fits(&at(n)));
        }
        let profile = Planner {
            pool: false,
            ..self.clone()
        };
        let guess = largest(lo, hi, |n| profile.fits(&at(n))).unwrap_or(lo);
        largest_near(lo, hi, guess, POOL_SEARCH_RESOLUTION, |n| self.fits(&at(n)))
    }

    /// Largest batch that fits at the lengths of `w` (`None`: not even one sequence).
    pub fn max_batch(&self, w: &Workload) -> Option<u64> {
        self.largest(1, BATCH_CEILING, |b| Workload { batch: b, ..*w })
    }

    /// Largest total tokens per request at `batch`, split at the ratio of `w`.
    pub fn max_total(&self, w: &Workload, batch: u64) -> (u64, Limit) {
        let limit = self.context_limit();
        let at = |t: u64| {
            let (p, n) = split_at_ratio(w, t);
            Workload {
                prompt_tokens: p,
                max_new_tokens: n,
                batch,
                ..*w
            }
        };
        match self.largest(2, limit, at) {
            None => (0, Limit::Nothing),
            Some(t) if t == limit => (t, Limit::Context),
            Some(t) => (t, Limit::Memory),
        }
    }

    pub fn budget(&self, w: &Workload) -> Budget {
        let (peak_bytes, fits) = self.peak(w);
        // The budget asks how long requests may be: llama.cpp's `-c` follows them in the search
        // (the context that fits is the answer), not the one the user set.
        let free_ctx = Workload {
            llama: crate::estimate::LlamaCppArgs {
                ctx_size: None,
                ..w.llama
            },
            ..*w
        };
        let w = &free_ctx;
        let limit = self.context_limit();
        let row = |c: u64| {
            let (t, by) = self.max_total(w, c);
            BudgetRow::at(c, t, by, w)
        };
        let max_prompt = || {
            self.largest(1, limit.saturating_sub(w.max_new_tokens), |p| Workload {
                prompt_tokens: p,
                ..*w
            })
        };
        let max_new = || {
            self.largest(1, limit.saturating_sub(w.prompt_tokens), |n| Workload {
                max_new_tokens: n,
                ..*w
            })
        };
        let max_batch = || self.max_batch(w);
        // Each row of the allocator model bisects ~20 replays of tens of milliseconds, and so
        // do the largest prompt and batch: one thread each (the runs are deterministic, so the
        // answers are those of one thread).
        let (table, max_prompt_tokens, max_new_tokens, max_batch) = if self.pool_shape(w).is_some()
        {
            std::thread::scope(|scope| {
                let rows: Vec<_> = CONCURRENCY_ROWS
                    .iter()
                    .map(|&c| scope.spawn(move || row(c)))
                    .collect();
                let prompt = scope.spawn(max_prompt);
                let new = scope.spawn(max_new);
                let batch = scope.spawn(max_batch);
                let table = rows
                    .into_iter()
                    .zip(CONCURRENCY_ROWS)
                    .map(|(h, c)| h.join().unwrap_or_else(|_| row(c)))
                    .collect();
                (
                    table,
                    prompt.join().unwrap_or_else(|_| max_prompt()),
                    new.join().unwrap_or_else(|_| max_new()),
                    batch.join().unwrap_or_else(|_| max_batch()),
                )
            })
        } else {
            (
                CONCURRENCY_ROWS.iter().map(|&c| row(c)).collect(),
                max_prompt(),
                max_new(),
                max_batch(),
            )
        };
        Budget {
            vram_bytes: self.vram,
            fits,
            peak_bytes,
            max_prompt_tokens,
            max_new_tokens,
            max_batch,
            context_limit: self.spec.max_position_embeddings,
            table,
        }
    }

    /// What the same workload needs, and how long a context fits, with the weights stored otherwise.
    pub fn quantization_what_if(&self, w: &Workload) -> Vec<WhatIf> {
        let mut formats: Vec<WeightDtype> = ["bf16", "int8", "nf4", "q4_k_m"]
            .iter()
            .filter_map(|s| s.parse().ok())
            .collect();
        if !formats.contains(&w.weight_dtype) {
            formats.insert(0, w.weight_dtype);
        }
        formats
            .into_iter()
            .map(|dtype| {
                // GGUF mixes run in llama.cpp; the others in the user's engine.
                let engine = match dtype {
                    // candle runs GGUF blocks itself
                    WeightDtype::Gguf(_) if w.engine == Engine::Candle => Engine::Candle,
                    WeightDtype::Gguf(_) => Engine::LlamaCpp,
                    _ if w.engine == Engine::LlamaCpp => Engine::Transformers,
                    _ => w.engine,
                };
                let kv_dtype = if dtype == w.weight_dtype {
                    w.kv_dtype
                } else {
                    dtype.compute_kv_dtype()
                };
                let alt = Workload {
                    weight_dtype: dtype,
                    kv_dtype,
                    engine,
                    ..*w
                };
                let (peak_bytes, fits) = self.peak(&alt);
                let (t, by) = self.max_total(&alt, 1);
                WhatIf {
                    dtype,
                    engine,
                    weights_bytes: crate::estimate::weight_bytes(self.spec, dtype),
                    peak_bytes,
                    fits,
                    max_total_tokens_batch1: t,
                    limited_by: by,
                }
            })
            .collect()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct WhatIf {
    pub dtype: WeightDtype,
    pub engine: Engine,
    pub weights_bytes: u64,
    pub peak_bytes: u64,
    pub fits: bool,
    pub max_total_tokens_batch1: u64,
    pub limited_by: Limit,
}

/// Split a per-request total into prompt and new tokens at the workload's ratio (at least one each).
pub fn split_at_ratio(w: &Workload, total: u64) -> (u64, u64) {
    let ratio = w.prompt_tokens as f64 / w.total_tokens() as f64;
    let prompt = ((total as f64 * ratio).floor() as u64).clamp(1, total.saturating_sub(1).max(1));
    (prompt, total.saturating_sub(prompt).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::KvDtype;
    use crate::estimate::estimate;
    use crate::model::presets;

    fn planner_for(id: &str, vram: u64) -> (Spec, u64) {
        let (id, json) = presets::find(id).unwrap();
        (presets::load(id, json).unwrap(), vram)
    }

    fn work(prompt: u64, new: u64, batch: u64) -> Workload {
        Workload {
            llama: Default::default(),
            prompt_tokens: prompt,
            max_new_tokens: new,
            batch,
            weight_dtype: WeightDtype::Bf16,
            kv_dtype: KvDtype::Bf16,
            engine: Engine::Transformers,
        }
    }

    #[test]
    fn largest_finds_the_edge() {
        assert_eq!(largest(1, 100, |n| n <= 37), Some(37));
        assert_eq!(largest(1, 100, |n| n <= 1000), Some(100));
        assert_eq!(largest(1, 100, |_| false), None);
        assert_eq!(largest(5, 4, |_| true), None);
    }

    #[test]
    fn a_search_from_a_guess_finds_the_same_edge_from_any_guess() {
        const EDGES: [u64; 10] = [0, 1, 2, 37, 999, 1_000, 28_273, 32_767, 32_768, 40_000];
        const GUESSES: [u64; 11] = [
            0,
            1,
            2,
            30,
            37,
            500,
            28_000,
            28_273,
            29_000,
            32_768,
            u64::MAX,
        ];
        for edge in EDGES {
            for guess in GUESSES {
                let ok = |n: u64| n <= edge;
                let want = largest(1, 32_768, ok);
                assert_eq!(
                    largest_near(1, 32_768, guess, u64::MAX, ok),
                    want,
                    "edge {edge}, guess {guess}"
                );
                // within 1/512: a fitting answer, at most that far below the edge
                let near = largest_near(1, 32_768, guess, POOL_SEARCH_RESOLUTION, ok);
                match (near, want) {
                    (Some(n), Some(w)) => assert!(n <= w && w - n <= (n / 512).max(1)),
                    (n, w) => assert_eq!(n, w),
                }
            }
        }
    }

    #[test]
    fn a_guess_a_few_per_cent_off_asks_a_handful_of_questions() {
        let asked = |guess: u64, resolution: u64| {
            let n = std::cell::Cell::new(0);
            largest_near(1, 32_768, guess, resolution, |t| {
                n.set(n.get() + 1);
                t <= 28_273
            });
            n.get()
        };
        let bisection = {
            let n = std::cell::Cell::new(0);
            largest(1, 32_768, |t| {
                n.set(n.get() + 1);
                t <= 28_273
            });
            n.get()
        };
        assert_eq!(bisection, 17);
        // 2 % under and over: the lower end, the guess, two steps out, then a bisection of the
        // bracket to 55 tokens
        assert_eq!(asked(27_700, POOL_SEARCH_RESOLUTION), 8);
        assert_eq!(asked(28_840, POOL_SEARCH_RESOLUTION), 9);
    }

    #[test]
    fn the_limits_are_edges_of_the_estimate() {
        let (spec, vram) = planner_for("mistralai/Mistral-7B-Instruct-v0.2", 24 << 30);
        let pl = Planner::new(&spec, vram);
        let w = work(2048, 256, 4);
        let b = pl.budget(&w);
        let p = b.max_prompt_tokens.unwrap();
        assert!(pl.fits(&Workload {
            prompt_tokens: p,
            ..w
        }));
        assert!(!pl.fits(&Workload {
            prompt_tokens: p + 1,
            ..w
        }));
        let batch = b.max_batch.unwrap();
        assert!(
            pl.fits(&Workload { batch, ..w })
                && !pl.fits(&Workload {
                    batch: batch + 1,
                    ..w
                })
        );
        // the table shrinks as concurrency grows
        for pair in b.table.windows(2) {
            assert!(pair[1].max_total_tokens <= pair[0].max_total_tokens);
        }
        for row in &b.table {
            if row.max_total_tokens > 0 {
                assert!(pl.fits(&Workload {
                    prompt_tokens: row.prompt_tokens,
                    max_new_tokens: row.new_tokens,
                    batch: row.concurrency,
                    ..w
                }));
            }
        }
    }

    #[test]
    fn a_model_too_big_for_the_card_fits_nothing() {
        let (spec, vram) = planner_for("meta-llama/Llama-2-13b-hf", 24 << 30);
        let pl = Planner::new(&spec, vram);
        let b = pl.budget(&work(512, 128, 1));
        assert!(!b.fits);
        assert_eq!(b.max_prompt_tokens, None);
        assert!(b.table.iter().all(|r| r.limited_by == Limit::Nothing));
    }

    #[test]
    fn the_context_limit_caps_the_table() {
        let (spec, vram) = planner_for("Qwen/Qwen2.5-0.5B-Instruct", 80 << 30);
        let pl = Planner::new(&spec, vram);
        let b = pl.budget(&work(1000, 100, 1));
        assert_eq!(b.table[0].max_total_tokens, 32_768);
        assert_eq!(b.table[0].limited_by, Limit::Context);
    }

    /// Whether `w` fits by the allocator model, asked afresh: each question replays the whole
    /// sequence (what `Planner::fits` did before it kept its runs).
    fn fits_afresh(spec: &Spec, vram: u64, w: &Workload) -> bool {
        let shape = Shape::of(spec, w.engine == Engine::TransformersEager).unwrap();
        let mut g = generation(w);
        g.new_tokens = g.new_tokens.min(POOL_NEW_TOKENS_EXACT);
        let run = on_card(&shape, g, vram);
        run.ran()
            && (w.max_new_tokens <= POOL_NEW_TOKENS_EXACT || estimate(spec, w, vram).total <= vram)
    }

    #[test]
    fn the_allocator_models_budget_is_the_same_with_its_runs_kept() {
        let eager = Workload {
            engine: Engine::TransformersEager,
            ..work(256, 4, 2)
        };
        for (id, vram, w) in [
            (
                "HuggingFaceTB/SmolLM2-135M-Instruct",
                1_300 << 20,
                work(512, 8, 1),
            ),
            ("HuggingFaceTB/SmolLM2-135M-Instruct", 1_200 << 20, eager),
        ] {
            let (spec, vram) = planner_for(id, vram);
            let pl = Planner::new(&spec, vram).with_pool();
            assert!(pl.pool_shape(&w).is_some(), "{id}");
            let b = pl.budget(&w);
            let fits = |w: &Workload| fits_afresh(&spec, vram, w);
            let shape = Shape::of(&spec, w.engine == Engine::TransformersEager).unwrap();
            let run = on_card(&shape, generation(&w), vram);
            assert_eq!(b.peak_bytes, run.peak_on_card(&shape), "{id}");
            assert_eq!(b.fits, run.ran(), "{id}");
            let limit = pl.context_limit();
            let free_ctx = |p: u64, n: u64, batch: u64| Workload {
                prompt_tokens: p,
                max_new_tokens: n,
                batch,
                ..w
            };
            // the same search, each of its questions a fresh replay, from the profile's answer
            let profile = Planner::new(&spec, vram);
            let largest = |lo: u64, hi: u64, at: &(dyn Fn(u64) -> Workload + Sync)| {
                let guess = super::largest(lo, hi, |n| profile.fits(&at(n))).unwrap_or(lo);
                largest_near(lo, hi, guess, POOL_SEARCH_RESOLUTION, |n| fits(&at(n)))
            };
            let prompt = largest(1, limit - w.max_new_tokens, &|p| {
                free_ctx(p, w.max_new_tokens, w.batch)
            });
            let new = largest(1, limit - w.prompt_tokens, &|n| {
                free_ctx(w.prompt_tokens, n, w.batch)
            });
            let batch = largest(1, BATCH_CEILING, &|c| {
                free_ctx(w.prompt_tokens, w.max_new_tokens, c)
            });
            assert_eq!(
                (b.max_prompt_tokens, b.max_new_tokens, b.max_batch),
                (prompt, new, batch),
                "{id}"
            );
            let totals: Vec<u64> = std::thread::scope(|scope| {
                let rows: Vec<_> = (b.table.iter())
                    .map(|row| {
                        scope.spawn(move || {
                            largest(2, limit, &|t| {
                                let (p, n) = split_at_ratio(&w, t);
                                free_ctx(p, n, row.concurrency)
                            })
                        })
                    })
                    .collect();
                rows.into_iter()
                    .map(|h| h.join().unwrap().unwrap_or(0))
                    .collect()
            });
            let table: Vec<u64> = b.table.iter().map(|r| r.max_total_tokens).collect();
            assert_eq!(table, totals, "{id}");
            // something in each case fits and something does not: the searches met an edge
            assert!(prompt.is_some() && b.table.iter().any(|r| r.limited_by == Limit::Memory));
        }
    }

    #[test]
    fn past_the_replayed_steps_asking_the_profile_first_changes_no_answer() {
        let (spec, _) = planner_for("HuggingFaceTB/SmolLM2-135M-Instruct", 0);
        let over = POOL_NEW_TOKENS_EXACT + 100;
        let mut answers = Vec::new();
        for (vram, w) in [
            (1_300 << 20, work(512, over, 1)),
            (1_300 << 20, work(64, over, 1)),
            (900 << 20, work(256, over, 2)),
            (4 << 30, work(512, over, 4)),
        ] {
            let pl = Planner::new(&spec, vram).with_pool();
            assert!(pl.pool_shape(&w).is_some());
            let fits = pl.fits(&w);
            assert_eq!(fits, fits_afresh(&spec, vram, &w), "{vram} {w:?}");
            answers.push(fits);
        }
        assert!(
            answers.contains(&true) && answers.contains(&false),
            "{answers:?}"
        );
    }

    /// The allocator model's `fits` is not monotone in the prompt: Mistral-7B eager with 256 new
    /// tokens on `--vram 24GB` runs 4,314 prompt tokens, runs out of memory at 4,315 and runs
    /// again at 4,678 (where the cached blocks fall otherwise). The budget's searches therefore answer with the edge
    /// their own probes meet: a search that probes other points (a bracket from the profile, a
    /// probe skewed toward the cheap failures) reports another edge (4,314 instead of 4,678 for
    /// this workload's largest prompt), so the probe order is part of the answer.
    #[test]
    fn the_allocator_models_fits_is_not_monotone_in_the_prompt() {
        let (spec, _) = planner_for("mistralai/Mistral-7B-Instruct-v0.2", 0);
        let pl = Planner::new(&spec, 24_146_608_128).with_pool();
        let at = |p: u64| Workload {
            engine: Engine::TransformersEager,
            ..work(p, 256, 1)
        };
        assert!(pl.pool_shape(&at(4_314)).is_some());
        let fits: Vec<bool> = [4_314, 4_315, 4_678, 4_679]
            .iter()
            .map(|&p| pl.fits(&at(p)))
            .collect();
        assert_eq!(fits, [true, false, true, false]);
    }

    #[test]
    fn ratio_split_keeps_both_sides() {
        let w = work(3000, 1000, 1);
        assert_eq!(split_at_ratio(&w, 4000), (3000, 1000));
        assert_eq!(split_at_ratio(&w, 2), (1, 1));
    }
}
