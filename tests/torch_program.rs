//! The generated allocation sequence of transformers' `generate()` (`estimate::torch_program`)
//! against PyTorch's own: the allocator traces recorded on the H200 in the ground truth's trials
//! (tests/fixtures/alloc-traces/, and all 16 in docs/calibration/alloc-traces-h200-2026-12-01/
//! with `--ignored`). No trace is read to make the sequence; each is only compared with it.
//!
//! - Event by event, up to the trace's last allocation or its out-of-memory: the same order of
//!   allocations and frees, each free of the same tensor, each size the same as the allocator
//!   rounds it (to 512 B; a few small workspaces are modelled to that rounding, not to the byte).
//! - Replayed through the allocator model under the trial's own limit: PyTorch's reserved peak to
//!   the byte, and the out-of-memory at PyTorch's failing request.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};

use flate2::read::GzDecoder;
use llm_oom::estimate::torch_alloc::DRIVER_RESERVE;
use llm_oom::estimate::torch_program::{replay, run, Generation, Phase, Shape, Sink, Stop};

const MIB: u64 = 1 << 20;

/// A trace as the allocator saw it: allocations by size, frees by the index of their allocation,
/// and the failed request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ev {
    A(u64),
    F(usize),
    Oom(u64),
}

struct Trace {
    free_before_load: u64,
    eager: bool,
    peak_reserved: u64,
    ran: bool,
    events: Vec<Ev>,
}

/// Turns (action, address, size) into events, matching each free to its allocation.
#[derive(Default)]
struct Builder {
    live: HashMap<u64, usize>,
    n: usize,
    events: Vec<Ev>,
}

impl Builder {
    fn push(&mut self, action: char, addr: u64, size: u64) {
        match action {
            'A' => {
                self.live.insert(addr, self.n);
                self.n += 1;
                self.events.push(Ev::A(size));
            }
            'F' => {
                if let Some(i) = self.live.remove(&addr) {
                    self.events.push(Ev::F(i));
                }
            }
            'O' => self.events.push(Ev::Oom(size)),
            _ => {}
        }
    }
}

/// The compact fixtures: `key value` header lines, then `A|F|S|U|O hexaddr size`.
fn load_fixture(name: &str) -> Trace {
    let path = format!(
        "{}/tests/fixtures/alloc-traces/{name}.trace.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut t = Trace {
        free_before_load: 0,
        eager: false,
        peak_reserved: 0,
        ran: false,
        events: Vec::new(),
    };
    let mut b = Builder::default();
    for line in BufReader::new(GzDecoder::new(file)).lines() {
        let line = line.unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut w = line.split_whitespace();
        let (Some(k), Some(v)) = (w.next(), w.next()) else {
            continue;
        };
        let num = |s: &str| s.parse::<u64>().unwrap_or_else(|e| panic!("{line}: {e}"));
        match k {
            "#" | "peak_allocated" => {}
            "free_before_load" => t.free_before_load = num(v),
            "attn" => t.eager = v == "eager",
            "outcome" => t.ran = v == "ok",
            "peak_reserved" => t.peak_reserved = num(v),
            _ => {
                let addr = u64::from_str_radix(v, 16).unwrap_or_else(|e| panic!("{line}: {e}"));
                let size = num(w.next().unwrap_or("0"));
                b.push(k.chars().next().unwrap_or('?'), addr, size);
            }
        }
    }
    t.events = b.events;
    t
}

/// The full traces of docs/calibration (JSON: spec, rec, env, events).
fn load_docs(name: &str) -> Trace {
    let path = format!(
        "{}/docs/calibration/{name}.json.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut text = String::new();
    GzDecoder::new(file)
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut b = Builder::default();
    for e in v["events"].as_array().into_iter().flatten() {
        let action = e[0].as_str().and_then(|s| s.chars().next()).unwrap_or('?');
        b.push(
            action,
            e[1].as_u64().unwrap_or(0),
            e[2].as_u64().unwrap_or(0),
        );
    }
    Trace {
        free_before_load: v["env"]["free_before_load"].as_u64().unwrap_or(0),
        eager: v["spec"]["attn"] == "eager",
        peak_reserved: v["rec"]["peak_reserved"].as_u64().unwrap_or(0),
        ran: v["rec"]["outcome"] == "ok",
        events: b.events,
    }
}

/// `<preset>-<attn>-b<batch>-n<new>-p<prompt>`: the model's shape and the generation.
fn workload(name: &str) -> (Shape, Generation) {
    let parts: Vec<&str> = name.rsplitn(5, '-').collect();
    let [p, n, b, attn, stem] = parts[..] else {
        panic!("{name}: not <preset>-<attn>-b-n-p");
    };
    let num = |s: &str, k: char| -> u64 {
        s.strip_prefix(k)
            .and_then(|x| x.parse().ok())
            .unwrap_or_else(|| panic!("{name}: {s}"))
    };
    let path = format!("{}/presets/{stem}.json", env!("CARGO_MANIFEST_DIR"));
    let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let spec = llm_oom::model::presets::load(stem, &json).unwrap_or_else(|e| panic!("{e}"));
    let shape = Shape::of(&spec, attn == "eager").unwrap_or_else(|| panic!("{stem}: no shape"));
    let g = Generation {
        batch: num(b, 'b'),
        prompt: num(p, 'p'),
        new_tokens: num(n, 'n'),
    };
    assert!(shape.covers(g), "{name}");
    (shape, g)
}

#[derive(Default)]
struct Record {
    events: Vec<Ev>,
    made: usize,
}

impl Sink for Record {
    fn alloc(&mut self, bytes: u64, _: Phase) -> Result<usize, Stop> {
        self.events.push(Ev::A(bytes));
        self.made += 1;
        Ok(self.made - 1)
    }
    fn free(&mut self, id: usize) {
        self.events.push(Ev::F(id));
    }
    fn empty_cache(&mut self) {}
}

fn rounded(x: u64) -> u64 {
    x.div_ceil(512).max(1) * 512
}

/// The first event where the generated sequence and the trace part, if any.
fn first_difference(t: &Trace, generated: &[Ev]) -> Option<String> {
    let last = t
        .events
        .iter()
        .rposition(|e| !matches!(e, Ev::F(_)))
        .unwrap_or(0);
    for (k, want) in t.events.iter().enumerate().take(last + 1) {
        let got = generated.get(k).copied();
        let same = match (want, got) {
            (Ev::A(w) | Ev::Oom(w), Some(Ev::A(g))) => rounded(*w) == rounded(g),
            (Ev::F(w), Some(Ev::F(g))) => *w == g,
            _ => false,
        };
        if !same {
            return Some(format!("event {k}: traced {want:?}, generated {got:?}"));
        }
    }
    None
}

/// What the process takes beside the pool while the prefill runs (measured at every recorded
/// out-of-memory in the allocator traces), and the driver's own reserve.
fn limit(t: &Trace) -> u64 {
    let outside = if t.eager { 68 * MIB } else { 76 * MIB };
    t.free_before_load - outside - DRIVER_RESERVE
}

fn check(name: &str, t: &Trace) {
    let (shape, g) = workload(name);
    let mut rec = Record::default();
    let _ = run(&shape, g, &mut rec);
    if let Some(d) = first_difference(t, &rec.events) {
        panic!("{name}: {d}");
    }
    let out = replay(&shape, g, limit(t));
    let failed_request = t.events.iter().find_map(|e| match e {
        Ev::Oom(s) => Some(*s),
        _ => None,
    });
    match (failed_request, out.failed) {
        (None, None) => assert_eq!(out.peak_reserved, t.peak_reserved, "{name}"),
        (Some(want), Some(stop)) => {
            assert_eq!(stop.oom.requested, rounded(want), "{name}");
            assert_eq!(out.peak_reserved, t.peak_reserved, "{name}");
        }
        (want, got) => panic!("{name}: traced failure {want:?}, replayed {got:?}"),
    }
    // A trace that ran out with no failed request ran out beside the pool (cuDNN in decode).
    assert!(
        t.ran || failed_request.is_some() || out.failed.is_none(),
        "{name}"
    );
}

/// The nine traces CI carries: the largest prompts that ran, the first that ran out in the
/// allocator, and the one that failed in cuDNN during decode with every tensor placed.
const FIXTURES: &[&str] = &[
    "qwen2.5-7b-instruct-sdpa-b1-n128-p4466",
    "llama-2-7b-eager-b1-n64-p1458",
    "qwen2.5-7b-instruct-sdpa-b1-n128-p4549",
    "llama-2-7b-eager-b1-n64-p1509",
    "phi-3-mini-4k-instruct-sdpa-b4-n128-p936",
    "qwen3-8b-sdpa-b1-n128-p7019",
    "mistral-7b-instruct-v0.2-sdpa-b8-n256-p4295",
    "qwen2.5-0.5b-instruct-sdpa-b16-n256-p8073",
    "mistral-7b-instruct-v0.2-sdpa-b1-n256-p5887",
];

#[test]
fn the_generated_sequence_is_pytorchs_own_on_the_nine_ci_traces() {
    for name in FIXTURES {
        check(name, &load_fixture(name));
    }
}

/// All traces with their events: the 16 at the limits (7 models, SDPA and eager, batch 1–16,
/// ~160 MB of JSON, alloc-traces-h200-2026-12-01), the 20 held-out ones (without Python frames,
/// alloc-traces-h200-2026-12-02) and Qwen2.5-7B's four on the H100 at 4,029, 4,032, 4,095 and
/// 4,096 tokens (alloc-traces-h100-2026-12-07):
/// `cargo test --release --test torch_program -- --ignored`.
#[test]
#[ignore]
fn the_generated_sequence_is_pytorchs_own_on_all_forty_traces() {
    let mut n = 0;
    for set in [
        "alloc-traces-h100-2026-12-07",
        "alloc-traces-h200-2026-12-01",
        "alloc-traces-h200-2026-12-02",
    ] {
        let dir = format!("{}/docs/calibration/{set}", env!("CARGO_MANIFEST_DIR"));
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".json.gz"))
                    .map(str::to_string)
            })
            .collect();
        names.sort();
        for name in &names {
            check(name, &load_docs(&format!("{set}/{name}")));
            eprintln!("{name}: the same sequence, peak and failure");
            n += 1;
        }
    }
    assert_eq!(n, 40);
}

/// Every trial the ground truth ran on the H200 under its ballast (docs/calibration/
/// transformers-limits-h200-2026-12-0*.jsonl and card-edges-*.jsonl, 36 trials of 9 workloads
/// bisected from the predicted budget, each in a child forked before CUDA started; and on the
/// H100, card-edges-h100-2026-12-07.jsonl: Mistral-7B's 4 trials, Llama-3.1-8B's 4, Qwen2.5-7B's
/// 5, Phi-3-mini's 4, eager Llama-2-7B's 4, Qwen2.5-0.5B's 5 and Nemotron's 6 outside the traced
/// families): 49 trials of the searches at and around the limits
/// of 8 workloads, of which 16 were traced to make the sequence, and 20 held-out
/// trials at the edges the model predicted before they ran (9 more workloads: Llama-3.1's scaled
/// RoPE, SmolLM2's tied head at head_dim 64, eager Mistral and Qwen2.5, batch 2-32; and
/// Qwen2.5-7B's non-monotone stretch, 4,097-4,300 out of memory and 4,400 running). The replay on
/// the trial's card must run where the trial ran and fail where it failed, in every trial — the
/// prompt of exactly 4,096 tokens included, on both cards, since the driver's placement of a
/// segment in the unused end of an earlier reservation is modelled. Where it ran, the reserved
/// peak is PyTorch's to the byte in all but a few untraced trials, off by a segment (Qwen2.5-7B at
/// 32,640, −2 MiB, one small-pool segment; Llama-3.1-8B's b2 at 512, −2 MiB).
#[test]
fn the_replay_agrees_with_every_recorded_trial() {
    let dir = format!("{}/docs/calibration", env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with("transformers-limits-h200-2026-12-0") || n.starts_with("card-edges-")
            })
        })
        .collect();
    files.sort();
    let (mut checked, mut skipped, mut inexact, mut wrong) = (0, 0, 0, Vec::new());
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{f:?}: {e}"));
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}"));
            if v["kind"] != "trial" {
                continue;
            }
            let stem = v["preset"].as_str().unwrap_or_default();
            let path = format!("{}/presets/{stem}.json", env!("CARGO_MANIFEST_DIR"));
            let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let spec = llm_oom::model::presets::load(stem, &json).unwrap_or_else(|e| panic!("{e}"));
            let num = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
            let g = Generation {
                batch: num("batch"),
                prompt: num("prompt"),
                new_tokens: num("new"),
            };
            let Some(shape) = Shape::of(&spec, v["attn"] == "eager").filter(|s| s.covers(g)) else {
                skipped += 1; // Gemma-2; Phi-3 past its window
                continue;
            };
            let run = llm_oom::estimate::torch_program::on_card(&shape, g, num("vram_limit"));
            let ran = v["outcome"] == "ok";
            let name = format!(
                "{stem} {} b{} n{} p{}",
                v["attn"], g.batch, g.new_tokens, g.prompt
            );
            if run.ran() != ran {
                wrong.push(format!(
                    "{name}: ran {ran}, replay {:?} short_beside {}",
                    run.failed, run.short_beside
                ));
            } else if ran && run.peak_reserved.abs_diff(num("peak_reserved")) > 24 * MIB {
                wrong.push(format!(
                    "{name}: reserved {} vs {}",
                    run.peak_reserved,
                    num("peak_reserved")
                ));
            }
            if ran && run.peak_reserved != num("peak_reserved") {
                eprintln!(
                    "{name}: reserved {} replayed, {} measured",
                    run.peak_reserved,
                    num("peak_reserved")
                );
                inexact += 1;
            }
            checked += 1;
        }
    }
    eprintln!("{checked} trials replayed, {skipped} outside the traced families, {inexact} peaks not to the byte");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked >= 128, "{checked}");
    // Untraced trials off by a segment or a few: Qwen2.5-7B at 32,640 (one small-pool segment),
    // and Llama-3.1-8B's b2 at 512 in the card edges, on the H200 and twice on the H100 (the same
    // 2 MiB: the two cards' limits agree).
    assert!(inexact <= 4, "{inexact}");
}
