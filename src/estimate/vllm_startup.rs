//! vLLM's start-up check on one GPU: does one request of `max_model_len` tokens fit the KV cache
//! memory vLLM has left after loading and profiling? Transcribed from vLLM
//! (vllm-project/vllm@001cabc1be16a59a70d720ed61a13b678c060a18, vllm/v1/core/kv_cache_utils.py:
//! `_check_enough_kv_cache_memory`, `estimate_max_model_len`, `get_num_blocks`,
//! `get_max_concurrency_for_kv_cache_config`; vllm@35d5cda123ec28581759b6d34cde8052314fb1e6,
//! vllm/v1/worker/gpu_worker.py: `determine_available_memory`):
//!
//! ```text
//! available_kv = total × gpu_memory_utilization − weights − peak activation − non-torch
//! num_blocks   = available_kv / (block_size × KV bytes per token, all layers)
//! needed       = ceil(max_model_len / block_size) × block_size × KV bytes per token
//! needed > available_kv  →  ValueError, vLLM does not start
//! ```
//!
//! The terms are the vLLM profile's own (`Profile::of(Engine::Vllm)`): weights from
//! `weight_bytes`, the peak activation from `activations` with the profiling run vLLM does (one
//! forward of `max_num_batched_tokens` tokens, the sampler warmed with `max_num_seqs`
//! sequences), non-torch memory the profile's runtime overhead, the KV cache `kv_bytes_in`.

use serde::Serialize;

use super::deployment::{self, Deployment};
use super::Workload;
use super::{activations, kv_bytes_in, weight_bytes, CachePolicy, Engine, KvLayout, Profile};
use crate::dtype::{KvDtype, WeightDtype};
use crate::error::InputError;
use crate::model::Spec;
use crate::units::GIB;

/// vLLM's `get_batch_defaults`: cards of 70 GiB and more take the larger defaults.
const LARGE_CARD: u64 = 70 * GIB;

/// vLLM's own flags as `plan` takes them; `None` = vLLM's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct VllmArgs {
    pub gpu_memory_utilization: Option<f64>,
    pub max_model_len: Option<u64>,
    pub max_num_seqs: Option<u64>,
    pub max_num_batched_tokens: Option<u64>,
    /// `--kv-cache-dtype`: the KV cache's dtype (`auto` = the model's).
    pub kv_cache_dtype: Option<KvCacheDtype>,
    /// `--enforce-eager`: no CUDA graphs are captured.
    pub enforce_eager: bool,
    /// `--cpu-offload-gb`: GiB of the weights vLLM keeps in CPU memory, per GPU.
    pub cpu_offload_gb: Option<f64>,
}

/// vLLM's `--kv-cache-dtype` choices that plan prices (`CacheDType`, vllm/config/cache.py).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KvCacheDtype {
    Auto,
    Fp8,
    Fp8E4m3,
    Fp8E5m2,
}

impl KvCacheDtype {
    /// The KV dtype it keeps: `auto` the model's compute dtype, the fp8 kinds one byte an element.
    pub fn kv_dtype(self, weights: WeightDtype) -> KvDtype {
        match self {
            KvCacheDtype::Auto => weights.compute_kv_dtype(),
            _ => KvDtype::Fp8,
        }
    }
}

impl std::fmt::Display for KvCacheDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KvCacheDtype::Auto => "auto",
            KvCacheDtype::Fp8 => "fp8",
            KvCacheDtype::Fp8E4m3 => "fp8_e4m3",
            KvCacheDtype::Fp8E5m2 => "fp8_e5m2",
        })
    }
}

impl std::str::FromStr for KvCacheDtype {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "auto" => KvCacheDtype::Auto,
            "fp8" => KvCacheDtype::Fp8,
            "fp8_e4m3" => KvCacheDtype::Fp8E4m3,
            "fp8_e5m2" => KvCacheDtype::Fp8E5m2,
            other => {
                return Err(InputError::Usage(format!(
                    "--kv-cache-dtype {other}: write auto, fp8, fp8_e4m3 or fp8_e5m2"
                )))
            }
        })
    }
}

/// The part of the vLLM profile's runtime overhead that is CUDA graphs: the overhead less the
/// CUDA context and cuBLAS workspace the transformers profile measures (1 GiB − 652 MiB).
pub fn cuda_graph_bytes() -> u64 {
    Profile::of(Engine::Vllm)
        .runtime_overhead
        .saturating_sub(Profile::of(Engine::Transformers).runtime_overhead)
}

/// `--cpu-offload-gb` in bytes: vLLM's `int(cpu_offload_gb * 1024**3)`.
fn offload_bytes(gb: f64) -> u64 {
    (gb * GIB as f64) as u64
}

impl VllmArgs {
    /// The first flag given, as the user typed it (for "… is a vLLM flag").
    pub fn first_given(&self) -> Option<&'static str> {
        if self.gpu_memory_utilization.is_some() {
            Some("--gpu-memory-utilization")
        } else if self.max_model_len.is_some() {
            Some("--max-model-len")
        } else if self.max_num_seqs.is_some() {
            Some("--max-num-seqs")
        } else if self.max_num_batched_tokens.is_some() {
            Some("--max-num-batched-tokens")
        } else if self.kv_cache_dtype.is_some() {
            Some("--kv-cache-dtype")
        } else if self.enforce_eager {
            Some("--enforce-eager")
        } else if self.cpu_offload_gb.is_some() {
            Some("--cpu-offload-gb")
        } else {
            None
        }
    }

    /// Each value in the range vLLM accepts.
    pub fn check(&self) -> Result<(), InputError> {
        if let Some(u) = self.gpu_memory_utilization {
            if !(u > 0.0 && u <= 1.0) {
                return Err(InputError::Usage(format!(
                    "--gpu-memory-utilization {u}: write a fraction above 0 and at most 1 (vLLM's default is 0.9)"
                )));
            }
        }
        if let Some(gb) = self.cpu_offload_gb {
            if !(gb.is_finite() && (0.0..=1_048_576.0).contains(&gb)) {
                return Err(InputError::Usage(format!(
                    "--cpu-offload-gb {gb}: write the GiB of weights to keep in CPU memory, 0 or more (vLLM's default is 0)"
                )));
            }
        }
        crate::limits::at_least_one(&[
            ("--max-model-len", self.max_model_len),
            ("--max-num-seqs", self.max_num_seqs),
            ("--max-num-batched-tokens", self.max_num_batched_tokens),
        ])
    }
}

/// What vLLM does at start-up on one card, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Startup {
    pub card_bytes: u64,
    pub gpu_memory_utilization: f64,
    pub max_model_len: u64,
    pub max_num_seqs: u64,
    pub max_num_batched_tokens: u64,
    pub block_size: u64,
    /// total × gpu_memory_utilization.
    pub requested_bytes: u64,
    /// The weights vLLM loads on the card (less those `--cpu-offload-gb` keeps in CPU memory).
    pub weights_bytes: u64,
    /// Weights kept in CPU memory (`--cpu-offload-gb`), read over PCIe at every forward.
    #[serde(skip_serializing_if = "is_zero")]
    pub cpu_offload_bytes: u64,
    /// `--enforce-eager`: no CUDA graphs, so their share of the non-torch memory is not taken.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub enforce_eager: bool,
    /// The CUDA graphs' share of `non_torch_bytes` (0 with `--enforce-eager`).
    pub cuda_graph_bytes: u64,
    /// The LoRA slots preallocated at load (`--max-loras` × `--max-lora-rank`).
    #[serde(skip_serializing_if = "is_zero")]
    pub adapters_bytes: u64,
    /// The draft model's weights (`--speculative-config`).
    #[serde(skip_serializing_if = "is_zero")]
    pub draft_weights_bytes: u64,
    /// The profiling run's peak (`max_num_batched_tokens` tokens, `max_num_seqs` sampled).
    pub peak_activation_bytes: u64,
    pub non_torch_bytes: u64,
    /// What is left for the KV cache (0 when nothing is).
    pub available_kv_bytes: u64,
    /// One request of `max_model_len` tokens.
    pub needed_kv_bytes: u64,
    pub num_blocks: u64,
    pub kv_tokens: u64,
    pub max_concurrency: f64,
    pub starts: bool,
    /// The largest `--max-model-len` that starts, a multiple of the block size.
    pub largest_max_model_len: u64,
    /// The `--gpu-memory-utilization` that starts the asked `max_model_len`, when ≤ 0.98.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utilization_that_starts: Option<f64>,
    /// vLLM's ValueError, numbers filled in, when it refuses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn is_zero(b: &u64) -> bool {
    *b == 0
}

/// The largest utilization llm-oom suggests (the rest is the CUDA context of other processes,
/// the driver, fragmentation).
pub const MAX_SUGGESTED_UTILIZATION: f64 = 0.98;

/// The largest `--max-model-len` of whole blocks within `tokens`: vLLM hands the KV cache out in
/// blocks of `block` tokens, so a length that fits is a multiple of the block size
/// (`estimate_max_model_len` in vllm/v1/core/kv_cache_utils.py at the commit above).
pub fn whole_blocks(tokens: u64, block: u64) -> u64 {
    let block = block.max(1);
    tokens / block * block
}

/// The KV tokens one request of `len` tokens takes: whole blocks (`FullAttentionSpec`'s
/// `max_memory_usage_bytes`, `cdiv(max_model_len, block_size) × page size`).
pub fn blocks_of(len: u64, block: u64) -> u64 {
    let block = block.max(1);
    len.div_ceil(block).saturating_mul(block)
}

/// The smallest `--gpu-memory-utilization`, in steps of 0.01, whose share of a `card` of bytes
/// holds `bytes` (all vLLM keeps within it: weights, profiling peak, non-torch memory and one
/// request's KV cache); `None` above [`MAX_SUGGESTED_UTILIZATION`]. `plan` passes what it
/// computed, `explain` what the log's figures give (total × its utilization + the KV deficit).
pub fn utilization_for(bytes: u64, card: u64) -> Option<f64> {
    let want = (bytes as f64 / card.max(1) as f64 * 100.0).ceil() / 100.0;
    (want <= MAX_SUGGESTED_UTILIZATION).then_some(want)
}

/// vLLM's start-up on one card of `card` bytes for the model and dtypes of `w`.
pub fn startup(spec: &Spec, w: &Workload, card: u64, a: &VllmArgs) -> Startup {
    startup_with(spec, w, card, a, &Deployment::default())
}

/// The same with LoRA slots (`--enable-lora`, loaded with the model before profiling) and a draft
/// model (`--speculative-config`: its weights loaded beside the target's, its layers' KV in the
/// same blocks, so each block holds both models' rows).
pub fn startup_with(
    spec: &Spec,
    w: &Workload,
    card: u64,
    a: &VllmArgs,
    dep: &Deployment,
) -> Startup {
    let large = card >= LARGE_CARD;
    let mut p = Profile::of(Engine::Vllm);
    let util = a.gpu_memory_utilization.unwrap_or(p.memory_fraction);
    let max_model_len = a
        .max_model_len
        .or(spec.max_position_embeddings)
        .unwrap_or_else(|| w.total_tokens())
        .max(1);
    // `vllm serve` (UsageContext.OPENAI_API_SERVER) defaults, engine/arg_utils.py get_batch_defaults
    let mnbt = a
        .max_num_batched_tokens
        .unwrap_or(if large { 8192 } else { 2048 });
    let seqs = a.max_num_seqs.unwrap_or(if large { 1024 } else { 256 });
    let block = match p.kv_layout {
        KvLayout::Paged { block } => block.max(1),
        _ => 16,
    };
    p.prefill_chunk = Some(mnbt);
    p.sampler_warmup_seqs = seqs;
    let profiling = Workload {
        prompt_tokens: mnbt,
        max_new_tokens: 0,
        batch: 1,
        ..*w
    };
    let d = w.weight_dtype.compute_kv_dtype().elem_bytes().as_f64();
    let (prefill, decode) = activations(spec, &p, &profiling, d, 0);
    let peak_activation = prefill.max(decode);
    let all_weights = weight_bytes(spec, w.weight_dtype);
    let cpu_offload = a.cpu_offload_gb.map_or(0, offload_bytes).min(all_weights);
    let weights = all_weights - cpu_offload;
    let adapters = dep.lora.as_ref().map_or(0, |l| {
        deployment::adapter_bytes(spec, l, Engine::Vllm, w.weight_dtype)
    });
    let draft_weights = dep
        .draft
        .as_ref()
        .map_or(0, |x| deployment::draft_weight_bytes(x.spec, w));
    let graphs = if a.enforce_eager {
        0
    } else {
        cuda_graph_bytes()
    };
    let non_torch = p
        .runtime_overhead
        .saturating_sub(cuda_graph_bytes())
        .saturating_add(graphs);
    let requested = (card as f64 * util) as u64;
    let available = requested
        .saturating_sub(weights)
        .saturating_sub(adapters)
        .saturating_sub(draft_weights)
        .saturating_sub(peak_activation)
        .saturating_sub(non_torch);
    let policy = CachePolicy::of(Engine::Vllm);
    // FullAttentionSpec.max_memory_usage_bytes: whole blocks of max_model_len
    let both = |tokens: u64| {
        let draft = dep
            .draft
            .as_ref()
            .map_or(0, |x| kv_bytes_in(x.spec, w.kv_dtype, tokens, 1, policy));
        kv_bytes_in(spec, w.kv_dtype, tokens, 1, policy).saturating_add(draft)
    };
    let needed_for = |len: u64| both(blocks_of(len, block));
    let block_bytes = both(block);
    let needed = needed_for(max_model_len);
    let num_blocks = available.checked_div(block_bytes).unwrap_or(0);
    let per_request = needed.div_ceil(block_bytes.max(1)).max(1);
    let starts = available > 0 && needed <= available;
    // estimate_max_model_len: the largest length whose blocks fit, by bisection
    let (mut lo, mut hi) = (0u64, max_model_len);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if needed_for(mid) <= available {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let largest = if available == 0 {
        0
    } else {
        whole_blocks(lo, block)
    };
    let fixed = [
        weights,
        adapters,
        draft_weights,
        peak_activation,
        non_torch,
        needed,
    ]
    .into_iter()
    .fold(0u64, u64::saturating_add);
    let utilization_that_starts = utilization_for(fixed, card).filter(|_| !starts);
    let gib = |b: u64| b as f64 / GIB as f64;
    let message = (!starts).then(|| {
        if available == 0 {
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` \
             when initializing the engine."
                .to_string()
        } else {
            format!(
                "To serve at least one request with the models's max seq len ({max_model_len}), \
                 ({:.2} GiB KV cache is needed, which is larger than the available KV cache memory \
                 ({:.2} GiB). Based on the available memory, the estimated maximum model length is \
                 {lo}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when \
                 initializing the engine.",
                gib(needed),
                gib(available)
            )
        }
    });
    Startup {
        card_bytes: card,
        gpu_memory_utilization: util,
        max_model_len,
        max_num_seqs: seqs,
        max_num_batched_tokens: mnbt,
        block_size: block,
        requested_bytes: requested,
        weights_bytes: weights,
        cpu_offload_bytes: cpu_offload,
        enforce_eager: a.enforce_eager,
        cuda_graph_bytes: graphs,
        adapters_bytes: adapters,
        draft_weights_bytes: draft_weights,
        peak_activation_bytes: peak_activation,
        non_torch_bytes: non_torch,
        available_kv_bytes: available,
        needed_kv_bytes: needed,
        num_blocks,
        kv_tokens: num_blocks.saturating_mul(block),
        max_concurrency: num_blocks as f64 / per_request as f64,
        starts,
        largest_max_model_len: largest,
        utilization_that_starts,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::presets;

    fn llama8b() -> Spec {
        presets::from_file("llama-3.1-8b-instruct")
    }

    fn work() -> Workload {
        Workload {
            prompt_tokens: 2048,
            max_new_tokens: 256,
            batch: 1,
            weight_dtype: WeightDtype::Bf16,
            kv_dtype: KvDtype::Bf16,
            engine: Engine::Vllm,
            llama: Default::default(),
        }
    }

    const CARD: u64 = 25_757_220_864; // RTX 4090 class, 24,564 MiB

    #[test]
    fn adapters_and_a_draft_come_out_of_the_kv_cache() {
        use crate::estimate::deployment::{Draft, Lora, Target, Targets};
        let target = llama8b();
        let draft = presets::from_file("qwen2.5-0.5b-instruct");
        let a = VllmArgs {
            max_model_len: Some(8192),
            ..VllmArgs::default()
        };
        let alone = startup(&target, &work(), 80 * GIB, &a);
        let dep = Deployment {
            lora: Some(Lora {
                rank: 8,
                targets: Targets::of(&[Target::Q]),
                max_loras: 2,
            }),
            draft: Some(Draft {
                spec: &draft,
                tokens: 5,
            }),
        };
        let with = startup_with(&target, &work(), 80 * GIB, &a, &dep);
        // All seven Linears of 32 layers, whatever the target list, 2 slots of rank 8, bf16.
        let per_layer = 8192 + 2 * 5120 + 8192 + 3 * (4096 + 14336);
        assert_eq!(with.adapters_bytes, 2 * 8 * per_layer * 32 * 2);
        assert_eq!(
            alone.available_kv_bytes - with.available_kv_bytes,
            with.adapters_bytes + with.draft_weights_bytes
        );
        // A block of 16 holds both models' rows: 128 KiB and the draft's 12 KiB a token.
        let block = 16 * (131_072 + 12_288);
        assert_eq!(with.num_blocks, with.available_kv_bytes / block);
        assert_eq!(with.needed_kv_bytes, 8192 * (131_072 + 12_288));
    }

    #[test]
    fn vllm_formula_by_hand() {
        let s = startup(&llama8b(), &work(), CARD, &VllmArgs::default());
        // available_kv = total × util − weights − peak_activation − non_torch
        let requested = (CARD as f64 * 0.9) as u64;
        assert_eq!(s.requested_bytes, requested);
        assert_eq!(
            s.available_kv_bytes,
            requested - s.weights_bytes - s.peak_activation_bytes - s.non_torch_bytes
        );
        // Llama-3.1-8B: 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes = 128 KiB a token
        let per_token = 32 * 8 * 128 * 2 * 2;
        assert_eq!(s.needed_kv_bytes, 131_072 * per_token); // 16 GiB
        assert_eq!(s.needed_kv_bytes, 16 * GIB);
        // blocks = available_kv / (block_size × kv_bytes_per_token)
        assert_eq!(s.num_blocks, s.available_kv_bytes / (16 * per_token));
        assert_eq!(s.kv_tokens, s.num_blocks * 16);
        assert!(!s.starts);
        assert_eq!(s.largest_max_model_len, s.kv_tokens);
        assert_eq!(s.largest_max_model_len % 16, 0);
        let msg = s.message.expect("vLLM's message");
        assert!(
            msg.contains("max seq len (131072), (16.00 GiB KV cache is needed"),
            "{msg}"
        );
    }

    #[test]
    fn the_largest_length_starts_and_one_block_more_does_not() {
        let base = startup(&llama8b(), &work(), CARD, &VllmArgs::default());
        let at = |len| {
            startup(
                &llama8b(),
                &work(),
                CARD,
                &VllmArgs {
                    max_model_len: Some(len),
                    ..Default::default()
                },
            )
        };
        let ok = at(base.largest_max_model_len);
        assert!(ok.starts);
        assert!(ok.max_concurrency >= 1.0);
        assert!(!at(base.largest_max_model_len + 16).starts);
    }

    #[test]
    fn the_suggested_utilization_starts_the_default() {
        let base = startup(&llama8b(), &work(), 80 * GIB, &VllmArgs::default());
        assert!(
            base.starts,
            "an 80 GiB card holds 16 GiB of KV after 15 GiB of weights"
        );
        let small = startup(&llama8b(), &work(), 40 * GIB, &VllmArgs::default());
        if let Some(u) = small.utilization_that_starts {
            let s = startup(
                &llama8b(),
                &work(),
                40 * GIB,
                &VllmArgs {
                    gpu_memory_utilization: Some(u),
                    ..Default::default()
                },
            );
            assert!(s.starts);
        }
    }

    #[test]
    fn whole_blocks_and_the_smallest_utilization_step() {
        assert_eq!(whole_blocks(23_650, 16), 23_648);
        assert_eq!(whole_blocks(15, 16), 0);
        assert_eq!(blocks_of(29_000, 16), 29_008);
        assert_eq!(blocks_of(29_008, 16), 29_008);
        // 0.9278 of the card → 0.93; exactly 0.5 stays 0.5; above 0.98 is not suggested.
        assert_eq!(utilization_for(9_278, 10_000), Some(0.93));
        assert_eq!(utilization_for(5_000, 10_000), Some(0.5));
        assert_eq!(utilization_for(9_801, 10_000), None);
        assert_eq!(utilization_for(1, 0), None);
    }

    #[test]
    fn out_of_range_flags_are_refused() {
        for u in [0.0, -0.1, 1.5, f64::NAN] {
            let a = VllmArgs {
                gpu_memory_utilization: Some(u),
                ..Default::default()
            };
            assert!(a.check().is_err(), "{u}");
        }
        assert!(VllmArgs {
            gpu_memory_utilization: Some(1.0),
            ..Default::default()
        }
        .check()
        .is_ok());
    }

    #[test]
    fn kv_cache_dtype_names_and_offload_ranges() {
        assert_eq!(
            "FP8_E5M2".parse::<KvCacheDtype>().ok(),
            Some(KvCacheDtype::Fp8E5m2)
        );
        assert!("fp4".parse::<KvCacheDtype>().is_err());
        assert_eq!(
            KvCacheDtype::Auto.kv_dtype(WeightDtype::Bf16),
            KvDtype::Bf16
        );
        assert_eq!(
            KvCacheDtype::Fp8E4m3.kv_dtype(WeightDtype::Bf16),
            KvDtype::Fp8
        );
        for gb in [-1.0, f64::NAN, f64::INFINITY] {
            let a = VllmArgs {
                cpu_offload_gb: Some(gb),
                ..Default::default()
            };
            assert!(a.check().is_err(), "{gb}");
        }
        assert_eq!(offload_bytes(1.5), 3 * GIB / 2);
        assert_eq!(cuda_graph_bytes(), GIB - 652 * crate::units::MIB);
    }
}
