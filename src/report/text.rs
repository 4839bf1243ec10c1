//! The terminal rendering: a verdict line first, then aligned tables.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, ContentArrangement, Table};

use crate::budget::{Budget, Limit};
use crate::estimate::Workload;
use crate::units::{group, Bytes};
use crate::verdict::{Cause, Remedy, Verdict};

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
pub(crate) fn verdict_header(
    out: &mut String,
    v: &Verdict,
    style: &Style,
    fits_word: &str,
    oom_word: &str,
) {
    out.push_str(&verdict_line(v, style, fits_word, oom_word));
    out.push('\n');
    if v.cause != Cause::None {
        let rule = v.rule.map(|r| format!(" · rule {r}")).unwrap_or_default();
        out.push_str(&style.dim(&format!(
            "  cause {} · stage {} · confidence {:.2}{rule}\n",
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
        Limit::MaxRequest => "max request len",
        Limit::Nothing => "nothing fits",
    }
}
