//! The estimate: bytes on the device for a model, a workload and an engine, split into the
//! components the vocabulary of causes names.

pub mod candle;
pub mod deployment;
pub mod engine;
pub mod kv;
pub mod llamacpp;
pub mod llamacpp_fit;
pub mod measured;
pub mod ollama;
pub mod sglang_startup;
pub mod torch_alloc;
pub mod torch_program;
pub mod vllm_startup;
pub mod weights;

use serde::Serialize;

pub use engine::{Calibration, Engine, KvLayout, LogitPositions, Profile};
pub use kv::{
    kv_bytes, kv_bytes_in, kv_bytes_in_cells, kv_bytes_per_token, kv_bytes_per_token_at,
    state_bytes, CachePolicy, MlaCache,
};
pub use llamacpp::LlamaCppArgs;
pub use measured::MeasuredModel;
pub use sglang_startup::{startup as sglang_startup, SglangArgs, Startup as SglangStartup};
pub use vllm_startup::{
    startup as vllm_startup, startup_with as vllm_startup_with, KvCacheDtype as VllmKvCacheDtype,
    Startup as VllmStartup, VllmArgs, VllmVersion,
};
pub use weights::{engine_weight_bytes, weight_bytes};

use crate::dtype::{KvDtype, WeightDtype};
use crate::model::Spec;

/// What is asked of the model: lengths, concurrency, formats, engine.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Workload {
    pub prompt_tokens: u64,
    pub max_new_tokens: u64,
    /// Sequences generated at once (batch size or concurrent requests).
    pub batch: u64,
    pub weight_dtype: WeightDtype,
    pub kv_dtype: KvDtype,
    pub engine: Engine,
    /// llama.cpp's own knobs (`-c`, `-ub`, `-b`, `-fa`) when the user set them; unset = the
    /// defaults, and a context just large enough for the workload.
    #[serde(skip_serializing_if = "LlamaCppArgs::is_default")]
    pub llama: LlamaCppArgs,
}

impl Workload {
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.max_new_tokens)
    }
}

/// Which moment of a generation sets the peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The prompt's forward pass: the full prompt's activations at once.
    Prefill,
    /// The last decode step: the longest KV cache.
    Decode,
}

/// Peak device memory, by component. `total` is what the card must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Estimate {
    pub weights: u64,
    /// KV cache at the peak moment (and `kv_cache_full` at the end of generation).
    pub kv_cache: u64,
    pub kv_cache_full: u64,
    pub activations: u64,
    /// Allocator rounding and caching (PyTorch's caching allocator keeps freed blocks).
    pub allocator: u64,
    /// CUDA context and library workspaces, outside any allocator.
    pub runtime: u64,
    /// Memory the engine leaves unused by design (vLLM's 1 − gpu_memory_utilization) plus the
    /// safety margin that makes a budget safe.
    pub margin: u64,
    /// LoRA adapters (`--lora-rank`): every slot the engine holds.
    #[serde(skip_serializing_if = "is_zero")]
    pub adapters: u64,
    /// The draft model's weights (`--draft-model`).
    #[serde(skip_serializing_if = "is_zero")]
    pub draft_weights: u64,
    /// The draft model's KV cache for the same tokens and sequences.
    #[serde(skip_serializing_if = "is_zero")]
    pub draft_kv_cache: u64,
    /// Of `weights`, the vision tower's (a multimodal checkpoint's `vision_config` and its
    /// projector): reports give it its own row beside the language model's weights; `weights`
    /// keeps it, so the components still sum to `total`. Not the encoder's activations
    /// (`vision_encoder`).
    #[serde(skip_serializing_if = "is_zero")]
    pub vision_tower: u64,
    /// The vision encoder's activations for the prompt's images (`plan --images`), counted beside
    /// the prefill's: the tower runs in the same first forward and PyTorch's caching allocator
    /// keeps its blocks.
    #[serde(skip_serializing_if = "is_zero")]
    pub vision_encoder: u64,
    pub total: u64,
    pub peak_phase: Phase,
}

impl Estimate {
    /// The bytes that grow with the workload (tokens and sequences): the KV caches, the
    /// activations (the vision encoder's too) and the allocator's share of them. Weights, the
    /// runtime and the margin do not.
    pub fn workload_bytes(&self) -> u64 {
        self.kv_cache
            .saturating_add(self.draft_kv_cache)
            .saturating_add(self.activations)
            .saturating_add(self.vision_encoder)
            .saturating_add(self.allocator)
    }
}

fn is_zero(b: &u64) -> bool {
    *b == 0
}

/// Share of the card kept back so a predicted fit does not run out in practice.
pub const SAFETY_FRACTION: f64 = 0.02;
pub const SAFETY_MIN: u64 = 256 << 20;

/// The most the margin keeps back, whatever the card: 2 % of a 200 GiB card. Past it the margin
/// would grow with the host, not with the model (2 % of a 1.5 TiB host is 30 GiB).
pub const SAFETY_MAX: u64 = 4 << 30;

/// The safety margin for a card of `vram` bytes.
pub fn safety_margin(vram: u64) -> u64 {
    ((vram as f64 * SAFETY_FRACTION) as u64).clamp(SAFETY_MIN, SAFETY_MAX)
}

impl Phase {
    /// How reports name the moment: "the {describe()} peak".
    pub fn describe(self) -> &'static str {
        match self {
            Phase::Prefill => "prefill",
            Phase::Decode => "last decode step",
        }
    }
}

/// Peak memory of `w` on `spec` for a card of `vram` bytes (vram matters only for the engines that
/// size themselves from the card, and for the margin).
pub fn estimate(spec: &Spec, w: &Workload, vram: u64) -> Estimate {
    estimate_with_decode(spec, w, vram, 0)
}

/// The same with `decode_extra` bytes beside each decode step's activations (a draft's
/// candidate tokens verified by the target), before the peak's moment is chosen.
pub fn estimate_with_decode(spec: &Spec, w: &Workload, vram: u64, decode_extra: u64) -> Estimate {
    if w.engine == Engine::LlamaCpp {
        return llamacpp::estimate(spec, w, vram);
    }
    let p = Profile::of(w.engine);
    let weights = engine_weight_bytes(spec, w.weight_dtype, w.engine);
    let d = w.weight_dtype.compute_kv_dtype().elem_bytes().as_f64();

    let kv_tokens = |tokens: u64| match p.kv_layout {
        KvLayout::Paged { block } => tokens.div_ceil(block.max(1)).saturating_mul(block),
        _ => tokens,
    };
    let policy = CachePolicy::of(w.engine);
    let kv_prompt = kv_bytes_in(
        spec,
        w.kv_dtype,
        kv_tokens(w.prompt_tokens),
        w.batch,
        policy,
    );
    let kv_full = kv_bytes_in(
        spec,
        w.kv_dtype,
        kv_tokens(w.total_tokens()),
        w.batch,
        policy,
    );

    let (prefill_act, decode_act) = if w.engine == Engine::Candle {
        candle::generation_activations(
            spec,
            &candle::Compute::of(w.weight_dtype),
            w.batch,
            w.prompt_tokens,
            w.total_tokens(),
            Some(candle::ATTENTION_SLICE),
        )
    } else {
        activations(spec, &p, w, d, kv_full)
    };
    let decode_act = decode_act.saturating_add(decode_extra);
    // vLLM and candle hold the whole cache from the start; transformers grows it.
    let (prefill_kv, decode_kv) = match p.kv_layout {
        KvLayout::Concatenated => (kv_prompt, kv_full),
        _ => (kv_full, kv_full),
    };
    let slack =
        |kv: u64, act: u64| (kv as f64 * p.kv_slack + act as f64 * p.activation_slack) as u64;
    // Saturating throughout: a size past 64 bits is `u64::MAX`, which no card holds.
    let peak = |kv: u64, act: u64| kv.saturating_add(act).saturating_add(slack(kv, act));
    let (peak_phase, kv_cache, activations) =
        if peak(prefill_kv, prefill_act) > peak(decode_kv, decode_act) {
            (Phase::Prefill, prefill_kv, prefill_act)
        } else {
            (Phase::Decode, decode_kv, decode_act)
        };
    let mut allocator = slack(kv_cache, activations);
    if w.engine == Engine::Candle && peak_phase == Phase::Prefill {
        allocator = allocator.saturating_add(candle::growth_headroom(
            spec,
            w.batch,
            w.prompt_tokens,
            0,
            Some(candle::ATTENTION_SLICE),
        ));
    }
    let reserved = ((1.0 - p.memory_fraction) * vram as f64) as u64;
    let margin = reserved.saturating_add(safety_margin(vram));
    let runtime = p.runtime_overhead;
    Estimate {
        weights,
        kv_cache,
        kv_cache_full: kv_full,
        activations,
        allocator,
        runtime,
        margin,
        adapters: 0,
        draft_weights: 0,
        draft_kv_cache: 0,
        vision_tower: weights::vision_bytes(spec, w.weight_dtype).min(weights),
        vision_encoder: 0,
        total: [kv_cache, activations, allocator, runtime, margin]
            .into_iter()
            .fold(weights, u64::saturating_add),
        peak_phase,
    }
}

/// Peak transient bytes of the prefill and of the last decode step.
fn activations(spec: &Spec, p: &Profile, w: &Workload, d: f64, kv_full: u64) -> (u64, u64) {
    let (q, kv, v) = (
        spec.q_dim() as f64,
        spec.kv_dim() as f64,
        spec.vocab_size as f64,
    );
    let prompt = w.prompt_tokens as f64;
    let batch = w.batch as f64;
    // Tokens in one forward pass; the prompt is the context they attend to.
    let step_tokens = match p.prefill_chunk {
        Some(c) => (batch * prompt).min(c as f64),
        None => batch * prompt,
    };
    let context = prompt;

    let (per_token, mlp) = token_row(spec, p, d);
    // Models without attention layers (Mamba-2) materialise no scores.
    let scores = p
        .score_bytes
        .filter(|_| !spec.attention_groups().is_empty());
    let attn = scores.map_or(0.0, |bytes| {
        // Materialised attention also expands GQA's K and V to every head (repeat_kv), and a fused
        // qkv projection stays alive while q, k and v are views of it.
        let repeat = if spec.num_kv_heads < spec.num_heads {
            2.0 * q
        } else {
            0.0
        };
        let fused = if spec.fused_projections {
            q + 2.0 * kv
        } else {
            0.0
        };
        step_tokens * (repeat + fused) * d
            + step_tokens * context * (spec.num_heads as f64 * bytes + d)
    });
    // MLA decompressed for attention: every head's K and V over the context, one layer at a time.
    let expanded = mla_expanded_row(spec, p) * d;
    let attn = attn + expanded * batch * prompt;
    let logit_rows = match p.logit_positions {
        LogitPositions::Last => batch,
        LogitPositions::All => step_tokens,
    };
    // Logits upcast to f32 for sampling, plus the softmax over them.
    let logits = logit_rows.max(p.sampler_warmup_seqs as f64) * v * 8.0;
    let scan = if matches!(p.engine, Engine::Transformers | Engine::TransformersEager) {
        ssd_scan_bytes(spec, batch, prompt, d)
    } else {
        0.0
    };
    let prefill = step_tokens * per_token + (step_tokens * mlp).max(attn).max(scan) + logits;

    // A decode step: one token per sequence; transformers' `torch.cat` briefly doubles one layer's
    // K (or V) at the full length.
    let concat = match p.kv_layout {
        KvLayout::Concatenated => kv_full as f64 / (2.0 * spec.num_layers.max(1) as f64),
        _ => 0.0,
    };
    let decode = batch * (per_token + mlp)
        + batch.max(p.sampler_warmup_seqs as f64) * v * 8.0
        + concat
        + expanded * batch * w.total_tokens() as f64;
    (prefill as u64, decode as u64)
}

/// Peak bytes of one Mamba-2 layer's prefill on transformers' pure-torch path: `mamba2_chunk_scan`
/// and `causal_conv1d_fn` as modeling_nemotron_h.py (and modeling_mamba2.py, modeling_falcon_h1.py,
/// modeling_granitemoehybrid.py, which share them) run them when mamba-ssm and causal-conv1d are
/// not installed; the largest over the model's Mamba-2 layer shapes, 0 without any. With
/// mamba-ssm's fused `mamba_chunk_scan_combined` the scan's transients stay in SRAM and the peak
/// is far lower, so this over-counts there.
///
/// `seq` tokens of `batch` sequences, padded to `S` = a multiple of the chunk `c` (T = batch·S
/// rows, `nc` = S / c chunks), `h` heads of `p`, `n` state, `g` groups. Alive through the scan:
/// the mixer's `in_proj` output and conv output in the model dtype (`d` bytes); the scan casts
/// to float32 and keeps every local until it returns: D_residual and x (T·h·p each), B and C
/// repeated to every head (T·h·n each), L = exp(segsum) (T·h·c). Then the largest of four
/// broadcast products, each with what is alive beside it:
/// - `C[:, :, :, None] * B[:, :, None]` (T·c·h·n) and its sum G (T·c·h);
/// - `M[..., None] * x[:, :, None]` (T·c·h·p) beside G, M (T·c·h each) and Y_diag (T·h·p);
/// - `B_decay[..., None, :] * x[..., None]` (T·h·p·n) beside B_decay and the chunk states;
/// - `C[..., None, :] * states[:, :, None]` (T·h·p·n) beside the nc + 1 states, Y_off and its sum.
///
/// Checked against torch.profiler's allocations on CPU by scripts/mamba2-torch-peak.py.
pub(crate) fn ssd_scan_bytes(spec: &Spec, batch: f64, seq: f64, d: f64) -> f64 {
    spec.state_groups()
        .iter()
        .filter_map(|g| g.scan)
        .map(|s| {
            let (h, p, n, c) = (
                s.heads as f64,
                s.head_dim as f64,
                s.state as f64,
                s.chunk.max(1) as f64,
            );
            let groups = s.groups as f64;
            let nc = (seq / c).ceil();
            let rows = batch * nc * c;
            let inner = h * p;
            let conv = inner + 2.0 * groups * n;
            let proj = inner + conv + h;
            // in_proj's and the convolution's outputs, dt, and A·dt with its cumsum (float32).
            let mixer = d * batch * seq * (proj + conv + h) + 4.0 * rows * 2.0 * h;
            let base = 4.0 * rows * (2.0 * h * p + 2.0 * h * n + h * c);
            let intra = 4.0 * rows * (c * h * n + c * h);
            let values = 4.0 * rows * (2.0 * c * h + c * h * p + h * p);
            let states = 4.0 * rows * (2.0 * c * h + 2.0 * h * p + h * n + h * p * n)
                + 4.0 * batch * nc * h * p * n;
            let out = 4.0 * rows * (2.0 * c * h + 3.0 * h * p + h * n + h * p * n)
                + 4.0 * batch * (nc + 1.0) * h * p * n;
            mixer + base + intra.max(values).max(states).max(out)
        })
        .fold(0.0, f64::max)
}

/// What the prefill of a model with Mamba-2 layers assumes under transformers: the pure-torch scan
/// (`ssd_scan_bytes`); `None` for other engines and models without Mamba-2 layers.
pub fn ssd_scan_note(spec: &Spec, engine: Engine) -> Option<String> {
    let transformers = matches!(engine, Engine::Transformers | Engine::TransformersEager);
    if !transformers || !spec.state_groups().iter().any(|g| g.scan.is_some()) {
        return None;
    }
    Some(
        "the prefill counts transformers' pure-torch Mamba-2 scan (mamba-ssm not installed), \
         whose float32 chunk products peak in one layer; with mamba-ssm's fused kernels the \
         prefill peak is lower"
            .to_string(),
    )
}

/// Bytes one token keeps alive through a layer (hidden-size copies, RoPE tables, ids and mask)
/// and its MLP's intermediate copies.
pub(crate) fn token_row(spec: &Spec, p: &Profile, d: f64) -> (f64, f64) {
    let h = spec.hidden_size as f64;
    // MoE: one expert runs at a time over the tokens routed to it; allow a skewed routing (2×).
    let inter = match &spec.experts {
        Some(e) if e.sparse_layers == spec.num_layers => {
            e.intermediate_size as f64 * (2.0 * e.active as f64 / e.count as f64).min(1.0)
        }
        _ => spec.intermediate_size as f64,
    };
    let mlp_copies = if spec.fused_projections {
        p.mlp_copies + 1.0
    } else {
        p.mlp_copies
    };
    let per_token =
        (p.hidden_copies * h + p.rope_copies * spec.head_dim as f64) * d + p.token_bytes;
    (per_token, mlp_copies * inter * d)
}

/// Elements per token of one MLA layer decompressed to every head's K and V (transformers'
/// `expand_kv`), the largest over the model's latent layers; 0 for an engine that attends on the
/// latent or a model without MLA.
fn mla_expanded_row(spec: &Spec, p: &Profile) -> f64 {
    if !p.expands_mla {
        return 0.0;
    }
    spec.attention_groups()
        .iter()
        .filter_map(|g| match g.row {
            crate::model::layout::KvRow::Latent { full_k, full_v, .. } => {
                Some(full_k.saturating_add(full_v) as f64)
            }
            crate::model::layout::KvRow::Heads { .. } => None,
        })
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::presets;

    fn mistral() -> Spec {
        let (id, json) = presets::find("mistralai/Mistral-7B-Instruct-v0.2").unwrap();
        presets::load(id, json).unwrap()
    }

    fn work(engine: Engine, prompt: u64, new: u64, batch: u64) -> Workload {
        Workload {
            llama: Default::default(),
            prompt_tokens: prompt,
            max_new_tokens: new,
            batch,
            weight_dtype: WeightDtype::Bf16,
            kv_dtype: KvDtype::Bf16,
            engine,
        }
    }

    #[test]
    fn components_add_up() {
        let e = estimate(
            &mistral(),
            &work(Engine::Transformers, 2048, 256, 1),
            24 << 30,
        );
        assert_eq!(
            e.total,
            e.weights + e.kv_cache + e.activations + e.allocator + e.runtime + e.margin
        );
        assert_eq!(e.kv_cache_full, 2304 * 131_072);
    }

    #[test]
    fn memory_grows_with_every_knob() {
        let m = mistral();
        let base = estimate(&m, &work(Engine::Transformers, 1024, 128, 1), 24 << 30).total;
        for bigger in [
            work(Engine::Transformers, 4096, 128, 1),
            work(Engine::Transformers, 1024, 4096, 1),
            work(Engine::Transformers, 1024, 128, 8),
        ] {
            assert!(estimate(&m, &bigger, 24 << 30).total > base);
        }
    }

    #[test]
    fn eager_attention_costs_quadratically() {
        let m = mistral();
        let at = |p| {
            let sdpa = estimate(&m, &work(Engine::Transformers, p, 1, 1), 80 << 30);
            let eager = estimate(&m, &work(Engine::TransformersEager, p, 1, 1), 80 << 30);
            eager.activations - sdpa.activations
        };
        let ratio = at(8192) as f64 / at(4096) as f64;
        assert!((3.5..4.5).contains(&ratio), "{ratio}");
    }

    /// One Mamba-2 layer (`hybrid_override_pattern: "M"`) of the given scan shape.
    fn one_mamba2(h: u64, p: u64, g: u64, n: u64, c: u64) -> Spec {
        let json = format!(
            r#"{{"model_type":"nemotron_h","hidden_size":256,"vocab_size":64,
            "hybrid_override_pattern":"M","num_attention_heads":4,"num_key_value_heads":4,
            "intermediate_size":512,"mamba_num_heads":{h},"mamba_head_dim":{p},"n_groups":{g},
            "ssm_state_size":{n},"chunk_size":{c},"conv_kernel":4}}"#
        );
        crate::model::config::parse_config(&json, std::path::Path::new("config.json"), "m").unwrap()
    }

    /// The mixer's prefill peak above what was alive before it, as torch.profiler recorded
    /// transformers 5.17's pure-torch path allocating on CPU in bf16
    /// (scripts/mamba2-torch-peak.py): the closed form is within 0.02 % at every shape, whichever
    /// of the scan's products is the largest.
    #[test]
    fn mamba2_torch_scan_matches_what_torch_allocated() {
        // (batch, seq, heads, head_dim, groups, state, chunk, measured bytes, closed form)
        let cases = [
            (1, 256, 8, 16, 2, 32, 64, 18_966_560, 18_964_480),
            (1, 500, 8, 16, 2, 32, 64, 37_915_296, 37_913_216),
            (2, 384, 8, 16, 1, 32, 128, 110_177_312, 110_174_208),
            (1, 512, 16, 32, 4, 16, 32, 42_832_960, 42_827_776),
            (1, 1024, 8, 32, 2, 64, 128, 285_839_392, 285_835_264),
        ];
        for (b, s, h, p, g, n, c, measured, closed) in cases {
            let got = ssd_scan_bytes(&one_mamba2(h, p, g, n, c), b as f64, s as f64, 2.0);
            assert_eq!(got as u64, closed, "{s} tokens, chunk {c}");
            let off = (got - measured as f64).abs() / measured as f64;
            assert!(off < 2e-4, "{s} tokens, chunk {c}: {got} vs {measured}");
        }
        // No Mamba-2 layer, no scan.
        assert_eq!(ssd_scan_bytes(&mistral(), 1.0, 2048.0, 2.0), 0.0);
    }

    /// Only transformers runs the pure-torch scan; vLLM's Triton kernels do not materialise it.
    #[test]
    fn mamba2_scan_counts_for_transformers_only() {
        let m = one_mamba2(64, 64, 8, 128, 128);
        let act = |engine| estimate(&m, &work(engine, 2048, 1, 1), 140 << 30).activations;
        let scan = ssd_scan_bytes(&m, 1.0, 2048.0, 2.0) as u64;
        assert!(act(Engine::Transformers) >= scan);
        assert!(act(Engine::Vllm) < scan / 10);
    }

    #[test]
    fn vllm_keeps_its_utilization_headroom() {
        let e = estimate(&mistral(), &work(Engine::Vllm, 1024, 128, 1), 24 << 30);
        assert!(e.margin >= ((24u64 << 30) as f64 * 0.1) as u64);
        // the paged cache rounds up to blocks of 16 tokens
        assert_eq!(e.kv_cache_full, 1152 * 131_072);
    }
}
