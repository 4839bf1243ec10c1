//! `watch` rendered: the verdict and how the program ended, its memory phases, and the timeline as
//! an SVG (GPU and host memory of the process tree, the card's size, the phases shaded, the first
//! out-of-memory line marked).

use std::fmt::Write;

use super::markdown::{remedies as md_remedies, verdict_block};
use super::svg::escape;
use super::text::{remedies, table, Style};
use super::Render;
use crate::commands::watch::timeline::PhaseKind;
use crate::commands::watch::WatchReport;
use crate::units::Bytes;

const W: f64 = 860.0;
const H: f64 = 320.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 40.0;

impl Render for WatchReport {
    fn text(&self, style: &Style) -> String {
        text(self, style)
    }
    fn markdown(&self) -> String {
        markdown(self)
    }
    fn svg(&self) -> Option<String> {
        Some(svg(self))
    }
}

/// The command as a shell would take it back: `bash -c 'setsid sleep 20 & echo done'`.
pub(crate) fn shell_command(argv: &[String]) -> String {
    shlex::try_join(argv.iter().map(String::as_str)).unwrap_or_else(|_| argv.join(" "))
}

/// The program's own time, and how long watch waited on for what it left running.
fn took(r: &WatchReport) -> String {
    let own = format!("{:.1} s", r.program_exit_ms as f64 / 1000.0);
    if r.leftover.is_empty() {
        own
    } else {
        format!(
            "{own} (and {:.1} s waiting for {} process{} it left running)",
            r.duration_ms.saturating_sub(r.program_exit_ms) as f64 / 1000.0,
            r.leftover.len(),
            if r.leftover.len() == 1 { "" } else { "es" }
        )
    }
}

fn text(r: &WatchReport, style: &Style) -> String {
    let mut out = String::new();
    let how = match r.exit.signal {
        Some(s) => format!("killed by signal {s}"),
        None => format!("exit code {}", r.exit.code),
    };
    out.push_str(&format!(
        "{} `{}` · {} · {how}\n\n",
        style.bold("llm-oom watch"),
        shell_command(&r.argv),
        took(r)
    ));
    super::text::verdict_header(&mut out, &r.verdict, style, "NO OOM", "OOM");
    out.push('\n');
    if !r.leftover.is_empty() {
        let each: Vec<String> = r
            .leftover
            .iter()
            .map(|l| {
                format!(
                    "pid {} ({}){}",
                    l.pid,
                    l.name,
                    if l.holds_output {
                        ", holding its output"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        out.push_str(&format!(
            "Left running when the program exited: {}; watch waited for them until {:.1} s\n",
            each.join(", "),
            r.duration_ms as f64 / 1000.0
        ));
    }
    let gpu = r
        .peak_gpu_bytes
        .map_or("not sampled".to_string(), |b| Bytes(b).to_string());
    let card = r
        .gpu_total_bytes
        .map_or(String::new(), |b| format!(" of {}", Bytes(b)));
    out.push_str(&format!(
        "Peak GPU {gpu}{card} · peak host {} · sampled every {} ms\n",
        Bytes(r.peak_host_bytes),
        r.interval_ms
    ));
    if let Some(o) = r.peak_other_processes_bytes.filter(|o| *o > 0) {
        out.push_str(&format!(
            "Other processes on the GPU held up to {}\n",
            Bytes(o)
        ));
    }
    out.push_str(&style.dim(&format!("{}\n", r.gpu_note)));
    if let Some(t) = &r.torch {
        out.push_str(&style.dim(&format!("{}\n", torch_line(t))));
    }
    out.push('\n');
    if let Some(rec) = r.torch.as_ref().and_then(|t| t.record.as_ref()) {
        out.push_str(&style.bold("PyTorch's record at the OOM (live bytes)"));
        out.push('\n');
        let mut t = table(&["component", "bytes", "largest site"], 1);
        for row in &rec.breakdown {
            t.add_row(vec![
                row.label.to_string(),
                Bytes(row.bytes).to_string(),
                row.sites
                    .first()
                    .map(|s| s.label.clone())
                    .unwrap_or_default(),
            ]);
        }
        out.push_str(&format!("{t}\n\n"));
    }
    if !r.phases.is_empty() {
        out.push_str(&style.bold("Phases"));
        out.push('\n');
        let mut t = table(&["phase", "from", "to", "memory"], 1);
        for p in &r.phases {
            t.add_row(vec![
                p.kind.as_str().to_string(),
                format!("{:.2} s", p.start_ms as f64 / 1000.0),
                format!("{:.2} s", p.end_ms as f64 / 1000.0),
                format!("{} → {}", Bytes(p.from_bytes), Bytes(p.to_bytes)),
            ]);
        }
        out.push_str(&format!("{t}\n\n"));
    }
    if let Some(f) = r.findings.first() {
        let at = r
            .oom_at_ms
            .map_or(String::new(), |t| format!(" at {:.2} s", t as f64 / 1000.0));
        out.push_str(&format!(
            "{}\n  {}\n\n",
            style.bold(&format!("First out-of-memory line{at}")),
            f.quote
        ));
    }
    remedies(&mut out, &r.remedies, style);
    if r.output_kept_bytes < r.output_bytes {
        out.push_str(&style.dim(&format!(
            "kept {} of {} of output for analysis\n",
            Bytes(r.output_kept_bytes),
            Bytes(r.output_bytes)
        )));
    }
    out
}

fn markdown(r: &WatchReport) -> String {
    let mut out = String::new();
    verdict_block(&mut out, "llm-oom watch", &r.verdict);
    out.push_str("| | |\n|---|---|\n");
    out.push_str(&format!(
        "| command | `{}` |\n",
        shell_command(&r.argv).replace('|', "\\|")
    ));
    let how = match r.exit.signal {
        Some(s) => format!("killed by signal {s}"),
        None => format!("exit code {}", r.exit.code),
    };
    out.push_str(&format!("| ended | {how} after {} |\n", took(r)));
    out.push_str(&format!(
        "| peak GPU | {} |\n",
        r.peak_gpu_bytes
            .map_or("not sampled".into(), |b| Bytes(b).to_string())
    ));
    out.push_str(&format!("| peak host | {} |\n", Bytes(r.peak_host_bytes)));
    if let Some(t) = &r.torch {
        out.push_str(&format!("| PyTorch's record | {} |\n", torch_line(t)));
    }
    out.push('\n');
    if let Some(rec) = r.torch.as_ref().and_then(|t| t.record.as_ref()) {
        out.push_str("| live at the OOM | bytes | largest site |\n|---|--:|---|\n");
        for row in &rec.breakdown {
            out.push_str(&format!(
                "| {} | {} | `{}` |\n",
                row.label,
                Bytes(row.bytes),
                row.sites.first().map(|s| s.label.as_str()).unwrap_or("")
            ));
        }
        out.push('\n');
    }
    if !r.phases.is_empty() {
        out.push_str("| phase | from | to | memory |\n|---|--:|--:|---|\n");
        for p in &r.phases {
            out.push_str(&format!(
                "| {} | {:.2} s | {:.2} s | {} → {} |\n",
                p.kind.as_str(),
                p.start_ms as f64 / 1000.0,
                p.end_ms as f64 / 1000.0,
                Bytes(p.from_bytes),
                Bytes(p.to_bytes)
            ));
        }
        out.push('\n');
    }
    if let Some(f) = r.findings.first() {
        out.push_str(&format!(
            "First out-of-memory line:\n\n```\n{}\n```\n\n",
            f.quote
        ));
    }
    md_remedies(&mut out, &r.remedies);
    out.push_str(&format!(
        "<sub>llm-oom {} · `llm-oom watch` · {}</sub>\n",
        r.version, r.gpu_note
    ));
    out
}

fn svg(r: &WatchReport) -> String {
    let t_max = r
        .timeline
        .last()
        .map_or(1, |s| s.t_ms)
        .max(r.duration_ms)
        .max(1) as f64;
    let y_max = [
        r.peak_gpu_bytes.unwrap_or(0),
        r.peak_host_bytes,
        r.limit_bytes.unwrap_or(0),
    ]
    .into_iter()
    .max()
    .unwrap_or(1)
    .max(1) as f64
        * 1.05;
    let x = |t: u64| LEFT + (t as f64 / t_max) * (W - LEFT - RIGHT);
    let y = |b: u64| H - BOTTOM - (b as f64 / y_max) * (H - TOP - BOTTOM);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(s, r##"<rect width="{W}" height="{H}" fill="#fff"/>"##);
    let title = format!(
        "llm-oom watch: {} — {}",
        shell_command(&r.argv),
        r.verdict.cause
    );
    let _ = write!(
        s,
        r#"<text x="{LEFT}" y="22" font-size="14">{}</text>"#,
        escape(&title)
    );
    for p in &r.phases {
        let color = match p.kind {
            PhaseKind::Load => "#e8eefc",
            PhaseKind::Spike => "#fdecea",
            PhaseKind::Growth => "#fff4e0",
            PhaseKind::Steady => continue,
        };
        let (x0, x1) = (x(p.start_ms), x(p.end_ms).max(x(p.start_ms) + 2.0));
        let _ = write!(
            s,
            r#"<rect x="{x0:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
            x1 - x0,
            H - TOP - BOTTOM
        );
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" fill="#555">{}</text>"##,
            x0 + 3.0,
            TOP + 14.0,
            p.kind.as_str()
        );
    }
    // axes and a few byte ticks
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="#333"/>"##,
        H - BOTTOM,
        W - RIGHT,
        H - BOTTOM
    );
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="#333"/>"##,
        H - BOTTOM
    );
    for i in 0..=4 {
        let b = (y_max / 1.05 * i as f64 / 4.0) as u64;
        let _ = write!(
            s,
            r##"<text x="{}" y="{:.1}" text-anchor="end" fill="#333">{}</text>"##,
            LEFT - 6.0,
            y(b) + 4.0,
            Bytes(b)
        );
    }
    let _ = write!(
        s,
        r##"<text x="{}" y="{}" text-anchor="end" fill="#333">{:.1} s</text>"##,
        W - RIGHT,
        H - 12.0,
        t_max / 1000.0
    );
    if let Some(limit) = r.limit_bytes {
        let what = if r.limit_bytes == r.gpu_total_bytes {
            "card"
        } else {
            "allowed"
        };
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#c00" stroke-dasharray="6 4"/><text x="{2}" y="{3:.1}" fill="#c00">{what} {4}</text>"##,
            y(limit),
            W - RIGHT,
            LEFT + 4.0,
            y(limit) - 4.0,
            Bytes(limit)
        );
    }
    let line = |points: Vec<(u64, u64)>, color: &str, label: &str, s: &mut String, row: f64| {
        if points.is_empty() {
            return;
        }
        let pts: Vec<String> = points
            .iter()
            .map(|(t, b)| format!("{:.1},{:.1}", x(*t), y(*b)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            pts.join(" ")
        );
        let _ = write!(
            s,
            r#"<text x="{}" y="{row}" fill="{color}">{label}</text>"#,
            W - RIGHT - 170.0
        );
    };
    let gpu: Vec<(u64, u64)> = r
        .timeline
        .iter()
        .filter_map(|p| p.gpu_bytes.map(|g| (p.t_ms, g)))
        .collect();
    if gpu.iter().any(|p| p.1 > 0) {
        line(gpu, "#1f5fd1", "GPU (process tree)", &mut s, 22.0);
    }
    line(
        r.timeline.iter().map(|p| (p.t_ms, p.host_bytes)).collect(),
        "#2a9d3a",
        "host RAM (process tree)",
        &mut s,
        36.0,
    );
    if let Some(t) = r.oom_at_ms {
        let _ = write!(
            s,
            r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1}" stroke="#c00" stroke-width="2"/><text x="{2:.1}" y="{3}" fill="#c00">OOM</text>"##,
            x(t),
            H - BOTTOM,
            x(t) + 4.0,
            TOP + 28.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Whether PyTorch's record was on, and what it left.
fn torch_line(t: &crate::commands::watch::torch::TorchRecord) -> String {
    if let Some(p) = &t.snapshot_path {
        return format!(
            "PyTorch's record: torch {}, snapshot at the OOM kept in {}{} (open it at pytorch.org/memory_viz)",
            t.torch.as_deref().unwrap_or("?"),
            p.display(),
            t.dump_seconds
                .map(|s| format!(", dumped in {s:.2} s"))
                .unwrap_or_default()
        );
    }
    match (&t.torch, t.cuda_initialised) {
        (None, _) => "PyTorch's record: the program did not import torch".into(),
        (Some(v), false) => {
            format!("PyTorch's record: torch {v} never initialised CUDA (history not turned on)")
        }
        (Some(v), true) => format!(
            "PyTorch's record: on (torch {v}, history {}), no out-of-memory to dump",
            if t.history { "on" } else { "off" }
        ),
    }
}
