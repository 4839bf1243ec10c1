//! A budget is a fresh process's: the largest request a new program runs. A process that has
//! already run other sizes (a notebook, a server, a batch job over varied inputs) holds cached
//! blocks of the old sizes, and the next larger request can run out below that line. Measured,
//! not assumed, with transformers on the H100 and the H200 (torch 2.11, transformers 5.17; three
//! long-lived processes serving varied and then growing prompts in steps of 256 tokens,
//! `scripts/gpu/same-oom.sh served-ramp*`):
//!
//! - each ran out at a prompt that a fresh process then ran (Mistral-7B b2 at 7,840, Llama-2-7B b1
//!   at 4,548, Mistral-7B b4 at 5,560);
//! - the last request that ran was one step below the fresh line, within 5 % of it (Mistral-7B b4
//!   on the H200: 5,304 ran, 5,560 ran out; a fresh process's largest lies in 5,560–5,573,
//!   docs/calibration/card-edges-h200-2026-12-06.jsonl);
//! - with `PYTORCH_ALLOC_CONF=expandable_segments:True` the same processes ran 768–1,024 tokens
//!   further (to 8,608, 5,572 and 6,328: 10–23 %), past a fresh process's default line.
//!
//! So the budget states both: the fresh line, and 95 % of it for a process that has run other
//! sizes, with the allocator setting that closes the gap.

use crate::estimate::Engine;

/// The share of the fresh process's largest prompt a long-lived process is held to.
pub const SHARE_PERCENT: u64 = 95;

/// The line a long-lived process is held to, for a fresh budget of `fresh` prompt tokens.
pub fn line(fresh: u64) -> u64 {
    fresh / 100 * SHARE_PERCENT + fresh % 100 * SHARE_PERCENT / 100
}

/// The note beside a transformers budget whose largest prompt is `fresh` tokens (`None` where the
/// engine is not transformers, or nothing fits).
pub fn note(engine: Engine, fresh: Option<u64>) -> Option<String> {
    if !engine.is_transformers() {
        return None;
    }
    let fresh = fresh.filter(|&p| p > 0)?;
    Some(format!(
        "the budget is a fresh process's ({} prompt tokens at this batch); a process that has \
         already run other sizes (a notebook, a server) can run out below it: keep to about {} \
         ({SHARE_PERCENT} %) there, or set PYTORCH_ALLOC_CONF=expandable_segments:True (three \
         such processes, on an H100 and an H200, ran out at prompts a fresh process ran; with \
         the setting they went 10-23 % further)",
        crate::units::group(fresh),
        crate::units::group(line(fresh))
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_long_lived_line_is_ninety_five_percent_without_overflow() {
        assert_eq!(line(5_573), 5_294);
        assert_eq!(line(100), 95);
        assert_eq!(line(0), 0);
        assert!(line(u64::MAX) < u64::MAX);
    }

    #[test]
    fn only_transformers_budgets_get_the_note() {
        let n = note(Engine::Transformers, Some(5_573)).unwrap_or_default();
        assert!(n.contains("5,294"), "{n}");
        assert!(n.contains("expandable_segments"), "{n}");
        assert!(note(Engine::TransformersEager, Some(1_000)).is_some());
        assert!(note(Engine::Vllm, Some(1_000)).is_none());
        assert!(note(Engine::Transformers, Some(0)).is_none());
        assert!(note(Engine::Transformers, None).is_none());
    }
}
