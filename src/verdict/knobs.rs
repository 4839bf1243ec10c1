//! Remedies in the knobs of the engine that ran: which engine printed the log (the reader that
//! matched, else the server's own lines, else `--engine`), the settings the log shows in force
//! (a GGUF's quant, vLLM's `kv_cache_dtype` and `gpu_memory_utilization`, llama.cpp's KV type),
//! and each remedy rewritten in that engine's words, or dropped when it is already in force.

use std::sync::OnceLock;

use regex::Regex;

use super::remedy::Change;
use super::Remedy;
use crate::logparse::parse::{re, Source};

/// The engine whose knobs remedies speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// transformers / PyTorch, and anything without knobs of its own here (`--engine`'s words).
    Asked,
    Vllm,
    LlamaCpp,
    Ollama,
    Sglang,
    Mlx,
    /// Hugging Face text-generation-inference (`text-generation-launcher`).
    Tgi,
    /// TensorRT-LLM (`trtllm-serve`, its LLM API).
    TensorrtLlm,
    /// LMDeploy's TurboMind engine.
    Lmdeploy,
    /// TensorFlow / Keras: its BFC allocator takes nearly the whole card unless told otherwise.
    Tensorflow,
    /// JAX on XLA: preallocates 75 % of the card at its first array.
    Jax,
}

impl Family {
    /// The engine's name as `verdict.record.engine` writes it, for an engine a generic reader
    /// (the CUDA driver's message) cannot name: the log's own lines do.
    pub fn engine(self) -> Option<&'static str> {
        match self {
            Family::Tgi => Some("tgi"),
            Family::TensorrtLlm => Some("tensorrt_llm"),
            Family::Lmdeploy => Some("lmdeploy"),
            Family::Tensorflow => Some("tensorflow"),
            Family::Jax => Some("jax"),
            _ => None,
        }
    }
}

/// The engine from the reader that matched, else from the server's own lines.
pub fn family(source: Option<Source>, lines: &[String]) -> Family {
    let by_lines = || {
        let any = |w: &str| lines.iter().any(|l| l.contains(w));
        if any("ollama") || any("OLLAMA_") || any("source=server.go") || any("source=sched.go") {
            Family::Ollama
        } else if any("sglang") {
            Family::Sglang
        } else if any("text_generation_launcher") || any("text_generation_server") {
            Family::Tgi
        } else if any("tensorrt_llm") || any("TensorRT-LLM") || any("trtllm") {
            Family::TensorrtLlm
        } else if any("lmdeploy") || any("turbomind") || any("TurboMind") {
            Family::Lmdeploy
        } else if any("tensorflow/") || any("tensorflow.python") || any("import tensorflow") {
            // TensorFlow's own allocator lines (`tensorflow/core/common_runtime/bfc_allocator.cc`,
            // `tensorflow/stream_executor/cuda/cuda_driver.cc`), whichever reader matched first.
            Family::Tensorflow
        } else if any("jaxlib") || any("jax/_src") || any("XLA_PYTHON_CLIENT") {
            Family::Jax
        } else {
            Family::Asked
        }
    };
    match source {
        Some(Source::Ollama) => Family::Ollama,
        Some(Source::Sglang) => Family::Sglang,
        Some(Source::Mlx) => Family::Mlx,
        Some(Source::Vllm) => Family::Vllm,
        Some(Source::Tgi) => Family::Tgi,
        Some(Source::TensorrtLlm) => Family::TensorrtLlm,
        Some(Source::Lmdeploy) => Family::Lmdeploy,
        Some(Source::Tensorflow) => Family::Tensorflow,
        // XLA's messages are JAX's or TensorFlow's; the log's own lines tell which.
        Some(Source::Xla) => match by_lines() {
            Family::Tensorflow => Family::Tensorflow,
            _ => Family::Jax,
        },
        // PyTorch's own message is the script's: its words stay those of `--engine`.
        Some(Source::Pytorch | Source::Rocm) => Family::Asked,
        // ollama runs llama.cpp: its log quotes llama.cpp's lines, its knobs are ollama's.
        Some(Source::LlamaCpp) => match by_lines() {
            Family::Ollama => Family::Ollama,
            _ => Family::LlamaCpp,
        },
        _ => by_lines(),
    }
}

/// Settings the log shows in force.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct InForce {
    /// The GGUF's quant, lower case (`q4_k_m`), from llama.cpp's `file type` or the file name.
    pub gguf_quant: Option<String>,
    /// vLLM's or SGLang's KV cache already in fp8.
    pub kv_fp8: bool,
    /// llama.cpp's KV cache already quantized (`-ctk q8_0`, `type_k = 'q8_0'`).
    pub kv_quantized: Option<String>,
    /// vLLM's `gpu_memory_utilization` in percent.
    pub utilization: Option<u64>,
}

pub fn in_force(lines: &[String]) -> InForce {
    static FTYPE: OnceLock<Regex> = OnceLock::new();
    static FILE: OnceLock<Regex> = OnceLock::new();
    static KV8: OnceLock<Regex> = OnceLock::new();
    static CTK: OnceLock<Regex> = OnceLock::new();
    static UTIL: OnceLock<Regex> = OnceLock::new();
    let ftype = re(
        &FTYPE,
        r"(?:file type|model ftype)\s*=\s*(Q\d+_K|Q\d+_\d|IQ\d+_\w+|F16|BF16)(?: - (Small|Medium|Large))?",
    );
    let file = re(&FILE, r"(?i)[-._](q\d+_k_[sml]|q\d+_\d|iq\d+_\w+)\.gguf");
    let kv8 = re(&KV8, r"kv[_-]cache[_-]dtype['\x22]?\s*[=: ]\s*['\x22]?fp8");
    let ctk = re(
        &CTK,
        r"(?:-ctk|--cache-type-k|type_k\s*=)\s*'?(q8_0|q4_0|q4_1|q5_0|q5_1|iq4_nl)",
    );
    let util = re(
        &UTIL,
        r"gpu[_-]memory[_-]utilization['\x22]?\s*[=: ]\s*(0?\.\d+|1\.0)",
    );
    let mut f = InForce::default();
    for l in lines {
        if f.gguf_quant.is_none() {
            if let Some(c) = ftype.captures(l) {
                let base = c.get(1).map_or("", |m| m.as_str()).to_lowercase();
                f.gguf_quant = Some(match c.get(2).map(|m| m.as_str()) {
                    Some(size) => format!("{base}_{}", &size[..1].to_lowercase()),
                    None => base,
                });
            } else if let Some(c) = file.captures(l) {
                f.gguf_quant = c.get(1).map(|m| m.as_str().to_lowercase());
            }
        }
        f.kv_fp8 |= kv8.is_match(l);
        if f.kv_quantized.is_none() {
            f.kv_quantized = ctk
                .captures(l)
                .and_then(|c| c.get(1))
                .map(|m| m.as_str().into());
        }
        if let Some(u) = util.captures(l).and_then(|c| c.get(1)) {
            f.utilization = u
                .as_str()
                .parse::<f64>()
                .ok()
                .map(|v| (v * 100.0).round() as u64);
        }
    }
    f
}

/// A GGUF quant one step smaller than `q`, for a log whose weights are already `q`.
fn smaller_quant(q: &str) -> &'static str {
    match q {
        "f16" | "bf16" | "q8_0" => "q6_k",
        "q6_k" | "q5_k_m" | "q5_k_s" | "q5_0" | "q5_1" => "q4_k_m",
        "q4_k_m" | "q4_k_s" | "q4_0" | "q4_1" | "iq4_xs" | "iq4_nl" => "q3_k_m",
        _ => "q2_k",
    }
}

/// Rewrite each remedy in the family's knobs; drop those already in force or without a knob
/// there. Remedies of `Family::Asked` are left as they were written.
pub fn speak(remedies: &mut Vec<Remedy>, family: Family, set: &InForce) {
    remedies.retain_mut(|r| match rewrite(r.change, family, set) {
        Some(Some((action, how))) => {
            if let Some(a) = action {
                r.action = a;
            }
            r.how = how;
            true
        }
        Some(None) => false,
        None => true,
    });
    // Two remedies rewritten to the same knob are one.
    let mut seen: Vec<String> = Vec::new();
    remedies.retain(|r| {
        let fresh = !seen.contains(&r.how);
        seen.push(r.how.clone());
        fresh
    });
}

/// `None`: keep as written; `Some(None)`: drop; `Some(Some((new action?, how)))`: rewrite.
type Rewrite = Option<Option<(Option<String>, String)>>;

fn rewrite(change: Change, family: Family, set: &InForce) -> Rewrite {
    let keep = |how: &str| Some(Some((None, how.to_string())));
    let quant_step = |q: &str| {
        let to = smaller_quant(q);
        (
            Some(format!(
                "use a smaller quant than the {} already loaded: {}",
                q.to_uppercase(),
                to.to_uppercase()
            )),
            to,
        )
    };
    match family {
        Family::Asked => None,
        Family::Vllm => match change {
            Change::QuantizeKv(_) if set.kv_fp8 => Some(None),
            Change::QuantizeKv(_) => keep("--kv-cache-dtype fp8"),
            Change::RaiseUtilization(p) if set.utilization.is_some_and(|u| u >= p) => {
                Some(None)
            }
            Change::AllocatorSettings => keep("--enforce-eager (no CUDA graphs), or PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
            Change::CpuOffload => keep("--cpu-offload-gb N"),
            Change::LargerGpu(_) => keep("or --tensor-parallel-size N over several GPUs"),
            _ => None,
        },
        Family::LlamaCpp => match change {
            Change::QuantizeWeights(_) | Change::HalfPrecision(_) => match &set.gguf_quant {
                Some(q) => {
                    let (action, to) = quant_step(q);
                    Some(Some((action, format!("a {} GGUF (llama-quantize … {}), or fewer layers on the GPU (-ngl N), or --fit on", to.to_uppercase(), to.to_uppercase()))))
                }
                None => None,
            },
            Change::QuantizeKv(_) if set.kv_quantized.as_deref() == Some("q4_0") => Some(None),
            Change::QuantizeKv(_) if set.kv_quantized.is_some() => keep("-fa on -ctk q4_0 -ctv q4_0"),
            Change::AllocatorSettings => Some(None),
            Change::LimitConcurrency(n) if n > 0 => keep(&format!("-np {n} (parallel slots share -c)")),
            Change::LimitConcurrency(_) => keep("-np 1 (parallel slots share -c)"),
            Change::UseSdpa => keep("-fa on"),
            Change::RaiseUtilization(_) => keep("--fit on (llama.cpp sizes -ngl and -c to the free memory)"),
            _ => None,
        },
        Family::Ollama => match change {
            Change::QuantizeWeights(_) | Change::HalfPrecision(_) => {
                let (action, how) = match &set.gguf_quant {
                    Some(q) => {
                        let (action, to) = quant_step(q);
                        (action, format!("ollama pull <model>:<tag>-{to} (a smaller quant tag), or fewer layers on the GPU (PARAMETER num_gpu N)"))
                    }
                    None => (None, "a smaller quant tag (ollama pull <model>:<tag>-q4_K_M), or fewer layers on the GPU (PARAMETER num_gpu N)".to_string()),
                };
                Some(Some((action, how)))
            }
            Change::ReduceContext(n) | Change::TruncatePrompt(n) => keep(&if n > 0 { format!("PARAMETER num_ctx {n} in the Modelfile (or \"options\": {{\"num_ctx\": {n}}})") } else { "a smaller num_ctx (PARAMETER num_ctx N in the Modelfile, or \"options\": {\"num_ctx\": N}); OLLAMA_CONTEXT_LENGTH sets the default".into() }),
            Change::CapNewTokens(_) => keep("\"options\": {\"num_predict\": N}"),
            Change::LimitConcurrency(_) => keep("OLLAMA_NUM_PARALLEL=1 (each parallel slot gets num_ctx of KV cache), OLLAMA_MAX_LOADED_MODELS=1"),
            Change::QuantizeKv(_) => keep("OLLAMA_FLASH_ATTENTION=1 OLLAMA_KV_CACHE_TYPE=q8_0 (or q4_0)"),
            Change::UseSdpa => keep("OLLAMA_FLASH_ATTENTION=1"),
            Change::ChunkedPrefill(_) => keep("\"options\": {\"num_batch\": 256} (a smaller batch for the prompt)"),
            Change::CpuOffload => keep("PARAMETER num_gpu N with N below the layer count (the rest runs on the CPU)"),
            Change::AllocatorSettings | Change::RaiseUtilization(_) => Some(None),
            Change::MoreGpus(_) | Change::LargerGpu(_) => keep("ollama spreads a model over every GPU it sees (CUDA_VISIBLE_DEVICES); OLLAMA_SCHED_SPREAD=1"),
            _ => None,
        },
        Family::Sglang => match change {
            Change::RaiseUtilization(p) => keep(&format!("--mem-fraction-static 0.{p:02}")),
            Change::ReduceContext(n) if n > 0 => keep(&format!("--context-length {n}")),
            Change::ReduceContext(_) | Change::TruncatePrompt(_) => keep("--context-length N"),
            Change::LimitConcurrency(_) => keep("--max-running-requests N"),
            Change::QuantizeKv(_) if set.kv_fp8 => Some(None),
            Change::QuantizeKv(_) => keep("--kv-cache-dtype fp8_e5m2"),
            Change::ChunkedPrefill(_) => keep("--chunked-prefill-size 2048"),
            Change::QuantizeWeights(_) => keep("--quantization fp8, or a pre-quantized (AWQ/GPTQ) checkpoint"),
            Change::MoreGpus(n) => keep(&format!("--tp {n}")),
            Change::LargerGpu(_) => keep("or --tp N over several GPUs"),
            Change::CapNewTokens(_) => keep("sampling_params={\"max_new_tokens\": N}"),
            Change::AllocatorSettings => keep("--disable-cuda-graph, or a lower --cuda-graph-max-bs"),
            _ => None,
        },
        // text-generation-launcher's flags (TGI 3.x `--help`).
        Family::Tgi => match change {
            Change::RaiseUtilization(p) => keep(&format!("--cuda-memory-fraction 0.{p:02}")),
            Change::ReduceContext(n) | Change::TruncatePrompt(n) if n > 0 => keep(&format!("--max-input-tokens {n} --max-total-tokens N (above it)")),
            Change::ReduceContext(_) | Change::TruncatePrompt(_) => keep("--max-input-tokens N --max-total-tokens M"),
            Change::CapNewTokens(_) => keep("a lower --max-total-tokens (prompt + new tokens per request), or the request's max_new_tokens"),
            Change::LimitConcurrency(_) => keep("--max-batch-size N, or a lower --max-batch-total-tokens"),
            Change::ChunkedPrefill(n) if n > 0 => keep(&format!("--max-batch-prefill-tokens {n}")),
            Change::ChunkedPrefill(_) => keep("a lower --max-batch-prefill-tokens"),
            Change::QuantizeKv(_) => keep("--kv-cache-dtype fp8_e5m2"),
            Change::QuantizeWeights(_) => keep("--quantize bitsandbytes-nf4 (or awq / gptq / fp8 with such a checkpoint)"),
            Change::MoreGpus(n) => keep(&format!("--num-shard {n}")),
            Change::LargerGpu(_) => keep("or --num-shard N over several GPUs"),
            _ => None,
        },
        // trtllm-serve's flags and the LLM API's KvCacheConfig.
        Family::TensorrtLlm => match change {
            Change::RaiseUtilization(p) => keep(&format!("--kv_cache_free_gpu_memory_fraction 0.{p:02} (KvCacheConfig.free_gpu_memory_fraction)")),
            Change::ReduceContext(_) | Change::TruncatePrompt(_) => keep("--max_seq_len N"),
            Change::LimitConcurrency(_) => keep("--max_batch_size N"),
            Change::ChunkedPrefill(n) if n > 0 => keep(&format!("--max_num_tokens {n} with chunked prefill (enable_chunked_prefill)")),
            Change::ChunkedPrefill(_) => keep("a lower --max_num_tokens with chunked prefill (enable_chunked_prefill)"),
            Change::QuantizeKv(_) => keep("an fp8 KV cache (KvCacheConfig(dtype=\"fp8\"))"),
            Change::QuantizeWeights(_) => keep("an FP8 or INT4-AWQ checkpoint (ModelOpt: quantize.py --qformat fp8 / int4_awq)"),
            Change::MoreGpus(n) => keep(&format!("--tp_size {n}")),
            Change::LargerGpu(_) => keep("or --tp_size N over several GPUs"),
            // Its runtime buffers come from what the KV cache's share of the free memory leaves.
            Change::AllocatorSettings => Some(Some((
                Some("leave the runtime's buffers more room beside the KV cache".into()),
                "a lower --kv_cache_free_gpu_memory_fraction, e.g. 0.8 (the KV cache takes 0.9 of the free memory by default; activations and runtime buffers get the rest)".into(),
            ))),
            _ => None,
        },
        // lmdeploy serve api_server / TurbomindEngineConfig.
        Family::Lmdeploy => match change {
            Change::RaiseUtilization(p) => keep(&format!("--cache-max-entry-count 0.{p:02} (the share of free memory the KV cache takes)")),
            Change::ReduceContext(n) if n > 0 => keep(&format!("--session-len {n}")),
            Change::ReduceContext(_) | Change::TruncatePrompt(_) => keep("--session-len N"),
            Change::LimitConcurrency(_) => keep("--max-batch-size N"),
            Change::ChunkedPrefill(n) if n > 0 => keep(&format!("--max-prefill-token-num {n}")),
            Change::ChunkedPrefill(_) => keep("a lower --max-prefill-token-num"),
            Change::QuantizeKv(_) => keep("--quant-policy 8 (int8 KV cache; 4 for int4)"),
            Change::QuantizeWeights(_) => keep("an AWQ model (lmdeploy lite auto_awq) served with --model-format awq"),
            Change::MoreGpus(n) => keep(&format!("--tp {n}")),
            Change::LargerGpu(_) => keep("or --tp N over several GPUs"),
            Change::AllocatorSettings => Some(Some((
                Some("leave the engine's buffers more room beside the KV cache".into()),
                "a lower --cache-max-entry-count, e.g. 0.5 (the KV cache takes 0.8 of the free memory by default; the rest is for activations)".into(),
            ))),
            _ => None,
        },
        Family::Tensorflow => match change {
            Change::AllocatorSettings => keep("TF_FORCE_GPU_ALLOW_GROWTH=true (or tf.config.experimental.set_memory_growth), and TF_GPU_ALLOCATOR=cuda_malloc_async against fragmentation"),
            Change::RaiseUtilization(_) => keep("a memory_limit of your own: tf.config.set_logical_device_configuration(gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=MB)])"),
            Change::HalfPrecision(_) => keep("tf.keras.mixed_precision.set_global_policy(\"mixed_float16\")"),
            Change::LimitConcurrency(_) => keep("a smaller batch_size"),
            Change::FreeOtherProcesses => keep("another TensorFlow process holds the card from its start: TF_FORCE_GPU_ALLOW_GROWTH=true in it, or CUDA_VISIBLE_DEVICES to keep them apart"),
            Change::UseSdpa | Change::QuantizeKv(_) => Some(None),
            _ => None,
        },
        Family::Jax => match change {
            Change::AllocatorSettings => keep("XLA_PYTHON_CLIENT_PREALLOCATE=false (or XLA_PYTHON_CLIENT_ALLOCATOR=platform: no pool, no fragmentation, slower)"),
            Change::RaiseUtilization(p) => keep(&format!("XLA_PYTHON_CLIENT_MEM_FRACTION=.{p:02} (the default preallocates .75)")),
            Change::FreeOtherProcesses => keep("another JAX process preallocated 75 % of the card: XLA_PYTHON_CLIENT_PREALLOCATE=false in it"),
            Change::LimitConcurrency(_) => keep("a smaller batch"),
            Change::UseSdpa | Change::QuantizeKv(_) => Some(None),
            _ => None,
        },
        Family::Mlx => match change {
            Change::RaiseUtilization(_) | Change::LargerGpu(_) => keep("sudo sysctl iogpu.wired_limit_mb=N (more of the unified memory for the GPU)"),
            Change::QuantizeWeights(_) | Change::HalfPrecision(_) => keep("a 4-bit MLX model (mlx_lm.convert -q --q-bits 4)"),
            Change::QuantizeKv(_) => keep("mlx_lm.generate --kv-bits 8 (or 4)"),
            Change::ReduceContext(_) | Change::TruncatePrompt(_) => keep("--max-kv-size N (a rotating KV cache)"),
            Change::AllocatorSettings | Change::UseSdpa => Some(None),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::WeightDtype;
    use crate::estimate::Engine;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(String::from).collect()
    }

    #[test]
    fn settings_in_force_are_read_from_the_log() {
        let f = in_force(&lines(
            "print_info: file type   = Q4_K - Medium\nllama_kv_cache: type_k = 'q8_0'",
        ));
        assert_eq!(f.gguf_quant.as_deref(), Some("q4_k_m"));
        assert_eq!(f.kv_quantized.as_deref(), Some("q8_0"));
        let f = in_force(&lines("INFO Initializing an LLM engine with config: kv_cache_dtype=fp8, gpu_memory_utilization=0.95,"));
        assert!(f.kv_fp8);
        assert_eq!(f.utilization, Some(95));
        let f = in_force(&lines("loading model /models/llama-3-8b.Q5_K_M.gguf"));
        assert_eq!(f.gguf_quant.as_deref(), Some("q5_k_m"));
    }

    #[test]
    fn a_remedy_in_force_is_dropped_and_the_rest_speak_the_engine() {
        let q4: WeightDtype = "q4_k_m".parse().unwrap_or(WeightDtype::Int8);
        let mut rs = vec![
            Remedy::advice(Change::QuantizeWeights(q4), Engine::LlamaCpp, None),
            Remedy::advice(
                Change::QuantizeKv(crate::dtype::KvDtype::Q4_0),
                Engine::Vllm,
                None,
            ),
        ];
        let set = InForce {
            gguf_quant: Some("q4_k_m".into()),
            ..Default::default()
        };
        speak(&mut rs, Family::LlamaCpp, &set);
        assert!(rs[0].how.contains("Q3_K_M"), "{}", rs[0].how);
        let mut rs = vec![Remedy::advice(
            Change::QuantizeKv(crate::dtype::KvDtype::Q4_0),
            Engine::Vllm,
            None,
        )];
        speak(
            &mut rs,
            Family::Vllm,
            &InForce {
                kv_fp8: true,
                ..Default::default()
            },
        );
        assert!(rs.is_empty());
        let mut rs = vec![Remedy::advice(
            Change::QuantizeWeights(q4),
            Engine::Transformers,
            None,
        )];
        speak(&mut rs, Family::Ollama, &InForce::default());
        assert!(rs[0].how.contains("ollama pull"), "{}", rs[0].how);
    }

    /// The first lines of real logs (tests/fixtures/logs): the engine that printed them.
    #[test]
    fn each_engine_is_told_in_its_own_knobs() {
        let tf = lines("2020-03-13 01:30:28.309411: I tensorflow/stream_executor/cuda/cuda_driver.cc:801] failed to allocate 4.00G (4294967296 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory");
        // The CUDA driver's message is read first; the lines are TensorFlow's.
        assert_eq!(family(Some(Source::Candle), &tf), Family::Tensorflow);
        assert_eq!(family(Some(Source::Tgi), &[]), Family::Tgi);
        assert_eq!(family(Some(Source::TensorrtLlm), &[]), Family::TensorrtLlm);
        assert_eq!(family(Some(Source::Lmdeploy), &[]), Family::Lmdeploy);
        // A driver message first, the engine's own lines around it.
        let trt = lines("[TensorRT-LLM][ERROR] tensorrt_llm::common::TllmException: [TensorRT-LLM][ERROR] CUDA runtime error in cudaMalloc");
        assert_eq!(family(Some(Source::Cuda), &trt), Family::TensorrtLlm);
        let lmd = lines("2024-05-01 12:00:00,000 - lmdeploy - INFO - turbomind.py:200 - ...");
        assert_eq!(family(Some(Source::Cuda), &lmd), Family::Lmdeploy);
        let jax = lines(
            "  File \"/usr/lib/python3/site-packages/jax/_src/interpreters/pxla.py\", line 1, in f",
        );
        assert_eq!(family(Some(Source::Xla), &jax), Family::Jax);
        assert_eq!(family(Some(Source::Xla), &tf), Family::Tensorflow);
        // PyTorch's own message keeps --engine's words.
        assert_eq!(family(Some(Source::Pytorch), &tf), Family::Asked);

        let advice = |c| Remedy::advice(c, Engine::Transformers, None);
        let told = |family, c| {
            let mut rs = vec![advice(c)];
            speak(&mut rs, family, &InForce::default());
            rs.first().map(|r| r.how.clone()).unwrap_or_default()
        };
        assert!(told(Family::Tensorflow, Change::AllocatorSettings)
            .contains("TF_FORCE_GPU_ALLOW_GROWTH"));
        assert!(told(Family::Jax, Change::AllocatorSettings)
            .contains("XLA_PYTHON_CLIENT_PREALLOCATE=false"));
        assert!(
            told(Family::Tgi, Change::RaiseUtilization(95)).contains("--cuda-memory-fraction 0.95")
        );
        assert!(told(Family::TensorrtLlm, Change::LimitConcurrency(4)).contains("--max_batch_size"));
        assert!(told(
            Family::Lmdeploy,
            Change::QuantizeKv(crate::dtype::KvDtype::Q8_0)
        )
        .contains("--quant-policy 8"));
        // Nothing in PyTorch's words reaches an engine with its own allocator.
        let trt = told(Family::TensorrtLlm, Change::AllocatorSettings);
        assert!(
            trt.contains("--kv_cache_free_gpu_memory_fraction") && !trt.contains("PYTORCH"),
            "{trt}"
        );
    }
}
