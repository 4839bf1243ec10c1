//! The layering the code promises (docs/architecture.md): no command imports another command.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_command_imports_another() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands");
    let commands = ["plan", "explain", "diagnose", "watch", "run"];
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() >= 10, "the commands wing is there");
    let mut found = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap_or(f);
        let own = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
            .unwrap_or_default();
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for other in commands.iter().filter(|c| **c != own) {
            if text.contains(&format!("crate::commands::{other}")) {
                found.push(format!("{} uses commands::{other}", rel.display()));
            }
        }
    }
    assert!(found.is_empty(), "commands import commands: {found:?}");
}

#[test]
fn placement_sits_below_the_verdict() {
    // placement/ prices parts on devices from the estimate and the Spec; it decides no verdict,
    // renders nothing and knows no command.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/placement");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(!files.is_empty(), "the placement wing is there");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for above in ["commands", "report", "verdict", "budget", "probe", "cli"] {
            assert!(
                !text.contains(&format!("crate::{above}")),
                "{} uses {above}",
                f.display()
            );
        }
    }
}

#[test]
fn the_snapshot_reader_measures_and_the_verdict_decides() {
    // snapshot/ reads and attributes PyTorch's allocator record; its cause is decided by the
    // verdict's record rules (verdict::snapshot), which the commands apply: one direction.
    // (Its unit tests may read the cause through them.)
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/snapshot");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(!files.is_empty(), "the snapshot wing is there");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for above in ["commands", "report", "verdict", "probe", "cli"] {
            assert!(
                !code.contains(&format!("crate::{above}")),
                "{} uses {above}",
                f.display()
            );
        }
    }
}
