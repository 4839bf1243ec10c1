//! docs/explain.md's rule tables are the registry's (`llm_oom::verdict::rules`): each table between
//! its `<!-- rules:FAMILY … -->` and `<!-- /rules -->` markers is generated from
//! src/verdict/rules/codes.rs. A rule changed in one place and not the other fails here;
//! `LLM_OOM_BLESS=1 cargo test --test rules_table` rewrites the tables from the registry.

use std::path::Path;

use llm_oom::verdict::rules::{markdown, Family};

fn docs() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/explain.md")
}

/// The document with every family's table regenerated.
fn regenerated(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    for family in Family::ALL {
        let open = format!("<!-- rules:{} ", family.marker());
        let start = rest
            .find(&open)
            .unwrap_or_else(|| panic!("docs/explain.md has no {open}… marker"));
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
    let text = std::fs::read_to_string(docs()).expect("read docs/explain.md");
    let want = regenerated(&text);
    if std::env::var_os("LLM_OOM_BLESS").is_some() && std::env::var_os("CI").is_none() {
        std::fs::write(docs(), &want).expect("write docs/explain.md");
        return;
    }
    if want != text {
        let first = want
            .lines()
            .zip(text.lines())
            .find(|(a, b)| a != b)
            .map(|(a, b)| format!("registry: {a}\ndocs:     {b}"))
            .unwrap_or_else(|| "the lengths differ".into());
        panic!(
            "docs/explain.md's rule tables differ from src/verdict/rules/codes.rs; \
             LLM_OOM_BLESS=1 cargo test --test rules_table rewrites them\n{first}"
        );
    }
}
