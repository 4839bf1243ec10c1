//! The rule registry: every rule the readers decide by, each with a stable code, its doc and the
//! log or test that motivates it ([`codes`]). A verdict names the rule that decided it
//! (`Verdict::rule`; `--json`: `verdict.rule`; text: a dim "rule P5"). The rule tables of
//! docs/explain.md are generated from here: `tests/rules_table.rs` fails when they differ, and
//! `LLM_OOM_BLESS=1 cargo test --test rules_table` rewrites them.
//!
//! Families, by the first letter of the code: `I` reading the input, `P` PyTorch's message (in
//! the order they run), `E` other engines' messages and what a log adds, `A` a later event of the
//! same log, `R` PyTorch's allocator record, `W` what `watch` adds to the record, `D` `diagnose`'s
//! staged probe.

mod codes;

pub use codes::{Code, RULES};

/// Where a rule belongs: one table of docs/explain.md each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Reading the input: encodings, bounds, look-alikes.
    Input,
    /// PyTorch's out-of-memory message, rules in the order they run.
    Torch,
    /// Every other engine's messages, and a later event of the same log.
    Engines,
    /// PyTorch's allocator record (`explain` of a snapshot, `watch`).
    Record,
    /// `diagnose`'s staged probe (docs/diagnose.md).
    Probe,
}

impl Family {
    pub const ALL: [Family; 5] = [
        Family::Input,
        Family::Torch,
        Family::Engines,
        Family::Record,
        Family::Probe,
    ];

    /// The document, relative to the repository, that holds this family's table.
    pub fn document(self) -> &'static str {
        match self {
            Family::Probe => "docs/diagnose.md",
            _ => "docs/explain.md",
        }
    }

    /// The marker name of this family's table in docs/explain.md.
    pub fn marker(self) -> &'static str {
        match self {
            Family::Input => "input",
            Family::Torch => "torch",
            Family::Engines => "engines",
            Family::Record => "record",
            Family::Probe => "probe",
        }
    }

    fn header(self) -> &'static str {
        match self {
            Family::Torch | Family::Record | Family::Probe => "| # | Rule (in order) | Example |",
            Family::Input | Family::Engines => "| # | Rule | Example |",
        }
    }
}

/// One rule: its code, its family, what it decides and the example that motivates it.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub code: Code,
    pub family: Family,
    pub doc: &'static str,
    pub example: &'static str,
}

impl Code {
    /// The rule this code names.
    pub fn rule(self) -> &'static Rule {
        // Every code has exactly one row (the `codes!` macro builds both from one list).
        &RULES[self as usize]
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The Markdown table of one family, as docs/explain.md holds it.
pub fn markdown(family: Family) -> String {
    let mut out = format!("{}\n|---|------|---------|\n", family.header());
    for r in RULES.iter().filter(|r| r.family == family) {
        out.push_str(&format!("| {} | {} | {} |\n", r.code, r.doc, r.example));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_is_its_own_row_and_every_row_says_something() {
        for (i, r) in RULES.iter().enumerate() {
            assert_eq!(r.code as usize, i, "{}", r.code);
            assert_eq!(r.code.rule().code, r.code);
            assert!(
                !r.doc.trim().is_empty() && !r.example.trim().is_empty(),
                "{}",
                r.code
            );
        }
        let mut codes: Vec<&str> = RULES.iter().map(|r| r.code.as_str()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), RULES.len());
    }

    #[test]
    fn the_code_is_the_json_value() {
        assert_eq!(
            serde_json::to_string(&Code::P5).ok().as_deref(),
            Some("\"P5\"")
        );
        assert_eq!(Code::E72.to_string(), "E72");
    }

    #[test]
    fn a_family_table_has_its_rows_in_registry_order() {
        let t = markdown(Family::Torch);
        let p1 = t.find("| P1 |").unwrap_or(usize::MAX);
        let p9 = t.find("| P9 |").unwrap_or(0);
        assert!(p1 < p9, "{t}");
        assert!(!t.contains("| E1 |"));
    }
}
