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

fn run(
    session: &mut Session,
    trials: &mut Vec<Trial>,
    search: Search,
    prompt: u64,
    new: u64,
    batch: u64,
) -> Result<bool> {
    let task = GenerateTask {
        label: format!("limit_{}", search.as_str()),
        prompt_tokens: prompt as usize,
        new_tokens: new as usize,
        batch: batch as usize,
        decode_steps: (new as usize).saturating_sub(1).min(1),
        eager: None,
    };
    let (fits, peak, used, seconds) = match session.run(&Task::Generate(task))? {
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
    Ok(fits)
}

/// The largest `x ≥ 1` with `ok(x)`, starting at `guess`: step out by 5 % (then doubling the step)
/// to bracket the edge, then bisect to 1 %. `None` when even 1 fails or the trials run out first
/// without a success.
fn search(guess: u64, mut ok: impl FnMut(u64) -> Result<bool>) -> Result<Option<u64>> {
    let mut tries = 0;
    let mut attempt = |x: u64, tries: &mut usize| -> Result<bool> {
        *tries += 1;
        ok(x)
    };
    let guess = guess.max(1);
    let (mut good, mut bad): (Option<u64>, Option<u64>) = (None, None);
    if attempt(guess, &mut tries)? {
        good = Some(guess);
        let mut step = (guess / 20).max(1);
        while tries < MAX_TRIALS {
            let x = good.unwrap_or(guess) + step;
            if attempt(x, &mut tries)? {
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
            if attempt(x, &mut tries)? {
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
        let mid = g + (b - g) / 2;
        if attempt(mid, &mut tries)? {
            g = mid;
        } else {
            b = mid;
        }
    }
    Ok(Some(g))
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
                Ok(x <= edge)
            })
            .unwrap()
            .unwrap();
            assert!(
                found <= edge && found + (edge / 100).max(1) >= edge,
                "{edge} {guess} → {found}"
            );
            assert!(calls <= MAX_TRIALS);
        }
        assert_eq!(search(5, |_| Ok(false)).unwrap(), None);
    }
}
