//! What the log around a finding says: its evidence lines, its engine, the stage and the
//! innermost frame near it, the stage hints above it.

use super::*;

pub(super) fn ev(f: &Finding, text: String) -> Evidence {
    Evidence {
        text,
        bytes: None,
        line: Some(f.line),
    }
}

pub(super) fn ev_bytes(f: &Finding, text: String, bytes: u64) -> Evidence {
    Evidence {
        text,
        bytes: Some(bytes),
        line: Some(f.line),
    }
}

/// The engine whose knobs remedies should name: the user's `--engine` unless the log says otherwise.
pub fn engine_of(f: &Finding, asked: Engine) -> Engine {
    match f.source {
        Source::Vllm => Engine::Vllm,
        Source::LlamaCpp => Engine::LlamaCpp,
        _ => asked,
    }
}

/// Which stage the log shows for a finding at line `at`: the nearest load or generation marker
/// before it (a traceback lists frames above the error).
pub(crate) fn stage_near(ctx: &Context, at: usize) -> Stage {
    match (near(&ctx.load_lines, at), near(&ctx.generation_lines, at)) {
        (Some(_), None) => Stage::Load,
        (None, Some(_)) => Stage::FirstToken,
        (Some(l), Some(g)) if l > g => Stage::Load,
        (Some(_), Some(_)) => Stage::FirstToken,
        (None, None) => Stage::Unknown,
    }
}

pub(super) fn near(lines: &[usize], at: usize) -> Option<usize> {
    lines
        .iter()
        .rev()
        .copied()
        .find(|&l| l <= at && at - l <= 200)
}

/// The traceback frames the context marks, by what they allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Frame {
    EagerAttention,
    Activation,
    Cache,
    Optimizer,
    Load,
}

impl Frame {
    pub(super) fn lines(self, ctx: &Context) -> &[usize] {
        match self {
            Frame::EagerAttention => &ctx.eager_attention_lines,
            Frame::Activation => &ctx.activation_lines,
            Frame::Cache => &ctx.cache_lines,
            Frame::Optimizer => &ctx.optimizer_lines,
            Frame::Load => &ctx.load_lines,
        }
    }
}

/// The innermost of `kinds` within `within` lines above line `at`, and its line; on one line the
/// kind listed first wins.
pub(super) fn innermost_frame(
    ctx: &Context,
    at: usize,
    within: usize,
    kinds: &[Frame],
) -> Option<(usize, Frame)> {
    kinds
        .iter()
        .enumerate()
        .filter_map(|(i, &k)| {
            near(k.lines(ctx), at)
                .filter(|&l| at - l <= within)
                .map(|l| (l, i, k))
        })
        .max_by_key(|&(l, i, _)| (l, usize::MAX - i))
        .map(|(l, _, k)| (l, k))
}

/// Which part of a deployment ran out, where the traceback around the error at line `at` says it:
/// a vision encoder (the images of a request are encoded at once) or a speculative-decoding draft
/// model (its own weights and KV cache beside the target's). The cause stays the one the figures
/// give; this says where in the deployment it happened and what prices it.
pub(super) fn part_of_the_deployment(ctx: &Context, at: usize) -> Option<Evidence> {
    // A Python traceback lists its frames above the error; vLLM and llama.cpp print theirs below.
    let close = |lines: &[usize]| {
        lines
            .iter()
            .copied()
            .filter(|&l| l.abs_diff(at) <= 80)
            .min_by_key(|&l| l.abs_diff(at))
    };
    let (line, text) = if let Some(l) = close(&ctx.vision_lines) {
        (
            l,
            "in the vision encoder: a request's images are encoded at once, so fewer images per              request or smaller ones (Qwen-VL's max_pixels, vLLM's --limit-mm-per-prompt) lower              this peak; `llm-oom plan --images N --image-size WxH` prices it"
                .to_string(),
        )
    } else if let Some(l) = close(&ctx.draft_lines) {
        (
            l,
            "in the speculative-decoding draft model: its weights and its own KV cache sit beside              the target model's; a smaller draft, fewer speculative tokens, or none lower it;              `llm-oom plan --draft-model ID` prices it"
                .to_string(),
        )
    } else {
        return None;
    };
    Some(Evidence {
        text,
        bytes: None,
        line: Some(line),
    })
}

/// The innermost Python frame above line `at` (the last `File "…"` line, within 8 lines) when it
/// is a constructor's (`in __init__`): the object being built ran out — a model building its
/// layers on the card, or a wrapper loading one (faster-whisper-buzz-439:
/// `faster_whisper/transcribe.py … in __init__` is WhisperModel loading its weights).
pub(super) fn constructor_innermost(ctx: &Context, at: usize) -> Option<usize> {
    let last = ctx.py_frames.iter().rev().copied().find(|&l| l <= at)?;
    (at - last <= 8 && ctx.init_frames.contains(&last)).then_some(last)
}

/// The stage signal that belongs to line `at`: the innermost frame above it (within 200 lines,
/// and not followed by a generation frame: "Loading checkpoint shards" above a `generate`
/// traceback is over), else one just below it (vLLM prints the error before its traceback).
pub(super) fn hint_near(ctx: &Context, at: usize) -> Option<StageHint> {
    hint_line_near(ctx, at).map(|(_, h)| h)
}

/// `hint_near` with the hint's line.
pub(super) fn hint_line_near(ctx: &Context, at: usize) -> Option<(usize, StageHint)> {
    if ctx.clock.reversed() {
        return hint_near_newest_first(ctx, at);
    }
    let generating_after = |h: usize| ctx.generation_lines.iter().any(|&g| g > h && g <= at);
    let before = ctx
        .stage_hints
        .iter()
        .rev()
        .find(|(l, _)| *l <= at && at - l <= 200)
        .filter(|(l, _)| !generating_after(*l));
    // Below the error only for an engine that prints its traceback after the message: with a
    // traceback above, what follows is the next run (comfyui-4880: the next prompt's load).
    let traceback_above = [
        &ctx.load_lines,
        &ctx.generation_lines,
        &ctx.activation_lines,
        &ctx.eager_attention_lines,
        &ctx.cache_lines,
    ]
    .iter()
    .any(|v| near(v, at).is_some_and(|l| at - l <= 40));
    let after = || {
        ctx.stage_hints
            .iter()
            .find(|(l, _)| *l > at && l - at <= 40 && !traceback_above)
    };
    before.or_else(after).copied()
}

/// A log pasted newest first (its timestamps step back: a log viewer's order) reads upwards:
/// what happened before the error is below it (vllm-worker-vllm-40: "Capturing the model for
/// CUDA graphs" under "Error initializing vLLM engine: CUDA out of memory").
pub(super) fn hint_near_newest_first(ctx: &Context, at: usize) -> Option<(usize, StageHint)> {
    let earlier = ctx
        .stage_hints
        .iter()
        .find(|(l, _)| *l > at && l - at <= 200);
    let later = || {
        ctx.stage_hints
            .iter()
            .rev()
            .find(|(l, _)| *l < at && at - l <= 40)
    };
    earlier.or_else(later).copied()
}
