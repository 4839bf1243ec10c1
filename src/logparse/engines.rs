//! The engines' own out-of-memory messages: vLLM, llama.cpp (and ollama, llamafile, koboldcpp
//! on it), TGI, TensorRT-LLM, SGLang, exllamav2, candle / mistral.rs, Apple Metal and MLX, ROCm,
//! other accelerators, and the host side (the OOM killer, Ray, ollama, Kubernetes, exit 137).

use std::sync::{LazyLock, OnceLock};

use aho_corasick::{AhoCorasick, AhoCorasickKind};
use regex::Regex;

use super::parse::{
    cap_size, cap_u64, re, re_built, size, Event, Finding, LlamaBuffer, Scan, TorchOom, SIZE,
};

type Reader = fn(&[String], usize, &mut Scan) -> bool;

/// Which of [`READERS`] may take a line: bit `k` for `READERS[k]`.
pub(crate) type ReaderMask = u16;

/// Every reader's bit.
const ALL_READERS: ReaderMask = (1 << READERS.len()) - 1;

/// Offer line `i` to the readers whose words it has, in turn; true when one took it. A line
/// without any reader's words is no engine's message and skips them all (most lines of a long
/// log); a line with one reader's words (an `OutOfMemoryError` line has `MemoryError`, the host
/// reader's) runs only that reader.
pub fn read(lines: &[String], i: usize, st: &mut Scan) -> bool {
    match st.memo.get(lines, i, |m| &mut m.engine_words, readers_for) {
        Some(0) | None => false,
        Some(mask) => read_masked(lines, i, st, mask),
    }
}

/// The readers of `mask` on line `i`, in [`READERS`]' order.
fn read_masked(lines: &[String], i: usize, st: &mut Scan, mask: ReaderMask) -> bool {
    READERS
        .iter()
        .enumerate()
        .any(|(k, (r, _))| mask & (1 << k) != 0 && r(lines, i, st))
}

/// Every reader on line `i`, without the words' gate: what the gate must never change.
#[cfg(test)]
fn read_ungated(lines: &[String], i: usize, st: &mut Scan) -> bool {
    read_masked(lines, i, st, ALL_READERS)
}

/// The readers, in the order a line is offered to them (the first to take it wins; bit `k` of a
/// line's [`ReaderMask`] stands for `READERS[k]`), each with its words: a reader takes no line,
/// and changes nothing, without one of its words on the line (each literal it asks `contains`
/// of, and a literal every match of each of its regexes holds, each alternative's own). Matched
/// without regard to ASCII case, which covers the case-insensitive patterns (`is_exit_137`,
/// SGLang's negative pool) and only lets a few more lines through to the readers themselves. A
/// word may serve several readers.
const READERS: &[(Reader, &[&str])] = &[
    (vllm_kv, &["max seq len"]),
    (
        vllm_other,
        &[
            "No available memory for the cache blocks",
            "Available KV cache memory: -",
            "Free memory on device",
            "Available memory on node",
            "warming up sampler with",
        ],
    ),
    (
        llama_alloc,
        &[
            "MiB on device",
            "failed to allocate",
            "larger than buffer maximum",
            "Device memory allocation of size",
        ],
    ),
    (
        llama_followup,
        &["failed to allocate", "unable to allocate"],
    ),
    (
        tgi_trt,
        &[
            "Not enough memory to handle",
            "Out of available cache blocks",
            "component could not be created",
            "[TensorRT-LLM]",
            "tllmBuffers",
            "tensorrt_llm/",
        ],
    ),
    (turbomind, &["[TM][ERROR]", "turbomind"]),
    (
        sglang_exllama,
        &[
            "max_total_num_tokens",
            "#tokens",
            "available_kv",
            "kv_size",
            "profiled value",
            "leave no GPU memory for the KV cache",
            "Not enough memory. Please try to increase --mem-fraction-static",
            "No space left for only one request",
            "Decode out of memory happened",
            "alloc_req_slots runs out of memory",
            "Some modules are dispatched on the CPU or the disk",
            "Insufficient VRAM",
        ],
    ),
    // At [`APPLE`]; and its message wrapped after "which is", in `readers_for`.
    (
        apple,
        &[
            "Attempting to allocate",
            "kIOGPUCommandBufferCallbackErrorOutOfMemory",
            "failed with status 5",
            "Insufficient Memory",
            "buffer is nil",
        ],
    ),
    (
        accelerators,
        &[
            "Not enough space to allocate",
            "hipErrorOutOfMemory",
            "Attempting to allocate",
            "Allocation on device",
        ],
    ),
    (
        cuda_errors,
        &[
            "CUDA_ERROR_OUT_OF_MEMORY",
            "CUBLAS_STATUS_ALLOC_FAILED",
            "is_good()",
            "CUDA error: out of memory",
            "CUDA driver error: out of memory",
            "cudaErrorMemoryAllocation",
            "CUDA failed with error out of memory",
            "cuda runtime error (2) : out of memory",
        ],
    ),
    // With reported_oom_kill, oom_killer_summary, lm_studio_ram and python_memory_error.
    (
        host,
        &[
            ": Kill",
            " invoked oom-killer:",
            "oom-kill:constraint=",
            "earlyoom",
            "System OOM encountered",
            "systemd-oomd",
            "The node was low on resource: memory",
            "paging file is too small",
            "WinError 1455",
            "os error 1455",
            "killed due to memory pressure (OOM)",
            "OOM killer",
            "exceeds the memory usage threshold",
            "due to the node running low on memory",
            "\"ram_",
            "requires more system memory",
            "DefaultCPUAllocator",
            "MemoryError",
        ],
    ),
    // With is_exit_137.
    (
        kubernetes,
        &[
            "OOMKilled",
            "slurmstepd",
            "insufficient shared memory (shm)",
            "is too large for the available",
            "137",
            "killed",
            "sigkill",
            "-9",
        ],
    ),
    (batch_finder, &["No executable batch size found"]),
];

/// `apple`'s bit: it also reads MLX's message wrapped after "which is" on the next line.
const APPLE: ReaderMask = 1 << 7;

/// The readers that may take a line: those with one of their words ([`READERS`]) on it (one pass
/// of one automaton over every reader's words, built once), every reader for a line the words
/// cannot vouch for — one with non-ASCII text (a case-insensitive regex also matches the Kelvin
/// sign for `k`) — and `apple` for MLX's message wrapped after "which is", which it reads
/// joined with the next line.
fn readers_for(line: &str) -> ReaderMask {
    static WORDS: LazyLock<Option<(AhoCorasick, Vec<ReaderMask>)>> = LazyLock::new(|| {
        let mut words: Vec<&str> = Vec::new();
        let mut masks: Vec<ReaderMask> = Vec::new();
        for (k, (_, list)) in READERS.iter().enumerate() {
            for w in *list {
                match words.iter().position(|x| x == w) {
                    Some(at) => masks[at] |= 1 << k,
                    None => {
                        words.push(*w);
                        masks.push(1 << k);
                    }
                }
            }
        }
        // A DFA: caseless words leave no prefilter, so the automaton itself walks every line.
        let automaton = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .kind(Some(AhoCorasickKind::DFA))
            .build(&words)
            .ok()?;
        Some((automaton, masks))
    });
    let Some((words, masks)) = WORDS.as_ref() else {
        // The automaton always builds from these words; without it every reader runs.
        return ALL_READERS;
    };
    if !line.is_ascii() {
        return ALL_READERS;
    }
    let mut mask = words.find_overlapping_iter(line).fold(0, |m, hit| {
        m | masks
            .get(hit.pattern().as_usize())
            .copied()
            .unwrap_or(ALL_READERS)
    });
    if line.trim_end().ends_with("which is") {
        mask |= APPLE;
    }
    mask
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
    let needed = re_built(&NEEDED, || format!(r"\({SIZE} KV cache is needed"));
    let avail = re_built(&AVAIL, || format!(r"available KV cache memory \({SIZE}\)"));
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
    // vLLM v1 prints the KV cache's share before it raises "No available memory for the cache
    // blocks"; a negative share is that failure, in a paste cut before the raise (vllm-omni-469:
    // `Available KV cache memory: -2.77 GiB`, then `EngineCore failed to start.` and the frames).
    if line.contains("No available memory for the cache blocks")
        || line.contains("Available KV cache memory: -")
    {
        st.add(i + 1, line, Event::VllmNoCacheBlocks);
        return true;
    }
    let free = re(
        &FREE,
        r"Free memory on device(?: [\w:]+)? \(([\d.]+)/([\d.]+) GiB\) on startup is less than desired GPU memory utilization \(([\d.]+)",
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
    static CPU_KV: OnceLock<Regex> = OnceLock::new();
    // vllm-45086: `Available memory on node 0 (149.11/692.65 GiB) on kv cache allocation is
    // less than requested memory for kv (206.54/207.8 GiB)`.
    let cpu_kv = re(
        &CPU_KV,
        r"Available memory on node \d+ \(([\d.]+)/[\d.]+ GiB\) on kv cache allocation is less than requested memory for kv \(([\d.]+)/[\d.]+ GiB\)",
    );
    if let Some(c) = cpu_kv.captures(line) {
        let gib = |i: usize| c.get(i).and_then(|m| size(m.as_str(), "GiB"));
        let event = Event::VllmCpuKv {
            available: gib(1),
            requested: gib(2),
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

/// llama.cpp's failed buffer in each backend's wording: `allocating X MiB on device N:
/// cudaMalloc failed` (the backend logs that line only when the allocation failed, so a log cut
/// off after `on device N:` is still the failure), the allocator's `failed to allocate CUDA0 buffer of size B` just after it
/// (one failure), Metal's `buffer 'data' size B is larger than buffer maximum of M` and
/// `ggml_backend_metal_buffer_from_ptr: error: failed to allocate buffer, size = X MiB`, Vulkan's
/// `Device memory allocation of size B failed`.
fn llama_alloc(lines: &[String], i: usize, st: &mut Scan) -> bool {
    static ALLOC: OnceLock<Regex> = OnceLock::new();
    let alloc = re(
        &ALLOC,
        r"(?x)
        allocating\ (?P<mib>[\d.]+)\ MiB\ on\ device\ \d+:\ \w*(?:cudaMalloc|hipMalloc|malloc)\w*\ failed
        | ggml_backend_\w+_buffer_type_alloc_buffer:\ allocating\ (?P<mib3>[\d.]+)\ MiB\ on\ device\ \d+
        | failed\ to\ allocate\ (?:CUDA|ROCm|Vulkan|Metal|SYCL|CANN|MUSA|CPU)\d*\ buffer\ of\ size\ (?P<b>\d+)
        | ggml_backend_cpu_buffer_type_alloc_buffer:\ failed\ to\ allocate\ buffer\ of\ size\ (?P<b4>\d+)
        | buffer\ '(?P<name>[^']*)'\ size\ (?P<b2>\d+)\ is\ larger\ than\ buffer\ maximum
        | ggml_backend_(?:metal|cuda|vk|vulkan|sycl|hip|rocm)\w*:\ (?:error:\ )?failed\ to\ allocate\ buffer,\ size\ =\ *(?P<mib2>[\d.]+)\ MiB
        | ggml_vulkan:\ Device\ memory\ allocation\ of\ size\ (?P<b3>\d+)\ failed",
    );
    let line = &lines[i];
    let Some(c) = alloc.captures(line) else {
        return false;
    };
    let n = i + 1;
    let mib = |k: &str| c.name(k).and_then(|m| size(m.as_str(), "MiB"));
    let count = |k: &str| c.name(k).and_then(|m| m.as_str().parse::<u64>().ok());
    let bytes = mib("mib")
        .or_else(|| mib("mib2"))
        .or_else(|| mib("mib3"))
        .or_else(|| count("b"))
        .or_else(|| count("b2"))
        .or_else(|| count("b3"))
        .or_else(|| count("b4"));
    let buffer = c
        .name("name")
        .and_then(|m| named_buffer(m.as_str()))
        .unwrap_or_else(|| llama_buffer(lines, i));
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
        (None, None) if unable_to_allocate_a_device_buffer(line) => {
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

/// `llama_model_load: error loading model: unable to allocate CUDA0 buffer` in each backend.
fn unable_to_allocate_a_device_buffer(line: &str) -> bool {
    line.contains("buffer")
        && line.split("unable to allocate ").skip(1).any(|after| {
            ["CUDA", "ROCm", "Metal", "Vulkan", "SYCL", "backend"]
                .iter()
                .any(|b| after.starts_with(b))
        })
}

/// ggml-metal's buffer names: `data` holds the weights, `kv` the KV cache, `alloc` / `eval` /
/// `scr0` the compute graph.
fn named_buffer(name: &str) -> Option<LlamaBuffer> {
    let n = name.trim();
    if n == "data" || n.starts_with("model") {
        Some(LlamaBuffer::Model)
    } else if n.starts_with("kv") {
        Some(LlamaBuffer::KvCache)
    } else if ["alloc", "eval", "scr", "compute"]
        .iter()
        .any(|k| n.starts_with(k))
    {
        Some(LlamaBuffer::Compute)
    } else {
        None
    }
}

/// Which buffer a llama.cpp allocation failure was for, from the lines around it: the graph
/// allocator (gallocr) only ever allocates compute buffers, so it wins over a KV line above.
fn llama_buffer(lines: &[String], i: usize) -> LlamaBuffer {
    let near = lines[i.saturating_sub(3)..lines.len().min(i + 4)].join(" ");
    let after = lines[i..lines.len().min(i + 3)].join(" ");
    // "compute buffer(s)" / "compute pp buffers", not a device's "compute capability 8.0"
    // (llamacpp-tabby-1498 lists four A100s above a model buffer).
    let compute = |s: &str| s.replace("compute capability", "").contains("compute");
    if after.contains("gallocr") || compute(&after) {
        LlamaBuffer::Compute
    } else if near.contains("kv cache")
        || near.contains("kv_cache")
        || near.contains("KV buffer")
        || near.contains("KV cache")
    {
        LlamaBuffer::KvCache
    } else if compute(&near) || near.contains("gallocr") {
        LlamaBuffer::Compute
    } else if near.contains("error loading model") || near.contains("failed to load model") {
        // The model's load failed (talk-llama-fast-34: `llama_new_context_with_model: model
        // cannot be NULL` follows it, naming the context only because the model is missing).
        LlamaBuffer::Model
    } else if near.contains("llama_new_context_with_model")
        || near.contains("llama_init_from_model")
        || near.contains("llama_context:")
    {
        // The context is being made: its first buffer is the KV cache (compute buffers say so
        // in the lines after, checked above).
        LlamaBuffer::KvCache
    } else if near.contains("llama_model_load")
        || near.contains("load_tensors")
        || near.contains("load model")
        || near.contains("loading model")
        || near.contains("model buffer")
        || near.contains("alloc_tensor_range")
    {
        LlamaBuffer::Model
    } else {
        LlamaBuffer::Unknown
    }
}

/// lmdeploy's TurboMind: `[TM][ERROR] CUDA runtime error: out of memory …/allocator.h:231`.
/// Raised from `create_model_instance` (lmdeploy-1019), it is the KV cache, which TurboMind
/// allocates then as `cache_max_entry_count` of the free memory.
fn turbomind(lines: &[String], i: usize, st: &mut Scan) -> bool {
    let line = &lines[i];
    let tm = line.contains("[TM][ERROR]") || line.contains("turbomind");
    if !(tm && line.contains("out of memory")) {
        return false;
    }
    let instance = lines[i.saturating_sub(6)..i]
        .iter()
        .any(|l| l.contains("create_model_instance"));
    once(st, i + 1, line, Event::TurbomindOom { instance });
    true
}

/// TGI's prefill warm-up; TensorRT-LLM's component table and its allocator.
fn tgi_trt(lines: &[String], i: usize, st: &mut Scan) -> bool {
    static TGI: OnceLock<Regex> = OnceLock::new();
    static BLOCKS: OnceLock<Regex> = OnceLock::new();
    static COMPONENT: OnceLock<Regex> = OnceLock::new();
    static TRT: OnceLock<Regex> = OnceLock::new();
    static TOTAL: OnceLock<Regex> = OnceLock::new();
    let line = &lines[i];
    // TGI's warm-up when the token budget of its KV cache does not fit beside the weights:
    // `Not enough memory to handle 16000 total tokens with 2 prefill tokens` (tgi-710).
    let total = re(
        &TOTAL,
        r"Not enough memory to handle (\d+) total tokens with \d+ prefill tokens",
    );
    if let Some(c) = total.captures(line) {
        let tokens = cap_u64(&c, 1);
        st.add(i + 1, line, Event::TgiTotalTokens { tokens });
        return true;
    }
    let tgi = re(&TGI, r"Not enough memory to handle (\d+) prefill tokens");
    if let Some(c) = tgi.captures(line) {
        let tokens = cap_u64(&c, 1);
        st.add(i + 1, line, Event::TgiPrefill { tokens });
        return true;
    }
    let blocks = re(
        &BLOCKS,
        r"Out of available cache blocks: asked (\d+), only (\d+) free blocks",
    );
    if let Some(c) = blocks.captures(line) {
        let event = Event::TgiCacheBlocks {
            asked: cap_u64(&c, 1),
            free: cap_u64(&c, 2),
        };
        once(st, i + 1, line, event);
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
        r"(?:\[TensorRT-LLM\]|tllmBuffers\.h|tensorrt_llm/).*(?:out of memory|could not be allocated)|cudaMallocAsync.*out of memory.*tllmBuffers",
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
        r"(?i)(?:max_total_num_tokens|kv cache is allocated\. #tokens|#tokens|available_kv|kv_size)\s*[=:]\s*-\d|profiled value\s+-\d",
    );
    if line.contains("leave no GPU memory for the KV cache")
        || line.contains("Not enough memory. Please try to increase --mem-fraction-static")
        || negative.is_match(line)
    {
        once(st, i + 1, line, Event::SglangNoKvRoom);
        return true;
    }
    // The scheduler's retraction finding the token pool empty (sglang-14948): running requests
    // filled the KV cache.
    if line.contains("No space left for only one request") && line.contains("kv_pool") {
        once(st, i + 1, line, Event::SglangPoolFull);
        return true;
    }
    // Its decode step running out of KV tokens and retracting requests (sglang-4184,
    // real-2026-12b): the pool is full; SGLang recomputes them later instead of failing.
    if line.contains("Decode out of memory happened") {
        once(st, i + 1, line, Event::SglangRetract);
        return true;
    }
    if line.contains("alloc_req_slots runs out of memory") {
        once(st, i + 1, line, Event::SglangReqSlots);
        return true;
    }
    // transformers / accelerate refuse a quantized model that does not fit the GPU(s).
    if line.contains("Some modules are dispatched on the CPU or the disk")
        && line.contains("enough GPU RAM")
    {
        once(st, i + 1, line, Event::WeightsDispatchedOff);
        return true;
    }
    // exllamav3 (through TabbyAPI) words it "Insufficient VRAM in split for model and cache".
    if line.contains("Insufficient VRAM for model and cache")
        || line.contains("Insufficient VRAM in split for model and cache")
    {
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
    // The message wraps after "which is" when pasted from a narrow terminal (mlx-vlm-1732).
    let joined;
    let text = if !mlx.is_match(line) && line.trim_end().ends_with("which is") {
        joined = format!(
            "{} {}",
            line.trim_end(),
            lines.get(i + 1).map_or("", |l| l.trim())
        );
        joined.as_str()
    } else {
        line.as_str()
    };
    if let Some(c) = mlx.captures(text) {
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
    if line.contains("buffer is nil") {
        if let Some(event) = metal_working_set(&lines[i.saturating_sub(400)..i]) {
            once(st, i + 1, line, event);
            return true;
        }
    }
    false
}

/// The first of ggml-metal's `allocated 'NAME' buffer, size = X MiB, ( T / W )` lines with the
/// running total T past the working set W (h2ogpt-1311: 'kv' takes 3,946 MiB to 4,458 of 4,096).
fn metal_working_set(above: &[String]) -> Option<Event> {
    static ADDED: OnceLock<Regex> = OnceLock::new();
    let added = re(
        &ADDED,
        r"allocated '([^']*)' buffer, size = *([\d.]+) MiB, \( *([\d.]+) / *([\d.]+)\)",
    );
    above.iter().find_map(|l| {
        let c = added.captures(l)?;
        let mib = |k: usize| c.get(k).and_then(|m| size(m.as_str(), "MiB"));
        let (bytes, total, working_set) = (mib(2)?, mib(3)?, mib(4)?);
        let crossed = c.get(1).and_then(|m| named_buffer(m.as_str()));
        (total > working_set && working_set > 0).then(|| Event::MetalWorkingSet {
            crossed: crossed.unwrap_or(LlamaBuffer::Unknown),
            before: total.saturating_sub(bytes),
            working_set,
        })
    })
}

/// Other accelerators with their own figures (tt-xla's DRAM banks), ROCm's driver error, and
/// `Allocation on device N would exceed allowed memory`.
fn accelerators(lines: &[String], i: usize, st: &mut Scan) -> bool {
    static DRAM: OnceLock<Regex> = OnceLock::new();
    static EXCEED: OnceLock<Regex> = OnceLock::new();
    static XLA: OnceLock<Regex> = OnceLock::new();
    let line = &lines[i];
    let dram = re(
        &DRAM,
        r"Not enough space to allocate (\d+) B \w+ buffer\s+across (\d+) banks(?:, where each bank needs to store \d+ B, but bank size is (\d+) B \(allocated: (\d+) B, free: (\d+) B)?",
    );
    // The message wraps in a pasted server log ("… DRAM buffer\nacross 8 banks, …": tt-metal-40108).
    let joined;
    let text = if line.contains("Not enough space to allocate") {
        joined = lines[i..lines.len().min(i + 3)].join(" ");
        joined.as_str()
    } else {
        line.as_str()
    };
    if let Some(c) = dram.captures(text) {
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
    let xla = re_built(&XLA, || {
        format!(
            r"Attempting to allocate {SIZE}\. That was not possible\. There are {SIZE} free\. Due to fragmentation, the largest contiguous region of free memory is {SIZE}"
        )
    });
    if let Some(c) = xla.captures(line) {
        if let (Some(requested), Some(free), Some(largest)) =
            (cap_size(&c, 1), cap_size(&c, 3), cap_size(&c, 5))
        {
            let event = Event::DeviceFragmented {
                requested,
                free,
                largest,
            };
            once(st, i + 1, line, event);
            return true;
        }
    }
    let exceed = re(
        &EXCEED,
        r"Allocation on device (\d+) would exceed allowed memory",
    );
    if let Some(c) = exceed.captures(line) {
        let gpu = cap_u64(&c, 1).map(|g| g as u32);
        let event = match allowed_memory_figures(lines, i, gpu) {
            Some(t) => Event::TorchOom(t),
            None => Event::AllocationExceeds { gpu },
        };
        once(st, i + 1, line, event);
        return true;
    }
    // ComfyUI's error box cuts the message after its first words: `Allocation on device`
    // (CogVideoXWrapper-26, under "Error occurred when executing CogVideoDecode").
    if line.trim_end().ends_with("Allocation on device") {
        once(st, i + 1, line, Event::AllocationExceeds { gpu: None });
        return true;
    }
    false
}

/// The figures PyTorch prints under `Allocation on device N would exceed allowed memory` (its
/// message when an allocation passes the device's limit, as ComfyUI shows it: comfyui-2431,
/// comfyui-3278): `Currently allocated : 21.55 GiB`, `Requested : 952.00 MiB`, `Device limit :
/// 24.00 GiB`, `Free (according to CUDA): 0 bytes`. They are PyTorch's record: live tensors,
/// the request, the card (or the fraction allowed) and what the driver had free.
pub(super) fn allowed_memory_figures(
    lines: &[String],
    i: usize,
    gpu: Option<u32>,
) -> Option<TorchOom> {
    static FIGURE: OnceLock<Regex> = OnceLock::new();
    let figure = re_built(&FIGURE, || {
        format!(
            r"^\s*(Currently allocated|Requested|Device limit|Free \(according to CUDA\))\s*:\s*{SIZE}"
        )
    });
    let mut t = TorchOom {
        gpu,
        ..TorchOom::default()
    };
    let mut any = false;
    for l in lines.iter().skip(i + 1).take(8) {
        let Some(c) = figure.captures(l) else {
            continue;
        };
        let v = cap_size(&c, 2);
        let slot = match c.get(1).map(|m| m.as_str()) {
            Some("Currently allocated") => &mut t.allocated_by_pytorch,
            Some("Requested") => &mut t.requested,
            Some("Device limit") => &mut t.total,
            _ => &mut t.free,
        };
        *slot = v;
        any |= v.is_some();
    }
    any.then_some(t)
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
        // CTranslate2 (faster-whisper, whisperX): `RuntimeError: CUDA failed with error out of
        // memory`; PyTorch before 1.0 (THC): `cuda runtime error (2) : out of memory`.
        || line.contains("CUDA failed with error out of memory")
        || line.contains("cuda runtime error (2) : out of memory")
    {
        if ggml_cuda_pool(lines, i) {
            Event::LlamaCppBuffer {
                buffer: LlamaBuffer::Pool,
                bytes: None,
            }
        } else {
            Event::CudaErrorOom
        }
    } else {
        return false;
    };
    st.add(i + 1, line, event);
    true
}

/// ggml's CUDA_CHECK names where a `CUDA error` happened on the next lines: `current device: 0,
/// in function alloc at …/ggml-cuda.cu:457` and the failing call. The CUDA memory pool
/// (`ggml_cuda_pool_*::alloc`, growing its virtual range with `cuMemCreate` / `cuMemSetAccess`)
/// holds only the temporary buffers of the graph's operations — weights and the KV cache live in
/// backend buffers, allocated with their own messages — so its failure is compute (koboldcpp-1711,
/// ollama-9567).
fn ggml_cuda_pool(lines: &[String], i: usize) -> bool {
    static WHERE: OnceLock<Regex> = OnceLock::new();
    let at = re(&WHERE, r"in function (\w+) at \S*ggml-cuda");
    let next = &lines[(i + 1).min(lines.len())..lines.len().min(i + 6)];
    let Some(function) = next
        .iter()
        .find_map(|l| at.captures(l).and_then(|c| c.get(1)))
        .map(|m| m.as_str())
    else {
        return false;
    };
    const POOL_CALLS: &[&str] = &[
        "cuMemCreate",
        "cuMemSetAccess",
        "cuMemMap",
        "cuMemAddressReserve",
    ];
    // The driver loading a kernel's module at its first launch is the graph's run too: on the
    // H200 a prompt past what the card held after llama.cpp's buffers died in
    // `ggml_cuda_kernel_can_use_pdl` / `cudaFuncGetAttributes` (tests/fixtures/logs/llamacpp-h200/).
    const KERNEL_LOAD: &[&str] = &[
        "cudaFuncGetAttributes",
        "cuModuleLoad",
        "cudaFuncSetAttribute",
    ];
    function == "alloc"
        || function.starts_with("ggml_cuda_pool")
        || next
            .iter()
            .any(|l| POOL_CALLS.iter().chain(KERNEL_LOAD).any(|c| l.contains(c)))
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
        r"(?i:out of memory): Kill(?:ed)? process \d+ \(([^)]+)\)(?:.*?anon-rss:(\d+)kB)?",
    );
    if let Some(c) = killer.captures(line) {
        let process = c.get(1).map(|m| m.as_str().to_string());
        let rss = cap_u64(&c, 2).map(|k| k.saturating_mul(1024));
        oom_killer(st, i + 1, line, process, rss);
        return true;
    }
    if let Some(task) = oom_killer_summary(line) {
        oom_killer(st, i + 1, line, task, None);
        return true;
    }
    if let Some((process, rss)) = reported_oom_kill(line) {
        oom_killer(st, i + 1, line, process, rss);
        return true;
    }
    // Windows' ERROR_COMMITMENT_LIMIT: RAM and paging file are spoken for (a DLL that cannot
    // be mapped, a safetensors file that cannot be opened).
    if line.contains("paging file is too small")
        || line.contains("WinError 1455")
        || line.contains("os error 1455")
    {
        once(st, i + 1, line, Event::PagingFileTooSmall);
        return true;
    }
    if line.contains("killed due to memory pressure (OOM)")
        || line.contains("by OOM killer")
        || (line.contains("exceeds the memory usage threshold") && line.contains("Ray killed"))
        || line.contains("due to the node running low on memory")
    {
        once(st, i + 1, line, Event::RayOomKill);
        return true;
    }
    if let Some(event) = lm_studio_ram(lines, i) {
        st.add(i + 1, line, event);
        return true;
    }
    let ollama = re_built(&OLLAMA, || {
        format!(r"requires more system memory \({SIZE}\) than is available \({SIZE}\)")
    });
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
    // systemd: `ollama.service: A process of this unit has been killed by the OOM killer.`
    // (ollama-9322): the kernel's OOM killer, named by the service manager.
    if line.contains("has been killed by the OOM killer") {
        let event = Event::HostOomKiller {
            process: None,
            rss: None,
        };
        once(st, i + 1, line, event);
        return true;
    }
    if python_memory_error(line) {
        once(st, i + 1, line, Event::HostAllocFailed { bytes: None });
        return true;
    }
    false
}

/// A kill for host memory reported by someone other than the kernel's own lines: the userspace
/// OOM killers, which act before the kernel does — earlyoom's `sending SIGTERM to process 322603
/// uid 1000 "python3.13": oom_score 1282, VmRSS 29931 MiB` (ComfyUI-15276), systemd-oomd's
/// `Killed /user.slice/….scope due to memory pressure` — and the kubelet's node event `Warning
/// SystemOOM  node/…  System OOM encountered, victim process: llama-server` (LLMKube-386).
/// Returns the process and its resident bytes where the line gives them.
fn reported_oom_kill(line: &str) -> Option<(Option<String>, Option<u64>)> {
    static EARLYOOM: OnceLock<Regex> = OnceLock::new();
    let earlyoom = re(
        &EARLYOOM,
        r#"earlyoom.*sending SIG(?:TERM|KILL) to process \d+(?: uid \d+)? "([^"]+)"(?:.*?VmRSS (\d+) MiB)?"#,
    );
    if let Some(c) = earlyoom.captures(line) {
        let process = c.get(1).map(|m| m.as_str().to_string());
        let rss = cap_u64(&c, 2).map(|m| m.saturating_mul(1 << 20));
        return Some((process, rss));
    }
    if let Some((_, rest)) = line.split_once("System OOM encountered") {
        let process = rest
            .split_once("victim process: ")
            .and_then(|(_, p)| p.split_whitespace().next())
            .map(str::to_string);
        return Some((process, None));
    }
    // The kubelet's eviction for node memory pressure (kubeflow-1261: `The node was low on
    // resource: memory.`, then `Killing container … Need to kill Pod`).
    ((line.contains("systemd-oomd") && line.contains("due to memory pressure"))
        || line.contains("The node was low on resource: memory"))
    .then_some((None, None))
}

/// Python's own `MemoryError` (the interpreter could not get host memory), raised or re-raised by
/// a DataLoader worker (`MemoryError: Caught MemoryError in DataLoader worker process 4`,
/// kohya_ss-82) — not PyTorch's `OutOfMemoryError`, whose name merely ends with it. numpy's
/// `_ArrayMemoryError` is one too: numpy's arrays live in host memory (textgen-6338: `Unable to
/// allocate 18.6 GiB for an array with shape (32768, 152064)`, a llama.cpp loader's logits
/// buffer sized by the context).
fn python_memory_error(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("MemoryError")
        || t.contains("._ArrayMemoryError: ")
        || t.contains("Caught MemoryError")
        || t.contains(" MemoryError: ")
        || t.ends_with(" MemoryError")
}

/// LM Studio's load-failure report states the host's memory as JSON: `"ram_capacity": "314.65
/// GB"` and, a line later, `"ram_unused": "316.65 KB"` (lmstudio-14). Less than 1 % of the RAM
/// unused at a failed load is the host's memory run out.
fn lm_studio_ram(lines: &[String], i: usize) -> Option<Event> {
    static FIELD: OnceLock<Regex> = OnceLock::new();
    let field = re_built(&FIELD, || {
        format!(r#""ram_(capacity|unused)"\s*:\s*"{SIZE}""#)
    });
    let c = field.captures(&lines[i])?;
    if c.get(1)?.as_str() != "unused" {
        return None;
    }
    let unused = cap_size(&c, 2)?;
    let capacity = lines[i.saturating_sub(4)..i].iter().find_map(|l| {
        let c = field.captures(l)?;
        (c.get(1)?.as_str() == "capacity")
            .then(|| cap_size(&c, 2))
            .flatten()
    })?;
    (unused.saturating_mul(100) < capacity).then_some(Event::HostMemoryShort {
        needed: None,
        available: Some(unused),
    })
}

/// The kernel's own lines around a kill, before the `Killed process` line (which a paste may
/// lack or word otherwise): `python invoked oom-killer: gfp_mask=…` and, since Linux 4.19,
/// `oom-kill:constraint=CONSTRAINT_NONE,…,task=python,pid=2953` (dmesg-moby-47418). Returns the
/// task the summary names (`None` for the `invoked` line: the invoker is not the victim).
fn oom_killer_summary(line: &str) -> Option<Option<String>> {
    if line.contains(" invoked oom-killer:") {
        return Some(None);
    }
    let rest = &line[line.find("oom-kill:constraint=")?..];
    let task = rest
        .split(',')
        .find_map(|kv| kv.trim().strip_prefix("task="))
        .map(|t| t.trim().to_string());
    Some(task)
}

/// One OOM kill is one event: the kernel's lines about it (the `invoked` line, the task table,
/// the summary, the `Killed process` line) are merged into one finding, quoted at the latest
/// of them — the kill line, when the paste has it.
fn oom_killer(st: &mut Scan, n: usize, line: &str, process: Option<String>, rss: Option<u64>) {
    let (mut process, mut rss) = (process, rss);
    if let Some(Finding {
        event: Event::HostOomKiller { process: p, rss: r },
        line: at,
        ..
    }) = st.findings.last_mut()
    {
        if n - *at <= 400 && r.is_none() {
            process = process.or(p.take());
            rss = rss.or(*r);
            st.findings.pop();
        }
    }
    st.add(n, line, Event::HostOomKiller { process, rss });
}

/// accelerate's `find_executable_batch_size` catches each out-of-memory error and halves the
/// batch: "No executable batch size found, reached zero" means batch size 1 ran out too.
fn batch_finder(lines: &[String], i: usize, st: &mut Scan) -> bool {
    let line = &lines[i];
    if !line.contains("No executable batch size found") {
        return false;
    }
    once(st, i + 1, line, Event::BatchSizeExhausted);
    true
}

/// The kernel's OOM report lists every task's memory before it kills one: `[  pid  ]   uid
/// tgid total_vm      rss … name` and a row per task (`[  16502]  1000 16502   136163 …
/// cudafe++`). A paste of only that table (dmesg-vllm-54237) is still the OOM killer at work.
/// Read only when the log has no other event.
pub fn oom_killer_tasks(lines: &[String]) -> Option<Finding> {
    let header = lines
        .iter()
        .position(|l| l.contains("total_vm") && l.contains("rss") && l.contains("oom_score_adj"));
    let rows: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| task_row(l))
        .map(|(k, _)| k)
        .collect();
    let first = match (header, rows.first()) {
        (Some(h), _) => h,
        (None, Some(&r)) if rows.len() >= 3 => r,
        _ => return None,
    };
    let mut st = Scan::default();
    let tasks = u64::try_from(rows.len()).unwrap_or(u64::MAX);
    st.add(first + 1, &lines[first], Event::OomKillerTasks { tasks });
    st.findings.pop()
}

/// One row of the OOM killer's task table: `[pid]` then uid, the thread group id (the same
/// number: the table lists thread-group leaders) and 5–8 more counts (the columns changed over
/// kernel versions), then the command name.
fn task_row(line: &str) -> bool {
    let Some((pid, rest)) = line.rfind("] ").and_then(|close| {
        let start = line[..close].rfind('[')?;
        let pid = line[start + 1..close].trim();
        (!pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
            .then(|| (pid, &line[close + 1..]))
    }) else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let Some((_name, counts)) = fields.split_last() else {
        return false;
    };
    (7..=10).contains(&counts.len())
        && counts.get(1) == Some(&pid)
        && counts.iter().all(|c| {
            c.strip_prefix('-')
                .unwrap_or(c)
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
}

/// Kubernetes' container state (`Reason: OOMKilled`; exit code 137 under another reason is a
/// SIGKILL whose cause the log does not say) and a bare exit 137 / `Killed`.
fn kubernetes(lines: &[String], i: usize, st: &mut Scan) -> bool {
    static CONTEXT: OnceLock<Regex> = OnceLock::new();
    let line = &lines[i];
    if line.contains("OOMKilled") {
        once(st, i + 1, line, Event::ContainerOomKilled);
        return true;
    }
    // Slurm's step daemon killing a job over its memory limit (slurm-coqui-stt-2238), and PyTorch's
    // data loader dying of a too small /dev/shm in a container (docker-streaming-493).
    let slurm = line.contains("slurmstepd")
        && (line.contains("exceeded memory limit")
            || line.contains("Exceeded job memory limit")
            || line.contains("oom-kill event"));
    let shm = line.contains("insufficient shared memory (shm)");
    if slurm || shm {
        once(st, i + 1, line, Event::JobMemoryLimit { shm });
        return true;
    }
    let context = re(
        &CONTEXT,
        r"context size of \d+ with (\d+) sequences? is too large for the available (?:VRAM|memory|RAM)",
    );
    if let Some(c) = context.captures(line) {
        let sequences = cap_u64(&c, 1);
        once(st, i + 1, line, Event::ContextTooLarge { sequences });
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
        // Exit 137 under another reason is a SIGKILL (a failed probe, an eviction, a manual
        // kill): no memory event, said in the `none` verdict (k8s-122256).
        Some(r) => st.ctx.not_oom.push((
            i + 1,
            format!("exit code 137 (SIGKILL) under reason \"{r}\", not OOMKilled: Kubernetes did not kill it for memory"),
        )),
        _ => st.add(i + 1, line, Event::Exit137),
    }
    true
}

/// A log that ends right after an engine allocated a buffer was cut where the engine died (the
/// error after it not pasted, or never printed): the last line's buffer is the failing stage.
/// ggml's `allocated 'data' buffer, size = 4096.00 MB` and `llm_load_tensors: CUDA0 buffer size
/// = X MiB` (llamafile-42), with Metal's working set when the log prints it.
pub fn ends_at_allocation(lines: &[String]) -> Option<Finding> {
    static ALLOCATED: OnceLock<Regex> = OnceLock::new();
    static WORKING_SET: OnceLock<Regex> = OnceLock::new();
    let (i, last) = lines
        .iter()
        .enumerate()
        .rev()
        .find(|(_, l)| !l.trim().is_empty())?;
    let allocated = re(
        &ALLOCATED,
        r"(?:allocated '(?P<name>[^']*)' buffer, size = *(?P<mb>[\d.]+) MB|^llm_load_tensors: +\w+ (?P<model>model )?buffer size = *(?P<mib>[\d.]+) MiB|llama_kv_cache_init: +\w+ KV buffer size = *(?P<kv>[\d.]+) MiB)",
    );
    let c = allocated.captures(last.trim())?;
    let buffer = match (c.name("name"), c.name("kv")) {
        (Some(n), _) => named_buffer(n.as_str()).unwrap_or(LlamaBuffer::Unknown),
        (None, Some(_)) => LlamaBuffer::KvCache,
        _ => LlamaBuffer::Model,
    };
    let bytes = c
        .name("mb")
        .and_then(|m| size(m.as_str(), "MiB"))
        .or_else(|| c.name("mib").and_then(|m| size(m.as_str(), "MiB")))
        .or_else(|| c.name("kv").and_then(|m| size(m.as_str(), "MiB")));
    let ws = re(
        &WORKING_SET,
        r"recommendedMaxWorkingSetSize\s*=\s*([\d.]+) MB",
    );
    let working_set = lines
        .iter()
        .find_map(|l| ws.captures(l))
        .and_then(|c| c.get(1).and_then(|m| size(m.as_str(), "MiB")));
    let mut st = Scan::default();
    let event = Event::EndsAtAllocation {
        buffer,
        bytes,
        working_set,
    };
    st.add(i + 1, last, event);
    st.findings.pop()
}

/// Exit code 137 in its spellings, or the shell's `Killed` (also right after a progress bar).
fn is_exit_137(line: &str) -> bool {
    // The shells' job messages for a SIGKILLed job: zsh's `[1]    14875 killed     python
    // main.py` and bash's `line 1: 14875 Killed   python main.py` (also after a progress bar, and
    // cut after `Killed`: LlamaFactory-2097's `cli_demo.sh: line 5: 12989 Killed`).
    static JOB: OnceLock<Regex> = OnceLock::new();
    let job = re(
        &JOB,
        r"(?i)(?:\[\d+\]\s*[+-]?\s+\d+\s+killed\s+\S|line \d+:\s+\d+\s+killed(?::\s*9)?(?:\s+\S|\s*$))",
    );
    let l = line.to_ascii_lowercase();
    // A quoted progress bar keeps its quote after `Killed` (ChatGLM-6B-179).
    let t = l.trim().trim_end_matches(['"', '`', '\'']);
    job.is_match(line)
        || l.contains("exit code 137")
        || l.contains("exit code:    137")
        || l.contains("exited with code 137")
        || l.contains("exit status 137")
        || l.contains("code=137")
        // gunicorn's arbiter: `Worker (pid:25134) was sent SIGKILL! Perhaps out of memory?`
        // (exllamav2-556): the kernel's OOM killer is the usual sender.
        || l.contains("was sent sigkill")
        // ollama's runner (`llama runner process has terminated: signal: killed`, ollama-8571)
        // and DeepSpeed's launcher (`exits with return code = -9`, DeepSpeed-4571): SIGKILL.
        || l.contains("signal: killed")
        || l.contains("return code = -9")
        // torch.distributed.elastic: `failed (exitcode: -9) local_rank: 5` (FastChat-521).
        || l.contains("(exitcode: -9)")
        || t == "killed"
        || (t.ends_with("]killed") && (t.contains("it/s") || t.contains("s/it")))
        // Python's subprocess on a SIGKILLed child: `Command '[…]' died with <Signals.SIGKILL: 9>.`
        // (BitNet-103: a conversion script killed for host RAM).
        || l.contains("died with <signals.sigkill")
        || killed_after_output(line)
        || t.strip_prefix("exit code:")
            .is_some_and(|c| c.trim() == "137")
        // Knative / KServe `lastFailureInfo` and pod YAML: `exitCode: 137`.
        || t.strip_prefix("exitcode:")
            .is_some_and(|c| c.trim() == "137")
}

/// The shell's `Killed` written on the end of the killed program's last line, which ended with no
/// newline: `trainable params: 0 || all params: 7069016064 || trainable%: 0.0000 Killed`
/// (LlamaFactory-1975). Only the exact word after a figure or a closing bracket, not prose.
fn killed_after_output(line: &str) -> bool {
    line.trim_end()
        .strip_suffix("Killed")
        .and_then(|head| head.strip_suffix(' '))
        .and_then(|head| head.trim_end().chars().last())
        .is_some_and(|c| c.is_ascii_digit() || matches!(c, '%' | ')' | ']'))
}

#[cfg(test)]
mod tests {
    use super::super::parse::scan;
    use super::*;

    /// [`APPLE`] is `apple`'s bit, and every reader's bit fits a [`ReaderMask`].
    #[test]
    fn apples_bit_is_apples_place() {
        let words = READERS.get(APPLE.trailing_zeros() as usize).map(|r| r.1);
        assert!(words.is_some_and(|w| w.contains(&"buffer is nil")));
        assert!(READERS.len() < ReaderMask::BITS as usize);
    }

    /// An `OutOfMemoryError` line runs only the host reader (its `MemoryError`), a line with
    /// no reader's words none, a non-ASCII line every one.
    #[test]
    fn each_line_runs_only_the_readers_whose_words_it_has() {
        let host = 1
            << READERS
                .iter()
                .position(|r| r.1.contains(&"MemoryError"))
                .unwrap_or(0);
        assert_eq!(
            readers_for("torch.OutOfMemoryError: CUDA out of memory."),
            host
        );
        assert_eq!(readers_for("Epoch 3: loss 0.12"), 0);
        assert_eq!(readers_for("λ out of memory"), ALL_READERS);
        assert_eq!(
            readers_for("Attempting to allocate 5 bytes which is"),
            APPLE | (1 << 8)
        );
    }

    /// The words' gate only skips lines no reader takes: over every log of the corpus, each
    /// line read gated leaves the same result and state as read by every reader.
    #[test]
    fn the_gate_changes_no_result_on_any_corpus_log() {
        let files = super::super::corpus_logs();
        assert!(files.len() > 100, "{} logs", files.len());
        for (file, raw) in files {
            let lines = super::super::clean_lines(&raw);
            let (mut gated, mut all) = (Scan::default(), Scan::default());
            for i in 0..lines.len() {
                let took = read(&lines, i, &mut gated);
                let took_all = read_ungated(&lines, i, &mut all);
                assert_eq!(took, took_all, "{}:{}: {}", file.display(), i + 1, lines[i]);
                assert_eq!(
                    format!("{gated:?}"),
                    format!("{all:?}"),
                    "{}:{}: {}",
                    file.display(),
                    i + 1,
                    lines[i]
                );
            }
        }
    }

    #[test]
    fn numpys_array_memory_error_is_pythons_memory_error() {
        // textgen-6338: numpy's arrays are host memory.
        assert!(python_memory_error("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 18.6 GiB for an array with shape (32768, 152064) and data type float32"));
        assert!(!python_memory_error(
            "torch.OutOfMemoryError: CUDA out of memory."
        ));
    }

    fn events(s: &str) -> Vec<Event> {
        let lines: Vec<String> = s.lines().map(str::to_string).collect();
        scan(&lines).0.into_iter().map(|f| f.event).collect()
    }

    #[test]
    fn the_figures_under_would_exceed_allowed_memory_are_pytorchs_record() {
        // comfyui-3278 (real-2026-12c).
        let e = events("torch.cuda.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\nCurrently allocated     : 21.55 GiB\nRequested               : 952.00 MiB\nDevice limit            : 24.00 GiB\nFree (according to CUDA): 0 bytes");
        let Event::TorchOom(t) = &e[0] else {
            panic!("{e:?}")
        };
        assert_eq!(t.requested, Some(952 << 20));
        assert_eq!(t.total, Some(24 << 30));
        assert_eq!(t.free, Some(0));
        assert!(t.allocated_by_pytorch.is_some_and(|a| a > 21 << 30));
        // Cut after its first words by ComfyUI's error box, it is still the event.
        let cut = events("Error occurred when executing CogVideoDecode:\n\nAllocation on device\n");
        assert!(
            matches!(cut[..], [Event::AllocationExceeds { .. }]),
            "{cut:?}"
        );
    }

    #[test]
    fn sigkills_in_the_words_of_gunicorn_ollama_deepspeed_and_systemd_are_host_memory() {
        for line in [
            "[ERROR] Worker (pid:25134) was sent SIGKILL! Perhaps out of memory?",
            "msg=\"error loading llama server\" error=\"llama runner process has terminated: signal: killed\"",
            "[launch.py:321:sigkill_handler] ['python3', '-u', 'train.py'] exits with return code = -9",
        ] {
            assert!(matches!(events(line)[..], [Event::Exit137]), "{line}");
        }
        let e = events("ollama.service: A process of this unit has been killed by the OOM killer.");
        assert!(matches!(e[..], [Event::HostOomKiller { .. }]), "{e:?}");
        let e = events("MemoryError: Caught MemoryError in DataLoader worker process 4.");
        assert!(
            matches!(e[..], [Event::HostAllocFailed { bytes: None }]),
            "{e:?}"
        );
        // PyTorch's OutOfMemoryError only ends with the word.
        let e =
            events("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB");
        assert!(matches!(e[..], [Event::TorchOom(_)]), "{e:?}");
    }

    #[test]
    fn a_wrapped_dram_message_and_lm_studios_ram_json_are_read() {
        let e = events("TT_FATAL: Out of Memory: Not enough space to allocate 5368709120 B DRAM buffer\nacross 8 banks, where each bank needs to store 671088640 B, but bank size is\n786432000 B (allocated: 754974400 B, free: 31457600 B)");
        assert!(
            matches!(
                e[..],
                [Event::DeviceBufferOom {
                    requested: Some(5368709120),
                    total: Some(6291456000),
                    ..
                }]
            ),
            "{e:?}"
        );
        let e = events("    \"memory\": {\n      \"ram_capacity\": \"314.65 GB\",\n      \"ram_unused\": \"316.65 KB\"\n    },");
        assert!(
            matches!(e[..], [Event::HostMemoryShort { needed: None, .. }]),
            "{e:?}"
        );
        let plenty = events("      \"ram_capacity\": \"64 GB\",\n      \"ram_unused\": \"20 GB\"");
        assert!(plenty.is_empty(), "{plenty:?}");
    }

    #[test]
    fn pinned_memory_fallbacks_kernel_shared_memory_and_a_full_disk_are_no_oom() {
        for log in [
            "ggml_cuda_host_malloc: failed to allocate 1900.00 MiB of pinned memory: invalid argument",
            "[TensorRT-LLM][ERROR] Assertion failed: Sequence Length is too long for the MMHA kernel (not enough shared memory).",
            "Error: All model downloads failed.\nThere is not enough space on the disk. (os error 112)\nsona stderr: fatal error: out of memory",
        ] {
            assert!(events(log).is_empty(), "{log}");
        }
        // /dev/shm is the host's memory: docker's shm stays an event where a reader knows it.
        assert!(crate::logparse::words::says_oom(
            "This might be caused by insufficient shared memory (shm)."
        ));
    }

    #[test]
    fn session_10_wordings_kubelet_eviction_s_per_it_kill_and_xla_fragmentation() {
        // kubeflow-1261: the kubelet evicts for node memory.
        let e = events("`The node was low on resource: memory.`");
        assert!(matches!(e[..], [Event::HostOomKiller { .. }]), "{e:?}");
        // chatglm-6b-191: the shell's `Killed` glued to a slow progress bar (seconds per step).
        let e = events(
            "Loading checkpoint shards:  50%|#####     | 4/8 [02:10<02:22, 35.73s/it]Killed",
        );
        assert!(matches!(e[..], [Event::Exit137]), "{e:?}");
        // jax-trax-431: XLA's figures say fragmentation; without its last sentence they do not.
        let e = events("RuntimeError: RESOURCE_EXHAUSTED: Attempting to allocate 31.06M. That was not possible. There are 58.64M free. Due to fragmentation, the largest contiguous region of free memory is 30.56M.; (0x0x0_HBM0)");
        assert!(
            matches!(e[..], [Event::DeviceFragmented { requested, free, largest }] if free > requested && largest < requested),
            "{e:?}"
        );
        let e = events("XlaRuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 15.65G. That was not possible. There are 11.08G free.; (0x0x0_HBM0)");
        assert!(
            !e.iter()
                .any(|e| matches!(e, Event::DeviceFragmented { .. })),
            "{e:?}"
        );
    }

    #[test]
    fn headless_old_figures_elastic_sigkills_and_other_wordings_are_read() {
        // GPT2-Chinese-215: the old format's figures without "CUDA out of memory. Tried to…".
        let e = events("(GPU 0; 15.75 GiB total capacity; 79.11 MiB already allocated; 3.62 MiB free; 86.00 MiB reserved in total by PyTorch)");
        assert!(
            matches!(&e[..], [Event::TorchOom(t)] if t.total.is_some() && t.requested.is_none()),
            "{e:?}"
        );
        let e = events("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 5 (pid: 32708)");
        assert!(matches!(e[..], [Event::Exit137]), "{e:?}");
        for line in [
            "RuntimeError: Current platform can NOT allocate memory block with size larger than 4GB! Tried to alloc",
            "Error: Model loading aborted due to insufficient system resources.",
            "fatal   : Memory allocation failure",
        ] {
            assert!(crate::logparse::words::says_oom(line), "{line}");
        }
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
    fn a_buffer_cut_off_while_the_context_is_made_is_the_kv_cache() {
        // llamaedge-241 (fresh corpus): the log ends inside the failure line.
        let e = events("llama_new_context_with_model: n_ctx      = 131072\nllama_new_context_with_model: flash_attn = 0\nggml_backend_cuda_buffer_type_alloc_buffer: allocating 8192.00 MiB on device 0: cudaMall");
        assert!(
            matches!(
                e.first(),
                Some(Event::LlamaCppBuffer {
                    buffer: LlamaBuffer::KvCache,
                    bytes: Some(b)
                }) if *b == 8192 << 20
            ),
            "{e:?}"
        );
    }

    #[test]
    fn rays_own_out_of_memory_error_is_the_hosts_not_pytorchs() {
        // ray-flingbot-11 (fresh corpus).
        let e = events("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.");
        assert_eq!(e, vec![Event::RayOomKill], "{e:?}");
    }

    #[test]
    fn a_pod_yaml_exit_code_137_is_a_kill() {
        assert!(is_exit_137("        exitCode: 137"));
        assert!(!is_exit_137("        exitCode: 1370"));
    }

    #[test]
    fn kubernetes_exit_137_without_oomkilled_is_no_event_but_a_note() {
        // k8s-122256: `Reason: Error` with exit code 137 is a SIGKILL, not a memory kill.
        let log =
            "    Last State:     Terminated\n      Reason:       Error\n      Exit Code:    137";
        let lines: Vec<String> = log.lines().map(str::to_string).collect();
        let (findings, ctx) = scan(&lines);
        assert!(findings.is_empty(), "{findings:?}");
        assert_eq!(ctx.not_oom.len(), 1);
        assert!(ctx.not_oom[0].1.contains("not OOMKilled"));
        let oom = events("      Reason:       OOMKilled\n      Exit Code:    137");
        assert_eq!(oom, vec![Event::ContainerOomKilled]);
    }

    #[test]
    fn every_backend_wording_of_a_failed_ggml_buffer() {
        // llamacpp-1815: Metal's model buffer above the maximum buffer size.
        let metal = events("ggml_metal_add_buffer: buffer 'data' size 18300780544 is larger than buffer maximum of 17179869184");
        assert_eq!(
            metal,
            vec![Event::LlamaCppBuffer {
                buffer: LlamaBuffer::Model,
                bytes: Some(18_300_780_544)
            }]
        );
        let kv = events("ggml_metal_add_buffer: buffer 'kv' size 8589934592 is larger than buffer maximum of 4294967296");
        assert!(matches!(
            kv[0],
            Event::LlamaCppBuffer {
                buffer: LlamaBuffer::KvCache,
                ..
            }
        ));
        let newer = events("ggml_backend_metal_buffer_from_ptr: error: failed to allocate buffer, size =  3072.00 MiB\nllama_kv_cache_init: failed to allocate buffer for kv cache");
        assert_eq!(
            newer,
            vec![Event::LlamaCppBuffer {
                buffer: LlamaBuffer::KvCache,
                bytes: Some(3072 << 20)
            }]
        );
        let vk = events("ggml_vulkan: Device memory allocation of size 4294967296 failed.");
        assert!(matches!(
            vk[0],
            Event::LlamaCppBuffer {
                bytes: Some(4_294_967_296),
                ..
            }
        ));
    }

    #[test]
    fn job_limits_and_shared_memory_are_host_memory_events() {
        let e = events("slurmstepd: error: Job 7518 exceeded memory limit (626359956 > 512000000), being killed");
        assert_eq!(e, vec![Event::JobMemoryLimit { shm: false }]);
        let e = events("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).");
        assert_eq!(e, vec![Event::JobMemoryLimit { shm: true }]);
        let e = events("Error: InsufficientMemoryError: A context size of 4096 with 4 sequences is too large for the available VRAM");
        assert_eq!(e, vec![Event::ContextTooLarge { sequences: Some(4) }]);
    }

    #[test]
    fn the_shells_job_messages_for_a_killed_job_are_a_sigkill() {
        // transformers-chatglm-webui-3 (the 2026-12 held-out set): zsh after a progress bar.
        assert!(is_exit_137("Loading checkpoint shards:  88%|███| 7/8 [00:12<00:01,  1.84s/it][1]    14875 killed     python main.py --low_vram"));
        assert!(is_exit_137(
            "bash: line 1: 14875 Killed                  python main.py"
        ));
        assert!(!is_exit_137("the job was killed by the scheduler"));
    }

    #[test]
    fn a_killed_child_of_python_or_a_killed_line_without_newline_is_a_sigkill() {
        assert!(is_exit_137("ERROR:root:Error occurred while running command: Command '['python', 'convert.py']' died with <Signals.SIGKILL: 9>., check details"));
        assert!(is_exit_137(
            "12/24/2023 09:04:10 - INFO - loader - trainable params: 0 || all params: 7069016064 || trainable%: 0.0000 Killed"
        ));
        assert!(is_exit_137("step 40 (loss 1.92) Killed"));
        // Prose, a name, a word inside a line: not the shell's job message.
        assert!(!is_exit_137("The worker was Killed"));
        assert!(!is_exit_137("status: Killed by user"));
        assert!(!is_exit_137("[Killed]"));
        assert!(!is_exit_137("Command died with <Signals.SIGTERM: 15>."));
    }

    #[test]
    fn vllm_v1_names_the_device_in_its_startup_check() {
        // vllm-v1-33297 (the 2026-12 held-out set).
        let e = events("ValueError: Free memory on device cuda:0 (1.53/22.05 GiB) on startup is less than desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.");
        assert!(
            matches!(e[0], Event::VllmStartupFree { free: Some(_), .. }),
            "{e:?}"
        );
    }

    #[test]
    fn sglang_retracting_with_an_empty_token_pool_has_no_kv_room() {
        let e = events("AssertionError: No space left for only one request, self.token_to_kv_pool_allocator.available_size()=0");
        assert_eq!(e, vec![Event::SglangPoolFull]);
        let e = events("[2025-03-07 21:49:33 TP13] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.1474 -> 0.1845");
        assert_eq!(e, vec![Event::SglangRetract]);
    }

    #[test]
    fn a_negative_profiled_kv_pool_is_sglang_without_room() {
        // sglang-7691: the weights left a negative KV pool.
        let e = events("[2025-07-02 07:41:59 DP0 TP0] max_total_tokens=131072 is larger than the profiled value -561981. Use the profiled value instead.");
        assert_eq!(e, vec![Event::SglangNoKvRoom]);
        let fine = events("max_total_tokens=131072 is larger than the profiled value 561981. Use the profiled value instead.");
        assert!(fine.is_empty(), "{fine:?}");
    }

    #[test]
    fn host_and_device_buffers_of_ggml() {
        // llamacpp-8101, llamafile-554: a CPU buffer named by the line after it (the KV cache).
        let cpu = events("ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 137438953504\nllama_kv_cache_init: failed to allocate buffer for kv cache");
        assert_eq!(
            cpu,
            vec![Event::LlamaCppBuffer {
                buffer: LlamaBuffer::KvCache,
                bytes: Some(137_438_953_504)
            }]
        );
        let rocm = events("llama_model_load: error loading model: unable to allocate ROCm0 buffer");
        assert!(matches!(
            rocm[0],
            Event::LlamaCppBuffer {
                buffer: LlamaBuffer::Model,
                ..
            }
        ));
    }

    #[test]
    fn a_quantized_model_dispatched_off_the_gpu_is_the_weights_not_fitting() {
        let e = events("ValueError: Some modules are dispatched on the CPU or the disk. Make sure you have enough GPU RAM to fit the quantized model. If you want to dispatch the model on the CPU or the disk while keeping these modules in 32-bit, you need to set `llm_int8_enable_fp32_cpu_offload=True`");
        assert_eq!(e, vec![Event::WeightsDispatchedOff]);
    }

    #[test]
    fn a_cgroup_oom_kill_is_the_oom_killer() {
        let e = events("[ 812.4] Memory cgroup out of memory: Killed process 4242 (python3) total-vm:91234567kB, anon-rss:31457280kB, file-rss:0kB");
        assert_eq!(
            e,
            vec![Event::HostOomKiller {
                process: Some("python3".into()),
                rss: Some(31_457_280 * 1024)
            }]
        );
    }

    #[test]
    fn rays_memory_threshold_kill_is_host_memory() {
        // ray-vllm-2669: the memory monitor's kill in its own wording.
        let e = events("Memory on the node (IP: 10.0.0.1, ID: ab) where the task (actor ID: cd, name=RayWorkerVllm.__init__, pid=308, memory used=11.15GB) was running was 12.49GB / 13.15GB (0.950003), which exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: ef) because it was the most recently scheduled task");
        assert_eq!(e, vec![Event::RayOomKill]);
    }

    #[test]
    fn a_log_that_stops_at_an_allocation_names_that_buffer() {
        // llamafile-42: the log ends with the model's first 'data' buffer on an 8 GB M1.
        let log = "ggml_metal_init: recommendedMaxWorkingSetSize  =  5461.34 MB\nllama_new_context_with_model: compute buffer total size = 81.63 MB\nggml_metal_add_buffer: allocated 'data            ' buffer, size =  4096.00 MB, offs =            0\n";
        let e = events(log);
        assert_eq!(
            e,
            vec![Event::EndsAtAllocation {
                buffer: LlamaBuffer::Model,
                bytes: Some(4096 << 20),
                working_set: size("5461.34", "MiB"),
            }]
        );
        // A log that goes on after the allocation is not cut there.
        let more = format!("{log}llama_print_timings: eval time = 10 ms\n");
        assert!(events(&more).is_empty());
    }

    #[test]
    fn a_devices_compute_capability_is_no_compute_buffer() {
        // llamacpp-tabby-1498: the device list above, "Unable to load model" below.
        let log = "  Device 1: NVIDIA A100 80GB PCIe, compute capability 8.0, VMM: yes\nggml_backend_cuda_buffer_type_alloc_buffer: allocating 1640.75 MiB on device 1: cudaMalloc failed: out of memory\nERROR llama_cpp_bindings: Unable to load model: /data/models/q8_0.v2.gguf";
        let e = events(log);
        assert!(
            matches!(
                e.as_slice(),
                [Event::LlamaCppBuffer {
                    buffer: LlamaBuffer::Model,
                    ..
                }]
            ),
            "{e:?}"
        );
    }

    #[test]
    fn ggmls_cuda_pool_running_out_is_compute() {
        // koboldcpp-1711 (cuMemSetAccess) and ollama-9567 (blank lines between, cuMemCreate).
        let kobold = events("Processing Prompt [BLAS] (512 / 12710 tokens)CUDA error: out of memory\n  current device: 0, in function alloc at D:\\a\\koboldcpp\\ggml\\src\\ggml-cuda\\ggml-cuda.cu:457\n  cuMemSetAccess((CUdeviceptr)((char *)(pool_addr) + pool_size), reserve_size, &access, 1)");
        let pool = Event::LlamaCppBuffer {
            buffer: LlamaBuffer::Pool,
            bytes: None,
        };
        assert_eq!(kobold, vec![pool.clone()]);
        let ollama = events("CUDA error: out of memory\n\n  current device: 2, in function alloc at //ml/backend/ggml/ggml/src/ggml-cuda/ggml-cuda.cu:445\n\n  cuMemCreate(&handle, reserve_size, &prop, 0)");
        assert_eq!(ollama, vec![pool.clone()]);
        let vmm = events("CUDA error: out of memory\n  current device: 0, in function ggml_cuda_pool_malloc_vmm at /x/llama.cpp/ggml-cuda.cu:7812\n  cuMemCreate(&handle, reserve_size, &prop, 0)");
        let lazy = events("CUDA error: out of memory\n  current device: 0, in function ggml_cuda_kernel_can_use_pdl at /x/llama.cpp/ggml/src/ggml-cuda/common.cuh:1670\n  cudaFuncGetAttributes(&attr, kernel)");
        assert_eq!(lazy, vec![pool.clone()]);
        assert_eq!(vmm, vec![pool]);
        // Another ggml function, or a CUDA error without ggml's lines, is not the pool.
        let other = events("CUDA error: out of memory\n  current device: 0, in function ggml_cuda_op_mul_mat at /x/ggml-cuda.cu:1200\n  cublasGemmEx(...)");
        assert_eq!(other, vec![Event::CudaErrorOom]);
        assert_eq!(
            events("RuntimeError: CUDA error: out of memory"),
            vec![Event::CudaErrorOom]
        );
    }

    #[test]
    fn the_kernels_oom_kill_summary_and_kill_line_are_one_kill() {
        // dmesg-moby-47418: the summary line names the task; the kill line is worded otherwise.
        let moby = events("[Tue Feb 20 19:15:36 2024] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/docker/e9d9,task=python,pid= 2953 , uid=999\n[Tue Feb 20 19:15:36 2024] Out of memory: Process stopped 2953 (python) total-vm:8142876kB, anon-rss:6719676kB");
        assert_eq!(
            moby,
            vec![Event::HostOomKiller {
                process: Some("python".into()),
                rss: None
            }]
        );
        // dmesg-textgen-440: summary, then the usual kill line fills in the resident size.
        let both = events("oom-kill:constraint=CONSTRAINT_NONE,global_oom,task=python,pid=6154,uid=1000\nOut of memory: Killed process 6154 (python) total-vm:18109076kB, anon-rss:14095848kB, file-rss:0kB");
        assert_eq!(
            both,
            vec![Event::HostOomKiller {
                process: Some("python".into()),
                rss: Some(14_095_848 * 1024)
            }]
        );
        let invoked = events(
            "[ 12.3] pool invoked oom-killer: gfp_mask=0x6200ca(GFP_HIGHUSER_MOVABLE), order=0",
        );
        assert_eq!(invoked.len(), 1);
    }

    #[test]
    fn the_oom_killers_task_table_alone_is_the_oom_killer() {
        // dmesg-vllm-54237: only rows of the table were pasted (new columns: rss_anon …).
        let rows = "[ 2457.202791] [  16501]  1000 16501      723      473       30      443         0    45056        0             0 sh\n[ 2457.202792] [  16502]  1000 16502   136163   131902   131411      491         0  1134592        0             0 cudafe++\n[ 2457.202794] [  16503]  1000 16503      723      472       29      443         0    45056        0             0 sh";
        assert_eq!(events(rows), vec![Event::OomKillerTasks { tasks: 3 }]);
        // The older columns, after the table's header.
        assert!(!task_row(
            "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name"
        ));
        assert!(task_row(
            "[ 1440763] 21417 1440763 21758344 15089085 169956864 0 0 perl"
        ));
        // Two rows are not a table; a row whose tgid is not its pid is not the kernel's.
        assert!(events("[  1] 0 1 4 5 6 7 8 a\n[ 2] 0 2 4 5 6 7 8 b").is_empty());
        assert!(!task_row("[  123] 1 2 3 4 5 6 7 x"));
        assert!(!task_row("[INFO] [worker 3] loaded 1 2 3 4 5 6 7 shards"));
    }

    #[test]
    fn windows_commit_limit_is_host_memory() {
        for s in [
            "[WinError 1455] The paging file is too small for this operation to complete. Error loading \"C:\\torch\\lib\\caffe2_detectron_ops_gpu.dll\" or one of its dependencies.",
            "OSError: The paging file is too small for this operation to complete. (os error 1455)",
        ] {
            assert_eq!(events(s), vec![Event::PagingFileTooSmall], "{s}");
        }
    }

    #[test]
    fn tgis_cache_block_pool_and_accelerates_batch_finder() {
        let tgi = events("ERROR prefill: Server error: Out of available cache blocks: asked 107, only 4 free blocks");
        assert_eq!(
            tgi,
            vec![Event::TgiCacheBlocks {
                asked: Some(107),
                free: Some(4)
            }]
        );
        let finder = events("RuntimeError: No executable batch size found, reached zero");
        assert_eq!(finder, vec![Event::BatchSizeExhausted]);
    }

    #[test]
    fn a_dram_message_cut_after_its_request_is_still_read() {
        // tenstorrent-tt-inference-server-314.
        let e = events("Out of Memory: Not enough space to allocate 33619968 B DRAM buffer across 12 banks, where each bank needs to store 2801664 B");
        assert_eq!(
            e,
            vec![Event::DeviceBufferOom {
                requested: Some(33_619_968),
                total: None,
                allocated: None,
                free: None
            }]
        );
    }

    #[test]
    fn a_negative_kv_cache_share_is_no_room_for_cache_blocks() {
        let e = events("(EngineCore_DP0 pid=563) INFO 12-23 23:34:23 [gpu_worker.py:298] Available KV cache memory: -2.77 GiB\n");
        assert!(matches!(e.as_slice(), [Event::VllmNoCacheBlocks]), "{e:?}");
        let e = events("INFO [gpu_worker.py:298] Available KV cache memory: 12.77 GiB\n");
        assert!(e.is_empty(), "{e:?}");
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
