//! The decisive run at the edge (transformers). The staged probe measures in one warm process and
//! grows the cache through transformers' public API before timing the last decode steps; that is
//! within a few per cent of a user's own `generate()`, which is not enough when the workload sits
//! that close to the card. So a workload whose staged peak comes within the edge band of the card
//! — or that ran out where the engine's profile puts it near the card — is run once more exactly
//! as the user's program runs it: a fresh process, no warm-up, one `generate()` of every new token
//! (as scripts/gpu/transformers-limits.py, the ground truth, does). That run decides the verdict.

use super::record::from_reply;
use super::stages::Measured;
use super::Progress;
use crate::error::Result;
use crate::probe::protocol::{GenerateTask, Outcome, Task};
use crate::probe::session::{Reply, Session};
use crate::units::{group, Bytes};
use crate::verdict::measured::StageRecord;
use crate::verdict::Stage;

/// When the whole workload is run again in a fresh process (`--fresh-run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FreshRun {
    /// Only at the edge: a staged peak within the band of the card, or an out-of-memory where
    /// the profile says the workload is close to it.
    #[default]
    Edge,
    Always,
    Never,
}

/// The band around the card inside which a staged answer is not trusted: 5 % of the card, at
/// least 256 MiB. On the H200 the staged peak and a fresh `generate()` differed by up to ~2 %
/// (allocator slack of 170–440 MiB at the limits of 7 workloads, docs/accuracy.md).
pub fn edge_band(capacity: u64) -> u64 {
    (capacity / 20).max(256 << 20)
}

/// The stage that runs the asked workload: the concurrency stage for a batch, else the long
/// generation.
pub fn asked_stage(batch: usize) -> Stage {
    if batch > 1 {
        Stage::Concurrency
    } else {
        Stage::LongGeneration
    }
}

/// Why the decisive run is needed, or `None` when the staged answer stands.
pub fn needed(
    m: &Measured,
    policy: FreshRun,
    capacity: u64,
    predicted_peak: u64,
    batch: usize,
) -> Option<String> {
    if policy == FreshRun::Never || !m.loaded || m.stopped() {
        return None;
    }
    if policy == FreshRun::Always {
        return Some("--fresh-run always".into());
    }
    let band = edge_band(capacity);
    let asked = m.stages.iter().find(|s| s.name == asked_stage(batch))?;
    let oom = m.stages.iter().find(|s| s.outcome == Outcome::Oom);
    // A probe fault (an error, a timeout) is reported as such, not overruled.
    if m.stages
        .iter()
        .any(|s| matches!(s.outcome, Outcome::Error | Outcome::Timeout))
    {
        return None;
    }
    match (asked.outcome, oom) {
        (Outcome::Ok, None) => {
            let spare = capacity.saturating_sub(asked.memory.peak);
            (spare < band).then(|| {
                format!(
                    "the staged peak left {} of {} spare, inside the {} edge band",
                    Bytes(spare),
                    Bytes(capacity),
                    Bytes(band)
                )
            })
        }
        (_, Some(failed)) => (predicted_peak <= capacity.saturating_add(band)).then(|| {
            format!(
                "{} ran out in the warm probe while the profile puts the workload at {} of {}, inside the edge band",
                failed.name,
                Bytes(predicted_peak),
                Bytes(capacity)
            )
        }),
        _ => None,
    }
}

/// The decode passes the short decisive run makes for real after fast-forwarding its cache.
pub const LAST_STEPS: usize = 8;

/// `(p, n, b)` in a fresh child that loads the model and does not warm up — as the user's program
/// runs. `decode_steps` of the `n - 1` decode passes are real: all of them is the full
/// `generate()` path; fewer is the probe's fast-forward (a real prefill, the cache grown through
/// transformers' `Cache.update` to where the last passes start, those passes real).
fn fresh_generate(
    session: &mut Session,
    label: &str,
    (p, n, b): (usize, usize, usize),
    decode_steps: usize,
) -> Result<Reply> {
    let task = GenerateTask {
        label: label.into(),
        prompt_tokens: p,
        new_tokens: n,
        batch: b,
        decode_steps: decode_steps.min(n.saturating_sub(1)),
        eager: None,
    };
    session.retire();
    session.warm_fresh = false;
    let reply = session.run(&Task::Generate(task));
    session.warm_fresh = true;
    reply
}

/// Whether the short fresh run settles the verdict, and with what spare on the decode side. Its
/// prefill is the user's own, fresh and cold, so what it shows of the prefill is exact; its last
/// decode passes start from a cache grown by fast-forward, which leaves the allocator in another
/// state than `n - 1` single steps do. So it decides only a workload that ran and whose decode
/// side's live bytes (base included) leave at least the edge band of the card spare: that is the
/// room the full run's decode would have to lose to fragmentation to run out. Anything else (out
/// of memory anywhere, a decode side inside the band, a failure) is settled by the full run.
/// PyTorch's reserved pool is not the measure here: it never shrinks, so after a prefill that
/// filled the card it stays at the prefill's high point through every decode pass.
/// Measured on an H100 80GB (docs/calibration/edge-decisive-h100-2026-12-08.jsonl): Mistral-7B
/// b8 × 4,096 and × 4,245 + 256 at 24 GiB, the short and the full run in fresh processes had the
/// same prefill peaks and the same reserved peaks to the byte, and decode-side live bytes 48 KB apart.
pub fn short_run_decides(reply: &Reply, capacity: u64) -> Option<u64> {
    let Reply::Done(r) = reply else {
        return None;
    };
    if r.outcome != Outcome::Ok || r.oom.is_some() {
        return None;
    }
    let decode_side = r.used.decode_peak?;
    let spare = capacity.checked_sub(decode_side)?;
    (spare >= edge_band(capacity)).then_some(spare)
}

/// Run the whole workload in a fresh child and put its record in place of the asked stage's.
/// First the short run (a real prefill, the last [`LAST_STEPS`] decode passes real): where its
/// decode side leaves the edge band spare, it decides, since the prefill it ran is the user's own.
/// Otherwise one `generate()` of every new token decides, as the user's program runs it (a fresh
/// program's first `generate()` is slow: cuDNN plans its attention for every new length).
/// When the deciding run ran, the warm probe's out-of-memories before it are superseded (a
/// user's fresh program does not meet them); when it failed otherwise (not out of memory), the
/// staged answer stands and the failure is a note.
pub fn run(
    session: &mut Session,
    m: &mut Measured,
    (p, n, b): (usize, usize, usize),
    capacity: u64,
    why: &str,
    progress: &mut dyn Progress,
) -> Result<Option<String>> {
    if n.saturating_sub(1) > LAST_STEPS {
        progress
            .stage("the whole workload, in a fresh process: its prefill and last decode passes");
        let reply = fresh_generate(session, "workload_fresh", (p, n, b), LAST_STEPS)?;
        if m.stopped() {
            return Ok(None);
        }
        if let Some(spare) = short_run_decides(&reply, capacity) {
            let head = format!(
                "{} + {} tokens × {b}, in a fresh process: the prefill and the last {LAST_STEPS} decode passes real, the cache grown between them",
                group(p as u64),
                group(n as u64)
            );
            place(m, reply, (p, n, b), &head);
            return Ok(Some(format!(
                "decided by a fresh process running the workload as your program would, cold: its prefill exactly, its decode side with {} spare, outside the {} edge band ({why})",
                Bytes(spare),
                Bytes(edge_band(capacity))
            )));
        }
    }
    progress.stage("the whole workload, in a fresh process");
    let reply = fresh_generate(session, "workload_fresh_full", (p, n, b), n)?;
    if m.stopped() {
        return Ok(None);
    }
    let failed_otherwise = match &reply {
        Reply::Done(r) => matches!(r.outcome, Outcome::Error | Outcome::Timeout),
        Reply::Died { oom, .. } => oom.is_none(),
        Reply::TimedOut { .. } => true,
    };
    if failed_otherwise {
        return Ok(Some(format!(
            "the decisive run of the whole workload in a fresh process failed, so the staged answer stands ({why})"
        )));
    }
    let head = format!(
        "{} + {} tokens × {b}, in a fresh process",
        group(p as u64),
        group(n as u64)
    );
    place(m, reply, (p, n, b), &head);
    Ok(Some(format!(
        "decided by a fresh process running the whole workload as your program would, cold, one generate() of every new token ({why})"
    )))
}

/// The fresh run's record in place of the asked stage's, its detail `head` followed by what the
/// warm probe saw; when it ran, the warm probe's out-of-memories are superseded.
fn place(m: &mut Measured, reply: Reply, (p, n, b): (usize, usize, usize), head: &str) {
    let stage = asked_stage(b);
    let at = m.stages.iter().position(|s| s.name == stage);
    let warm = at.map_or_else(|| "not run".to_string(), |i| warm_words(&m.stages[i]));
    let detail = format!("{head} (warm probe: {warm})");
    let mut s =
        from_reply(stage, reply, m.weights_measured, &detail).sized(p as u64, n as u64, b as u64);
    s.fresh_process = true;
    let ran = s.outcome == Outcome::Ok;
    match at {
        Some(i) => m.stages[i] = s,
        None => m.stages.push(s),
    }
    if ran {
        m.superseded = m
            .stages
            .iter()
            .filter(|x| x.outcome == Outcome::Oom && !x.fresh_process)
            .map(|x| x.name)
            .collect();
    }
}

/// The prompt to try once more, fresh, after the decisive run ran out: the engine's own profile
/// on this card allows more than the corrected budget, and less than what ran out. The correction
/// applies the warm stages' worst under-prediction to every batch, which can cost a tenth of the
/// prompt (Phi-3 batch 4 on 10 GiB on the H200: 790 where 903 runs); one trial in the engine
/// settles it either way, and the budget never claims what did not run.
pub fn budget_trial_prompt(
    m: &Measured,
    profile: u64,
    corrected: u64,
    asked: usize,
) -> Option<usize> {
    if m.stopped() || !m.loaded {
        return None;
    }
    let ran_out_fresh = m
        .stages
        .iter()
        .any(|s| s.fresh_process && s.outcome == Outcome::Oom);
    let p = usize::try_from(profile).ok()?;
    (ran_out_fresh && profile > corrected && p < asked && p > 0).then_some(p)
}

/// One fresh child at `(p, n, b)`: its record, to be a point of the corrected card, and what the
/// report says of it. `None` when it failed otherwise than by running out (no point then).
pub fn budget_trial(
    session: &mut Session,
    m: &Measured,
    (p, n, b): (usize, usize, usize),
    progress: &mut dyn Progress,
) -> Result<Option<(StageRecord, String)>> {
    progress.stage("the budget, in a fresh process");
    let reply = fresh_generate(session, "budget_fresh", (p, n, b), n)?;
    let usable = match &reply {
        Reply::Done(r) => matches!(r.outcome, Outcome::Ok | Outcome::Oom),
        Reply::Died { oom, .. } => oom.is_some(),
        Reply::TimedOut { .. } => false,
    };
    if !usable {
        return Ok(None);
    }
    let detail = format!(
        "{} + {} tokens × {b}, the budget tried in a fresh process",
        group(p as u64),
        group(n as u64)
    );
    let mut s = from_reply(asked_stage(b), reply, m.weights_measured, &detail)
        .sized(p as u64, n as u64, b as u64);
    s.fresh_process = true;
    let said = match s.outcome {
        Outcome::Ok => "ran",
        _ => "ran out too",
    };
    let note = format!(
        "the budget was tried once more in a fresh process at {} + {} tokens × {b}: it {said}",
        group(p as u64),
        group(n as u64)
    );
    Ok(Some((s, note)))
}

fn warm_words(s: &StageRecord) -> String {
    match s.outcome {
        Outcome::Ok => format!("peak {}", Bytes(s.memory.peak)),
        Outcome::Oom => "ran out of memory".into(),
        Outcome::Skipped => "skipped".into(),
        Outcome::Error => "failed".into(),
        Outcome::Timeout => "timed out".into(),
    }
}

/// The stages the verdict and the budget read: those the fresh run superseded are left out (they
/// stay in the report, as measured).
pub fn verdict_view(m: &Measured) -> Vec<StageRecord> {
    m.stages
        .iter()
        .filter(|s| !(s.outcome == Outcome::Oom && m.superseded.contains(&s.name)))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::measured::StageMemory;

    const GIB: u64 = 1 << 30;

    fn stage(name: Stage, outcome: Outcome, peak: u64) -> StageRecord {
        let mut s = StageRecord::skipped(name, "");
        s.outcome = outcome;
        s.reason = None;
        s.memory = StageMemory {
            before: 0,
            peak,
            after: 0,
        };
        s
    }

    fn measured(stages: Vec<StageRecord>) -> Measured {
        Measured {
            loaded: true,
            stages,
            ..Measured::default()
        }
    }

    #[test]
    fn a_staged_peak_inside_the_band_is_decided_by_a_fresh_run() {
        let m = measured(vec![
            stage(Stage::Load, Outcome::Ok, 14 * GIB),
            stage(Stage::LongGeneration, Outcome::Ok, 16 * GIB - (300 << 20)),
        ]);
        let why = needed(&m, FreshRun::Edge, 16 * GIB, 15 * GIB, 1);
        assert!(why.is_some_and(|w| w.contains("edge band")));
    }

    #[test]
    fn a_peak_well_inside_the_card_stands() {
        let m = measured(vec![
            stage(Stage::Load, Outcome::Ok, 14 * GIB),
            stage(Stage::LongGeneration, Outcome::Ok, 20 * GIB),
        ]);
        assert_eq!(needed(&m, FreshRun::Edge, 24 * GIB, 20 * GIB, 1), None);
        assert!(needed(&m, FreshRun::Always, 24 * GIB, 20 * GIB, 1).is_some());
    }

    #[test]
    fn an_oom_near_the_card_is_rerun_and_one_far_beyond_it_is_not() {
        let m = measured(vec![
            stage(Stage::Load, Outcome::Ok, 14 * GIB),
            stage(Stage::FirstToken, Outcome::Oom, 16 * GIB),
            stage(Stage::LongGeneration, Outcome::Skipped, 0),
            stage(Stage::Concurrency, Outcome::Skipped, 0),
        ]);
        assert!(needed(&m, FreshRun::Edge, 16 * GIB, 16 * GIB + GIB / 2, 8).is_some());
        assert_eq!(needed(&m, FreshRun::Edge, 16 * GIB, 30 * GIB, 8), None);
        assert_eq!(needed(&m, FreshRun::Never, 16 * GIB, 16 * GIB, 8), None);
    }

    #[test]
    fn a_probe_fault_is_never_overruled() {
        let m = measured(vec![
            stage(Stage::Load, Outcome::Ok, 14 * GIB),
            stage(Stage::FirstToken, Outcome::Timeout, 0),
            stage(Stage::LongGeneration, Outcome::Skipped, 0),
        ]);
        assert_eq!(needed(&m, FreshRun::Edge, 16 * GIB, 15 * GIB, 1), None);
    }

    /// A short run's reply: `prefill` and `decode` are live bytes; the reserved pool stays at
    /// the prefill's high point, a little above its live bytes, as PyTorch's does.
    fn short(outcome: Outcome, prefill: u64, decode: Option<u64>) -> Reply {
        let mut r = crate::probe::protocol::TaskResult::new("workload_fresh");
        r.outcome = outcome;
        let reserved = prefill + GIB / 2;
        r.prefill_peak = Some(reserved);
        r.decode_peak = decode.map(|_| reserved);
        r.peak = reserved;
        r.used.prefill_peak = Some(prefill);
        r.used.decode_peak = decode;
        r.used.peak = prefill.max(decode.unwrap_or(0));
        Reply::Done(Box::new(r))
    }

    #[test]
    fn the_short_run_decides_a_prefill_at_the_edge_whose_decode_side_is_clear() {
        // b8 × 4,096 + 256 of Mistral-7B at 24 GiB on the H100: the prefill's pool reached
        // 23.6 GiB of the card (live 21.8 GiB), the decode side's live bytes 18.4 GiB (weights
        // + 8 × 4,351 tokens of cache): the pool's peak is the prefill's, and decides nothing.
        let cap = 24 * GIB;
        let reply = short(Outcome::Ok, 22 * GIB, Some(19 * GIB));
        assert_eq!(short_run_decides(&reply, cap), Some(5 * GIB));
    }

    #[test]
    fn the_full_run_decides_a_decode_side_in_the_band_an_oom_or_a_fault() {
        let cap = 24 * GIB;
        let band = edge_band(cap);
        let inside = short(Outcome::Ok, 20 * GIB, Some(cap - band + 1));
        assert_eq!(short_run_decides(&inside, cap), None);
        let at_band = short(Outcome::Ok, 20 * GIB, Some(cap - band));
        assert_eq!(short_run_decides(&at_band, cap), Some(band));
        assert_eq!(
            short_run_decides(&short(Outcome::Oom, cap, None), cap),
            None
        );
        assert_eq!(
            short_run_decides(&short(Outcome::Error, GIB, Some(GIB)), cap),
            None
        );
        // A decode side beyond the card (an emulated limit checked after the fact) never decides,
        // nor a reply without the decode side's live bytes.
        assert_eq!(
            short_run_decides(&short(Outcome::Ok, GIB, Some(cap + 1)), cap),
            None
        );
        assert_eq!(short_run_decides(&short(Outcome::Ok, GIB, None), cap), None);
        let died = Reply::Died {
            message: "killed".into(),
            oom: None,
        };
        assert_eq!(short_run_decides(&died, cap), None);
    }

    #[test]
    fn superseded_ooms_leave_the_verdicts_view_only() {
        let mut m = measured(vec![
            stage(Stage::Load, Outcome::Ok, 14 * GIB),
            stage(Stage::FirstToken, Outcome::Oom, 16 * GIB),
            stage(Stage::Concurrency, Outcome::Ok, 15 * GIB),
        ]);
        m.superseded = vec![Stage::FirstToken];
        let view = verdict_view(&m);
        assert_eq!(view.len(), 2);
        assert!(view.iter().all(|s| s.outcome == Outcome::Ok));
        assert_eq!(m.stages.len(), 3);
    }

    #[test]
    fn the_budget_is_tried_fresh_only_after_a_fresh_run_ran_out_and_below_it() {
        let mut fresh_oom = stage(Stage::Concurrency, Outcome::Oom, 10 * GIB);
        fresh_oom.fresh_process = true;
        let m = measured(vec![stage(Stage::Load, Outcome::Ok, 8 * GIB), fresh_oom]);
        // The profile allows 903 where the correction says 790, and 936 ran out: try 903.
        assert_eq!(budget_trial_prompt(&m, 903, 790, 936), Some(903));
        // Nothing to gain, or nothing below what ran out.
        assert_eq!(budget_trial_prompt(&m, 790, 790, 936), None);
        assert_eq!(budget_trial_prompt(&m, 950, 790, 936), None);
        // A warm out-of-memory alone is no reason: the decisive run did not run out.
        let warm = measured(vec![
            stage(Stage::Load, Outcome::Ok, 8 * GIB),
            stage(Stage::Concurrency, Outcome::Oom, 10 * GIB),
        ]);
        assert_eq!(budget_trial_prompt(&warm, 903, 790, 936), None);
    }

    #[test]
    fn the_band_is_five_percent_with_a_floor() {
        assert_eq!(edge_band(16 * GIB), 16 * GIB / 20);
        assert_eq!(edge_band(GIB), 256 << 20);
    }
}
