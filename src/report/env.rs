//! `env` rendered: a table of the GPUs, then the build, the host, the Python packages and the
//! allocator's settings — in Markdown as a block to paste under an issue.

use super::text::{table, Style};
use super::Render;
use crate::commands::env::EnvReport;
use crate::units::Bytes;

impl Render for EnvReport {
    fn text(&self, _style: &Style) -> String {
        let mut out = String::new();
        if self.gpus.is_empty() {
            out.push_str(&format!(
                "GPUs: none ({})\n",
                self.gpu_note.as_deref().unwrap_or("NVML lists none")
            ));
        } else {
            let mut t = table(&["GPU", "name", "compute", "total", "free", "processes"], 3);
            for g in &self.gpus {
                t.add_row(vec![
                    g.info.index.to_string(),
                    g.info.name.clone(),
                    g.compute_capability.clone().unwrap_or_else(|| "?".into()),
                    Bytes(g.info.total_bytes).to_string(),
                    Bytes(g.info.free_bytes).to_string(),
                    processes(g),
                ]);
            }
            out.push_str(&format!("{t}\n"));
        }
        for (k, v) in lines(self) {
            out.push_str(&format!("{k:<22} {v}\n"));
        }
        out
    }

    fn markdown(&self) -> String {
        let mut out = String::from("### Environment (`llm-oom env`)\n\n");
        if !self.gpus.is_empty() {
            out.push_str("| GPU | name | compute | total | free | processes |\n|---|---|---|---:|---:|---|\n");
            for g in &self.gpus {
                out.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} |\n",
                    g.info.index,
                    g.info.name,
                    g.compute_capability.as_deref().unwrap_or("?"),
                    Bytes(g.info.total_bytes),
                    Bytes(g.info.free_bytes),
                    processes(g)
                ));
            }
            out.push('\n');
        }
        out.push_str("| | |\n|---|---|\n");
        if self.gpus.is_empty() {
            out.push_str(&format!(
                "| GPUs | none ({}) |\n",
                self.gpu_note.as_deref().unwrap_or("NVML lists none")
            ));
        }
        for (k, v) in lines(self) {
            out.push_str(&format!("| {k} | {} |\n", v.replace('|', "\\|")));
        }
        out
    }
}

fn processes(g: &crate::commands::env::EnvGpu) -> String {
    if g.info.processes.is_empty() {
        return "none".into();
    }
    g.info
        .processes
        .iter()
        .map(|p| match p.bytes {
            Some(b) => format!("{} {} ({})", p.pid, p.name, Bytes(b)),
            None => format!("{} {}", p.pid, p.name),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The facts below the GPU table, as (label, value).
fn lines(r: &EnvReport) -> Vec<(String, String)> {
    let mut v = vec![(
        "llm-oom".to_string(),
        format!("{} ({}), {}", r.version, r.build.features(), r.build.target),
    )];
    if let Some(g) = r.gpus.first() {
        v.push((
            "driver".into(),
            format!(
                "{}{}",
                g.info.driver,
                r.cuda_driver
                    .as_ref()
                    .map(|c| format!(" (CUDA {c})"))
                    .unwrap_or_default()
            ),
        ));
    }
    if let (Some(t), Some(a)) = (r.host_total_bytes, r.host_available_bytes) {
        v.push((
            "host RAM".into(),
            format!("{} ({} available)", Bytes(t), Bytes(a)),
        ));
    }
    let p = &r.python;
    v.push((
        "python".into(),
        match (&p.version, &p.note) {
            (Some(ver), _) => format!("{ver} ({})", p.interpreter),
            (None, Some(n)) => n.clone(),
            (None, None) => p.interpreter.clone(),
        },
    ));
    // In the order of PACKAGES (torch first), not alphabetical.
    for name in crate::commands::env::PACKAGES {
        if let Some(ver) = p.packages.get(*name) {
            v.push((
                name.to_string(),
                ver.clone().unwrap_or_else(|| "not installed".into()),
            ));
        }
    }
    for (k, val) in &r.variables {
        v.push((k.clone(), val.clone()));
    }
    if !r.variables.contains_key("PYTORCH_CUDA_ALLOC_CONF") {
        v.push(("PYTORCH_CUDA_ALLOC_CONF".into(), "not set".into()));
    }
    v
}
