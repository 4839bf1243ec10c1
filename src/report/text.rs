//! The terminal rendering: a verdict line first, then aligned tables.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, ContentArrangement, Table};

use super::percent;
use crate::budget::{Budget, Limit};
use crate::diagnosis::{Cause, Remedy, Verdict};
use crate::estimate::Workload;
use crate::plan::PlanReport;
use crate::units::{group, Bytes};

pub struct Style {
    pub color: bool,
}

impl Style {
    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    pub fn bold(&self, s: &str) -> String {
        self.paint("1", s)
    }
    pub fn good(&self, s: &str) -> String {
        self.paint("1;32", s)
    }
    pub fn bad(&self, s: &str) -> String {
        self.paint("1;31", s)
    }
    pub fn dim(&self, s: &str) -> String {
        self.paint("2", s)
    }
}

pub fn table(header: &[&str], right_from: usize) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().copied());
    for i in right_from..header.len() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// The headline: one line a person reads first and a log grep finds.
pub fn verdict_line(v: &Verdict, style: &Style, fits_word: &str, oom_word: &str) -> String {
    let (mark, word) = if v.cause == Cause::None {
        (style.good("✓"), style.good(fits_word))
    } else {
        (style.bad("✗"), style.bad(oom_word))
    };
    format!("{mark} {word} — {}", v.summary)
}

/// The verdict line, then cause · stage · confidence when something ran out.
fn verdict_header(out: &mut String, v: &Verdict, style: &Style, fits_word: &str, oom_word: &str) {
    out.push_str(&verdict_line(v, style, fits_word, oom_word));
    out.push('\n');
    if v.cause != Cause::None {
        out.push_str(&style.dim(&format!(
            "  cause {} · stage {} · confidence {:.2}\n",
            v.cause, v.stage, v.confidence
        )));
    }
}

pub fn remedies(out: &mut String, remedies: &[Remedy], style: &Style) {
    if remedies.is_empty() {
        return;
    }
    out.push_str(&style.bold("Remedies, cheapest first"));
    out.push('\n');
    for (i, r) in remedies.iter().enumerate() {
        let saves = match r.saves_bytes {
            Some(b) if b > 0 && r.new_budget.is_some() => format!("saves {}", Bytes(b as u64)),
            _ => String::new(),
        };
        let mark = if r.fits() { "✓" } else { "·" };
        out.push_str(&format!(
            "  {}. {mark} {}  {}\n",
            i + 1,
            r.action,
            style.dim(&saves)
        ));
        out.push_str(&format!("       {}\n", style.dim(&r.how)));
    }
    out.push('\n');
}

pub fn plan(r: &PlanReport, style: &Style) -> String {
    let mut out = String::new();
    let m = &r.model;
    let w = &r.workload;
    let c = &r.components;
    out.push_str(&format!(
        "{} {} · {} · {} card ({})\n\n",
        style.bold("llm-oom plan"),
        m.name,
        r.engine.name,
        Bytes(r.device.vram_bytes),
        match r.device.source {
            "flag" => "--vram".to_string(),
            "nvml" => format!(
                "free on {}",
                r.device.gpu.as_ref().map_or("GPU", |g| g.name.as_str())
            ),
            other => other.to_string(),
        }
    ));
    verdict_header(&mut out, &r.verdict, style, "FITS", "WOULD OOM");
    out.push('\n');
    out.push_str(&format!(
        "Model     {} · {:.2} B params · {} layers · {} heads / {} KV heads × {} · vocab {}{}\n",
        m.architecture,
        m.parameters as f64 / 1e9,
        m.layers,
        m.heads,
        m.kv_heads,
        m.head_dim,
        group(m.vocab_size),
        m.max_position_embeddings
            .map_or(String::new(), |n| format!(" · context {}", group(n)))
    ));
    out.push_str(&format!(
        "Workload  {} prompt + {} new tokens × {} sequence{} · weights {} · KV cache {}\n",
        group(w.prompt_tokens),
        group(w.max_new_tokens),
        w.batch,
        if w.batch == 1 { "" } else { "s" },
        w.weight_dtype,
        w.kv_dtype
    ));
    out.push_str(&format!(
        "Per token KV cache {} · weights {}\n\n",
        Bytes(r.kv_cache_bytes_per_token),
        Bytes(r.weights_bytes)
    ));

    let phase = c.peak_phase.describe();
    out.push_str(&style.bold(&format!("Where the memory goes (peak at the {phase})")));
    out.push('\n');
    let mut t = table(&["component", "bytes", "share"], 1);
    for (name, b) in [
        ("weights", c.weights),
        ("KV cache", c.kv_cache),
        ("activations", c.activations),
        ("allocator", c.allocator),
        ("CUDA runtime", c.runtime),
        ("margin", c.margin),
    ] {
        t.add_row(vec![
            name.to_string(),
            Bytes(b).to_string(),
            percent(b, r.device.vram_bytes),
        ]);
    }
    t.add_row(vec![
        "total".to_string(),
        Bytes(c.total).to_string(),
        percent(c.total, r.device.vram_bytes),
    ]);
    out.push_str(&t.to_string());
    out.push_str("\n\n");

    remedies(&mut out, &r.remedies, style);

    budget_table(&mut out, &r.budget, w, "Safe token budget", style);

    out.push_str(&style.bold("Quantization what-if"));
    out.push('\n');
    let mut t = table(
        &[
            "weights as",
            "engine",
            "weights",
            "this workload",
            "largest context (batch 1)",
        ],
        2,
    );
    for q in &r.quantization {
        t.add_row(vec![
            q.dtype.to_string(),
            q.engine.to_string(),
            Bytes(q.weights_bytes).to_string(),
            format!(
                "{} {}",
                if q.fits { "fits" } else { "OOM" },
                Bytes(q.peak_bytes)
            ),
            format!(
                "{}{}",
                group(q.max_total_tokens_batch1),
                if q.limited_by == Limit::Context {
                    " (model max)"
                } else {
                    ""
                }
            ),
        ]);
    }
    out.push_str(&t.to_string());
    out.push_str("\n\n");
    for n in &r.notes {
        out.push_str(&style.dim(&format!("note: {n}\n")));
    }
    out.push_str(&style.dim(&format!("engine profile: {}\n", r.engine.note)));
    out
}

/// The safe token budget: one row per concurrency, then the limits at the asked batch.
pub fn budget_table(out: &mut String, b: &Budget, w: &Workload, title: &str, style: &Style) {
    out.push_str(&style.bold(&format!(
        "{title} (per request, prompt : new = {} : {})",
        group(w.prompt_tokens),
        group(w.max_new_tokens)
    )));
    out.push('\n');
    let mut t = table(
        &["concurrency", "max tokens", "prompt", "new", "limited by"],
        1,
    );
    for row in &b.table {
        t.add_row(vec![
            row.concurrency.to_string(),
            group(row.max_total_tokens),
            group(row.prompt_tokens),
            group(row.new_tokens),
            limit_word(row.limited_by).to_string(),
        ]);
    }
    out.push_str(&t.to_string());
    out.push('\n');
    let opt = |v: Option<u64>| v.map_or("none".to_string(), group);
    out.push_str(&format!(
        "At batch {}: largest prompt {} · largest max_new_tokens {} · largest batch {}\n\n",
        w.batch,
        opt(b.max_prompt_tokens),
        opt(b.max_new_tokens),
        opt(b.max_batch)
    ));
}

pub fn limit_word(l: Limit) -> &'static str {
    match l {
        Limit::Memory => "memory",
        Limit::Context => "model context",
        Limit::Nothing => "nothing fits",
    }
}

pub fn explain(r: &crate::explain::ExplainReport, style: &Style) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{} · {} lines · {} out-of-memory event(s)\n\n",
        style.bold("llm-oom explain"),
        r.lines,
        r.findings.len()
    ));
    verdict_header(&mut out, &r.verdict, style, "NO OOM", "OOM");
    out.push('\n');
    if !r.verdict.evidence.is_empty() {
        out.push_str(&style.bold("Evidence"));
        out.push('\n');
        for e in &r.verdict.evidence {
            let at = e.line.map_or(String::new(), |l| format!("line {l}: "));
            out.push_str(&format!("  · {}{}\n", style.dim(&at), e.text));
        }
        for c in &r.verdict.contributing {
            out.push_str(&format!(
                "  · contributing {}: {}\n",
                c.cause, c.evidence.text
            ));
        }
        out.push('\n');
    }
    if let Some(f) = r.findings.first() {
        out.push_str(&format!(
            "{}\n  {}\n\n",
            style.bold(&format!("First fatal line ({})", f.line)),
            f.quote
        ));
    }
    remedies(&mut out, &r.remedies, style);
    if r.plan.is_none()
        && r.remedies.iter().any(|x| x.new_budget.is_none())
        && r.verdict.cause != Cause::None
    {
        out.push_str(&style.dim("Pass --model and the workload (--prompt-tokens, --max-new-tokens, --batch) to price these in bytes.\n"));
    }
    if let Some(d) = &r.to_decide {
        out.push_str(&format!("{} {d}\n", style.bold("To decide:")));
    }
    out
}

pub fn watch(r: &crate::watch::WatchReport, style: &Style) -> String {
    let mut out = String::new();
    let how = match r.exit.signal {
        Some(s) => format!("killed by signal {s}"),
        None => format!("exit code {}", r.exit.code),
    };
    out.push_str(&format!(
        "{} `{}` · {:.1} s · {how}\n\n",
        style.bold("llm-oom watch"),
        r.argv.join(" "),
        r.duration_ms as f64 / 1000.0
    ));
    verdict_header(&mut out, &r.verdict, style, "NO OOM", "OOM");
    out.push('\n');
    let gpu = r
        .peak_gpu_bytes
        .map_or("not sampled".to_string(), |b| Bytes(b).to_string());
    let card = r
        .gpu_total_bytes
        .map_or(String::new(), |b| format!(" of {}", Bytes(b)));
    out.push_str(&format!(
        "Peak GPU {gpu}{card} · peak host {} · sampled every {} ms\n",
        Bytes(r.peak_host_bytes),
        r.interval_ms
    ));
    if let Some(o) = r.peak_other_processes_bytes.filter(|o| *o > 0) {
        out.push_str(&format!(
            "Other processes on the GPU held up to {}\n",
            Bytes(o)
        ));
    }
    out.push_str(&style.dim(&format!("{}\n\n", r.gpu_note)));
    if !r.phases.is_empty() {
        out.push_str(&style.bold("Phases"));
        out.push('\n');
        let mut t = table(&["phase", "from", "to", "memory"], 1);
        for p in &r.phases {
            t.add_row(vec![
                p.kind.as_str().to_string(),
                format!("{:.2} s", p.start_ms as f64 / 1000.0),
                format!("{:.2} s", p.end_ms as f64 / 1000.0),
                format!("{} → {}", Bytes(p.from_bytes), Bytes(p.to_bytes)),
            ]);
        }
        out.push_str(&format!("{t}\n\n"));
    }
    if let Some(f) = r.findings.first() {
        let at = r
            .oom_at_ms
            .map_or(String::new(), |t| format!(" at {:.2} s", t as f64 / 1000.0));
        out.push_str(&format!(
            "{}\n  {}\n\n",
            style.bold(&format!("First out-of-memory line{at}")),
            f.quote
        ));
    }
    remedies(&mut out, &r.remedies, style);
    if r.output_kept_bytes < r.output_bytes {
        out.push_str(&style.dim(&format!(
            "kept {} of {} of output for analysis\n",
            Bytes(r.output_kept_bytes),
            Bytes(r.output_bytes)
        )));
    }
    out
}
