//! Reading OOM messages out of a log: what each engine prints when memory runs out, with the
//! numbers it gives, each tied to its line.

use std::sync::OnceLock;

use regex::Regex;
use serde::Serialize;

/// Who printed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Pytorch,
    Vllm,
    LlamaCpp,
    Candle,
    Tgi,
    TensorrtLlm,
    Cuda,
    Kernel,
    Kubernetes,
}

/// Which llama.cpp buffer failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LlamaBuffer {
    Model,
    KvCache,
    Compute,
    Unknown,
}

/// The numbers of PyTorch's OOM message (current and pre-2.1 formats).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TorchOom {
    pub requested: Option<u64>,
    pub gpu: Option<u32>,
    pub total: Option<u64>,
    pub free: Option<u64>,
    /// Every `Process P has M memory in use` (this process among them).
    pub processes: Vec<(u32, u64)>,
    pub this_process: Option<u64>,
    pub allowed: Option<u64>,
    pub allocated_by_pytorch: Option<u64>,
    pub private_pools: Option<u64>,
    pub reserved_unallocated: Option<u64>,
    /// Old format: `reserved in total by PyTorch`.
    pub reserved_total: Option<u64>,
}

impl TorchOom {
    /// Memory other processes hold on the card.
    /// PyTorch lists processes on the card, this one among them or not (seen both ways); when
    /// its own figure is not in the list, every listed process is another.
    pub fn others(&self) -> u64 {
        let all: u64 = self.processes.iter().map(|p| p.1).sum();
        match self.this_process {
            Some(me) if self.processes.iter().any(|p| p.1 == me) => all - me,
            Some(_) => all,
            None => 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// PyTorch's `CUDA out of memory. Tried to allocate …`.
    TorchOom(TorchOom),
    /// vLLM: the max model length does not fit the KV cache left after weights and activations.
    VllmKvCapacity {
        max_seq_len: Option<u64>,
        kv_tokens: Option<u64>,
        needed: Option<u64>,
        available: Option<u64>,
        estimated_max_len: Option<u64>,
    },
    /// vLLM: nothing at all is left for KV blocks.
    VllmNoCacheBlocks,
    /// vLLM: other processes hold the card, so `gpu_memory_utilization` cannot be met at start-up.
    VllmStartupFree {
        free: Option<u64>,
        total: Option<u64>,
        utilization: Option<f64>,
    },
    /// vLLM: warming up the sampler with `max_num_seqs` dummy requests ran out.
    VllmSamplerWarmup { seqs: Option<u64> },
    /// llama.cpp: a CUDA buffer could not be allocated.
    LlamaCppBuffer {
        buffer: LlamaBuffer,
        bytes: Option<u64>,
    },
    /// candle / mistral.rs: the driver's bare out-of-memory error.
    CandleDriverOom,
    /// TGI: not enough memory for the prefill token budget at warm-up.
    TgiPrefill { tokens: Option<u64> },
    /// TensorRT-LLM's allocator failed.
    TensorrtOom { bytes: Option<u64> },
    /// OOMs in disguise: cuBLAS could not allocate its workspace / handle.
    CublasAllocFailed,
    /// cuDNN's attention graph failed to execute (seen near the memory limit instead of an OOM).
    CudnnFailure,
    /// A kernel-level `CUDA error: out of memory` (context creation, a launch).
    CudaErrorOom,
    /// Host RAM: the Linux OOM killer.
    HostOomKiller {
        process: Option<String>,
        rss: Option<u64>,
    },
    /// Host RAM: a container limit (Kubernetes `OOMKilled`).
    ContainerOomKilled,
    /// Exit code 137 (SIGKILL, usually the OOM killer).
    Exit137,
    /// PyTorch could not allocate host memory.
    HostAllocFailed { bytes: Option<u64> },
}

impl Event {
    pub fn source(&self) -> Source {
        match self {
            Event::TorchOom(_) => Source::Pytorch,
            Event::VllmKvCapacity { .. }
            | Event::VllmNoCacheBlocks
            | Event::VllmStartupFree { .. }
            | Event::VllmSamplerWarmup { .. } => Source::Vllm,
            Event::LlamaCppBuffer { .. } => Source::LlamaCpp,
            Event::CandleDriverOom => Source::Candle,
            Event::TgiPrefill { .. } => Source::Tgi,
            Event::TensorrtOom { .. } => Source::TensorrtLlm,
            Event::CublasAllocFailed | Event::CudnnFailure | Event::CudaErrorOom => Source::Cuda,
            Event::HostOomKiller { .. } | Event::Exit137 => Source::Kernel,
            Event::ContainerOomKilled => Source::Kubernetes,
            Event::HostAllocFailed { .. } => Source::Pytorch,
        }
    }
}

/// One event, where it was read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// 1-based line number in the cleaned log.
    pub line: usize,
    pub source: Source,
    pub event: Event,
    /// The line itself (cut to 300 characters).
    pub quote: String,
}

/// What the surrounding log says about where and how it ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Context {
    /// Lines that show the model loading (from_pretrained, load_state_dict, quantize_4bit…).
    pub load_lines: Vec<usize>,
    /// Lines that show generation (generate, _sample, attention, MLP…).
    pub generation_lines: Vec<usize>,
    /// Lines in eager attention's score computation.
    pub eager_attention_lines: Vec<usize>,
    /// Lines in the MLP or the logits (prefill activations).
    pub activation_lines: Vec<usize>,
    /// Lines in the KV-cache update.
    pub cache_lines: Vec<usize>,
    /// `Exception in thread …` lines: a worker died.
    pub thread_exceptions: Vec<usize>,
    /// The seeds' check line `batch= B seq= L`, last seen values with their line.
    pub batch_seq: Vec<(usize, u64, u64)>,
}

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| {
        Regex::new(pattern).unwrap_or_else(|e| unreachable!("static regex {pattern}: {e}"))
    })
}

const SIZE: &str = r"([\d.,]+)\s?(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|K|M|G)";

/// `2.00 GiB` → bytes.
pub fn size(num: &str, unit: &str) -> Option<u64> {
    let v: f64 = num.replace(',', "").parse().ok()?;
    let m = match unit {
        "bytes" | "B" => 1.0,
        "KiB" | "K" => 1024.0,
        "MiB" | "M" => 1024.0 * 1024.0,
        "GiB" | "G" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0f64.powi(4),
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => return None,
    };
    let b = v * m;
    (b.is_finite() && (0.0..1e19).contains(&b)).then_some(b as u64)
}

fn cap_size(c: &regex::Captures, i: usize) -> Option<u64> {
    size(c.get(i)?.as_str(), c.get(i + 1)?.as_str())
}

fn cap_u64(c: &regex::Captures, i: usize) -> Option<u64> {
    c.get(i)?.as_str().replace(',', "").parse().ok()
}

fn quote(s: &str) -> String {
    let t = s.trim();
    match t.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_string(),
    }
}

/// Read every event and the context markers from cleaned lines.
pub fn scan(lines: &[String]) -> (Vec<Finding>, Context) {
    static TORCH: OnceLock<Regex> = OnceLock::new();
    static ALLOC: OnceLock<Regex> = OnceLock::new();
    static TOTAL_NEW: OnceLock<Regex> = OnceLock::new();
    static TOTAL_OLD: OnceLock<Regex> = OnceLock::new();
    static PROCESS: OnceLock<Regex> = OnceLock::new();
    static THIS: OnceLock<Regex> = OnceLock::new();
    static ALLOWED: OnceLock<Regex> = OnceLock::new();
    static BY_TORCH: OnceLock<Regex> = OnceLock::new();
    static POOLS: OnceLock<Regex> = OnceLock::new();
    static UNALLOC: OnceLock<Regex> = OnceLock::new();
    static VLLM_LEN: OnceLock<Regex> = OnceLock::new();
    static VLLM_V1: OnceLock<Regex> = OnceLock::new();
    static VLLM_EST: OnceLock<Regex> = OnceLock::new();
    static VLLM_FREE: OnceLock<Regex> = OnceLock::new();
    static VLLM_SAMPLER: OnceLock<Regex> = OnceLock::new();
    static LLAMA_ALLOC: OnceLock<Regex> = OnceLock::new();
    static TGI: OnceLock<Regex> = OnceLock::new();
    static TRT: OnceLock<Regex> = OnceLock::new();
    static KILLER: OnceLock<Regex> = OnceLock::new();
    static CPU_ALLOC: OnceLock<Regex> = OnceLock::new();
    static BATCH_SEQ: OnceLock<Regex> = OnceLock::new();

    let torch = re(&TORCH, r"(?i)CUDA out of memory|OutOfMemoryError");
    let alloc = re(&ALLOC, &format!(r"Tried to allocate {SIZE}"));
    let total_new = re(
        &TOTAL_NEW,
        &format!(r"GPU (\d+) has a total capacity of {SIZE} of which {SIZE} is free"),
    );
    let total_old = re(
        &TOTAL_OLD,
        &format!(
            r"\(GPU (\d+); {SIZE} total capacity; {SIZE} already allocated; {SIZE} free;(?: {SIZE} allowed;)? {SIZE} reserved in total by PyTorch\)"
        ),
    );
    let process = re(
        &PROCESS,
        &format!(r"Process (\d+) has {SIZE} memory in use"),
    );
    let this = re(&THIS, &format!(r"this process has {SIZE} memory in use"));
    let allowed = re(&ALLOWED, &format!(r"{SIZE} allowed;"));
    let by_torch = re(
        &BY_TORCH,
        &format!(r"Of the allocated memory {SIZE} is allocated by PyTorch"),
    );
    let pools = re(&POOLS, &format!(r"with {SIZE} allocated in private pools"));
    let unalloc = re(
        &UNALLOC,
        &format!(r"{SIZE} is reserved by PyTorch but unallocated"),
    );
    let vllm_len = re(
        &VLLM_LEN,
        r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((\d+)\)",
    );
    let vllm_v1 = re(
        &VLLM_V1,
        &format!(
            r"max seq len \((\d+)\), \({SIZE} KV cache is needed, which is larger than the available KV cache memory \({SIZE}\)"
        ),
    );
    let vllm_est = re(&VLLM_EST, r"estimated maximum model length is (\d+)");
    let vllm_free = re(
        &VLLM_FREE,
        r"Free memory on device \(([\d.]+)/([\d.]+) GiB\) on startup is less than desired GPU memory utilization \(([\d.]+)",
    );
    let vllm_sampler = re(
        &VLLM_SAMPLER,
        r"warming up sampler with (\d+) dummy requests",
    );
    let llama_alloc = re(
        &LLAMA_ALLOC,
        r"(?:allocating ([\d.]+) MiB on device \d+: cudaMalloc failed|failed to allocate CUDA\d+ buffer of size (\d+))",
    );
    let tgi = re(&TGI, r"Not enough memory to handle (\d+) prefill tokens");
    let trt = re(
        &TRT,
        r"\[TensorRT-LLM\].*(?:out of memory|could not be allocated)",
    );
    let killer = re(
        &KILLER,
        r"Out of memory: Kill(?:ed)? process \d+ \(([^)]+)\)(?:.*?anon-rss:(\d+)kB)?",
    );
    let cpu_alloc = re(
        &CPU_ALLOC,
        r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory): you tried to allocate (\d+) bytes",
    );
    let batch_seq = re(&BATCH_SEQ, r"batch=\s*(\d+)\s+seq=\s*(\d+)");

    let mut findings = Vec::new();
    let mut ctx = Context::default();
    let mut last_torch_line: Option<usize> = None;
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1;
        context_markers(line, n, &mut ctx);
        if let Some(c) = batch_seq.captures(line) {
            if let (Some(b), Some(s)) = (cap_u64(&c, 1), cap_u64(&c, 2)) {
                ctx.batch_seq.push((n, b, s));
            }
        }

        if torch.is_match(line)
            && !line.contains("warming up sampler")
            && (alloc.is_match(line) || line.contains("CUDA out of memory"))
        {
            // The message can be wrapped when pasted: read it with the next lines.
            let window: String = lines[i..lines.len().min(i + 4)].join(" ");
            let mut t = TorchOom {
                requested: alloc.captures(&window).and_then(|c| cap_size(&c, 1)),
                ..Default::default()
            };
            if let Some(c) = total_new.captures(&window) {
                t.gpu = cap_u64(&c, 1).map(|g| g as u32);
                t.total = cap_size(&c, 2);
                t.free = cap_size(&c, 4);
            } else if let Some(c) = total_old.captures(&window) {
                t.gpu = cap_u64(&c, 1).map(|g| g as u32);
                t.total = cap_size(&c, 2);
                t.allocated_by_pytorch = cap_size(&c, 4);
                t.free = cap_size(&c, 6);
                t.allowed = cap_size(&c, 8);
                t.reserved_total = cap_size(&c, 10);
                if let (Some(r), Some(a)) = (t.reserved_total, t.allocated_by_pytorch) {
                    t.reserved_unallocated = Some(r.saturating_sub(a));
                }
            }
            t.processes = process
                .captures_iter(&window)
                .filter_map(|c| Some((cap_u64(&c, 1)? as u32, cap_size(&c, 2)?)))
                .collect();
            t.this_process = this.captures(&window).and_then(|c| cap_size(&c, 1));
            if t.allowed.is_none() {
                t.allowed = allowed.captures(&window).and_then(|c| cap_size(&c, 1));
            }
            if t.allocated_by_pytorch.is_none() {
                t.allocated_by_pytorch = by_torch.captures(&window).and_then(|c| cap_size(&c, 1));
            }
            t.private_pools = pools.captures(&window).and_then(|c| cap_size(&c, 1));
            if t.reserved_unallocated.is_none() {
                t.reserved_unallocated = unalloc.captures(&window).and_then(|c| cap_size(&c, 1));
            }
            // The exception line and its repetition in a traceback summary are one event.
            let repeat = last_torch_line.is_some_and(|l| n - l <= 3)
                || findings.last().is_some_and(|f: &Finding| matches!(&f.event, Event::TorchOom(prev) if *prev == t && n - f.line <= 40));
            if !repeat {
                add(&mut findings, n, line, Event::TorchOom(t));
            }
            last_torch_line = Some(n);
            continue;
        }
        if let Some(c) = vllm_v1.captures(line) {
            add(
                &mut findings,
                n,
                line,
                Event::VllmKvCapacity {
                    max_seq_len: cap_u64(&c, 1),
                    kv_tokens: None,
                    needed: cap_size(&c, 2),
                    available: cap_size(&c, 4),
                    estimated_max_len: vllm_est.captures(line).and_then(|c| cap_u64(&c, 1)),
                },
            );
        } else if let Some(c) = vllm_len.captures(line) {
            add(
                &mut findings,
                n,
                line,
                Event::VllmKvCapacity {
                    max_seq_len: cap_u64(&c, 1),
                    kv_tokens: cap_u64(&c, 2),
                    needed: None,
                    available: None,
                    estimated_max_len: None,
                },
            );
        } else if line.contains("No available memory for the cache blocks") {
            add(&mut findings, n, line, Event::VllmNoCacheBlocks);
        } else if let Some(c) = vllm_free.captures(line) {
            let gib = |i: usize| {
                c.get(i)
                    .and_then(|m| m.as_str().parse::<f64>().ok())
                    .map(|v| (v * (1u64 << 30) as f64) as u64)
            };
            add(
                &mut findings,
                n,
                line,
                Event::VllmStartupFree {
                    free: gib(1),
                    total: gib(2),
                    utilization: c.get(3).and_then(|m| m.as_str().parse().ok()),
                },
            );
        } else if let Some(c) = vllm_sampler.captures(line) {
            add(
                &mut findings,
                n,
                line,
                Event::VllmSamplerWarmup {
                    seqs: cap_u64(&c, 1),
                },
            );
        } else if let Some(c) = llama_alloc.captures(line) {
            let bytes = c
                .get(1)
                .and_then(|m| size(m.as_str(), "MiB"))
                .or_else(|| cap_u64(&c, 2));
            let buffer = llama_buffer(lines, i);
            add(
                &mut findings,
                n,
                line,
                Event::LlamaCppBuffer { buffer, bytes },
            );
        } else if line.contains("failed to allocate buffer for kv cache")
            || line.contains("failed to allocate compute")
        {
            let buffer = if line.contains("kv cache") {
                LlamaBuffer::KvCache
            } else {
                LlamaBuffer::Compute
            };
            // One failure, several lines: attach to an earlier buffer line of the same failure.
            match findings.last_mut() {
                Some(Finding {
                    event: Event::LlamaCppBuffer { buffer: b, .. },
                    line: l,
                    ..
                }) if n - *l <= 6 => *b = buffer,
                _ => add(
                    &mut findings,
                    n,
                    line,
                    Event::LlamaCppBuffer {
                        buffer,
                        bytes: None,
                    },
                ),
            }
        } else if line.contains("unable to allocate CUDA") && line.contains("buffer") {
            match findings.last_mut() {
                Some(Finding {
                    event: Event::LlamaCppBuffer { .. },
                    line: l,
                    ..
                }) if n - *l <= 6 => {}
                _ => add(
                    &mut findings,
                    n,
                    line,
                    Event::LlamaCppBuffer {
                        buffer: LlamaBuffer::Model,
                        bytes: None,
                    },
                ),
            }
        } else if line.contains("CUDA_ERROR_OUT_OF_MEMORY") {
            add(&mut findings, n, line, Event::CandleDriverOom);
        } else if let Some(c) = tgi.captures(line) {
            add(
                &mut findings,
                n,
                line,
                Event::TgiPrefill {
                    tokens: cap_u64(&c, 1),
                },
            );
        } else if trt.is_match(line) {
            add(&mut findings, n, line, Event::TensorrtOom { bytes: None });
        } else if line.contains("CUBLAS_STATUS_ALLOC_FAILED") {
            add(&mut findings, n, line, Event::CublasAllocFailed);
        } else if line.contains("is_good()")
            && (line.contains("mha_graph") || line.contains("cudnn") || line.contains("CUDNN"))
        {
            add(&mut findings, n, line, Event::CudnnFailure);
        } else if line.contains("CUDA error: out of memory")
            || line.contains("cudaErrorMemoryAllocation")
        {
            add(&mut findings, n, line, Event::CudaErrorOom);
        } else if let Some(c) = killer.captures(line) {
            add(
                &mut findings,
                n,
                line,
                Event::HostOomKiller {
                    process: c.get(1).map(|m| m.as_str().to_string()),
                    rss: cap_u64(&c, 2).map(|k| k * 1024),
                },
            );
        } else if line.contains("OOMKilled") {
            if !findings
                .iter()
                .any(|f| f.event == Event::ContainerOomKilled)
            {
                add(&mut findings, n, line, Event::ContainerOomKilled);
            }
        } else if let Some(c) = cpu_alloc.captures(line) {
            add(
                &mut findings,
                n,
                line,
                Event::HostAllocFailed {
                    bytes: cap_u64(&c, 1),
                },
            );
        } else if is_exit_137(line) {
            add(&mut findings, n, line, Event::Exit137);
        }
    }
    (findings, ctx)
}

fn add(findings: &mut Vec<Finding>, n: usize, line: &str, event: Event) {
    findings.push(Finding {
        line: n,
        source: event.source(),
        event,
        quote: quote(line),
    });
}

fn is_exit_137(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    (l.contains("exit code 137")
        || l.contains("exited with code 137")
        || l.contains("exit status 137")
        || l.contains("code=137"))
        || l.trim() == "killed"
}

/// Which buffer a llama.cpp allocation failure was for, from the lines around it.
fn llama_buffer(lines: &[String], i: usize) -> LlamaBuffer {
    let near = lines[i.saturating_sub(3)..lines.len().min(i + 4)].join(" ");
    if near.contains("kv cache") || near.contains("kv_cache") || near.contains("KV buffer") {
        LlamaBuffer::KvCache
    } else if near.contains("compute") || near.contains("gallocr") {
        LlamaBuffer::Compute
    } else if near.contains("llama_model_load")
        || near.contains("load_tensors")
        || near.contains("model buffer")
        || near.contains("alloc_tensor_range")
    {
        LlamaBuffer::Model
    } else {
        LlamaBuffer::Unknown
    }
}

fn context_markers(line: &str, n: usize, ctx: &mut Context) {
    const LOAD: &[&str] = &[
        "from_pretrained",
        "_load_pretrained_model",
        "caching_allocator_warmup",
        "load_state_dict",
        "quantize_4bit",
        "_load_state_dict_into",
        "load_checkpoint_and_dispatch",
        "set_module_tensor_to_device",
        "dispatch_model",
        "load_tensors",
        "llama_model_load",
        "model.to(",
        ".cuda()",
    ];
    const GENERATION: &[&str] = &[
        "in generate",
        ".generate(",
        "_sample",
        "greedy_search",
        "in forward",
        "sdpa_attention_forward",
        "eager_attention_forward",
        "prefill",
        "decode",
    ];
    const EAGER: &[&str] = &[
        "eager_attention_forward",
        "attn_weights = torch.matmul",
        "attn_weights = nn.functional.softmax",
        "repeat_kv",
    ];
    const ACTIVATION: &[&str] = &[
        "act_fn(self.gate_proj",
        "self.down_proj(",
        "in lm_head",
        "logits = self.lm_head",
        "logits.float()",
        "scaled_dot_product_attention",
    ];
    const CACHE: &[&str] = &[
        "cache_utils.py",
        "past_key_values.update",
        "DynamicCache",
        "self.keys = torch.cat",
        "key_cache",
    ];
    let has = |keys: &[&str]| keys.iter().any(|k| line.contains(k));
    if has(LOAD) {
        ctx.load_lines.push(n);
    }
    if has(GENERATION) {
        ctx.generation_lines.push(n);
    }
    if has(EAGER) {
        ctx.eager_attention_lines.push(n);
    }
    if has(ACTIVATION) {
        ctx.activation_lines.push(n);
    }
    if has(CACHE) {
        ctx.cache_lines.push(n);
    }
    if line.contains("Exception in thread") {
        ctx.thread_exceptions.push(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    #[test]
    fn reads_every_number_of_the_current_pytorch_message() {
        let log = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.12 GiB is free. Process 4121 has 9.80 GiB memory in use. Process 5000 has 12.51 GiB memory in use. Including non-PyTorch memory, this process has 12.51 GiB memory in use. Of the allocated memory 10.01 GiB is allocated by PyTorch, and 2.05 GiB is reserved by PyTorch but unallocated.";
        let (f, _) = scan(&lines(log));
        let Event::TorchOom(t) = &f[0].event else {
            panic!("{f:?}")
        };
        let g = |x: f64| (x * (1u64 << 30) as f64) as u64;
        assert_eq!(t.requested, Some(g(2.0)));
        assert_eq!(t.total, Some(g(23.65)));
        assert_eq!(t.free, Some(g(1.12)));
        assert_eq!(t.processes.len(), 2);
        assert_eq!(t.others(), g(9.80));
        assert_eq!(t.reserved_unallocated, Some(g(2.05)));
        assert_eq!(t.allocated_by_pytorch, Some(g(10.01)));
    }

    #[test]
    fn a_process_list_without_this_process_is_all_others() {
        // transformers 5.17 on the H200 with a second process holding 10.6 GiB (docs/gpu-runs.md).
        let log = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.07 GiB. GPU 0 has a total capacity of 139.80 GiB of which 104.60 GiB is free. Process 412 has 10.60 GiB memory in use. Including non-PyTorch memory, this process has 24.59 GiB memory in use. 24.00 GiB allowed; Of the allocated memory 21.63 GiB is allocated by PyTorch, and 2.29 GiB is reserved by PyTorch but unallocated.";
        let (f, _) = scan(&lines(log));
        let Event::TorchOom(t) = &f[0].event else {
            panic!()
        };
        assert_eq!(t.others(), (10.60 * (1u64 << 30) as f64) as u64);
        assert_eq!(t.allowed, Some(24 << 30));
    }

    #[test]
    fn reads_the_old_pytorch_message() {
        let log = "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.56 GiB already allocated; 3.19 MiB free; 14.67 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb";
        let (f, _) = scan(&lines(log));
        let Event::TorchOom(t) = &f[0].event else {
            panic!()
        };
        assert_eq!(t.requested, Some(20 << 20));
        assert!(t.reserved_unallocated.unwrap() > 100 << 20);
    }

    #[test]
    fn sizes() {
        assert_eq!(size("1,024", "MiB"), Some(1 << 30));
        assert_eq!(size("x", "MiB"), None);
        assert_eq!(size("1e30", "TB"), None);
    }
}
