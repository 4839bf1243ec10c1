//! The rule tables of docs/explain.md and docs/diagnose.md are the registry's
//! (`llm_oom::verdict::rules`): each table between its `<!-- rules:FAMILY … -->` and
//! `<!-- /rules -->` markers is generated from src/verdict/rules/codes.rs. A rule changed in one
//! place and not the other fails here; `LLM_OOM_BLESS=1 cargo test --test rules_table` rewrites
//! the tables from the registry.

use std::path::Path;

use llm_oom::verdict::rules::{markdown, Family};

/// The document with the tables of its families regenerated, in the order they appear.
fn regenerated(text: &str, families: &[Family]) -> String {
    let mut out = String::new();
    let mut rest = text;
    for &family in families {
        let open = format!("<!-- rules:{} ", family.marker());
        let start = rest
            .find(&open)
            .unwrap_or_else(|| panic!("{} has no {open}… marker", family.document()));
        let head_end = start
            + rest[start..]
                .find("-->\n")
                .unwrap_or_else(|| panic!("{open} is not closed"))
            + 4;
        let close = rest[head_end..]
            .find("<!-- /rules -->")
            .unwrap_or_else(|| panic!("{open} has no <!-- /rules -->"))
            + head_end;
        out.push_str(&rest[..head_end]);
        out.push_str(&markdown(family));
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_rule_tables_in_the_docs_are_the_registrys() {
    let mut documents: Vec<&str> = Family::ALL.iter().map(|f| f.document()).collect();
    documents.dedup();
    for doc in documents {
        let families: Vec<Family> = Family::ALL
            .into_iter()
            .filter(|f| f.document() == doc)
            .collect();
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(doc);
        let text = std::fs::read_to_string(&path).expect("read the document");
        let want = regenerated(&text, &families);
        if std::env::var_os("LLM_OOM_BLESS").is_some() && std::env::var_os("CI").is_none() {
            std::fs::write(&path, &want).expect("write the document");
            continue;
        }
        if want != text {
            let first = want
                .lines()
                .zip(text.lines())
                .find(|(a, b)| a != b)
                .map(|(a, b)| format!("registry: {a}\ndocs:     {b}"))
                .unwrap_or_else(|| "the lengths differ".into());
            panic!(
                "{doc}'s rule tables differ from src/verdict/rules/codes.rs; \
                 LLM_OOM_BLESS=1 cargo test --test rules_table rewrites them\n{first}"
            );
        }
    }
}
