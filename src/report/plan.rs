//! `plan` rendered: the terminal (verdict, where the memory goes, the safe token budget, the
//! quantization what-if) and Markdown for an issue.

use super::markdown::{remedies as md_remedies, verdict_block};
use super::percent;
use super::text::{budget_table, limit_word, remedies, table, Style};
use super::Render;
use crate::budget::card::CardSource;
use crate::budget::Limit;
use crate::commands::plan::{PlanReport, WeightsFrom};
use crate::units::{group, Bytes};

impl Render for PlanReport {
    fn text(&self, style: &Style) -> String {
        text(self, style)
    }
    fn markdown(&self) -> String {
        markdown(self)
    }
}

fn text(r: &PlanReport, style: &Style) -> String {
    let mut out = String::new();
    let m = &r.model;
    let w = &r.workload;
    let c = &r.components;
    let gpus = multi_gpu(r);
    out.push_str(&format!(
        "{} {} · {} · {} ({})\n\n",
        style.bold("llm-oom plan"),
        m.name,
        r.engine
            .server
            .map_or(r.engine.name.to_string(), |s| format!(
                "{s} → {}",
                r.engine.name
            )),
        gpus.as_ref()
            .map_or(format!("{} card", Bytes(r.device.vram_bytes)), |g| g
                .0
                .clone()),
        match r.device.source {
            CardSource::Flag => "--vram".to_string(),
            CardSource::Nvml => format!(
                "free on {}",
                r.device.gpu.as_ref().map_or("GPU", |g| g.name.as_str())
            ),
            other => other.to_string(),
        }
    ));
    let oom_word = if r.vllm_startup.as_ref().is_some_and(|s| !s.starts) {
        "vLLM REFUSES TO START"
    } else if r.sglang_startup.as_ref().is_some_and(|s| !s.starts) {
        "SGLang REFUSES TO START"
    } else if r.llama_refuses.is_some() {
        "llama.cpp REFUSES TO START"
    } else {
        "WOULD OOM"
    };
    let partial = r
        .ollama
        .as_ref()
        .and_then(|o| o.layers_on_gpu)
        .is_some_and(|n| n < r.model.layers)
        || r.llama_server
            .as_ref()
            .and_then(|s| s.layers_on_gpu)
            .is_some_and(|n| n < r.model.layers);
    let fits_word = if partial {
        "RUNS, PARTLY ON THE CPU"
    } else {
        "FITS"
    };
    super::text::verdict_header(&mut out, &r.verdict, style, fits_word, oom_word);
    if let Some(msg) = r.vllm_startup.as_ref().and_then(|s| s.message.as_deref()) {
        out.push_str(&format!("  vLLM would say: ValueError: {msg}\n"));
    }
    if let Some(s) = &r.vllm_startup {
        out.push_str(&format!(
            "  Start-up of {}: chunked prefill {}, profiling run of {} tokens\n",
            s.vllm,
            if s.chunked_prefill { "on" } else { "off" },
            crate::units::group(s.max_num_batched_tokens)
        ));
    }
    if let Some(msg) = r.sglang_startup.as_ref().and_then(|s| s.message.as_deref()) {
        out.push_str(&format!("  SGLang would say: {msg}\n"));
    }
    if let Some(msg) = r.llama_refuses {
        out.push_str(&format!("  llama.cpp would say: {msg}\n"));
    }
    out.push('\n');
    out.push_str(&format!(
        "Model     {}{} · {:.2} B params · {} layers{} · {} heads / {} KV heads × {} · vocab {}{}\n",
        m.architecture,
        vision_clause(m),
        m.parameters as f64 / 1e9,
        m.layers,
        mtp_clause(m),
        m.heads,
        m.kv_heads,
        m.head_dim,
        group(m.vocab_size),
        m.max_position_embeddings
            .map_or(String::new(), |n| format!(" · context {}", group(n)))
    ));
    out.push_str(&format!(
        "Workload  {} prompt + {} new tokens × {} sequence{} · weights {} · KV cache {}\n",
        group(w.prompt_tokens),
        group(w.max_new_tokens),
        w.batch,
        if w.batch == 1 { "" } else { "s" },
        w.weight_dtype,
        w.kv_dtype
    ));
    // With --python: "transformers 5.17.0 on the meta device" sized the parameters and the cache.
    let derived = r.derived.as_ref().map(|d| d.source());
    out.push_str(&format!(
        "Per token KV cache {} · weights {}{}{}\n\n",
        Bytes(r.kv_cache_bytes_per_token),
        Bytes(r.weights_bytes),
        match (r.weights_from, &derived) {
            (WeightsFrom::SafetensorsHeaders, _) =>
                " (the checkpoint's safetensors headers)".into(),
            (WeightsFrom::Gguf, _) => " (the GGUF tensor table)".into(),
            (WeightsFrom::Config, _) | (WeightsFrom::TransformersMeta, None) => String::new(),
            (WeightsFrom::TransformersMeta, Some(s)) => format!(" ({s})"),
        },
        match (r.weights_from, &derived) {
            (WeightsFrom::TransformersMeta, _) | (_, None) => String::new(),
            (_, Some(s)) => format!(" · cache: {s}"),
        }
    ));

    let phase = c.peak_phase.describe();
    out.push_str(&style.bold(&format!("Where the memory goes (peak at the {phase})")));
    out.push('\n');
    let mut t = table(&["component", "bytes", "share"], 1);
    let of = gpus.as_ref().map_or(r.device.vram_bytes, |g| g.1);
    for (name, b) in [
        ("weights", c.weights.saturating_sub(c.vision_tower)),
        ("vision tower", c.vision_tower),
        ("KV cache", c.kv_cache),
        ("activations", c.activations),
        ("allocator", c.allocator),
        ("CUDA runtime", c.runtime),
        ("margin", c.margin),
        ("LoRA adapters", c.adapters),
        ("draft weights", c.draft_weights),
        ("draft KV cache", c.draft_kv_cache),
        ("vision encoder", c.vision_encoder),
    ]
    .into_iter()
    .filter(|&(name, b)| b > 0 || !deployment_row(name))
    {
        t.add_row(vec![name.to_string(), Bytes(b).to_string(), percent(b, of)]);
    }
    t.add_row(vec![
        "total".to_string(),
        Bytes(c.total).to_string(),
        percent(c.total, of),
    ]);
    out.push_str(&t.to_string());
    out.push_str("\n\n");
    if let Some(p) = &r.placement {
        super::placement::text(&mut out, p, style);
    }

    remedies(&mut out, &r.remedies, style);
    across_gpus(&mut out, r, style);
    if gpus.is_some() {
        return tail(out, r, style);
    }

    budget_table(&mut out, &r.budget, w, "Safe token budget", style);

    out.push_str(&style.bold("Quantization what-if"));
    out.push('\n');
    let mut t = table(
        &[
            "weights as",
            "engine",
            "weights",
            "this workload",
            "largest context (batch 1)",
        ],
        2,
    );
    for q in &r.quantization {
        t.add_row(vec![
            q.dtype.to_string(),
            q.engine.to_string(),
            Bytes(q.weights_bytes).to_string(),
            format!(
                "{} {}",
                if q.fits { "fits" } else { "OOM" },
                Bytes(q.peak_bytes)
            ),
            format!(
                "{}{}",
                group(q.max_total_tokens_batch1),
                match q.limited_by {
                    Limit::Context => " (model max)",
                    Limit::MaxRequest => " (max request)",
                    _ => "",
                }
            ),
        ]);
    }
    out.push_str(&t.to_string());
    out.push_str("\n\n");
    tail(out, r, style)
}

/// Each GPU's peak of a remedy that spreads the model: `cuda:0 61.2 GiB, cuda:1 61.0 GiB of
/// 80.0 GiB each`, or the same peak once for identical GPUs.
fn per_device(r: &crate::verdict::Remedy) -> String {
    let d = &r.per_device;
    let cap = d.first().map_or(0, |x| x.capacity_bytes);
    let shown = |x: &crate::verdict::remedy::DevicePeak| Bytes(x.peak_bytes).to_string();
    if d.windows(2).all(|w| shown(&w[0]) == shown(&w[1])) {
        return format!(
            "{} GPUs at {} of {} each",
            d.len(),
            Bytes(d.first().map_or(0, |x| x.peak_bytes)),
            Bytes(cap)
        );
    }
    let each: Vec<String> = d
        .iter()
        .map(|x| format!("{} {}", x.device, Bytes(x.peak_bytes)))
        .collect();
    format!("{} of {} each", each.join(", "), Bytes(cap))
}

/// What more GPUs of the one card would do, each priced per device.
fn across_gpus(out: &mut String, r: &PlanReport, style: &Style) {
    if r.across_gpus.is_empty() {
        return;
    }
    out.push_str(&style.bold("On more GPUs of this card (priced per device)"));
    out.push('\n');
    for a in &r.across_gpus {
        let mark = if a.fits() { "✓" } else { "·" };
        out.push_str(&format!("  {mark} {}\n", a.action));
        out.push_str(&format!("       {}\n", style.dim(&a.how)));
        out.push_str(&format!("       {}\n", style.dim(&per_device(a))));
    }
    out.push('\n');
}

fn tail(mut out: String, r: &PlanReport, style: &Style) -> String {
    for n in &r.notes {
        out.push_str(&style.dim(&format!("note: {n}\n")));
    }
    out.push_str(&style.dim(&format!("engine profile: {}\n", r.engine.note)));
    out
}

/// With several GPUs: how the header names them (`2 GPUs: 24.0 GiB + 24.0 GiB`) and their sum.
fn multi_gpu(r: &PlanReport) -> Option<(String, u64)> {
    // SGLang's --tp ranks: one card of a kind each.
    if let Some(s) = r.sglang_startup.as_ref().filter(|s| s.tp > 1) {
        return Some((
            format!("{} GPUs: {} each, --tp {}", s.tp, Bytes(s.card_bytes), s.tp),
            s.card_bytes.saturating_mul(s.tp),
        ));
    }
    let p = r.placement.as_ref()?;
    let caps: Vec<u64> = p
        .devices
        .iter()
        .filter(|s| matches!(s.device, crate::placement::accelerate::Place::Gpu(_)))
        .map(|s| s.capacity_bytes)
        .collect();
    if caps.len() < 2 {
        return None;
    }
    let names: Vec<String> = caps.iter().map(|&b| Bytes(b).to_string()).collect();
    let nodes = p
        .parallel
        .as_ref()
        .filter(|f| f.nodes > 1)
        .map_or(String::new(), |f| {
            format!(" on {} nodes × {}", f.nodes, f.gpus_per_node)
        });
    let each = if caps.len() > 4 && caps.windows(2).all(|w| w[0] == w[1]) {
        format!("{} each{nodes}", names[0])
    } else {
        format!("{}{nodes}", names.join(" + "))
    };
    Some((
        format!("{} GPUs: {each}", caps.len()),
        caps.iter().fold(0u64, |a, &b| a.saturating_add(b)),
    ))
}

/// ` (+ 1 MTP layer, 11.61 B params, not counted)` for a checkpoint with multi-token-prediction
/// layers the count leaves out.
/// " + a vision tower of 27 layers (0.41 B)": the tower a vision-language model's parameters
/// include beside its language model.
fn vision_clause(m: &crate::model::facts::ModelFacts) -> String {
    m.vision.map_or(String::new(), |v| {
        let layers = if v.layers > 0 {
            format!(" of {} layers", v.layers)
        } else {
            String::new()
        };
        format!(
            " + a vision tower{layers} ({:.2} B)",
            v.parameters as f64 / 1e9
        )
    })
}

fn mtp_clause(m: &crate::model::facts::ModelFacts) -> String {
    m.mtp.map_or(String::new(), |x| {
        format!(
            " (+ {} MTP layer{}, {:.2} B params, not counted)",
            x.layers,
            if x.layers == 1 { "" } else { "s" },
            x.parameters as f64 / 1e9
        )
    })
}

fn markdown(r: &PlanReport) -> String {
    let mut out = String::new();
    let (m, w, c) = (&r.model, &r.workload, &r.components);
    verdict_block(&mut out, &format!("llm-oom plan · {}", m.name), &r.verdict);
    out.push_str("| | |\n|---|---|\n");
    out.push_str(&format!(
        "| model | `{}` ({}, {:.2} B params, {} layers{}, {} / {} KV heads × {}) |\n",
        m.name,
        m.architecture,
        m.parameters as f64 / 1e9,
        m.layers,
        mtp_clause(m),
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
        ("weights", c.weights.saturating_sub(c.vision_tower)),
        ("vision tower", c.vision_tower),
        ("KV cache", c.kv_cache),
        ("activations", c.activations),
        ("allocator", c.allocator),
        ("CUDA runtime", c.runtime),
        ("margin", c.margin),
        ("LoRA adapters", c.adapters),
        ("draft weights", c.draft_weights),
        ("draft KV cache", c.draft_kv_cache),
        ("vision encoder", c.vision_encoder),
        ("**total**", c.total),
    ]
    .into_iter()
    .filter(|&(name, b)| b > 0 || !deployment_row(name))
    {
        out.push_str(&format!(
            "| {name} | {} | {} |\n",
            Bytes(b),
            percent(b, r.device.vram_bytes)
        ));
    }
    out.push('\n');
    if let Some(p) = &r.placement {
        super::placement::markdown(&mut out, p);
    }
    md_remedies(&mut out, &r.remedies);
    if !r.across_gpus.is_empty() {
        out.push_str("#### On more GPUs of this card (priced per device)\n\n");
        for a in &r.across_gpus {
            out.push_str(&format!(
                "- {} — `{}`; {}\n",
                a.action,
                a.how.replace('`', "'"),
                per_device(a)
            ));
        }
        out.push('\n');
    }

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

/// The rows a plan shows only when the deployment has them (adapters, a draft).
fn deployment_row(name: &str) -> bool {
    matches!(
        name,
        "LoRA adapters" | "draft weights" | "draft KV cache" | "vision tower" | "vision encoder"
    )
}
