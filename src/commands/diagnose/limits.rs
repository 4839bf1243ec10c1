//! `--find-limits`: the largest prompt at batch 1 and the largest batch at the target lengths that
//! really run on this device, found by trials around the measured model's prediction. Each trial
//! is a full prefill plus a decode step; a trial that kills its child only costs a fresh child.

use serde::Serialize;

use crate::error::Result;
use crate::estimate::Workload;
use crate::probe::protocol::{GenerateTask, Outcome, Task};
use crate::probe::session::{Reply, Session};

/// Which limit a trial searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Search {
    /// The largest prompt at batch 1.
    Prompt,
    /// The largest batch at the asked lengths.
    Batch,
}

impl Search {
    pub fn as_str(self) -> &'static str {
        match self {
            Search::Prompt => "prompt",
            Search::Batch => "batch",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    pub search: Search,
    pub prompt_tokens: u64,
    pub new_tokens: u64,
    pub batch: u64,
    pub fits: bool,
    /// What the device held at the peak (the pool's reservation and what is outside it), and the
    /// bytes in live tensors then.
    pub peak_bytes: u64,
    pub used_peak_bytes: u64,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FoundLimits {
    /// Largest prompt that ran at batch 1 with the asked new tokens, and what the budget claims.
    pub max_prompt_tokens: Option<u64>,
    pub predicted_prompt_tokens: Option<u64>,
    /// Largest batch that ran at the asked lengths, and what the budget claims.
    pub max_batch: Option<u64>,
    pub predicted_batch: Option<u64>,
    pub trials: Vec<Trial>,
}

/// Most trials one search may take.
const MAX_TRIALS: usize = 12;

pub fn find(
    session: &mut Session,
    w: &Workload,
    predicted_prompt: Option<u64>,
    predicted_batch: Option<u64>,
) -> Result<FoundLimits> {
    let mut trials = Vec::new();
    let new = w.max_new_tokens;
    let max_prompt = search(predicted_prompt.unwrap_or(w.prompt_tokens), |p| {
        run(session, &mut trials, Search::Prompt, p, new, 1)
    })?;
    let max_batch = search(predicted_batch.unwrap_or(w.batch), |b| {
        run(session, &mut trials, Search::Batch, w.prompt_tokens, new, b)
    })?;
    Ok(FoundLimits {
        max_prompt_tokens: max_prompt,
        predicted_prompt_tokens: predicted_prompt,
        max_batch,
        predicted_batch,
        trials,
    })
}

/// One trial: whether it fit, its seconds, and the seconds before it (a fresh process started).
fn run(
    session: &mut Session,
    trials: &mut Vec<Trial>,
    search: Search,
    prompt: u64,
    new: u64,
    batch: u64,
) -> Result<(bool, f64, f64)> {
    let task = GenerateTask {
        label: format!("limit_{}", search.as_str()),
        prompt_tokens: prompt as usize,
        new_tokens: new as usize,
        batch: batch as usize,
        decode_steps: (new as usize).saturating_sub(1).min(1),
        eager: None,
    };
    let wall = std::time::Instant::now();
    let reply = session.run(&Task::Generate(task))?;
    let wall = wall.elapsed().as_secs_f64();
    let (fits, peak, used, seconds) = match reply {
        Reply::Done(r) => (
            r.outcome == Outcome::Ok,
            r.prefill_peak.unwrap_or(0).max(r.peak),
            r.used.prefill_peak.unwrap_or(0).max(r.used.peak),
            r.seconds,
        ),
        _ => (false, 0, 0, 0.0),
    };
    if !fits {
        // the next trial runs in a fresh process, as the user's would
        session.retire();
    }
    trials.push(Trial {
        search,
        prompt_tokens: prompt,
        new_tokens: new,
        batch,
        fits,
        peak_bytes: peak,
        used_peak_bytes: used,
        seconds,
    });
    Ok((fits, seconds, (wall - seconds).max(0.0)))
}

/// The largest `x ≥ 1` with `ok(x)`, starting at `guess`: step out by 5 % (then doubling the step)
/// to bracket the edge, then narrow the bracket to 1 %. `ok` answers whether `x` fits and how many
/// seconds the trial took. `None` when even 1 fails or the trials run out first without a success.
///
/// The bracket is cut where the trials measured so far make it cheapest ([`cut`]): a trial that
/// fits runs the whole prefill (seconds, at a long prompt) while one that fails stops at its first
/// allocation past the card (a fraction of a second, plus the fresh process the next trial runs
/// in), so where fits cost more the cut sits above the middle and most of the narrowing is done
/// by trials that fail.
fn search(guess: u64, mut ok: impl FnMut(u64) -> Result<(bool, f64, f64)>) -> Result<Option<u64>> {
    let mut tries = 0;
    let mut costs = Costs::default();
    let mut attempt = |x: u64, tries: &mut usize, costs: &mut Costs| -> Result<bool> {
        *tries += 1;
        let (fits, seconds, restart) = ok(x)?;
        costs.record(fits, seconds, restart);
        Ok(fits)
    };
    let guess = guess.max(1);
    let (mut good, mut bad): (Option<u64>, Option<u64>) = (None, None);
    if attempt(guess, &mut tries, &mut costs)? {
        good = Some(guess);
        let mut step = (guess / 20).max(1);
        while tries < MAX_TRIALS {
            let x = good.unwrap_or(guess) + step;
            if attempt(x, &mut tries, &mut costs)? {
                good = Some(x);
                step *= 2;
            } else {
                bad = Some(x);
                break;
            }
        }
    } else {
        bad = Some(guess);
        let mut step = (guess / 20).max(1);
        while tries < MAX_TRIALS {
            let x = bad.unwrap_or(guess).saturating_sub(step).max(1);
            if attempt(x, &mut tries, &mut costs)? {
                good = Some(x);
                break;
            }
            if x == 1 {
                return Ok(None);
            }
            bad = Some(x);
            step *= 2;
        }
    }
    let (Some(mut g), Some(mut b)) = (good, bad) else {
        return Ok(good);
    };
    while b - g > (g / 100).max(1) && tries < MAX_TRIALS {
        let at = g + costs.cut(b - g);
        if attempt(at, &mut tries, &mut costs)? {
            g = at;
        } else {
            b = at;
        }
    }
    Ok(Some(g))
}

/// What the trials that fit, and those that failed, took so far.
#[derive(Debug, Default)]
struct Costs {
    fit: Cost,
    fail: Cost,
    failed_last: bool,
}

impl Costs {
    /// A trial's outcome and seconds; `restart`, the fresh process started before it, is the cost
    /// of the failure that left it.
    fn record(&mut self, fits: bool, seconds: f64, restart: f64) {
        if self.failed_last && restart.is_finite() && restart > 0.0 {
            self.fail.seconds += restart;
        }
        if fits { &mut self.fit } else { &mut self.fail }.add(seconds);
        self.failed_last = !fits;
    }

    /// Where to try inside a bracket `width` wide ([`cut`]).
    fn cut(&self, width: u64) -> u64 {
        cut(width, self.fit.mean(), self.fail.mean())
    }
}

/// Seconds the trials of one outcome took.
#[derive(Debug, Default, Clone, Copy)]
struct Cost {
    seconds: f64,
    trials: u32,
}

impl Cost {
    fn add(&mut self, seconds: f64) {
        if seconds.is_finite() && seconds >= 0.0 {
            self.seconds += seconds;
            self.trials += 1;
        }
    }

    fn mean(self) -> Option<f64> {
        (self.trials > 0).then(|| self.seconds / f64::from(self.trials))
    }
}

/// Where to try inside a bracket `width` wide (from its good end, strictly inside it): the middle,
/// or, when trials that fit have cost more than trials that fail, the share of the bracket that a
/// fit costs of both (`fit / (fit + fail)`), at most 4/5 — a trial there more often fails, cheaply.
fn cut(width: u64, fit: Option<f64>, fail: Option<f64>) -> u64 {
    let share = match (fit, fail) {
        (Some(fit), Some(fail)) if fit > fail && fit + fail > 0.0 => {
            (fit / (fit + fail)).clamp(0.5, 0.8)
        }
        _ => 0.5,
    };
    ((width as f64 * share) as u64).clamp(1, width.saturating_sub(1).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_brackets_and_bisects_from_either_side() {
        for (edge, guess) in [(10_000u64, 9_000u64), (10_000, 11_000), (7, 7), (1, 50)] {
            let mut calls = 0;
            let found = search(guess, |x| {
                calls += 1;
                Ok((x <= edge, 1.0, 0.0))
            })
            .unwrap()
            .unwrap();
            assert!(
                found <= edge && found + (edge / 100).max(1) >= edge,
                "{edge} {guess} → {found}"
            );
            assert!(calls <= MAX_TRIALS);
        }
        assert_eq!(search(5, |_| Ok((false, 1.0, 0.0))).unwrap(), None);
    }

    #[test]
    fn where_fits_cost_more_the_bracket_is_cut_above_its_middle() {
        assert_eq!(cut(1000, Some(8.0), Some(0.5)), 800);
        assert_eq!(cut(1000, Some(1.0), Some(1.0)), 500);
        assert_eq!(cut(1000, Some(0.5), Some(8.0)), 500);
        assert_eq!(cut(1000, None, Some(0.5)), 500);
        assert_eq!(cut(2, Some(8.0), Some(0.5)), 1);
        // The candle trials an H100 ran at 24 GiB (Mistral-7B): the edge lies between 40,343,
        // which fit, and 40,548, which did not; a fit took 6–9 s, a failure 0.3–0.5 s.
        let (edge, mut spent, mut calls) = (40_400u64, 0.0, 0);
        let found = search(32_768, |x| {
            calls += 1;
            let fits = x <= edge;
            let s = if fits {
                5.9 + (x - 32_768) as f64 * 3.6e-4
            } else {
                0.4
            };
            spent += s;
            Ok((fits, s, 0.0))
        })
        .unwrap()
        .unwrap();
        assert!(found <= edge && found + edge / 100 >= edge, "{found}");
        // Plain bisection took six fits and three failures here (47 s): the cost-aware cut takes
        // fewer fits.
        assert!(spent < 40.0, "{spent:.1} s in {calls} trials");
        // Where a failure costs a fresh process (transformers mode: seconds to start and load),
        // failures are no cheaper than fits and the cut stays in the middle.
        let mut at = Vec::new();
        search(1_000, |x| {
            at.push(x);
            let fits = x <= 1_100;
            Ok((fits, 1.5, if at.len() > 1 { 2.0 } else { 0.0 }))
        })
        .unwrap();
        assert_eq!(at, [1000, 1050, 1150, 1100, 1125, 1112, 1106]);
    }
}
