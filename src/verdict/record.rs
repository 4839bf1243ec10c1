//! One evidence record: the figures every road to a verdict reads, whichever evidence filled them
//! — PyTorch's out-of-memory message and the log around it (`explain`, `watch`), PyTorch's
//! allocator record (`explain` of a snapshot, `watch`'s hook), the probe's stages (`diagnose`) —
//! so a verdict carries the numbers it was decided from (`Verdict::record`, `--json`'s
//! `verdict.record`) and readers of the same out-of-memory can be checked against each other
//! (tests/same_oom.rs). Each figure is `None` where the evidence does not give it.

use serde::Serialize;

use super::measured::{CardFacts, StageOutcome, StageRecord};
use super::Stage;
use crate::logparse::hints::Context;
use crate::logparse::parse::{Event, Finding, Source as LogSource, TorchOom};
use crate::meter::host::Part;
use crate::snapshot::attribute::{OomRecord, Slack, SnapshotReport, Summary};
use crate::snapshot::classify::Component;

/// The evidence that filled a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// PyTorch's `CUDA out of memory` message and the log around it.
    TorchMessage,
    /// The program's own output: its `batch= … seq= …` line.
    ProgramOutput,
    /// PyTorch's allocator record (`torch.cuda.memory._snapshot()`), with the hook's OOM observer.
    AllocatorRecord,
    /// The probe's measured stages and what it knows about the card (`diagnose`).
    ProbeStages,
    /// Another engine's out-of-memory line (vLLM, llama.cpp, TGI, TensorRT-LLM, the kernel …)
    /// and the log around it: its start-up figures, the device lines, the model it names.
    LogText,
    /// What `watch` saw itself: NVML's card total and the other processes on it, the most this
    /// process held, the command it ran.
    Observer,
}

impl Source {
    /// How directly it measures memory: the allocator's own record over what a message printed
    /// (rounded to two decimals, at the failure) over what `watch` sampled (peaks over the run,
    /// a sampling interval apart) over a program's line.
    fn rank(self) -> u8 {
        match self {
            Source::AllocatorRecord | Source::ProbeStages => 4,
            Source::TorchMessage | Source::LogText => 3,
            Source::Observer => 2,
            Source::ProgramOutput => 1,
        }
    }
}

/// Which figures one source filled; when records were merged, `overruled` names the figures it
/// also had where a more direct source's were kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provenance {
    pub from: Source,
    pub figures: Vec<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overruled: Vec<&'static str>,
}

/// Live bytes by what holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LiveByRole {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub activations: Option<u64>,
    /// Live bytes of a known origin that is none of the above (the program's own tensors; the
    /// probe's CUDA context and libraries).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other: Option<u64>,
    /// Live bytes allocated while the allocator's history was off: no stack says whose.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unattributed: Option<u64>,
}

/// What a failed request was for, in [`LiveByRole`]'s parts (the allocator record's stack of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Weights,
    KvCache,
    /// Any forward's buffer: attention, MLP, logits, embeddings, norms, a layer's hidden states.
    Activations,
    Other,
    /// Requested while the allocator's history was off: no stack says whose.
    Unattributed,
}

impl Role {
    /// The part the probe's meter says a failed allocation was for.
    pub fn of_part(p: Part) -> Role {
        match p {
            Part::Weights => Role::Weights,
            Part::KvCache => Role::KvCache,
            Part::Activations => Role::Activations,
            Part::Other => Role::Other,
        }
    }

    /// The part an allocator-record component belongs to.
    pub fn of(c: Component) -> Role {
        match c {
            Component::Weights => Role::Weights,
            Component::KvCache => Role::KvCache,
            Component::Other => Role::Other,
            Component::Unattributed => Role::Unattributed,
            Component::Attention
            | Component::Mlp
            | Component::Logits
            | Component::Embeddings
            | Component::Norm
            | Component::LayerActivations => Role::Activations,
        }
    }
}

/// What ran: sequences, prompt tokens, new tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Workload {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// Prompt tokens (the sequence length a program's `seq=` prints).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_tokens: Option<u64>,
}

/// The figures of one out-of-memory, as the evidence gave them (bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemoryRecord {
    /// The card's total memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card_total: Option<u64>,
    /// What this process may use: a per-process cap (`set_per_process_memory_fraction`,
    /// PyTorch's "N allowed;"), else the card.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Whether the limit is a smaller card emulated on purpose (`diagnose --vram-limit`): other
    /// processes on the device are then not the question. Only the probe knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_emulated: Option<bool>,
    /// Free on the card as CUDA reported it at the failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free: Option<u64>,
    /// Everything this process held on the device (CUDA context included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub this_process: Option<u64>,
    /// In live tensors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocated: Option<u64>,
    /// Cached by the allocator, in no tensor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved_unallocated: Option<u64>,
    /// Reserved by the allocator: the allocator record's segments, live and cached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest_free_block: Option<u64>,
    /// Held by other processes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_processes: Option<u64>,
    /// The allocation that failed: as PyTorch's message prints it, what the allocator asked the
    /// driver for (`driver_request`); in the allocator record, the block's own size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<u64>,
    /// The part the failed request was for (the allocator record's stack of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_for: Option<Role>,
    /// What the failing step needed: what this process held at the failure (the failed stage's
    /// peak, when that is higher) plus the request. The probe's stages give it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub need: Option<u64>,
    /// Entries in the allocator record's trace: with no failed request, some entries say the
    /// allocator never failed while it recorded; none, that history was off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocator_events: Option<u64>,
    #[serde(skip_serializing_if = "LiveByRole::is_empty")]
    pub live: LiveByRole,
    /// The model's weights in the dtype it ran, exact from its shapes (the probe's), where
    /// `live.weights` is what was resident at the moment (part of them, when a load failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_weights: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<Stage>,
    #[serde(skip_serializing_if = "Workload::is_empty")]
    pub workload: Workload,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Who printed it: `pytorch`, `transformers`, `vllm` …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_version: Option<String>,
    /// The most host memory the program's process tree held (`watch`'s timeline).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_peak: Option<u64>,
    /// The command line `watch` ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    pub source: Vec<Provenance>,
}

impl LiveByRole {
    fn is_empty(&self) -> bool {
        *self == LiveByRole::default()
    }
}

impl Workload {
    fn is_empty(&self) -> bool {
        *self == Workload::default()
    }
}

/// The record's figures, named once, in the record's order: `filled` lists those a record has,
/// and `take_missing` fills one record's missing figures from another (`merge`).
macro_rules! figures {
    ($($name:literal => $($f:ident).+),* $(,)?) => {
        impl MemoryRecord {
            /// The names of the figures it has, in the record's order.
            pub fn filled(&self) -> Vec<&'static str> {
                let mut names = Vec::new();
                $(
                    if self.$($f).+.is_some() {
                        names.push($name);
                    }
                )*
                names
            }

            /// Fills each figure it lacks from `from`: the names taken, and the names both had
            /// (its own value kept: `from`'s is overruled).
            fn take_missing(&mut self, from: &MemoryRecord) -> (Vec<&'static str>, Vec<&'static str>) {
                let (mut kept, mut over) = (Vec::new(), Vec::new());
                $(
                    match (&self.$($f).+, &from.$($f).+) {
                        (None, Some(_)) => {
                            self.$($f).+ = from.$($f).+.clone();
                            kept.push($name);
                        }
                        (Some(_), Some(_)) => over.push($name),
                        _ => {}
                    }
                )*
                (kept, over)
            }
        }
    };
}

figures!(
    "card_total" => card_total,
    "limit" => limit,
    "limit_emulated" => limit_emulated,
    "free" => free,
    "this_process" => this_process,
    "allocated" => allocated,
    "reserved_unallocated" => reserved_unallocated,
    "reserved" => reserved,
    "largest_free_block" => largest_free_block,
    "other_processes" => other_processes,
    "request" => request,
    "request_for" => request_for,
    "need" => need,
    "allocator_events" => allocator_events,
    "live.weights" => live.weights,
    "live.kv_cache" => live.kv_cache,
    "live.activations" => live.activations,
    "live.other" => live.other,
    "live.unattributed" => live.unattributed,
    "model_weights" => model_weights,
    "stage" => stage,
    "workload.batch" => workload.batch,
    "workload.prompt_tokens" => workload.prompt_tokens,
    "workload.new_tokens" => workload.new_tokens,
    "model" => model,
    "engine" => engine,
    "engine_version" => engine_version,
    "host_peak" => host_peak,
    "command" => command,
);

impl MemoryRecord {
    fn sourced(mut self, from: Source) -> Self {
        self.source = vec![Provenance {
            from,
            figures: self.filled(),
            overruled: Vec::new(),
        }];
        self
    }

    /// PyTorch's message at line `line` and what the log around it adds: the stage its markers
    /// show, the model it names, and the program's batch line nearest the error (stdout and
    /// stderr interleave, so it may come just after it). What `verdict::read::Accounting` views.
    pub fn from_torch(t: &TorchOom, ctx: &Context, line: usize) -> Self {
        let others = super::read::others(t);
        let stage = super::read::stage_near(ctx, line);
        MemoryRecord {
            card_total: t.total,
            limit: t.allowed.or(t.total),
            free: t.free,
            this_process: t.this_process,
            allocated: t.allocated_by_pytorch,
            reserved_unallocated: t.reserved_unallocated,
            limit_emulated: None,
            reserved: None,
            largest_free_block: None,
            // Listed processes say so even when they hold nothing; an inferred remainder only
            // when it counts (`read::others`).
            other_processes: (others > 0 || !t.processes.is_empty()).then_some(others),
            request: t.requested,
            request_for: None,
            need: None,
            allocator_events: None,
            live: LiveByRole::default(),
            model_weights: None,
            stage: (stage != Stage::Unknown).then_some(stage),
            workload: Workload::default(),
            model: ctx.model.as_ref().map(|m| m.name.clone()),
            engine: Some("pytorch".into()),
            engine_version: version_of(ctx, LogSource::Pytorch),
            host_peak: None,
            command: None,
            source: Vec::new(),
        }
        .sourced(Source::TorchMessage)
        .with_program_batch(batch_line(ctx, line))
    }

    /// The program's own `batch= … seq= …` line (`batch_line`), a source of its own: the
    /// workload's batch and prompt tokens.
    fn with_program_batch(mut self, line: Option<(usize, u64, u64)>) -> Self {
        if let Some((_, batch, seq)) = line {
            self.workload = Workload {
                batch: Some(batch),
                prompt_tokens: Some(seq),
                new_tokens: None,
            };
            self.source.push(Provenance {
                from: Source::ProgramOutput,
                figures: vec!["workload.batch", "workload.prompt_tokens"],
                overruled: Vec::new(),
            });
        }
        self
    }

    /// Any engine's out-of-memory line (`finding`) and what the log around it says: the figures
    /// the event itself prints (the request, what was free, the card, what was held), the card's
    /// total and what others held before anything was allocated (`Context::free_at_start`),
    /// vLLM's start-up figures (the card, `gpu_memory_utilization`'s share of it as the limit,
    /// the KV cache it sized), the weights the engine says it loaded, the stage (`stage`: the one
    /// the verdict was decided at, else what the log's markers show), the workload (the program's batch line, else the figures the log states), the
    /// model, and who printed it with the version it prints. PyTorch's message is
    /// [`MemoryRecord::from_torch`]; every other event's verdict carries this one.
    pub fn from_log(finding: &Finding, ctx: &Context, stage: Stage) -> Self {
        if let Event::TorchOom(t) = &finding.event {
            return Self::from_torch(t, ctx, finding.line);
        }
        let mut rec = MemoryRecord::default();
        match &finding.event {
            Event::TorchMemorySummary {
                allocated,
                reserved,
                ..
            } => {
                rec.allocated = *allocated;
                rec.reserved_unallocated =
                    reserved.zip(*allocated).map(|(r, a)| r.saturating_sub(a));
            }
            Event::VllmKvCapacity {
                needed, available, ..
            } => {
                rec.request = *needed;
                rec.live.kv_cache = *available;
            }
            Event::VllmStartupFree {
                free,
                total,
                utilization,
            } => {
                rec.free = *free;
                rec.card_total = *total;
                rec.limit = share(*total, *utilization);
            }
            Event::VllmCpuKv {
                available,
                requested,
            } => {
                rec.request = *requested;
                rec.free = *available;
            }
            Event::LlamaCppBuffer { bytes, .. } => rec.request = *bytes,
            Event::EndsAtAllocation {
                bytes, working_set, ..
            } => {
                rec.request = *bytes;
                rec.limit = *working_set;
            }
            Event::MetalWorkingSet {
                before,
                working_set,
                ..
            } => {
                rec.allocated = Some(*before);
                rec.limit = Some(*working_set);
            }
            Event::TensorrtOom { bytes } => rec.request = *bytes,
            Event::TensorrtComponent { total, free, .. } => {
                rec.card_total = *total;
                rec.free = *free;
            }
            Event::MlxBufferTooLarge { requested, .. } => rec.request = *requested,
            Event::DeviceBufferOom {
                requested,
                total,
                allocated,
                free,
            } => {
                rec.request = *requested;
                rec.card_total = *total;
                rec.allocated = *allocated;
                rec.free = *free;
            }
            Event::DeviceFragmented {
                requested,
                free,
                largest,
            } => {
                rec.request = Some(*requested);
                rec.free = Some(*free);
                rec.largest_free_block = Some(*largest);
            }
            Event::HostOomKiller { rss, .. } => rec.this_process = *rss,
            Event::HostMemoryShort { needed, available } => {
                rec.request = *needed;
                rec.free = *available;
            }
            Event::HostAllocFailed { bytes } => rec.request = *bytes,
            Event::Catalogued(c) => {
                rec.request = c.needed;
                rec.free = c.available;
            }
            _ => {}
        }
        // What the log around it adds, where the event did not say.
        let v = &ctx.vllm;
        if let Some((_, total, free)) = ctx.free_at_start.filter(|s| s.0 <= finding.line) {
            rec.card_total = rec.card_total.or(Some(total));
            rec.other_processes = Some(total.saturating_sub(free));
        }
        rec.card_total = rec.card_total.or(v.total);
        if rec.limit.is_none() && finding.source == LogSource::Vllm {
            rec.limit = share(rec.card_total, v.utilization);
        }
        if rec.live.kv_cache.is_none() && finding.source == LogSource::Vllm {
            rec.live.kv_cache = v.available_kv;
        }
        rec.live.weights = ctx
            .weights_loaded
            .filter(|w| w.0 <= finding.line)
            .map(|w| w.1);
        let stage = match stage {
            Stage::Unknown => super::read::stage_near(ctx, finding.line),
            s => s,
        };
        rec.stage = (stage != Stage::Unknown).then_some(stage);
        // The workload the log states, unless the program's own batch line says it.
        let batch = batch_line(ctx, finding.line);
        if batch.is_none() {
            rec.workload = Workload {
                batch: ctx.workload.batch,
                prompt_tokens: ctx.workload.seq_len,
                new_tokens: None,
            };
        }
        rec.model = ctx.model.as_ref().map(|m| m.name.clone());
        rec.engine = serde_json::to_value(finding.source)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string));
        rec.engine_version = version_of(ctx, finding.source);
        rec.sourced(Source::LogText).with_program_batch(batch)
    }

    /// PyTorch's allocator record, attributed: the failed request, what it was for and what CUDA
    /// had free (the trace's `oom` entry or the hook's observer), the limit the observer reported,
    /// what the allocator reserved, its cache and the cache's largest block, live bytes by role,
    /// and how many entries its trace holds — every figure the record rules
    /// ([`crate::verdict::snapshot::decide`]) decide by.
    pub fn from_snapshot(r: &SnapshotReport) -> Self {
        let s = &r.summary;
        let attributed = r.history || s.unattributed > 0;
        let mut rec = Self::allocator_figures(s, &r.slack, r.oom.as_ref(), r.limit);
        rec.live = LiveByRole {
            weights: attributed.then_some(s.weights),
            kv_cache: attributed.then_some(s.kv_cache),
            activations: attributed.then_some(s.activations),
            other: attributed.then_some(s.other),
            unattributed: Some(s.unattributed),
        };
        rec.allocator_events = Some(u64::try_from(r.trace_entries).unwrap_or(u64::MAX));
        rec.sourced(Source::AllocatorRecord)
    }

    /// The allocator record's figures from its parts, before the report is whole: what
    /// `snapshot::attribute` hands the record rules for the summary's cause. Live bytes by role
    /// are all filled (a part without bytes is 0); no source is named.
    pub(crate) fn allocator_figures(
        s: &Summary,
        slack: &Slack,
        oom: Option<&OomRecord>,
        limit: Option<u64>,
    ) -> Self {
        MemoryRecord {
            limit,
            free: oom.map(|o| o.device_free),
            allocated: Some(slack.live),
            reserved_unallocated: Some(slack.cached_free),
            reserved: Some(slack.reserved),
            largest_free_block: Some(slack.largest_free_block),
            request: oom.map(|o| o.request),
            request_for: oom.and_then(|o| o.component).map(Role::of),
            live: LiveByRole {
                weights: Some(s.weights),
                kv_cache: Some(s.kv_cache),
                activations: Some(s.activations),
                other: Some(s.other),
                unattributed: Some(s.unattributed),
            },
            engine: Some("pytorch".into()),
            ..MemoryRecord::default()
        }
    }

    /// The probe's stages: the stage that ran out (else the last that ran) with its workload,
    /// its request and the part it was for, what was held and cached, what the step needed,
    /// and its peak by component; the card it ran against (the limit, and whether
    /// `--vram-limit` emulated it), other processes on it (unless the limit was emulated) and
    /// the model's exact weight bytes. Everything the rules D1–D3 read
    /// (`measured::oom_rule`).
    pub fn from_stages(stages: &[StageRecord], card: &CardFacts) -> Self {
        let failed = stages.iter().find(|s| s.outcome == StageOutcome::Oom);
        let at = failed.or_else(|| stages.iter().rev().find(|s| s.outcome == StageOutcome::Ok));
        let oom = failed.and_then(|s| s.oom.as_ref());
        // A stage that ran out without the probe's facts of it held its peak and asked for
        // nothing known.
        let need = failed.map(|s| {
            let (held, requested) = oom.map_or((s.memory.peak, 0), |o| {
                (o.held.max(s.memory.peak), o.requested.unwrap_or(0))
            });
            held.saturating_add(requested)
        });
        let others = card
            .others
            .iter()
            .filter_map(|p| p.bytes)
            .fold(0u64, u64::saturating_add);
        MemoryRecord {
            // The card the stages ran against is the limit: a device with ballast beside it, or an
            // emulated one; the device's own total is not among the probe's card facts.
            limit: Some(card.capacity),
            limit_emulated: Some(card.emulated_limit.is_some()),
            free: oom.and_then(|o| o.free),
            this_process: oom.map(|o| o.held),
            reserved_unallocated: oom.and_then(|o| o.cached),
            largest_free_block: oom.and_then(|o| o.largest_block),
            other_processes: (card.emulated_limit.is_none()).then_some(others),
            request: oom.and_then(|o| o.requested),
            request_for: oom.map(|o| Role::of_part(o.part)),
            need,
            live: at.map_or_else(LiveByRole::default, |s| {
                let c = s.components;
                // A stage that ran out lists what it needed; live at the failure were the
                // weights, the cache and the rest of what the probe held, not the whole need.
                let activations = match oom {
                    Some(o) => o
                        .held
                        .saturating_sub(
                            c.weights.saturating_add(c.kv_cache).saturating_add(c.other),
                        )
                        .min(c.activations),
                    None => c.activations,
                };
                LiveByRole {
                    weights: Some(c.weights),
                    kv_cache: Some(c.kv_cache),
                    activations: Some(activations),
                    other: Some(c.other),
                    unattributed: None,
                }
            }),
            model_weights: Some(card.weights_bytes),
            stage: failed.map(|s| s.name),
            workload: at.map_or_else(Workload::default, |s| Workload {
                batch: s.batch,
                prompt_tokens: s.prompt_tokens,
                new_tokens: s.new_tokens,
            }),
            ..MemoryRecord::default()
        }
        .sourced(Source::ProbeStages)
    }

    /// What `watch` measured itself while the program ran: NVML's total for the card
    /// (`card_total`), the most other processes held on it (`other_processes`), the most the
    /// program's process tree held on it (`this_process`) and in host memory (`host_peak`), and
    /// the command it ran. Peaks over the run, sampled: a message's figures at the failure are
    /// kept over them when records are merged.
    pub fn observed(
        card_total: Option<u64>,
        other_processes: Option<u64>,
        this_process: Option<u64>,
        host_peak: u64,
        command: &[String],
    ) -> Self {
        MemoryRecord {
            card_total,
            other_processes,
            this_process,
            // No sample, no figure: a program too short for the sampler shows none, not 0 B.
            host_peak: (host_peak > 0).then_some(host_peak),
            command: (!command.is_empty()).then(|| command.to_vec()),
            ..MemoryRecord::default()
        }
        .sourced(Source::Observer)
    }

    /// Two records of one out-of-memory as one (`watch`: the allocator record, the log's message
    /// and the program's batch line, what `watch` measured). A figure both have keeps the more
    /// direct source's value (`Source::rank`: the allocator record over the log text over the
    /// observer's peaks); `source` lists what each filled and what it had that was overruled.
    pub fn merge(self, other: MemoryRecord) -> MemoryRecord {
        let rank = |r: &MemoryRecord| r.source.iter().map(|p| p.from.rank()).max().unwrap_or(0);
        let (mut into, from) = if rank(&other) > rank(&self) {
            (other, self)
        } else {
            (self, other)
        };
        let (kept, over) = into.take_missing(&from);
        for p in from.source {
            let figures: Vec<_> = p
                .figures
                .iter()
                .copied()
                .filter(|f| kept.contains(f))
                .collect();
            let overruled: Vec<_> = p
                .figures
                .iter()
                .chain(p.overruled.iter())
                .copied()
                .filter(|f| over.contains(f))
                .collect();
            if !figures.is_empty() || !overruled.is_empty() {
                into.source.push(Provenance {
                    from: p.from,
                    figures,
                    overruled,
                });
            }
        }
        into
    }
}

/// What PyTorch's caching allocator asks the driver for a request of `bytes`: the figure its
/// message prints ("Tried to allocate"), where the allocator record's `oom` entry keeps the
/// block's own size (`read::segment`).
pub fn driver_request(bytes: u64) -> u64 {
    super::read::segment(bytes)
}

/// `utilization` of `total` (vLLM's `gpu_memory_utilization`: the share of the card it may use).
fn share(total: Option<u64>, utilization: Option<f64>) -> Option<u64> {
    let (t, u) = (total?, utilization?);
    // A fraction of a byte count: the float product is exact enough, and clamped to the card.
    (u.is_finite() && u > 0.0).then(|| ((t as f64) * u.min(1.0)) as u64)
}

/// The version the log prints of `engine`, if it does.
fn version_of(ctx: &Context, engine: LogSource) -> Option<String> {
    ctx.engine_versions
        .iter()
        .find(|e| e.0 == engine)
        .map(|e| e.1.clone())
}

/// The program's `batch= … seq= …` line nearest line `at`: before it, or up to 20 lines after
/// (stdout and stderr interleave in a captured log) — (line, batch, sequence length).
pub(crate) fn batch_line(ctx: &Context, at: usize) -> Option<(usize, u64, u64)> {
    ctx.batch_seq
        .iter()
        .filter(|b| b.0 <= at || b.0 - at <= 20)
        .min_by_key(|b| b.0.abs_diff(at))
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logparse::hints::ModelHint;
    use crate::probe::protocol::OomFacts;
    use crate::verdict::measured::{Components, StageMemory};

    const GIB: u64 = 1 << 30;

    fn capped_message() -> TorchOom {
        TorchOom {
            requested: Some(GIB),
            total: Some(80 * GIB),
            free: Some(60 * GIB),
            this_process: Some(19 * GIB),
            allowed: Some(20 * GIB),
            allocated_by_pytorch: Some(17 * GIB),
            reserved_unallocated: Some(2 * GIB),
            ..TorchOom::default()
        }
    }

    #[test]
    fn a_torch_message_fills_its_figures_and_the_batch_line_beside_it() {
        let mut ctx = Context::default();
        ctx.batch_seq = vec![(3, 48, 2048)];
        ctx.generation_lines = vec![8];
        ctx.model = Some(ModelHint {
            name: "mistralai/Mistral-7B".into(),
            line: 1,
        });
        let r = MemoryRecord::from_torch(&capped_message(), &ctx, 10);
        assert_eq!(r.card_total, Some(80 * GIB));
        assert_eq!(r.limit, Some(20 * GIB));
        assert_eq!(r.free, Some(60 * GIB));
        assert_eq!(r.request, Some(GIB));
        assert_eq!(r.reserved_unallocated, Some(2 * GIB));
        assert_eq!(r.other_processes, None);
        assert_eq!(r.stage, Some(Stage::FirstToken));
        assert_eq!(r.workload.batch, Some(48));
        assert_eq!(r.workload.prompt_tokens, Some(2048));
        assert_eq!(r.model.as_deref(), Some("mistralai/Mistral-7B"));
        assert_eq!(r.source[0].from, Source::TorchMessage);
        assert!(r.source[0].figures.contains(&"request"));
        assert_eq!(r.source[1].from, Source::ProgramOutput);
        // Without a cap the card is the limit.
        let bare = TorchOom {
            allowed: None,
            ..capped_message()
        };
        let r = MemoryRecord::from_torch(&bare, &Context::default(), 10);
        assert_eq!(r.limit, Some(80 * GIB));
        assert_eq!(r.workload, Workload::default());
        assert_eq!(r.source.len(), 1);
    }

    fn stage(name: Stage, outcome: StageOutcome) -> StageRecord {
        StageRecord {
            outcome,
            components: Components {
                weights: 14 * GIB,
                kv_cache: GIB,
                activations: 5 * GIB,
                other: GIB / 2,
            },
            memory: StageMemory::default(),
            ..StageRecord::skipped(name, "")
        }
        .sized(2048, 16, 48)
    }

    #[test]
    fn probe_stages_fill_the_failed_stage_and_the_card() {
        let mut failed = stage(Stage::Concurrency, StageOutcome::Oom);
        failed.oom = Some(OomFacts {
            requested: Some(GIB),
            held: 20 * GIB,
            part: crate::meter::host::Part::Activations,
            message: String::new(),
            free: Some(GIB / 2),
            largest_block: Some(GIB / 4),
            cached: Some(2 * GIB),
            emulated: false,
        });
        let card = CardFacts {
            capacity: 21 * GIB,
            emulated_limit: None,
            others: Vec::new(),
            weights_bytes: 14 * GIB,
        };
        let r =
            MemoryRecord::from_stages(&[stage(Stage::FirstToken, StageOutcome::Ok), failed], &card);
        assert_eq!(r.limit, Some(21 * GIB));
        assert_eq!(r.card_total, None);
        assert_eq!(r.request, Some(GIB));
        assert_eq!(r.this_process, Some(20 * GIB));
        assert_eq!(r.reserved_unallocated, Some(2 * GIB));
        assert_eq!(r.largest_free_block, Some(GIB / 4));
        assert_eq!(r.other_processes, Some(0));
        assert_eq!(r.stage, Some(Stage::Concurrency));
        assert_eq!(r.workload.batch, Some(48));
        // It needed 5 GiB of activations; live at the failure: held less weights, cache, other.
        assert_eq!(
            r.live.activations,
            Some(20 * GIB - 14 * GIB - GIB - GIB / 2)
        );
        // What the rules D1–D3 read beside them: the part asked for, held plus the request, the
        // card as the device gave it, the model's exact weights.
        assert_eq!(r.request_for, Some(Role::Activations));
        assert_eq!(r.need, Some(21 * GIB));
        assert_eq!(r.limit_emulated, Some(false));
        assert_eq!(r.model_weights, Some(14 * GIB));
        assert_eq!(r.source[0].from, Source::ProbeStages);
        // Nothing ran out: the last stage that ran, no request.
        let r = MemoryRecord::from_stages(&[stage(Stage::FirstToken, StageOutcome::Ok)], &card);
        assert_eq!(r.request, None);
        assert_eq!((r.request_for, r.need), (None, None));
        assert_eq!(r.stage, None);
        assert_eq!(r.live.weights, Some(14 * GIB));
    }

    #[test]
    fn an_allocator_record_fills_the_cache_and_live_bytes_by_role() {
        let snap = crate::snapshot::Snapshot::default();
        let r = crate::snapshot::attribute::attribute(&snap).with_failed_request(GIB, 3 * GIB);
        let r = r.with_limit(20 * GIB);
        let rec = MemoryRecord::from_snapshot(&r);
        assert_eq!(rec.request, Some(GIB));
        assert_eq!(rec.free, Some(3 * GIB));
        assert_eq!(rec.limit, Some(20 * GIB));
        assert_eq!(rec.reserved_unallocated, Some(0));
        assert_eq!(rec.largest_free_block, Some(0));
        assert_eq!(rec.live.unattributed, Some(0));
        assert_eq!(rec.reserved, Some(0));
        // The observer's request has no stack; an empty record's trace has no entries.
        assert_eq!(rec.request_for, None);
        assert_eq!(rec.allocator_events, Some(0));
        assert_eq!(rec.source[0].from, Source::AllocatorRecord);
        assert!(rec.source[0].figures.contains(&"allocator_events"));
    }

    /// The record a corpus log's verdict carries.
    fn log_record(log: &str) -> MemoryRecord {
        let r =
            crate::verdict::read::read_log(log.as_bytes(), crate::estimate::Engine::Transformers)
                .expect("a log");
        r.verdict
            .record
            .expect("every event's verdict carries a record")
    }

    #[test]
    fn llama_cpps_failed_buffer_is_the_request_with_its_build() {
        // "alloc_tensor_range: failed to allocate Vulkan0 buffer of size 4697620480"
        let r = log_record(include_str!(
            "../../tests/fixtures/logs/real-2026-12f/llamacpp-llama.cpp-14698.log"
        ));
        assert_eq!(r.request, Some(4_697_620_480));
        assert_eq!(r.stage, Some(Stage::Load));
        assert_eq!(r.engine.as_deref(), Some("llama_cpp"));
        assert_eq!(r.engine_version.as_deref(), Some("5908 (538cc77f)"));
        assert_eq!(r.source[0].from, Source::LogText);
        assert!(r.source[0].figures.contains(&"request"));
        // Through ollama: its model name.
        let r = log_record(include_str!(
            "../../tests/fixtures/logs/real-2026-12u/ollama-ollama-11202.log"
        ));
        assert_eq!(r.model.as_deref(), Some("deepseek-r1:671b"));
        assert!(r.request.is_some());
    }

    #[test]
    fn vllms_start_up_figures_fill_the_card_its_share_and_the_kv_cache() {
        let r = log_record(include_str!(
            "../../tests/fixtures/logs/real-2026-12/vllm-10517.log"
        ));
        let (total, limit) = (r.card_total.expect("the card"), r.limit.expect("its share"));
        assert!(limit < total);
        assert_eq!(r.live.weights, Some(14_988_800_000));
        assert!(r.live.kv_cache.is_some());
        assert_eq!(r.engine.as_deref(), Some("vllm"));
        // v1's KV capacity error: what it needed is the request.
        let r = log_record(include_str!("../../tests/fixtures/logs/vllm_v1_kv.log"));
        assert_eq!(r.request, Some(4 * GIB));
        assert!(r.live.kv_cache.is_some());
    }

    #[test]
    fn a_device_found_mostly_full_names_what_others_held() {
        // TensorFlow's device discovery: "Total memory: 7.92GiB" / "Free memory: 190.31MiB".
        let r = log_record(include_str!(
            "../../tests/fixtures/logs/real-2026-12g/tensorflow-tensorflow-8170.log"
        ));
        let (total, others) = (
            r.card_total.expect("total"),
            r.other_processes.expect("others"),
        );
        assert!(total > 7 * GIB && others > 7 * GIB && others < total);
    }

    #[test]
    fn tensorrt_llm_and_tgi_say_who_printed_it() {
        let r = log_record(include_str!(
            "../../tests/fixtures/logs/real-2026-12k/tensorrt-llm-TensorRT-LLM-1060.log"
        ));
        assert_eq!(r.engine.as_deref(), Some("tensorrt_llm"));
        assert_eq!(r.engine_version.as_deref(), Some("0.9.0.dev2024020600"));
        let r = log_record(include_str!("../../tests/fixtures/logs/tgi_prefill.log"));
        assert_eq!(r.engine.as_deref(), Some("tgi"));
        // The stage the verdict was decided at (TGI's warm-up), not the forward pass's frames.
        assert_eq!(r.stage, Some(Stage::Load));
    }

    #[test]
    fn what_watch_saw_fills_the_rest_under_the_messages_figures() {
        let command = vec!["python".to_string(), "run.py".to_string()];
        let seen = MemoryRecord::observed(
            Some(80 * GIB + 5),
            Some(3 * GIB),
            Some(20 * GIB),
            9 * GIB,
            &command,
        );
        assert_eq!(seen.command.as_deref(), Some(&command[..]));
        assert_eq!(seen.source[0].from, Source::Observer);
        assert!(seen.source[0].figures.contains(&"command"));
        let log = MemoryRecord::from_torch(&capped_message(), &Context::default(), 10);
        for m in [
            log.clone().merge(seen.clone()),
            seen.clone().merge(log.clone()),
        ] {
            // The message's figures at the failure over the sampled peaks.
            assert_eq!(m.card_total, Some(80 * GIB));
            assert_eq!(m.this_process, Some(19 * GIB));
            assert_eq!(m.source[0].from, Source::TorchMessage);
            // What only watch saw.
            assert_eq!(m.other_processes, Some(3 * GIB));
            assert_eq!(m.host_peak, Some(9 * GIB));
            assert_eq!(m.command.as_deref(), Some(&command[..]));
            let obs = m
                .source
                .iter()
                .find(|p| p.from == Source::Observer)
                .expect("observer");
            assert!(obs.figures.contains(&"other_processes"));
            assert!(obs.overruled.contains(&"card_total"));
        }
        // The allocator record over both.
        let rec = MemoryRecord {
            request: Some(GIB + 5),
            ..MemoryRecord::default()
        }
        .sourced(Source::AllocatorRecord);
        let m = rec.merge(log.merge(seen));
        assert_eq!(m.source[0].from, Source::AllocatorRecord);
        assert_eq!(m.request, Some(GIB + 5));
        assert_eq!(m.host_peak, Some(9 * GIB));
        assert!(m.source.iter().any(|p| p.from == Source::Observer));
    }

    #[test]
    fn merging_keeps_the_allocator_records_figures_and_says_so() {
        let mut ctx = Context::default();
        ctx.batch_seq = vec![(3, 48, 2048)];
        let log = MemoryRecord::from_torch(&capped_message(), &ctx, 10);
        let rec = MemoryRecord {
            limit: Some(20 * GIB - 1),
            request: Some(GIB + 5),
            largest_free_block: Some(GIB / 8),
            ..MemoryRecord::default()
        }
        .sourced(Source::AllocatorRecord);
        // Either order: the allocator record is the more direct.
        for m in [
            log.clone().merge(rec.clone()),
            rec.clone().merge(log.clone()),
        ] {
            assert_eq!(m.limit, Some(20 * GIB - 1));
            assert_eq!(m.request, Some(GIB + 5));
            assert_eq!(m.largest_free_block, Some(GIB / 8));
            assert_eq!(m.card_total, Some(80 * GIB));
            assert_eq!(m.workload.batch, Some(48));
            assert_eq!(m.source[0].from, Source::AllocatorRecord);
            let msg = m
                .source
                .iter()
                .find(|p| p.from == Source::TorchMessage)
                .expect("the message filled figures");
            assert!(msg.figures.contains(&"card_total"));
            assert!(!msg.figures.contains(&"request"));
            assert!(msg.overruled.contains(&"request"));
            assert!(msg.overruled.contains(&"limit"));
            assert!(m
                .source
                .iter()
                .any(|p| p.from == Source::ProgramOutput && p.figures.contains(&"workload.batch")));
        }
    }
}
