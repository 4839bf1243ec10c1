//! The engines' own out-of-memory messages: vLLM, llama.cpp (and ollama, llamafile, koboldcpp
//! on it), TGI, TensorRT-LLM, SGLang, exllamav2, candle / mistral.rs, Apple Metal and MLX, ROCm,
//! other accelerators, and the host side (the OOM killer, Ray, ollama, Kubernetes, exit 137).

use std::sync::OnceLock;

use regex::Regex;

use super::parse::{cap_size, cap_u64, re, size, Event, Finding, LlamaBuffer, Scan, SIZE};

type Reader = fn(&[String], usize, &mut Scan) -> bool;

/// Offer line `i` to every reader in turn; true when one took it.
pub fn read(lines: &[String], i: usize, st: &mut Scan) -> bool {
    const READERS: &[Reader] = &[
        vllm_kv,
        vllm_other,
        llama_alloc,
        llama_followup,
        tgi_trt,
        sglang_exllama,
        apple,
        accelerators,
        cuda_errors,
        host,
        kubernetes,
    ];
    READERS.iter().any(|r| r(lines, i, st))
}

/// One event per log for messages an engine repeats (a raise line and its exception line).
fn once(st: &mut Scan, n: usize, line: &str, event: Event) {
    let kind = std::mem::discriminant(&event);
    if !st
        .findings
        .iter()
        .any(|f| std::mem::discriminant(&f.event) == kind)
    {
        st.add(n, line, event);
    }
}

/// vLLM's KV-capacity errors, v0 (tokens) and v1 (bytes; the line is often wrapped mid-word).
fn vllm_kv(lines: &[String], i: usize, st: &mut Scan) -> bool {
    static V0: OnceLock<Regex> = OnceLock::new();
    static V1: OnceLock<Regex> = OnceLock::new();
    static NEEDED: OnceLock<Regex> = OnceLock::new();
    static AVAIL: OnceLock<Regex> = OnceLock::new();
    static EST: OnceLock<Regex> = OnceLock::new();
    let line = &lines[i];
    let v0 = re(
        &V0,
        r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((\d+)\)",
    );
    if let Some(c) = v0.captures(line) {
        let event = Event::VllmKvCapacity {
            max_seq_len: cap_u64(&c, 1),
            kv_tokens: cap_u64(&c, 2),
            needed: None,
            available: None,
            estimated_max_len: None,
        };
        st.add(i + 1, line, event);
        return true;
    }
    let v1 = re(
        &V1,
        r"To serve at least one request with the models?'s? max seq len \((\d+)\)",
    );
    let Some(c) = v1.captures(line) else {
        return false;
    };
    // Rejoin a wrapped message without the separator, so `KV cach` + `e is needed` reads again.
    let window: String = lines[i..lines.len().min(i + 3)].concat();
    let needed = re(&NEEDED, &format!(r"\({SIZE} KV cache is needed"));
    let avail = re(&AVAIL, &format!(r"available KV cache memory \({SIZE}\)"));
    let est = re(&EST, r"estimated maximum model length is (\d+)");
    let event = Event::VllmKvCapacity {
        max_seq_len: cap_u64(&c, 1),
        kv_tokens: None,
        needed: needed.captures(&window).and_then(|c| cap_size(&c, 1)),
        available: avail.captures(&window).and_then(|c| cap_size(&c, 1)),
        estimated_max_len: est.captures(&window).and_then(|c| cap_u64(&c, 1)),
    };
    st.add(i + 1, line, event);
    true
}

/// vLLM: no room for cache blocks, too little free at start-up, the sampler's warm-up.
fn vllm_other(lines: &[String], i: usize, st: &mut Scan) -> bool {
    static FREE: OnceLock<Regex> = OnceLock::new();
    static SAMPLER: OnceLock<Regex> = OnceLock::new();
    let line = &lines[i];
    if line.contains("No available memory for the cache blocks") {
        st.add(i + 1, line, Event::VllmNoCacheBlocks);
        return true;
    }
    let free = re(
        &FREE,
        r"Free memory on device \(([\d.]+)/([\d.]+) GiB\) on startup is less than desired GPU memory utilization \(([\d.]+)",
    );
    if let Some(c) = free.captures(line) {
        let gib = |i: usize| c.get(i).and_then(|m| size(m.as_str(), "GiB"));
        let event = Event::VllmStartupFree {
            free: gib(1),
            total: gib(2),
            utilization: c.get(3).and_then(|m| m.as_str().parse().ok()),
        };
        st.add(i + 1, line, event);
        return true;
    }
    let sampler = re(&SAMPLER, r"warming up sampler with (\d+) dummy requests");
    if let Some(c) = sampler.captures(line) {
        let seqs = cap_u64(&c, 1);
        st.add(i + 1, line, Event::VllmSamplerWarmup { seqs });
        return true;
    }
    false
}

/// llama.cpp's failed buffer: `allocating X MiB on device N: cudaMalloc failed` and the
/// allocator's `failed to allocate CUDA0 buffer of size B` just after it are one failure.
fn llama_alloc(lines: &[String], i: usize, st: &mut Scan) -> bool {
    static ALLOC: OnceLock<Regex> = OnceLock::new();
    let alloc = re(
        &ALLOC,
        r"(?:allocating ([\d.]+) MiB on device \d+: cudaMalloc failed|failed to allocate (?:CUDA|ROCm|Vulkan|Metal|SYCL)\d+ buffer of size (\d+))",
    );
    let line = &lines[i];
    let Some(c) = alloc.captures(line) else {
        return false;
    };
    let n = i + 1;
    let bytes = c
        .get(1)
        .and_then(|m| size(m.as_str(), "MiB"))
        .or_else(|| cap_u64(&c, 2));
    let buffer = llama_buffer(lines, i);
    if let Some(Finding {
        event: Event::LlamaCppBuffer { bytes: b, .. },
        line: l,
        ..
    }) = st.findings.last_mut()
    {
        if n - *l <= 2 {
            *b = b.or(bytes);
            return true;
        }
    }
    st.add(n, line, Event::LlamaCppBuffer { buffer, bytes });
    true
}

/// llama.cpp's lines that name the failed buffer after the allocation line.
fn llama_followup(lines: &[String], i: usize, st: &mut Scan) -> bool {
    let line = &lines[i];
    let named = if line.contains("failed to allocate buffer for kv cache") {
        Some(LlamaBuffer::KvCache)
    } else if line.contains("failed to allocate compute") {
        Some(LlamaBuffer::Compute)
    } else {
        None
    };
    let n = i + 1;
    let last = st.findings.last_mut().and_then(|f| match f {
        Finding {
            event: Event::LlamaCppBuffer { buffer, .. },
            line: l,
            ..
        } if n - *l <= 6 => Some(buffer),
        _ => None,
    });
    match (named, last) {
        (Some(b), Some(buffer)) => *buffer = b,
        (Some(b), None) => st.add(
            n,
            line,
            Event::LlamaCppBuffer {
                buffer: b,
                bytes: None,
            },
        ),
        (None, Some(_)) if line.contains("unable to allocate") && line.contains("buffer") => {}
        (None, None) if line.contains("unable to allocate CUDA") && line.contains("buffer") => {
            let event = Event::LlamaCppBuffer {
                buffer: LlamaBuffer::Model,
                bytes: None,
            };
            st.add(n, line, event);
        }
        _ => return false,
    }
    true
}

/// Which buffer a llama.cpp allocation failure was for, from the lines around it: the graph
/// allocator (gallocr) only ever allocates compute buffers, so it wins over a KV line above.
fn llama_buffer(lines: &[String], i: usize) -> LlamaBuffer {
    let near = lines[i.saturating_sub(3)..lines.len().min(i + 4)].join(" ");
    let after = lines[i..lines.len().min(i + 3)].join(" ");
    if after.contains("gallocr") || after.contains("compute") {
        LlamaBuffer::Compute
    } else if near.contains("kv cache")
        || near.contains("kv_cache")
        || near.contains("KV buffer")
        || near.contains("KV cache")
    {
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

/// TGI's prefill warm-up; TensorRT-LLM's component table and its allocator.
fn tgi_trt(lines: &[String], i: usize, st: &mut Scan) -> bool {
    static TGI: OnceLock<Regex> = OnceLock::new();
    static COMPONENT: OnceLock<Regex> = OnceLock::new();
    static TRT: OnceLock<Regex> = OnceLock::new();
    let line = &lines[i];
    let tgi = re(&TGI, r"Not enough memory to handle (\d+) prefill tokens");
    if let Some(c) = tgi.captures(line) {
        let tokens = cap_u64(&c, 1);
        st.add(i + 1, line, Event::TgiPrefill { tokens });
        return true;
    }
    let component = re(&COMPONENT, r"component could not be created: (.+?)\s*$");
    if let Some(c) = component.captures(line) {
        let name = c.get(1).map_or("", |m| m.as_str()).to_string();
        let (total, free) = trt_table(lines, i);
        let event = Event::TensorrtComponent {
            component: name,
            total,
            free,
        };
        st.add(i + 1, line, event);
        return true;
    }
    let trt = re(
        &TRT,
        r"\[TensorRT-LLM\].*(?:out of memory|could not be allocated)",
    );
    if trt.is_match(line) {
        st.add(i + 1, line, Event::TensorrtOom { bytes: None });
        return true;
    }
    false
}

/// `Total GPU memory (GiB): T` and `Free GPU memory before component creation attempt (GiB): F`.
fn trt_table(lines: &[String], i: usize) -> (Option<u64>, Option<u64>) {
    static FIG: OnceLock<Regex> = OnceLock::new();
    let fig = re(&FIG, r"^(Total|Free) GPU memory[^:]*\(GiB\):\s*([\d.]+)");
    let (mut total, mut free) = (None, None);
    for l in &lines[i..lines.len().min(i + 4)] {
        if let Some(c) = fig.captures(l.trim()) {
            let v = c.get(2).and_then(|m| size(m.as_str(), "GiB"));
            match c.get(1).map(|m| m.as_str()) {
                Some("Total") => total = v,
                _ => free = v,
            }
        }
    }
    (total, free)
}

/// SGLang's KV pool left without room, its request slots; exllamav2's autosplit.
fn sglang_exllama(lines: &[String], i: usize, st: &mut Scan) -> bool {
    static NEGATIVE: OnceLock<Regex> = OnceLock::new();
    let line = &lines[i];
    let negative = re(
        &NEGATIVE,
        r"(?i)(?:max_total_num_tokens|kv cache is allocated\. #tokens|#tokens|available_kv|kv_size)\s*[=:]\s*-\d",
    );
    if line.contains("leave no GPU memory for the KV cache")
        || line.contains("Not enough memory. Please try to increase --mem-fraction-static")
        || negative.is_match(line)
    {
        once(st, i + 1, line, Event::SglangNoKvRoom);
        return true;
    }
    if line.contains("alloc_req_slots runs out of memory") {
        once(st, i + 1, line, Event::SglangReqSlots);
        return true;
    }
    if line.contains("Insufficient VRAM for model and cache") {
        once(st, i + 1, line, Event::ExllamaInsufficient);
        return true;
    }
    false
}

/// Apple: Metal's failed command buffer, MLX's buffer over Metal's maximum.
fn apple(lines: &[String], i: usize, st: &mut Scan) -> bool {
    static MLX: OnceLock<Regex> = OnceLock::new();
    let line = &lines[i];
    let mlx = re(
        &MLX,
        r"Attempting to allocate (\d+) bytes which is greater than the maximum allowed buffer size of (\d+) bytes",
    );
    if let Some(c) = mlx.captures(line) {
        let event = Event::MlxBufferTooLarge {
            requested: cap_u64(&c, 1),
            max_buffer: cap_u64(&c, 2),
        };
        st.add(i + 1, line, event);
        return true;
    }
    if line.contains("kIOGPUCommandBufferCallbackErrorOutOfMemory")
        || (line.contains("command buffer") && line.contains("failed with status 5"))
        || (line.contains("[METAL]") && line.contains("Insufficient Memory"))
    {
        once(st, i + 1, line, Event::MetalOom);
        return true;
    }
    false
}

/// Other accelerators with their own figures (tt-xla's DRAM banks), ROCm's driver error, and
/// `Allocation on device N would exceed allowed memory`.
fn accelerators(lines: &[String], i: usize, st: &mut Scan) -> bool {
    static DRAM: OnceLock<Regex> = OnceLock::new();
    static EXCEED: OnceLock<Regex> = OnceLock::new();
    let line = &lines[i];
    let dram = re(
        &DRAM,
        r"Not enough space to allocate (\d+) B \w+ buffer across (\d+) banks, where each bank needs to store \d+ B, but bank size is (\d+) B \(allocated: (\d+) B, free: (\d+) B",
    );
    if let Some(c) = dram.captures(line) {
        let banks = cap_u64(&c, 2).unwrap_or(1);
        let per = |k: usize| cap_u64(&c, k).map(|v| v.saturating_mul(banks));
        let event = Event::DeviceBufferOom {
            requested: cap_u64(&c, 1),
            total: per(3),
            allocated: per(4),
            free: per(5),
        };
        st.add(i + 1, line, event);
        return true;
    }
    if line.contains("hipErrorOutOfMemory") {
        once(st, i + 1, line, Event::HipErrorOom);
        return true;
    }
    let exceed = re(
        &EXCEED,
        r"Allocation on device (\d+) would exceed allowed memory",
    );
    if let Some(c) = exceed.captures(line) {
        let gpu = cap_u64(&c, 1).map(|g| g as u32);
        once(st, i + 1, line, Event::AllocationExceeds { gpu });
        return true;
    }
    false
}

/// CUDA-level failures: the driver's bare OOM (candle, mistral.rs), cuBLAS, cuDNN, `CUDA error`.
fn cuda_errors(lines: &[String], i: usize, st: &mut Scan) -> bool {
    let line = &lines[i];
    let event = if line.contains("CUDA_ERROR_OUT_OF_MEMORY") {
        Event::CandleDriverOom
    } else if line.contains("CUBLAS_STATUS_ALLOC_FAILED") {
        Event::CublasAllocFailed
    } else if line.contains("is_good()")
        && (line.contains("mha_graph") || line.contains("cudnn") || line.contains("CUDNN"))
    {
        Event::CudnnFailure
    } else if line.contains("CUDA error: out of memory")
        || line.contains("CUDA driver error: out of memory")
        || line.contains("cudaErrorMemoryAllocation")
    {
        Event::CudaErrorOom
    } else {
        return false;
    };
    st.add(i + 1, line, event);
    true
}

/// Host RAM: the kernel's OOM killer, Ray's memory monitor, ollama's system-memory check,
/// PyTorch's CPU allocator.
fn host(lines: &[String], i: usize, st: &mut Scan) -> bool {
    static KILLER: OnceLock<Regex> = OnceLock::new();
    static OLLAMA: OnceLock<Regex> = OnceLock::new();
    static CPU: OnceLock<Regex> = OnceLock::new();
    let line = &lines[i];
    let killer = re(
        &KILLER,
        r"Out of memory: Kill(?:ed)? process \d+ \(([^)]+)\)(?:.*?anon-rss:(\d+)kB)?",
    );
    if let Some(c) = killer.captures(line) {
        let event = Event::HostOomKiller {
            process: c.get(1).map(|m| m.as_str().to_string()),
            rss: cap_u64(&c, 2).map(|k| k.saturating_mul(1024)),
        };
        st.add(i + 1, line, event);
        return true;
    }
    if line.contains("killed due to memory pressure (OOM)")
        || line.contains("by OOM killer")
        || line.contains("due to the node running low on memory")
    {
        once(st, i + 1, line, Event::RayOomKill);
        return true;
    }
    let ollama = re(
        &OLLAMA,
        &format!(r"requires more system memory \({SIZE}\) than is available \({SIZE}\)"),
    );
    if let Some(c) = ollama.captures(line) {
        let event = Event::HostMemoryShort {
            needed: cap_size(&c, 1),
            available: cap_size(&c, 3),
        };
        st.add(i + 1, line, event);
        return true;
    }
    let cpu = re(
        &CPU,
        r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory): you tried to allocate (\d+) bytes",
    );
    if let Some(c) = cpu.captures(line) {
        let bytes = cap_u64(&c, 1);
        st.add(i + 1, line, Event::HostAllocFailed { bytes });
        return true;
    }
    false
}

/// Kubernetes' container state (`Reason: OOMKilled`; exit code 137 under another reason is a
/// SIGKILL whose cause the log does not say) and a bare exit 137 / `Killed`.
fn kubernetes(lines: &[String], i: usize, st: &mut Scan) -> bool {
    let line = &lines[i];
    if line.contains("OOMKilled") {
        once(st, i + 1, line, Event::ContainerOomKilled);
        return true;
    }
    if !is_exit_137(line) {
        return false;
    }
    let reason = lines[i.saturating_sub(4)..i].iter().rev().find_map(|l| {
        l.trim()
            .strip_prefix("Reason:")
            .map(|r| r.trim().to_string())
    });
    match reason {
        // The container's OOMKilled line above is the event; its exit code adds nothing.
        Some(r) if r.contains("OOMKilled") => {}
        Some(r) => st.add(i + 1, line, Event::ContainerKilled { reason: Some(r) }),
        _ => st.add(i + 1, line, Event::Exit137),
    }
    true
}

/// Exit code 137 in its spellings, or the shell's `Killed` (also right after a progress bar).
fn is_exit_137(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    let t = l.trim();
    l.contains("exit code 137")
        || l.contains("exit code:    137")
        || l.contains("exited with code 137")
        || l.contains("exit status 137")
        || l.contains("code=137")
        || t == "killed"
        || (t.ends_with("]killed") && t.contains("it/s"))
        || t.strip_prefix("exit code:")
            .is_some_and(|c| c.trim() == "137")
}

#[cfg(test)]
mod tests {
    use super::super::parse::scan;
    use super::*;

    fn events(s: &str) -> Vec<Event> {
        let lines: Vec<String> = s.lines().map(str::to_string).collect();
        scan(&lines).0.into_iter().map(|f| f.event).collect()
    }

    #[test]
    fn llama_cpp_compute_after_a_kv_line_is_compute() {
        // llamacpp-11476 (tune): the compute buffer of a KV-cache update.
        let e = events("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9866.00 MiB on device 1: cudaMalloc failed: out of memory\nggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 10345253120\nllama_kv_cache_update_impl: failed to allocate compute buffers");
        assert_eq!(e.len(), 1);
        assert!(matches!(
            e[0],
            Event::LlamaCppBuffer {
                buffer: LlamaBuffer::Compute,
                ..
            }
        ));
    }

    #[test]
    fn kubernetes_exit_137_without_oomkilled_is_not_host_memory() {
        let e = events(
            "    Last State:     Terminated\n      Reason:       Error\n      Exit Code:    137",
        );
        assert_eq!(
            e,
            vec![Event::ContainerKilled {
                reason: Some("Error".into())
            }]
        );
    }

    #[test]
    fn wrapped_vllm_v1_message() {
        let e = events("ValueError: To serve at least one request with the model's max seq len (100000), (4.26 GiB KV cach\ne is needed, which is larger than the available KV cache memory (4.25 GiB). Based on the avai");
        let Event::VllmKvCapacity {
            needed, available, ..
        } = &e[0]
        else {
            panic!("{e:?}")
        };
        assert!(needed.is_some() && available.is_some());
    }
}
