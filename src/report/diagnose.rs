//! `diagnose` rendered three ways: the terminal (verdict line, stage table with a bar per stage,
//! remedies, the measured budget), Markdown for an issue, and an SVG of memory by stage.

use std::fmt::Write;

use super::markdown::{remedies as md_remedies, verdict_block};
use super::svg::escape;
use super::text::{budget_table, remedies, table, verdict_line, Style};
use super::Render;
use crate::commands::diagnose::engine::Mode;
use crate::commands::diagnose::DiagnoseReport;
use crate::units::{group, Bytes};
use crate::verdict::measured::{StageOutcome, StageRecord};
use crate::verdict::Cause;

const BAR: usize = 24;

/// What the budget table is: measured in candle, the transformers profile corrected by what
/// transformers did here, or the engine's profile alone.
fn budget_title(r: &DiagnoseReport) -> String {
    match r.mode {
        Mode::Predicted => format!(
            "Safe token budget predicted by the {} profile for this card (nothing ran)",
            r.prediction.engine
        ),
        Mode::Measured if r.measured.is_some() => {
            "Safe token budget measured on this device".into()
        }
        Mode::Measured => format!(
            "Safe token budget for {} on this device (its profile, corrected by the stages it ran)",
            r.prediction.engine
        ),
    }
}

/// Predicted mode: no stage table (nothing ran), the budget, the notes that say why.
fn predicted_tail(out: &mut String, r: &DiagnoseReport, style: &Style) {
    out.push_str(&style.dim(&format!("Stages: none ran — {}\n\n", r.probe)));
    remedies(out, &r.remedies, style);
    if let Some(b) = &r.budget {
        budget_table(out, b, &r.workload, &budget_title(r), style);
    }
    for n in &r.notes {
        out.push_str(&style.dim(&format!("note: {n}\n")));
    }
    out.push_str(&style.dim(&format!("{:.1} s in all\n", r.seconds)));
}

impl Render for DiagnoseReport {
    fn text(&self, style: &Style) -> String {
        text(self, style)
    }
    fn markdown(&self) -> String {
        markdown(self)
    }
    fn svg(&self) -> Option<String> {
        Some(svg(self))
    }
}

/// A bar of the card: weights █, KV cache ▓, activations ▒, context ░, free ·.
pub fn bar(s: &StageRecord, capacity: u64) -> String {
    if s.outcome == StageOutcome::Skipped || capacity == 0 {
        return String::new();
    }
    let c = s.components;
    let cells = |b: u64| ((b as f64 / capacity as f64) * BAR as f64).round() as usize;
    let mut out = String::new();
    let mut used = 0;
    for (b, ch) in [
        (c.weights, '█'),
        (c.kv_cache, '▓'),
        (c.activations, '▒'),
        (c.other, '░'),
    ] {
        let n = cells(b).min(BAR - used);
        out.extend(std::iter::repeat_n(ch, n));
        used += n;
    }
    out.extend(std::iter::repeat_n('·', BAR - used));
    if c.total() > capacity {
        out.push('!');
    }
    out
}

/// What a stage ran, or why it did not.
fn ran(s: &StageRecord) -> String {
    match (s.outcome, &s.reason) {
        (StageOutcome::Skipped, Some(why)) => why.clone(),
        _ => s.detail.clone(),
    }
}

fn outcome_word(s: &StageRecord) -> &'static str {
    match s.outcome {
        StageOutcome::Ok => "ok",
        StageOutcome::Oom => "OOM",
        StageOutcome::Skipped => "skipped",
        StageOutcome::Error => "error",
        StageOutcome::Timeout => "timed out",
    }
}

fn limit_text(r: &DiagnoseReport) -> String {
    let d = &r.device;
    match (d.limit_bytes, d.limit_how) {
        (Some(l), Some(how)) => format!("--vram-limit {} ({how})", Bytes(l)),
        _ => "no limit: what the device had".into(),
    }
}

fn text(r: &DiagnoseReport, style: &Style) -> String {
    let mut out = String::new();
    headline(&mut out, r, style);
    if r.mode == Mode::Predicted {
        predicted_tail(&mut out, r, style);
        return out;
    }
    stage_table(&mut out, r, style);
    super::per_device::text(&mut out, &r.per_device, style);
    remedies(&mut out, &r.remedies, style);
    if let Some(b) = &r.budget {
        budget_table(&mut out, b, &r.workload, &budget_title(r), style);
    }
    limits_and_verification(&mut out, r, style);
    footer(&mut out, r, style);
    out
}

/// The verdict first (a person reads it, a log grep finds it), then what ran where.
fn headline(out: &mut String, r: &DiagnoseReport, style: &Style) {
    let d = &r.device;
    // A probe that failed before any out-of-memory says so, not "out of memory".
    let bad = if r.exit_status() == crate::exit::ExitStatus::Failure {
        "PROBE FAILED"
    } else {
        "OUT OF MEMORY"
    };
    out.push_str(&verdict_line(&r.verdict, style, "NO OOM", bad));
    out.push('\n');
    out.push_str(&style.dim(&format!(
        "  {} · {} · card {} · {}\n",
        r.model.name,
        d.name,
        Bytes(d.capacity_bytes),
        limit_text(r)
    )));
    if r.verdict.cause != Cause::None {
        out.push_str(&style.dim(&format!(
            "  cause {} · stage {} · confidence {:.2}\n",
            r.verdict.cause, r.verdict.stage, r.verdict.confidence
        )));
        for c in &r.verdict.contributing {
            out.push_str(&style.dim(&format!(
                "  contributing {}: {}\n",
                c.cause, c.evidence.text
            )));
        }
    }
    out.push('\n');
}

/// One row per stage with a bar of the card, then the fragmentation line and what failed.
fn stage_table(out: &mut String, r: &DiagnoseReport, style: &Style) {
    let d = &r.device;
    out.push_str(&style.bold(&format!("Stages ({})", r.probe)));
    out.push('\n');
    let mut t = table(
        &[
            "stage", "ran", "outcome", "peak", "weights", "KV cache", "activ.", "context", "free",
            "time", "card",
        ],
        3,
    );
    for s in &r.stages {
        let free = d.capacity_bytes.saturating_sub(s.memory.peak);
        let c = s.components;
        let shown = |b: u64| {
            if s.outcome == StageOutcome::Skipped {
                String::new()
            } else {
                Bytes(b).to_string()
            }
        };
        t.add_row(vec![
            s.name.to_string(),
            ran(s),
            outcome_word(s).to_string(),
            shown(s.memory.peak),
            shown(c.weights),
            shown(c.kv_cache),
            shown(c.activations),
            shown(c.other),
            shown(free),
            time_text(s),
            bar(s, d.capacity_bytes),
        ]);
    }
    out.push_str(&t.to_string());
    out.push_str(&style.dim(
        "\ncard: █ weights ▓ KV cache ▒ activations ░ context and library workspaces · free\n",
    ));
    for s in &r.stages {
        if let Some(f) = &s.fragmentation {
            out.push_str(&format!(
                "Free {} · largest block {}{} · pool holds {} unused\n",
                Bytes(f.free),
                if f.largest_block >= f.searched_up_to {
                    "≥ "
                } else {
                    ""
                },
                Bytes(f.largest_block),
                Bytes(f.reserved.saturating_sub(f.in_use))
            ));
        }
        if matches!(s.outcome, StageOutcome::Error | StageOutcome::Timeout) {
            if let Some(why) = &s.reason {
                out.push_str(&format!("{} failed: {why}\n", s.name));
            }
        }
    }
    out.push('\n');
}

/// `0.27 s · 53 tok/s`, `0.21 s · TTFT 0.20 s`, or nothing for a skipped stage.
fn time_text(s: &StageRecord) -> String {
    let mut time = if s.outcome == StageOutcome::Skipped {
        String::new()
    } else {
        format!("{:.2} s", s.seconds)
    };
    if let Some(tps) = s.tokens_per_second {
        time.push_str(&format!(" · {tps:.0} tok/s"));
    } else if let Some(ttft) = s.ttft_seconds {
        time.push_str(&format!(" · TTFT {ttft:.2} s"));
    }
    time
}

/// `--find-limits` beside the budget, and `--verify`'s re-run.
fn limits_and_verification(out: &mut String, r: &DiagnoseReport, style: &Style) {
    if let Some(l) = &r.limits {
        out.push_str(&style.bold("Limits found by trial"));
        out.push('\n');
        let opt = |v: Option<u64>| v.map_or("none".to_string(), group);
        out.push_str(&format!(
            "  largest prompt at batch 1: {} ran · budget says {}\n  largest batch at these lengths: {} ran · budget says {}\n  ({} trials)\n\n",
            opt(l.max_prompt_tokens),
            opt(l.predicted_prompt_tokens),
            opt(l.max_batch),
            opt(l.predicted_batch),
            l.trials.len()
        ));
    }
    if let Some(v) = &r.verification {
        out.push_str(&format!(
            "{} {} → {} (peak {} of {})\n\n",
            style.bold("Verified:"),
            v.detail,
            if v.outcome == StageOutcome::Ok {
                style.good("fits")
            } else {
                style.bad("still out of memory")
            },
            Bytes(v.memory.peak),
            Bytes(r.device.capacity_bytes)
        ));
    }
}

/// The profile's prediction beside the measurement, the notes, the children and the time.
fn footer(out: &mut String, r: &DiagnoseReport, style: &Style) {
    let p = &r.prediction;
    out.push_str(&style.dim(&format!(
        "plan's {} profile predicts a peak of {} on this card ({})\n",
        p.engine,
        Bytes(p.peak_bytes),
        if p.fits { "fits" } else { "would OOM" }
    )));
    for n in &r.notes {
        out.push_str(&style.dim(&format!("note: {n}\n")));
    }
    out.push_str(&style.dim(&format!(
        "{} probe process(es), {} · {:.1} s in all{}\n",
        r.children.len(),
        leftover_text(r),
        r.seconds,
        r.warmup_seconds.map_or(String::new(), |w| format!(
            ", of which {w:.1} s warm-up (kernels compiled on a machine's first run, workspaces)"
        ))
    )));
}

fn leftover_text(r: &DiagnoseReport) -> String {
    let checked: Vec<_> = r
        .children
        .iter()
        .filter_map(|c| c.leftover_gpu_bytes)
        .collect();
    if checked.is_empty() {
        "GPU release not checked (no NVML)".into()
    } else if checked.iter().all(|&b| b == 0) {
        "none left memory on the GPU (NVML)".into()
    } else {
        format!(
            "{} left memory on the GPU",
            checked.iter().filter(|&&b| b > 0).count()
        )
    }
}

fn markdown(r: &DiagnoseReport) -> String {
    let mut out = String::new();
    let d = &r.device;
    verdict_block(
        &mut out,
        &format!("llm-oom diagnose · {}", r.model.name),
        &r.verdict,
    );
    let w = &r.workload;
    out.push_str("| | |\n|---|---|\n");
    out.push_str(&format!(
        "| model | `{}` ({}, {:.2} B params) |\n| workload | {} prompt + {} new tokens × {} · {} |\n| device | {} · card {} · {} |\n| probe | {} |\n\n",
        r.model.name,
        r.model.architecture,
        r.model.parameters as f64 / 1e9,
        group(w.prompt_tokens),
        group(w.max_new_tokens),
        w.batch,
        w.weight_dtype,
        d.name,
        Bytes(d.capacity_bytes),
        limit_text(r),
        r.probe
    ));
    out.push_str("#### Stages\n\n| stage | ran | outcome | peak | weights | KV cache | activations | context | time |\n|---|---|---|--:|--:|--:|--:|--:|--:|\n");
    for s in &r.stages {
        let ran = ran(s);
        if s.outcome == StageOutcome::Skipped {
            out.push_str(&format!("| {} | {ran} | skipped | | | | | | |\n", s.name));
            continue;
        }
        let c = s.components;
        out.push_str(&format!(
            "| {} | {ran} | {} | {} | {} | {} | {} | {} | {:.2} s |\n",
            s.name,
            if s.outcome == StageOutcome::Oom {
                "**OOM**"
            } else {
                outcome_word(s)
            },
            Bytes(s.memory.peak),
            Bytes(c.weights),
            Bytes(c.kv_cache),
            Bytes(c.activations),
            Bytes(c.other),
            s.seconds
        ));
    }
    out.push('\n');
    super::per_device::markdown(&mut out, &r.per_device);
    md_remedies(&mut out, &r.remedies);
    if let Some(b) = &r.budget {
        out.push_str(&format!(
            "<details><summary>{}</summary>\n\n",
            budget_title(r)
        ));
        out.push_str("| concurrency | max tokens / request | prompt | new |\n|--:|--:|--:|--:|\n");
        for row in &b.table {
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                row.concurrency,
                group(row.max_total_tokens),
                group(row.prompt_tokens),
                group(row.new_tokens)
            ));
        }
        out.push_str("\n</details>\n\n");
    }
    if !r.notes.is_empty() {
        out.push_str("<details><summary>Notes</summary>\n\n");
        for n in &r.notes {
            out.push_str(&format!("- {n}\n"));
        }
        out.push_str("\n</details>\n\n");
    }
    out.push_str(&format!(
        "<sub>llm-oom {} · `llm-oom diagnose` · {:.1} s · {}</sub>\n",
        r.version,
        r.seconds,
        leftover_text(r)
    ));
    out
}

/// Memory by stage: one stacked bar per stage against the card.
fn svg(r: &DiagnoseReport) -> String {
    const W: f64 = 760.0;
    const H: f64 = 340.0;
    const LEFT: f64 = 80.0;
    const TOP: f64 = 50.0;
    const BOTTOM: f64 = 60.0;
    let cap = r.device.capacity_bytes.max(1);
    let top = r
        .stages
        .iter()
        .map(|s| s.components.total())
        .max()
        .unwrap_or(0)
        .max(cap) as f64
        * 1.05;
    let y = |b: f64| H - BOTTOM - b / top * (H - TOP - BOTTOM);
    let n = r.stages.len().max(1) as f64;
    let slot = (W - LEFT - 20.0) / n;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12"><rect width="{W}" height="{H}" fill="white"/>"#
    );
    let _ = write!(
        s,
        r#"<text x="{LEFT}" y="22" font-size="14" font-weight="bold">{} — {}</text>"#,
        escape(&r.model.name),
        escape(&r.verdict.summary.chars().take(90).collect::<String>())
    );
    let cy = y(cap as f64);
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" x2="{}" y1="{cy:.1}" y2="{cy:.1}" stroke="#c00" stroke-dasharray="4 3"/><text x="{}" y="{:.1}" fill="#c00" text-anchor="end">card {}</text>"##,
        W - 20.0,
        W - 20.0,
        cy - 4.0,
        Bytes(cap)
    );
    for (i, st) in r.stages.iter().enumerate() {
        let x = LEFT + i as f64 * slot + slot * 0.15;
        let bw = slot * 0.7;
        let mut acc = 0.0;
        if st.outcome != StageOutcome::Skipped {
            for (b, color) in [
                (st.components.other, "#bbbbbb"),
                (st.components.weights, "#4e79a7"),
                (st.components.kv_cache, "#f28e2b"),
                (st.components.activations, "#e15759"),
            ] {
                let h = b as f64 / top * (H - TOP - BOTTOM);
                let _ = write!(
                    s,
                    r#"<rect x="{x:.1}" y="{:.1}" width="{bw:.1}" height="{h:.1}" fill="{color}"/>"#,
                    y(acc + b as f64)
                );
                acc += b as f64;
            }
        }
        let label = format!("{} ({})", st.name, outcome_word(st));
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x + bw / 2.0,
            H - BOTTOM + 16.0,
            escape(&label)
        );
    }
    let _ = write!(
        s,
        r##"<g font-size="11"><rect x="{LEFT}" y="{}" width="10" height="10" fill="#4e79a7"/><text x="{}" y="{}">weights</text><rect x="{}" y="{}" width="10" height="10" fill="#f28e2b"/><text x="{}" y="{}">KV cache</text><rect x="{}" y="{}" width="10" height="10" fill="#e15759"/><text x="{}" y="{}">activations</text><rect x="{}" y="{}" width="10" height="10" fill="#bbbbbb"/><text x="{}" y="{}">{}</text></g></svg>"##,
        H - 22.0,
        LEFT + 14.0,
        H - 13.0,
        LEFT + 90.0,
        H - 22.0,
        LEFT + 104.0,
        H - 13.0,
        LEFT + 180.0,
        H - 22.0,
        LEFT + 194.0,
        H - 13.0,
        LEFT + 280.0,
        H - 22.0,
        LEFT + 294.0,
        H - 13.0,
        // Held before any tensor: the CUDA context on a GPU, the runtime's own on the CPU.
        if r.device.device.gpu().is_some() {
            "CUDA context"
        } else {
            "runtime"
        },
    );
    s
}
