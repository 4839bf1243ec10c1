//! Stages 1–5 in the probe's child: load, warm-up (timed apart), first token, long generation,
//! concurrency, fragmentation. A stage after an out-of-memory or a failure is skipped with the
//! reason; what each stage measured is kept for the verdict and the fit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::fit::{LongPoint, PrefillPoint};
use super::record::{from_reply, prefill_point, record};
use super::Progress;
use crate::error::Result;
use crate::probe::protocol::{GenerateTask, Outcome, Task, TaskResult};
use crate::probe::session::{Reply, Session};
use crate::units::group;
use crate::verdict::measured::{Components, StageRecord};
use crate::verdict::Stage;

/// What the stages measured.
#[derive(Default)]
pub struct Measured {
    pub stages: Vec<StageRecord>,
    pub loaded: bool,
    /// What the device holds for the weights (pool slack included), and their tensors' bytes.
    pub weights_measured: u64,
    pub weights_tensors: u64,
    /// Live bytes before a clean run, less the weights: context and workspaces.
    pub held_base: u64,
    /// Bytes the allocator held beyond live tensors in the warm-up.
    pub slack: u64,
    pub warmup_seconds: Option<f64>,
    pub prefill_points: Vec<PrefillPoint>,
    pub long_point: Option<LongPoint>,
    /// Ctrl-C: set by the CLI's handler; what is left is skipped.
    pub stop: Option<Arc<AtomicBool>>,
    /// A long prompt is prefilled once: the first-token stage is read off the long generation's
    /// prefill (transformers' cache grows with the tokens, so its prefill is a first token's).
    pub prefill_once: bool,
    /// The cache is allocated whole for prompt + new tokens before the prefill (candle): a first
    /// token read off the long generation's prefill holds the prompt's cache, not all of it.
    pub cache_preallocated: bool,
    /// Stages whose out-of-memory in the warm probe the decisive fresh run contradicted: the
    /// report keeps them, the verdict and the budget do not read them (decisive.rs).
    pub superseded: Vec<Stage>,
    /// Runs beside the stages that measured a workload that ran (the half-prompt first token):
    /// more points for the engine's corrected card, not stages of the report.
    pub points: Vec<StageRecord>,
}

/// From this prompt length on, `prefill_once` saves a prefill (35 s of 80 for Mistral-7B at
/// 35,840 tokens on the H200).
pub const PREFILL_ONCE_FROM: usize = 8192;

/// Why a stage did not run after Ctrl-C.
pub const INTERRUPTED: &str = "interrupted (Ctrl-C) before it finished";

impl Measured {
    pub fn stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(|f| f.load(Ordering::SeqCst))
    }

    pub(super) fn failed(&self) -> bool {
        !self.loaded
            || self
                .stages
                .iter()
                .any(|s| s.outcome != Outcome::Ok && s.outcome != Outcome::Skipped)
    }
}

fn gen(label: &str, prompt: usize, new: usize, batch: usize, steps: usize) -> GenerateTask {
    GenerateTask {
        label: label.into(),
        prompt_tokens: prompt,
        new_tokens: new,
        batch,
        decode_steps: steps,
        eager: None,
    }
}

/// Stage 1: load the weights; what was loaded when it failed is what the model still needed.
pub fn load(m: &mut Measured, base: u64, reply: Reply) {
    let mut s = from_reply(Stage::Load, reply.clone(), 0, "load the weights");
    if let Reply::Done(r) = &reply {
        s.components = match &r.oom {
            Some(o) => Components {
                weights: o.held.saturating_sub(r.before),
                kv_cache: 0,
                activations: 0,
                other: base,
            },
            None => {
                m.weights_measured = r.after.saturating_sub(r.before);
                m.weights_tensors = r.weights_bytes;
                Components {
                    weights: m.weights_measured,
                    kv_cache: 0,
                    // The load's own transient beyond the weights it kept.
                    activations: r.peak.saturating_sub(r.after),
                    other: base,
                }
            }
        };
    }
    if m.stopped() && s.outcome != Outcome::Ok {
        s = StageRecord::skipped(Stage::Load, INTERRUPTED);
    }
    m.loaded = s.outcome == Outcome::Ok;
    m.held_base = base;
    m.stages.push(s);
}

/// Kernels compiled, library workspaces allocated: timed apart from the stages.
pub fn warm_up(session: &mut Session, m: &mut Measured, prompt: usize) -> Result<()> {
    session.warmup_tokens = prompt;
    if m.stopped() {
        return Ok(());
    }
    let task = Task::Warmup {
        prompt_tokens: prompt,
    };
    if let Reply::Done(r) = session.run(&task)? {
        if r.outcome == Outcome::Ok {
            m.warmup_seconds = Some(r.seconds);
            m.held_base = r
                .used
                .before
                .saturating_sub(m.weights_tensors)
                .max(m.held_base);
            m.slack = m.slack.max(r.peak.saturating_sub(r.used.peak));
            m.prefill_points.push(prefill_point(&r, 16, 18));
        }
    }
    Ok(())
}

/// One generation stage, or its skip when an earlier one failed; the task's result when it ran.
fn stage(
    session: &mut Session,
    m: &mut Measured,
    stage: Stage,
    task: GenerateTask,
    detail: String,
) -> Result<Option<Box<TaskResult>>> {
    if m.stopped() {
        m.stages.push(StageRecord::skipped(stage, INTERRUPTED));
        return Ok(None);
    }
    if m.failed() {
        m.stages.push(StageRecord::skipped(
            stage,
            "an earlier stage ran out of memory or failed",
        ));
        return Ok(None);
    }
    let reply = session.run(&Task::Generate(task.clone()))?;
    if m.stopped() && !matches!(&reply, Reply::Done(r) if r.outcome == Outcome::Ok) {
        // The terminal's SIGINT reached the child too: its death is the interruption, not a fault.
        m.stages.push(StageRecord::skipped(stage, INTERRUPTED));
        return Ok(None);
    }
    let raw = match &reply {
        Reply::Done(r) if r.outcome == Outcome::Ok => Some(r.clone()),
        _ => None,
    };
    let s = from_reply(stage, reply, m.weights_measured, &detail).sized(
        task.prompt_tokens as u64,
        task.new_tokens as u64,
        task.batch as u64,
    );
    m.stages.push(s);
    Ok(raw)
}

/// Stage 2: the first token at batch 1, with a half-length prefill before it so the fit can tell
/// the constant from the per-token part.
pub fn first_token(session: &mut Session, m: &mut Measured, p: usize) -> Result<()> {
    if p >= 64 && !m.failed() && !m.stopped() {
        if let Reply::Done(r) =
            session.run(&Task::Generate(gen("first_token_half", p / 2, 1, 1, 0)))?
        {
            if r.outcome == Outcome::Ok {
                m.prefill_points.push(prefill_point(&r, p / 2, p / 2 + 1));
                let half = record(Stage::FirstToken, &r, m.weights_measured, "half prompt");
                m.points.push(half.sized((p / 2) as u64, 1, 1));
            }
        }
    }
    let detail = format!("prefill {} tokens", group(p as u64));
    if let Some(r) = stage(
        session,
        m,
        Stage::FirstToken,
        gen("first_token", p, 1, 1, 0),
        detail,
    )? {
        m.prefill_points.push(prefill_point(&r, p, p + 1));
    }
    Ok(())
}

/// Stage 3: the cache for prompt + new tokens at batch 1, the last decode steps timed. Without a
/// long generation that ran, what grows with the context is measured on a shorter one (a quarter,
/// then a sixteenth of the new tokens), so the budget still accounts for it.
pub fn long_generation(session: &mut Session, m: &mut Measured, p: usize, n: usize) -> Result<()> {
    let detail = format!("{} + {} tokens", group(p as u64), group(n as u64));
    let task = gen("long_generation", p, n, 1, n.saturating_sub(1).min(4));
    let mut long = stage(session, m, Stage::LongGeneration, task, detail)?.map(|r| (n, r));
    if long.is_none() {
        long = scout(session, m, p, n)?;
    }
    m.long_point = long.map(|(new, r)| long_point(&r, p, p + new));
    Ok(())
}

/// After a long generation that ran out: a shorter one (a quarter, then a sixteenth of the new
/// tokens) that runs, with its new tokens.
fn scout(
    session: &mut Session,
    m: &Measured,
    p: usize,
    n: usize,
) -> Result<Option<(usize, Box<TaskResult>)>> {
    let oom = m.stages.last().is_some_and(|s| s.outcome == Outcome::Oom);
    if !oom || m.stopped() {
        return Ok(None);
    }
    for new in [n / 4, n / 16].into_iter().filter(|&x| x > 1) {
        let task = gen("long_generation_scout", p, new, 1, 1);
        if let Reply::Done(r) = session.run(&Task::Generate(task))? {
            if r.outcome == Outcome::Ok {
                return Ok(Some((new, r)));
            }
        }
    }
    Ok(None)
}

/// What a long generation of `total` tokens held beyond its cache, in its prefill and its decode.
fn long_point(r: &TaskResult, p: usize, total: usize) -> LongPoint {
    let held = r.used.before.saturating_add(r.kv_bytes);
    LongPoint {
        prompt_tokens: p as u64,
        total_tokens: total as u64,
        prefill_activations: r
            .used
            .prefill_peak
            .unwrap_or(r.used.peak)
            .saturating_sub(held),
        decode_activations: r.used.decode_peak.map(|d| d.saturating_sub(held)),
    }
}

/// Stages 2 and 3 from one generation: the first token is its prefill (peak, time, the cache of
/// the prompt), the long generation the whole of it. An out-of-memory before the prefill ended is
/// the first token's; after it, the long generation's.
pub fn prefill_once(session: &mut Session, m: &mut Measured, p: usize, n: usize) -> Result<()> {
    let first_detail = format!("prefill {} tokens (the long generation's)", group(p as u64));
    let long_detail = format!("{} + {} tokens", group(p as u64), group(n as u64));
    let skip_both = |m: &mut Measured, why: &str| {
        m.stages.push(StageRecord::skipped(Stage::FirstToken, why));
        m.stages
            .push(StageRecord::skipped(Stage::LongGeneration, why));
    };
    if m.stopped() {
        skip_both(m, INTERRUPTED);
        return Ok(());
    }
    if m.failed() {
        skip_both(m, "an earlier stage ran out of memory or failed");
        return Ok(());
    }
    let task = gen("long_generation", p, n, 1, n.saturating_sub(1).min(4));
    let reply = session.run(&Task::Generate(task))?;
    let ran_ok = matches!(&reply, Reply::Done(r) if r.outcome == Outcome::Ok);
    if m.stopped() && !ran_ok {
        skip_both(m, INTERRUPTED);
        return Ok(());
    }
    let preallocated = m.cache_preallocated;
    let prefilled = match &reply {
        Reply::Done(r) => r
            .prefill_seconds
            .map(|_| prefill_part(r, p, n, preallocated)),
        _ => None,
    };
    let sized = |s: StageRecord, new: usize| s.sized(p as u64, new as u64, 1);
    if prefilled.is_none() && preallocated {
        // It ran out before its prefill ended, with the whole cache allocated: a first token
        // (the prompt's cache only) may still fit, so it runs on its own; the failure is the
        // long generation's.
        first_token(session, m, p)?;
        let long = if m.failed() {
            StageRecord::skipped(
                Stage::LongGeneration,
                "the prefill ran out of memory or failed (first_token)",
            )
        } else {
            from_reply(
                Stage::LongGeneration,
                reply,
                m.weights_measured,
                &long_detail,
            )
        };
        m.stages.push(sized(long, n));
        m.long_point = scout(session, m, p, n)?.map(|(new, r)| long_point(&r, p, p + new));
        return Ok(());
    }
    let Some(prefill) = prefilled else {
        // It ran out (or failed) before its prefill ended: that is the first token's.
        let first = from_reply(Stage::FirstToken, reply, m.weights_measured, &first_detail);
        m.stages.push(sized(first, 1));
        m.stages.push(StageRecord::skipped(
            Stage::LongGeneration,
            "the prefill ran out of memory or failed (first_token)",
        ));
        return Ok(());
    };
    m.prefill_points.push(prefill_point(&prefill, p, p + 1));
    let first = record(
        Stage::FirstToken,
        &prefill,
        m.weights_measured,
        &first_detail,
    );
    m.stages.push(sized(first, 1));
    if let Reply::Done(r) = &reply {
        if r.outcome == Outcome::Ok {
            m.long_point = Some(long_point(r, p, p + n));
        }
    }
    let long = from_reply(
        Stage::LongGeneration,
        reply,
        m.weights_measured,
        &long_detail,
    );
    m.stages.push(sized(long, n));
    Ok(())
}

/// A generation's result as if it had stopped after its prefill: the prefill's peaks and time,
/// the cache of the prompt. A growing cache (transformers) held the prompt's tokens at the
/// prefill: the end's cache scaled to `p` of its `p + n - 1` tokens. A preallocated one (candle)
/// held all `p + n` tokens' cache through the prefill, where a first token's run allocates
/// `p + 1` (the cache is the same bytes for every token): that difference comes off the peaks,
/// and the activations stay exactly the prefill's.
fn prefill_part(r: &TaskResult, p: usize, n: usize, preallocated: bool) -> TaskResult {
    let mut t = r.clone();
    let prefill_peak = r.prefill_peak.unwrap_or(r.peak);
    let prefill_used = r.used.prefill_peak.unwrap_or(r.used.peak);
    if preallocated {
        let first = (r.kv_bytes as u128 * (p as u128 + 1) / (p + n).max(1) as u128) as u64;
        let extra = r.kv_bytes.saturating_sub(first);
        t.kv_bytes = first;
        t.kv_bytes_measured = r
            .kv_bytes_measured
            .map(|b| (b as u128 * (p as u128 + 1) / (p + n).max(1) as u128) as u64);
        t.peak = prefill_peak.saturating_sub(extra);
        t.used.peak = prefill_used.saturating_sub(extra);
        t.prefill_peak = Some(t.peak);
        t.used.prefill_peak = Some(t.used.peak);
    } else {
        let tokens = (p + n).saturating_sub(1).max(1) as u128;
        t.kv_bytes = (r.kv_bytes as u128 * p as u128 / tokens) as u64;
        t.peak = prefill_peak;
        t.used.peak = prefill_used;
    }
    t.decode_peak = None;
    t.used.decode_peak = None;
    t.decode_tokens_per_second = None;
    t.seconds = r.prefill_seconds.unwrap_or(r.seconds);
    // What came after the prefill (an out-of-memory in the decode) is the long generation's.
    t.outcome = Outcome::Ok;
    t.oom = None;
    t.error = None;
    t
}

/// Stage 4: the asked batch at the asked lengths.
pub fn concurrency(
    session: &mut Session,
    m: &mut Measured,
    p: usize,
    n: usize,
    b: usize,
) -> Result<()> {
    if b <= 1 {
        m.stages.push(StageRecord::skipped(
            Stage::Concurrency,
            "one sequence asked (--concurrency 1)",
        ));
        return Ok(());
    }
    let detail = format!(
        "{} + {} tokens × {b} sequences",
        group(p as u64),
        group(n as u64)
    );
    let task = gen("concurrency", p, n, b, n.saturating_sub(1).min(2));
    stage(session, m, Stage::Concurrency, task, detail)?;
    Ok(())
}

/// Stage 5: free memory against the largest block the device still gives, after the stages.
pub fn fragmentation(session: &mut Session, m: &mut Measured, on_gpu: bool) -> Result<()> {
    if m.stopped() {
        m.stages
            .push(StageRecord::skipped(Stage::Fragmentation, INTERRUPTED));
        return Ok(());
    }
    if !(on_gpu && m.loaded) {
        m.stages.push(StageRecord::skipped(
            Stage::Fragmentation,
            if on_gpu {
                "the model did not load"
            } else {
                "the CPU has no device memory pool to fragment"
            },
        ));
        return Ok(());
    }
    let detail = "largest free block";
    let s = match session.run(&Task::Fragmentation)? {
        Reply::Done(r) => {
            let mut s = record(Stage::Fragmentation, &r, m.weights_measured, detail);
            s.fragmentation = r.fragmentation.clone();
            s.components.activations = 0;
            s
        }
        other => from_reply(Stage::Fragmentation, other, m.weights_measured, detail),
    };
    m.stages.push(s);
    Ok(())
}

/// The stages, in order, each announced to the terminal.
pub fn run_all(
    session: &mut Session,
    m: &mut Measured,
    (p, n, b): (usize, usize, usize),
    on_gpu: bool,
    progress: &mut dyn Progress,
) -> Result<()> {
    if m.loaded {
        progress.stage("warm-up");
        warm_up(session, m, p)?;
    }
    if m.prefill_once && p >= PREFILL_ONCE_FROM && n > 1 {
        progress.stage("first token and long generation");
        prefill_once(session, m, p, n)?;
    } else {
        progress.stage("first token");
        first_token(session, m, p)?;
        progress.stage("long generation");
        long_generation(session, m, p, n)?;
    }
    progress.stage("concurrency");
    concurrency(session, m, p, n, b)?;
    progress.stage("fragmentation");
    fragmentation(session, m, on_gpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The long generation of 8,192 + 64 tokens on the CPU with the probe's tiny llama (release
    /// build): its prefill and cache as the child reported them.
    fn long_run() -> TaskResult {
        let mut r = TaskResult::new("long_generation");
        r.before = 5_694_328;
        r.kv_bytes = 8_454_144; // 1,024 B a token × 8,256
        r.kv_bytes_measured = Some(8_454_144);
        r.prefill_peak = Some(107_478_407);
        r.peak = 107_478_407;
        r.used.before = 5_694_328;
        r.used.prefill_peak = Some(107_478_407);
        r.used.peak = 107_478_407;
        r.prefill_seconds = Some(4.6);
        r.seconds = 4.7;
        r
    }

    #[test]
    fn a_preallocated_cache_leaves_the_first_token_the_prompts_cache_and_the_same_activations() {
        let r = long_run();
        let first = prefill_part(&r, 8192, 64, true);
        // The first token's own run allocates 8,193 tokens of cache: 8,389,632 B, as that run
        // reported; its activations are the long run's prefill's to the byte.
        assert_eq!(first.kv_bytes, 8_389_632);
        assert_eq!(first.kv_bytes_measured, Some(8_389_632));
        let extra = 8_454_144 - 8_389_632;
        assert_eq!(first.peak, 107_478_407 - extra);
        assert_eq!(first.prefill_peak, Some(first.peak));
        assert_eq!(first.used.prefill_peak, Some(first.used.peak));
        let act = |t: &TaskResult| t.peak - t.before - t.kv_bytes;
        assert_eq!(act(&first), act(&r));
        assert_eq!(first.seconds, 4.6);
    }

    #[test]
    fn a_growing_cache_held_the_prompts_tokens_at_the_prefill() {
        let r = long_run();
        let first = prefill_part(&r, 8192, 64, false);
        // transformers: 8,192 of the end's 8,255 tokens; the peak is the prefill's as measured.
        assert_eq!(first.kv_bytes, (8_454_144u128 * 8192 / 8255) as u64);
        assert_eq!(first.peak, 107_478_407);
    }
}
