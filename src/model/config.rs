//! Reading a Hugging Face `config.json` into a `Spec`.

use std::path::Path;

use serde_json::{Map, Value};

use super::families::Kind;
use super::spec::{Activation, Experts, Numerics, RopeScaling, Spec};
use crate::error::InputError;

type Obj = Map<String, Value>;

/// The note on a config whose vision tower no family counts (dropped where transformers counts it).
pub const VISION_NOT_COUNTED: &str = "the vision tower in `vision_config` is not counted: the language model is sized; `plan --python` counts the tower as transformers builds it";

/// Parse config.json text. `path` is only used in messages; `name` is what reports call the model.
pub fn parse_config(text: &str, path: &Path, name: &str) -> Result<Spec, InputError> {
    let text = python_json(text);
    let root: Value = serde_json::from_str(&text).map_err(|source| InputError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    let Value::Object(outer) = root else {
        return Err(InputError::BadField {
            path: path.to_path_buf(),
            field: "(top level)".into(),
            value: "not an object".into(),
            why: "config.json must be a JSON object".into(),
        });
    };
    // Multimodal wrappers (gemma3, llava, mistral3…) keep the language model in `text_config`.
    let cfg: &Obj = match outer.get("text_config") {
        Some(Value::Object(inner)) => inner,
        _ => &outer,
    };
    // transformers fills what a published config leaves out from the family's config class:
    // Gemma-3's `text_config` omits vocab_size and head_dim, for one.
    let model_type = cfg
        .get("model_type")
        .or_else(|| outer.get("model_type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let defaults = super::families::defaults(model_type);
    let reader = Reader {
        cfg,
        outer: &outer,
        defaults: &defaults,
        path,
    };
    let mut spec = reader.spec(name)?;
    spec.images = super::images::read(&outer);
    if let Some((vision, depth)) = super::families::vision::tower(&reader, spec.hidden_size)? {
        let params = vision
            .iter()
            .map(super::spec::TensorGroup::params)
            .fold(0, u64::saturating_add);
        let images = if spec.images.is_some() {
            "`--images` prices what an image costs while it is encoded"
        } else {
            "what an image costs while it is encoded is not modelled for this model (`--images` is refused)"
        };
        spec.notes.push(format!(
            "the vision tower ({depth} layers, {} parameters) is counted in the weights, on its own row; {images}",
            crate::units::group(params)
        ));
        spec.vision = vision;
        spec.vision_layers = depth;
    }
    // Multi-token-prediction layers a config declares but its family does not build (GLM-4.5's
    // `num_nextn_predict_layers`, MiniMax's `num_mtp_modules`) are said, not silently left out.
    if spec.mtp().is_none() {
        for key in [
            "num_nextn_predict_layers",
            "mtp_num_hidden_layers",
            "num_mtp_modules",
        ] {
            if let Some(n) = reader.opt_u64(&[key]).ok().flatten().filter(|n| *n > 0) {
                spec.notes.push(format!(
                    "the config declares {n} multi-token-prediction layer(s) (`{key}`): not counted \
                     (transformers does not load them, vLLM only as a speculative draft) and not \
                     priced by --mtp for this architecture"
                ));
                break;
            }
        }
    }
    // A vision tower no family counts (Kimi-K2.5's MoonViT, Gemma-3's SigLIP) is said, not
    // silently left out.
    let tower = outer.get("vision_config").is_some_and(Value::is_object);
    if tower && spec.vision.is_empty() && !spec.notes.iter().any(|n| n.contains("vision")) {
        spec.notes.push(VISION_NOT_COUNTED.into());
    }
    reader.bounded(spec)
}

/// What config.json says about how the weights are stored, read without a family: for a model
/// whose shapes come from elsewhere (transformers on the meta device).
#[derive(Debug, Clone)]
pub struct Storage {
    pub native_dtype: crate::dtype::WeightDtype,
    pub keep_dense: Vec<super::spec::Role>,
    pub notes: Vec<String>,
}

/// The storage dtype and quantization of a config.json, as `parse_config` reads them.
pub fn storage(text: &str, path: &Path) -> Result<Storage, InputError> {
    let text = python_json(text);
    let root: Value = serde_json::from_str(&text).map_err(|source| InputError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    let empty = Obj::new();
    let outer = root.as_object().unwrap_or(&empty);
    let cfg: &Obj = match outer.get("text_config") {
        Some(Value::Object(inner)) => inner,
        _ => outer,
    };
    let reader = Reader {
        cfg,
        outer,
        defaults: &empty,
        path,
    };
    let mut notes = Vec::new();
    let (native_dtype, keep_dense) = super::quant::read(&reader, &mut notes)?;
    Ok(Storage {
        native_dtype,
        keep_dense,
        notes,
    })
}

/// Python's `json` module writes `NaN`, `Infinity` and `-Infinity` bare (mamba2's
/// `"time_step_limit": [0.0, Infinity]`) and reads them back; strict JSON has no such tokens.
/// They become `null` here — outside strings only — so such a config parses as Python reads it;
/// no field llm-oom sizes with is a float that could be infinite.
fn python_json(text: &str) -> std::borrow::Cow<'_, str> {
    const TOKENS: &[&str] = &["-Infinity", "Infinity", "NaN"];
    if !TOKENS.iter().any(|t| text.contains(t)) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        } else if let Some(t) = TOKENS.iter().find(|t| rest.starts_with(**t)) {
            out.push_str("null");
            rest = &rest[t.len()..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    std::borrow::Cow::Owned(out)
}

/// One config.json, with the language model's part first, then the wrapper, then the family's
/// transformers defaults.
pub(crate) struct Reader<'a> {
    pub(crate) cfg: &'a Obj,
    pub(crate) outer: &'a Obj,
    pub(crate) defaults: &'a Obj,
    pub(crate) path: &'a Path,
}

impl Reader<'_> {
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.cfg
            .get(key)
            .filter(|v| !v.is_null())
            .or_else(|| self.outer.get(key).filter(|v| !v.is_null()))
            .or_else(|| self.defaults.get(key).filter(|v| !v.is_null()))
    }

    /// Whether the config names `key` at all, even as `null` (`"q_lora_rank": null` means "no
    /// q LoRA", which is not the same as leaving the default of 1536).
    pub(crate) fn is_null(&self, key: &str) -> bool {
        matches!(self.cfg.get(key), Some(Value::Null))
            || (!self.cfg.contains_key(key) && matches!(self.outer.get(key), Some(Value::Null)))
    }

    pub(crate) fn opt_u64(&self, keys: &[&str]) -> Result<Option<u64>, InputError> {
        for key in keys {
            if let Some(v) = self.get(key) {
                return match v.as_u64() {
                    Some(n) => self.within_ceiling(key, n).map(Some),
                    None => Err(self.bad(key, v, "expected a non-negative integer")),
                };
            }
        }
        Ok(None)
    }

    /// `n` within the ceiling of what `key` counts (`limits::for_key`).
    fn within_ceiling(&self, key: &str, n: u64) -> Result<u64, InputError> {
        let (max, what) = crate::limits::for_key(key);
        if n > max {
            return Err(self.bad(
                key,
                &Value::from(n),
                &format!(
                    "past llm-oom's ceiling of {} for a {what}; no real model comes near it",
                    crate::units::group(max)
                ),
            ));
        }
        Ok(n)
    }

    /// `num_experts_per_tok`: at least one and at most the `count` experts there are (default 2).
    fn active_experts(&self, count: u64) -> Result<u64, InputError> {
        let active = self
            .opt_u64(&["num_experts_per_tok"])?
            .unwrap_or(2.min(count));
        if active == 0 || active > count {
            return Err(self.bad(
                "num_experts_per_tok",
                &Value::from(active),
                &format!("must be between 1 and the {count} experts"),
            ));
        }
        Ok(active)
    }

    pub(crate) fn u64(&self, keys: &[&str]) -> Result<u64, InputError> {
        match self.opt_u64(keys)? {
            Some(0) => Err(InputError::BadField {
                path: self.path.to_path_buf(),
                field: keys[0].into(),
                value: "0".into(),
                why: "must be at least 1".into(),
            }),
            Some(n) => Ok(n),
            None => Err(InputError::MissingField {
                path: self.path.to_path_buf(),
                field: keys[0].into(),
            }),
        }
    }

    pub(crate) fn bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(Value::as_bool)
    }

    /// `tie_word_embeddings`: a Qwen3-VL / Qwen3.5 wrapper's own flag governs its language model
    /// (transformers 5.25 ties by the top-level config, whatever `text_config` says), else the
    /// language model's.
    pub(crate) fn tie_word_embeddings(&self) -> Option<bool> {
        let wrapper = self
            .outer
            .get("model_type")
            .and_then(Value::as_str)
            .is_some_and(super::families::vision::is_wrapper);
        match self
            .outer
            .get("tie_word_embeddings")
            .and_then(Value::as_bool)
        {
            Some(tie) if wrapper => Some(tie),
            _ => self.bool("tie_word_embeddings"),
        }
    }

    pub(crate) fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    pub(crate) fn bad(&self, key: &str, v: &Value, why: &str) -> InputError {
        InputError::BadField {
            path: self.path.to_path_buf(),
            field: key.into(),
            value: v.to_string(),
            why: why.into(),
        }
    }

    /// `spec`, or the error naming its largest size when its parameters overflow 64 bits or pass
    /// `layout::MAX_PARAMETERS` — so that no byte count formed later can overflow.
    fn bounded(&self, spec: Spec) -> Result<Spec, InputError> {
        if super::layout::bounded_parameters(&spec.tensors()).is_some() {
            return Ok(spec);
        }
        let sizes = [
            ("num_hidden_layers", spec.num_layers),
            ("hidden_size", spec.hidden_size),
            ("vocab_size", spec.vocab_size),
            ("intermediate_size", spec.intermediate_size),
            ("num_attention_heads", spec.num_heads),
            ("head_dim", spec.head_dim),
            ("num_experts", spec.experts.as_ref().map_or(0, |e| e.count)),
        ];
        let (field, value) = sizes
            .into_iter()
            .max_by_key(|(_, v)| *v)
            .unwrap_or(("num_hidden_layers", spec.num_layers));
        Err(self.bad(
            field,
            &Value::from(value),
            "the model it describes has more than 10^15 parameters, the most llm-oom sizes",
        ))
    }

    fn spec(&self, name: &str) -> Result<Spec, InputError> {
        let arch = self
            .str("model_type")
            .ok_or_else(|| InputError::MissingField {
                path: self.path.to_path_buf(),
                field: "model_type".into(),
            })?
            .to_string();
        let family = match Family::of(&arch, self.outer) {
            Some(family) => family,
            None => match self.not_generic() {
                None => Family::Generic,
                Some(reason) => {
                    return Err(InputError::UnknownArchitecture {
                        path: self.path.to_path_buf(),
                        arch: arch.clone(),
                        supported: supported_model_types(),
                        reason,
                    })
                }
            },
        };
        let mut notes = Vec::new();
        if family == Family::LlamaLike && !KNOWN.contains(&arch.as_str()) {
            notes.push(format!(
                "`{arch}` is not a family llm-oom was tested on; sized as a llama-style decoder from its config fields"
            ));
        }
        super::guard::check(self, &arch, family.models(), family.layer_types())?;
        if let Family::Layout(kind) = family {
            let built = super::families::read(kind, self)?;
            return self.assemble(name, arch, family, built, notes);
        }

        let hidden = self.u64(&["hidden_size", "n_embd", "d_model"])?;
        let layers = self.u64(&["num_hidden_layers", "n_layer", "num_layers"])?;
        let heads = self.u64(&["num_attention_heads", "n_head"])?;
        let kv_heads = self.opt_u64(&["num_key_value_heads"])?.unwrap_or(heads);
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(self.bad(
                "num_key_value_heads",
                &Value::from(kv_heads),
                "must divide num_attention_heads",
            ));
        }
        let head_dim = match self.opt_u64(&["head_dim"])? {
            Some(d) if d > 0 => d,
            _ => {
                if hidden % heads != 0 {
                    return Err(InputError::MissingField {
                        path: self.path.to_path_buf(),
                        field: "head_dim".into(),
                    });
                }
                hidden / heads
            }
        };
        let vocab = self.u64(&["vocab_size"])?;
        let max_pos = self.opt_u64(&["max_position_embeddings", "n_positions"])?;
        let tie = self.tie_word_embeddings().unwrap_or(matches!(
            family,
            Family::Gemma | Family::Gemma2 | Family::Gemma3
        ));
        let qkv_bias = match family {
            Family::Qwen2 | Family::QwenMoe if !qwen3_moe(&arch) => true,
            _ => self.bool("attention_bias").unwrap_or(false),
        };
        let qk_norm = matches!(family, Family::Qwen3 | Family::Gemma3)
            || qwen3_moe(&arch)
            || (family == Family::Generic && self.bool("use_qk_norm") == Some(true));

        let experts = match family {
            Family::Mixtral => {
                let count = self.u64(&["num_local_experts", "num_experts"])?;
                Some(Experts {
                    count,
                    active: self.active_experts(count)?,
                    intermediate_size: self.u64(&["intermediate_size"])?,
                    sparse_layers: layers,
                    shared_intermediate_size: 0,
                })
            }
            Family::QwenMoe => {
                let count = self.u64(&["num_experts"])?;
                let step = self.opt_u64(&["decoder_sparse_step"])?.unwrap_or(1).max(1);
                let mlp_only: Vec<u64> = self
                    .get("mlp_only_layers")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_u64).collect())
                    .unwrap_or_default();
                let sparse_layers = super::layout::sparse_every(layers, step, &mlp_only);
                Some(Experts {
                    count,
                    active: self.active_experts(count)?,
                    intermediate_size: self.u64(&["moe_intermediate_size"])?,
                    sparse_layers,
                    shared_intermediate_size: self
                        .opt_u64(&["shared_expert_intermediate_size"])?
                        .unwrap_or(0),
                })
            }
            _ => None,
        };
        // A dense MLP is needed unless every layer is sparse.
        let intermediate = match &experts {
            Some(e) if e.sparse_layers == layers => {
                self.opt_u64(&["intermediate_size"])?.unwrap_or(0)
            }
            _ => self.u64(&["intermediate_size", "n_inner", "ffn_dim"])?,
        };

        let (sliding_window, sliding_layers) = self.sliding(family, layers)?;
        if family == Family::Generic {
            let attention = match sliding_window {
                Some(w) if self.get("layer_types").is_some() => format!(
                    ", layer_types: {} full-attention and {sliding_layers} sliding-window ({w} tokens) layers",
                    layers.saturating_sub(sliding_layers)
                ),
                Some(w) => format!(", every layer in a {w}-token sliding window (no layer_types)"),
                None => String::new(),
            };
            notes.push(format!(
                "`{arch}` is not a family llm-oom knows; sized as a llama-shaped decoder from its \
                 standard fields ({layers} layers, hidden_size {hidden}, {heads} query and \
                 {kv_heads} KV heads of head_dim {head_dim}, intermediate_size {intermediate}, \
                 vocab_size {vocab}{attention}): gated MLP, RMSNorm before attention and MLP, {}, \
                 {}, {} lm_head; whatever else its own code adds (extra norms, biases) is not \
                 counted; exact sizes: pass --python with a transformers that knows `{arch}`, or a \
                 checkpoint whose safetensors headers give the weights",
                if qkv_bias {
                    "q/k/v biases (`attention_bias`) and no others"
                } else {
                    "no biases"
                },
                if qk_norm {
                    "q/k RMSNorms of head_dim (`use_qk_norm`)"
                } else {
                    "no q/k norms"
                },
                if tie { "a tied" } else { "an untied" },
            ));
        }
        let (native_dtype, keep_dense) = super::quant::read(self, &mut notes)?;

        Ok(Spec {
            name: name.to_string(),
            architecture: arch.clone(),
            hidden_size: hidden,
            intermediate_size: intermediate,
            num_layers: layers,
            num_heads: heads,
            num_kv_heads: kv_heads,
            head_dim,
            vocab_size: vocab,
            max_position_embeddings: max_pos,
            tie_word_embeddings: tie,
            sliding_window,
            sliding_layers,
            experts,
            qkv_bias,
            qk_norm,
            norms_per_layer: if matches!(family, Family::Gemma2 | Family::Gemma3) {
                4
            } else {
                2
            },
            fused_projections: family == Family::Phi3,
            rope_theta: self.f64_or("rope_theta", 10_000.0),
            rms_norm_eps: self.f64_or("rms_norm_eps", 1e-6),
            numerics: self.numerics(family, &arch),
            native_dtype,
            gguf: None,
            checkpoint: None,
            notes,
            layout: None,
            keep_dense,
            vision: Vec::new(),
            vision_layers: 0,
            images: None,
            mmproj_bytes: None,
        })
    }

    /// Why an unknown `model_type` cannot be sized as a llama-shaped decoder from its standard
    /// fields, or `None` when it can: a causal LM (`…ForCausalLM`) with hidden_size,
    /// num_hidden_layers, num_attention_heads, intermediate_size, vocab_size and rms_norm_eps,
    /// and no field that means something llama's block does not have (experts, MLA, state-space
    /// or linear-attention layers, other layer types, LayerNorm, MLP biases). Such a field is
    /// named rather than guessed past.
    fn not_generic(&self) -> Option<String> {
        let causal = self
            .outer
            .get("architectures")
            .and_then(Value::as_array)
            .is_some_and(|a| {
                a.iter()
                    .any(|s| s.as_str().is_some_and(|s| s.ends_with("ForCausalLM")))
            });
        if !causal {
            return Some(
                "its `architectures` names no `…ForCausalLM`, so it is not a causal language \
                 model llm-oom could size from standard fields"
                    .into(),
            );
        }
        for key in GENERIC_FIELDS {
            if self.get(key).is_none() {
                return Some(format!(
                    "it has no `{key}`, one of the standard fields ({}) a generic decoder is \
                     sized from",
                    GENERIC_FIELDS.join(", ")
                ));
            }
        }
        for map in [self.cfg, self.outer] {
            for (key, v) in map {
                if let Some(what) = generic_signal(key, v) {
                    return Some(format!(
                        "its `{key}` means {what}, which a llama-shaped decoder does not have"
                    ));
                }
            }
        }
        if let Some(Value::Array(types)) = self.get("layer_types") {
            if let Some(t) = types
                .iter()
                .find(|t| !t.as_str().is_some_and(super::guard::plain_layer_type))
            {
                return Some(format!(
                    "its `layer_types` has {t} layers, which a llama-shaped decoder does not have"
                ));
            }
        }
        if let Some(norm) = self.str("norm_type").filter(|n| !n.contains("rms")) {
            return Some(format!("its `norm_type` is `{norm}`, not llama's RMSNorm"));
        }
        if self.get("rms_norm_eps").is_none() {
            return Some(
                "it has no `rms_norm_eps`, so llama's RMSNorm cannot be assumed (a LayerNorm has \
                 biases a llama-shaped decoder does not count)"
                    .into(),
            );
        }
        None
    }

    /// A float field, else the default transformers uses.
    fn f64_or(&self, key: &str, default: f64) -> f64 {
        self.get(key).and_then(Value::as_f64).unwrap_or(default)
    }

    /// A `Spec` around a family reader's layout: the fields summarise it, the layout decides.
    fn assemble(
        &self,
        name: &str,
        arch: String,
        family: Family,
        b: super::families::Built,
        mut notes: Vec<String>,
    ) -> Result<Spec, InputError> {
        let (native_dtype, keep_dense) = super::quant::read(self, &mut notes)?;
        notes.extend(b.notes);
        Ok(Spec {
            name: name.to_string(),
            architecture: arch.clone(),
            hidden_size: b.hidden,
            intermediate_size: b.intermediate,
            num_layers: b.layers,
            num_heads: b.heads,
            num_kv_heads: b.kv_heads,
            head_dim: b.head_dim,
            vocab_size: b.vocab,
            max_position_embeddings: self.opt_u64(&["max_position_embeddings", "n_positions"])?,
            tie_word_embeddings: b.tie,
            sliding_window: b.sliding_window,
            sliding_layers: b.sliding_layers,
            experts: b.experts,
            qkv_bias: false,
            qk_norm: false,
            norms_per_layer: 2,
            fused_projections: false,
            rope_theta: self.f64_or("rope_theta", 10_000.0),
            rms_norm_eps: self.f64_or("rms_norm_eps", 1e-6),
            numerics: self.numerics(family, &arch),
            native_dtype,
            gguf: None,
            checkpoint: None,
            notes,
            layout: Some(b.layout),
            keep_dense,
            vision: Vec::new(),
            vision_layers: 0,
            images: None,
            mmproj_bytes: None,
        })
    }

    /// What the runtime needs to compute the model's outputs (nothing here changes its memory).
    fn numerics(&self, family: Family, arch: &str) -> Numerics {
        let f = |key: &str| self.get(key).and_then(Value::as_f64);
        let gemma = matches!(family, Family::Gemma | Family::Gemma2 | Family::Gemma3);
        let act = self
            .str("hidden_activation")
            .or_else(|| self.str("hidden_act"))
            .unwrap_or(if gemma { "gelu_pytorch_tanh" } else { "silu" });
        let rope_scaling = self
            .get("rope_scaling")
            .and_then(Value::as_object)
            .and_then(|r| {
                let g = |k: &str| r.get(k).and_then(Value::as_f64);
                let kind = r
                    .get("rope_type")
                    .or_else(|| r.get("type"))
                    .and_then(Value::as_str)?;
                let factor = g("factor")?;
                match kind {
                    "linear" => Some(RopeScaling::Linear { factor }),
                    "llama3" => Some(RopeScaling::Llama3 {
                        factor,
                        low_freq_factor: g("low_freq_factor").unwrap_or(1.0),
                        high_freq_factor: g("high_freq_factor").unwrap_or(4.0),
                        original_max_position_embeddings: g("original_max_position_embeddings")
                            .unwrap_or(8192.0),
                    }),
                    _ => None,
                }
            });
        Numerics {
            activation: if act.starts_with("gelu") {
                Activation::GeluTanh
            } else {
                Activation::Silu
            },
            rope_scaling,
            rope_interleaved: false,
            query_scale: f("query_pre_attn_scalar").map(|s| s.powf(-0.5)),
            attention_softcap: f("attn_logit_softcapping"),
            final_softcap: f("final_logit_softcapping"),
            gemma_norms: gemma,
            norm_topk_prob: self
                .bool("norm_topk_prob")
                .unwrap_or(arch == "mixtral" || qwen3_moe(arch)),
        }
    }

    /// Which layers attend through a sliding window, following each family's transformers code.
    fn sliding(&self, family: Family, layers: u64) -> Result<(Option<u64>, u64), InputError> {
        let window = self.opt_u64(&["sliding_window"])?.filter(|w| *w > 0);
        let Some(window) = window else {
            return Ok((None, 0));
        };
        if let Some(types) = self.get("layer_types").and_then(Value::as_array) {
            let n = types
                .iter()
                .filter(|t| t.as_str() == Some("sliding_attention"))
                .count() as u64;
            let n = n.min(layers);
            return Ok((Some(window).filter(|_| n > 0), n));
        }
        let n = match family {
            // transformers: layer 0, 2, 4… slide.
            Family::Gemma2 => layers.div_ceil(2),
            // every `sliding_window_pattern`-th layer is global.
            Family::Gemma3 => {
                let pattern = self
                    .opt_u64(&["sliding_window_pattern"])?
                    .unwrap_or(6)
                    .max(1);
                layers - super::layout::every_nth(layers, pattern)
            }
            Family::Qwen2 | Family::Qwen3 | Family::QwenMoe => {
                if self.bool("use_sliding_window").unwrap_or(false) {
                    let from = self.opt_u64(&["max_window_layers"])?.unwrap_or(layers);
                    layers.saturating_sub(from)
                } else {
                    0
                }
            }
            Family::Mixtral | Family::LlamaLike | Family::Phi3 => layers,
            // Without layer_types, a window slides in every layer (mistral's rule) unless the
            // config turns it off.
            Family::Generic => {
                if self.bool("use_sliding_window") == Some(false) {
                    0
                } else {
                    layers
                }
            }
            Family::Gemma | Family::Layout(_) => 0,
        };
        Ok((Some(window).filter(|_| n > 0), n))
    }
}

/// Qwen3's MoE block (q/k norms, no q/k/v bias), not Qwen2-MoE's.
fn qwen3_moe(arch: &str) -> bool {
    matches!(arch, "qwen3_moe" | "qwen3_vl_moe" | "qwen3_vl_moe_text")
}

const KNOWN: &[&str] = &[
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "phi3",
];

/// The fields an unknown causal LM must have to be sized as a llama-shaped decoder.
const GENERIC_FIELDS: &[&str] = &[
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
];

/// What a set config field `key` means that a llama-shaped decoder does not have: `guard`'s
/// memory fields, any other expert or MoE field, a low-rank projection, or biases outside
/// attention's q/k/v (starcoder2's `use_bias`, llama's `mlp_bias`).
fn generic_signal(key: &str, v: &Value) -> Option<&'static str> {
    if let Some(what) = super::guard::memory_field(key, v) {
        return Some(what);
    }
    let set = match v {
        Value::Null | Value::Bool(false) => false,
        Value::Number(n) => n.as_f64() != Some(0.0),
        _ => true,
    };
    if !set {
        return None;
    }
    if key.contains("expert") || key.starts_with("moe") || key.contains("_moe") {
        Some("experts")
    } else if key.contains("lora_rank") {
        Some("low-rank projections")
    } else if matches!(key, "use_bias" | "mlp_bias" | "bias" | "attention_out_bias") {
        Some("biases outside q/k/v")
    } else {
        None
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    LlamaLike,
    /// An unknown causal LM with llama's standard fields only, sized as llama (`not_generic`).
    Generic,
    Mixtral,
    Qwen2,
    Qwen3,
    QwenMoe,
    Gemma,
    Gemma2,
    Gemma3,
    Phi3,
    /// A family read into a `Layout` by `model::families`.
    Layout(Kind),
}

/// Model types whose transformers module is llama's block under another name: sized as llama,
/// with a note. Any other unknown `model_type` is `Family::Generic` when `Reader::not_generic`
/// finds nothing llama's block lacks, and refused otherwise.
const LLAMA_SHAPED: &[&str] = &["olmo", "olmo2", "granite", "internlm2", "yi", "aquila"];

/// Every `model_type` llm-oom has a family for, and that family: the one list `Family::of` reads
/// and the refusal of any other model type prints.
const FAMILIES: &[(&str, Family)] = &[
    ("llama", Family::LlamaLike),
    ("mistral", Family::LlamaLike),
    ("mixtral", Family::Mixtral),
    ("qwen2", Family::Qwen2),
    ("qwen3", Family::Qwen3),
    ("qwen2_moe", Family::QwenMoe),
    ("qwen3_moe", Family::QwenMoe),
    // Qwen3-VL: the language model in `text_config` is qwen3's / qwen3_moe's; the vision tower
    // is `families::vision`.
    ("qwen3_vl", Family::Qwen3),
    ("qwen3_vl_text", Family::Qwen3),
    ("qwen3_vl_moe", Family::QwenMoe),
    ("qwen3_vl_moe_text", Family::QwenMoe),
    ("gemma", Family::Gemma),
    ("gemma2", Family::Gemma2),
    ("gemma3", Family::Gemma3),
    ("gemma3_text", Family::Gemma3),
    ("phi3", Family::Phi3),
    // Phi-3.5-vision (remote code `Phi3VForCausalLM`): Phi-3's decoder at the top level, the
    // vision tower `families::vision`.
    ("phi3_v", Family::Phi3),
    ("deepseek_v2", Family::Layout(Kind::Deepseek)),
    ("deepseek_v3", Family::Layout(Kind::Deepseek)),
    ("deepseek_v32", Family::Layout(Kind::Deepseek)),
    ("deepseek_v4", Family::Layout(Kind::DeepseekV4)),
    ("glm_moe_dsa", Family::Layout(Kind::Deepseek)),
    ("kimi_k2", Family::Layout(Kind::Deepseek)),
    ("llama4", Family::Layout(Kind::Llama4)),
    ("llama4_text", Family::Layout(Kind::Llama4)),
    ("gpt_oss", Family::Layout(Kind::GptOss)),
    ("phimoe", Family::Layout(Kind::PhiMoe)),
    ("jamba", Family::Layout(Kind::Jamba)),
    ("mamba2", Family::Layout(Kind::Mamba2)),
    ("qwen3_next", Family::Layout(Kind::Qwen3Next)),
    ("qwen3_5", Family::Layout(Kind::Qwen35)),
    ("qwen3_5_text", Family::Layout(Kind::Qwen35)),
    ("qwen3_5_moe", Family::Layout(Kind::Qwen35)),
    ("qwen3_5_moe_text", Family::Layout(Kind::Qwen35)),
    ("granitemoehybrid", Family::Layout(Kind::GraniteHybrid)),
    ("falcon_h1", Family::Layout(Kind::FalconH1)),
    ("minimax_m2", Family::Layout(Kind::MiniMaxM2)),
    ("nemotron_h", Family::Layout(Kind::NemotronH)),
    ("gemma4", Family::Layout(Kind::Gemma4)),
    ("gemma4_text", Family::Layout(Kind::Gemma4)),
    // MiMo-V2.5's `mimo_v2` (remote code) is transformers 5.25's `mimo_v2_flash`.
    ("mimo_v2", Family::Layout(Kind::MiMoV2)),
    ("mimo_v2_flash", Family::Layout(Kind::MiMoV2)),
    // Kimi-K3: its `text_config` is a remote-code `kimi_linear` (`Family::of` reads the wrapper's
    // type for it; transformers' own `kimi_linear`, Kimi-Linear-48B, is another decoder).
    ("kimi_k3", Family::Layout(Kind::KimiK3)),
    // Step-3.7: `step3p7` wraps a `step3p5` text model, both read by transformers 5.25's
    // configuration_step3p7.py.
    ("step3p5", Family::Layout(Kind::Step3p7)),
    ("step3p7", Family::Layout(Kind::Step3p7)),
    // Qwen2-VL / Qwen2.5-VL: the language model is qwen2's (top level in the published configs,
    // `text_config` in transformers 5's); the vision tower is `families::vision`.
    ("qwen2_vl", Family::Qwen2),
    ("qwen2_vl_text", Family::Qwen2),
    ("qwen2_5_vl", Family::Qwen2),
    ("qwen2_5_vl_text", Family::Qwen2),
];

impl Family {
    /// The memory-changing config keys this family's reader models (see `guard`).
    fn models(self) -> &'static [&'static str] {
        match self {
            Family::Mixtral => &["num_local_experts", "num_experts", "num_experts_per_tok"],
            Family::QwenMoe => &[
                "num_experts",
                "num_experts_per_tok",
                "moe_intermediate_size",
                "shared_expert_intermediate_size",
                "decoder_sparse_step",
                "mlp_only_layers",
            ],
            Family::Gemma3 => &["sliding_window_pattern"],
            Family::Layout(kind) => kind.models(),
            _ => &[],
        }
    }

    fn layer_types(self) -> &'static [&'static str] {
        match self {
            Family::Layout(kind) => kind.layer_types(),
            _ => &[],
        }
    }

    fn of(model_type: &str, outer: &Obj) -> Option<Family> {
        if let Some((_, family)) = FAMILIES.iter().find(|(name, _)| *name == model_type) {
            return Some(*family);
        }
        if super::families::claims_kimi_k3(model_type, outer) {
            return Some(Family::Layout(Kind::KimiK3));
        }
        // A causal LM whose transformers module is llama's block under another name is sized like
        // llama; any other model type is left to `Reader::not_generic`.
        let causal = outer
            .get("architectures")
            .and_then(Value::as_array)
            .is_some_and(|a| {
                a.iter()
                    .any(|s| s.as_str().is_some_and(|s| s.ends_with("ForCausalLM")))
            });
        (causal
            && LLAMA_SHAPED.contains(&model_type)
            && outer.contains_key("num_attention_heads")
            && outer.contains_key("intermediate_size"))
        .then_some(Family::LlamaLike)
    }
}

/// The model types llm-oom has a family for, as the refusal of any other lists them: those of
/// `FAMILIES`, then the llama-shaped ones.
pub fn supported_model_types() -> String {
    let named: Vec<&str> = FAMILIES.iter().map(|(name, _)| *name).collect();
    format!(
        "{}; and sized as llama when their config has llama's fields: {}; any other causal LM \
         whose config has only llama's standard fields is sized as a llama-shaped decoder, with a \
         note",
        named.join(", "),
        LLAMA_SHAPED.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::WeightDtype;

    fn parse(json: &str) -> Result<Spec, InputError> {
        parse_config(json, Path::new("config.json"), "m")
    }

    #[test]
    fn gemma3_text_config_and_layer_types() {
        let s = parse(r#"{"model_type":"gemma3","architectures":["Gemma3ForConditionalGeneration"],"text_config":{"model_type":"gemma3_text",
            "hidden_size":2560,"intermediate_size":10240,"num_hidden_layers":34,"num_attention_heads":8,"num_key_value_heads":4,"head_dim":256,
            "vocab_size":262208,"sliding_window":1024,"sliding_window_pattern":6}}"#).unwrap();
        assert_eq!(
            (
                s.head_dim,
                s.sliding_layers,
                s.sliding_window,
                s.norms_per_layer,
                s.qk_norm,
                s.tie_word_embeddings
            ),
            (256, 29, Some(1024), 4, true, true)
        );
        // More layer types than layers cannot make the count of full-attention layers negative.
        let t = parse(r#"{"model_type":"qwen3","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10,
            "sliding_window":8,"layer_types":["sliding_attention","sliding_attention","sliding_attention"]}"#).unwrap();
        assert_eq!((t.sliding_layers, t.full_attention_layers()), (2, 0));
    }

    #[test]
    fn quantization_configs_and_moe() {
        let nf4 = parse(r#"{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10,
            "quantization_config":{"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_type":"nf4","bnb_4bit_use_double_quant":true}}"#).unwrap();
        assert_eq!(nf4.native_dtype, WeightDtype::Nf4 { double_quant: true });
        let awq = parse(r#"{"model_type":"mistral","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10,
            "quantization_config":{"quant_method":"awq","w_bit":4,"q_group_size":64}}"#).unwrap();
        assert_eq!(
            awq.native_dtype,
            WeightDtype::Awq {
                bits: 4,
                group_size: 64
            }
        );
        let moe = parse(r#"{"model_type":"qwen3_moe","hidden_size":64,"intermediate_size":128,"moe_intermediate_size":32,"num_hidden_layers":4,
            "num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"vocab_size":10,"num_experts":8,"num_experts_per_tok":2}"#).unwrap();
        let e = moe.experts.unwrap();
        assert_eq!(
            (e.count, e.active, e.intermediate_size, e.sparse_layers),
            (8, 2, 32, 4)
        );
        assert!(moe.qk_norm && !moe.qkv_bias);
        let unknown = parse(r#"{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10,
            "quantization_config":{"quant_method":"eetq"}}"#).unwrap();
        assert!(unknown.notes[0].contains("`eetq` is not priced yet"));
    }

    #[test]
    fn encoders_and_bad_fields_are_refused() {
        assert!(matches!(
            parse(r#"{"model_type":"t5","d_model":512}"#),
            Err(InputError::UnknownArchitecture { .. })
        ));
        assert!(matches!(
            parse(
                r#"{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":3,"vocab_size":10}"#
            ),
            Err(InputError::BadField { .. })
        ));
        assert!(matches!(
            parse(r#"[1,2]"#),
            Err(InputError::BadField { .. })
        ));
    }

    #[test]
    fn the_refusal_names_the_type_lists_every_family_and_says_what_would_work() {
        let e = parse(r#"{"model_type":"rwkv7","hidden_size":64}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("llm-oom has no family for `rwkv7`"), "{e}");
        assert!(!e.contains("decoder-only"), "{e}");
        assert!(
            e.contains("measure this one in its own engine with `llm-oom watch -- <your command>`"),
            "{e}"
        );
        // Every model type the code reads is listed, the hand-written families included.
        for (name, _) in FAMILIES {
            assert!(
                e.contains(&format!(" {name},"))
                    || e.contains(&format!(" {name};"))
                    || e.contains(&format!("({name},")),
                "{name}: {e}"
            );
        }
        for name in [
            "deepseek_v3",
            "kimi_k2",
            "llama4",
            "gpt_oss",
            "qwen3_next",
            "jamba",
            "mamba2",
            "falcon_h1",
            "granitemoehybrid",
            "phimoe",
            "olmo2",
        ] {
            assert!(e.contains(name), "{name}: {e}");
        }
        // and every listed type is read by a family
        for (name, _) in FAMILIES {
            assert!(Family::of(name, &Obj::new()).is_some(), "{name}");
        }
    }

    #[test]
    fn python_json_tokens_outside_strings_read_as_null() {
        let t = r#"{"a": [0.0, Infinity], "b": -Infinity, "c": NaN, "d": "NaN \" Infinity"}"#;
        let v: Value = serde_json::from_str(&python_json(t)).unwrap();
        assert_eq!(v["a"][1], Value::Null);
        assert_eq!(v["b"], Value::Null);
        assert_eq!(v["c"], Value::Null);
        assert_eq!(v["d"], "NaN \" Infinity");
        assert!(matches!(python_json("{}"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn quantization_bits_outside_the_format_are_refused_and_odd_dtypes_noted() {
        let base = r#"{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10"#;
        for (method, bits, ok) in [
            ("gptq", "0", false),
            ("gptq", "1", false),
            ("gptq", "17", false),
            ("gptq", "\"4\"", false),
            ("gptq", "3", true),
            ("awq", "4", true),
            ("awq", "0", false),
        ] {
            let json = format!(
                r#"{base},"quantization_config":{{"quant_method":"{method}","bits":{bits}}}}}"#
            );
            match parse(&json) {
                Ok(_) => assert!(ok, "{method} {bits}"),
                Err(e) => {
                    assert!(!ok, "{method} {bits}: {e}");
                    assert!(e.to_string().contains("quantization_config.bits"), "{e}");
                }
            }
        }
        let spec = parse(&format!(r#"{base},"torch_dtype":"float12"}}"#)).unwrap();
        assert!(spec
            .notes
            .iter()
            .any(|n| n.contains("unknown torch_dtype `float12`")));
        let spec = parse(&format!(r#"{base},"torch_dtype":"bfloat16"}}"#)).unwrap();
        assert!(!spec.notes.iter().any(|n| n.contains("torch_dtype")));
    }

    /// A seed_oss-style config (transformers knows it, llm-oom has no family): llama's fields and
    /// layer_types of full and sliding layers.
    const SEED_LIKE: &str = r#"{"model_type":"seed_oss","architectures":["SeedOssForCausalLM"],"hidden_size":512,
        "intermediate_size":1536,"num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":128,
        "vocab_size":1000,"rms_norm_eps":1e-6,"attention_bias":true,"tie_word_embeddings":false,"sliding_window":256,
        "layer_types":["sliding_attention","full_attention","sliding_attention","full_attention"],"torch_dtype":"bfloat16"}"#;

    #[test]
    fn an_unknown_causal_lm_with_standard_fields_is_sized_as_llama_with_the_assumption_said() {
        let s = parse(SEED_LIKE).unwrap();
        assert_eq!(
            (
                s.num_layers,
                s.num_kv_heads,
                s.head_dim,
                s.sliding_layers,
                s.sliding_window,
                s.qkv_bias,
                s.qk_norm,
                s.tie_word_embeddings
            ),
            (4, 2, 128, 2, Some(256), true, false, false)
        );
        // embeddings + lm_head + 4 × (q, k, v, o + q/k/v biases + MLP + 2 norms) + final norm
        let per_layer =
            512 * 1024 + 2 * 512 * 256 + 1024 * 512 + (1024 + 2 * 256) + 3 * 512 * 1536 + 2 * 512;
        assert_eq!(s.parameters(), 2 * 1000 * 512 + 4 * per_layer + 512);
        let note = s
            .notes
            .iter()
            .find(|n| n.contains("`seed_oss` is not a family llm-oom knows"))
            .unwrap_or_else(|| panic!("{:?}", s.notes));
        for said in [
            "sized as a llama-shaped decoder from its standard fields",
            "2 full-attention and 2 sliding-window (256 tokens) layers",
            "gated MLP, RMSNorm",
            "q/k/v biases (`attention_bias`)",
            "no q/k norms",
            "pass --python with a transformers that knows `seed_oss`",
            "safetensors headers",
        ] {
            assert!(note.contains(said), "{said}: {note}");
        }
        // The wrapper's text_config is read as well; no layer_types and no window: every layer
        // full attention.
        let nested = parse(r#"{"model_type":"made_up_vlm","architectures":["MadeUpForCausalLM"],"text_config":{"hidden_size":64,
            "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10,"rms_norm_eps":1e-5}}"#).unwrap();
        assert_eq!((nested.hidden_size, nested.sliding_layers), (64, 0));
        assert!(nested
            .notes
            .iter()
            .any(|n| n.contains("no biases") && n.contains("an untied lm_head")));
    }

    #[test]
    fn an_unknown_causal_lm_is_refused_naming_what_a_llama_shape_cannot_size() {
        let base = SEED_LIKE.trim_end_matches('}');
        for (extra, said) in [
            (
                r#","num_experts":64,"num_experts_per_tok":8"#,
                "`num_experts`",
            ),
            (r#","moe_num_experts":64"#, "`moe_num_experts`"),
            (r#","kv_lora_rank":512"#, "`kv_lora_rank`"),
            (r#","q_lora_rank":1536"#, "`q_lora_rank`"),
            (r#","linear_num_key_heads":16"#, "`linear_num_key_heads`"),
            (r#","mamba_d_state":16"#, "`mamba_d_state`"),
            (r#","conv_kernel":4"#, "`conv_kernel`"),
            (r#","use_bias":true"#, "`use_bias`"),
            (r#","norm_type":"layer_norm""#, "`norm_type`"),
        ] {
            let json = format!("{base}{extra}}}");
            match parse(&json) {
                Err(e @ InputError::UnknownArchitecture { .. }) => {
                    let e = e.to_string();
                    assert!(e.contains("no family for `seed_oss`"), "{e}");
                    assert!(e.contains(said), "{said}: {e}");
                    assert!(
                        e.contains(
                            "pass `--python` with a Python whose transformers knows `seed_oss`"
                        ),
                        "{e}"
                    );
                    assert!(e.contains("olmo2"), "the families are listed: {e}");
                }
                other => panic!("{extra} was not refused: {other:?}"),
            }
        }
        // Experts turned off (0) are no experts.
        assert!(parse(&format!(r#"{base},"num_experts":0}}"#)).is_ok());
        let other_layers = SEED_LIKE.replace(
            r#"["sliding_attention","full_attention","#,
            r#"["linear_attention","full_attention","#,
        );
        let e = parse(&other_layers).unwrap_err().to_string();
        assert!(
            e.contains("`layer_types` has \"linear_attention\" layers"),
            "{e}"
        );
        let not_causal = SEED_LIKE.replace("SeedOssForCausalLM", "SeedOssModel");
        let e = parse(&not_causal).unwrap_err().to_string();
        assert!(e.contains("names no `…ForCausalLM`"), "{e}");
        let no_norm = SEED_LIKE.replace(r#""rms_norm_eps":1e-6,"#, "");
        let e = parse(&no_norm).unwrap_err().to_string();
        assert!(e.contains("no `rms_norm_eps`"), "{e}");
        let no_mlp = SEED_LIKE.replace(r#""intermediate_size":1536,"#, "");
        let e = parse(&no_mlp).unwrap_err().to_string();
        assert!(e.contains("it has no `intermediate_size`"), "{e}");
    }
}
