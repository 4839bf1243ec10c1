//! `llm-oom explain snapshot.pickle`: PyTorch's own record of an out-of-memory (the allocator
//! snapshot a user dumps with `torch.cuda.memory._dump_snapshot`, or `watch`'s hook writes), read
//! without executing anything, every live byte attributed, and the verdict it supports.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::budget::Planner;
use crate::error::Result;
use crate::exit::ExitStatus;
use crate::model::resolve;
use crate::request::WorkloadRequest;
use crate::snapshot::attribute::{attribute, SnapshotReport};
use crate::snapshot::hook::status_beside;
use crate::snapshot::read_snapshot;
use crate::units::Bytes;
use crate::verdict::predicted::forecast;
use crate::verdict::rules::Code;
use crate::verdict::snapshot::from_snapshot;
use crate::verdict::{Cause, Contributing, Evidence, Verdict};

#[derive(Debug, Clone)]
pub struct SnapshotRequest {
    pub path: PathBuf,
    /// The model and workload (`--model`, `-p`, `-n`, `-b`, `--vram`): what was still to come.
    pub plan: Option<WorkloadRequest>,
}

/// `plan`'s figures for the workload beside the record.
#[derive(Debug, Clone, Serialize)]
pub struct PlanFigures {
    pub model: String,
    pub weights_bytes: u64,
    pub kv_cache_bytes: u64,
    pub activations_bytes: u64,
    pub peak_bytes: u64,
    pub vram_bytes: u64,
    pub cause: Cause,
}

/// Field names are the JSON contract (`command` stays "explain": it is what the user ran).
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotExplainReport {
    pub command: &'static str,
    pub version: &'static str,
    /// Always `pytorch_snapshot`: what was read.
    pub source: &'static str,
    pub file: String,
    pub verdict: Verdict,
    pub record: SnapshotReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanFigures>,
}

impl SnapshotExplainReport {
    pub fn exit_status(&self) -> ExitStatus {
        ExitStatus::of(&self.verdict)
    }
}

/// Whether `path` is a pickle (protocol 2 or later starts with 0x80 and the protocol number), so
/// `explain` reads it as a snapshot rather than as a log.
pub fn is_snapshot(path: &Path) -> bool {
    let mut head = [0u8; 2];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| head[0] == 0x80 && (2..=5).contains(&head[1]))
}

pub fn explain_snapshot(req: &SnapshotRequest) -> Result<SnapshotExplainReport> {
    let snap = read_snapshot(&req.path)?;
    // The hook's status beside the record gives what `watch` reads with it: the failed request
    // and the process's limit, so both answer alike.
    let beside = status_beside(&req.path);
    let record = crate::verdict::snapshot::settle(
        attribute(&snap).with_observed(beside.as_ref().and_then(|s| s.oom.as_ref())),
    );
    let mut verdict = from_snapshot(&record);
    let plan = match &req.plan {
        Some(asked) => Some(price(asked, &record)?),
        None => None,
    };
    if let Some(p) = &plan {
        weigh(&mut verdict, &record, p);
    }
    Ok(SnapshotExplainReport {
        command: "explain",
        version: env!("CARGO_PKG_VERSION"),
        source: "pytorch_snapshot",
        file: req.path.display().to_string(),
        verdict,
        record,
        plan,
    })
}

/// `plan` for the user's workload on the card (`--vram`, else what the snapshot's process could
/// reach: its reserved segments and the device's free bytes at the failure).
fn price(asked: &WorkloadRequest, record: &SnapshotReport) -> Result<PlanFigures> {
    let spec = resolve(&asked.model)?.spec;
    let w = asked.workload(&spec);
    let reach = record
        .slack
        .reserved
        .saturating_add(record.oom.as_ref().map_or(0, |o| o.device_free));
    let vram = asked.vram.unwrap_or(reach);
    let f = forecast(&Planner::new(&spec, vram), &w);
    Ok(PlanFigures {
        model: spec.name.clone(),
        weights_bytes: f.estimate.weights,
        kv_cache_bytes: f.estimate.kv_cache,
        activations_bytes: f.estimate.activations,
        peak_bytes: f.estimate.total,
        vram_bytes: vram,
        cause: f.verdict.cause,
    })
}

/// The record tells what failed; the plan tells what was still to come. A fragmented cache is the
/// cause only when the workload fits the card: when the plan says it does not fit even in one
/// piece, what the plan names leads and fragmentation contributes (the H200's 40k-token prompt:
/// 3.29 GiB cached free would have held the 1.07 GiB request, but the prefill needs 25.8 GiB of
/// the 24).
fn weigh(verdict: &mut Verdict, record: &SnapshotReport, p: &PlanFigures) {
    verdict.evidence.push(Evidence::bytes(
        format!(
            "plan for {}: weights {}, KV cache {}, activations {}, peak {} on a {} card ({})",
            p.model,
            Bytes(p.weights_bytes),
            Bytes(p.kv_cache_bytes),
            Bytes(p.activations_bytes),
            Bytes(p.peak_bytes),
            Bytes(p.vram_bytes),
            p.cause
        ),
        p.peak_bytes,
    ));
    // The plan calls it concurrency when one sequence fits and the asked number does not: the
    // record's activations or cache are then the part the batch multiplied (the H200's 24 ×
    // (4,096 + 256): the MLP of the batch failed).
    if p.cause == Cause::Concurrency && matches!(verdict.cause, Cause::Activations | Cause::KvCache)
    {
        let part = verdict.cause;
        verdict.contributing.push(Contributing {
            cause: part,
            evidence: Evidence::bytes(
                format!("the {part} of the batch is what failed"),
                record.oom.as_ref().map_or(0, |o| o.request),
            ),
        });
        verdict.cause = Cause::Concurrency;
        verdict.rule = Some(Code::R8);
        verdict.summary = format!(
            "concurrency: one sequence fits the {} card and the batch does not (plan: peak {}); the record shows its {part} failing",
            Bytes(p.vram_bytes),
            Bytes(p.peak_bytes)
        );
        return;
    }
    if verdict.cause == Cause::Fragmentation && !matches!(p.cause, Cause::None | Cause::Unknown) {
        verdict.contributing.push(Contributing {
            cause: Cause::Fragmentation,
            evidence: Evidence::bytes(
                "the cache held the failed request in free pieces",
                record.slack.cached_free,
            ),
        });
        verdict.cause = p.cause;
        verdict.rule = Some(Code::R8);
        verdict.summary = format!(
            "{}: the workload needs {} on the {} card even with the cache in one piece (plan); the allocator's {} of free pieces only made it fail sooner",
            p.cause,
            Bytes(p.peak_bytes),
            Bytes(p.vram_bytes),
            Bytes(record.slack.cached_free)
        );
        return;
    }
    // The other way round: the whole workload fits the card in one piece (plan), yet the record
    // ran out with free pieces that add up to the request and none that holds it — the record
    // alone could not tell this from a workload that goes on growing; the plan can.
    let holes = record.oom.as_ref().is_some_and(|o| {
        o.request > 0
            && record.slack.cached_free >= o.request
            && record.slack.largest_free_block < o.request
    });
    if p.cause == Cause::None && holes && verdict.cause != Cause::Fragmentation {
        let was = verdict.cause;
        verdict
            .contributing
            .retain(|c| c.cause != Cause::Fragmentation);
        verdict.cause = Cause::Fragmentation;
        verdict.stage = crate::verdict::Stage::Fragmentation;
        verdict.rule = Some(Code::R8);
        verdict.confidence = verdict.confidence.max(0.7);
        verdict.summary = format!(
            "fragmentation: the workload fits the {} card in one piece (plan: peak {}), yet the request of {} found no free block that large among the {} cached in pieces (the record alone read {was})",
            Bytes(p.vram_bytes),
            Bytes(p.peak_bytes),
            Bytes(record.oom.as_ref().map_or(0, |o| o.request)),
            Bytes(record.slack.cached_free)
        );
    }
}
