//! `explain` rendered: the verdict, the evidence with line numbers, the first fatal line, remedies.

use super::markdown::{remedies as md_remedies, verdict_block};
use super::text::{remedies, Style};
use super::Render;
use crate::commands::explain::ExplainReport;
use crate::logparse::bounded::{HEAD, STOP_AFTER, TAIL, WINDOW_LINES};
use crate::units::Bytes;
use crate::verdict::Cause;

impl Render for ExplainReport {
    fn text(&self, style: &Style) -> String {
        text(self, style)
    }
    fn markdown(&self) -> String {
        markdown(self)
    }
}

fn text(r: &ExplainReport, style: &Style) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{} · {} lines · {} out-of-memory event(s)\n\n",
        style.bold("llm-oom explain"),
        r.lines,
        r.findings.len()
    ));
    // An undecided log without any out-of-memory event (one cut inside a traceback) is not
    // called an OOM.
    let word = if r.findings.is_empty() {
        "UNDECIDED"
    } else {
        "OOM"
    };
    let none_word = match r.read_only_bytes {
        Some(read) => format!("NO OOM IN THE FIRST {}", Bytes(read)),
        None => "NO OOM".to_string(),
    };
    super::text::verdict_header(&mut out, &r.verdict, style, &none_word, word);
    if r.verdict.cause != Cause::None {
        out.push_str(&style.dim(&format!("  {}\n", band_sentence(r))));
    }
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
    if let Some(p) = r.plan.as_ref().filter(|p| p.from == "log") {
        out.push_str(&style.dim(&format!(
            "Priced from what the log names (no --model given): {}, {} prompt + {} new tokens × {}. Pass --model and the workload to price your own.\n",
            p.model, p.prompt_tokens, p.max_new_tokens, p.batch
        )));
    }
    if let Some(d) = &r.to_decide {
        out.push_str(&format!("{} {d}\n", style.bold("To decide:")));
    }
    if let Some(skipped) = r.skipped_bytes {
        out.push_str(&style.dim(&format!(
            "Read in bounded memory: {} in the middle of the input were skipped (the first {} and the last {}, at most {} lines each, and the lines with out-of-memory words between were read; reading stops after {}).\n",
            Bytes(skipped),
            Bytes(HEAD as u64),
            Bytes(TAIL as u64),
            WINDOW_LINES,
            Bytes(STOP_AFTER)
        )));
    }
    out
}

/// "confidence band high (>= 0.8): right 250 of 339 times at this level on real logs it had not seen"
fn band_sentence(r: &ExplainReport) -> String {
    let b = &r.confidence_band;
    format!("confidence band {}: {}", b.band, b.text)
}

fn markdown(r: &ExplainReport) -> String {
    let mut out = String::new();
    verdict_block(&mut out, "llm-oom explain", &r.verdict);
    if r.verdict.cause != Cause::None {
        out.push_str(&format!("_{}_\n\n", band_sentence(r)));
    }
    if let Some(f) = r.findings.first() {
        out.push_str(&format!(
            "First fatal line ({}):\n\n```\n{}\n```\n\n",
            f.line, f.quote
        ));
    }
    md_remedies(&mut out, &r.remedies);
    if let Some(d) = &r.to_decide {
        out.push_str(&format!("**To decide:** {d}\n\n"));
    }
    out.push_str(&format!(
        "<sub>llm-oom {} · `llm-oom explain` · {} lines, {} out-of-memory event(s)</sub>\n",
        r.version,
        r.lines,
        r.findings.len()
    ));
    out
}
