//! What the surrounding log says about where and how it ran: the stage (frames and engine lines
//! near the error), the workload it states (`batch=`, `max_model_len`, `n_ctx`, …) and the model
//! it names. Keyword matching finds these lines; the verdict's arithmetic uses them.

use std::sync::{LazyLock, OnceLock};

use regex::Regex;
use serde::Serialize;

use super::parse::{cap_u64, re, size, Memos, WordLists};

/// The moment a line shows, for the stage rules of the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StageHint {
    /// Loading or converting weights (from_pretrained, a weight's `Parameter`, a repack).
    Load,
    /// Allocating the KV cache right after loading (exllamav2's cache, vLLM's KV tensors).
    CacheAlloc,
    /// Capturing CUDA graphs (`torch.cuda.graph`, `capture_end`, SGLang's CudaGraphRunner).
    GraphCapture,
    /// A profile or warm-up run (vLLM's `profile_run`, `_dummy_run`, a warm-up).
    Profile,
    /// An engine step while serving (vLLM's `engine_step`, `execute_model`).
    EngineStep,
    /// The model is loaded and the server is up.
    Serving,
    /// A pipeline's compute step on the loaded model: ComfyUI's sampling and VAE nodes
    /// (`Error occurred when executing VAEDecode`, `Node Type: KSampler`), a VAE's `decode`.
    PipelineStep,
    /// The engine says the weights finished loading ("Loaded 1324 weights", "Model loading took
    /// 14.9 GiB"): a load phase above it is over; it decides nothing itself.
    Loaded,
}

/// The part of memory an out-of-memory message names in its own words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Weights,
    KvCache,
    /// llama.cpp's context: its KV cache (sized by the context length) and compute buffer.
    Context,
    Activations,
}

/// What an out-of-memory line says did not fit, when it names one part and only one: "Not
/// enough memory for KV cache" (freetoken-2), a KV-cache manager's "No free blocks left"
/// (trtllm-694, `kvCacheManager.cpp`), "Failed to create context" (llamacpp-eullm-302),
/// "error loading model" (llamacpp-18642), a workspace or activation buffer. A line that names
/// two ("Insufficient VRAM for model and cache") names none.
pub fn named_part(line: &str) -> Option<Part> {
    match named_parts(line).as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

/// Every part an out-of-memory line names ("model and cache": two, which decides none).
pub fn named_parts(line: &str) -> Vec<Part> {
    const KV: &[&str] = &[
        "kv cache",
        "kv_cache",
        "kvcache",
        "kv-cache",
        "key-value cache",
        "cache block",
        "kv block",
        // shark-ai's KV pages (`CacheAllocationFailure … from PagePool`, base_attention_cache).
        "attention_cache",
        "attention cache",
        "cacheallocationfailure",
    ];
    const CONTEXT: &[&str] = &[
        "context too large",
        "create context",
        "create the llama context",
        "new_context_with_model",
        "init_from_model",
    ];
    const WEIGHTS: &[&str] = &[
        "model weights",
        "for the model",
        "for the weights",
        "load model",
        "loading model",
        "load the model",
        "load_model",
        "loading weights",
        "model buffer",
    ];
    const ACTIVATIONS: &[&str] = &["workspace", "activation", "compute buffer", "intermediate"];
    // A path's folders say where the code lives, its file what it does: ".../agent/workspace/
    // …/kvCacheManager.cpp" names the KV cache, not a workspace (trtllm-694).
    let l: String = line
        .split_whitespace()
        .map(|w| w.rsplit(['/', '\\']).next().unwrap_or(w))
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_lowercase();
    let has = |keys: &[&str]| keys.iter().any(|k| l.contains(k));
    // "model and cache", "model and its cache": the model with a cache is two parts.
    let model_and_cache = l.contains("model and") && l.contains("cache");
    [
        (has(KV) || model_and_cache, Part::KvCache),
        (!has(KV) && has(CONTEXT), Part::Context),
        (has(WEIGHTS) || model_and_cache, Part::Weights),
        (has(ACTIVATIONS), Part::Activations),
    ]
    .into_iter()
    .filter_map(|(yes, p)| yes.then_some(p))
    .collect()
}

/// The workload figures the log states, each the last value seen.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WorkloadHint {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq_len: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n_ctx: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_num_seqs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_seqs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel: Option<u64>,
    /// TensorRT-LLM's and others' build-time ceiling (`--max_batch_size 192`): the runtime
    /// buffers are sized for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_batch_size: Option<u64>,
}

impl WorkloadHint {
    pub fn is_empty(&self) -> bool {
        *self == WorkloadHint::default()
    }
}

/// The model the log names (a from_pretrained id, `--model`, an HF cache path, a GGUF name).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelHint {
    pub name: String,
    pub line: usize,
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
    /// Lines in the MLP, the attention or the logits (one big forward-pass buffer).
    pub activation_lines: Vec<usize>,
    /// Lines in the KV-cache update.
    pub cache_lines: Vec<usize>,
    /// Lines in the optimizer's step or its per-parameter state (Adam's `exp_avg`, `exp_avg_sq`).
    pub optimizer_lines: Vec<usize>,
    /// Lines in a vision encoder: transformers' `get_image_features` / `self.visual(…)` /
    /// `vision_tower`, vLLM's `_execute_mm_encoder`, llama.cpp's `clip_image_batch_encode`.
    pub vision_lines: Vec<usize>,
    /// Lines in a speculative-decoding draft model: vLLM's `spec_decode` / `EagleProposer`,
    /// llama.cpp's `common_speculative`, a `draft_model`.
    pub draft_lines: Vec<usize>,
    /// A loader that allocates for all the weights at once (transformers'
    /// `caching_allocator_warmup`): the one load whose single request can be tens of GiB.
    pub one_piece_load_lines: Vec<usize>,
    /// Every Python traceback frame line (`File "…", line N, in f`).
    pub py_frames: Vec<usize>,
    /// Python frames in a constructor (`in __init__`), not an optimizer's or a cache's.
    pub init_frames: Vec<usize>,
    /// Lines in a serving engine's per-step buffer resize (TensorRT-LLM's
    /// `RuntimeBuffers::reshape` / `prepareStep`).
    pub runtime_step_lines: Vec<usize>,
    /// `Exception in thread …` lines: a worker died.
    pub thread_exceptions: Vec<usize>,
    /// A line naming the batch and the sequence length (`batch= B seq= L`, `batch B prompt L`,
    /// `batch_size=B, seq_len=L`), last seen values with their line.
    pub batch_seq: Vec<(usize, u64, u64)>,
    /// Stage signals with their lines.
    pub stage_hints: Vec<(usize, StageHint)>,
    /// Lines that show a request served successfully (throughput, `Success`).
    pub served_ok: Vec<usize>,
    /// A loop's progress lines: `step 1180 loss 1.92`, `Iter 50`, a Trainer's `{'loss': 1.9, …}`.
    pub steps_done: Vec<usize>,
    pub workload: WorkloadHint,
    pub model: Option<ModelHint>,
    /// What the engine says the weights took once loaded, and what it left free: SGLang's
    /// `Load weight end … avail mem=X GB, mem usage=Y GB`, vLLM's `Loading model weights took
    /// Y GB` / `Model loading took Y GiB` — (line, weights, free after).
    pub weights_loaded: Option<(usize, u64, Option<u64>)>,
    /// The device's total and free memory as the program found it before allocating anything
    /// (TensorFlow's device discovery: `Total memory: 7.92GiB` / `Free memory: 190.31MiB`, or
    /// `totalMemory: 10.92GiB freeMemory: 10.76GiB`) — (line of the free figure, total, free).
    /// What was not free then was held by other processes.
    pub free_at_start: Option<(usize, u64, u64)>,
    /// The versions the log prints of who printed it, the last seen per engine (`engine_version`).
    #[serde(skip)]
    pub engine_versions: Vec<(super::parse::Source, String)>,
    /// vLLM's own figures for its KV cache, as its start-up lines state them.
    #[serde(skip)]
    pub vllm: VllmFigures,
    /// Lines where creating a CUDA context failed (`cuCtxCreate`, `cuDevicePrimaryCtxRetain`):
    /// a context needs a few hundred MiB before any tensor exists.
    pub context_create_lines: Vec<usize>,
    /// Bytes the reader skipped in the middle of an over-long input (its marker line).
    pub skipped_bytes: Option<u64>,
    /// The input went on past what the reader reads at most: bytes read before it stopped.
    #[serde(skip)]
    pub stopped_after: Option<u64>,
    /// Lines that look like a failure but are not an out-of-memory event (a SIGKILL that
    /// Kubernetes did not call OOMKilled), with what the `none` verdict says about them.
    pub not_oom: Vec<(usize, String)>,
    /// The header line of a Python traceback the log stops inside, when no line of the log says
    /// what failed (`words::unfinished_traceback`); set only for a log without any event.
    #[serde(skip)]
    pub unfinished: Option<usize>,
    /// A `Total memory:` figure waiting for the `Free memory:` line below it (line, bytes).
    #[serde(skip)]
    pending_total: Option<(usize, u64)>,
    /// The last `Found device` line (TensorFlow's device discovery).
    #[serde(skip)]
    found_device: Option<usize>,
    /// (the resume marker's line, the input's number of the line after it) in a skipped input.
    #[serde(skip)]
    pub resumed: Option<(usize, usize)>,
    /// The time order of the lines' own timestamps: the last key per format, and how many
    /// steps went forward and back (a log viewer that shows the newest line first).
    #[serde(skip)]
    pub clock: Clock,
}

/// What vLLM's start-up lines say about its KV cache, each the last value seen: the figures its
/// start-up check (`_check_enough_kv_cache_memory`) works from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VllmFigures {
    /// `gpu_memory_utilization` (the engine's config, "non-default args", `--gpu-memory-utilization`).
    pub utilization: Option<f64>,
    /// `GPU KV cache size: N tokens` (v1).
    pub kv_tokens: Option<u64>,
    /// `# GPU blocks: N` (v0): the KV tokens are N × the block size.
    pub gpu_blocks: Option<u64>,
    /// `block_size=N` / `'block_size': N` / `--block-size N`; vLLM's default is 16.
    pub block_size: Option<u64>,
    /// `Available KV cache memory: X GiB` (v1), `kv_cache_size=X GiB` (v0's profiling results).
    pub available_kv: Option<u64>,
    /// The card's total: `total_gpu_memory=X GiB` (v0's profiling results), PyTorch's
    /// `total capacity of X GiB` / `X GiB total capacity`.
    pub total: Option<u64>,
}

impl VllmFigures {
    /// The block size the log states, else vLLM's default (16).
    pub fn block(&self) -> u64 {
        self.block_size.filter(|&b| b > 0).unwrap_or(16)
    }

    /// The KV cache's tokens: stated, else the v0 blocks × the block size.
    pub fn tokens(&self) -> Option<u64> {
        self.kv_tokens
            .or_else(|| self.gpu_blocks.map(|n| n.saturating_mul(self.block())))
    }
}

fn vllm_figures(line: &str, words: u64, v: &mut VllmFigures) {
    static UTIL: OnceLock<Regex> = OnceLock::new();
    static TOKENS: OnceLock<Regex> = OnceLock::new();
    static BLOCKS: OnceLock<Regex> = OnceLock::new();
    static BLOCK: OnceLock<Regex> = OnceLock::new();
    static AVAIL: OnceLock<Regex> = OnceLock::new();
    static TOTAL: OnceLock<Regex> = OnceLock::new();
    if words & (1 << VLLM_BIT) == 0 {
        return;
    }
    let util = re(
        &UTIL,
        r#"gpu[_-]memory[_-]utilization['"]?\s*[=: ]\s*['"]?(0?\.\d+|1(?:\.0+)?)\b"#,
    );
    if let Some(u) = captures_with(line, &["utilization"], util).and_then(|c| c.get(1)) {
        v.utilization = u
            .as_str()
            .parse::<f64>()
            .ok()
            .filter(|u| *u > 0.0 && *u <= 1.0);
    }
    let tokens = re(&TOKENS, r"GPU KV cache size: ([\d,]+) tokens");
    if let Some(n) =
        captures_with(line, &["GPU KV cache size: "], tokens).and_then(|c| cap_u64(&c, 1))
    {
        v.kv_tokens = Some(n);
    }
    let blocks = re(&BLOCKS, r"# GPU blocks: (\d+)");
    if let Some(n) = captures_with(line, &["# GPU blocks: "], blocks).and_then(|c| cap_u64(&c, 1)) {
        v.gpu_blocks = Some(n);
    }
    let block = re(
        &BLOCK,
        r#"(?:block_size['"]?\s*[=:]|--block-size)\s*(\d+)\b"#,
    );
    if let Some(n) =
        captures_with(line, &["block_size", "--block-size"], block).and_then(|c| cap_u64(&c, 1))
    {
        v.block_size = Some(n).filter(|&b| b > 0);
    }
    let avail = re(
        &AVAIL,
        r"(?:Available KV cache memory: |kv_cache_size=)([\d.]+) ?(GiB|MiB|GB)",
    );
    if let Some(b) = captures_with(
        line,
        &["Available KV cache memory: ", "kv_cache_size="],
        avail,
    )
    .and_then(|c| size(c.get(1)?.as_str(), c.get(2)?.as_str()))
    {
        v.available_kv = Some(b);
    }
    let total = re(
        &TOTAL,
        r"(?:total_gpu_memory=|total capacity of )([\d.]+) ?(GiB|MiB|GB)|([\d.]+) ?(GiB|MiB|GB) total capacity",
    );
    if let Some(c) = captures_with(line, &["total_gpu_memory=", "total capacity"], total) {
        let b = match (c.get(1), c.get(2)) {
            (Some(n), Some(u)) => size(n.as_str(), u.as_str()),
            _ => c
                .get(3)
                .zip(c.get(4))
                .and_then(|(n, u)| size(n.as_str(), u.as_str())),
        };
        if let Some(b) = b.filter(|&b| b > 0) {
            v.total = Some(b);
        }
    }
}

/// `regex`'s captures on `line`, searched only when the line has one of `needles`, a literal
/// without which the regex cannot match (most lines have none, and a search costs little).
fn captures_with<'l>(
    line: &'l str,
    needles: &[&str],
    regex: &Regex,
) -> Option<regex::Captures<'l>> {
    needles
        .iter()
        .any(|n| line.contains(n))
        .then(|| regex.captures(line))
        .flatten()
}

/// The lines' timestamps in order, per format (ISO `2024-02-02 21:44:03`, vLLM's `INFO 02-03
/// 03:43:49`): two clocks in one paste are compared each with itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Clock {
    last: [Option<u64>; 2],
    forward: usize,
    back: usize,
}

impl Clock {
    fn tick(&mut self, line: &str) {
        let Some((format, key)) = timestamp(line) else {
            return;
        };
        if let Some(prev) = self.last[format] {
            if key > prev {
                self.forward += 1;
            } else if key < prev {
                self.back += 1;
            }
        }
        self.last[format] = Some(key);
    }

    /// The log is newest-first: its timestamps step back (twice at least) and never forward.
    pub fn reversed(&self) -> bool {
        self.back >= 2 && self.forward == 0
    }
}

/// A line's leading timestamp as (format, a key that orders it): ISO `YYYY-MM-DD HH:MM:SS(.ms)`
/// (bracketed or not, `T` or a space between), or a level and `MM-DD HH:MM:SS` (vLLM).
fn timestamp(line: &str) -> Option<(usize, u64)> {
    let t = line.trim_start().trim_start_matches('[').as_bytes();
    let num = |s: &[u8]| -> Option<u64> {
        s.iter().try_fold(0u64, |v, &b| {
            b.is_ascii_digit()
                .then(|| v.saturating_mul(10).saturating_add(u64::from(b - b'0')))
        })
    };
    // `MM-DD HH:MM:SS` at `at`, with the year in front when known.
    let clock = |at: usize, year: u64| -> Option<u64> {
        let s = t.get(at..at + 14)?;
        if s[2] != b'-' || s[8] != b':' || s[11] != b':' || !(s[5] == b' ' || s[5] == b'T') {
            return None;
        }
        let (mo, d) = (num(&s[0..2])?, num(&s[3..5])?);
        let (h, mi, se) = (num(&s[6..8])?, num(&s[9..11])?, num(&s[12..14])?);
        let ms = match t.get(at + 14..at + 18) {
            Some([b'.' | b',', a, b, c]) => num(&[*a, *b, *c]).unwrap_or(0),
            _ => 0,
        };
        let day = (year * 12 + mo) * 31 + d;
        Some(((day * 24 + h) * 60 + mi) * 60_000 + se * 1000 + ms)
    };
    if t.len() >= 19 && t[4] == b'-' {
        return Some((0, clock(5, num(&t[0..4])?)?));
    }
    let level = ["INFO ", "WARNING ", "ERROR ", "DEBUG "]
        .iter()
        .find(|l| t.starts_with(l.as_bytes()))?;
    Some((1, clock(level.len(), 0)?))
}

impl Context {
    /// Renumber every line after `at` by `by`: the kept end of a skipped input gets the line
    /// numbers it has in the input.
    pub fn shift_after(&mut self, at: usize, by: usize) {
        let s = |l: &mut usize| {
            if *l > at {
                *l = l.saturating_add(by);
            }
        };
        for v in [
            &mut self.load_lines,
            &mut self.generation_lines,
            &mut self.eager_attention_lines,
            &mut self.activation_lines,
            &mut self.cache_lines,
            &mut self.optimizer_lines,
            &mut self.py_frames,
            &mut self.init_frames,
            &mut self.one_piece_load_lines,
            &mut self.runtime_step_lines,
            &mut self.thread_exceptions,
            &mut self.served_ok,
            &mut self.steps_done,
            &mut self.context_create_lines,
        ] {
            v.iter_mut().for_each(s);
        }
        self.batch_seq.iter_mut().for_each(|b| s(&mut b.0));
        self.stage_hints.iter_mut().for_each(|h| s(&mut h.0));
        self.not_oom.iter_mut().for_each(|x| s(&mut x.0));
        if let Some(m) = &mut self.model {
            s(&mut m.line);
        }
        if let Some(w) = &mut self.weights_loaded {
            s(&mut w.0);
        }
        if let Some(f) = &mut self.free_at_start {
            s(&mut f.0);
        }
        if let Some(u) = &mut self.unfinished {
            s(u);
        }
    }
}

/// The marker `read_bounded` leaves where it skipped the middle of an input.
pub const SKIPPED_MARKER: &str = "[llm-oom] skipped ";
/// The marker before the kept end of a skipped input: the input's line number of the next line.
pub const RESUMED_MARKER: &str = "[llm-oom] the end of the input resumes at line ";

/// The words without which a hint below cannot be on a line, one list per hint: [`mark`] finds
/// which lists a line holds in one walk ([`hint_words`]) and each hint reads its bit.
const SERVED_BIT: u32 = 0;
const VLLM_BIT: u32 = 1;
const WORKLOAD_BIT: u32 = 2;
const WEIGHTS_BIT: u32 = 3;
const MODEL_BIT: u32 = 4;
const VERSION_BIT: u32 = 5;

/// A request served: throughput reports and a client's success line.
const SERVED_WORDS: &[&str] = &["Throughput (T/s)", ": Success", "Avg prompt throughput"];

/// vLLM's start-up figures (utilization, KV cache size, blocks, block size, memory totals).
const VLLM_WORDS: &[&str] = &[
    "tilization",
    "KV cache",
    "GPU blocks",
    "lock_size",
    "block-size",
    "kv_cache_size",
    "total_gpu_memory=",
    "total capacity",
];

/// The workload a line states (batch, sequence length, context, parallel slots).
const WORKLOAD_WORDS: &[&str] = &[
    "batch",
    "seq",
    "model_len",
    "model-len",
    "n_ctx",
    "parallel",
    "n_slots",
    "num_reqs",
];

/// An engine's report of the weights' footprint after loading (SGLang, vLLM).
const WEIGHTS_WORDS: &[&str] = &[
    "Load weight end",
    "oading model weights took",
    "Model loading took",
];

/// A model named on the line (a path, an id, a GGUF name, a command).
const MODEL_WORDS: &[&str] = &[
    "from_pretrained",
    "--model",
    "model_id",
    "model_name",
    "model-id",
    "serve ",
    "models--",
    "general.name",
    ".gguf",
    "-- Model:",
    "ollama run",
];

/// An engine's version (see [`engine_version`]): each alternative of its regex holds one of
/// these literally (`pytorch version: ` and the others with `version: `).
const VERSION_WORDS: &[&str] = &[
    "engine (v",
    "server version ",
    "build: ",
    "version: ",
    "text-generation-inference:",
    "(version ",
];

/// Which of the hints' word lists `line` holds: bit [`SERVED_BIT`], [`VLLM_BIT`],
/// [`WORKLOAD_BIT`], [`WEIGHTS_BIT`], [`MODEL_BIT`], [`VERSION_BIT`].
fn hint_words(line: &str) -> u64 {
    static LISTS: LazyLock<WordLists> = LazyLock::new(|| {
        WordLists::new(&[
            SERVED_WORDS,
            VLLM_WORDS,
            WORKLOAD_WORDS,
            WEIGHTS_WORDS,
            MODEL_WORDS,
            VERSION_WORDS,
        ])
    });
    LISTS.mask(line)
}

/// What a line's text alone says to [`mark`]: its hint words, its stage hint, whether it is a
/// progress line (pure functions of the text, so a line repeated verbatim reuses them).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Looks {
    words: u64,
    stage: Option<StageHint>,
    progress: bool,
    frame_keys: u16,
    /// The calls [`mark`] lists by line: bit 0 transformers' one-piece load
    /// (`caching_allocator_warmup`), bit 1 a CUDA context's creation, bit 2 TensorRT-LLM's
    /// runtime buffers of a step.
    calls: u8,
}

fn looks(line: &str) -> Looks {
    let call = |k: u8, words: &[&str]| {
        if words.iter().any(|w| line.contains(w)) {
            1 << k
        } else {
            0
        }
    };
    Looks {
        calls: call(0, &["caching_allocator_warmup"])
            | call(1, &["cuCtxCreate", "cuDevicePrimaryCtxRetain"])
            | call(
                2,
                &["RuntimeBuffers::reshape", "RuntimeBuffers::prepareStep"],
            ),
        words: hint_words(line),
        frame_keys: frame_keys(line),
        stage: stage_hint(line),
        progress: progress(line),
    }
}

/// Mark line `i`'s context: frames, stage signals, workload and model. `memo` holds the
/// [`Looks`] of the lines marked, by their text.
pub(crate) fn mark(lines: &[String], i: usize, ctx: &mut Context, memo: &mut Memos) {
    let seen = memo.get(lines, i, |m| &mut m.looks, looks);
    let (Some(line), Some(seen)) = (lines.get(i), seen) else {
        return;
    };
    let (line, n, words) = (line.as_str(), i + 1, seen.words);
    frames(line, seen.frame_keys, n, ctx);
    ctx.clock.tick(line);
    if let Some(h) = seen.stage {
        ctx.stage_hints.push((n, h));
    }
    if words & (1 << SERVED_BIT) != 0 {
        ctx.served_ok.push(n);
    }
    if seen.progress {
        ctx.steps_done.push(n);
    }
    workload(line, words, n, ctx);
    vllm_figures(line, words, &mut ctx.vllm);
    device_at_start(line, n, ctx);
    if let Some((engine, v)) = engine_version(line, words) {
        ctx.engine_versions.retain(|e| e.0 != engine);
        ctx.engine_versions.push((engine, v));
    }
    let lists = [
        &mut ctx.one_piece_load_lines,
        &mut ctx.context_create_lines,
        &mut ctx.runtime_step_lines,
    ];
    for (k, v) in lists.into_iter().enumerate() {
        if seen.calls & (1 << k) != 0 {
            v.push(n);
        }
    }
    if let Some(w) = weights_loaded(line, words) {
        ctx.weights_loaded = Some((n, w.0, w.1));
    }
    if ctx.model.is_none() {
        ctx.model = model(line, words).map(|name| ModelHint { name, line: n });
    }
    if let Some(rest) = line.strip_prefix(RESUMED_MARKER) {
        ctx.resumed = rest.trim().parse().ok().map(|at| (n, at));
    }
    if let Some(rest) = line.strip_prefix(SKIPPED_MARKER) {
        ctx.skipped_bytes = rest.split(' ').next().and_then(|s| s.parse().ok());
        ctx.stopped_after = rest
            .split("stopped reading after ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|m| m.parse::<u64>().ok())
            .map(|mib| mib.saturating_mul(1 << 20));
    }
}

/// A training or serving loop's progress line: `step 1180 loss 1.92`, `Iter 50: …`,
/// `iteration 7/100`, a Trainer's `{'loss': 1.9, 'learning_rate': …}`.
fn progress(line: &str) -> bool {
    static PROGRESS: OnceLock<Regex> = OnceLock::new();
    re(
        &PROGRESS,
        r#"(?i)^(?:\[[^\]]{0,40}\]:?\s*)?\W{0,8}(?:global[_ ])?(?:step|iter(?:ation)?)\s*[:=#]?\s*\d+|^\s*\{['"]loss['"]\s*:"#,
    )
    .is_match(line)
}

/// Which lists of frame keys of [`frames`] `line` holds: bit `k` for list `k` (load,
/// generation, eager attention, MLP, cache, optimizer, vision, draft), bit 8 for a thread's
/// exception. A pure function of the text, so [`Looks`] keeps it for a repeated line.
fn frame_keys(line: &str) -> u16 {
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
        // A diffusers pipeline moved to the device moves every component's weights.
        "pipe.to(",
        ".cuda()",
        // ComfyUI's model patcher puts each weight on the device as it loads a model.
        "patch_weight_to_device",
        // vLLM's layers create their parameters (`create_weights`) when the model is built.
        "in create_weights",
        // torch.nn's layers create their parameters when a model is built on the device
        // (vllm-omni-919: `torch.empty((out_features, in_features), **factory_kwargs)` in
        // Linear.__init__; Embedding's twin).
        "torch.empty((out_features, in_features)",
        "torch.empty((num_embeddings, embedding_dim)",
        // A model's own __init__ building its layers on the device (pyllama-28:
        // `self.w3 = nn.Linear(dim, hidden_dim, bias=False)`).
        "= nn.Linear(",
        "= nn.Embedding(",
        // A parallel layer creating its weight in its constructor (fairscale's and Meta's
        // `ColumnParallelLinear`: `self.weight = Parameter(torch.Tensor(…))`, llama-stack-apps-86).
        "self.weight = Parameter(",
        // Module.to / .cuda / .half move every parameter through `_apply(convert)`.
        "in _apply",
        "self._apply(",
        "param_applied = fn(param)",
        // Module.to's `convert` (text-generation-webui's one-click install, textgen-15).
        "return t.to(device, dtype if t.is_floating_point()",
        // candle / mistral.rs (Rust backtraces): weights read from safetensors.
        "MmapedSafetensors",
        "var_builder",
        "VarBuilder",
        // Weights made whole outside a load: DeepSpeed ZeRO-3 gathering a module's partitioned
        // parameters before its forward, a LoRA adapter merged into its base weights, FSDP's
        // state dict cloning each full parameter.
        "fetch_sub_module",
        "_allgather_params",
        "merge_and_unload",
        "_merge_lora",
        "Failed to clone() tensor with name",
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
        "baddbmm",
        "softmax(",
        ".unfold(",
        "cross_entropy(output.float()",
        // The loss over the logits (peft-Firefly-33: `torch._C._nn.cross_entropy_loss`).
        "cross_entropy_loss(",
        "logits = logits",
        "self.mlp(",
        // vLLM's and SGLang's activation layers (SiluAndMul, GeluAndMul): one MLP buffer.
        "layers/activation.py",
        "layers\\activation.py",
    ];
    const CACHE: &[&str] = &[
        "cache_utils.py",
        "past_key_values.update",
        "DynamicCache",
        "self.keys = torch.cat",
        "key_cache",
        "prompt_cache",
        // The legacy tuple cache of older transformers models (llama, mistral, gpt2 …).
        "torch.cat([past_key_value",
        "torch.cat((past_key",
    ];
    // Adam's per-parameter states are created on the first step and used in every one.
    const OPTIMIZER: &[&str] = &[
        "exp_avg",
        "_init_group",
        "_single_tensor_adam",
        "_multi_tensor_adam",
        "_fused_adam",
        "optimizer.step(",
        "_take_model_step",
        // DeepSpeed ZeRO's fp32 master copy, made as the optimizer is set up.
        "_create_fp32_partitions",
        "single_partition_of_fp32_groups",
    ];
    // The encoder of a vision-language model (transformers' Qwen-VL `self.visual(`, Gemma-3 and
    // LLaVA `get_image_features` / `vision_tower`; vLLM V1's `_execute_mm_encoder` and models'
    // `embed_multimodal`; llama.cpp's mtmd `clip_image_batch_encode`).
    const VISION: &[&str] = &[
        "get_image_features",
        "vision_tower(",
        "self.visual(",
        "_execute_mm_encoder",
        "embed_multimodal",
        "_process_image_input",
        "clip_image_batch_encode",
        "VisionAttention",
    ];
    // A draft model for speculative decoding (vLLM's `spec_decode/` and `EagleProposer`,
    // llama.cpp's `common_speculative_init`, transformers' assistant `draft_model`).
    const DRAFT: &[&str] = &[
        "spec_decode/",
        "EagleProposer",
        "draft_model",
        "common_speculative",
        "load draft model",
    ];
    // One walk of the line for the nine lists: most lines of a long log have no key, and a
    // traceback's every frame has one.
    static LISTS: LazyLock<WordLists> = LazyLock::new(|| {
        WordLists::new(&[
            LOAD,
            GENERATION,
            EAGER,
            ACTIVATION,
            CACHE,
            OPTIMIZER,
            VISION,
            DRAFT,
            &["Exception in thread"],
        ])
    });
    // nine lists: bits 0-8
    u16::try_from(LISTS.mask(line) & 0x1ff).unwrap_or(0)
}

/// The traceback frames the older rules use (load, generation, eager attention, MLP, cache):
/// `keys` is the line's [`frame_keys`].
fn frames(line: &str, keys: u16, n: usize, ctx: &mut Context) {
    // mistral.rs prints its backtrace inline: `Backtrace [{ fn: "…::dequantize_f16" }, …]`.
    if rust_frame(line) || line.contains("Backtrace [{ fn: ") {
        rust_frame_part(line, n, ctx);
    }
    python_frame(line, n, ctx);
    if keys == 0 {
        return;
    }
    let lists: [&mut Vec<usize>; 8] = [
        &mut ctx.load_lines,
        &mut ctx.generation_lines,
        &mut ctx.eager_attention_lines,
        &mut ctx.activation_lines,
        &mut ctx.cache_lines,
        &mut ctx.optimizer_lines,
        &mut ctx.vision_lines,
        &mut ctx.draft_lines,
    ];
    for (k, v) in lists.into_iter().enumerate() {
        if keys & (1 << k) != 0 {
            v.push(n);
        }
    }
    if keys & (1 << 8) != 0 {
        ctx.thread_exceptions.push(n);
    }
}

/// A Python traceback's frame line, `File "…/x.py", line 101, in __init__`: every one is kept
/// (the innermost above an error is the last), and a constructor's (`in __init__`) is kept
/// apart — an optimizer's constructor (ZeRO's fp32 master copy of the weights: colossalai's
/// `low_level_optim.py … in __init__`, DeepSpeed's `_create_fp32_partitions`) as the optimizer.
fn python_frame(line: &str, n: usize, ctx: &mut Context) {
    let t = line.trim_start();
    if !t.starts_with("File \"") {
        return;
    }
    let Some((path, func)) = t.rsplit_once(", in ") else {
        return;
    };
    ctx.py_frames.push(n);
    if func.trim_end() != "__init__" {
        return;
    }
    let path = path.to_ascii_lowercase();
    if path.contains("optim") {
        ctx.optimizer_lines.push(n);
    } else if !path.contains("cache") {
        ctx.init_frames.push(n);
    }
}

/// A frame of a native backtrace: Rust's `   3: attention_rs::workspace::cuda::get_moe_pool`,
/// or C++'s `2       0x7f5884df817a tensorrt_llm::batch_manager::kv_cache_manager::…`.
fn rust_frame(line: &str) -> bool {
    // docker compose prefixes each line with its service: `vllmrs-p  |    4: <…>::sdp_prefill`.
    let line = match line.split_once(" | ") {
        Some((service, rest))
            if !service.trim().is_empty()
                && service
                    .trim()
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) =>
        {
            rest
        }
        _ => line,
    };
    let t = line.trim_start();
    if !t.as_bytes().first().is_some_and(u8::is_ascii_digit) {
        return false;
    }
    let rust = t
        .split_once(": ")
        .is_some_and(|(num, path)| num.bytes().all(|b| b.is_ascii_digit()) && path.contains("::"));
    let native = || {
        let mut w = t.split_whitespace();
        let num = w
            .next()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        num && w.next().is_some_and(|a| a.starts_with("0x"))
            && w.next().is_some_and(|f| f.contains("::"))
    };
    rust || native()
}

/// What a Rust frame was doing (candle, mistral.rs and the engines on them): appending to a KV
/// cache, or a layer's forward pass and its workspaces (activations). Weight loaders are marked
/// by the stage hints (`MmapedSafetensors`, `VarBuilder`).
fn rust_frame_part(line: &str, n: usize, ctx: &mut Context) {
    let l = line.to_ascii_lowercase();
    if l.contains("kv_cache") || l.contains("kvcache") || l.contains("paged_attention") {
        ctx.cache_lines.push(n);
    } else if l.contains("::forward")
        || l.contains("activation")
        || l.contains("workspace")
        // A prefill's attention (vllm.rs' `PagedAttention>::sdp_prefill`, xinfer-118) and a
        // quantized matmul's dequantized copy (candle's `QMatMul::dequantize_f16`, mistral.rs-329)
        // are the forward pass's transient tensors.
        || l.contains("sdp_prefill")
        || l.contains("::dequantize")
    {
        ctx.activation_lines.push(n);
    }
}

/// The stage a line signals, most specific first (a cache allocation is also under a load; the
/// end of loading is worded like loading: "Loading model weights took").
fn stage_hint(line: &str) -> Option<StageHint> {
    const HINTS: &[(StageHint, &[&str])] = &[
        (
            StageHint::Loaded,
            &[
                "Loaded ",
                "loaded in ",
                "oading model weights took",
                "Model loading took",
                "Load weight end",
                "eights loaded",
                "inished loading",
                "Successfully loaded",
                // ComfyUI's model management.
                "loaded completely",
                "loaded partially",
            ],
        ),
        (
            StageHint::CacheAlloc,
            &[
                "create_state_tensors",
                "ExLlamaV2Cache(",
                "_allocate_kv_cache",
                "initialize_kv_cache",
                "init_memory_pool",
                "_init_cache_engine",
                "CacheEngine(",
                // vLLM's count of KV blocks (v0) / the cache's size (v1), printed as it
                // allocates them.
                "# GPU blocks:",
                "GPU KV cache size:",
                "Available KV cache memory:",
                // tt-metal's progress bar as it allocates each layer's cache (tt-metal-21904).
                "Allocating TT kv caches",
            ],
        ),
        (
            StageHint::GraphCapture,
            &[
                "torch.cuda.graph",
                "capture_end",
                "Capture cuda graph",
                "capture_one_batch_size",
                "CudaGraphRunner",
                "capture_model",
                "cudagraph_capture",
                // vLLM's and others' own words as they start capturing.
                "Capturing the model for CUDA graphs",
                "Capturing CUDA graph",
                "Capturing cudagraph",
                // vLLM's advice when the CUDA graphs' memory estimate fell short (vllm-57595).
                "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS",
            ],
        ),
        (
            StageHint::Load,
            &[
                "from_pretrained",
                "_load_pretrained_model",
                "caching_allocator_warmup",
                "load_state_dict",
                "quantize_4bit",
                "load_checkpoint_and_dispatch",
                "Parameter(torch.empty",
                "in create_weights",
                "Failed to create unquantized linear weights",
                "patch_weight_to_device",
                "gptq_marlin_repack",
                "process_weights_after_loading",
                "load_weights",
                "weight_loader",
                "Loading checkpoint shards",
                "Loading model",
                "load_tensors",
                // MLC's chat CLI loads the weights onto the device here (mlc-llm-38).
                "Initializing the chat module",
                // A server's scheduler reporting the load it was doing failed (mlx-serve-13:
                // `[scheduler] model load failed: EngineOpenFailed` under ds4's Metal warm-up).
                "model load failed",
                "self._apply(",
                "param_applied = fn(param)",
                "return t.to(device, dtype if t.is_floating_point()",
                // ComfyUI patches LoRA weights as it moves a model onto the GPU (ComfyUI-11144).
                "ERROR lora ",
                "MmapedSafetensors",
                "var_builder",
                "VarBuilder",
                // mistral.rs quantizes the weights in place while loading (ISQ).
                "/isq.rs",
                "isq::",
                // GPTQ's per-layer line while it quantizes a loaded model (lit-llama-148).
                "quantizing time",
                // ComfyUI's loader nodes (MistoControlNet-Flux-dev-11: `Error occurred when
                // executing LoadTheMistoFluxControlNet`; CheckpointLoaderSimple, UNETLoader).
                "executing Load",
                "executing CheckpointLoader",
                "executing UNETLoader",
            ],
        ),
        (
            StageHint::PipelineStep,
            &[
                "executing VAEDecode",
                "executing VAEEncode",
                "executing KSampler",
                "executing SamplerCustom",
                "Node Type:** VAEDecode",
                "Node Type:** VAEEncode",
                "Node Type:** KSampler",
                "Node Type:** SamplerCustom",
                "vae.decode(",
                "decode_tiled",
            ],
        ),
        (
            StageHint::Profile,
            &[
                "profile_run",
                "_dummy_run",
                "_dummy_sampler_run",
                "determine_num_available_blocks",
                "determine_available_memory",
                "in warmup",
                "warming up",
                "Warming up",
                // vLLM V1 compiles the model inside its profile run.
                "Dynamo bytecode transform",
                "Compiling a graph for",
            ],
        ),
        (
            StageHint::EngineStep,
            &[
                "engine_step",
                "execute_model",
                "start_worker_execution_loop",
                "run_engine_loop",
                "step_with_batch_queue",
            ],
        ),
        (
            StageHint::Serving,
            &[
                "Model loaded",
                "Serving on",
                "Graph capturing finished",
                "Application startup complete",
                "Uvicorn running",
            ],
        ),
    ];
    if weight_named_error(line) {
        return Some(StageHint::Load);
    }
    // One walk of the line for every list; the first list (in `HINTS`' order) with a key wins.
    static KEYS: LazyLock<Vec<&'static [&'static str]>> =
        LazyLock::new(|| HINTS.iter().map(|(_, keys)| *keys).collect());
    static LISTS: LazyLock<WordLists> = LazyLock::new(|| WordLists::new(&KEYS));
    match LISTS.mask(line) {
        0 => loading_words(line).then_some(StageHint::Load),
        mask => HINTS.get(mask.trailing_zeros() as usize).map(|(h, _)| *h),
    }
}

/// A model patcher's error line that names the parameter it was moving (Fooocus-1341: `ERROR
/// diffusion_model.output_blocks.2.0.out_layers.3.weight MPS backend out of memory`, as
/// ComfyUI's `ERROR lora …`): the weights were going onto the device.
fn weight_named_error(line: &str) -> bool {
    let Some(rest) = line.trim_start().strip_prefix("ERROR ") else {
        return false;
    };
    rest.split_whitespace().next().is_some_and(|name| {
        name.contains('.') && (name.ends_with(".weight") || name.ends_with(".bias"))
    })
}

/// Any engine's words for loading the model: "Loading bmodel from …" (a TPU runtime),
/// "loading weights", "Loading the checkpoint", `load_model(` — a phase, when no key above
/// named one.
fn loading_words(line: &str) -> bool {
    static LOADING: OnceLock<Regex> = OnceLock::new();
    if !line.contains("oad") {
        return false;
    }
    re(
        &LOADING,
        r"(?i)(?-u:\b)load(?:ing)?[ _](?:the |a )?(?:[a-z0-9.-]+ )?(?:b?model|weights|checkpoint|safetensors)(?-u:\b)",
    )
    .is_match(line)
}

/// TensorFlow's device discovery, before it allocates: `Total memory: 7.92GiB` then `Free
/// memory: 190.31MiB` on the next lines (TF 1.x), or both on one line (`totalMemory: 10.92GiB
/// freeMemory: 10.76GiB`). A total seen waits for its free figure.
fn device_at_start(line: &str, n: usize, ctx: &mut Context) {
    static TOTAL: OnceLock<Regex> = OnceLock::new();
    static FREE: OnceLock<Regex> = OnceLock::new();
    if line.contains("Found device") {
        ctx.found_device = Some(n);
    }
    // Only the figures of a device just found: a host's `Total memory:` is not the card's.
    let found = ctx.found_device.is_some_and(|d| n - d <= 8);
    if !found || !line.contains("emory:") {
        return;
    }
    let figure = |cell: &'static OnceLock<Regex>, pattern: &str| {
        re(cell, pattern)
            .captures(line)
            .and_then(|c| size(c.get(1)?.as_str(), c.get(2)?.as_str()))
    };
    let total = r"(?i)\btotal[ _]?memory:\s*([\d.]+)\s?(GiB|MiB|KiB|GB|MB)\b";
    if let Some(total) = figure(&TOTAL, total) {
        ctx.pending_total = Some((n, total));
    }
    let free = figure(
        &FREE,
        r"(?i)\bfree[ _]?memory:\s*([\d.]+)\s?(GiB|MiB|KiB|GB|MB)\b",
    );
    if let (Some(free), Some((at, total))) = (free, ctx.pending_total) {
        if n - at <= 3 && free <= total {
            ctx.free_at_start.get_or_insert((n, total, free));
        }
    }
}

/// The workload figures a line states; most lines have none, so a cheap look comes first.
fn workload(line: &str, words: u64, n: usize, ctx: &mut Context) {
    static BATCH_SEQ: OnceLock<Regex> = OnceLock::new();
    static FIGURES: OnceLock<Regex> = OnceLock::new();
    if words & (1 << WORKLOAD_BIT) == 0 {
        return;
    }
    // A program's own line naming its batch and its sequence length: `batch= 8 seq= 4096`,
    // `batch 48 prompt 2048`, `batch_size=8, seq_len=4096`.
    let batch_seq = re(
        &BATCH_SEQ,
        r"(?i)\bbatch(?:_size)?\s*[=:]?\s*(\d+)\s*[,;]?\s+(?:seq(?:_len)?|prompt(?:_len|_tokens)?|tokens|length)\s*[=:]?\s*(\d+)",
    );
    if let Some(c) = batch_seq.captures(line) {
        if let (Some(b), Some(s)) = (cap_u64(&c, 1), cap_u64(&c, 2)) {
            ctx.batch_seq.push((n, b, s));
        }
    }
    let figures = re(
        &FIGURES,
        r"(?x)
        (?:\bbatch(?:_size)?\s*[=:]\s*|--batch-size[=\s]+)(?P<batch>\d+)
        | \bseq(?:_len|uence_length)?\s*=\s*(?P<seq>\d+)
        | (?:max[_-]model[_-]len[=\s]+|max\ seq\ len\ \()(?P<mml>\d+)
        | n_ctx(?:_seq|_slot)?\s*[=(:]\s*\(?(?P<nctx>\d+)
        | max[_-]num[_-]seqs[=\s]+(?P<mns>\d+)
        | \bnum_(?:seqs|reqs)\s*=\s*(?P<ns>\d+)
        | (?:--parallel[=\s]+|\s-np\s+|n_slots\s*=\s*)(?P<par>\d+)
        | max[_-]batch[_-]size(?:\s*[=:]\s*|\s+)(?P<mbs>\d+)",
    );
    let w = &mut ctx.workload;
    for c in figures.captures_iter(line) {
        let get = |k: &str| c.name(k).and_then(|m| m.as_str().parse::<u64>().ok());
        let slots: [(&str, &mut Option<u64>); 8] = [
            ("batch", &mut w.batch),
            ("seq", &mut w.seq_len),
            ("mml", &mut w.max_model_len),
            ("nctx", &mut w.n_ctx),
            ("mns", &mut w.max_num_seqs),
            ("ns", &mut w.num_seqs),
            ("par", &mut w.parallel),
            ("mbs", &mut w.max_batch_size),
        ];
        for (k, slot) in slots {
            if let Some(v) = get(k) {
                *slot = Some(v);
            }
        }
    }
}

/// The weights' footprint an engine reports after loading: (weights, free after).
fn weights_loaded(line: &str, words: u64) -> Option<(u64, Option<u64>)> {
    static SGLANG: OnceLock<Regex> = OnceLock::new();
    static VLLM: OnceLock<Regex> = OnceLock::new();
    if words & (1 << WEIGHTS_BIT) == 0 {
        return None;
    }
    let sglang = re(
        &SGLANG,
        r"Load weight end\..*?avail mem=([\d.]+) GB, mem usage=([\d.]+) GB",
    );
    if let Some(c) = sglang.captures(line) {
        let gb = |i: usize| c.get(i).and_then(|m| size(m.as_str(), "GB"));
        return Some((gb(2)?, gb(1)));
    }
    let vllm = re(
        &VLLM,
        r"(?:Loading model weights|Model loading) took ([\d.]+) ?(GiB|GB)",
    );
    let c = vllm.captures(line)?;
    Some((size(c.get(1)?.as_str(), c.get(2)?.as_str())?, None))
}

/// The version an engine prints of itself at start-up: vLLM's `Initializing a V1 LLM engine
/// (v0.9.1)` / `vLLM API server version 0.8.4`, llama.cpp's `build: 5908 (538cc77f) with …`,
/// `TensorRT-LLM version: 0.11.0`, TGI's image tag `text-generation-inference:3.2.1`, ollama's
/// `Listening on … (version 0.1.33)`, `ComfyUI version: 0.3.15`, `PyTorch version: 2.6.0`.
fn engine_version(line: &str, words: u64) -> Option<(super::parse::Source, String)> {
    use super::parse::Source;
    static VERSION: OnceLock<Regex> = OnceLock::new();
    if words & (1 << VERSION_BIT) == 0 {
        return None;
    }
    let v = re(
        &VERSION,
        r#"(?x)
        LLM\ engine\ \(v(?P<vllm>\d[\w.+-]*)\)
        | vLLM\ API\ server\ version\ (?P<vllm2>\d[\w.+-]*)
        | \bbuild:\ (?P<llama>\d+\ \([0-9a-f]+\))\ with
        | TensorRT-LLM\ version:\ (?P<trt>\d[\w.+-]*)
        | text-generation-inference:(?P<tgi>\d[\w.+-]*)
        | Listening\ on\ .*\(version\ (?P<ollama>\d[\w.+-]*)\)
        | ComfyUI\ version:\ (?P<comfy>\d[\w.+-]*)
        | (?i:pytorch)\ version:\ (?P<torch>\d[\w.+-]*)"#,
    );
    let c = v.captures(line)?;
    [
        ("vllm", Source::Vllm),
        ("vllm2", Source::Vllm),
        ("llama", Source::LlamaCpp),
        ("trt", Source::TensorrtLlm),
        ("tgi", Source::Tgi),
        ("ollama", Source::Ollama),
        ("comfy", Source::Comfyui),
        ("torch", Source::Pytorch),
    ]
    .into_iter()
    .find_map(|(k, s)| c.name(k).map(|m| (s, m.as_str().to_string())))
}

/// The model a line names, if any.
fn model(line: &str, words: u64) -> Option<String> {
    static MODEL: OnceLock<Regex> = OnceLock::new();
    if words & (1 << MODEL_BIT) == 0 {
        return None;
    }
    let m = re(
        &MODEL,
        r#"(?x)
        from_pretrained\(\s*["'](?P<a>[\w.\-/]+)["']
        | --model(?:[-_](?:path|id|name(?:[-_]or[-_]path)?))?[=\s]+(?P<b>[\w.\-/:]+)
        | (?:model_id|model_name(?:_or_path)?)\s*[=:]\s*["'](?P<i>[\w.\-/]+)["']
        | vllm\ serve\s+(?P<c>[\w.\-/]+)
        | models--(?P<d>[\w.\-]+--[\w.\-]+)
        | general\.name\s+str\s+=\s+(?P<e>\S.*?)\s*$
        | (?P<f>[\w.\-]+\.gguf)
        | --\ Model:\s+(?P<g>\S+)
        | ollama\ run\s+(?P<h>\S+)"#,
    );
    let c = m.captures(line)?;
    let name = ["a", "b", "c", "d", "e", "f", "g", "h", "i"]
        .iter()
        .find_map(|k| c.name(k))?
        .as_str();
    Some(name.replace("--", "/").trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vllms_kv_figures() {
        let mut v = VllmFigures::default();
        for l in [
            // vllm-10517's profiling line (v0)
            "Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=17.98GiB memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=2.89GiB gpu_memory_utilization=0.90",
            "# GPU blocks: 1478, # CPU blocks: 2048",
        ] {
            vllm_figures(l, hint_words(l), &mut v);
        }
        assert_eq!(v.utilization, Some(0.9));
        assert_eq!(v.total, size("23.58", "GiB"));
        assert_eq!(v.available_kv, size("2.89", "GiB"));
        assert_eq!((v.block(), v.tokens()), (16, Some(23_648)));
        let mut v = VllmFigures::default();
        for l in [
            "(EngineCore_DP0 pid=1) INFO 09-02 [arg_utils.py:1] non-default args: {'model': 'x', 'block_size': 32, 'gpu_memory_utilization': 0.85}",
            "(EngineCore_DP0 pid=1) INFO 09-02 [gpu_worker.py:276] Available KV cache memory: 2.51 GiB",
            "(EngineCore_DP0 pid=1) INFO 09-02 [kv_cache_utils.py:1] GPU KV cache size: 20,544 tokens",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.00 GiB is free.",
            // vLLM's advice names the flag without a value: not a utilization
            "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
        ] {
            vllm_figures(l, hint_words(l), &mut v);
        }
        assert_eq!(v.utilization, Some(0.85));
        assert_eq!(v.block(), 32);
        assert_eq!(v.tokens(), Some(20_544));
        assert_eq!(v.available_kv, size("2.51", "GiB"));
        assert_eq!(v.total, size("23.65", "GiB"));
        // A negative share is no figure (the no-blocks rule reads it).
        let mut v = VllmFigures::default();
        let l = "Available KV cache memory: -2.77 GiB";
        vllm_figures(l, hint_words(l), &mut v);
        assert_eq!(v.available_kv, None);
    }

    #[test]
    fn reads_what_the_weights_took() {
        let loaded = |l: &str| weights_loaded(l, hint_words(l));
        // sglang-7691: 166.59 GB of weights, 21.73 GB left.
        let (w, free) = loaded("[2025-07-02 07:41:58 DP0 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=21.73 GB, mem usage=166.59 GB.").unwrap();
        assert_eq!((w, free), (166_590_000_000, Some(21_730_000_000)));
        let (w, _) =
            loaded("INFO 07-01 model_runner.py:1000] Loading model weights took 14.9888 GB")
                .unwrap();
        assert_eq!(w, 14_988_800_000);
        assert!(loaded("Load weight begin. avail mem=80 GB").is_none());
    }

    fn marked(lines: &[&str]) -> Context {
        let mut ctx = Context::default();
        mark_all(lines, &mut ctx);
        ctx
    }

    /// Marking with the memo of the last line's looks leaves the context that marking each line
    /// afresh leaves, on every log of the corpus and on lines repeated verbatim.
    #[test]
    fn the_looks_memo_changes_no_context() {
        let mut logs = vec![
            "step 1 loss 2.0\nstep 1 loss 2.0\nLoaded model\nLoaded model\nstep 1 loss 2.0"
                .to_string(),
        ];
        for (_, raw) in crate::logparse::corpus_logs() {
            logs.push(String::from_utf8_lossy(&raw).into_owned());
        }
        assert!(logs.len() > 100);
        for log in &logs {
            let lines = crate::logparse::clean_lines(log.as_bytes());
            let (mut memoised, mut afresh) = (Context::default(), Context::default());
            let mut memo = Memos::default();
            for i in 0..lines.len() {
                mark(&lines, i, &mut memoised, &mut memo);
                mark(&lines, i, &mut afresh, &mut Memos::default());
            }
            assert_eq!(format!("{memoised:?}"), format!("{afresh:?}"));
        }
    }

    fn mark_all(lines: &[&str], ctx: &mut Context) {
        let lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        let mut memo = Memos::default();
        for i in 0..lines.len() {
            mark(&lines, i, ctx, &mut memo);
        }
    }

    #[test]
    fn a_loops_progress_lines() {
        for line in [
            "step 1180 loss 1.92",
            "Step 20/500, loss=0.3",
            "[rank0] iter 50: loss 2.1",
            "{'loss': 1.9021, 'grad_norm': 0.5, 'learning_rate': 2e-05, 'epoch': 0.1}",
            "Iteration 7",
        ] {
            assert!(progress(line), "{line}");
        }
        for line in [
            "  File \"train.py\", line 12, in step",
            "Loading checkpoint shards: 100%|██| 2/2",
            "    loss = self.compute_loss(model, inputs)",
            "stepping into the generate loop",
        ] {
            assert!(!progress(line), "{line}");
        }
    }

    #[test]
    fn a_programs_batch_and_sequence_line_in_its_common_forms() {
        let ctx = marked(&[
            "batch= 8 seq= 4096",
            "case batch-48 model mistral-7b cap 20.0 batch 48 prompt 2048 new 16",
            "batch_size=4, seq_len=8000",
            "Batch 3/100 loss 0.42",
            "batch 12 done in 4.2 s",
        ]);
        assert_eq!(
            ctx.batch_seq,
            vec![(1, 8, 4096), (2, 48, 2048), (3, 4, 8000)]
        );
    }

    #[test]
    fn any_engines_words_for_loading_are_the_load_phase_and_its_end_is_not() {
        // sophgo-llmtpu-8: a TPU runtime's loader; mlx-serve-321: MLX says it loaded.
        for line in [
            "[BMRT][load_bmodel:1573] INFO:Loading bmodel from [../rwkv6-1b5_bf16_1dev.bmodel].",
            "INFO: loading weights from /models/x",
            "    self.model_runner.load_model()",
            "Unable to load model: /data/models/q8_0.gguf",
        ] {
            assert_eq!(stage_hint(line), Some(StageHint::Load), "{line}");
        }
        for line in [
            "Loaded 1324 weights from 1 file(s)",
            "INFO 07-01 model_runner.py:1000] Loading model weights took 14.9888 GB",
            "Model loading took 7.1 GiB and 3.2 seconds",
        ] {
            assert_eq!(stage_hint(line), Some(StageHint::Loaded), "{line}");
        }
        for line in [
            "downloading model card",
            "the model was reloaded",
            "payload model",
        ] {
            assert_eq!(stage_hint(line), None, "{line}");
        }
    }

    #[test]
    fn the_part_an_out_of_memory_line_names() {
        for (line, part) in [
            ("AssertionError: Not enough memory for KV cache，try reducing --num-pages", Some(Part::KvCache)),
            ("[TensorRT-LLM][ERROR] Assertion failed: Can't allocate new blocks. No free blocks left. (/home/jenkins/agent/workspace/LLM/batch_manager/kvCacheManager.cpp:362)", Some(Part::KvCache)),
            ("Failed to create context: null reference from llama.cpp", Some(Part::Context)),
            ("llama_model_load: error loading model: vk::Queue::submit: ErrorOutOfDeviceMemory", Some(Part::Weights)),
            ("failed to allocate the attention workspace: out of memory", Some(Part::Activations)),
            ("RuntimeError: Insufficient VRAM for model and cache", None),
            ("RuntimeError: CUDA error: out of memory", None),
        ] {
            assert_eq!(named_part(line), part, "{line}");
        }
        // A C++ backtrace's frames read like Rust's.
        let ctx = marked(&["2       0x7f5884df817a tensorrt_llm::batch_manager::kv_cache_manager::BlockManager::allocateBlock(x) + 954"]);
        assert_eq!(ctx.cache_lines, vec![1]);
    }

    #[test]
    fn a_newest_first_log_is_told_by_its_timestamps() {
        // vllm-worker-vllm-40: a log viewer's lines, newest first, two clocks interleaved.
        let reversed = marked(&[
            "2024-02-02 21:44:03.976",
            "engine.py :190 2024-02-03 03:44:03,976 Error initializing vLLM engine: CUDA out of memory.",
            "2024-02-02 21:43:49.554",
            "INFO 02-03 03:43:49 model_runner.py:629] CUDA graphs can take additional 1~3 GiB",
            "2024-02-02 21:43:49.554",
            "INFO 02-03 03:43:49 model_runner.py:625] Capturing the model for CUDA graphs.",
            "2024-02-02 21:43:48.339",
            "INFO 02-03 03:43:48 llm_engine.py:316] # GPU blocks: 7754, # CPU blocks: 2048",
        ]);
        assert!(reversed.clock.reversed());
        let forward = marked(&[
            "[2024-07-26 23:55:09.100] [info] loading",
            "[2024-07-26 23:55:10.237] [error] failed",
            "INFO 02-03 03:43:48 a",
            "INFO 02-03 03:43:49 b",
            "2024-07-26 23:55:08.000 a late line of another clock",
        ]);
        assert!(!forward.clock.reversed());
        assert_eq!(timestamp("no time here"), None);
    }

    #[test]
    fn engines_own_loaders_are_load_frames() {
        // ComfyUI's model patcher, vLLM's create_weights, a diffusers pipeline moved to the device.
        for line in [
            r#"  File "E:\ComfyUI\comfy\model_patcher.py", line 320, in patch_weight_to_device"#,
            r#"  File "/x/vllm/model_executor/layers/linear.py", line 202, in create_weights"#,
            "    pipe.to(device)",
        ] {
            assert_eq!(marked(&[line]).load_lines, vec![1], "{line}");
        }
        assert!(marked(&["    inputs = batch.to(device)"])
            .load_lines
            .is_empty());
    }

    #[test]
    fn rust_backtrace_frames_say_forward_pass_or_kv_cache() {
        let ctx = marked(&[
            "   3: attention_rs::workspace::cuda::get_moe_activation_pool",
            "   6: xinfer::models::layers::moe::FusedMoeNvfp4::forward_with_routing",
            "   2: candle_nn::kv_cache::KvCache::append",
            "   1: <core::result::Result<O,E> as candle_core::cuda_backend::error::WrapErr<O>>::w",
            "2026-06-01T23:51:26Z ERROR 3: not a frame::forward",
        ]);
        assert_eq!(ctx.activation_lines, vec![1, 2]);
        assert_eq!(ctx.cache_lines, vec![3]);
    }

    #[test]
    fn frames_of_the_optimizer_the_legacy_cache_and_vllms_activation_layer() {
        let ctx = marked(&[
            "    state[\"exp_avg_sq\"] = torch.zeros_like(",
            "    key_states = torch.cat([past_key_value[0], key_states], dim=2)",
            "  File \"/usr/lib/python3/vllm/model_executor/layers/activation.py\", line 81, in forward_cuda",
            "    outputs = self.model(input_ids, past_key_values=past_key_values)",
        ]);
        assert_eq!(ctx.optimizer_lines, vec![1]);
        assert_eq!(ctx.cache_lines, vec![2]);
        assert_eq!(ctx.activation_lines, vec![3]);
    }

    #[test]
    fn engines_own_words_for_loading_and_allocating_the_cache() {
        // tt-metal-21904, mlc-llm-38, mlx-serve-13 (real-2026-12r and -12s).
        assert_eq!(
            stage_hint("Allocating TT kv caches for each layer (submesh 1):  69%|██| 22/32"),
            Some(StageHint::CacheAlloc)
        );
        assert_eq!(
            stage_hint("Initializing the chat module..."),
            Some(StageHint::Load)
        );
        assert_eq!(
            stage_hint("[scheduler] model load failed: EngineOpenFailed"),
            Some(StageHint::Load)
        );
    }

    #[test]
    fn mistral_rs_in_situ_quantization_is_loading() {
        // mistralrs-834: the panic is in the pipeline's ISQ, which converts weights at load.
        assert_eq!(
            stage_hint("thread '<unnamed>' panicked at mistralrs-core/src/pipeline/isq.rs:265:38:"),
            Some(StageHint::Load)
        );
    }

    #[test]
    fn reads_the_engines_version() {
        use crate::logparse::parse::Source;
        for (l, s, v) in [
            ("INFO 08-13 llm_engine.py:174] Initializing an LLM engine (v0.5.4) with config: model='m'", Source::Vllm, "0.5.4"),
            ("INFO 04-24 [api_server.py:1034] vLLM API server version 0.8.4", Source::Vllm, "0.8.4"),
            ("build: 5908 (538cc77f) with cc (Ubuntu 13.3.0) 13.3.0 for x86_64-linux-gnu", Source::LlamaCpp, "5908 (538cc77f)"),
            ("[TensorRT-LLM] TensorRT-LLM version: 0.11.0.dev2024052800", Source::TensorrtLlm, "0.11.0.dev2024052800"),
            ("time=2024 level=INFO msg=\"Listening on 127.0.0.1:11434 (version 0.1.33)\"", Source::Ollama, "0.1.33"),
        ] {
            assert_eq!(engine_version(l, hint_words(l)), Some((s, v.to_string())), "{l}");
        }
        assert_eq!(
            engine_version("CUDA Version: 12.4", hint_words("CUDA Version: 12.4")),
            None
        );
    }

    #[test]
    fn reads_workload_and_model() {
        let mut ctx = Context::default();
        let lines = [
            "python -m vllm.entrypoints.openai.api_server --model mistralai/Mistral-7B-v0.1 --dtype half --max-model-len 4096",
            "llama_new_context_with_model: n_ctx      = 131072",
            "ERROR batch{batch_size=1}:prefill",
            "--max-num-seqs 512",
        ];
        mark_all(&lines, &mut ctx);
        assert_eq!(ctx.workload.max_model_len, Some(4096));
        assert_eq!(ctx.workload.n_ctx, Some(131072));
        assert_eq!(ctx.workload.batch, Some(1));
        assert_eq!(ctx.workload.max_num_seqs, Some(512));
        assert_eq!(
            ctx.model.map(|m| m.name).as_deref(),
            Some("mistralai/Mistral-7B-v0.1")
        );
        assert_eq!(
            {
                let l = "/root/.cache/huggingface/hub/models--Qwen--Qwen2-7B/snapshots/x";
                model(l, hint_words(l))
            }
            .as_deref(),
            Some("Qwen/Qwen2-7B")
        );
        // The other flags and variables that name a model, in any engine's command or script.
        for (line, name) in [
            (
                "python train.py --model_name_or_path meta-llama/Llama-2-13b-hf",
                "meta-llama/Llama-2-13b-hf",
            ),
            (
                "text-generation-launcher --model-id bigscience/bloom-7b1",
                "bigscience/bloom-7b1",
            ),
            (
                "python -m sglang.launch_server --model-path google/gemma-3-12b-it",
                "google/gemma-3-12b-it",
            ),
            ("model_id = \"Qwen/Qwen-7B-Chat\"", "Qwen/Qwen-7B-Chat"),
        ] {
            assert_eq!(
                model(line, hint_words(line)).as_deref(),
                Some(name),
                "{line}"
            );
        }
    }
}
