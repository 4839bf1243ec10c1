//! The verdict of SGLang's start-up on one card (`estimate::sglang_startup`): SGLang refuses to
//! start when no token pool is left within `mem_fraction_static` after the weights; once it
//! starts, the pool caps the longest request and how many run at once — more requests wait in its
//! queue (or are retracted and recomputed), slower, not an out-of-memory.

use crate::estimate::sglang_startup::MAX_SUGGESTED_FRACTION;
use crate::estimate::{Engine, SglangStartup, Workload};
use crate::units::{group, Bytes};

use super::remedy::{Change, Remedy, RemedyBudget};
use super::{Cause, Evidence, Stage, Verdict};

/// The SGLang every SGLang plan assumes, said in each report.
pub const SOURCE: &str = "SGLang's token pool derived from \
     sgl-project/sglang@001ccef0 (model_runner_kv_cache_mixin.py `profile_max_num_token`), its \
     default --mem-fraction-static from server_args.py `_handle_gpu_memory_settings` \
     (sglang#10975); not measured on a GPU";

/// The verdict, the remedies (flags to paste) and the notes for `s`, with the workload `w`.
pub fn verdict(s: &SglangStartup, w: &Workload) -> (Verdict, Vec<Remedy>, Vec<String>) {
    let rank = if s.tp > 1 { "per rank: " } else { "" };
    let lora = if s.lora_bytes > 0 {
        format!(" − LoRA buffers {}", Bytes(s.lora_bytes))
    } else {
        String::new()
    };
    let arithmetic = Evidence::bytes(
        format!(
            "{rank}token pool = (free {} − weights {}{lora}) − free × (1 − mem_fraction_static {}{}) {} = {} \
             → rest_memory // cell_size = {} / {} bytes a token = {} tokens",
            Bytes(s.free_before_load_bytes),
            Bytes(s.weights_bytes),
            s.mem_fraction_static,
            if s.fraction_is_default {
                ", SGLang's default for this card"
            } else {
                ""
            },
            Bytes(s.reserved_bytes),
            Bytes(s.pool_bytes),
            Bytes(s.pool_bytes),
            group(s.cell_size),
            group(s.profiled_tokens)
        ),
        s.pool_bytes,
    );
    let mut notes = vec![SOURCE.to_string()];
    if s.tp > 1 {
        notes.push(format!(
            "--tp {}: one rank on each of {} GPUs of {} on one node; each rank holds 1/{} of the \
             weights ({}) and {} KV head(s) a token, {} bytes{}, and the pool is one rank's: {} tokens \
             ({}) on each GPU (python/sglang/srt/configs/model_config.py `get_num_kv_heads`); the \
             components, the token budget and the what-if below are the whole model on one card",
            s.tp,
            s.tp,
            Bytes(s.card_bytes),
            s.tp,
            Bytes(s.weights_bytes),
            s.kv_heads_per_rank,
            group(s.cell_size),
            if s.kv_heads_replicated {
                ", the model's fewer KV heads than ranks replicated"
            } else {
                ""
            },
            group(s.max_total_num_tokens),
            Bytes(s.pool_bytes)
        ));
    }
    notes.extend([format!(
        "SGLang keeps free × (1 − mem_fraction_static) = {} for the activations of a \
         --chunked-prefill-size {} step and the CUDA graphs of up to {} requests; it does not \
         check that they fit it",
        Bytes(s.reserved_bytes),
        group(s.chunked_prefill_size),
        s.cuda_graph_max_bs
    )]);
    if s.lora_bytes > 0 {
        notes.push(format!(
            "SGLang allocates the LoRA buffers ({}) before it profiles the free memory \
             (model_runner.py: init_lora_manager, then init_memory_pool): they come off the token \
             pool as the weights do",
            Bytes(s.lora_bytes)
        ));
    }
    if let Some(alg) = s.speculative_algorithm {
        notes.push(format!(
            "--speculative-algorithm {}: the draft worker starts after the model's pool is \
             allocated; its weights ({}{}) and its own KV pool of max_total_num_tokens = {} tokens \
             × {} bytes = {} come out of the {} mem_fraction_static leaves{} \
             (speculative/eagle_worker.py, model_runner_kv_cache_mixin.py init_memory: \
             draft_runner_cache_size)",
            alg.name(),
            Bytes(s.draft_weights_bytes),
            if s.draft_load_bytes > s.draft_weights_bytes {
                format!(
                    ", {} while its own embedding and head are loaded, until set_embed_and_head \
                     shares the model's",
                    Bytes(s.draft_load_bytes)
                )
            } else {
                String::new()
            },
            group(s.max_total_num_tokens),
            group(s.draft_cell_size),
            Bytes(s.draft_kv_bytes),
            Bytes(s.reserved_bytes),
            if s.fraction_is_default {
                format!(
                    "; SGLang's default fraction reserves {} MiB more for it",
                    alg.reserve_mib()
                )
            } else {
                String::new()
            }
        ));
    }
    if let Some(swa) = s.swa_tokens {
        notes.push(format!(
            "hybrid sliding-window model: SGLang splits the pool's {} profiled tokens into {} \
             for the full-attention layers (max_total_num_tokens) and {} for the sliding ones \
             (--swa-full-tokens-ratio {})",
            group(s.profiled_tokens),
            group(s.max_total_num_tokens),
            group(swa),
            crate::estimate::sglang_startup::SWA_FULL_TOKENS_RATIO
        ));
    }
    if s.prefill_step_bytes > s.reserved_bytes {
        notes.push(format!(
            "a prefill step of --chunked-prefill-size {} tokens takes about {} of activations \
             (llm-oom's estimate), more than the {} SGLang keeps beside the pool: it may run out \
             at the first long prompt — lower --chunked-prefill-size or --mem-fraction-static",
            group(s.chunked_prefill_size),
            Bytes(s.prefill_step_bytes),
            Bytes(s.reserved_bytes)
        ));
    }
    let mut remedies = Vec::new();
    if let Some(f) = s.fraction_for_context {
        remedies.push(flag_remedy(
            s,
            Change::RaiseUtilization((f * 100.0).round() as u64),
            format!(
                "keep --context-length {} and give the weights and the pool {:.0} % of the free memory",
                group(s.context_length),
                f * 100.0
            ),
            format!("--mem-fraction-static {f:.2}"),
        ));
    }
    let cap = s.draft_fraction_cap.unwrap_or(MAX_SUGGESTED_FRACTION);
    if let Some(n) = s.context_at_max_fraction {
        remedies.push(flag_remedy(
            s,
            Change::ReduceContext(n),
            format!(
                "give the weights and the pool {:.0} % of the free memory and serve {} tokens",
                cap * 100.0,
                group(n)
            ),
            format!("--mem-fraction-static {cap:.2} --context-length {n}"),
        ));
    }
    let draft_short = !s.starts && s.max_total_num_tokens > 0 && s.max_req_len > 5;
    if draft_short {
        if let Some(f) = s.fraction_for_draft {
            remedies.push(flag_remedy(
                s,
                Change::RaiseUtilization((f * 100.0).round() as u64),
                format!(
                    "give the weights and the pool {:.0} % of the free memory, leaving the draft \
                     worker room",
                    f * 100.0
                ),
                format!("--mem-fraction-static {f:.2}"),
            ));
        }
        remedies.push(flag_remedy(
            s,
            Change::DropDraft,
            "start without speculative decoding".to_string(),
            format!(
                "drop --speculative-algorithm {}",
                s.speculative_algorithm.map_or("", |a| a.name())
            ),
        ));
        let v = refusal(
            s,
            Cause::Weights,
            format!(
                "the draft worker's weights and KV pool ({}) do not fit the {} \
                 mem_fraction_static {} leaves beside the model's pool",
                Bytes(s.draft_load_bytes.saturating_add(s.draft_kv_bytes)),
                Bytes(s.reserved_bytes),
                s.mem_fraction_static
            ),
            arithmetic,
        );
        return (v, remedies, notes);
    }
    if !s.starts {
        let cause = if s.max_total_num_tokens == 0 {
            Cause::Weights
        } else {
            Cause::KvCache
        };
        let summary = if s.max_total_num_tokens == 0 {
            format!(
                "the weights ({}) take all of mem_fraction_static {}{} of the {} free: no token \
                 pool is left",
                Bytes(s.weights_bytes),
                s.mem_fraction_static,
                if s.fraction_is_default {
                    " (SGLang's default for this card)"
                } else {
                    ""
                },
                Bytes(s.free_before_load_bytes)
            )
        } else {
            format!(
                "a token pool of {} tokens is too small for one request",
                group(s.max_total_num_tokens)
            )
        };
        let v = refusal(s, cause, summary, arithmetic);
        return (v, remedies, notes);
    }
    let capacity = format!(
        "max_total_num_tokens={}, max_running_requests={}, context_len={}: {:.2} requests of \
         {} tokens fit the pool at once",
        s.max_total_num_tokens,
        s.max_running_requests,
        s.context_length,
        s.requests_of_context,
        group(s.context_length)
    );
    if s.max_total_num_tokens < s.context_length {
        remedies.insert(
            0,
            flag_remedy(
                s,
                Change::ReduceContext(s.max_total_num_tokens),
                format!(
                    "say the context the pool holds: {} tokens",
                    group(s.max_total_num_tokens)
                ),
                format!("--context-length {}", s.max_total_num_tokens),
            ),
        );
        notes.push(format!(
            "the pool holds {} tokens, less than --context-length {}: SGLang starts, and takes \
             requests of at most max_req_len = {} tokens (min(context_len − 1, \
             max_total_num_tokens − 1)); a longer input is refused",
            group(s.max_total_num_tokens),
            group(s.context_length),
            group(s.max_req_len)
        ));
    }
    if w.total_tokens() > s.max_req_len {
        notes.push(format!(
            "a request of {} tokens (prompt + new) is past SGLang's max_req_len {}: it answers \
             with an error for that request, nothing runs out",
            group(w.total_tokens()),
            group(s.max_req_len)
        ));
    }
    let per_request = w.total_tokens().clamp(1, s.max_req_len.max(1));
    let held = s.max_total_num_tokens / per_request;
    let at_once = held.min(s.max_running_requests);
    if w.batch > held {
        notes.push(format!(
            "{} requests of {} tokens at once: the pool holds {held} of them; SGLang runs those \
             and keeps the rest waiting (or retracts and recomputes) — throughput, not an \
             out-of-memory",
            w.batch,
            group(per_request)
        ));
    }
    if w.batch > s.max_running_requests {
        notes.push(format!(
            "--max-running-requests {}: at most that many requests run at once, the rest wait",
            s.max_running_requests
        ));
    }
    notes.push(format!(
        "SGLang's pool, not the token budget below (the profile's forecast of the card), decides \
         what runs at once: {} tokens shared by the running requests, {} each at 8 at once",
        group(s.max_total_num_tokens),
        group((s.max_total_num_tokens / 8).min(s.max_req_len))
    ));
    let mut summary = format!("SGLang starts · {capacity}");
    if w.batch > at_once {
        summary.push_str(&format!(
            " · of {} requests {at_once} run at once, the rest wait",
            w.batch
        ));
    }
    let v = Verdict {
        record: None,
        rule: None,
        cause: Cause::None,
        stage: Stage::Load,
        confidence: 0.85,
        summary,
        evidence: vec![Evidence::text(capacity), arithmetic],
        contributing: Vec::new(),
    };
    (v, remedies, notes)
}

/// A flag that makes SGLang start (or hold the context): it still takes the whole card.
/// SGLang refusing to start at load, in its own words beside llm-oom's arithmetic.
fn refusal(s: &SglangStartup, cause: Cause, summary: String, arithmetic: Evidence) -> Verdict {
    Verdict {
        record: None,
        rule: None,
        cause,
        stage: Stage::Load,
        confidence: 0.85,
        summary,
        evidence: vec![
            Evidence::text(format!(
                "SGLang: {}",
                s.message.as_deref().unwrap_or_default()
            )),
            arithmetic,
        ],
        contributing: Vec::new(),
    }
}

fn flag_remedy(s: &SglangStartup, change: Change, action: String, how: String) -> Remedy {
    let peak = s.card_bytes;
    let mut r = Remedy::new(change, Engine::Sglang, peak, peak, s.card_bytes);
    r.action = format!("{action} → SGLang starts");
    r.how = how;
    r.new_budget = Some(RemedyBudget {
        peak_bytes: peak,
        vram_bytes: s.card_bytes,
        fits: true,
    });
    r
}
