//! `Spec`: the facts about a model that decide its memory — shapes, not weights.

use serde::Serialize;

use super::layout::{AttentionGroup, KvRow, Layout, StateGroup};
use crate::dtype::WeightDtype;

/// A decoder-only transformer's shape, read from config.json, a preset or a GGUF header.
#[derive(Debug, Clone, Serialize)]
pub struct Spec {
    /// Where it came from, as the user named it (an HF id, a path, a preset).
    pub name: String,
    /// `model_type` of config.json (`llama`, `mistral`, `gemma2`…), or GGUF's `general.architecture`.
    pub architecture: String,
    pub hidden_size: u64,
    pub intermediate_size: u64,
    pub num_layers: u64,
    pub num_heads: u64,
    pub num_kv_heads: u64,
    pub head_dim: u64,
    pub vocab_size: u64,
    pub max_position_embeddings: Option<u64>,
    pub tie_word_embeddings: bool,
    /// Attention window of the sliding-window layers, and how many layers use it.
    pub sliding_window: Option<u64>,
    pub sliding_layers: u64,
    pub experts: Option<Experts>,
    /// q/k/v projections carry a bias (qwen2).
    pub qkv_bias: bool,
    /// Per-head RMSNorm on q and k (qwen3, gemma3).
    pub qk_norm: bool,
    /// RMSNorms per decoder layer: 2 for llama, 4 for gemma2/3.
    pub norms_per_layer: u64,
    /// q/k/v and gate/up each computed as one matmul (phi3): the fused outputs stay alive.
    pub fused_projections: bool,
    /// RoPE base and RMSNorm epsilon: irrelevant to memory, needed to run the model.
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
    /// The rest of what running the model needs and memory does not (activation, soft-capping,
    /// RoPE scaling…); the runtime reads it, the estimate does not.
    #[serde(skip)]
    pub numerics: Numerics,
    /// The dtype the checkpoint is stored and loaded in by default (`torch_dtype`, quantization_config).
    pub native_dtype: WeightDtype,
    /// Exact tensor bytes when the source is a GGUF file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gguf: Option<GgufWeights>,
    /// Exact tensor bytes from the checkpoint's safetensors headers, when they could be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<super::checkpoint::CheckpointWeights>,
    /// Things the reader noticed that the user should know (an ignored quantization method…).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The tensors and cache of a model that is not one llama-style block repeated (MLA, hybrids,
    /// local/global mixes, MoE with shared experts): when present it replaces what the fields
    /// above would imply, and the fields above are only its summary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<Layout>,
    /// Tensors a quantized checkpoint keeps in 16 bits beyond the format's own rule (its
    /// `modules_to_not_convert` / `ignore`), by role.
    #[serde(skip)]
    pub keep_dense: Vec<Role>,
    /// The vision tower of a multimodal checkpoint (`vision_config`), all `Role::Vision`:
    /// counted by `tensors()` after the language model's.
    #[serde(skip)]
    pub vision: Vec<TensorGroup>,
    /// The vision tower's encoder layers (its `_no_split_modules` blocks, which accelerate's
    /// `device_map="auto"` places one by one when the tower does not fit a device whole); 0 for a
    /// text-only model.
    #[serde(skip)]
    pub vision_layers: u64,
    /// What an image costs a vision-language model (`plan --images`): its token rule and its
    /// encoder's shape; `None` for a text-only model or a family whose rule is not known.
    #[serde(skip)]
    pub images: Option<super::images::ImageInput>,
    /// llama.cpp's `--mmproj`: the projector file's real tensor bytes (`model::mmproj`). When set
    /// they are the vision tower, in place of any `Role::Vision` tensors above, whatever the
    /// language model's dtype: the mmproj is loaded as it is stored.
    #[serde(skip)]
    pub mmproj_bytes: Option<u64>,
}

/// Facts that change a model's outputs but not its memory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Numerics {
    pub activation: Activation,
    pub rope_scaling: Option<RopeScaling>,
    /// RoPE pairs dimension 2i with 2i+1 (GGUF's llama q/k are permuted for that) instead of i
    /// with i + head_dim/2 (Hugging Face layout).
    pub rope_interleaved: bool,
    /// Queries are scaled by this instead of 1/√head_dim (gemma2's `query_pre_attn_scalar`^-½).
    pub query_scale: Option<f64>,
    /// tanh soft-capping of the attention scores and of the final logits (gemma2).
    pub attention_softcap: Option<f64>,
    pub final_softcap: Option<f64>,
    /// Gemma: embeddings times √hidden, RMSNorm weights applied as 1 + w.
    pub gemma_norms: bool,
    /// MoE: the chosen experts' routing weights renormalised to sum to 1.
    pub norm_topk_prob: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    #[default]
    Silu,
    /// GELU with the tanh approximation (`gelu_pytorch_tanh`).
    GeluTanh,
}

/// How RoPE frequencies are stretched for long contexts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// Positions divided by `factor`.
    Linear { factor: f64 },
    /// Llama 3.1's frequency-dependent scaling.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct Experts {
    pub count: u64,
    pub active: u64,
    pub intermediate_size: u64,
    /// Layers with experts (the rest have a dense MLP of `intermediate_size`).
    pub sparse_layers: u64,
    /// qwen2-moe's always-on shared expert.
    pub shared_intermediate_size: u64,
}

/// A GGUF file's tensors, priced exactly from their block types.
#[derive(Debug, Clone, Serialize)]
pub struct GgufWeights {
    pub total_bytes: u64,
    pub tensor_count: u64,
    pub parameters: u64,
    /// `file_type` of the header, e.g. `MOSTLY_Q4_K_M`, when present.
    pub file_type: Option<String>,
    /// Bytes by block type, largest first.
    pub by_type: Vec<(String, u64)>,
    /// The tensors a runtime widens to its compute dtype when it loads the file (embeddings,
    /// 1-D norms and biases, and 16/32-bit matrices): their elements and their bytes in the file.
    pub widened_elements: u64,
    pub widened_file_bytes: u64,
}

/// What a weight matrix is for: decides whether a quantizer touches it and at which precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Embedding,
    LmHead,
    AttnQ,
    AttnK,
    AttnV,
    AttnO,
    MlpGate,
    MlpUp,
    MlpDown,
    Router,
    /// The linear projections of a state-space or linear-attention mixer (in_proj, x_proj,
    /// dt_proj, out_proj): quantized like any linear layer.
    Mixer,
    /// The depthwise conv1d kernel of a Mamba / DeltaNet mixer: not an `nn.Linear`, so no
    /// quantizer touches it, and llama.cpp keeps it in f32.
    Conv,
    /// 1-D tensors: norms and biases. Never quantized.
    Vector,
    /// A multimodal checkpoint's vision tower (patch embedding, ViT blocks, mergers): loaded
    /// with the language model at the checkpoint's dense precision.
    Vision,
}

impl Role {
    pub fn is_linear(self) -> bool {
        !matches!(
            self,
            Role::Embedding | Role::LmHead | Role::Vector | Role::Conv | Role::Vision
        )
    }
}

/// `count` tensors of `rows × cols` (out × in for linear layers) with one role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorGroup {
    pub role: Role,
    pub rows: u64,
    pub cols: u64,
    pub count: u64,
    /// Part of a routed expert (what MXFP4 checkpoints quantize and the rest of the model is not).
    pub routed: bool,
}

impl TensorGroup {
    pub fn params(&self) -> u64 {
        self.rows
            .saturating_mul(self.cols)
            .saturating_mul(self.count)
    }
}

impl Spec {
    pub fn q_dim(&self) -> u64 {
        self.num_heads.saturating_mul(self.head_dim)
    }
    pub fn kv_dim(&self) -> u64 {
        self.num_kv_heads.saturating_mul(self.head_dim)
    }
    /// Every weight tensor as transformers lays it out (fused projections counted as their parts:
    /// the bytes are the same). Sizes saturate; a spec read from a config has passed the
    /// parameter bound (`layout::MAX_PARAMETERS`), so none does.
    pub fn tensors(&self) -> Vec<TensorGroup> {
        let mut t = self.text_tensors();
        t.extend(self.vision.iter().copied());
        t
    }

    /// The language model's tensors alone.
    fn text_tensors(&self) -> Vec<TensorGroup> {
        let (h, l, v) = (self.hidden_size, self.num_layers, self.vocab_size);
        let (q, kv) = (self.q_dim(), self.kv_dim());
        if let Some(layout) = &self.layout {
            return layout.tensors.clone();
        }
        let g = |role, rows, cols, count| TensorGroup {
            role,
            rows,
            cols,
            count,
            routed: false,
        };
        let mut t = vec![
            g(Role::Embedding, v, h, 1),
            g(Role::AttnQ, q, h, l),
            g(Role::AttnK, kv, h, l),
            g(Role::AttnV, kv, h, l),
            g(Role::AttnO, h, q, l),
            // final norm + per-layer norms
            g(
                Role::Vector,
                1,
                h,
                self.norms_per_layer.saturating_mul(l).saturating_add(1),
            ),
        ];
        if !self.tie_word_embeddings {
            t.push(g(Role::LmHead, v, h, 1));
        }
        if self.qkv_bias {
            t.push(g(
                Role::Vector,
                1,
                q.saturating_add(kv.saturating_mul(2)),
                l,
            ));
        }
        if self.qk_norm {
            t.push(g(Role::Vector, 1, self.head_dim.saturating_mul(2), l));
        }
        let dense_layers = self
            .experts
            .as_ref()
            .map_or(l, |e| l.saturating_sub(e.sparse_layers));
        let mlp = |t: &mut Vec<TensorGroup>, inter: u64, count: u64| {
            if count > 0 && inter > 0 {
                t.push(g(Role::MlpGate, inter, h, count));
                t.push(g(Role::MlpUp, inter, h, count));
                t.push(g(Role::MlpDown, h, inter, count));
            }
        };
        mlp(&mut t, self.intermediate_size, dense_layers);
        if let Some(e) = &self.experts {
            t.push(g(Role::Router, e.count, h, e.sparse_layers));
            let experts = t.len();
            mlp(
                &mut t,
                e.intermediate_size,
                e.count.saturating_mul(e.sparse_layers),
            );
            for x in &mut t[experts..] {
                x.routed = true;
            }
            if e.shared_intermediate_size > 0 {
                mlp(&mut t, e.shared_intermediate_size, e.sparse_layers);
                // the shared expert's sigmoid gate: hidden → 1
                t.push(g(Role::Router, 1, h, e.sparse_layers));
            }
        }
        t
    }

    /// The checkpoint's multi-token-prediction modules, when its family builds them.
    pub fn mtp(&self) -> Option<&super::layout::Mtp> {
        self.layout.as_ref().and_then(|l| l.mtp.as_ref())
    }

    /// The multi-token-prediction modules as a draft model of their own: their layers and cache,
    /// no embedding or head (the draft shares the model's), in the model's dtype.
    pub fn mtp_draft(&self) -> Option<Spec> {
        let m = self.mtp()?.clone();
        let mut d = self.clone();
        d.name = format!("{} (MTP)", self.name);
        d.num_layers = m.layers;
        d.sliding_layers = 0;
        d.experts = self.experts.as_ref().and_then(|e| {
            (m.sparse_layers > 0).then_some(Experts {
                sparse_layers: m.sparse_layers,
                ..e.clone()
            })
        });
        d.gguf = None;
        d.checkpoint = None;
        d.vision = Vec::new();
        d.vision_layers = 0;
        d.notes = Vec::new();
        d.layout = Some(super::layout::Layout {
            tensors: m.tensors,
            attention: m.attention,
            state: Vec::new(),
            mtp: None,
        });
        Some(d)
    }

    pub fn parameters(&self) -> u64 {
        match &self.gguf {
            Some(g) => g.parameters,
            None => self
                .tensors()
                .iter()
                .map(TensorGroup::params)
                .fold(0, u64::saturating_add),
        }
    }

    /// Layers whose KV cache keeps every token (the rest keep at most `sliding_window`).
    pub fn full_attention_layers(&self) -> u64 {
        match &self.layout {
            Some(l) => l
                .attention
                .iter()
                .filter(|g| g.window.is_none())
                .map(|g| g.layers)
                .fold(0, u64::saturating_add),
            None => self.num_layers.saturating_sub(self.sliding_layers),
        }
    }

    /// The layers that cache keys and values, by window and row: from the layout, or for a
    /// uniform decoder its full and sliding layers with `kv_heads × head_dim` K and V rows.
    pub fn attention_groups(&self) -> Vec<AttentionGroup> {
        if let Some(l) = &self.layout {
            return l.attention.clone();
        }
        let row = KvRow::Heads {
            k: self.kv_dim(),
            v: self.kv_dim(),
        };
        let full = AttentionGroup {
            layers: self.full_attention_layers(),
            window: None,
            row,
        };
        let sliding = AttentionGroup {
            layers: self.sliding_layers.min(self.num_layers),
            window: self.sliding_window,
            row,
        };
        [full, sliding]
            .into_iter()
            .filter(|g| g.layers > 0)
            .collect()
    }

    /// The recurrent layers' per-sequence state (empty for pure transformers).
    pub fn state_groups(&self) -> &[StateGroup] {
        self.layout.as_ref().map_or(&[], |l| l.state.as_slice())
    }

    /// Whether layer `i` attends through the sliding window, following each family's layout:
    /// gemma2 slides on even layers, gemma3 on all but every sixth, qwen2 on the last
    /// `sliding_layers`, the rest on all of them.
    pub fn is_sliding(&self, i: u64) -> bool {
        if self.sliding_window.is_none() || self.sliding_layers == 0 {
            return false;
        }
        if self.sliding_layers >= self.num_layers {
            return true;
        }
        match self.architecture.as_str() {
            "gemma2" => i % 2 == 0,
            "gemma3" | "gemma3_text" => (i + 1) % 6 != 0,
            _ => i >= self.num_layers - self.sliding_layers,
        }
    }
}
