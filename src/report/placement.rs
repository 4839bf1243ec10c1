//! The per-device table of a placement (`device_map="auto"`), for the terminal and Markdown.

use super::text::{table, Style};
use crate::placement::accelerate::Place;
use crate::placement::{DeviceShare, Placement};
use crate::units::Bytes;

const HEADER: [&str; 9] = [
    "device",
    "holds",
    "weights",
    "KV cache",
    "activations",
    "runtime",
    "margin",
    "free",
    "of",
];

fn cells(s: &DeviceShare, label: String) -> Vec<String> {
    let gpu = matches!(s.device, Place::Gpu(_));
    let dash = |b: u64| {
        if gpu {
            Bytes(b).to_string()
        } else {
            "—".into()
        }
    };
    let free = if s.device == Place::Disk {
        "—".to_string()
    } else if s.free_bytes < 0 {
        format!("−{} short", Bytes(s.free_bytes.unsigned_abs()))
    } else {
        Bytes(s.free_bytes.unsigned_abs()).to_string()
    };
    vec![
        label,
        s.holds.join(", "),
        Bytes(s.weights_bytes).to_string(),
        if s.kv_cache_bytes > 0 {
            Bytes(s.kv_cache_bytes).to_string()
        } else {
            dash(0)
        },
        dash(s.activations_bytes),
        dash(s.runtime_bytes),
        dash(s.margin_bytes),
        free,
        if s.device == Place::Disk {
            "—".into()
        } else {
            Bytes(s.capacity_bytes).to_string()
        },
    ]
}

fn fix_line(p: &Placement) -> Option<String> {
    let f = p.fix.as_ref()?;
    let shown = |b: &i64| Bytes(b.unsigned_abs()).to_string();
    let same = f
        .free_bytes
        .windows(2)
        .all(|w| shown(&w[0].1) == shown(&w[1].1));
    let free: Vec<String> = match f.free_bytes.first() {
        // past two GPUs, one figure for identical ranks
        Some((_, b)) if same && f.free_bytes.len() > 2 => {
            vec![format!(
                "{} GPUs {} free each",
                f.free_bytes.len(),
                shown(b)
            )]
        }
        _ => f
            .free_bytes
            .iter()
            .map(|(d, b)| format!("{d} {} free", shown(b)))
            .collect(),
    };
    Some(format!(
        "load with {}: {} of {} layers on the GPUs, {}",
        f.load_with,
        f.layers_on_gpus,
        p.layers_total,
        free.join(", ")
    ))
}

/// The rows as printed: one per device, except that past 4 GPUs the identical ranks of a
/// parallel engine on one node share a row (`node0/cuda:0–7 (each)`).
fn rows(p: &Placement) -> Vec<Vec<String>> {
    let gpus = p
        .devices
        .iter()
        .filter(|s| matches!(s.device, Place::Gpu(_)))
        .count();
    let same = |a: &DeviceShare, b: &DeviceShare| {
        let node = |s: &DeviceShare| s.rank.map(|r| r.node);
        a.rank.is_some()
            && node(a) == node(b)
            && (a.holds == b.holds)
            && [
                a.capacity_bytes,
                a.weights_bytes,
                a.kv_cache_bytes,
                a.activations_bytes,
            ] == [
                b.capacity_bytes,
                b.weights_bytes,
                b.kv_cache_bytes,
                b.activations_bytes,
            ]
            && (a.runtime_bytes, a.margin_bytes, a.free_bytes)
                == (b.runtime_bytes, b.margin_bytes, b.free_bytes)
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < p.devices.len() {
        let first = &p.devices[i];
        let mut j = i + 1;
        while gpus > 4 && j < p.devices.len() && same(first, &p.devices[j]) {
            j += 1;
        }
        let label = if j - i > 1 {
            let last = p.devices[j - 1].label();
            let tail = last.rsplit(':').next().unwrap_or_default();
            format!("{}–{tail} (each)", first.label())
        } else {
            first.label()
        };
        out.push(cells(first, label));
        i = j;
    }
    out
}

pub fn text(out: &mut String, p: &Placement, style: &Style) {
    out.push_str(&style.bold(&format!(
        "Per device ({}: {} of {} layers on the GPUs)",
        p.load_with, p.layers_on_gpus, p.layers_total
    )));
    out.push('\n');
    let mut t = table(&HEADER, 2);
    for row in rows(p) {
        t.add_row(row);
    }
    out.push_str(&t.to_string());
    out.push('\n');
    if let Some(r) = &p.refused {
        out.push_str(&format!("{r}\n"));
    }
    if let Some(f) = fix_line(p) {
        out.push_str(&format!("{f}\n"));
    }
    for n in &p.notes {
        out.push_str(&style.dim(&format!("placement: {n}\n")));
    }
    out.push('\n');
}

pub fn markdown(out: &mut String, p: &Placement) {
    out.push_str(&format!(
        "#### Per device (`{}`: {} of {} layers on the GPUs)\n\n| {} |\n|---|---|{}\n",
        p.load_with,
        p.layers_on_gpus,
        p.layers_total,
        HEADER.join(" | "),
        "--:|".repeat(HEADER.len() - 2)
    ));
    for row in rows(p) {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out.push('\n');
    if let Some(r) = &p.refused {
        out.push_str(&format!("{r}\n\n"));
    }
    if let Some(f) = fix_line(p) {
        out.push_str(&format!("{f}\n\n"));
    }
    for n in &p.notes {
        out.push_str(&format!("> placement: {n}\n"));
    }
    out.push('\n');
}
