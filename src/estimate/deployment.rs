//! What a deployment adds beside the one text model: LoRA adapters and a draft model for
//! speculative decoding, each priced as its own component of the peak.
//!
//! **LoRA.** A targeted Linear of shape (in, out) carries A (rank × in) and B (out × rank):
//! `rank × (in + out)` parameters per layer. Per engine:
//! - transformers (PEFT): the `--lora-targets` modules (PEFT's default for Llama, Mistral and
//!   Qwen2 is `q_proj, v_proj`: `TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`), each
//!   adapter loaded at f32: `PeftModel.from_pretrained` and `get_peft_model` take
//!   `autocast_adapter_dtype=True`, which upcasts bf16 and f16 adapter weights to float32;
//!   `--max-loras` adapters loaded side by side.
//! - vLLM (`--enable-lora`): every supported Linear of every layer (q, k, v, o, gate, up, down)
//!   is wrapped whatever the adapter targets, and `create_lora_weights` preallocates
//!   `lora_a_stacked` (max_loras × 1 × max_lora_rank × in) and `lora_b_stacked`
//!   (max_loras × 1 × out × max_lora_rank) in `lora_dtype` ("auto": the model's dtype) at start
//!   (vllm/lora/layers/base_linear.py); vLLM's defaults are `max_loras` 1, `max_lora_rank` 16
//!   (vllm/config/lora.py). Here `--lora-rank` is `--max-lora-rank`.
//! - SGLang (`--enable-lora --max-lora-rank R --max-loras-per-batch N --lora-target-modules …`):
//!   `LoRAMemoryPool.init_buffers` (python/sglang/srt/lora/mem_pool.py) allocates, for every layer
//!   (`num_hidden_layers`) and every normalized target module, `A_buffer` (N × R·c × in) and
//!   `B_buffer` (N × out × R) in the model's dtype (`LoRAManager(dtype=self.dtype)`), N =
//!   `max_loras_per_batch` (default 8). `get_normalized_target_modules` (lora/utils.py) maps
//!   q/k/v_proj to `qkv_proj` and gate/up_proj to `gate_up_proj` (c = 3 and 2,
//!   `get_stacked_multiply`; out = q + 2·kv and 2·intermediate, `get_default_hidden_dim`): one of
//!   q, k, v targeted buys the buffers of all three, one of gate, up both. Here `--lora-rank` is
//!   `--max-lora-rank`, `--max-loras` is `--max-loras-per-batch`.
//! - llama.cpp (`--lora`): the adapter GGUF's tensors, f16, for the targeted modules.
//!
//! **Draft model.** Its weights (in the target's dtype, or its own GGUF's), its KV cache for the
//! same tokens and sequences, and, in transformers' assisted generation, the target's forward
//! over the K candidate tokens of each step (their activations and f32 logits) at the decode peak.
//! vLLM's draft layers take their blocks from the same KV cache memory; its profiling run is
//! `max_num_batched_tokens` tokens, which the verification tokens do not pass. llama.cpp's draft
//! context (`-md`) is a second context on the same GPU with its own KV and compute buffers.
//! SGLang's draft worker (`--speculative-algorithm NEXTN` for `--mtp`, `STANDALONE` for
//! `--draft-model`) has its weights and its own KV pool beside the target's, for as many tokens
//! (`draft_runner_cache_size`); NEXTN shares the target's embedding and head
//! (`EAGLEWorker.__init__` → `set_embed_and_head`), see `sglang_startup`.

use serde::Serialize;

use super::{
    kv_bytes_in, llamacpp, weight_bytes, CachePolicy, Engine, Estimate, KvLayout, Profile, Workload,
};
use crate::dtype::WeightDtype;
use crate::model::Spec;

/// One Linear of a decoder layer LoRA can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Target {
    pub const ALL: [Target; 7] = [
        Target::Q,
        Target::K,
        Target::V,
        Target::O,
        Target::Gate,
        Target::Up,
        Target::Down,
    ];

    /// PEFT's default for the Llama, Mistral and Qwen2 families.
    pub const PEFT_DEFAULT: [Target; 2] = [Target::Q, Target::V];

    pub fn parse(s: &str) -> Option<Target> {
        let t = s.trim().to_ascii_lowercase();
        let t = t.strip_suffix("_proj").unwrap_or(&t);
        Some(match t {
            "q" => Target::Q,
            "k" => Target::K,
            "v" => Target::V,
            "o" => Target::O,
            "gate" => Target::Gate,
            "up" => Target::Up,
            "down" => Target::Down,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Target::Q => "q_proj",
            Target::K => "k_proj",
            Target::V => "v_proj",
            Target::O => "o_proj",
            Target::Gate => "gate_proj",
            Target::Up => "up_proj",
            Target::Down => "down_proj",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }

    /// (in, out) of this Linear in one layer, and how many layers have it.
    fn shape(self, spec: &Spec) -> (u64, u64, u64) {
        let h = spec.hidden_size;
        let attention_layers: u64 = spec
            .attention_groups()
            .iter()
            .map(|g| g.layers)
            .fold(0, u64::saturating_add);
        // MLP targets: the dense layers' MLP and the shared expert of MoE layers (routed experts
        // are fused 3-D tensors PEFT does not target by name).
        let (dense_layers, sparse_layers, shared) = match &spec.experts {
            Some(e) => (
                spec.num_layers.saturating_sub(e.sparse_layers),
                e.sparse_layers,
                e.shared_intermediate_size,
            ),
            None => (spec.num_layers, 0, 0),
        };
        let mlp = |inter: u64| (h, inter);
        match self {
            Target::Q => (h, spec.q_dim(), attention_layers),
            Target::K | Target::V => (h, spec.kv_dim(), attention_layers),
            Target::O => (spec.q_dim(), h, attention_layers),
            Target::Gate | Target::Up | Target::Down => {
                // rank × (in + out) is the same either way round.
                let (i, o) = mlp(spec.intermediate_size);
                let dense = (i.saturating_add(o)).saturating_mul(dense_layers);
                let (si, so) = mlp(shared);
                let sparse = if shared > 0 {
                    si.saturating_add(so).saturating_mul(sparse_layers)
                } else {
                    0
                };
                (dense.saturating_add(sparse), 0, 1)
            }
        }
    }
}

/// The Linears targeted, as a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Targets(u8);

impl Targets {
    pub fn of(list: &[Target]) -> Targets {
        Targets(list.iter().fold(0, |m, t| m | t.bit()))
    }
    pub fn all() -> Targets {
        Targets::of(&Target::ALL)
    }
    pub fn contains(self, t: Target) -> bool {
        self.0 & t.bit() != 0
    }
    pub fn list(self) -> Vec<Target> {
        Target::ALL
            .into_iter()
            .filter(|&t| self.contains(t))
            .collect()
    }
}

impl Serialize for Targets {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.list().into_iter().map(Target::name))
    }
}

/// `--lora-rank`, `--lora-targets`, `--max-loras`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Lora {
    pub rank: u64,
    pub targets: Targets,
    pub max_loras: u64,
}

/// A draft model for speculative decoding and the tokens it proposes per step.
#[derive(Debug, Clone, Copy)]
pub struct Draft<'a> {
    pub spec: &'a Spec,
    pub tokens: u64,
}

/// What sits beside the model: adapters and a draft.
#[derive(Debug, Clone, Copy, Default)]
pub struct Deployment<'a> {
    pub lora: Option<Lora>,
    pub draft: Option<Draft<'a>>,
    /// `plan --images`: vLLM's start-up profiles the vision encoder before it sizes the KV cache.
    pub images: Option<crate::model::images::ImageLoad>,
}

impl Deployment<'_> {
    pub fn is_empty(&self) -> bool {
        self.lora.is_none() && self.draft.is_none()
    }
}

/// The modules an engine wraps for `lora`: vLLM all it supports, SGLang the targets' stacked
/// modules (q/k/v → qkv_proj, gate/up → gate_up_proj: `get_normalized_target_modules`), the
/// others the targets.
pub fn wrapped(lora: &Lora, engine: Engine) -> Targets {
    match engine {
        Engine::Vllm => Targets::all(),
        Engine::Sglang => {
            let t = lora.targets;
            let mut list = Vec::new();
            if [Target::Q, Target::K, Target::V]
                .into_iter()
                .any(|x| t.contains(x))
            {
                list.extend([Target::Q, Target::K, Target::V]);
            }
            if t.contains(Target::O) {
                list.push(Target::O);
            }
            if t.contains(Target::Gate) || t.contains(Target::Up) {
                list.extend([Target::Gate, Target::Up]);
            }
            if t.contains(Target::Down) {
                list.push(Target::Down);
            }
            Targets::of(&list)
        }
        _ => lora.targets,
    }
}

/// Bytes of one adapter element in this engine.
pub fn adapter_elem_bytes(engine: Engine, dtype: WeightDtype) -> u64 {
    match engine {
        Engine::Transformers | Engine::TransformersEager => 4,
        Engine::Vllm | Engine::Sglang => dtype.compute_kv_dtype().elem_bytes().of(1),
        _ => 2,
    }
}

/// Parameters of one adapter of `rank` over `targets`: rank × (in + out) per Linear and layer.
pub fn adapter_parameters(spec: &Spec, rank: u64, targets: Targets) -> u64 {
    targets
        .list()
        .into_iter()
        .map(|t| {
            let (i, o, layers) = t.shape(spec);
            rank.saturating_mul(i.saturating_add(o))
                .saturating_mul(layers)
        })
        .fold(0, u64::saturating_add)
}

/// Bytes of the adapters on the card: `max_loras` adapters (vLLM's preallocated slots).
pub fn adapter_bytes(spec: &Spec, lora: &Lora, engine: Engine, dtype: WeightDtype) -> u64 {
    adapter_parameters(spec, lora.rank, wrapped(lora, engine))
        .saturating_mul(lora.max_loras)
        .saturating_mul(adapter_elem_bytes(engine, dtype))
}

/// The draft's weights on the GPU: in the target's dtype, or the draft's own GGUF tensors;
/// llama.cpp keeps its input embedding in host memory as it does the target's.
pub fn draft_weight_bytes(draft: &Spec, w: &Workload) -> u64 {
    let dtype = if draft.gguf.is_some() {
        draft.native_dtype
    } else {
        w.weight_dtype
    };
    match w.engine {
        Engine::LlamaCpp => llamacpp::gpu_weights(draft, dtype),
        _ => weight_bytes(draft, dtype),
    }
}

/// The draft's KV cache for the workload's tokens and sequences, as the engine lays it out.
pub fn draft_kv_bytes(draft: &Spec, w: &Workload) -> u64 {
    if w.engine == Engine::LlamaCpp {
        return llamacpp::kv_cache(draft, w);
    }
    let p = Profile::of(w.engine);
    let tokens = match p.kv_layout {
        KvLayout::Paged { block } => {
            let b = block.max(1);
            w.total_tokens().div_ceil(b).saturating_mul(b)
        }
        _ => w.total_tokens(),
    };
    kv_bytes_in(
        draft,
        w.kv_dtype,
        tokens,
        w.batch,
        CachePolicy::of(w.engine),
    )
}

/// transformers' assisted generation: the target's forward over K candidate tokens per sequence
/// beside the one it would run, their activations and their f32 logits (and softmax).
pub fn verification_bytes(spec: &Spec, w: &Workload, k: u64) -> u64 {
    if !w.engine.is_transformers() {
        return 0;
    }
    let p = Profile::of(w.engine);
    let d = w.weight_dtype.compute_kv_dtype().elem_bytes().as_f64();
    let (per_token, mlp) = super::token_row(spec, &p, d);
    let rows = k.saturating_mul(w.batch) as f64;
    (rows * (per_token + mlp + spec.vocab_size as f64 * 8.0)) as u64
}

/// What each decode step of the target carries besides its own token: the draft's candidates.
pub fn decode_extra(spec: &Spec, w: &Workload, d: &Deployment) -> u64 {
    d.draft
        .as_ref()
        .map_or(0, |x| verification_bytes(spec, w, x.tokens))
}

/// The model's estimate (with `decode_extra` in its decode step), the deployment's components
/// added to it.
pub fn add(e: &mut Estimate, spec: &Spec, w: &Workload, d: &Deployment) {
    if let Some(lora) = &d.lora {
        e.adapters = adapter_bytes(spec, lora, w.engine, w.weight_dtype);
    }
    if let Some(draft) = &d.draft {
        e.draft_weights = draft_weight_bytes(draft.spec, w);
        e.draft_kv_cache = draft_kv_bytes(draft.spec, w);
        // The draft's own llama.cpp context reserves its compute buffer beside the target's (the
        // candidate tokens verified by transformers are in the decode step: `decode_extra`).
        if w.engine == Engine::LlamaCpp {
            let extra = llamacpp::compute_buffer(draft.spec, w);
            e.activations = e.activations.saturating_add(extra);
            e.total = e.total.saturating_add(extra);
        }
    }
    e.total = [e.adapters, e.draft_weights, e.draft_kv_cache]
        .into_iter()
        .fold(e.total, u64::saturating_add);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::KvDtype;
    use crate::model::presets;

    fn preset(id: &str) -> Spec {
        let (id, json) = presets::find(id).unwrap();
        presets::load(id, json).unwrap()
    }

    fn work(engine: Engine) -> Workload {
        Workload {
            llama: Default::default(),
            prompt_tokens: 1000,
            max_new_tokens: 24,
            batch: 2,
            weight_dtype: WeightDtype::Bf16,
            kv_dtype: KvDtype::Bf16,
            engine,
        }
    }

    #[test]
    fn targets_parse_as_peft_and_short_names() {
        assert_eq!(Target::parse("q_proj"), Some(Target::Q));
        assert_eq!(Target::parse(" Down "), Some(Target::Down));
        assert_eq!(Target::parse("lm_head"), None);
        let t = Targets::of(&[Target::V, Target::Q, Target::Q]);
        assert_eq!(t.list(), vec![Target::Q, Target::V]);
    }

    #[test]
    fn an_adapter_is_rank_times_in_plus_out_per_linear_and_layer() {
        // Mistral-7B: hidden 4096, 32 heads × 128, 8 KV heads, MLP 14336, 32 layers.
        let m = preset("mistralai/Mistral-7B-Instruct-v0.2");
        let q_v = adapter_parameters(&m, 16, Targets::of(&Target::PEFT_DEFAULT));
        assert_eq!(q_v, 16 * ((4096 + 4096) + (4096 + 1024)) * 32);
        let all = adapter_parameters(&m, 8, Targets::all());
        let per_layer = (4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096) + 3 * (4096 + 14336);
        assert_eq!(all, 8 * per_layer * 32);
    }

    #[test]
    fn vllm_preallocates_every_module_for_every_slot() {
        let m = preset("mistralai/Mistral-7B-Instruct-v0.2");
        let lora = Lora {
            rank: 16,
            targets: Targets::of(&Target::PEFT_DEFAULT),
            max_loras: 4,
        };
        let vllm = adapter_bytes(&m, &lora, Engine::Vllm, WeightDtype::Bf16);
        assert_eq!(vllm, adapter_parameters(&m, 16, Targets::all()) * 4 * 2);
        let peft = adapter_bytes(&m, &lora, Engine::Transformers, WeightDtype::Bf16);
        assert_eq!(
            peft,
            adapter_parameters(&m, 16, lora.targets) * 4 * 4,
            "PEFT upcasts to f32"
        );
    }

    #[test]
    fn sglang_buys_the_stacked_module_of_each_target() {
        let m = preset("mistralai/Mistral-7B-Instruct-v0.2");
        let lora = Lora {
            rank: 16,
            targets: Targets::of(&Target::PEFT_DEFAULT),
            max_loras: 8,
        };
        // q and v targeted: qkv_proj's A (8 × 48 × 4,096) and B (8 × (4,096 + 2 × 1,024) × 16).
        assert_eq!(
            wrapped(&lora, Engine::Sglang).list(),
            vec![Target::Q, Target::K, Target::V]
        );
        let per_layer = 3 * 16 * 4096 + (4096 + 2 * 1024) * 16;
        assert_eq!(
            adapter_bytes(&m, &lora, Engine::Sglang, WeightDtype::Bf16),
            8 * per_layer * 32 * 2
        );
        let up_down = Lora {
            targets: Targets::of(&[Target::Up, Target::Down]),
            ..lora
        };
        assert_eq!(
            wrapped(&up_down, Engine::Sglang).list(),
            vec![Target::Gate, Target::Up, Target::Down]
        );
    }

    #[test]
    fn a_draft_adds_its_weights_cache_and_the_verification_tokens() {
        let target = preset("Qwen/Qwen2.5-7B-Instruct");
        let draft = preset("Qwen/Qwen2.5-0.5B-Instruct");
        let w = work(Engine::Transformers);
        let alone = super::super::estimate(&target, &w, 80 << 30);
        let d = Deployment {
            images: None,
            lora: None,
            draft: Some(Draft {
                spec: &draft,
                tokens: 20,
            }),
        };
        let mut with = super::super::estimate_with_decode(
            &target,
            &w,
            80 << 30,
            decode_extra(&target, &w, &d),
        );
        add(&mut with, &target, &w, &d);
        // 24 layers × 2 KV heads × 64 × (K, V) × 2 bytes per token.
        assert_eq!(with.draft_kv_cache, 24 * 2 * 64 * 2 * 2 * 1024 * 2);
        assert_eq!(with.draft_weights, weight_bytes(&draft, WeightDtype::Bf16));
        assert_eq!(
            with.total,
            alone.total
                + with.draft_weights
                + with.draft_kv_cache
                + (with.activations - alone.activations)
        );
        // A 1,000-token prompt of 2 sequences peaks at the prefill: the candidates add nothing.
        assert_eq!(alone.peak_phase, super::super::Phase::Prefill);
        assert_eq!(with.activations, alone.activations);
        // 24 new tokens after 8: the last decode step peaks, and carries the 20 candidates.
        let long = Workload {
            prompt_tokens: 8,
            max_new_tokens: 4000,
            ..w
        };
        let extra = decode_extra(&target, &long, &d);
        let base = super::super::estimate(&target, &long, 80 << 30);
        let more = super::super::estimate_with_decode(&target, &long, 80 << 30, extra);
        assert_eq!(base.peak_phase, super::super::Phase::Decode);
        assert_eq!(more.activations, base.activations + extra);
        // Among them the 20 × 2 candidates' f32 logits and softmax over 152,064 entries.
        assert!(extra >= 40 * 152_064 * 8, "{extra}");
    }
}
