//! transformers' `generate()` as PyTorch's caching allocator sees it: every tensor the load, the
//! prefill and each decode step allocate and free, in order, with its size, for the llama family
//! (Llama, Mistral, Qwen2/2.5, Qwen3 with its q/k norms, Phi-3 with fused projections), SDPA or
//! eager attention, random weights made on the device (`from_config`) in a 16-bit dtype, and one
//! plain `generate(max_new_tokens = min_new_tokens = n, do_sample = False, pad_token_id = 0)`.
//!
//! The sequence was transcribed from the allocator traces of the ground truth's own trials
//! (transformers 5.17, torch 2.11, H200; docs/calibration/alloc-traces-h200-2026-12-01/) and
//! equals each of the 16 recorded traces event by event up to its last allocation or its
//! out-of-memory, sizes compared as the allocator rounds them (tests/torch_program.rs). What it
//! carries, op by op: RMSNorm's f32 copies, RoPE's `rotate_half` concatenations (and Phi-3's
//! extra `cat` of the rotated part), the cache's `torch.cat` in each decode step, SDPA's output and
//! its small workspaces, eager attention's scores, f32 softmax and 4-D mask, the MLP's three
//! intermediates, the last position's logits and their f32 copy, the logits processors
//! `min_new_tokens` installs when the model has an end-of-sequence id, and the cuBLAS workspaces
//! the first matmuls leave in the pool.
//!
//! Replayed through [`super::torch_alloc::CachingAllocator`], it gives the reserved peak and the
//! request at which PyTorch runs out, without PyTorch.

use super::torch_alloc::{CachingAllocator, OutOfMemory};
use crate::model::spec::Spec as ModelSpec;
use crate::units::MIB;

/// The shapes that set every tensor's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub intermediate: u64,
    pub layers: u64,
    pub vocab: u64,
    /// Bias on q, k and v (Qwen2): the first biased matmul leaves a 1 MiB cuBLASLt workspace.
    pub qkv_bias: bool,
    /// RMSNorm over each head of q and k (Qwen3).
    pub qk_norm: bool,
    /// One qkv and one gate_up projection (Phi-3); its rotary embedding concatenates the
    /// rotated part with the pass-through part, and its cache layers copy on update.
    pub fused: bool,
    /// The input embedding is the output head: the head is made, then freed with the cache emptied.
    pub tied: bool,
    /// Eager attention (materialised scores) instead of SDPA.
    pub eager: bool,
    /// The config has an end-of-sequence id (the family's default when config.json has none):
    /// `generate()` then runs two `min_new_tokens` logits processors and the EOS stopping
    /// criterion every step.
    pub eos: bool,
    /// Phi-3's sliding window: its cache layers copy both tensors on each update.
    pub window: Option<u64>,
    /// Llama 3.1's frequency-dependent RoPE scaling: its inverse frequencies take 27 small
    /// tensors to compute instead of 5.
    pub llama3_rope: bool,
    /// Qwen2 and Qwen3 drop the forward's attention mask before its input embedding (their
    /// `causal_mask_mapping`); the llamas after.
    pub qwen_forward: bool,
}

/// Which architectures the sequence is known for, and whether each has an end-of-sequence id
/// by default (transformers 5.17's config classes: Llama, Mistral and Phi-3 set one, Qwen2 and
/// Qwen3 leave it unset).
fn family(model_type: &str) -> Option<bool> {
    match model_type {
        "llama" | "mistral" | "phi3" => Some(true),
        "qwen2" | "qwen3" => Some(false),
        _ => None,
    }
}

impl Shape {
    /// The shape of a model this module knows, `None` for any other (its caller keeps the
    /// profile's answer). Mixture-of-experts, sliding windows that trim, softcaps and other norms
    /// are outside what the traces showed.
    pub fn of(spec: &ModelSpec, eager: bool) -> Option<Shape> {
        let eos = family(&spec.architecture)?;
        // Phi-3's sliding-window cache layers were traced; another family's were not.
        let sliding = spec.sliding_layers > 0 && spec.sliding_window.is_some();
        use crate::model::spec::RopeScaling;
        // Linear RoPE scaling was not traced.
        let llama3_rope = match spec.numerics.rope_scaling {
            None => false,
            Some(RopeScaling::Llama3 { .. }) => true,
            Some(RopeScaling::Linear { .. }) => return None,
        };
        if spec.experts.is_some()
            || spec.head_dim % 2 == 1
            || (sliding && spec.architecture != "phi3")
        {
            return None;
        }
        Some(Shape {
            hidden: spec.hidden_size,
            heads: spec.num_heads,
            kv_heads: spec.num_kv_heads,
            head_dim: spec.head_dim,
            intermediate: spec.intermediate_size,
            layers: spec.num_layers,
            vocab: spec.vocab_size,
            qkv_bias: spec.qkv_bias,
            qk_norm: spec.qk_norm,
            fused: spec.fused_projections,
            tied: spec.tie_word_embeddings,
            eager,
            eos,
            window: spec.sliding_window.filter(|_| sliding),
            llama3_rope,
            qwen_forward: matches!(spec.architecture.as_str(), "qwen2" | "qwen3"),
        })
    }

    /// Whether the traced sequence holds for this generation: a sliding window's cache layer
    /// was only seen while the sequence fit in the window.
    pub fn covers(&self, g: Generation) -> bool {
        self.window
            .is_none_or(|w| g.prompt.saturating_add(g.new_tokens) <= w)
    }
}

/// One `generate()` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Generation {
    pub batch: u64,
    pub prompt: u64,
    pub new_tokens: u64,
}

/// Where a generation is when a request is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Load,
    Prefill,
    /// The decode step that makes this new token (1 = the first after the prefill's).
    Decode(u64),
}

/// Something that takes the sequence: a recorder, or the allocator model.
pub trait Sink {
    /// A new tensor of `bytes`, named by the order of allocation; `Err` stops the sequence.
    fn alloc(&mut self, bytes: u64, phase: Phase) -> Result<usize, Stop>;
    fn free(&mut self, id: usize);
    /// `torch.cuda.empty_cache()`.
    fn empty_cache(&mut self);
    /// `generate()` has made `tokens` new tokens: a generation of that many ends here.
    fn made(&mut self, _tokens: u64) {}
}

/// Why the sequence stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop {
    pub oom: OutOfMemory,
    pub phase: Phase,
}

/// The allocator model as a sink: a tensor's id is its block's index (the sequence frees each
/// tensor once), the peak, and the request that failed. Naming tensors by their blocks keeps no
/// table that grows with the events (millions in a long replay).
pub struct Replay {
    pub allocator: CachingAllocator,
    /// The reserved peak where each new token was made (index 0: the first).
    made: Vec<u64>,
}

impl Replay {
    pub fn new(limit: u64) -> Self {
        Replay {
            allocator: CachingAllocator::new(limit),
            made: Vec::new(),
        }
    }
}

impl Sink for Replay {
    fn alloc(&mut self, bytes: u64, phase: Phase) -> Result<usize, Stop> {
        let a = self
            .allocator
            .malloc(bytes)
            .map_err(|oom| Stop { oom, phase })?;
        Ok(a.index())
    }
    fn free(&mut self, id: usize) {
        self.allocator.free_index(id);
    }
    fn empty_cache(&mut self) {
        self.allocator.empty_cache();
    }
    fn made(&mut self, _tokens: u64) {
        self.made.push(self.allocator.peak_reserved());
    }
}

/// What the allocator model saw of one generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// PyTorch's `max_memory_reserved` up to the end (or the failure).
    pub peak_reserved: u64,
    /// Reserved when the prefill's last logits were made (the weights and the prompt's cache).
    pub failed: Option<Stop>,
}

/// Replay one generation under a pool of `limit` bytes.
pub fn replay(shape: &Shape, g: Generation, limit: u64) -> Outcome {
    let mut r = Replay::new(limit);
    let failed = run(shape, g, &mut r).err();
    Outcome {
        peak_reserved: r.allocator.peak_reserved(),
        failed,
    }
}

/// What transformers' process holds on the card outside PyTorch's pool before the load: the CUDA
/// context and the libraries torch loads. 608.875 MiB in every one of the ground truth's 16 traced
/// trials on the H200 (driver 580, torch 2.11), whatever the model.
pub const TORCH_CONTEXT: u64 = 638_451_712;

/// Taken beside the pool while the prefill runs (kernel modules loaded lazily): measured at every
/// recorded out-of-memory, 76 MiB with SDPA and 68 MiB eager
/// (docs/calibration/alloc-traces-h200-2026-12-01).
pub const OUTSIDE_SDPA: u64 = 76 * MIB;
pub const OUTSIDE_EAGER: u64 = 68 * MIB;

/// What SDPA's decode needs beside the pool: cuDNN's attention fails there (`mha_graph.execute`)
/// with every tensor placed. Over 37 SDPA trials of the H200 (docs/calibration/
/// transformers-limits-h200-2026-12-0*.jsonl) it failed in all 7 with at most 89.1 MiB left
/// beside the pool's peak and ran in all 30 with 97.1 MiB or more: the line is just under the
/// least that ran (a line of 102 MiB, set from the first 16 trials, called two held-out trials
/// out of memory that ran, at 97.1 and 101.1 MiB).
pub const DECODE_BESIDE_SDPA: u64 = 96 * MIB;

/// transformers' `generate()` on a card with `capacity` bytes free for its process (what
/// `mem_get_info` reports before the process starts, or the `--vram-limit` the probe's ballast
/// leaves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnCard {
    /// The pool's reserved peak, or where it stood when a request failed.
    pub peak_reserved: u64,
    /// The request the pool could not place, and when.
    pub failed: Option<Stop>,
    /// The pool's peak left too little beside it for SDPA's decode (cuDNN fails there).
    pub short_beside: bool,
    /// The pool's limit: the capacity less the context, what the prefill takes beside the pool
    /// and the driver's reserve.
    pub limit: u64,
}

impl OnCard {
    pub fn ran(&self) -> bool {
        self.failed.is_none() && !self.short_beside
    }
    /// The process's peak on the card as NVML would see it (context, pool, beside).
    pub fn peak_on_card(&self, shape: &Shape) -> u64 {
        let outside = if shape.eager {
            OUTSIDE_EAGER
        } else {
            OUTSIDE_SDPA
        };
        TORCH_CONTEXT
            .saturating_add(outside)
            .saturating_add(self.peak_reserved)
    }
}

pub fn on_card(shape: &Shape, g: Generation, capacity: u64) -> OnCard {
    let free = capacity.saturating_sub(TORCH_CONTEXT);
    let outside = if shape.eager {
        OUTSIDE_EAGER
    } else {
        OUTSIDE_SDPA
    };
    let limit = free
        .saturating_sub(outside)
        .saturating_sub(super::torch_alloc::DRIVER_RESERVE);
    let out = replay(shape, g, limit);
    let short_beside = out.failed.is_none()
        && !shape.eager
        && g.new_tokens > 1
        && free.saturating_sub(out.peak_reserved) < DECODE_BESIDE_SDPA;
    OnCard {
        peak_reserved: out.peak_reserved,
        failed: out.failed,
        short_beside,
        limit,
    }
}

/// One run of `generate()` read at every length: the sequence of a generation of `n` new tokens
/// is the first part of a longer one's, up to where its `n`-th token is made, so one replay of the
/// longest answers every shorter generation of the same batch and prompt exactly as its own
/// replay would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lengths {
    /// The reserved peak where each new token was made.
    made: Vec<u64>,
    /// The request that failed after the last token made, with the reserved peak then.
    failed: Option<(Stop, u64)>,
    capacity: u64,
    limit: u64,
    eager: bool,
}

/// Replay `g` on a card with `capacity` bytes free for the process, kept for every shorter
/// generation (`Lengths::at`).
pub fn lengths(shape: &Shape, g: Generation, capacity: u64) -> Lengths {
    let limit = pool_limit(shape, capacity);
    let mut r = Replay::new(limit);
    let failed = run(shape, g, &mut r).err();
    Lengths {
        failed: failed.map(|stop| (stop, r.allocator.peak_reserved())),
        made: r.made,
        capacity,
        limit,
        eager: shape.eager,
    }
}

impl Lengths {
    /// `on_card` for `new_tokens` new tokens of the same batch and prompt, where this run tells it:
    /// it made that many tokens, or failed before.
    pub fn at(&self, new_tokens: u64) -> Option<OnCard> {
        let n = new_tokens.max(1);
        let made = u64::try_from(self.made.len()).ok()?;
        if n <= made {
            let peak = *self.made.get(usize::try_from(n - 1).ok()?)?;
            let free = self.capacity.saturating_sub(TORCH_CONTEXT);
            return Some(OnCard {
                peak_reserved: peak,
                failed: None,
                short_beside: !self.eager
                    && new_tokens > 1
                    && free.saturating_sub(peak) < DECODE_BESIDE_SDPA,
                limit: self.limit,
            });
        }
        self.failed.map(|(stop, peak)| OnCard {
            peak_reserved: peak,
            failed: Some(stop),
            short_beside: false,
            limit: self.limit,
        })
    }
}

/// The pool's limit on a card with `capacity` bytes free for the process.
fn pool_limit(shape: &Shape, capacity: u64) -> u64 {
    let outside = if shape.eager {
        OUTSIDE_EAGER
    } else {
        OUTSIDE_SDPA
    };
    capacity
        .saturating_sub(TORCH_CONTEXT)
        .saturating_sub(outside)
        .saturating_sub(super::torch_alloc::DRIVER_RESERVE)
}

/// Bytes of the bf16/fp16 dtype the model computes in.
const ELEM: u64 = 2;

/// The generator's running state: the sink, the phase, and what persists between steps.
struct Gen<'a, S: Sink> {
    sink: &'a mut S,
    s: Shape,
    b: u64,
    phase: Phase,
    first_linear: bool,
    first_rope: bool,
}

type R<T> = Result<T, Stop>;

/// Saturating product: a size past 64 bits is `u64::MAX`, which no allocator can place.
fn mul(xs: &[u64]) -> u64 {
    xs.iter().fold(1u64, |a, &x| a.saturating_mul(x))
}

impl<S: Sink> Gen<'_, S> {
    fn a(&mut self, bytes: u64) -> R<usize> {
        self.sink.alloc(bytes, self.phase)
    }
    fn f(&mut self, id: usize) {
        self.sink.free(id);
    }
    fn fo(&mut self, id: Option<usize>) {
        if let Some(i) = id {
            self.sink.free(i);
        }
    }

    /// RMSNorm over `rows` rows of `width`: the f32 copy, its square, the mean, eps, rsqrt, the
    /// product, the cast back and the weight's product (the result).
    fn norm(&mut self, rows: u64, width: u64) -> R<usize> {
        let f32s = mul(&[rows, width, 4]);
        let small = mul(&[rows, 4]);
        let a1 = self.a(f32s)?;
        let a2 = self.a(f32s)?;
        let a3 = self.a(small)?;
        self.f(a2);
        let a4 = self.a(small)?;
        let a5 = self.a(small)?;
        self.f(a4);
        let a6 = self.a(f32s)?;
        self.f(a5);
        self.f(a1);
        let a7 = self.a(mul(&[rows, width, ELEM]))?;
        let a8 = self.a(mul(&[rows, width, ELEM]))?;
        self.f(a7);
        self.f(a6);
        self.f(a3);
        Ok(a8)
    }

    /// `apply_rotary_pos_emb` on `heads` heads of `t` tokens: x·cos, rotate_half's negated half
    /// and concatenation, its product with sin, the sum (and Phi-3's concatenation).
    fn rope(&mut self, t: u64, heads: u64) -> R<usize> {
        let sz = mul(&[self.b, t, heads, self.s.head_dim, ELEM]);
        let c1 = self.a(sz)?;
        let r1 = self.a(sz / 2)?;
        let r2 = self.a(sz)?;
        self.f(r1);
        let c2 = self.a(sz)?;
        self.f(r2);
        let mut c3 = self.a(sz)?;
        self.f(c1);
        self.f(c2);
        if self.s.fused {
            let c4 = self.a(sz)?;
            self.f(c3);
            c3 = c4;
        }
        Ok(c3)
    }

    /// SDPA's small workspace in a decode step (cuDNN's split-K buffers): on the H200 and the
    /// H100 always 4·heads·splits·(head_dim + 2) + 128 bytes (12 traced shapes, to the byte). The
    /// splits follow cuDNN's own heuristic, seen as: at head_dim 128, 8 up to 2,048 cached tokens,
    /// 16 up to 3,072 with 32 heads and up to 4,064 with Qwen2.5-7B's 28 (the H100's traces: 16
    /// from 4,030 to 4,064, 32 from 4,065), 32 beyond (none seen below 1,024); at head_dim 64, 128
    /// with 14 heads and 64 with 9, whatever the length; none at head_dim 96. A guess between these
    /// is at most one small-pool segment (2 MiB) off.
    fn sdpa_workspace(&self, t: u64, len: u64) -> Option<u64> {
        if t > 1 {
            return Some(256);
        }
        let splits: u64 = match self.s.head_dim {
            128 if len > 4064 || (len > 3072 && self.s.heads >= 32) => 32,
            128 if len > 2048 => 16,
            128 if len > 1024 => 8,
            64 if self.s.heads >= 12 => 128,
            64 => 64,
            _ => 0,
        };
        (splits > 0).then(|| {
            mul(&[4, self.s.heads, splits, self.s.head_dim.saturating_add(2)]).saturating_add(128)
        })
    }
}

/// The inverse frequencies' computation at init, as traced: `A1` a tensor of head_dim/2 f32,
/// `A2` of head_dim/2 int64, `AQ` of head_dim/2 bools, `AE` a scalar, `Fk` the free of the block's
/// k-th allocation. The last allocation is the result, kept.
const DEFAULT_ROPE_INIT: &str = "A1 A1 F0 A1 AE F3 F1 A1 A1 F4 F2";
const LLAMA3_ROPE_INIT: &str = "A2 A1 F0 A1 F1 A1 AE F4 F2 A1 A1 F5 F3 A1 A1 F7 AQ A1 A1 F9 F10 \
    A1 A1 F12 A1 F13 A1 F14 A1 A1 F16 A1 F17 A1 A1 F18 F19 AQ AQ F21 AQ AQ F23 AQ F22 F24 A1 F11 \
    F6 F8 F15 F20 F25";

impl<S: Sink> Gen<'_, S> {
    /// Run a traced pattern of small tensors (see `DEFAULT_ROPE_INIT`); the last allocation is
    /// returned.
    fn small_program(&mut self, pattern: &str, head_dim: u64) -> R<usize> {
        let half = head_dim / 2;
        let mut ids: Vec<usize> = Vec::new();
        for tok in pattern.split_whitespace() {
            match tok {
                "A1" => ids.push(self.a(half.saturating_mul(4))?),
                "A2" => ids.push(self.a(half.saturating_mul(8))?),
                "AQ" => ids.push(self.a(half)?),
                "AE" => ids.push(self.a(8)?),
                f => {
                    if let Some(id) = f
                        .strip_prefix('F')
                        .and_then(|k| k.parse::<usize>().ok())
                        .and_then(|k| ids.get(k).copied())
                    {
                        self.f(id);
                    }
                }
            }
        }
        Ok(ids.last().copied().unwrap_or(0))
    }
}

/// What a forward pass leaves for the next: each layer's cache tensors.
struct Cache {
    kv: Vec<(usize, usize)>,
}

/// Feed the whole sequence of `g` on `shape` to `sink`; the first failed request stops it.
pub fn run<S: Sink>(shape: &Shape, g: Generation, sink: &mut S) -> Result<(), Stop> {
    let s = *shape;
    let b = g.batch.max(1);
    let p = g.prompt.max(1);
    let mut x = Gen {
        sink,
        s,
        b,
        phase: Phase::Load,
        first_linear: true,
        first_rope: true,
    };
    let (h, nh, nkv, hd, i, v) = (
        s.hidden,
        s.heads,
        s.kv_heads,
        s.head_dim,
        s.intermediate,
        s.vocab,
    );
    // Load: every parameter in module order.
    x.a(4)?;
    x.a(mul(&[v, h, ELEM]))?;
    for _ in 0..s.layers {
        if s.fused {
            x.a(mul(&[h, nh, hd, ELEM]))?;
            x.a(mul(&[
                nh.saturating_add(nkv.saturating_mul(2)),
                hd,
                h,
                ELEM,
            ]))?;
            x.a(mul(&[2, i, h, ELEM]))?;
            x.a(mul(&[h, i, ELEM]))?;
        } else {
            x.a(mul(&[nh, hd, h, ELEM]))?;
            if s.qkv_bias {
                x.a(mul(&[nh, hd, ELEM]))?;
            }
            for _ in 0..2 {
                x.a(mul(&[nkv, hd, h, ELEM]))?;
                if s.qkv_bias {
                    x.a(mul(&[nkv, hd, ELEM]))?;
                }
            }
            x.a(mul(&[h, nh, hd, ELEM]))?;
            if s.qk_norm {
                x.a(hd.saturating_mul(ELEM))?;
                x.a(hd.saturating_mul(ELEM))?;
            }
            x.a(mul(&[i, h, ELEM]))?;
            x.a(mul(&[i, h, ELEM]))?;
            x.a(mul(&[h, i, ELEM]))?;
        }
        x.a(h.saturating_mul(ELEM))?;
        x.a(h.saturating_mul(ELEM))?;
    }
    x.a(h.saturating_mul(ELEM))?;
    // The rotary embedding's inverse frequencies, computed twice (one kept, one copy kept).
    let pattern = if s.llama3_rope {
        LLAMA3_ROPE_INIT
    } else {
        DEFAULT_ROPE_INIT
    };
    x.small_program(pattern, hd)?;
    x.a((hd / 2).saturating_mul(4))?;
    let t = x.small_program(pattern, hd)?;
    x.f(t);
    let head = x.a(mul(&[v, h, ELEM]))?;
    if s.tied {
        x.f(head);
        x.sink.empty_cache();
    }
    // The caller's input ids and attention mask, then generate()'s preamble.
    x.phase = Phase::Prefill;
    x.a(mul(&[b, p, 8]))?;
    x.a(mul(&[b, p, 8]))?;
    if s.eos {
        x.a(8)?;
        x.a(8)?;
        x.a(8)?;
        let (a1, a2, a3) = (x.a(1)?, x.a(1)?, x.a(1)?);
        x.f(a3);
        x.f(a2);
        let a4 = x.a(1)?;
        x.f(a1);
        x.f(a4);
        let (a5, a6) = (x.a(1)?, x.a(1)?);
        x.f(a5);
        x.f(a6);
    } else {
        x.a(8)?;
    }
    if b > 1 {
        let (a1, a2) = (x.a(b)?, x.a(1)?);
        x.f(a1);
        x.f(a2);
    }
    let p1 = x.a(mul(&[b, p, 8]))?;
    if b == 1 {
        let tmp = x.a(1279)?; // cumsum's scan temporary on one row
        x.f(tmp);
    }
    let p2 = x.a(mul(&[b, p, 8]))?;
    x.f(p1);
    let p3 = x.a(mul(&[b, p]))?;
    x.a(mul(&[b, p, 8]))?;
    x.f(p3);
    x.f(p2);
    let mut s3082 = x.a(mul(&[b, 8]))?;
    let prefill_pos = x.a(mul(&[b, p, 8]))?;

    let mut cache = Cache { kv: Vec::new() };
    let mut logits = forward(&mut x, &mut cache, p, p)?;
    x.f(prefill_pos);

    let mut len = p;
    let (mut mask, mut ids, mut s3073, mut logits32, mut scores) = (None, None, None, None, None);
    let (mut pos682, mut pos699, mut m1119) = (None, None, None);
    for step in 1..=g.new_tokens.max(1) {
        x.phase = if step == 1 {
            Phase::Prefill
        } else {
            Phase::Decode(step - 1)
        };
        // _update_model_kwargs_for_generation: the attention mask grows by one column.
        let a = x.a(8)?;
        let a2 = x.a(8)?;
        x.f(a);
        let a3 = x.a(8)?;
        x.f(a2);
        let nm = x.a(mul(&[b, len.saturating_add(1), 8]))?;
        x.f(a3);
        let d = x.a(mul(&[b, 8]))?;
        let m19 = x.a(mul(&[b, len.saturating_add(1), 8]))?;
        x.f(d);
        x.fo(mask.replace(nm));
        // _sample: the logits in f32, the processors, argmax, the new ids.
        let l32 = x.a(mul(&[b, v, 4]))?;
        x.fo(logits32.replace(l32));
        if s.eos {
            let a156 = x.a(v.saturating_mul(8))?;
            let a157 = x.a(v)?;
            let (y1, y2) = (x.a(v)?, x.a(v)?);
            x.f(y2);
            x.f(y1);
            let a158 = x.a(mul(&[b, v, 4]))?;
            let y = x.a(4)?;
            let a160 = x.a(mul(&[b, v, 4]))?;
            x.f(y);
            x.f(a158);
            x.f(a156);
            x.f(a157);
            let a229 = x.a(mul(&[b, v, 4]))?;
            let a230 = x.a(v.saturating_mul(8))?;
            let a231 = x.a(v)?;
            let (y1, y2) = (x.a(v)?, x.a(v)?);
            x.f(y2);
            x.f(y1);
            let y = x.a(4)?;
            let a233 = x.a(mul(&[b, v, 4]))?;
            x.f(y);
            x.f(a229);
            x.f(a230);
            x.f(a231);
            x.f(a160);
            x.fo(scores.replace(a233));
        }
        let mut next = x.a(mul(&[b, 8]))?;
        if v > 131_072 {
            // argmax over a vocabulary this wide reduces in two passes
            // the partial results: 19 blocks of 16 bytes a row up to 16 rows, 17 at 32 (traced)
            let t1 = x.a(mul(&[b, if b > 16 { 272 } else { 304 }]))?;
            let t2 = x.a(mul(&[b, 4]))?;
            x.f(t2);
            x.f(t1);
        }
        x.fo(s3073.take());
        if s.eos {
            let (y1, y2, y3) = (
                x.a(b.saturating_mul(8))?,
                x.a(b.saturating_mul(8))?,
                x.a(b.saturating_mul(8))?,
            );
            x.f(y2);
            let w = x.a(b.saturating_mul(8))?;
            x.f(y1);
            x.f(y3);
            x.f(next);
            next = w;
        }
        s3073 = Some(next);
        let ni = x.a(mul(&[b, len.saturating_add(1), 8]))?;
        x.fo(ids.replace(ni));
        // Stopping criteria.
        let (x1, x2, mut x3) = (x.a(b)?, x.a(b)?, x.a(b)?);
        x.f(x2);
        x.f(x1);
        if s.eos {
            let (e1, e2, e3) = (x.a(b)?, x.a(b)?, x.a(b)?);
            x.f(e3);
            x.f(e2);
            let e4 = x.a(b)?;
            x.f(e1);
            let x4 = x.a(b)?;
            x.f(e4);
            x.f(x3);
            x3 = x4;
        }
        let y1 = x.a(1)?;
        x.f(x3);
        let y2 = x.a(b.saturating_mul(8))?;
        x.f(y1);
        x.f(s3082);
        s3082 = y2;
        let (z, z1) = (x.a(8)?, x.a(1)?);
        x.f(z);
        x.f(z1);
        x.sink.made(step);
        if step == g.new_tokens.max(1) {
            break;
        }
        x.f(logits);
        let (q682, q699) = (x.a(8)?, x.a(8)?);
        x.fo(pos682.replace(q682));
        x.fo(pos699.replace(q699));
        x.fo(m1119.replace(m19));
        len = len.saturating_add(1);
        x.phase = Phase::Decode(step);
        logits = forward(&mut x, &mut cache, 1, len)?;
    }
    Ok(())
}

/// One forward pass of `t` tokens per sequence with `len` tokens cached after it; the last
/// position's logits are its result.
fn forward<S: Sink>(x: &mut Gen<S>, cache: &mut Cache, t: u64, len: u64) -> R<usize> {
    let s = x.s;
    let b = x.b;
    let (h, nh, nkv, hd, i, v) = (
        s.hidden,
        s.heads,
        s.kv_heads,
        s.head_dim,
        s.intermediate,
        s.vocab,
    );
    let first = cache.kv.is_empty();
    let emb = x.a(mul(&[b, t, h, ELEM]))?;
    // The attention mask.
    let m = x.a(mul(&[b, len]))?;
    let mut emask = None;
    if s.eager {
        let (x508, x509) = (x.a(8)?, x.a(8)?);
        let y = x.a(t.saturating_mul(8))?;
        let x510 = x.a(t.saturating_mul(8))?;
        x.f(y);
        let y = x.a(len.saturating_mul(8))?;
        let x511 = x.a(len.saturating_mul(8))?;
        x.f(y);
        let a1 = x.a(1)?;
        let cm = x.a(mul(&[b, t, len]))?;
        let m57 = x.a(mul(&[b, t, len]))?;
        x.f(cm);
        x.f(a1);
        let i1 = x.a(mul(&[b, len, 8]))?;
        let i2 = x.a(mul(&[b, len]))?;
        x.f(i1);
        let m57b = x.a(mul(&[b, t, len]))?;
        x.f(i2);
        x.f(m57);
        x.f(x508);
        x.f(x509);
        x.f(x510);
        x.f(x511);
        let (y1, y2) = (x.a(2)?, x.a(2)?);
        emask = Some(x.a(mul(&[b, t, len, ELEM]))?);
        x.f(y2);
        x.f(y1);
        x.f(m57b);
    } else {
        let a8 = x.a(8)?;
        let y = x.a(mul(&[b, len, 8]))?;
        x.f(y);
        let a1 = x.a(1)?;
        x.f(a8);
        x.f(a1);
    }
    x.f(m);
    // The rotary embedding's cos and sin (f32, scaled, cast).
    let r0 = x.a(mul(&[b, t, 4]))?;
    let r1 = x.a(mul(&[b, t, hd / 2, 4]))?;
    if x.first_rope {
        x.a(32 * MIB)?; // cuBLAS's workspace for the first f32 matmul
        x.first_rope = false;
    }
    let f32s = mul(&[b, t, hd, 4]);
    let r2 = x.a(f32s)?;
    let cs = x.a(f32s)?;
    let cs2 = x.a(f32s)?;
    x.f(cs);
    let sn = x.a(f32s)?;
    let sn2 = x.a(f32s)?;
    x.f(sn);
    let cos = x.a(mul(&[b, t, hd, ELEM]))?;
    let sin = x.a(mul(&[b, t, hd, ELEM]))?;
    for id in [r0, r1, r2, cs2, sn2] {
        x.f(id);
    }
    let rows = b.saturating_mul(t);
    let hidden = mul(&[b, t, h, ELEM]);
    let kv_bytes = mul(&[b, len, nkv, hd, ELEM]);
    let mut hs = emb;
    for layer in 0..s.layers {
        let n1 = x.norm(rows, h)?;
        let (qe, qkv);
        if s.fused {
            qkv = Some(x.a(mul(&[
                b,
                t,
                nh.saturating_add(nkv.saturating_mul(2)),
                hd,
                ELEM,
            ]))?);
            qe = x.rope(t, nh)?;
            let ke = x.rope(t, nkv)?;
            if first {
                x.a(8)?; // the sliding-window layer's lazy initialisation
                let kc = x.a(kv_bytes)?;
                let vc = x.a(kv_bytes)?;
                cache.kv.push((kc, vc));
            } else if let Some(slot) = cache.kv.get_mut(layer as usize) {
                let (nk, nv) = (x.a(kv_bytes)?, x.a(kv_bytes)?);
                let (ok, ov) = std::mem::replace(slot, (nk, nv));
                x.f(ok);
                x.f(ov);
            }
            x.f(ke);
        } else {
            qkv = None;
            let mut q = x.a(mul(&[b, t, nh, hd, ELEM]))?;
            if x.first_linear && s.qkv_bias {
                x.a(MIB)?; // cuBLASLt's workspace for the first matmul with a bias
            }
            x.first_linear = false;
            if s.qk_norm {
                let qn = x.norm(rows.saturating_mul(nh), hd)?;
                x.f(q);
                q = qn;
            }
            let mut k = x.a(mul(&[b, t, nkv, hd, ELEM]))?;
            if s.qk_norm {
                let kn = x.norm(rows.saturating_mul(nkv), hd)?;
                x.f(k);
                k = kn;
            }
            let vv = x.a(mul(&[b, t, nkv, hd, ELEM]))?;
            qe = x.rope(t, nh)?;
            let ke = x.rope(t, nkv)?;
            x.f(q);
            x.f(k);
            if first {
                let kc = x.a(kv_bytes)?;
                let vc = x.a(kv_bytes)?;
                cache.kv.push((kc, vc));
            } else if let Some(slot) = cache.kv.get_mut(layer as usize) {
                let nk = x.a(kv_bytes)?;
                let ok = std::mem::replace(&mut slot.0, nk);
                x.f(ok);
                let nv = x.a(kv_bytes)?;
                if let Some(slot) = cache.kv.get_mut(layer as usize) {
                    let ov = std::mem::replace(&mut slot.1, nv);
                    x.f(ov);
                }
            }
            x.f(ke);
            x.f(vv);
        }
        let mut weights = None;
        let out_bytes = mul(&[b, t, nh, hd, ELEM]);
        let mut o;
        if s.eager {
            // repeat_kv: grouped K and V expanded to every query head over the whole context
            let repeated = if nkv < nh {
                let r = mul(&[b, nh, len, hd, ELEM]);
                Some((x.a(r)?, x.a(r)?))
            } else {
                None
            };
            let scores = mul(&[b, nh, t, len]);
            let w1 = x.a(scores.saturating_mul(ELEM))?;
            let w2 = x.a(scores.saturating_mul(ELEM))?;
            x.f(w1);
            let w3 = x.a(scores.saturating_mul(ELEM))?;
            x.f(w2);
            let s1 = x.a(scores.saturating_mul(4))?;
            let s2 = x.a(scores.saturating_mul(4))?;
            x.f(s1);
            weights = Some(x.a(scores.saturating_mul(ELEM))?);
            x.f(s2);
            x.f(w3);
            o = x.a(out_bytes)?;
            if t > 1 {
                let o2 = x.a(out_bytes)?;
                x.f(o);
                o = o2;
            }
            if let Some((rk, rv)) = repeated {
                x.f(rk);
                x.f(rv);
            }
        } else {
            let (s1, s2) = (x.a(8)?, x.a(8)?);
            o = x.a(out_bytes)?;
            if let Some(ws) = x.sdpa_workspace(t, len) {
                let w = x.a(ws)?;
                x.f(w);
            }
            x.f(s1);
            x.f(s2);
            if t > 1 && hd != 64 && hd != 128 {
                // the output of a head width the kernel pads is copied out contiguous
                let o2 = x.a(out_bytes)?;
                x.f(o);
                o = o2;
            }
        }
        let op = x.a(hidden)?;
        x.f(o);
        x.fo(qkv);
        x.f(qe);
        x.f(n1);
        let res = x.a(hidden)?;
        x.f(op);
        let n2 = x.norm(rows, h)?;
        let inter = mul(&[b, t, i, ELEM]);
        let dn;
        if s.fused {
            let gu = x.a(inter.saturating_mul(2))?;
            let si = x.a(inter)?;
            let mu = x.a(inter)?;
            x.f(si);
            dn = x.a(hidden)?;
            x.f(mu);
            x.f(gu);
            x.f(n2);
        } else {
            let gt = x.a(inter)?;
            let si = x.a(inter)?;
            x.f(gt);
            let up = x.a(inter)?;
            let mu = x.a(inter)?;
            x.f(si);
            x.f(up);
            dn = x.a(hidden)?;
            x.f(mu);
            x.f(n2);
        }
        let out = x.a(hidden)?;
        x.f(dn);
        x.f(res);
        x.fo(weights);
        if layer > 0 {
            x.f(hs);
        }
        hs = out;
    }
    let nf = x.norm(rows, h)?;
    x.f(hs);
    if s.qwen_forward {
        x.fo(emask);
        x.f(emb);
    } else {
        x.f(emb);
        x.fo(emask);
    }
    x.f(sin);
    x.f(cos);
    let logits = x.a(mul(&[b, v, ELEM]))?;
    x.f(nf);
    Ok(logits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the sequence: each allocation's size, each free's id.
    #[derive(Default)]
    struct Record(Vec<(char, u64)>, usize);
    impl Sink for Record {
        fn alloc(&mut self, bytes: u64, _: Phase) -> Result<usize, Stop> {
            self.0.push(('A', bytes));
            self.1 += 1;
            Ok(self.1 - 1)
        }
        fn free(&mut self, id: usize) {
            self.0.push(('F', id as u64));
        }
        fn empty_cache(&mut self) {
            self.0.push(('U', 0));
        }
    }

    fn tiny() -> Shape {
        Shape {
            hidden: 64,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            intermediate: 128,
            layers: 2,
            vocab: 100,
            qkv_bias: false,
            qk_norm: false,
            fused: false,
            tied: false,
            eager: false,
            eos: true,
            window: None,
            llama3_rope: false,
            qwen_forward: false,
        }
    }

    #[test]
    fn every_tensor_a_step_makes_is_freed_by_the_end_but_the_cache_and_the_outputs() {
        let g = Generation {
            batch: 2,
            prompt: 10,
            new_tokens: 3,
        };
        let mut r = Record::default();
        assert!(run(&tiny(), g, &mut r).is_ok());
        let mut live = vec![false; r.1];
        let mut id = 0;
        for &(k, x) in &r.0 {
            match k {
                'A' => {
                    live[id] = true;
                    id += 1;
                }
                'F' => {
                    assert!(live[x as usize], "freed twice or never made: {x}");
                    live[x as usize] = false;
                }
                _ => {}
            }
        }
        // Parameters (4 + embed + 2·9 + final norm + rope's 2 + head), the caller's 2, the
        // preamble's kept (3 special ids, positions), the cache (2 per layer) and the
        // last step's outputs stay.
        let kept = live.iter().filter(|&&l| l).count();
        assert!(kept > 2 * 9 && kept < 60, "{kept}");
    }

    #[test]
    fn the_cache_grows_by_one_token_per_decode_step() {
        let s = tiny();
        let g = Generation {
            batch: 1,
            prompt: 10,
            new_tokens: 4,
        };
        let mut r = Record::default();
        assert!(run(&s, g, &mut r).is_ok());
        let kv = |len: u64| 2 * len * s.kv_heads * s.head_dim;
        for len in 10..=13 {
            assert!(
                r.0.iter().filter(|e| **e == ('A', kv(len))).count() >= 4,
                "{len}"
            );
        }
    }

    #[test]
    fn a_pool_too_small_for_the_weights_fails_at_the_load() {
        let out = replay(
            &tiny(),
            Generation {
                batch: 1,
                prompt: 8,
                new_tokens: 2,
            },
            4 * MIB,
        );
        assert!(out.failed.is_some());
        let huge = replay(
            &tiny(),
            Generation {
                batch: 1,
                prompt: 8,
                new_tokens: 2,
            },
            1 << 40,
        );
        assert_eq!(huge.failed, None);
        assert!(huge.peak_reserved > 0);
    }

    #[test]
    fn one_run_answers_every_shorter_generation_as_its_own_replay() {
        let mut phases = Vec::new();
        for eager in [false, true] {
            let s = Shape { eager, ..tiny() };
            let g = Generation {
                batch: 8,
                prompt: 16,
                new_tokens: 600,
            };
            let peak = replay(&s, g, u64::MAX).peak_reserved;
            let beside = TORCH_CONTEXT
                + super::super::torch_alloc::DRIVER_RESERVE
                + if eager { OUTSIDE_EAGER } else { OUTSIDE_SDPA };
            for short in [0, 1, 2 * MIB + 1, 6 * MIB + 1, peak / 2] {
                let capacity = beside + peak - short;
                let all = lengths(&s, g, capacity);
                // around the last token it made, and across the whole generation
                let made = all.made.len() as u64;
                let around = [made.saturating_sub(1), made, made + 1, g.new_tokens];
                for n in (0..=g.new_tokens).step_by(61).chain(around) {
                    if n > g.new_tokens {
                        // longer than the run: it cannot tell unless it failed before
                        assert_eq!(all.at(n).is_some(), all.failed.is_some());
                        continue;
                    }
                    let alone = on_card(&s, Generation { new_tokens: n, ..g }, capacity);
                    assert_eq!(all.at(n), Some(alone), "{eager} {short} {n}");
                }
                phases.push(on_card(&s, g, capacity).failed.map(|f| f.phase));
            }
        }
        assert!(phases.contains(&None));
        assert!(phases.iter().any(|p| matches!(p, Some(Phase::Decode(_)))));
    }

    /// The allocator behind a table of live tensors, one entry per allocation: the replay as it
    /// named tensors before it named them by their blocks.
    struct Table(
        CachingAllocator,
        Vec<Option<super::super::torch_alloc::Allocation>>,
        Vec<u64>,
    );
    impl Sink for Table {
        fn alloc(&mut self, bytes: u64, phase: Phase) -> Result<usize, Stop> {
            let a = self.0.malloc(bytes).map_err(|oom| Stop { oom, phase })?;
            self.1.push(Some(a));
            Ok(self.1.len() - 1)
        }
        fn free(&mut self, id: usize) {
            if let Some(a) = self.1.get_mut(id).and_then(Option::take) {
                self.0.free(a);
            }
        }
        fn empty_cache(&mut self) {
            self.0.empty_cache();
        }
        fn made(&mut self, _tokens: u64) {
            self.2.push(self.0.peak_reserved());
        }
    }

    #[test]
    fn naming_tensors_by_their_blocks_replays_as_a_table_of_tensors_does() {
        let shapes = [
            tiny(),
            Shape {
                eager: true,
                tied: true,
                ..tiny()
            },
            Shape {
                fused: true,
                window: Some(4096),
                ..tiny()
            },
            Shape {
                qkv_bias: true,
                qk_norm: true,
                eos: false,
                qwen_forward: true,
                llama3_rope: true,
                ..tiny()
            },
        ];
        let g = Generation {
            batch: 3,
            prompt: 40,
            new_tokens: 90,
        };
        for s in shapes {
            let peak = replay(&s, g, u64::MAX).peak_reserved;
            for limit in [u64::MAX, peak, peak - 1, peak / 2, 8 * MIB] {
                let mut by_block = Replay::new(limit);
                let a = run(&s, g, &mut by_block);
                let mut table = Table(CachingAllocator::new(limit), Vec::new(), Vec::new());
                let b = run(&s, g, &mut table);
                assert_eq!(a, b, "{s:?} {limit}");
                assert_eq!(by_block.made, table.2, "{s:?} {limit}");
                assert_eq!(
                    (
                        by_block.allocator.peak_reserved(),
                        by_block.allocator.reserved()
                    ),
                    (table.0.peak_reserved(), table.0.reserved()),
                    "{s:?} {limit}"
                );
            }
        }
    }

    #[test]
    fn sizes_past_64_bits_fail_instead_of_wrapping() {
        let g = Generation {
            batch: u64::MAX,
            prompt: u64::MAX,
            new_tokens: 1,
        };
        let out = replay(&tiny(), g, 1 << 40);
        assert!(matches!(
            out.failed,
            Some(Stop {
                phase: Phase::Prefill,
                ..
            })
        ));
    }
}
