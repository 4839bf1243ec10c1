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
//!
//! `--vllm-version v0` takes vLLM V0's start-up instead (vllm 0.6.4.post1, PyPI sdist):
//! vllm/engine/arg_utils.py `create_engine_config` turns chunked prefill on by default only when
//! `max_model_len > 32768` on a GPU (no sliding window, no speculative model, no LoRA);
//! vllm/config.py `SchedulerConfig.__init__` then defaults `max_num_batched_tokens` to 512, and to
//! `max(max_model_len, 2048)` without chunked prefill — the tokens V0's profiling run prefills
//! (vllm/worker/model_runner.py `profile_run`, over `max_num_seqs` = 256 sequences).
//! vllm/worker/worker.py `determine_num_available_blocks` gives the same arithmetic as V1
//! (`total × gpu_memory_utilization − peak`), and `raise_if_cache_size_invalid` refuses when
//! `max_model_len > block_size × num_gpu_blocks`.

use serde::Serialize;

use super::deployment::{self, Deployment};
use super::Workload;
use super::{
    activations, engine_weight_bytes, kv_bytes_in, CachePolicy, Engine, KvLayout, Profile,
};
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
    /// `--vllm-version`: which vLLM's start-up (`None` = V1).
    pub version: Option<VllmVersion>,
    /// `--enable-chunked-prefill` (`Some(true)`) or `--no-enable-chunked-prefill` (`Some(false)`),
    /// read by V0 (`None`: V0's default, on only above [`V0_LONG_CONTEXT`]); V1 always chunks.
    pub enable_chunked_prefill: Option<bool>,
}

/// The vLLM whose start-up plan models.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VllmVersion {
    /// The V1 engine, at the commits cited above.
    #[default]
    V1,
    /// The V0 engine of vLLM 0.6.4.
    V0,
}

/// V0 turns chunked prefill on by default above this `max_model_len` (vllm/engine/arg_utils.py
/// `use_long_context = max_model_len > 32768`, vllm 0.6.4.post1).
pub const V0_LONG_CONTEXT: u64 = 32_768;
/// V0's `max_num_batched_tokens` with chunked prefill (vllm/config.py `SchedulerConfig`, 0.6.4.post1).
pub const V0_CHUNKED_BATCHED_TOKENS: u64 = 512;
/// V0's `--swap-space` default, GiB of CPU memory for swapped blocks (`# CPU blocks`).
const V0_SWAP_SPACE: u64 = 4 * GIB;

impl VllmVersion {
    /// Which vLLM, and the source it follows, for the report.
    pub fn describe(self) -> &'static str {
        match self {
            VllmVersion::V1 => "vLLM V1 (vllm@001cabc1)",
            VllmVersion::V0 => "vLLM V0 (v0.6.4)",
        }
    }
}

impl std::fmt::Display for VllmVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VllmVersion::V1 => "v1",
            VllmVersion::V0 => "v0",
        })
    }
}

impl std::str::FromStr for VllmVersion {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "v1" | "1" => Ok(VllmVersion::V1),
            "v0" | "0" => Ok(VllmVersion::V0),
            other => Err(InputError::Usage(format!(
                "--vllm-version {other}: write v1 (the V1 engine, the default) or v0 (vLLM 0.6.x's V0 engine)"
            ))),
        }
    }
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
        } else if self.version.is_some() {
            Some("--vllm-version")
        } else if self.enable_chunked_prefill == Some(true) {
            Some("--enable-chunked-prefill")
        } else if self.enable_chunked_prefill == Some(false) {
            Some("--no-enable-chunked-prefill")
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
    /// Which vLLM's start-up this is.
    pub version: VllmVersion,
    /// The same in words, with the source it follows ("vLLM V1 (vllm@001cabc1)").
    pub vllm: &'static str,
    /// Chunked prefill on (V1 always; V0 by default only above 32,768 tokens).
    pub chunked_prefill: bool,
    /// V0: `--enable-chunked-prefill` or `--no-enable-chunked-prefill` set it, not the default.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub chunked_prefill_given: bool,
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
    /// The profiling run's peak (`max_num_batched_tokens` tokens, `max_num_seqs` sampled; with
    /// `--images`, the vision encoder's profile beside it).
    pub peak_activation_bytes: u64,
    /// `--images`: the encoder's profile (the dummy images, the encoder budget, the tower's
    /// transient and the encoder cache).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoder_profile: Option<crate::model::images::VllmEncoderProfile>,
    /// `--images`: what the encoder's profile adds to the peak, and so takes off the KV cache.
    #[serde(skip_serializing_if = "is_zero")]
    pub vision_encoder_bytes: u64,
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
    /// V0: `# CPU blocks` it logs, `--swap-space` (4 GiB) over a block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_blocks: Option<u64>,
    /// V0 without chunked prefill, refused: the blocks with `--enable-chunked-prefill` (a
    /// profiling run of 512 tokens), when those hold `max_model_len`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunked_prefill_blocks: Option<u64>,
    /// V0's refusal of the flags themselves (`SchedulerConfig._verify_args`), before the memory
    /// is looked at: its `ValueError` message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_error: Option<String>,
    /// With `config_error`: the flags that pass the check, each priced.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub config_fixes: Vec<ConfigFix>,
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

/// Tokens `fused_experts` works on at once (envs.py `VLLM_FUSED_MOE_CHUNK_SIZE`, default 32768).
const FUSED_MOE_CHUNK: u64 = 32768;

/// The fused MoE kernels' intermediate caches for one forward of `tokens` tokens, in the
/// activations' dtype (`d` bytes): M × topk × (I + max(2I, H)) values, M the tokens up to the
/// chunk. Both the Triton path (fused_moe.py `fused_experts_impl`: `cache13` of
/// M·topk·max(N, K) with N = 2I, `intermediate_cache2` of M·topk·N/2) and Marlin's, which takes
/// MXFP4 and other weight-only experts below Blackwell (fused_marlin_moe.py `fused_marlin_moe`:
/// `intermediate_cache13` of M·topk·max(2N, K), `intermediate_cache2` of M·topk·N with N = I)
/// allocate this (vllm 0.11.0, PyPI sdist, vllm/model_executor/layers/fused_moe/). 0 for a
/// model without routed experts.
pub fn fused_moe_cache_bytes(spec: &Spec, tokens: u64, d: f64) -> u64 {
    let Some(e) = spec.experts.as_ref().filter(|e| e.sparse_layers > 0) else {
        return 0;
    };
    let m = tokens.min(FUSED_MOE_CHUNK) as f64;
    let i = e.intermediate_size as f64;
    let per_row = i + (2.0 * i).max(spec.hidden_size as f64);
    (m * e.active as f64 * per_row * d) as u64
}

/// vLLM's sampler warm-up at its peak: `_dummy_sampler_run` (v1/worker/gpu_model_runner.py)
/// keeps the `seqs` × `vocab` logits in the model's dtype (`d` bytes) while the sampler
/// (v1/sample/sampler.py `forward`) copies them to fp32 and, with top-k and top-p both set and
/// FlashInfer absent (the PyPI wheel's default; v1/sample/ops/topk_topp_sampler.py
/// `forward_native`), `apply_top_k_top_p` holds the sorted fp32 logits, their int64 indices, the
/// top-k and top-p bool masks, the fp32 softmax and the scattered fp32 result at once:
/// d + 4 + 4 + 8 + 1 + 1 + 4 + 4 = d + 26 bytes a logit (vllm 0.11.0, PyPI sdist).
pub fn sampler_warmup_bytes(seqs: u64, vocab: u64, d: f64) -> u64 {
    (seqs as f64 * vocab as f64 * (d + 26.0)) as u64
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
    startup_at(spec, w, card, a, dep, true)
}

/// [`startup_with`]; `fixes`: price the flags that pass V0's config check when it refuses.
fn startup_at(
    spec: &Spec,
    w: &Workload,
    card: u64,
    a: &VllmArgs,
    dep: &Deployment,
    fixes: bool,
) -> Startup {
    let large = card >= LARGE_CARD;
    let version = a.version.unwrap_or_default();
    let p = Profile::of(Engine::Vllm);
    let util = a.gpu_memory_utilization.unwrap_or(p.memory_fraction);
    let max_model_len = a
        .max_model_len
        .or(spec.max_position_embeddings)
        .unwrap_or_else(|| w.total_tokens())
        .max(1);
    // V0 (arg_utils.py create_engine_config): chunked prefill by default only for long contexts,
    // and not with a sliding window, a speculative model or LoRA.
    let v0_may_chunk = spec.sliding_window.is_none() && dep.draft.is_none() && dep.lora.is_none();
    // --enable-chunked-prefill given either way wins (EngineArgs.enable_chunked_prefill set).
    let v0_chunked = |len: u64| {
        a.enable_chunked_prefill
            .unwrap_or(v0_may_chunk && len > V0_LONG_CONTEXT)
    };
    // The profiling run's tokens for a max_model_len: V1 `vllm serve` (UsageContext.
    // OPENAI_API_SERVER) defaults, engine/arg_utils.py get_batch_defaults; V0 SchedulerConfig.
    let mnbt_for = |len: u64| {
        a.max_num_batched_tokens.unwrap_or(match version {
            VllmVersion::V1 if large => 8192,
            VllmVersion::V1 => 2048,
            VllmVersion::V0 if v0_chunked(len) => V0_CHUNKED_BATCHED_TOKENS,
            VllmVersion::V0 => len.max(2048),
        })
    };
    let mnbt = mnbt_for(max_model_len);
    let chunked_prefill = version == VllmVersion::V1 || v0_chunked(max_model_len);
    let seqs = a
        .max_num_seqs
        .unwrap_or(if large && version == VllmVersion::V1 {
            1024
        } else {
            256
        });
    let block = match p.kv_layout {
        KvLayout::Paged { block } => block.max(1),
        _ => 16,
    };
    let d = w.weight_dtype.compute_kv_dtype().elem_bytes().as_f64();
    // The profiling run's peak: one forward of `tokens` tokens, `seqs` sequences sampled.
    let peak_for = |tokens: u64| {
        let mut p = Profile::of(Engine::Vllm);
        p.prefill_chunk = Some(tokens);
        let profiling = Workload {
            prompt_tokens: tokens,
            max_new_tokens: 0,
            batch: 1,
            ..*w
        };
        // V1: the forward alone, then the fused MoE caches and the sampler warm-up as vLLM's
        // code allocates them; V0 keeps the profile's logits of `seqs` rows.
        let v1 = version == VllmVersion::V1;
        p.sampler_warmup_seqs = if v1 { 0 } else { seqs };
        let (prefill, decode) = activations(spec, &p, &profiling, d, 0);
        let forward = prefill.max(decode);
        if !v1 {
            return forward;
        }
        forward
            .saturating_add(fused_moe_cache_bytes(spec, tokens, d))
            .saturating_add(sampler_warmup_bytes(seqs, spec.vocab_size, d))
    };
    let lm_peak = peak_for(mnbt);
    // `profile_run` encodes the dummy images first and keeps their outputs through the language
    // model's dummy run (V1's gpu_model_runner.py); V0 is not modelled with images (`plan`
    // refuses the pair).
    let d_bytes = (d.ceil() as u64).max(1);
    let encoder_profile = dep
        .images
        .filter(|_| version == VllmVersion::V1)
        .and_then(|l| {
            l.input.vllm_profile(
                mnbt,
                seqs,
                max_model_len,
                l.limit_mm_per_prompt,
                spec.hidden_size,
                d_bytes,
            )
        });
    let peak_activation = encoder_profile.map_or(lm_peak, |e| e.peak_with(lm_peak));
    let all_weights = engine_weight_bytes(spec, w.weight_dtype, Engine::Vllm);
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
    let available_with = |peak: u64| {
        requested
            .saturating_sub(weights)
            .saturating_sub(adapters)
            .saturating_sub(draft_weights)
            .saturating_sub(peak)
            .saturating_sub(non_torch)
    };
    let available = available_with(peak_activation);
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
    // V0's SchedulerConfig._verify_args refuses the flags before anything loads.
    let config_error = (version == VllmVersion::V0)
        .then(|| v0_config_error(mnbt, max_model_len, seqs, chunked_prefill))
        .flatten();
    // V0 raise_if_cache_size_invalid: num_gpu_blocks > 0 and max_model_len ≤ block × blocks,
    // the same as V1's whole blocks of max_model_len within the memory.
    let starts = config_error.is_none() && num_blocks > 0 && needed <= available;
    // The largest length whose blocks fit, by bisection over [lo, hi] (estimate_max_model_len).
    let bisect = |mut lo: u64, mut hi: u64, fits: &dyn Fn(u64) -> bool| {
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    };
    let (lo, largest) = match version {
        VllmVersion::V1 => {
            let lo = bisect(0, max_model_len, &|len| needed_for(len) <= available);
            (
                lo,
                if available == 0 {
                    0
                } else {
                    whole_blocks(lo, block)
                },
            )
        }
        VllmVersion::V0 => {
            // Past 32,768 the profile is the chunk's, the same for every length; at or below it
            // the profile grows with the length, so what fits shrinks as the length grows.
            let short = max_model_len.min(V0_LONG_CONTEXT);
            let fits = |len: u64| {
                let avail = available_with(peak_for(mnbt_for(len)));
                avail >= block_bytes && needed_for(len) <= avail
            };
            let long = (max_model_len > V0_LONG_CONTEXT && v0_chunked(max_model_len))
                .then(|| {
                    bisect(V0_LONG_CONTEXT, max_model_len, &|len| {
                        len == V0_LONG_CONTEXT || fits(len)
                    })
                })
                .filter(|&len| len > V0_LONG_CONTEXT);
            let lo = long.unwrap_or_else(|| bisect(0, short, &|len| len == 0 || fits(len)));
            (lo, whole_blocks(lo, block))
        }
    };
    // V0 with --enable-chunked-prefill: a profiling run of 512 tokens.
    let chunked_prefill_blocks = (version == VllmVersion::V0
        && !starts
        && config_error.is_none()
        && !chunked_prefill
        && a.max_num_batched_tokens.is_none())
    .then(|| available_with(peak_for(V0_CHUNKED_BATCHED_TOKENS)))
    .filter(|&avail| needed <= avail)
    .and_then(|avail| avail.checked_div(block_bytes));
    let cpu_blocks =
        (version == VllmVersion::V0).then(|| V0_SWAP_SPACE.checked_div(block_bytes).unwrap_or(0));
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
    let utilization_that_starts =
        utilization_for(fixed, card).filter(|_| !starts && config_error.is_none());
    let gib = |b: u64| b as f64 / GIB as f64;
    // The flags that pass the check, each with vLLM's start-up under it.
    let config_fixes = if fixes && config_error.is_some() {
        let mut tries: Vec<(String, VllmArgs)> = Vec::new();
        if mnbt < max_model_len && !chunked_prefill {
            tries.push((
                "--enable-chunked-prefill".into(),
                VllmArgs {
                    enable_chunked_prefill: Some(true),
                    ..*a
                },
            ));
            tries.push((
                format!("--max-num-batched-tokens {}", max_model_len.max(seqs)),
                VllmArgs {
                    max_num_batched_tokens: Some(max_model_len.max(seqs)),
                    ..*a
                },
            ));
            tries.push((
                format!("--max-model-len {mnbt}"),
                VllmArgs {
                    max_model_len: Some(mnbt),
                    ..*a
                },
            ));
        } else {
            tries.push((
                format!("--max-num-seqs {mnbt}"),
                VllmArgs {
                    max_num_seqs: Some(mnbt),
                    ..*a
                },
            ));
            tries.push((
                format!("--max-num-batched-tokens {seqs}"),
                VllmArgs {
                    max_num_batched_tokens: Some(seqs),
                    ..*a
                },
            ));
        }
        tries
            .into_iter()
            .map(|(how, alt)| {
                let s = startup_at(spec, w, card, &alt, dep, false);
                ConfigFix {
                    how,
                    starts: s.starts,
                    kv_tokens: s.kv_tokens,
                    max_num_batched_tokens: s.max_num_batched_tokens,
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let message = config_error.clone().or_else(|| {
        (!starts).then(|| {
            let none_left = match version {
                VllmVersion::V1 => available == 0,
                VllmVersion::V0 => num_blocks == 0,
            };
            if none_left {
                "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` \
             when initializing the engine."
                    .to_string()
            } else if version == VllmVersion::V0 {
                format!(
                "The model's max seq len ({max_model_len}) is larger than the maximum number of \
                 tokens that can be stored in KV cache ({}). Try increasing \
                 `gpu_memory_utilization` or decreasing `max_model_len` when initializing the \
                 engine.",
                num_blocks.saturating_mul(block)
            )
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
        })
    });
    Startup {
        version,
        vllm: version.describe(),
        chunked_prefill,
        chunked_prefill_given: version == VllmVersion::V0 && a.enable_chunked_prefill.is_some(),
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
        encoder_profile,
        vision_encoder_bytes: peak_activation.saturating_sub(lm_peak),
        non_torch_bytes: non_torch,
        available_kv_bytes: available,
        needed_kv_bytes: needed,
        num_blocks,
        kv_tokens: num_blocks.saturating_mul(block),
        max_concurrency: num_blocks as f64 / per_request as f64,
        starts,
        largest_max_model_len: largest,
        utilization_that_starts,
        cpu_blocks,
        chunked_prefill_blocks,
        config_error,
        config_fixes,
        message,
    }
}

/// A flag that passes V0's config check, and vLLM's start-up with it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigFix {
    /// The flag, as pasted.
    pub how: String,
    pub starts: bool,
    /// Its KV cache, in tokens.
    pub kv_tokens: u64,
    /// Its profiling run's tokens.
    pub max_num_batched_tokens: u64,
}

/// V0's `SchedulerConfig._verify_args` (vllm/config.py@v0.6.4.post1): without chunked prefill
/// `max_num_batched_tokens` below `max_model_len` is refused, and below `max_num_seqs` always;
/// its `ValueError` message, numbers filled in.
pub fn v0_config_error(
    max_num_batched_tokens: u64,
    max_model_len: u64,
    max_num_seqs: u64,
    chunked_prefill: bool,
) -> Option<String> {
    if max_num_batched_tokens < max_model_len && !chunked_prefill {
        Some(format!(
            "max_num_batched_tokens ({max_num_batched_tokens}) is smaller than max_model_len \
             ({max_model_len}). This effectively limits the maximum sequence length to \
             max_num_batched_tokens and makes vLLM reject longer sequences. Please increase \
             max_num_batched_tokens or decrease max_model_len."
        ))
    } else if max_num_batched_tokens < max_num_seqs {
        Some(format!(
            "max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or equal to \
             max_num_seqs ({max_num_seqs})."
        ))
    } else {
        None
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
            images: None,
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
    fn the_sampler_warm_up_and_the_fused_moe_caches_are_vllms_allocations() {
        // bf16 logits held by the caller, then fp32 copy, sorted values, int64 indices, two bool
        // masks, softmax and the scattered result: 28 bytes a logit.
        assert_eq!(
            sampler_warmup_bytes(1024, 201_088, 2.0),
            1024 * 201_088 * 28
        );
        assert_eq!(sampler_warmup_bytes(256, 128_256, 2.0), 256 * 128_256 * 28);
        // gpt-oss-120b: 8,192 tokens × top-4 × (2880 + max(5760, 2880)) bf16 values.
        let oss = presets::from_file("gpt-oss-120b");
        assert_eq!(
            fused_moe_cache_bytes(&oss, 8192, 2.0),
            8192 * 4 * (2880 + 5760) * 2
        );
        // Chunked at 32,768 tokens; nothing for a dense model.
        assert_eq!(
            fused_moe_cache_bytes(&oss, 65_536, 2.0),
            fused_moe_cache_bytes(&oss, 32_768, 2.0)
        );
        assert_eq!(fused_moe_cache_bytes(&llama8b(), 8192, 2.0), 0);
    }

    #[test]
    fn gpt_oss_120b_profiling_peak_leaves_no_kv_cache_on_an_h100() {
        // vllm#23278: "Available KV cache memory: -2.14 GiB" at 0.9; vllm#27508 refuses 131,072
        // at 0.95.
        let oss = presets::from_file("gpt-oss-120b");
        let w = Workload {
            weight_dtype: WeightDtype::Mxfp4,
            ..work()
        };
        let h100 = 85_520_809_984;
        let s = startup(&oss, &w, h100, &VllmArgs::default());
        assert!(!s.starts);
        assert_eq!(s.available_kv_bytes, 0);
        let a = VllmArgs {
            gpu_memory_utilization: Some(0.95),
            ..VllmArgs::default()
        };
        let s = startup(&oss, &w, h100, &a);
        assert!(!s.starts);
        assert!(s.available_kv_bytes > 0 && s.available_kv_bytes < s.needed_kv_bytes);
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

    const RTX3090: u64 = 24_576 * crate::units::MIB;

    #[test]
    fn v0_config_check_is_schedulerconfigs() {
        // _verify_args@v0.6.4.post1: below max_model_len only without chunked prefill; below
        // max_num_seqs always; equal passes.
        assert!(v0_config_error(4096, 8192, 256, false).is_some_and(|m| m
            .starts_with("max_num_batched_tokens (4096) is smaller than max_model_len (8192).")));
        assert_eq!(v0_config_error(4096, 8192, 256, true), None);
        assert_eq!(v0_config_error(8192, 8192, 256, false), None);
        assert_eq!(
            v0_config_error(128, 8192, 256, true).as_deref(),
            Some(
                "max_num_batched_tokens (128) must be greater than or equal to max_num_seqs (256)."
            )
        );
        assert_eq!(v0_config_error(256, 256, 256, false), None);
        // The flag turns V0's default either way, and V1 does not read it.
        let on = startup(
            &llama8b(),
            &work(),
            24 * GIB,
            &VllmArgs {
                enable_chunked_prefill: Some(true),
                ..v0(8192)
            },
        );
        assert!(on.chunked_prefill && on.config_error.is_none());
        assert_eq!(on.max_num_batched_tokens, V0_CHUNKED_BATCHED_TOKENS);
        let off = startup(
            &llama8b(),
            &work(),
            80 * GIB,
            &VllmArgs {
                enable_chunked_prefill: Some(false),
                ..v0(40_000)
            },
        );
        assert!(!off.chunked_prefill);
        assert_eq!(off.max_num_batched_tokens, 40_000);
        let refused = startup(
            &llama8b(),
            &work(),
            80 * GIB,
            &VllmArgs {
                max_num_batched_tokens: Some(4096),
                ..v0(8192)
            },
        );
        assert!(!refused.starts && refused.message == refused.config_error);
        assert_eq!(refused.config_fixes.len(), 3);
        assert!(refused.config_fixes.iter().all(|f| f.starts));
    }

    fn v0(len: u64) -> VllmArgs {
        VllmArgs {
            max_model_len: Some(len),
            version: Some(VllmVersion::V0),
            ..Default::default()
        }
    }

    #[test]
    fn v0_chunks_only_above_32768_and_profiles_the_whole_length_below() {
        let at = |len| startup(&llama8b(), &work(), RTX3090, &v0(len));
        // SchedulerConfig: max(max_model_len, 2048) without chunked prefill, 512 with it
        let short = at(1000);
        assert!(!short.chunked_prefill);
        assert_eq!(short.max_num_batched_tokens, 2048);
        let edge = at(32_768);
        assert!(!edge.chunked_prefill);
        assert_eq!(edge.max_num_batched_tokens, 32_768);
        let long = at(32_769);
        assert!(long.chunked_prefill);
        assert_eq!(long.max_num_batched_tokens, 512);
        assert_eq!(long.max_num_seqs, 256);
        // a --max-num-batched-tokens given is kept
        let given = startup(
            &llama8b(),
            &work(),
            RTX3090,
            &VllmArgs {
                max_num_batched_tokens: Some(4096),
                ..v0(20_000)
            },
        );
        assert_eq!(given.max_num_batched_tokens, 4096);
        // V1 keeps its own defaults whatever the length
        let v1 = startup(
            &llama8b(),
            &work(),
            RTX3090,
            &VllmArgs {
                max_model_len: Some(29_000),
                ..Default::default()
            },
        );
        assert_eq!(v1.version, VllmVersion::V1);
        assert!(v1.chunked_prefill);
        assert_eq!(v1.max_num_batched_tokens, 2048);
        assert_eq!(v1.vllm, "vLLM V1 (vllm@001cabc1)");
        assert_eq!(short.vllm, "vLLM V0 (v0.6.4)");
    }

    #[test]
    fn v0_at_29000_refuses_and_at_35000_starts_on_a_3090() {
        // vllm#10517: Llama-3.1-8B-Instruct, bf16, RTX 3090
        let refused = startup(&llama8b(), &work(), RTX3090, &v0(29_000));
        // V1 profiling 29,000 tokens over 256 sequences runs the same forward; it prices the
        // sampler warm-up from V1's sampler (28 bytes a logit) where V0 keeps 8 bytes a logit of
        // the 256 rows.
        let v1 = startup(
            &llama8b(),
            &work(),
            RTX3090,
            &VllmArgs {
                max_model_len: Some(29_000),
                max_num_batched_tokens: Some(29_000),
                ..Default::default()
            },
        );
        let vocab = llama8b().vocab_size;
        let sampler = sampler_warmup_bytes(256, vocab, 2.0) - 255 * vocab * 8;
        assert!(
            (v1.peak_activation_bytes - refused.peak_activation_bytes).abs_diff(sampler) <= 2,
            "{} {}",
            v1.peak_activation_bytes,
            refused.peak_activation_bytes
        );
        assert_eq!(
            refused.num_blocks,
            refused.available_kv_bytes / (16 * 131_072)
        );
        assert!(!refused.starts);
        assert!(refused.num_blocks * 16 < 29_000);
        let msg = refused.message.clone().expect("V0's ValueError");
        assert_eq!(
            msg,
            format!(
                "The model's max seq len (29000) is larger than the maximum number of tokens \
                 that can be stored in KV cache ({}). Try increasing `gpu_memory_utilization` or \
                 decreasing `max_model_len` when initializing the engine.",
                refused.num_blocks * 16
            )
        );
        // --enable-chunked-prefill: the 512-token profile, the same KV cache as at 35,000
        let started = startup(&llama8b(), &work(), RTX3090, &v0(35_000));
        assert!(started.starts, "{started:?}");
        assert!(started.num_blocks * 16 >= 35_000);
        assert_eq!(refused.chunked_prefill_blocks, Some(started.num_blocks));
        assert!(started.peak_activation_bytes < refused.peak_activation_bytes);
        // # CPU blocks: --swap-space 4 GiB over a 2 MiB block
        assert_eq!(started.cpu_blocks, Some(2048));
        assert_eq!(v1.cpu_blocks, None);
    }

    #[test]
    fn v0_largest_length_starts_and_one_block_more_does_not() {
        let refused = startup(&llama8b(), &work(), RTX3090, &v0(29_000));
        let n = refused.largest_max_model_len;
        assert!(n > 0 && n < 29_000 && n % 16 == 0, "{n}");
        assert!(startup(&llama8b(), &work(), RTX3090, &v0(n)).starts);
        assert!(!startup(&llama8b(), &work(), RTX3090, &v0(n + 16)).starts);
    }

    #[test]
    fn v0_keeps_chunked_prefill_off_with_lora_or_a_draft() {
        use crate::estimate::deployment::{Draft, Lora, Target, Targets};
        let draft = presets::from_file("qwen2.5-0.5b-instruct");
        let lora = Deployment {
            images: None,
            lora: Some(Lora {
                rank: 8,
                targets: Targets::of(&[Target::Q]),
                max_loras: 1,
            }),
            draft: None,
        };
        let spec = Deployment {
            images: None,
            lora: None,
            draft: Some(Draft {
                spec: &draft,
                tokens: 5,
            }),
        };
        for dep in [lora, spec] {
            let s = startup_with(&llama8b(), &work(), 80 * GIB, &v0(40_000), &dep);
            assert!(!s.chunked_prefill);
            assert_eq!(s.max_num_batched_tokens, 40_000);
        }
    }

    #[test]
    fn vllm_version_names() {
        assert_eq!("V0".parse::<VllmVersion>().ok(), Some(VllmVersion::V0));
        assert_eq!("v1".parse::<VllmVersion>().ok(), Some(VllmVersion::V1));
        assert!("v2".parse::<VllmVersion>().is_err());
        let a = VllmArgs {
            version: Some(VllmVersion::V1),
            ..Default::default()
        };
        assert_eq!(a.first_given(), Some("--vllm-version"));
    }
}
