//! PyTorch's record rendered: the verdict, the live bytes by component with their top allocation
//! sites, the allocator's slack and its pieces, the request that failed.

use super::text::{table, verdict_line, Style};
use super::{percent, Render};
use crate::commands::snapshot::SnapshotExplainReport;
use crate::units::Bytes;

impl Render for SnapshotExplainReport {
    fn text(&self, style: &Style) -> String {
        let r = &self.record;
        let mut out = verdict_line(&self.verdict, style, "NO OOM", "OUT OF MEMORY");
        out.push('\n');
        out.push_str(&style.dim(&format!(
            "  PyTorch's allocator snapshot {} · {}\n\n",
            self.file,
            if r.history {
                "with allocation stacks"
            } else {
                "no history: segments only (turn on torch.cuda.memory._record_memory_history to attribute)"
            }
        )));
        let live: u64 = r.breakdown.iter().map(|b| b.bytes).sum();
        let mut t = table(
            &["live bytes", "bytes", "share", "blocks", "largest site"],
            1,
        );
        for row in &r.breakdown {
            t.add_row(vec![
                row.label.to_string(),
                Bytes(row.bytes).to_string(),
                percent(row.bytes, live),
                row.blocks.to_string(),
                row.sites
                    .first()
                    .map(|s| format!("{} ({})", s.label, Bytes(s.bytes)))
                    .unwrap_or_default(),
            ]);
        }
        out.push_str(&format!("{t}\n"));
        out.push_str(&slack_line(self));
        if let Some(o) = &r.oom {
            out.push_str(&format!(
                "failed request: {}{} with {} free on the device\n",
                Bytes(o.request),
                o.site
                    .as_deref()
                    .map(|s| format!(" from {s}"))
                    .unwrap_or_default(),
                Bytes(o.device_free)
            ));
        }
        out
    }

    fn markdown(&self) -> String {
        let r = &self.record;
        let mut out = String::new();
        super::markdown::verdict_block(
            &mut out,
            &format!("llm-oom explain · PyTorch snapshot `{}`", self.file),
            &self.verdict,
        );
        let live: u64 = r.breakdown.iter().map(|b| b.bytes).sum();
        out.push_str("| live bytes | bytes | share | top sites |\n|---|--:|--:|---|\n");
        for row in &r.breakdown {
            let sites: Vec<String> = row
                .sites
                .iter()
                .take(3)
                .map(|s| format!("`{}` {}", s.label, Bytes(s.bytes)))
                .collect();
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                row.label,
                Bytes(row.bytes),
                percent(row.bytes, live),
                sites.join("<br>")
            ));
        }
        out.push('\n');
        out.push_str(&slack_line(self));
        out
    }
}

fn slack_line(r: &SnapshotExplainReport) -> String {
    let s = &r.record.slack;
    format!(
        "allocator: {} reserved in {} segments · {} live · {} cached free in {} blocks, the largest {}\n",
        Bytes(s.reserved),
        s.segments,
        Bytes(s.live),
        Bytes(s.cached_free),
        s.free_blocks,
        Bytes(s.largest_free_block)
    )
}
