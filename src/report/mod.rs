//! Rendering: every command builds one report value; these turn it into a terminal table, JSON
//! (the contract CI parses) or Markdown made for pasting into an issue.

pub mod diagnose;
pub mod markdown;
pub mod svg;
pub mod text;

use serde::Serialize;

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text { color: bool },
    Json,
    Markdown,
}

/// Pretty JSON with a trailing newline.
pub fn json<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| Error::Internal(format!("cannot serialise the report: {e}")))
}

/// `0.56` → `56 %`.
pub fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "–".into();
    }
    format!("{:.0} %", part as f64 * 100.0 / whole as f64)
}
