//! Markdown made for pasting into a GitHub issue: a summary line a maintainer reads first, the
//! numbers in tables, the long parts folded.

use super::percent;
use super::text::limit_word;
use crate::diagnosis::{Cause, Remedy, Verdict};
use crate::plan::PlanReport;
use crate::units::{group, Bytes};

pub fn verdict_block(out: &mut String, title: &str, v: &Verdict) {
    let mark = if v.cause == Cause::None { "✅" } else { "❌" };
    out.push_str(&format!("### {mark} {title}: `{}`\n\n", v.cause));
    out.push_str(&format!("**{}**\n\n", v.summary));
    if v.cause != Cause::None {
        out.push_str(&format!(
            "Stage `{}` · confidence {:.2}\n\n",
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

pub fn plan(r: &PlanReport) -> String {
    let mut out = String::new();
    let (m, w, c) = (&r.model, &r.workload, &r.components);
    verdict_block(&mut out, &format!("llm-oom plan · {}", m.name), &r.verdict);
    out.push_str("| | |\n|---|---|\n");
    out.push_str(&format!(
        "| model | `{}` ({}, {:.2} B params, {} layers, {} / {} KV heads × {}) |\n",
        m.name,
        m.architecture,
        m.parameters as f64 / 1e9,
        m.layers,
        m.heads,
        m.kv_heads,
        m.head_dim
    ));
    out.push_str(&format!(
        "| workload | {} prompt + {} new tokens × {} · weights {} · KV {} |\n",
        group(w.prompt_tokens),
        group(w.max_new_tokens),
        w.batch,
        w.weight_dtype,
        w.kv_dtype
    ));
    out.push_str(&format!(
        "| card | {} ({}) |\n",
        Bytes(r.device.vram_bytes),
        r.device.source
    ));
    out.push_str(&format!(
        "| engine | {} — {} |\n\n",
        r.engine.name, r.engine.note
    ));

    out.push_str(
        "#### Where the memory goes\n\n| component | bytes | share of card |\n|---|--:|--:|\n",
    );
    for (name, b) in [
        ("weights", c.weights),
        ("KV cache", c.kv_cache),
        ("activations", c.activations),
        ("allocator", c.allocator),
        ("CUDA runtime", c.runtime),
        ("margin", c.margin),
        ("**total**", c.total),
    ] {
        out.push_str(&format!(
            "| {name} | {} | {} |\n",
            Bytes(b),
            percent(b, r.device.vram_bytes)
        ));
    }
    out.push('\n');
    remedies(&mut out, &r.remedies);

    out.push_str("<details><summary>Safe token budget</summary>\n\n| concurrency | max tokens / request | prompt | new | limited by |\n|--:|--:|--:|--:|---|\n");
    for row in &r.budget.table {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            row.concurrency,
            group(row.max_total_tokens),
            group(row.prompt_tokens),
            group(row.new_tokens),
            limit_word(row.limited_by)
        ));
    }
    out.push_str("\n</details>\n\n<details><summary>Quantization what-if</summary>\n\n| weights as | engine | weights | this workload | largest context (batch 1) |\n|---|---|--:|---|--:|\n");
    for q in &r.quantization {
        out.push_str(&format!(
            "| {} | {} | {} | {} {} | {} |\n",
            q.dtype,
            q.engine,
            Bytes(q.weights_bytes),
            if q.fits { "fits" } else { "OOM" },
            Bytes(q.peak_bytes),
            group(q.max_total_tokens_batch1)
        ));
    }
    out.push_str("\n</details>\n\n");
    for n in &r.notes {
        out.push_str(&format!("> note: {n}\n"));
    }
    out.push_str(&format!(
        "<sub>llm-oom {} · `llm-oom plan`</sub>\n",
        r.version
    ));
    out
}

pub fn explain(r: &crate::explain::ExplainReport) -> String {
    let mut out = String::new();
    verdict_block(&mut out, "llm-oom explain", &r.verdict);
    if let Some(f) = r.findings.first() {
        out.push_str(&format!(
            "First fatal line ({}):\n\n```\n{}\n```\n\n",
            f.line, f.quote
        ));
    }
    remedies(&mut out, &r.remedies);
    if let Some(d) = &r.to_decide {
        out.push_str(&format!("**To decide:** {d}\n\n"));
    }
    out.push_str(&format!(
        "<sub>llm-oom {} · `llm-oom explain` · {} lines, {} out-of-memory event(s)</sub>\n",
        r.version,
        r.lines,
        r.findings.len()
    ));
    out
}

pub fn watch(r: &crate::watch::WatchReport) -> String {
    let mut out = String::new();
    verdict_block(&mut out, "llm-oom watch", &r.verdict);
    out.push_str("| | |\n|---|---|\n");
    out.push_str(&format!(
        "| command | `{}` |\n",
        r.argv.join(" ").replace('|', "\\|")
    ));
    let how = match r.exit.signal {
        Some(s) => format!("killed by signal {s}"),
        None => format!("exit code {}", r.exit.code),
    };
    out.push_str(&format!(
        "| ended | {how} after {:.1} s |\n",
        r.duration_ms as f64 / 1000.0
    ));
    out.push_str(&format!(
        "| peak GPU | {} |\n",
        r.peak_gpu_bytes
            .map_or("not sampled".into(), |b| Bytes(b).to_string())
    ));
    out.push_str(&format!("| peak host | {} |\n\n", Bytes(r.peak_host_bytes)));
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
    remedies(&mut out, &r.remedies);
    out.push_str(&format!(
        "<sub>llm-oom {} · `llm-oom watch` · {}</sub>\n",
        r.version, r.gpu_note
    ));
    out
}
