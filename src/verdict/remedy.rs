//! Remedies: what to change, in the user's engine's words, and what it buys in bytes.

use serde::Serialize;

use crate::dtype::{KvDtype, WeightDtype};
use crate::estimate::Engine;
use crate::units::{group, Bytes};

/// A change the user can make. Ordered from cheapest (a flag) to dearest (new hardware).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Change {
    TruncatePrompt(u64),
    CapNewTokens(u64),
    LimitConcurrency(u64),
    UseSdpa,
    HalfPrecision(WeightDtype),
    QuantizeKv(KvDtype),
    QuantizeWeights(WeightDtype),
    ChunkedPrefill(u64),
    RaiseUtilization(u64),
    AllocatorSettings,
    FreeOtherProcesses,
    /// The engine's context / max model length.
    ReduceContext(u64),
    /// Keep part of the model in host RAM.
    CpuOffload,
    /// Generate without the draft model (no speculative decoding).
    DropDraft,
    /// Merge the LoRA adapter into the weights instead of holding it beside them.
    MergeAdapters,
    /// Give the process more host RAM (or load without a host copy).
    MoreHostMemory,
    LargerGpu(u64),
    /// Spread the model over this many GPUs of the card (tensor parallel, `device_map`, `-ts`).
    MoreGpus(u64),
}

/// One GPU of a remedy that spreads the model: what it would hold at the peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DevicePeak {
    pub device: String,
    pub peak_bytes: u64,
    pub capacity_bytes: u64,
    pub free_bytes: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemedyBudget {
    pub peak_bytes: u64,
    pub vram_bytes: u64,
    pub fits: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Remedy {
    /// One line: what to do and what it gives ("cap max_new_tokens at 1,536 → peak 22.8 of 24 GiB").
    pub action: String,
    /// The knob in the user's engine.
    pub how: String,
    pub change: Change,
    /// Bytes the change saves at the peak (negative for changes that spend memory to gain room,
    /// such as a higher vLLM utilization); `None` when the evidence does not price it.
    pub saves_bytes: Option<i64>,
    pub new_budget: Option<RemedyBudget>,
    /// Set by `diagnose --verify` when the change was tried on the GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified: Option<bool>,
    /// For a change that spreads the model over several GPUs: each one's peak.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_device: Vec<DevicePeak>,
}

impl Remedy {
    pub fn new(change: Change, engine: Engine, old_peak: u64, new_peak: u64, vram: u64) -> Remedy {
        let fits = new_peak <= vram;
        let effect = if matches!(change, Change::LargerGpu(_)) {
            format!("peak {} of {}", Bytes(new_peak), Bytes(vram))
        } else {
            format!(
                "peak {} of {}{}",
                Bytes(new_peak),
                Bytes(vram),
                if fits { "" } else { " — still too much" }
            )
        };
        Remedy {
            action: format!("{} → {effect}", describe(change)),
            how: how(change, engine),
            change,
            saves_bytes: Some(
                (old_peak as i128 - new_peak as i128).clamp(i64::MIN as i128, i64::MAX as i128)
                    as i64,
            ),
            new_budget: Some(RemedyBudget {
                peak_bytes: new_peak,
                vram_bytes: vram,
                fits,
            }),
            verified: None,
            per_device: Vec::new(),
        }
    }

    /// Spread over several GPUs (`change` is `MoreGpus`): `how` is the engine's flags for it,
    /// priced by the fullest device.
    pub fn spread(
        change: Change,
        how: String,
        old_peak: u64,
        per_device: Vec<DevicePeak>,
    ) -> Remedy {
        let fits = per_device.iter().all(|d| d.free_bytes >= 0);
        // the first of the fullest (max_by_key keeps the last)
        let fullest = per_device
            .iter()
            .rev()
            .max_by_key(|d| d.peak_bytes.saturating_mul(1000) / d.capacity_bytes.max(1));
        let (peak, cap, name) = fullest.map_or((0, 0, String::new()), |d| {
            (d.peak_bytes, d.capacity_bytes, d.device.clone())
        });
        let effect = if fits {
            format!(
                "every GPU fits, the fullest ({name}) at {} of {}",
                Bytes(peak),
                Bytes(cap)
            )
        } else {
            format!("{name} still short: {} of {}", Bytes(peak), Bytes(cap))
        };
        Remedy {
            action: format!("{} → {effect}", describe(change)),
            how,
            change,
            saves_bytes: Some(
                (old_peak as i128 - peak as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64,
            ),
            new_budget: Some(RemedyBudget {
                peak_bytes: peak,
                vram_bytes: cap,
                fits,
            }),
            verified: None,
            per_device,
        }
    }

    /// A remedy the evidence names but cannot price; `saves` when one figure is known (the bytes
    /// another process holds, the cached blocks the allocator could reuse).
    pub fn advice(change: Change, engine: Engine, saves: Option<u64>) -> Remedy {
        let action = match saves {
            Some(b) => format!("{} → frees up to {}", describe(change), Bytes(b)),
            None => describe(change),
        };
        Remedy {
            action,
            how: how(change, engine),
            change,
            saves_bytes: saves.map(|b| b as i64),
            new_budget: None,
            verified: None,
            per_device: Vec::new(),
        }
    }

    pub fn fits(&self) -> bool {
        self.new_budget.as_ref().is_some_and(|b| b.fits)
    }
}

/// A value of 0 means "the evidence gives no number": the remedy names the knob without one.
fn describe(change: Change) -> String {
    match change {
        Change::TruncatePrompt(0) => "truncate long prompts".into(),
        Change::CapNewTokens(0) => "cap max_new_tokens".into(),
        Change::LimitConcurrency(0) => "limit concurrent sequences and queue the rest".into(),
        Change::ChunkedPrefill(0) => "prefill in chunks".into(),
        Change::ReduceContext(0) => "size the context for the prompts you really send".into(),
        Change::TruncatePrompt(n) => format!("truncate the prompt to {} tokens", group(n)),
        Change::CapNewTokens(n) => format!("cap max_new_tokens at {}", group(n)),
        Change::LimitConcurrency(n) => {
            format!("limit concurrency to {n} sequences and queue the rest")
        }
        Change::UseSdpa => "use SDPA / flash attention instead of eager".into(),
        Change::HalfPrecision(d) => format!("load the weights in {d} instead of f32"),
        Change::QuantizeKv(d) => format!("store the KV cache in {d}"),
        Change::QuantizeWeights(d) => format!("quantize the weights to {d}"),
        Change::ChunkedPrefill(n) => format!("prefill in chunks of {} tokens", group(n)),
        Change::RaiseUtilization(pct) => format!("let the engine use {pct} % of the card"),
        Change::AllocatorSettings => "let the allocator reuse fragmented memory".into(),
        Change::FreeOtherProcesses => "free the memory other processes hold".into(),
        Change::ReduceContext(n) => format!("size the context for {} tokens", group(n)),
        Change::CpuOffload => "offload part of the model to CPU RAM (slow)".into(),
        Change::DropDraft => "generate without the draft model".into(),
        Change::MergeAdapters => "merge the LoRA adapter into the weights".into(),
        Change::MoreHostMemory => {
            "give the process more host RAM, or load without a full host copy".into()
        }
        Change::LargerGpu(0) => "use a GPU with more memory".into(),
        Change::LargerGpu(b) => format!("use a GPU with {}", Bytes(b)),
        Change::MoreGpus(n) => format!("spread the model over {n} GPUs of this card"),
    }
}

/// The knob, in the engine's own words.
fn how(change: Change, engine: Engine) -> String {
    use Engine::*;
    match (change, engine) {
        (Change::QuantizeWeights(d), Candle) => format!("quantize the linear layers at load (candle's QMatMul, e.g. QTensor::quantize to {d}); `llm-oom diagnose --quantize {}` runs it", if d.to_string().starts_with("q8") { "q8_0" } else { "q4k" }),
        (Change::HalfPrecision(_), Candle) => "load the safetensors with DType::BF16 (--dtype bf16)".into(),
        (Change::ChunkedPrefill(n), Candle) if n > 0 => format!("forward the prompt in slices of {n} tokens into the KV cache"),
        (Change::ReduceContext(n), Sglang) => format!("--context-length {n}"),
        (Change::LimitConcurrency(n), Sglang) if n > 0 => format!("--max-running-requests {n}"),
        (Change::ChunkedPrefill(n), Sglang) if n > 0 => format!("--chunked-prefill-size {n}"),
        (Change::RaiseUtilization(pct), Sglang) => format!("--mem-fraction-static 0.{pct:02}"),
        (Change::CapNewTokens(n), Sglang) if n > 0 => format!("sampling_params={{\"max_new_tokens\": {n}}}"),
        (Change::QuantizeKv(_), Sglang) => "--kv-cache-dtype fp8_e5m2".into(),
        (Change::CpuOffload, Sglang) => "--cpu-offload-gb N".into(),
        (Change::MoreGpus(n), Sglang) => format!("--tp {n}"),
        (Change::TruncatePrompt(0), _) => "tokenizer(text, truncation=True, max_length=N); llm-oom plan finds N".into(),
        (Change::CapNewTokens(0), Vllm) => "SamplingParams(max_tokens=N); llm-oom plan finds N".into(),
        (Change::CapNewTokens(0), _) => "generate(..., max_new_tokens=N); llm-oom plan finds N".into(),
        (Change::LimitConcurrency(0), Vllm) => "--max-num-seqs N; llm-oom plan --batch finds N".into(),
        (Change::LimitConcurrency(0), _) => "a semaphore of N requests around generate(); llm-oom plan finds N".into(),
        (Change::ChunkedPrefill(0), Vllm) => "--enable-chunked-prefill --max-num-batched-tokens 2048".into(),
        (Change::ChunkedPrefill(0), _) => "feed the prompt in slices with past_key_values".into(),
        (Change::ReduceContext(0), Vllm) => "--max-model-len N".into(),
        (Change::ReduceContext(0), LlamaCpp) => "-c N (the context, shared by all -np slots)".into(),
        (Change::ReduceContext(0), _) => "cap inputs and max_new_tokens".into(),
        (Change::TruncatePrompt(n), Vllm) => format!("--max-model-len {n} (plus max_tokens), or truncate inputs client-side"),
        (Change::TruncatePrompt(n), LlamaCpp) => format!("truncate inputs to {n} tokens before sending; -c sets the context"),
        (Change::TruncatePrompt(n), _) => format!("tokenizer(text, truncation=True, max_length={n})"),
        (Change::CapNewTokens(n), Vllm) => format!("SamplingParams(max_tokens={n})"),
        (Change::CapNewTokens(n), LlamaCpp) => format!("-n {n} (n_predict)"),
        (Change::CapNewTokens(n), _) => format!("model.generate(..., max_new_tokens={n})"),
        (Change::LimitConcurrency(n), Vllm) => format!("--max-num-seqs {n}"),
        (Change::LimitConcurrency(n), LlamaCpp) => format!("-np {n} (parallel slots)"),
        (Change::LimitConcurrency(n), _) => format!("batch at most {n} prompts per generate() call; queue requests (a semaphore of {n})"),
        (Change::UseSdpa, _) => "from_pretrained(..., attn_implementation=\"sdpa\") (or \"flash_attention_2\")".into(),
        (Change::HalfPrecision(d), LlamaCpp) => format!("convert to a {d} GGUF"),
        (Change::HalfPrecision(d), _) => format!("from_pretrained(..., dtype=torch.{})", if d == WeightDtype::F16 { "float16" } else { "bfloat16" }),
        // vLLM's KV cache has no smaller type than fp8 ("auto" is the default, not a change).
        (Change::QuantizeKv(_), Vllm) => "--kv-cache-dtype fp8".into(),
        (Change::QuantizeKv(d), LlamaCpp) => format!("-fa on -ctk {d} -ctv {d}"),
        (Change::QuantizeKv(_), _) => "generate(..., cache_implementation=\"quantized\", cache_config={\"nbits\": 4})".into(),
        (Change::QuantizeWeights(d), LlamaCpp) => format!("llama-quantize model-f16.gguf model-{d}.gguf {}", d.to_string().to_uppercase()),
        (Change::QuantizeWeights(d), Vllm) => format!("a pre-quantized checkpoint (AWQ/GPTQ {d}) or --quantization bitsandbytes"),
        (Change::QuantizeWeights(WeightDtype::Int8), _) => "BitsAndBytesConfig(load_in_8bit=True)".into(),
        (Change::QuantizeWeights(_), _) => "BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"nf4\", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)".into(),
        (Change::ChunkedPrefill(n), Vllm) => format!("--enable-chunked-prefill --max-num-batched-tokens {n}"),
        (Change::ChunkedPrefill(n), LlamaCpp) => format!("-ub {n}"),
        (Change::ChunkedPrefill(n), _) => format!("feed the prompt through the model in slices of {n} tokens with past_key_values"),
        (Change::RaiseUtilization(pct), _) => format!("--gpu-memory-utilization 0.{pct:02}"),
        (Change::AllocatorSettings, _) => "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or max_split_size_mb:128); torch.cuda.empty_cache() only returns cached blocks, it is not a fix".into(),
        (Change::FreeOtherProcesses, _) => "nvidia-smi lists them; close the notebook or server that holds a model, or run on another GPU (CUDA_VISIBLE_DEVICES)".into(),
        (Change::ReduceContext(n), Vllm) => format!("--max-model-len {n}"),
        (Change::ReduceContext(n), LlamaCpp) => format!("-c {n}"),
        (Change::ReduceContext(n), _) => format!("cap inputs at {n} tokens (tokenizer truncation) and max_new_tokens"),
        (Change::CpuOffload, LlamaCpp) => "-ngl N with N below the layer count".into(),
        (Change::CpuOffload, Vllm) => "--cpu-offload-gb N".into(),
        (Change::CpuOffload, _) => "from_pretrained(..., device_map=\"auto\", max_memory={0: \"20GiB\", \"cpu\": \"64GiB\"})".into(),
        (Change::DropDraft, Vllm) => "drop --speculative-config".into(),
        (Change::DropDraft, LlamaCpp) => "drop -md (--model-draft)".into(),
        (Change::DropDraft, _) => "generate(...) without assistant_model=".into(),
        (Change::MergeAdapters, Vllm) => "serve a checkpoint merged with PEFT's merge_and_unload() instead of --enable-lora".into(),
        (Change::MergeAdapters, LlamaCpp) => "llama-export-lora -m model.gguf --lora adapter.gguf -o merged.gguf, then drop --lora".into(),
        (Change::MergeAdapters, _) => "model = model.merge_and_unload() (PEFT) before generate()".into(),
        (Change::MoreHostMemory, _) => "raise the container's memory limit; load safetensors (memory-mapped) with low_cpu_mem_usage=True / device_map=\"cuda\"; check dmesg".into(),
        (Change::LargerGpu(_), _) => "or split the model across GPUs (device_map=\"auto\", --tensor-parallel-size, -ts)".into(),
        (Change::MoreGpus(n), Vllm) => format!("--tensor-parallel-size {n}"),
        (Change::MoreGpus(n), LlamaCpp) => format!("-ngl 999 --tensor-split {}", std::iter::repeat_n("1", n.min(64) as usize).collect::<Vec<_>>().join(",")),
        (Change::MoreGpus(_), _) => "from_pretrained(..., device_map=\"auto\")".into(),
    }
}
