//! Markdown made for pasting into a GitHub issue: a summary line a maintainer reads first, the
//! numbers in tables, the long parts folded.

use crate::units::Bytes;
use crate::verdict::{Cause, Remedy, Verdict};

pub fn verdict_block(out: &mut String, title: &str, v: &Verdict) {
    let mark = if v.cause == Cause::None { "✅" } else { "❌" };
    out.push_str(&format!("### {mark} {title}: `{}`\n\n", v.cause));
    out.push_str(&format!("**{}**\n\n", v.summary));
    if v.cause != Cause::None {
        let rule = v.rule.map(|r| format!(" · rule `{r}`")).unwrap_or_default();
        out.push_str(&format!(
            "Stage `{}` · confidence {:.2}{rule}\n\n",
            v.stage, v.confidence
        ));
    }
    if !v.evidence.is_empty() {
        out.push_str("<details><summary>Evidence</summary>\n\n");
        for e in &v.evidence {
            match e.line {
                Some(l) => out.push_str(&format!("- line {l}: {}\n", e.text)),
                None => out.push_str(&format!("- {}\n", e.text)),
            }
        }
        for c in &v.contributing {
            out.push_str(&format!(
                "- contributing `{}`: {}\n",
                c.cause, c.evidence.text
            ));
        }
        out.push_str("\n</details>\n\n");
    }
}

pub fn remedies(out: &mut String, remedies: &[Remedy]) {
    if remedies.is_empty() {
        return;
    }
    out.push_str("#### Remedies, cheapest first\n\n");
    for (i, r) in remedies.iter().enumerate() {
        let saves = match r.saves_bytes {
            Some(b) if b > 0 && r.new_budget.is_some() => format!(" (saves {})", Bytes(b as u64)),
            _ => String::new(),
        };
        out.push_str(&format!(
            "{}. {}{saves} — `{}`\n",
            i + 1,
            r.action,
            r.how.replace('`', "'")
        ));
    }
    out.push('\n');
}
