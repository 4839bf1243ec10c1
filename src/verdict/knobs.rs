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
}

/// The engine from the reader that matched, else from the server's own lines.
pub fn family(source: Option<Source>, lines: &[String]) -> Family {
    let by_lines = || {
        let any = |w: &str| lines.iter().any(|l| l.contains(w));
        if any("ollama") || any("OLLAMA_") || any("source=server.go") || any("source=sched.go") {
            Family::Ollama
        } else if any("sglang") {
            Family::Sglang
        } else {
            Family::Asked
        }
    };
    match source {
        Some(Source::Ollama) => Family::Ollama,
        Some(Source::Sglang) => Family::Sglang,
        Some(Source::Mlx) => Family::Mlx,
        Some(Source::Vllm) => Family::Vllm,
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
}
