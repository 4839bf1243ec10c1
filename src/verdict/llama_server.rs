//! llama.cpp's verdict in its own words (`llama-server`, `llama-cli`): llama.cpp allocates the KV
//! cache of the whole `-c` when it loads, so an out-of-memory there is the context the user set
//! (or the one the workload implies), not the tokens of one request; the remedies are its knobs —
//! the largest `-c` that fits, `-ctk`/`-ctv q8_0`, `-fa on`, fewer `-np` slots, `-ngl N`.

use super::remedy::{Change, Remedy, RemedyBudget};
use super::{Cause, Evidence, Stage, Verdict};
use crate::budget::Planner;
use crate::estimate::llamacpp::{context, largest_ctx, LlamaCppArgs};
use crate::estimate::llamacpp_fit::{Fitted, Outcome};
use crate::estimate::{Engine, Estimate, Workload};
use crate::placement::Fix;
use crate::units::{group, Bytes};

/// The context as llama.cpp sizes it, in a user's words: `-c 32,768` (1 slot) or, without `-c`,
/// the context the workload implies.
pub fn describe_context(w: &Workload) -> String {
    let (n_ctx, per_seq) = context(w);
    let slots = w.batch.max(1);
    let split = if slots > 1 {
        format!(", {slots} slots of {} cells", group(per_seq))
    } else {
        String::new()
    };
    match w.llama.ctx_size {
        Some(c) => format!("-c {}{split}", group(c)),
        None => format!(
            "the context of {slots} × {} tokens (-c {}{split})",
            group(w.total_tokens()),
            group(n_ctx)
        ),
    }
}

/// Reword a predicted verdict for llama.cpp and add its knobs to the remedies.
pub fn speak(
    planner: &Planner,
    w: &Workload,
    est: &Estimate,
    v: &mut Verdict,
    remedies: &mut Vec<Remedy>,
) {
    if w.engine != Engine::LlamaCpp {
        return;
    }
    let vram = planner.vram;
    let ctx = describe_context(w);
    if let Some(e) = v
        .evidence
        .iter_mut()
        .find(|e| e.text.starts_with("KV cache: "))
    {
        *e = Evidence::bytes(
            format!(
                "KV cache: {} for {ctx} in {}, allocated when llama.cpp loads",
                Bytes(est.kv_cache_full),
                w.kv_dtype
            ),
            est.kv_cache_full,
        );
    }
    if v.cause == Cause::KvCache {
        v.stage = Stage::Load;
        v.summary = format!(
            "kv_cache: {ctx} needs a {} KV cache, {} over the {} card",
            Bytes(est.kv_cache_full),
            Bytes(est.total.saturating_sub(vram)),
            Bytes(vram)
        );
    }
    if v.cause == Cause::Concurrency {
        let fit = v
            .summary
            .rsplit_once("; ")
            .map(|(_, n)| format!("; -np {} fits", n.trim_end_matches(" fit")))
            .unwrap_or_default();
        v.summary = format!(
            "concurrency: {ctx} needs a {} KV cache, {} over the {} card{fit}",
            Bytes(est.kv_cache_full),
            Bytes(est.total.saturating_sub(vram)),
            Bytes(vram)
        );
    }
    if v.cause == Cause::None {
        return;
    }
    let mut added = Vec::new();
    let (n_ctx, _) = context(w);
    if let Some(c) = largest_ctx(planner.spec, w, |alt| planner.fits(alt)).filter(|&c| c < n_ctx) {
        let alt = Workload {
            llama: LlamaCppArgs {
                ctx_size: Some(c),
                ..w.llama
            },
            ..*w
        };
        let mut r = Remedy::new(
            Change::ReduceContext(c),
            Engine::LlamaCpp,
            est.total,
            planner.estimate(&alt).total,
            vram,
        );
        let per_slot = c / w.batch.max(1);
        if per_slot < w.total_tokens() {
            r.action = format!(
                "{} (requests past {} tokens a slot will not fit)",
                r.action,
                group(per_slot)
            );
        }
        added.push(r);
    }
    if w.llama.flash_attn == Some(false) {
        let alt = Workload {
            llama: LlamaCppArgs {
                flash_attn: Some(true),
                ..w.llama
            },
            ..*w
        };
        let new = planner.estimate(&alt).total;
        if new < est.total {
            let mut r = Remedy::new(Change::UseSdpa, Engine::LlamaCpp, est.total, new, vram);
            r.action = r.action.replacen(
                "use SDPA / flash attention instead of eager",
                "turn flash attention on",
                1,
            );
            r.how = "-fa on".into();
            added.push(r);
        }
    }
    added.append(remedies);
    added.sort_by_key(|r| !r.fits());
    *remedies = added;
}

/// The `-ngl` that fits (the placement's answer), as a remedy: the layers left on the CPU run
/// there, slowly, and their KV cache stays with them.
pub fn offload(fix: &Fix, layers: u64, est: &Estimate, vram: u64) -> Remedy {
    let free = fix
        .free_bytes
        .iter()
        .map(|(_, f)| *f)
        .min()
        .unwrap_or(0)
        .max(0) as u64;
    let peak = vram.saturating_sub(free);
    let mut r = Remedy::new(Change::CpuOffload, Engine::LlamaCpp, est.total, peak, vram);
    r.action = format!(
        "keep {} of {} layers on the GPU, the rest in CPU RAM (slower) → peak {} of {}",
        fix.layers_on_gpus,
        layers,
        Bytes(peak),
        Bytes(vram)
    );
    r.how = fix.load_with.clone();
    r.new_budget = Some(RemedyBudget {
        peak_bytes: peak,
        vram_bytes: vram,
        fits: true,
    });
    r
}

/// The remedies in ollama's knobs, with the quant tag in force and no `-ngl` of llama-server's
/// (ollama fits the layers itself, or takes `num_gpu`).
fn in_ollamas_knobs(quant: crate::dtype::WeightDtype, remedies: &mut Vec<Remedy>) {
    remedies.retain(|r| r.change != Change::CpuOffload);
    let set = super::knobs::InForce {
        gguf_quant: Some(quant.to_string()),
        ..Default::default()
    };
    super::knobs::speak(remedies, super::knobs::Family::Ollama, &set);
}

/// ollama's verdict over llama-server's: where every layer fits, the verdict stands; where only
/// some do, llama-server keeps `fix`'s layers on the GPU and runs the rest on the CPU — it loads
/// and answers, slower (ollama logs "offloaded N/M layers to GPU"); where none fit, it runs out.
/// The remedies, priced for the whole model on the GPU, are said in ollama's knobs.
pub fn ollama(
    quant: crate::dtype::WeightDtype,
    fix: Option<&Fix>,
    layers: u64,
    v: &mut Verdict,
    remedies: &mut Vec<Remedy>,
) {
    in_ollamas_knobs(quant, remedies);
    if v.cause == Cause::None {
        v.summary = format!(
            "ollama loads all {layers} layers on the GPU · {}",
            v.summary
        );
        return;
    }
    let Some(fix) = fix.filter(|f| f.layers_on_gpus < layers) else {
        return;
    };
    let ngl = fix
        .load_with
        .split_whitespace()
        .skip_while(|w| *w != "-ngl")
        .nth(1)
        .unwrap_or("?")
        .to_string();
    v.evidence.insert(
        0,
        Evidence::text(format!(
            "all {layers} layers on the GPU: {} — llama-server fits -ngl {ngl} instead",
            v.summary
        )),
    );
    v.summary = format!(
        "ollama loads {} of {layers} layers on the GPU (num_gpu {ngl}), the rest run on the \
         CPU: it answers, slower",
        fix.layers_on_gpus
    );
    v.cause = Cause::None;
    v.stage = Stage::Load;
}

/// How llama-server's start-up choice reads in a note: the slots, the context and what `--fit`
/// did to it.
pub fn fit_note(f: &Fitted) -> String {
    let slots = if f.unified {
        format!(
            "{} slots{} sharing one unified cache",
            f.slots,
            if f.slots_auto { " (-np auto)" } else { "" }
        )
    } else {
        format!(
            "{} slots of {} cells",
            f.slots,
            group(f.n_ctx / f.slots.max(1))
        )
    };
    let what = match f.outcome {
        Outcome::Unchanged => format!(
            "the context it starts from leaves {} free, at least --fit-target {}: -c {} stays",
            Bytes(f.free_bytes.saturating_sub(f.projected_bytes)),
            Bytes(f.target_bytes),
            group(f.n_ctx)
        ),
        Outcome::ContextReduced => format!(
            "--fit lowers -c from {} to {} (its projection: {} of {} free at {}, {} at {}; \
             linear between --fit-ctx and the trained context, rounded down to 256 a stream) \
             to leave --fit-target {} free",
            group(f.n_ctx_auto.unwrap_or(f.n_ctx)),
            group(f.n_ctx),
            Bytes(f.projected_start_bytes),
            Bytes(f.free_bytes),
            group(f.n_ctx_auto.unwrap_or(f.n_ctx)),
            Bytes(f.projected_bytes),
            group(f.n_ctx),
            Bytes(f.target_bytes)
        ),
        Outcome::LayersToCpu => format!(
            "not even --fit-ctx {} leaves --fit-target {} free with every layer on the GPU: \
             --fit keeps -c {} and moves layers to the CPU",
            group(f.min_ctx),
            Bytes(f.target_bytes),
            group(f.n_ctx)
        ),
        Outcome::UserContext => format!(
            "-c {} was set, so --fit keeps it and moves layers to the CPU if the card is short",
            group(f.n_ctx)
        ),
        Outcome::Off => format!("--fit off: it loads -c {} as given", group(f.n_ctx)),
    };
    format!(
        "llama-server ({}): {slots}; {what}; {} free for its buffers once the CUDA context is up",
        f.build,
        Bytes(f.free_bytes)
    )
}

/// llama-server's verdict over the plan's, once `--fit` has chosen: a context it lowered is the
/// one that loads; where layers must leave the card, `--fit` keeps on the GPU those that leave
/// `--fit-target` free and runs the rest on the CPU — it loads and answers, slower.
/// `fix` is the placement's largest `-ngl` within the plan's own margin; `--fit` leaves its
/// target instead, so the layers its extra margin takes come off (`layer` bytes each).
pub fn fitted(
    f: &mut Fitted,
    fix: Option<&Fix>,
    layers: u64,
    est: &Estimate,
    v: &mut Verdict,
    remedies: &mut Vec<Remedy>,
) {
    let auto = f.n_ctx_auto.is_some_and(|n| n != f.n_ctx);
    if v.cause == Cause::None {
        f.layers_on_gpu = None;
        v.summary = if auto {
            format!(
                "llama-server --fit sets -c {} (the trained {} does not leave --fit-target free) · {}",
                group(f.n_ctx),
                group(f.n_ctx_auto.unwrap_or(f.n_ctx)),
                v.summary
            )
        } else {
            format!("llama-server loads -c {} · {}", group(f.n_ctx), v.summary)
        };
        return;
    }
    if !f.fit || !matches!(f.outcome, Outcome::LayersToCpu | Outcome::UserContext) {
        return;
    }
    let Some(fix) = fix.filter(|x| x.layers_on_gpus > 0 && x.layers_on_gpus < layers) else {
        return;
    };
    let free = fix
        .free_bytes
        .iter()
        .map(|(_, b)| (*b).max(0) as u64)
        .min()
        .unwrap_or(0);
    let short = f
        .target_bytes
        .saturating_sub(est.margin)
        .saturating_sub(free);
    let layer = est
        .weights
        .saturating_add(est.kv_cache)
        .checked_div(layers)
        .unwrap_or(0)
        .max(1);
    let on_gpu = fix.layers_on_gpus.saturating_sub(short.div_ceil(layer));
    if on_gpu == 0 {
        return;
    }
    f.layers_on_gpu = Some(on_gpu);
    remedies.retain(|r| r.change != Change::CpuOffload);
    v.evidence.insert(
        0,
        Evidence::text(format!(
            "all {layers} layers on the GPU: {} — llama-server --fit keeps {on_gpu} there \
             instead, leaving --fit-target {} free",
            v.summary,
            Bytes(f.target_bytes)
        )),
    );
    v.summary = format!(
        "llama-server --fit keeps {on_gpu} of {layers} layers on the GPU (-ngl {on_gpu}) at -c \
         {}, the rest run on the CPU: it answers, slower",
        group(f.n_ctx)
    );
    v.cause = Cause::None;
    v.stage = Stage::Load;
}

/// ollama with `num_gpu` set: it passes `-ngl N` and llama-server offloads those layers whether
/// they fit or not (llm/llama_server.go at ollama@fb307609). The verdict is that placement's: it
/// loads with the rest of the layers on the CPU, or the GPU runs out at load. The remedies are
/// said in ollama's knobs, a smaller `num_gpu` first where one fits.
pub fn ollama_num_gpu(
    quant: crate::dtype::WeightDtype,
    num_gpu: u64,
    p: &crate::placement::Placement,
    v: &mut Verdict,
    remedies: &mut Vec<Remedy>,
) {
    in_ollamas_knobs(quant, remedies);
    let layers = p.layers_total;
    let placed = super::placed::from_placement(p);
    if p.runs_out.is_some() {
        // The fitting -ngl, which is ollama's num_gpu.
        let fewer = p
            .fix
            .as_ref()
            .and_then(|f| {
                f.load_with
                    .split_whitespace()
                    .skip_while(|w| *w != "-ngl")
                    .nth(1)
                    .and_then(|n| n.parse::<u64>().ok())
            })
            .filter(|&n| n < num_gpu);
        *v = Verdict {
            summary: format!(
                "num_gpu {num_gpu} (-ngl {num_gpu}): {}{}",
                placed.summary,
                fewer.map_or(String::new(), |n| format!("; PARAMETER num_gpu {n} loads"))
            ),
            ..placed
        };
        return;
    }
    let on = p.layers_on_gpus;
    *v = Verdict {
        summary: if on >= layers {
            format!("ollama loads all {layers} layers on the GPU (num_gpu {num_gpu})")
        } else {
            format!(
                "ollama loads {on} of {layers} layers on the GPU (num_gpu {num_gpu}), the rest \
                 run on the CPU: it answers, slower"
            )
        },
        stage: Stage::Load,
        ..placed
    };
}
