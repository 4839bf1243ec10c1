//! PyTorch's message: its figures as one record (`Accounting`), the ordered list of rules P1–P9
//! that decide from it (`torch`), and the evidence every PyTorch verdict carries.

use super::*;
use crate::verdict::record::MemoryRecord;

/// The figures of one PyTorch message, with what the log around it adds: a view of the
/// [`MemoryRecord`] every PyTorch rule decides from, its unknown figures read as 0 and the free
/// memory taken under the cap when one is set.
#[derive(Debug, Clone, Default)]
pub struct Accounting {
    /// The record the view is of (the verdict carries it).
    pub record: MemoryRecord,
    /// The card, or the per-process cap when one is set.
    pub total: u64,
    pub capped: bool,
    pub free: u64,
    pub this_process: Option<u64>,
    /// Live tensors.
    pub allocated: Option<u64>,
    /// Cached by the allocator, not in a tensor.
    pub reserved_unallocated: u64,
    /// Held by other processes (listed, or inferred from total − free − this process).
    pub others: u64,
    pub request: u64,
    pub stage_hint: Option<StageHint>,
}

impl Accounting {
    pub(super) fn of(t: &TorchOom, ctx: &Context, line: usize) -> Self {
        Self::view(
            MemoryRecord::from_torch(t, ctx, line),
            t.allowed.is_some(),
            hint_near(ctx, line),
        )
    }

    /// The rules' view of `record`; `capped` when the message printed a per-process cap.
    pub fn view(record: MemoryRecord, capped: bool, stage_hint: Option<StageHint>) -> Self {
        // Under a memory cap (set_per_process_memory_fraction) the card is what is allowed.
        let r = &record;
        let total = r.limit.unwrap_or(0);
        let unalloc = r.reserved_unallocated.unwrap_or(0);
        let free = match (capped, r.limit, r.this_process) {
            (true, Some(a), Some(used)) => a.saturating_sub(used),
            (true, Some(a), None) => {
                a.saturating_sub(r.allocated.unwrap_or(0).saturating_add(unalloc))
            }
            _ => r.free.unwrap_or(0),
        };
        Accounting {
            total,
            capped,
            free,
            this_process: r.this_process,
            allocated: r.allocated,
            reserved_unallocated: unalloc,
            others: r.other_processes.unwrap_or(0),
            request: r.request.unwrap_or(0),
            stage_hint,
            record,
        }
    }

    pub(super) fn short(&self) -> u64 {
        self.request.saturating_sub(self.free)
    }

    /// Live tensors fill this share of the card (0–100), when both are known.
    pub(super) fn live_pct(&self) -> Option<u64> {
        let a = self.allocated?;
        (self.total > 0).then(|| a.saturating_mul(100) / self.total)
    }
}

/// This process's CUDA context, cuBLAS workspace and other non-PyTorch memory: up to about a
/// GiB on any card, so a remainder below this is not evidence of another process.
pub(super) const CONTEXT_ALLOWANCE: u64 = 1 << 30;

/// Other processes: the listed ones (less this process), else what the card's figures leave
/// after this process — counted only when it is a quarter of the card and more than a CUDA
/// context, since the context and non-PyTorch allocations of this process are in that remainder
/// too (accelerate-idmvton-11: 68 GiB of 79 held elsewhere; peft-simplellm-46: 0.7 GiB of 14.6
/// is this process's context; transformers-pytorch-55004: 0.7 GiB of a 2 GiB card is too).
pub(crate) fn others(t: &TorchOom) -> u64 {
    let listed = t.others();
    if !t.processes.is_empty() || t.backend == Some("mps") {
        return listed;
    }
    let (Some(total), Some(free)) = (t.total, t.free) else {
        return 0;
    };
    let mine = t.this_process.or(t.reserved_total).or_else(|| {
        t.allocated_by_pytorch
            .map(|a| a.saturating_add(t.reserved_unallocated.unwrap_or(0)))
    });
    let Some(mine) = mine else {
        return 0;
    };
    let rest = total.saturating_sub(free).saturating_sub(mine);
    if rest.saturating_mul(4) >= total && rest > CONTEXT_ALLOWANCE {
        rest
    } else {
        0
    }
}

pub(super) type Rule = fn(&mut Ask, &TorchOom, &Accounting) -> Option<Decision>;

/// PyTorch's message carries the numbers: the rules run in order and the first that decides wins.
pub(super) fn torch(a: &mut Ask, t: &TorchOom) -> Decision {
    let acc = Accounting::of(t, a.ctx, a.f.line);
    a.record = Some(acc.record.clone());
    raise_cap(a, t, &acc);
    const RULES: &[Rule] = &[
        contradiction,
        other_process,
        stage_signal,
        load_or_huge,
        fragmentation,
        concurrency,
        frames,
        after_graph_capture,
        model_too_large,
    ];
    // Holes as large as the request beside live tensors that fill the limit: the part that filled
    // it is the likelier cause (four H100 runs), but a long-lived process's fragmentation looks
    // the same from one message (two H100 runs), so no other answer is confident.
    let holes_too = acc.reserved_unallocated > 0
        && acc.reserved_unallocated >= acc.request
        && acc.allocated.is_some_and(|live| {
            holes::Pool {
                live,
                unallocated: acc.reserved_unallocated,
                request: acc.request,
                limit: acc.total,
                steady: false,
            }
            .filled()
        });
    for rule in RULES {
        if let Some(mut d) = rule(a, t, &acc) {
            if holes_too && !matches!(d.cause, Cause::Fragmentation | Cause::Unknown) {
                d.confidence = d.confidence.min(0.5);
            }
            return d;
        }
    }
    let stage = stage_near(a.ctx, a.f.line);
    // Under a cap the card's free memory is not this process's: the cap is the limit.
    let free = match cap_note(t) {
        Some(note) => format!(" with {} free under the cap — {note}", Bytes(acc.free)),
        None => t
            .free
            .map(|f| format!(" with {} free", Bytes(f)))
            .unwrap_or_default(),
    };
    if acc.capped {
        a.to_decide = Some("run it under `llm-oom watch -- <the command>` (its stdout's batch and sequence length and PyTorch's allocator record say what filled the cap), or pass the workload to `llm-oom explain` (--model, --prompt-tokens, --batch, --vram <the cap>)".into());
    }
    Decision::new(
        Code::P9,
        Cause::Unknown,
        stage,
        0.3,
        format!(
            "unknown: PyTorch ran out asking for {}{free}; the log does not say what grew",
            request_text(t),
        ),
        torch_evidence(a, t, &acc),
    )
}

/// A per-process cap (`torch.cuda.set_per_process_memory_fraction`, PyTorch's "N allowed;"):
/// the cap, and what the card had free beside it.
pub(super) fn cap_note(t: &TorchOom) -> Option<String> {
    let allowed = t.allowed?;
    let card = t
        .free
        .map(|f| format!(", {} of the card were free", Bytes(f)))
        .unwrap_or_default();
    Some(format!(
        "this process was capped at {} (set_per_process_memory_fraction or a --vram-limit){card}",
        Bytes(allowed)
    ))
}

/// Under a cap with the card's room beside it, raising the cap is the first knob.
pub(super) fn raise_cap(a: &mut Ask, t: &TorchOom, acc: &Accounting) {
    let (Some(allowed), Some(card_free)) = (t.allowed, t.free) else {
        return;
    };
    if !acc.capped || card_free < acc.short().saturating_add(DRIVER_SLACK) {
        return;
    }
    let short = acc.short();
    a.remedies.push(Remedy {
        action: format!(
            "raise the per-process cap of {} — the card had {} free beside it",
            Bytes(allowed),
            Bytes(card_free)
        ),
        how: format!("torch.cuda.set_per_process_memory_fraction(f) with f above the current one (at least {} more), or a larger --vram-limit", Bytes(short.max(acc.request))),
        change: Change::LargerGpu(allowed.saturating_add(short.max(acc.request))),
        saves_bytes: None,
        new_budget: None,
        verified: None,
        per_device: Vec::new(),
    });
}

pub(super) fn request_text(t: &TorchOom) -> String {
    match (&t.requested_as_written, t.requested) {
        (Some(w), None) => format!("{w} (as written)"),
        (_, Some(r)) => Bytes(r).to_string(),
        (None, None) => "an amount the log does not give".into(),
    }
}

/// The figures as evidence, each with its line.
pub(super) fn torch_evidence(a: &Ask, t: &TorchOom, acc: &Accounting) -> Vec<Evidence> {
    let f = a.f;
    let of = if acc.total > 0 {
        Bytes(acc.total).to_string()
    } else {
        "?".into()
    };
    let cap = match cap_note(t) {
        Some(note) if acc.capped => format!(" allowed: {note}"),
        _ => String::new(),
    };
    let figures = if t.requested.is_none() && t.free.is_none() && acc.total == 0 {
        "PyTorch's out-of-memory error, without its figures".to_string()
    } else {
        format!(
            "asked for {} with {} free of {of}{cap}",
            request_text(t),
            Bytes(acc.free)
        )
    };
    let mut e = vec![ev_bytes(f, figures, acc.request)];
    if let Some(al) = t.allocated_by_pytorch {
        e.push(ev_bytes(
            f,
            format!("PyTorch tensors held {}", Bytes(al)),
            al,
        ));
    }
    let un = acc.reserved_unallocated;
    if un > 0 {
        let text = format!(
            "{} reserved by PyTorch but unallocated (cached blocks)",
            Bytes(un)
        );
        e.push(ev_bytes(f, text, un));
    }
    if acc.others > 0 {
        let text = format!("other processes hold {}", Bytes(acc.others));
        e.push(ev_bytes(f, text, acc.others));
    }
    if let Some((line, b, s)) = batch_line(a) {
        e.push(Evidence {
            text: format!(
                "the program's line says batch {b}, sequence length {}",
                group(s)
            ),
            bytes: None,
            line: Some(line),
        });
    }
    e
}

/// The seeds' check line belongs to the nearest OOM (stdout and stderr interleave, so it may
/// come just after the error in a captured log).
pub(super) fn batch_line(a: &Ask) -> Option<(usize, u64, u64)> {
    crate::verdict::record::batch_line(a.ctx, a.f.line)
}

/// What PyTorch's caching allocator asks the driver for a request: a 2 MiB segment for up to
/// 1 MiB, a 20 MiB one below 10 MiB, else the request rounded up to 2 MiB.
pub(crate) fn segment(request: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    if request <= MIB {
        2 * MIB
    } else if request < 10 * MIB {
        20 * MIB
    } else {
        request.div_ceil(2 * MIB).saturating_mul(2 * MIB)
    }
}

/// Parameters from a model id (`7B`, `0.5b`, `8x7B`) × bytes per parameter from the name's
/// quantization (4-bit, 8-bit, else 16-bit).
pub fn weights_from_name(name: &str) -> Option<u64> {
    let lower = name.to_ascii_lowercase();
    let base = lower.rsplit('/').next().unwrap_or(&lower);
    let params = params_from(base)?;
    let bits: f64 = if [
        "awq", "gptq", "4bit", "int4", "nf4", "q4", "bnb-4", "exl2", "bpw",
    ]
    .iter()
    .any(|k| base.contains(k))
    {
        4.5
    } else if ["8bit", "int8", "fp8", "q8"]
        .iter()
        .any(|k| base.contains(k))
    {
        8.5
    } else {
        16.0
    };
    let b = params * bits / 8.0;
    (b.is_finite() && b > 0.0 && b < 1e16).then_some(b as u64)
}

pub(super) fn params_from(base: &str) -> Option<f64> {
    let bytes = base.as_bytes();
    let mut best: Option<f64> = None;
    for (i, &c) in bytes.iter().enumerate() {
        if c != b'b' || i == 0 || !bytes[i - 1].is_ascii_digit() {
            continue;
        }
        if bytes.get(i + 1).is_some_and(|n| n.is_ascii_alphanumeric()) {
            continue;
        }
        // Past the last character that is not part of the figure (it may be several bytes long:
        // cargo-fuzz found `�7b` panicking here).
        let start = base[..i]
            .char_indices()
            .rev()
            .find(|(_, ch)| !(ch.is_ascii_digit() || *ch == '.' || *ch == 'x'))
            .map_or(0, |(p, ch)| p + ch.len_utf8());
        let figure = &base[start..i];
        let v = figure
            .split('x')
            .filter_map(|p| p.parse::<f64>().ok())
            .product::<f64>();
        if v > 0.0 {
            best = Some(v * 1e9);
        }
    }
    best
}
