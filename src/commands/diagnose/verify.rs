//! `--verify`: run the failing workload again with the first remedy the probe can apply (a
//! shorter prompt, fewer new tokens, fewer sequences, SDPA-like attention) and record whether it
//! fits on this device.

use super::record::from_reply;
use super::Progress;
use crate::error::Result;
use crate::estimate::Workload;
use crate::probe::protocol::{GenerateTask, Outcome, Task};
use crate::probe::session::Session;
use crate::units::group;
use crate::verdict::measured::StageRecord;
use crate::verdict::remedy::Change;
use crate::verdict::{Remedy, Stage};

pub fn verify(
    session: &mut Session,
    remedies: &mut [Remedy],
    w: &Workload,
    stage: Stage,
    weights: u64,
    progress: &mut dyn Progress,
) -> Result<(Option<String>, Option<StageRecord>)> {
    if remedies.is_empty() {
        return Ok((
            Some("--verify: nothing to verify, no stage ran out of memory".into()),
            None,
        ));
    }
    let Some(r) = remedies.iter_mut().find(|r| {
        r.fits()
            && matches!(
                r.change,
                Change::TruncatePrompt(_)
                    | Change::CapNewTokens(_)
                    | Change::LimitConcurrency(_)
                    | Change::UseSdpa
            )
    }) else {
        return Ok((
            Some("--verify: no remedy the probe can apply by itself (quantization and other engines are priced, not run)".into()),
            None,
        ));
    };
    progress.stage("verify");
    let (mut p, mut n, mut b, mut eager) = (w.prompt_tokens, w.max_new_tokens, w.batch, None);
    match r.change {
        Change::TruncatePrompt(x) => p = x,
        Change::CapNewTokens(x) => n = x,
        Change::LimitConcurrency(x) => b = x,
        Change::UseSdpa => eager = Some(false),
        _ => {}
    }
    let task = GenerateTask {
        label: "verify".into(),
        prompt_tokens: p as usize,
        new_tokens: n as usize,
        batch: b as usize,
        decode_steps: (n as usize).saturating_sub(1).min(2),
        eager,
    };
    let detail = format!(
        "{} + {} tokens × {b} with: {}",
        group(p),
        group(n),
        r.action
    );
    let record = from_reply(stage, session.run(&Task::Generate(task))?, weights, &detail);
    r.verified = Some(record.outcome == Outcome::Ok);
    Ok((None, Some(record)))
}
