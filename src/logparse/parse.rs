//! Reading OOM messages out of a log: what each engine prints when memory runs out, with the
//! numbers it gives, each tied to its line. The readers live by family (`torch`, `engines`,
//! `words`); this file holds the vocabulary they share and the one pass over the lines.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

use aho_corasick::AhoCorasick;
use regex::Regex;
use serde::Serialize;

pub use super::hints::{Context, ModelHint, StageHint, WorkloadHint};

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
    Rocm,
    Metal,
    Mlx,
    Sglang,
    Ray,
    Ollama,
    Exllamav2,
    Accelerator,
    /// accelerate's helpers (its batch-size finder).
    Accelerate,
    /// Windows itself (its commit limit: RAM + paging file).
    Windows,
    MistralRs,
    Exllamav3,
    Lmdeploy,
    Deepspeed,
    Comfyui,
    Koboldcpp,
    StableDiffusionCpp,
    Ctranslate2,
    Onnxruntime,
    Openvino,
    Tensorflow,
    /// XLA (JAX, TensorFlow on TPU/GPU).
    Xla,
    Triton,
    Slurm,
    Docker,
    /// systemd and systemd-oomd.
    Systemd,
    Earlyoom,
    /// A line with out-of-memory words in a wording no reader knows.
    Unrecognised,
}

/// Which llama.cpp buffer failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LlamaBuffer {
    Model,
    KvCache,
    Compute,
    /// ggml's CUDA memory pool: the temporary buffers of the graph's operations.
    Pool,
    Unknown,
}

/// The numbers of PyTorch's OOM message (current and pre-2.1 formats, CUDA, HIP, XPU and MPS).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TorchOom {
    pub requested: Option<u64>,
    pub gpu: Option<u32>,
    pub total: Option<u64>,
    pub free: Option<u64>,
    /// Every `Process P has M memory in use` (this process among them or not).
    pub processes: Vec<(u32, u64)>,
    pub this_process: Option<u64>,
    pub allowed: Option<u64>,
    pub allocated_by_pytorch: Option<u64>,
    pub private_pools: Option<u64>,
    pub reserved_unallocated: Option<u64>,
    /// Old format: `reserved in total by PyTorch`.
    pub reserved_total: Option<u64>,
    /// The backend named in the message when it is not CUDA: `hip`, `xpu`, `mps`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<&'static str>,
    /// The request as the log wrote it, when it is beyond what a byte count can hold (`1e26 GiB`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_as_written: Option<String>,
}

impl TorchOom {
    /// Memory other processes hold on the card, from the `Process N has X` list.
    /// PyTorch lists the processes on the card, this one among them or not (seen both ways): a
    /// listed figure equal to this process's is this process; without this process's figure,
    /// a listed process that holds everything in use on the card is this one.
    pub fn others(&self) -> u64 {
        let all = self
            .processes
            .iter()
            .fold(0u64, |s, p| s.saturating_add(p.1));
        match self.this_process.or_else(|| self.sole_listed_self()) {
            Some(me) if self.processes.iter().any(|p| close(p.1, me)) => all.saturating_sub(me),
            Some(_) => all,
            None => 0,
        }
    }

    /// The one listed process that accounts for all memory in use (total − free): this one.
    /// Else the one listed process whose figure is what PyTorch reserved (allocated + cached)
    /// plus at most a CUDA context (1 GiB): this process's memory is its reserve and its context
    /// (trl-5207: four test processes on one card, 10.77 GiB beside 10.63 GiB reserved).
    fn sole_listed_self(&self) -> Option<u64> {
        let used = self.total?.saturating_sub(self.free?);
        let all_in_use = self
            .processes
            .iter()
            .map(|p| p.1)
            .find(|&m| close(m, used) || m.abs_diff(used) <= used / 50);
        all_in_use.or_else(|| self.listed_by_reserve())
    }

    fn listed_by_reserve(&self) -> Option<u64> {
        let reserved = self
            .allocated_by_pytorch?
            .saturating_add(self.reserved_unallocated.unwrap_or(0));
        let mut mine = self
            .processes
            .iter()
            .map(|p| p.1)
            .filter(|&m| m >= reserved && m - reserved <= 1 << 30);
        match (mine.next(), mine.next()) {
            (Some(m), None) => Some(m),
            _ => None,
        }
    }
}

/// Two figures printed for the same thing (rounded to two decimals in different units).
fn close(a: u64, b: u64) -> bool {
    a.abs_diff(b) <= (a.max(b) / 200).max(16 << 20)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// PyTorch's `CUDA out of memory. Tried to allocate …` (and its HIP, XPU and MPS twins).
    TorchOom(TorchOom),
    /// PyTorch's memory summary table after an OOM: what was allocated and what was reserved.
    TorchMemorySummary {
        ooms: Option<u64>,
        allocated: Option<u64>,
        reserved: Option<u64>,
    },
    /// `Allocation on device N would exceed allowed memory` (TGI, older PyTorch): no figures.
    AllocationExceeds { gpu: Option<u32> },
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
    /// vLLM's CPU backend: the KV cache it was asked to pre-allocate in host RAM
    /// (`VLLM_CPU_KVCACHE_SPACE`) is more than the node has available.
    VllmCpuKv {
        available: Option<u64>,
        requested: Option<u64>,
    },
    /// llama.cpp: a CUDA buffer could not be allocated.
    LlamaCppBuffer {
        buffer: LlamaBuffer,
        bytes: Option<u64>,
    },
    /// candle / mistral.rs: the driver's bare out-of-memory error.
    CandleDriverOom,
    /// TGI: not enough memory for the prefill token budget at warm-up.
    TgiPrefill { tokens: Option<u64> },
    /// TGI's warm-up: its KV cache cannot hold `--max-batch-total-tokens` beside the weights.
    TgiTotalTokens { tokens: Option<u64> },
    /// lmdeploy's TurboMind allocator ran out; `instance`: while creating the model instance,
    /// where it allocates its KV cache.
    TurbomindOom { instance: bool },
    /// TGI: the paged KV cache's block pool has fewer free blocks than a request needs.
    TgiCacheBlocks {
        asked: Option<u64>,
        free: Option<u64>,
    },
    /// accelerate's `find_executable_batch_size` halved the batch to zero: every size ran out.
    BatchSizeExhausted,
    /// Windows' commit limit (RAM + paging file) is reached: error 1455.
    PagingFileTooSmall,
    /// The kernel's OOM killer's table of tasks (it prints it only when it is about to kill).
    OomKillerTasks { tasks: u64 },
    /// TensorRT-LLM's allocator failed.
    TensorrtOom { bytes: Option<u64> },
    /// TensorRT-LLM: the executor could not create one of its components (`KV cache`, …).
    TensorrtComponent {
        component: String,
        total: Option<u64>,
        free: Option<u64>,
    },
    /// SGLang: the loaded weights leave no room (or a negative amount) for the KV pool.
    SglangNoKvRoom,
    /// SGLang: the request-slot pool ran out.
    SglangReqSlots,
    /// SGLang: running requests filled the KV token pool (the scheduler retracts with none left).
    SglangPoolFull,
    /// SGLang's "Decode out of memory happened. #retracted_reqs: N": the KV token pool filled
    /// while decoding; the scheduler retracted N requests (they are recomputed) and went on.
    SglangRetract,
    /// transformers / accelerate: a quantized model's modules would go to the CPU or disk
    /// ("Make sure you have enough GPU RAM to fit the quantized model").
    WeightsDispatchedOff,
    /// exllamav2's autosplit: `Insufficient VRAM for model and cache`.
    ExllamaInsufficient,
    /// Apple Metal: a command buffer failed for lack of memory (no figures).
    MetalOom,
    /// llama.cpp on Metal: `ggml_metal_get_buffer: error: buffer is nil` after its buffers went
    /// past the recommended working set (`allocated 'kv' buffer, size = 512.03 MiB, ( 4458.33 /
    /// 4096.00)`): `crossed` is the first buffer past it, `before` what the buffers above it held.
    MetalWorkingSet {
        crossed: LlamaBuffer,
        before: u64,
        working_set: u64,
    },
    /// MLX: one buffer larger than Metal's maximum buffer size.
    MlxBufferTooLarge {
        requested: Option<u64>,
        max_buffer: Option<u64>,
    },
    /// An accelerator's allocator with its own figures (tt-xla's DRAM banks).
    DeviceBufferOom {
        requested: Option<u64>,
        total: Option<u64>,
        allocated: Option<u64>,
        free: Option<u64>,
    },
    /// XLA (JAX, TensorFlow on TPU/GPU): `RESOURCE_EXHAUSTED: Attempting to allocate 31.06M. That
    /// was not possible. There are 58.64M free. Due to fragmentation, the largest contiguous
    /// region of free memory is 30.56M.` — enough free in all, no piece large enough.
    DeviceFragmented {
        requested: u64,
        free: u64,
        largest: u64,
    },
    /// ROCm/HIP driver: `hipErrorOutOfMemory` without figures.
    HipErrorOom,
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
    /// Host RAM: Ray's memory monitor killed workers.
    RayOomKill,
    /// Host RAM: ollama refuses a model larger than system memory.
    HostMemoryShort {
        needed: Option<u64>,
        available: Option<u64>,
    },
    /// Host RAM: a container limit (Kubernetes `OOMKilled`).
    ContainerOomKilled,
    /// Host RAM: a batch scheduler's job limit (Slurm's `exceeded memory limit`), or a container's
    /// shared memory (`/dev/shm`) too small for the data loader's workers.
    JobMemoryLimit { shm: bool },
    /// node-llama-cpp: `A context size of C with S sequences is too large for the available VRAM`.
    ContextTooLarge { sequences: Option<u64> },
    /// Exit code 137 (SIGKILL, usually the OOM killer).
    Exit137,
    /// PyTorch could not allocate host memory.
    HostAllocFailed { bytes: Option<u64> },
    /// An engine's own message from the catalogue of what its source prints (`catalogue`).
    Catalogued(super::catalogue::Catalogued),
    /// A line with out-of-memory words that no reader knows: an OOM whose cause is undecided.
    OomWords,
    /// The log ends right after an engine allocated a buffer (the error after it is missing).
    EndsAtAllocation {
        buffer: LlamaBuffer,
        bytes: Option<u64>,
        /// Metal's recommendedMaxWorkingSetSize, when the log prints it.
        working_set: Option<u64>,
    },
}

impl Event {
    pub fn source(&self) -> Source {
        match self {
            Event::TorchOom(t) => match t.backend {
                Some("hip") => Source::Rocm,
                Some("mps") => Source::Metal,
                _ => Source::Pytorch,
            },
            Event::TorchMemorySummary { .. } | Event::HostAllocFailed { .. } => Source::Pytorch,
            Event::AllocationExceeds { .. } => Source::Pytorch,
            Event::VllmKvCapacity { .. }
            | Event::VllmNoCacheBlocks
            | Event::VllmStartupFree { .. }
            | Event::VllmSamplerWarmup { .. }
            | Event::VllmCpuKv { .. } => Source::Vllm,
            Event::LlamaCppBuffer { .. } => Source::LlamaCpp,
            Event::CandleDriverOom => Source::Candle,
            Event::TgiPrefill { .. }
            | Event::TgiTotalTokens { .. }
            | Event::TgiCacheBlocks { .. } => Source::Tgi,
            Event::TurbomindOom { .. } => Source::Cuda,
            Event::BatchSizeExhausted => Source::Accelerate,
            Event::PagingFileTooSmall => Source::Windows,
            Event::OomKillerTasks { .. } => Source::Kernel,
            Event::TensorrtOom { .. } | Event::TensorrtComponent { .. } => Source::TensorrtLlm,
            Event::SglangNoKvRoom
            | Event::SglangReqSlots
            | Event::SglangPoolFull
            | Event::SglangRetract => Source::Sglang,
            Event::ExllamaInsufficient => Source::Exllamav2,
            Event::WeightsDispatchedOff => Source::Pytorch,
            Event::MetalOom => Source::Metal,
            Event::MetalWorkingSet { .. } => Source::LlamaCpp,
            Event::MlxBufferTooLarge { .. } => Source::Mlx,
            Event::DeviceFragmented { .. } => Source::Accelerator,
            Event::DeviceBufferOom { .. } => Source::Accelerator,
            Event::HipErrorOom => Source::Rocm,
            Event::CublasAllocFailed | Event::CudnnFailure | Event::CudaErrorOom => Source::Cuda,
            Event::HostOomKiller { .. } | Event::Exit137 => Source::Kernel,
            Event::RayOomKill => Source::Ray,
            Event::HostMemoryShort { .. } => Source::Ollama,
            Event::ContainerOomKilled => Source::Kubernetes,
            Event::JobMemoryLimit { .. } => Source::Kubernetes,
            Event::ContextTooLarge { .. } => Source::LlamaCpp,
            Event::Catalogued(c) => c.source,
            Event::OomWords => Source::Unrecognised,
            Event::EndsAtAllocation { .. } => Source::LlamaCpp,
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

/// The state of one pass over a log: the events so far and the surrounding context.
#[derive(Debug, Default)]
pub struct Scan {
    pub findings: Vec<Finding>,
    pub ctx: Context,
    /// The last line a PyTorch OOM message was read on (its repetitions are one event).
    pub last_torch_line: Option<usize>,
    /// The first lines with out-of-memory words that no reader knew; kept only when the log
    /// has no known event, so they never crowd out one.
    pub unrecognised: Vec<Finding>,
    /// The answers of pure per-line looks, by the line's text (see [`Memos`]).
    pub(crate) memo: Memos,
}

/// The answers of the pure per-line looks the pass asks of every line, by the line's text: a
/// line repeated verbatim, in a row (a progress bar) or apart (a warning printed on every step,
/// a message logged by each worker), is answered from the memo instead of running the look
/// again. The line is looked up once, and its slot holds every look's answer (a look not asked
/// yet is `None`). At most [`MEMO_LINES`] distinct lines are remembered, so the memo's size does
/// not grow with the log's; past them a line that is not the last one asked runs each look.
#[derive(Default)]
pub(crate) struct Memos {
    /// The line last asked and its slot in `slots` (`None`: its looks are not remembered).
    at: Option<(usize, Option<usize>)>,
    /// By a hash of the line's text ([`line_hash`]): the index of a line with that hash and its
    /// slot (another line with the same hash is compared by text, and runs the looks when it
    /// differs).
    index: HashMap<u64, (usize, usize), BuildHasherDefault<HashIsKey>>,
    slots: Vec<LineLooks>,
    /// `torch::message`: the figures of a PyTorch message (a pure function of its eight lines'
    /// text), by [`lines_hash`] of those lines: the first line's index, the lines' count (fewer
    /// than eight at the log's end) and the figures.
    pub(crate) torch_messages:
        HashMap<u64, (usize, usize, TorchOom), BuildHasherDefault<HashIsKey>>,
}

/// Each look's answer for one line's text, `None` until asked. Only for functions of the
/// line's text alone, never of its neighbours or of the pass's state.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LineLooks {
    /// `scan`: the line cannot be an event (no anchor word, or a negation).
    pub(crate) passed_over: Option<bool>,
    /// `catalogue::lookup`'s row for the line.
    pub(crate) catalogue_row: Option<Option<usize>>,
    /// `engines`: which engine readers may take the line.
    pub(crate) engine_words: Option<super::engines::ReaderMask>,
    /// `words::unrecognised`: out-of-memory words, not a look-alike and not advice.
    pub(crate) oom_words: Option<bool>,
    /// `hints::mark`: what the line's text alone says to the context.
    pub(crate) looks: Option<super::hints::Looks>,
}

impl Memos {
    /// Line `i`'s slot: from the last line asked when it is line `i` or has its text, else from
    /// the map (a new slot for a line not seen, while there is room). `lines` is the same slice
    /// on every call.
    fn slot(&mut self, lines: &[String], i: usize) -> Option<usize> {
        let line = lines.get(i)?;
        let slot = match self.at {
            Some((j, s)) if j == i || lines.get(j) == Some(line) => s,
            _ => {
                let key = line_hash(line);
                match self.index.get(&key) {
                    Some(&(j, s)) if lines.get(j) == Some(line) => Some(s),
                    Some(_) => None,
                    None if self.slots.len() < MEMO_LINES => {
                        let s = self.slots.len();
                        self.slots.push(LineLooks::default());
                        self.index.insert(key, (i, s));
                        Some(s)
                    }
                    None => None,
                }
            }
        };
        self.at = Some((i, slot));
        slot
    }

    /// `f(lines[i])`, from the memo when a line asked before has the same text; `field` picks
    /// the look's answer in a slot. `None` when there is no line `i`. `lines` is the same slice
    /// on every call.
    pub(crate) fn get<T: Copy>(
        &mut self,
        lines: &[String],
        i: usize,
        field: fn(&mut LineLooks) -> &mut Option<T>,
        f: impl FnOnce(&str) -> T,
    ) -> Option<T> {
        let line = lines.get(i)?;
        let slot = self.slot(lines, i).and_then(|s| self.slots.get_mut(s));
        let Some(slot) = slot else {
            return Some(f(line));
        };
        let answer = field(slot);
        Some(*answer.get_or_insert_with(|| f(line)))
    }
}

/// A memo is no part of what the pass found: two passes that found the same compare equal.
impl std::fmt::Debug for Memos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Memos")
    }
}

/// The hasher of [`Memos`]' maps: its keys are already [`line_hash`]es, so the map uses them
/// as they are instead of hashing them again (SipHash cost as much as the rest of a lookup).
#[derive(Default)]
pub(crate) struct HashIsKey(u64);

impl Hasher for HashIsKey {
    fn finish(&self) -> u64 {
        self.0
    }
    /// Only `u64` keys are hashed here; any other bytes are folded in, so the map stays correct.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }
    fn write_u64(&mut self, v: u64) {
        // The high bits, the best mixed by the hash's last multiply, reach the low ones that
        // pick a bucket.
        self.0 = v ^ (v >> 32);
    }
}

/// A quick hash of a line's text for [`Memos`] (eight bytes a step, multiply and rotate as
/// FxHash does): the memo compares the text on a hit, so a collision costs only a call.
fn line_hash(line: &str) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut chunks = line.as_bytes().chunks_exact(8);
    let mut h = line.len() as u64;
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    let mut w = [0u8; 8];
    let rest = chunks.remainder();
    w[..rest.len()].copy_from_slice(rest);
    (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K)
}

/// A quick hash of consecutive lines' text, [`line_hash`] of each folded in.
pub(crate) fn lines_hash(lines: &[String]) -> u64 {
    lines.iter().fold(lines.len() as u64, |h, l| {
        (h.rotate_left(5) ^ line_hash(l)).wrapping_mul(0x517c_c1b7_2722_0a95)
    })
}

/// Distinct lines [`Memos`] remembers, at most.
const MEMO_LINES: usize = 1 << 16;

impl Scan {
    pub fn add(&mut self, n: usize, line: &str, event: Event) {
        self.findings.push(Finding {
            line: n,
            source: event.source(),
            event,
            quote: quote(line),
        });
    }

    /// An event counted only when the log has no known one (`unrecognised`), up to eight.
    pub fn add_fallback(&mut self, n: usize, line: &str, event: Event) {
        if self.unrecognised.len() < 8 {
            self.unrecognised.push(Finding {
                line: n,
                source: event.source(),
                event,
                quote: quote(line),
            });
        }
    }
}

/// The regex in `cell`, compiled from `pattern` on first use and shared after.
pub(crate) fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| compile(pattern))
}

/// `re` for a pattern assembled at run time (around [`SIZE`]): `pattern` is called only on first
/// use, so a line costs no formatting of a pattern that is already compiled.
pub(crate) fn re_built(
    cell: &'static OnceLock<Regex>,
    pattern: impl FnOnce() -> String,
) -> &'static Regex {
    cell.get_or_init(|| compile(&pattern()))
}

/// Whether `line` holds any of `words`: one pass of one Aho-Corasick automaton, built from the
/// list on first use, instead of a substring search per word (the lists are checked on every
/// line of a log).
pub(crate) fn any_word(
    cell: &'static OnceLock<Option<AhoCorasick>>,
    words: &[&str],
    line: &str,
) -> bool {
    match cell.get_or_init(|| AhoCorasick::new(words).ok()) {
        Some(automaton) => automaton.is_match(line),
        // The automaton always builds from a short list of words; without it, search each.
        None => words.iter().any(|w| line.contains(w)),
    }
}

/// Which of several lists of words a line holds, as a bitmask (bit `k`: a word of list `k`):
/// one overlapping walk of one automaton over all the lists' words, where asking each list in
/// turn walks the line once per list (the hints ask several of every line of a log).
pub(crate) struct WordLists {
    automaton: Option<AhoCorasick>,
    /// The list of each word, by the automaton's pattern index.
    list_of: Vec<u32>,
    lists: &'static [&'static [&'static str]],
}

impl WordLists {
    /// At most 64 lists (one bit each); more are never asked.
    pub(crate) fn new(lists: &'static [&'static [&'static str]]) -> Self {
        let lists = lists.get(..lists.len().min(64)).unwrap_or_default();
        let mut words = Vec::new();
        let mut list_of = Vec::new();
        for (k, list) in lists.iter().enumerate() {
            for w in list.iter() {
                words.push(*w);
                list_of.push(k as u32);
            }
        }
        WordLists {
            automaton: AhoCorasick::new(&words).ok(),
            list_of,
            lists,
        }
    }

    /// Bit `k` set when `line` holds a word of list `k`.
    pub(crate) fn mask(&self, line: &str) -> u64 {
        let mut mask = 0u64;
        match &self.automaton {
            Some(automaton) => {
                for m in automaton.find_overlapping_iter(line) {
                    if let Some(k) = self.list_of.get(m.pattern().as_usize()) {
                        mask |= 1u64 << k;
                    }
                }
            }
            // The automaton always builds from short lists of words; without it, search each.
            None => {
                for (k, list) in self.lists.iter().enumerate() {
                    if list.iter().any(|w| line.contains(w)) {
                        mask |= 1u64 << k;
                    }
                }
            }
        }
        mask
    }
}

/// `line.to_ascii_lowercase().contains(needle)` for a lowercase ASCII `needle`, without the copy.
pub(crate) fn contains_caseless(line: &str, needle: &str) -> bool {
    let n = needle.as_bytes();
    n.is_empty()
        || line
            .as_bytes()
            .windows(n.len())
            .any(|w| w.eq_ignore_ascii_case(n))
}

/// Compile one of the parser's own patterns (each is tested, so it always compiles).
fn compile(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|e| unreachable!("static regex {pattern}: {e}"))
}

/// A size as logs print it: `2.00 GiB`, `1,024 MiB`, `1e26 GiB`, `375.40 MB`.
pub const SIZE: &str =
    r"([\d.,]+(?:[eE][+-]?\d+)?)\s?(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|K|M|G)\b";

/// `2.00 GiB` → bytes; `None` when it is not a number or beyond 16 EiB (kept as written then).
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

pub(crate) fn cap_size(c: &regex::Captures, i: usize) -> Option<u64> {
    size(c.get(i)?.as_str(), c.get(i + 1)?.as_str())
}

pub(crate) fn cap_u64(c: &regex::Captures, i: usize) -> Option<u64> {
    c.get(i)?.as_str().replace(',', "").parse().ok()
}

fn quote(s: &str) -> String {
    let t = s.trim();
    match t.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_string(),
    }
}

/// Read every event and the context markers from cleaned lines: each line is marked for the
/// context (stage, workload, model), then offered to the PyTorch reader, the engines' readers,
/// and last to the out-of-memory-words net.
pub fn scan(lines: &[String]) -> (Vec<Finding>, Context) {
    let mut st = Scan::default();
    for (i, line) in lines.iter().enumerate() {
        super::hints::mark(lines, i, &mut st.ctx, &mut st.memo);
        // The bounded reader's own marker (it names "out-of-memory words") is no event.
        let marker = line.starts_with(super::hints::SKIPPED_MARKER)
            || line.starts_with(super::hints::RESUMED_MARKER);
        let passed_over = st.memo.get(
            lines,
            i,
            |m| &mut m.passed_over,
            |l| !super::words::worth_reading(l) || super::words::negated(l),
        );
        if marker || passed_over != Some(false) || super::words::pinned_fallback(lines, i) {
            continue;
        }
        if super::torch::read(lines, i, &mut st)
            || super::catalogue::read(lines, i, &mut st)
            || super::engines::read(lines, i, &mut st)
        {
            continue;
        }
        super::words::unrecognised(lines, i, &mut st);
    }
    if st.findings.is_empty() {
        st.findings = std::mem::take(&mut st.unrecognised);
        // A full disk is what stopped the run when it is the log's error and the only memory
        // words are an unknown wording (windows-vibe-1168: a download failed with "not enough
        // space on the disk", and a tool's stray "fatal error: out of memory" in its details).
        if let Some((n, quote)) = disk_full(lines) {
            if st
                .findings
                .iter()
                .all(|f| matches!(f.event, Event::OomWords))
            {
                st.findings.clear();
                st.ctx.not_oom.push((
                    n,
                    format!("the disk was full ({quote}): storage, not memory — the out-of-memory words in it are not what stopped the run"),
                ));
            }
        }
    }
    if let Some((n, text)) = xpu_block_limit(lines, &st.findings) {
        st.findings.clear();
        st.ctx.not_oom.push((n, text));
    }
    if st.findings.is_empty() {
        st.findings
            .extend(super::engines::ends_at_allocation(lines));
    }
    if st.findings.is_empty() {
        st.findings.extend(super::engines::oom_killer_tasks(lines));
    }
    if st.findings.is_empty() && st.ctx.not_oom.is_empty() {
        st.ctx.unfinished = super::words::unfinished_traceback(lines);
    }
    if let Some((at, first)) = st.ctx.resumed {
        let by = first.saturating_sub(at + 1);
        st.ctx.shift_after(at, by);
        for f in st.findings.iter_mut().filter(|f| f.line > at) {
            f.line = f.line.saturating_add(by);
        }
    }
    (st.findings, st.ctx)
}

/// Intel's XPU runtime refuses any one allocation above 4 GB (`Current platform can NOT allocate
/// memory block with size larger than 4GB! Tried to allocate 5.46 GiB (GPU 0; 15.56 GiB total
/// capacity; 556.67 MiB already allocated; 2.70 GiB reserved …)`, ComfyUI-7004). When the request
/// would have fit beside what PyTorch holds, it is that platform limit, not memory run out; a
/// request larger than the card (ipex-llm-11798: 40 GiB on 15 GiB) stays an out-of-memory.
fn xpu_block_limit(lines: &[String], findings: &[Finding]) -> Option<(usize, String)> {
    static FIGURES: OnceLock<Regex> = OnceLock::new();
    let figures = re_built(&FIGURES, || {
        format!(
            r"larger than 4GB! Tried to allocate {SIZE} \(GPU\s+\d+; {SIZE} total capacity; {SIZE} already allocated;(?: {SIZE} free;)? {SIZE} reserved"
        )
    });
    let (n, c) = lines
        .iter()
        .enumerate()
        .find_map(|(n, l)| figures.captures(l).map(|c| (n, c)))?;
    // Only where the limit's line is the log's one finding: another reader's out-of-memory,
    // on that line or any other, stays.
    if findings.iter().any(|f| f.line != n + 1) {
        return None;
    }
    let (requested, total) = (cap_size(&c, 1)?, cap_size(&c, 3)?);
    let held = cap_size(&c, 9).or(cap_size(&c, 5)).unwrap_or(0);
    (requested.checked_add(held)? <= total).then(|| {
        (
            n + 1,
            format!(
                "the XPU runtime refuses one allocation above 4 GB: {} was asked with {} of {} held — it would have fit, so this is the platform's limit on one block, not memory run out",
                crate::units::Bytes(requested),
                crate::units::Bytes(held),
                crate::units::Bytes(total)
            ),
        )
    })
}

/// The first line that says the disk is full (ENOSPC in its spellings), with a short quote.
fn disk_full(lines: &[String]) -> Option<(usize, String)> {
    const WORDS: &[&str] = &[
        "No space left on device",
        "not enough space on the disk",
        "(os error 112)",
        "[Errno 28]",
        // huggingface_hub's download warning: "… only has 4489.36 MB free disk space"
        // (diffusers-5064).
        "MB free disk space",
    ];
    lines.iter().enumerate().find_map(|(i, l)| {
        WORDS
            .iter()
            .find(|w| l.contains(**w))
            .map(|w| (i + 1, (*w).to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    /// The memo answers what the function answers, line by line, for lines repeated in a row,
    /// apart, or not at all (a count of calls shows it runs once per distinct line).
    #[test]
    fn a_line_memo_answers_as_the_function_would() {
        let log = lines("a\na\nb\na\na\na\n\n\nbb\nb\nb");
        let mut memo = Memos::default();
        let (mut calls, mut other) = (0, 0);
        for i in 0..log.len() {
            let got = memo.get(
                &log,
                i,
                |m| &mut m.catalogue_row,
                |l| {
                    calls += 1;
                    Some(l.len())
                },
            );
            assert_eq!(got, Some(Some(log[i].len())), "line {i}");
            // Another look of the same line has its own answer in the slot.
            let got = memo.get(
                &log,
                i,
                |m| &mut m.oom_words,
                |l| {
                    other += 1;
                    l.contains('b')
                },
            );
            assert_eq!(got, Some(log[i].contains('b')), "line {i}");
        }
        assert_eq!((calls, other), (4, 4));
        assert_eq!(
            memo.get(&log, log.len(), |m| &mut m.oom_words, |_| true),
            None
        );
    }

    #[test]
    fn word_lists_answer_as_a_search_of_each_list_would() {
        const A: &[&str] = &["batch", "seq"];
        const B: &[&str] = &["KV cache", "total"];
        const C: &[&str] = &["seq_len"];
        static LISTS: &[&[&str]] = &[A, B, C];
        let lists = WordLists::new(LISTS);
        for line in [
            "",
            "batch_size=8, seq_len=4096",
            "GPU KV cache size: 1,024 tokens; total 80 GiB",
            "step 1 loss 2.0",
            "seq_len batch total",
            "ünïcode KV cache",
        ] {
            let want = LISTS
                .iter()
                .enumerate()
                .filter(|(_, l)| l.iter().any(|w| line.contains(w)))
                .fold(0u64, |m, (k, _)| m | 1 << k);
            assert_eq!(lists.mask(line), want, "{line}");
        }
    }

    #[test]
    fn caseless_contains_is_lowercased_contains() {
        for (line, needle) in [
            ("Exceeds the memory", "exceed"),
            ("EXCEED", "exceed"),
            ("exce ed", "exceed"),
            ("Out Of Device Memory", "out of device memory"),
            ("ünï OUT OF MEMORY", "out of memory"),
            ("", "oom"),
            ("x", ""),
        ] {
            assert_eq!(
                contains_caseless(line, needle),
                line.to_ascii_lowercase().contains(needle),
                "{line} / {needle}"
            );
        }
    }

    #[test]
    fn xpus_4gb_limit_on_one_block_is_not_memory_run_out_when_the_request_would_fit() {
        // ComfyUI-7004: 5.46 GiB asked with 2.70 GiB of 15.56 GiB reserved.
        let fits = "!!! Exception during processing !!! Current platform can NOT allocate memory block with size larger than 4GB! Tried to allocate 5.46 GiB (GPU  0; 15.56 GiB total capacity; 556.67 MiB already allocated; 2.70 GiB reserved in total by PyTorch)";
        let (f, ctx) = scan(&lines(fits));
        assert!(f.is_empty(), "{f:?}");
        assert!(ctx.not_oom[0].1.contains("4 GB"), "{:?}", ctx.not_oom);
        // ipex-llm-11798: 40 GiB asked of a 15.11 GiB card is memory run out whatever the limit.
        let larger = "RuntimeError: Current platform can NOT allocate memory block with size larger than 4GB! Tried to allocate 40.00 GiB (GPU  0; 15.11 GiB total capacity; 10.03 GiB already allocated; 10.12 GiB reserved in total by PyTorch)";
        let (f, ctx) = scan(&lines(larger));
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(ctx.not_oom.is_empty());
        // Another out-of-memory in the same log is not explained away by the limit's line.
        let both = format!("{fits}\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.12 GiB is free.");
        let (f, ctx) = scan(&lines(&both));
        assert!(!f.is_empty(), "{f:?}");
        assert!(ctx.not_oom.is_empty(), "{:?}", ctx.not_oom);
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
        // transformers 5.17 on the H200 with a second process holding 10.6 GiB (docs/accuracy.md).
        let log = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.07 GiB. GPU 0 has a total capacity of 139.80 GiB of which 104.60 GiB is free. Process 412 has 10.60 GiB memory in use. Including non-PyTorch memory, this process has 24.59 GiB memory in use. 24.00 GiB allowed; Of the allocated memory 21.63 GiB is allocated by PyTorch, and 2.29 GiB is reserved by PyTorch but unallocated.";
        let (f, _) = scan(&lines(log));
        let Event::TorchOom(t) = &f[0].event else {
            panic!()
        };
        assert_eq!(t.others(), (10.60 * (1u64 << 30) as f64) as u64);
        assert_eq!(t.allowed, Some(24 << 30));
    }

    #[test]
    fn a_listed_process_holding_all_in_use_is_this_one() {
        // vllm-15039 (tune): the worker's own figure, printed without "this process".
        let log = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB. GPU 2 has a total capacity of 79.33 GiB of which 16.00 MiB is free. Process 37008 has 79.29 GiB memory in use. Of the allocated memory 69.59 GiB is allocated by PyTorch, and 118.90 MiB is reserved by PyTorch but unallocated.";
        let (f, _) = scan(&lines(log));
        let Event::TorchOom(t) = &f[0].event else {
            panic!()
        };
        assert_eq!(t.others(), 0);
    }

    #[test]
    fn among_several_listed_processes_this_one_holds_its_reserve_and_a_context() {
        // trl-5207 (real-fresh): four test processes on one card, none called "this process".
        let log = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 76.00 MiB. GPU 0 has a total capacity of 14.74 GiB of which 42.19 MiB is free. Process 21219 has 284.00 MiB memory in use. Process 21222 has 3.40 GiB memory in use. Process 21213 has 258.00 MiB memory in use. Process 21216 has 10.77 GiB memory in use. Of the allocated memory 10.59 GiB is allocated by PyTorch, and 42.18 MiB is reserved by PyTorch but unallocated.";
        let (f, _) = scan(&lines(log));
        let Event::TorchOom(t) = &f[0].event else {
            panic!("{f:?}")
        };
        let mib = |x: f64| (x * (1u64 << 20) as f64) as u64;
        let others = t.others();
        assert!(
            others.abs_diff(mib(284.0 + 3.40 * 1024.0 + 258.0)) < mib(1.0),
            "{others}"
        );
        // Two candidates within a context of the reserve: which is this one is not known.
        let two = log.replace("Process 21222 has 3.40 GiB", "Process 21222 has 10.90 GiB");
        let (f, _) = scan(&lines(&two));
        let Event::TorchOom(t) = &f[0].event else {
            panic!("{f:?}")
        };
        assert_eq!(t.others(), 0);
    }

    #[test]
    fn a_wrapped_old_message_with_trailing_spaces_is_read_whole() {
        // transformers-starcoder-46: each wrapped line keeps its trailing space.
        let log = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.59 GiB (GPU 0; 31.75 GiB total capacity; \n23.14 GiB already allocated; 2.50 GiB free; 28.32 GiB reserved in total by PyTorch) \nIf reserved memory is >> allocated memory try setting max_split_size_mb";
        let (f, _) = scan(&lines(log));
        let Event::TorchOom(t) = &f[0].event else {
            panic!("{f:?}")
        };
        assert!(t.total.is_some() && t.free.is_some() && t.reserved_total.is_some());
    }

    #[test]
    fn ipythons_traceback_head_is_not_a_second_error() {
        // unsloth-465: Jupyter names the exception above the traceback, the message below.
        let log = "OutOfMemoryError                          Traceback (most recent call last)\n<ipython-input-7> in <cell line: 1>()\n----> 1 trainer_stats = trainer.train()\n\n13 frames\nx\nOutOfMemoryError: CUDA out of memory. Tried to allocate 9.47 GiB. GPU 0 has a total capacity of 14.75 GiB of which 3.78 GiB is free.";
        let (f, _) = scan(&lines(log));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].line, 7);
    }

    #[test]
    fn reads_the_old_pytorch_message_and_the_2_1_misspelling() {
        let log = "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.56 GiB already allocated; 3.19 MiB free; 14.67 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb";
        let (f, _) = scan(&lines(log));
        let Event::TorchOom(t) = &f[0].event else {
            panic!()
        };
        assert_eq!(t.requested, Some(20 << 20));
        assert!(t.reserved_unallocated.unwrap() > 100 << 20);
        let typo = "CUDA out of memory. Tried to allocate 128.00 GiB. GPU 0 has a total capacty of 23.65 GiB of which 7.95 GiB is free.";
        let (f, _) = scan(&lines(typo));
        let Event::TorchOom(t) = &f[0].event else {
            panic!()
        };
        assert!(t.total.is_some() && t.free.is_some());
    }

    #[test]
    fn an_absurd_size_is_kept_as_written() {
        let (f, _) = scan(&lines(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1e26 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.00 GiB is free.",
        ));
        let Event::TorchOom(t) = &f[0].event else {
            panic!()
        };
        assert_eq!(t.requested, None);
        assert_eq!(t.requested_as_written.as_deref(), Some("1e26 GiB"));
    }

    #[test]
    fn the_skip_marker_is_not_an_event() {
        let marker = format!("{}1064304640 bytes of input (kept the first 4096 KiB, the last 4096 KiB and the lines with out-of-memory words between; stopped reading after 1024 MiB)", super::super::hints::SKIPPED_MARKER);
        let (f, ctx) = scan(&lines(&marker));
        assert!(f.is_empty(), "{f:?}");
        assert_eq!(ctx.skipped_bytes, Some(1_064_304_640));
    }

    #[test]
    fn negations_and_look_alikes_are_not_events() {
        for s in [
            "no CUDA out of memory errors were seen",
            "finished: 0 OOM, 12 steps",
            "trained for 3 epochs without running out of memory",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            "Unable to allocate pinned system memory, pinned memory pool will not be available: CUDA driver version is insufficient for CUDA runtime version",
            // Advice vLLM prints at every start, and others like it.
            "INFO 05-01 worker.py:267] CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode.",
            "If out-of-memory error occurs during cudagraph capture, consider decreasing `gpu_memory_utilization`",
            "WARNING: setting a large batch may cause OOM on small cards",
        ] {
            assert!(scan(&lines(s)).0.is_empty(), "{s}");
        }
        // Allocation failures in wordings no reader knows are OOMs (unknown), never none.
        for s in [
            "FATAL: the frobnicator ran out of memory",
            "vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
            "VK_ERROR_OUT_OF_DEVICE_MEMORY",
            "[TRT] [E] 2: Requested amount of GPU memory (1073741824 bytes) could not be allocated. There may not be enough free memory for allocation to succeed.",
            "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
            "terminate called after throwing an instance of 'std::bad_alloc'",
            "MemoryError: Unable to allocate 7.45 GiB for an array",
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8589934592 bytes.",
            "OSError: [Errno 12] Cannot allocate memory",
        ] {
            let (f, _) = scan(&lines(s));
            assert_eq!(f.len(), 1, "{s}");
        }
    }

    #[test]
    fn the_figures_without_their_head_are_the_message() {
        // pytorch-fastmri-challenge-238: the paste starts at "Tried to allocate".
        let old = "Tried to allocate 216.00 MiB (GPU 0; 7.92 GiB total capacity; 69.17 MiB already allocated; 24.56 MiB free; 86.00 MiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb";
        let (f, _) = scan(&lines(old));
        let Event::TorchOom(t) = &f[0].event else {
            panic!("{f:?}")
        };
        assert_eq!(t.requested, Some(216 << 20));
        assert!(t.total.is_some() && t.reserved_total.is_some());
        let new = "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.12 GiB is free.";
        assert_eq!(scan(&lines(new)).0.len(), 1);
        // "Tried to allocate" alone (a Python MemoryError, an allocator's log) is not PyTorch's.
        let (f, _) = scan(&lines("numpy: Tried to allocate 2.00 GiB for an array"));
        assert!(
            f.iter().all(|f| !matches!(f.event, Event::TorchOom(_))),
            "{f:?}"
        );
    }

    #[test]
    fn a_repeated_message_does_not_lend_its_process_list_to_the_first() {
        // tgi-1356: the router echoes the message two lines below; one process, not two.
        let m = "CUDA out of memory. Tried to allocate 18.00 MiB. GPU 0 has a total capacty of 79.11 GiB of which 14.62 MiB is free. Process 124797 has 79.08 GiB memory in use. Of the allocated memory 78.11 GiB is allocated by PyTorch, and 131.85 MiB is reserved by PyTorch but unallocated.";
        let log = format!("torch.cuda.OutOfMemoryError: {m}\n\nERROR prefill: Server error: {m}");
        let (f, _) = scan(&lines(&log));
        let Event::TorchOom(t) = &f[0].event else {
            panic!("{f:?}")
        };
        assert_eq!(t.processes.len(), 1);
        assert_eq!(t.others(), 0);
        // vllm-7721: the retry's message (another pid) is not this one's other process.
        let retry = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 GiB. GPU 0 has a total capacity of 44.53 GiB of which 187.94 MiB is free. Process 3909982 has 44.34 GiB memory in use.\n\nchange it\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 GiB. GPU 0 has a total capacity of 44.53 GiB of which 187.94 MiB is free. Process 3910771 has 44.34 GiB memory in use.";
        let (f, _) = scan(&lines(retry));
        let Event::TorchOom(t) = &f[0].event else {
            panic!("{f:?}")
        };
        assert_eq!(t.processes, vec![(3_909_982, t.processes[0].1)]);
    }

    #[test]
    fn zero_bytes_in_use_beside_allocated_tensors_is_a_missing_figure() {
        // diffusers-regional-prompting-flux-13 (Windows): "this process has 0 bytes".
        let log = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacity of 23.43 GiB of which 4.06 MiB is free. Including non-PyTorch memory, this process has 0 bytes memory in use. Of the allocated memory 23.03 GiB is allocated by PyTorch, and 15.67 MiB is reserved by PyTorch but unallocated.";
        let (f, _) = scan(&lines(log));
        let Event::TorchOom(t) = &f[0].event else {
            panic!("{f:?}")
        };
        assert_eq!(t.this_process, None);
    }

    #[test]
    fn sizes() {
        assert_eq!(size("1,024", "MiB"), Some(1 << 30));
        assert_eq!(size("x", "MiB"), None);
        assert_eq!(size("1e30", "TB"), None);
    }
}
