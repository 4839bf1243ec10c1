//! The verdict of vLLM's start-up check on one card (`estimate::vllm_startup`): vLLM refuses to
//! start when one request of `max_model_len` tokens does not fit its KV cache memory; once it
//! starts, more requests than the cache holds wait in its queue (or are preempted) — slower, not
//! an out-of-memory.

use crate::estimate::{Engine, VllmStartup, VllmVersion, Workload};
use crate::units::{group, Bytes};

use super::remedy::{Change, Remedy, RemedyBudget};
use super::{Cause, Evidence, Stage, Verdict};

/// The verdict, the remedies (flags to paste) and the notes for `s`, with the workload `w`.
pub fn verdict(s: &VllmStartup, w: &Workload) -> (Verdict, Vec<Remedy>, Vec<String>) {
    let beside = [
        ("LoRA slots", s.adapters_bytes),
        ("draft weights", s.draft_weights_bytes),
    ]
    .into_iter()
    .filter(|&(_, b)| b > 0)
    .map(|(what, b)| format!(" − {what} {}", Bytes(b)))
    .collect::<String>();
    let offloaded = if s.cpu_offload_bytes > 0 {
        format!(" ({} in CPU memory)", Bytes(s.cpu_offload_bytes))
    } else {
        String::new()
    };
    let eager = if s.enforce_eager {
        " (eager: no CUDA graphs)"
    } else {
        ""
    };
    let arithmetic = Evidence::bytes(
        format!(
            "KV cache memory = {} × gpu_memory_utilization {} − weights {}{offloaded}{beside} − \
             profiling peak {} ({} tokens, {} sequences sampled) − non-torch {}{eager} = {}",
            Bytes(s.requested_bytes),
            s.gpu_memory_utilization,
            Bytes(s.weights_bytes),
            Bytes(s.peak_activation_bytes),
            group(s.max_num_batched_tokens),
            s.max_num_seqs,
            Bytes(s.non_torch_bytes),
            Bytes(s.available_kv_bytes)
        ),
        s.available_kv_bytes,
    );
    let mut notes = Vec::new();
    if s.version == VllmVersion::V0 && s.chunked_prefill_given {
        notes.push(format!(
            "{}: chunked prefill {} as given (--{}enable-chunked-prefill), so the profiling run \
             prefills max_num_batched_tokens = {} tokens{}",
            s.vllm,
            if s.chunked_prefill { "on" } else { "off" },
            if s.chunked_prefill { "" } else { "no-" },
            group(s.max_num_batched_tokens),
            if s.chunked_prefill {
                ""
            } else {
                " at once (max(max_model_len, 2048) unless given)"
            }
        ));
    } else if s.version == VllmVersion::V0 {
        notes.push(if s.chunked_prefill {
            format!(
                "{}: chunked prefill on (max_model_len above 32,768 turns it on by default), so \
                 the profiling run prefills max_num_batched_tokens = {} tokens",
                s.vllm,
                group(s.max_num_batched_tokens)
            )
        } else {
            format!(
                "{}: chunked prefill off (on by default only above a max_model_len of 32,768), so \
                 the profiling run prefills max_num_batched_tokens = {} tokens at once \
                 (max(max_model_len, 2048) unless given)",
                s.vllm,
                group(s.max_num_batched_tokens)
            )
        });
    }
    if s.enforce_eager {
        notes.push(format!(
            "--enforce-eager: vLLM captures no CUDA graphs, so the {} the vLLM profile keeps for \
             them stay with the KV cache; each decode step launches its kernels one by one — \
             slower, most at small batches",
            Bytes(crate::estimate::vllm_startup::cuda_graph_bytes())
        ));
    }
    if s.cpu_offload_bytes > 0 {
        notes.push(format!(
            "--cpu-offload-gb: {} of the weights stay in CPU memory and cross PCIe at every \
             forward pass — each step waits for them (about {:.2} s a step at PCIe 4.0 x16's ~25 GB/s), far \
             slower than weights held on the card",
            Bytes(s.cpu_offload_bytes),
            s.cpu_offload_bytes as f64 / 25e9
        ));
    }
    if let Some(msg) = &s.config_error {
        let remedies = s
            .config_fixes
            .iter()
            .map(|fix| {
                let change = if fix.how.starts_with("--enable-chunked-prefill") {
                    Change::ChunkedPrefill(fix.max_num_batched_tokens)
                } else if fix.how.starts_with("--max-model-len") {
                    Change::ReduceContext(fix.max_num_batched_tokens)
                } else if fix.how.starts_with("--max-num-seqs") {
                    Change::LimitConcurrency(0)
                } else {
                    Change::ChunkedPrefill(0)
                };
                let action = format!(
                    "{}: a profiling run of {} tokens",
                    fix.how,
                    group(fix.max_num_batched_tokens)
                );
                if fix.starts {
                    let mut r = flag_remedy(s, change, action, fix.how.clone());
                    r.action = format!(
                        "{} with {} tokens of KV cache",
                        r.action,
                        group(fix.kv_tokens)
                    );
                    r
                } else {
                    let mut r = flag_remedy(s, change, action, fix.how.clone());
                    r.action = r.action.replacen(
                        "→ vLLM starts",
                        "→ passes this check, then the KV cache is short — still too much",
                        1,
                    );
                    if let Some(b) = r.new_budget.as_mut() {
                        b.fits = false;
                    }
                    r
                }
            })
            .collect::<Vec<_>>();
        let mut remedies = remedies;
        remedies.sort_by_key(|r| !r.fits());
        let v = Verdict {
            record: None,
            rule: None,
            cause: if s.max_num_batched_tokens < s.max_model_len && !s.chunked_prefill {
                Cause::KvCache
            } else {
                Cause::Concurrency
            },
            stage: Stage::Load,
            confidence: 0.95,
            summary: format!(
                "the scheduler of {} refuses the flags before the model loads: max_num_batched_tokens {}",
                s.vllm,
                if s.max_num_batched_tokens < s.max_model_len && !s.chunked_prefill {
                    format!(
                        "{} below max_model_len {} without chunked prefill",
                        group(s.max_num_batched_tokens),
                        group(s.max_model_len)
                    )
                } else {
                    format!(
                        "{} below max_num_seqs {}",
                        group(s.max_num_batched_tokens),
                        s.max_num_seqs
                    )
                }
            ),
            evidence: vec![
                Evidence::text(format!("vLLM: ValueError: {msg}")),
                Evidence::text(
                    "vllm/config.py SchedulerConfig._verify_args@v0.6.4.post1, raised when the \
                     engine's config is built, before the weights load",
                ),
            ],
            contributing: Vec::new(),
        };
        return (v, remedies, notes);
    }
    if !s.starts {
        let cause = if s.available_kv_bytes == 0
            && s.weights_bytes >= s.requested_bytes.saturating_sub(s.non_torch_bytes)
        {
            Cause::Weights
        } else {
            Cause::KvCache
        };
        let summary = if s.available_kv_bytes == 0 {
            format!(
                "nothing is left for the KV cache within gpu_memory_utilization {} ({} of the card)",
                s.gpu_memory_utilization,
                Bytes(s.requested_bytes)
            )
        } else {
            format!(
                "one request of --max-model-len {} needs {} of KV cache, {} is left",
                group(s.max_model_len),
                Bytes(s.needed_kv_bytes),
                Bytes(s.available_kv_bytes)
            )
        };
        let mut evidence = vec![Evidence::text(format!(
            "vLLM: ValueError: {}",
            s.message.as_deref().unwrap_or("")
        ))];
        evidence.push(arithmetic);
        let mut remedies = Vec::new();
        if s.largest_max_model_len > 0 {
            remedies.push(flag_remedy(
                s,
                Change::ReduceContext(s.largest_max_model_len),
                format!(
                    "start with the longest request that fits: {} tokens",
                    group(s.largest_max_model_len)
                ),
                format!("--max-model-len {}", s.largest_max_model_len),
            ));
        }
        // The LoRA slots come out of the same memory: a merged checkpoint frees all of them.
        let merged = s
            .requested_bytes
            .saturating_sub(s.weights_bytes)
            .saturating_sub(s.draft_weights_bytes)
            .saturating_sub(s.peak_activation_bytes)
            .saturating_sub(s.non_torch_bytes);
        if s.adapters_bytes > 0 && merged > 0 && s.needed_kv_bytes <= merged {
            remedies.push(flag_remedy(
                s,
                Change::MergeAdapters,
                format!(
                    "merge the adapter into the weights: the {} of LoRA slots go to the KV cache",
                    Bytes(s.adapters_bytes)
                ),
                "serve a checkpoint merged with PEFT's merge_and_unload() instead of \
                 --enable-lora (or fewer --max-loras, a smaller --max-lora-rank)"
                    .to_string(),
            ));
        }
        if let Some(blocks) = s.chunked_prefill_blocks {
            remedies.push(flag_remedy(
                s,
                Change::ChunkedPrefill(crate::estimate::vllm_startup::V0_CHUNKED_BATCHED_TOKENS),
                format!(
                    "keep --max-model-len {} and turn chunked prefill on: the profiling run \
                     prefills {} tokens, the KV cache holds {} tokens",
                    group(s.max_model_len),
                    crate::estimate::vllm_startup::V0_CHUNKED_BATCHED_TOKENS,
                    group(blocks.saturating_mul(s.block_size))
                ),
                "--enable-chunked-prefill".to_string(),
            ));
        }
        if let Some(u) = s.utilization_that_starts {
            remedies.push(flag_remedy(
                s,
                Change::RaiseUtilization((u * 100.0).round() as u64),
                format!(
                    "keep --max-model-len {} and let vLLM take {:.0} % of the card",
                    group(s.max_model_len),
                    u * 100.0
                ),
                format!("--gpu-memory-utilization {u:.2}"),
            ));
        }
        let v = Verdict {
            record: None,
            rule: None,
            cause,
            stage: Stage::Load,
            confidence: 0.9,
            summary,
            evidence,
            contributing: Vec::new(),
        };
        return (v, remedies, notes);
    }
    // vLLM's two start-up lines as `_report_kv_cache_config` logs them
    // (vllm/v1/core/kv_cache_utils.py@001cabc1); V0 logs "# GPU blocks: N, # CPU blocks: M"
    // (vllm/executor/gpu_executor.py, vllm 0.6.4.post1).
    let capacity = match s.version {
        VllmVersion::V1 => format!(
            "GPU KV cache size: {} tokens · Maximum concurrency for {} tokens per request: {:.2}x \
             ({} blocks of {})",
            group(s.kv_tokens),
            group(s.max_model_len),
            s.max_concurrency,
            group(s.num_blocks),
            s.block_size
        ),
        VllmVersion::V0 => format!(
            "# GPU blocks: {}, # CPU blocks: {} · {} tokens of KV cache, {:.2} requests of {} \
             tokens",
            s.num_blocks,
            s.cpu_blocks.unwrap_or(0),
            group(s.kv_tokens),
            s.max_concurrency,
            group(s.max_model_len)
        ),
    };
    if w.total_tokens() > s.max_model_len {
        notes.push(format!(
            "vLLM rejects a request of {} tokens (prompt + new) with --max-model-len {}: it \
             answers 400, nothing runs out",
            group(w.total_tokens()),
            group(s.max_model_len)
        ));
    }
    let per_request = w
        .total_tokens()
        .min(s.max_model_len)
        .div_ceil(s.block_size.max(1));
    let held = s.num_blocks.checked_div(per_request).unwrap_or(0);
    if w.batch > held {
        notes.push(format!(
            "{} requests of {} tokens at once: the KV cache holds {held} of them; vLLM runs \
             those and keeps the rest waiting (or preempts and recomputes) — throughput, not \
             an out-of-memory",
            w.batch,
            group(w.total_tokens().min(s.max_model_len))
        ));
    }
    if w.batch > s.max_num_seqs {
        notes.push(format!(
            "--max-num-seqs {}: at most that many requests run at once, the rest wait",
            s.max_num_seqs
        ));
    }
    let mut summary = format!("vLLM starts · {capacity}");
    if w.batch > held.min(s.max_num_seqs) {
        summary.push_str(&format!(
            " · of {} requests {} run at once, the rest wait",
            w.batch,
            held.min(s.max_num_seqs)
        ));
    }
    let v = Verdict {
        record: None,
        rule: None,
        cause: Cause::None,
        stage: Stage::Load,
        confidence: 0.9,
        summary,
        evidence: vec![Evidence::text(capacity), arithmetic],
        contributing: Vec::new(),
    };
    (v, Vec::new(), notes)
}

/// A flag that makes vLLM start: it still takes `gpu_memory_utilization` of the card.
fn flag_remedy(s: &VllmStartup, change: Change, action: String, how: String) -> Remedy {
    let util = match change {
        Change::RaiseUtilization(pct) => pct as f64 / 100.0,
        _ => s.gpu_memory_utilization,
    };
    let peak = (s.card_bytes as f64 * util) as u64;
    let mut r = Remedy::new(change, Engine::Vllm, s.requested_bytes, peak, s.card_bytes);
    r.action = format!("{action} → vLLM starts");
    r.how = how;
    r.new_budget = Some(RemedyBudget {
        peak_bytes: peak,
        vram_bytes: s.card_bytes,
        fits: true,
    });
    r
}
