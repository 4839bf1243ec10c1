//! llama.cpp's refusal of a quantized V cache without flash attention: `llama_init_from_model`
//! (ggml-org/llama.cpp b11312, src/llama-context.cpp) returns no context when `type_v` is
//! quantized and `flash_attn_type` is disabled (`auto` turns flash attention on for it, where the
//! backend has it); llama-server then fails to create the context and exits. ollama passes
//! OLLAMA_KV_CACHE_TYPE as `--cache-type-k`/`--cache-type-v` and OLLAMA_FLASH_ATTENTION=0 as
//! `--flash-attn off` whatever the other says (ollama@fb307609 llm/llama_server.go
//! `NewLlamaServerRunner`, `LlamaServerFlashAttention`): no fallback to f16, the same refusal.

use super::remedy::{Change, Remedy};
use super::{Cause, Evidence, Stage, Verdict};
use crate::budget::Planner;
use crate::dtype::KvDtype;
use crate::estimate::llamacpp::LlamaCppArgs;
use crate::estimate::{Engine, Estimate, Workload};

/// What llama.cpp logs (`LLAMA_LOG_ERROR` in `llama_init_from_model`).
pub const MESSAGE: &str =
    "llama_init_from_model: quantized V cache requires flash_attn to be enabled";

/// Whether llama.cpp refuses `w`: a quantized V cache (`-ctv q8_0`, `q4_0`) with `-fa off`.
pub fn refuses(w: &Workload) -> bool {
    w.engine == Engine::LlamaCpp
        && w.llama.flash_attn == Some(false)
        && matches!(w.kv_dtype, KvDtype::Q8_0 | KvDtype::Q4_0)
}

/// The verdict and the two ways out, each priced: `-fa on` keeps the quantized cache; `-ctv f16`
/// keeps flash attention off with the V half of the cache in f16 (K stays quantized: llama.cpp
/// quantizes K without flash attention). Under ollama (`ollama`), whose OLLAMA_KV_CACHE_TYPE sets
/// both halves, the second is an f16 cache.
pub fn verdict(
    planner: &Planner,
    w: &Workload,
    est: &Estimate,
    ollama: bool,
) -> (Verdict, Vec<Remedy>) {
    let vram = planner.vram;
    let on = planner
        .estimate(&Workload {
            llama: LlamaCppArgs {
                flash_attn: Some(true),
                ..w.llama
            },
            ..*w
        })
        .total;
    // K and V take the same bytes a token: the f16 V half is half the way to an f16 cache.
    let f16 = planner
        .estimate(&Workload {
            kv_dtype: KvDtype::F16,
            ..*w
        })
        .total;
    let v_f16 = if ollama {
        f16
    } else {
        est.total.saturating_add(f16.saturating_sub(est.total) / 2)
    };
    let mut fa = Remedy::new(Change::UseSdpa, Engine::LlamaCpp, est.total, on, vram);
    fa.action = fa.action.replacen(
        "use SDPA / flash attention instead of eager",
        &format!("turn flash attention on, keep the {} cache", w.kv_dtype),
        1,
    );
    fa.how = if ollama {
        "OLLAMA_FLASH_ATTENTION=1 (or unset)".into()
    } else {
        "-fa on".into()
    };
    let mut ctv = Remedy::new(
        Change::QuantizeKv(KvDtype::F16),
        Engine::LlamaCpp,
        est.total,
        v_f16,
        vram,
    );
    if ollama {
        ctv.action = ctv.action.replacen(
            "store the KV cache in f16",
            "keep flash attention off, the KV cache in f16",
            1,
        );
        ctv.how = "OLLAMA_KV_CACHE_TYPE=f16 (or unset)".into();
    } else {
        ctv.action = ctv.action.replacen(
            "store the KV cache in f16",
            &format!(
                "keep flash attention off, the V cache in f16 (K stays {})",
                w.kv_dtype
            ),
            1,
        );
        ctv.how = "-ctv f16".into();
    }
    let mut remedies = vec![fa, ctv];
    remedies.sort_by_key(|r| !r.fits());
    let verdict = Verdict {
        record: None,
        cause: Cause::KvCache,
        stage: Stage::Load,
        confidence: 0.95,
        summary: format!(
            "a {} V cache needs flash attention, and it is off: llama.cpp creates no context",
            w.kv_dtype
        ),
        evidence: vec![
            Evidence::text(format!("llama.cpp: {MESSAGE}")),
            Evidence::text(
                "llama.cpp b11312 src/llama-context.cpp `llama_init_from_model`: a quantized \
                 type_v with flash_attn_type disabled returns no context (-fa auto turns flash \
                 attention on for it where the backend has it)",
            ),
        ],
        contributing: Vec::new(),
        rule: None,
    };
    (verdict, remedies)
}
