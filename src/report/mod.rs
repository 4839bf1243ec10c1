//! Rendering, one file per command's report: each report is one value, rendered by the [`Render`]
//! trait as a terminal report, JSON (the contract CI parses, straight from serde), Markdown made
//! for pasting into an issue, and an SVG where a picture helps. `text`, `markdown` and `svg` hold
//! the pieces the renderers share.

pub mod diagnose;
pub mod env;
pub mod explain;
pub mod markdown;
pub mod per_device;
pub mod placement;
pub mod plan;
pub mod snapshot;
pub mod svg;
pub mod text;
pub mod watch;

use serde::Serialize;

use crate::error::{Error, Result};
pub use text::Style;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text { color: bool },
    Json,
    Markdown,
}

/// A report every command's renderer reads.
pub trait Render: Serialize {
    fn text(&self, style: &Style) -> String;
    fn markdown(&self) -> String;
    /// A picture of the report, for those that have one.
    fn svg(&self) -> Option<String> {
        None
    }
}

/// The report in the format asked.
pub fn render<R: Render>(report: &R, format: Format) -> Result<String> {
    Ok(match format {
        Format::Json => json(report)?,
        Format::Markdown => report.markdown(),
        Format::Text { color } => report.text(&Style { color }),
    })
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
