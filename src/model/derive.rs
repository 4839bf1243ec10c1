//! The second source of a model's shapes: transformers itself. `derive_meta.py` builds the model
//! from its config.json on the meta device (no weights, about a second plus the imports) with the
//! user's Python, and reports every parameter and the cache each layer really keeps; `Derived` is
//! that report, and `to_layout` / `spec` turn it into what the estimate reads.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::layout::{bounded_parameters, AttentionGroup, KvRow, Layout, StateGroup};
use super::spec::{Role, Spec, TensorGroup};

/// The script, embedded: run as `python -c SCRIPT config.json`.
pub const SCRIPT: &str = include_str!("derive_meta.py");

/// How long importing torch and transformers and building the model may take before it is
/// stopped (a warm import takes a few seconds; a model on the meta device about one).
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// What transformers built, as `derive_meta.py` prints it.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Derived {
    pub transformers: String,
    pub torch: String,
    pub model_type: String,
    /// The class built (`Qwen3ForCausalLM`, `Gemma3ForConditionalGeneration`…).
    pub class: String,
    /// Every tensor the checkpoint stores: parameters and persistent buffers.
    pub parameters: u64,
    /// Of those, persistent buffers (loaded like weights, not trained: DeepSeek-V3's
    /// `e_score_correction_bias`).
    #[serde(default)]
    pub buffers: u64,
    /// Parameters by role: embeddings, lm_head, attention, mlp, experts, router, mixer, conv,
    /// norms, vision, other (by module name).
    pub by_role: BTreeMap<String, u64>,
    /// Parameters by the dtype they were built in.
    pub by_dtype: BTreeMap<String, u64>,
    #[serde(skip_serializing)]
    pub tensors: Vec<DerivedTensor>,
    /// `dtype` of the config (the checkpoint's), when it names one.
    pub config_dtype: Option<String>,
    pub text: TextFacts,
    /// One entry per decoder layer, in order: the cache it keeps.
    pub layers: Vec<DerivedLayer>,
}

/// `count` tensors of `rows × cols` with one role (`rows` = 1 for vectors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct DerivedTensor {
    pub role: DerivedRole,
    pub rows: u64,
    pub cols: u64,
    pub count: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DerivedRole {
    Embeddings,
    LmHead,
    Attention,
    Mlp,
    Experts,
    Router,
    Mixer,
    Conv,
    Norms,
    Vision,
    Other,
}

/// The language model's config as transformers filled it in (its class defaults included).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct TextFacts {
    pub model_type: String,
    pub hidden_size: Option<u64>,
    pub intermediate_size: Option<u64>,
    pub num_hidden_layers: u64,
    pub num_attention_heads: Option<u64>,
    pub num_key_value_heads: Option<u64>,
    pub head_dim: Option<u64>,
    pub vocab_size: Option<u64>,
    pub max_position_embeddings: Option<u64>,
    /// Routed experts, where decoder layers hold an `experts` module.
    #[serde(default)]
    pub experts: Option<DerivedExperts>,
    pub tie_word_embeddings: bool,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
pub struct DerivedExperts {
    pub count: u64,
    pub active: u64,
    pub intermediate_size: u64,
    pub sparse_layers: u64,
    pub shared_intermediate_size: u64,
}

/// One decoder layer's cache: keys and values (`k`, `v` elements per token, or an MLA latent),
/// the window of a sliding or chunked layer, or none where the layer reuses another's K/V; and
/// the recurrent state of a Mamba / linear-attention mixer.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct DerivedLayer {
    /// transformers' `layer_types` entry (`full_attention`, `sliding_attention`, `hybrid`…).
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub k: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub v: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mla: Option<Mla>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared_kv: bool,
    /// `k` and `v` are the config's KV heads × head_dim: the attention module fuses its
    /// projections under a name the script does not read (GPT-2's `c_attn`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_config: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<DerivedState>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
pub struct Mla {
    pub kv_lora_rank: u64,
    pub rope_dim: u64,
    pub full_k: u64,
    pub full_v: u64,
    /// The DSA indexer's key per token (`indexer.head_dim`), absent for plain MLA.
    #[serde(default, skip_serializing_if = "crate::model::layout::is_zero")]
    pub index_dim: u64,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
pub struct DerivedState {
    pub conv_channels: u64,
    pub conv_kernel: u64,
    pub ssm: Option<u64>,
}

/// The script's refusal: `{"error": kind, "message": …}`.
#[derive(Debug, Deserialize)]
struct Refusal {
    error: String,
    message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum DeriveError {
    #[error(
        "--python {python} cannot be started ({reason}); pass a Python with torch and transformers"
    )]
    Start { python: PathBuf, reason: String },
    #[error("--python {python} has no usable torch and transformers ({message}); install them (pip install torch transformers) or leave out --python")]
    NoTransformers { python: PathBuf, message: String },
    /// transformers does not know the config, or cannot build it.
    #[error("{message}")]
    Refused { kind: String, message: String },
    #[error("building the model on the meta device with --python {python} took more than {secs} s and was stopped")]
    Timeout { python: PathBuf, secs: u64 },
    #[error("the meta-device build with --python {python} printed no report ({last}); run it with -v to see why")]
    Output { python: PathBuf, last: String },
    #[error("cannot write the preset's config.json for transformers to read: {0}")]
    Scratch(std::io::Error),
}

impl From<DeriveError> for crate::error::Error {
    fn from(e: DeriveError) -> Self {
        match e {
            DeriveError::Refused { .. } | DeriveError::NoTransformers { .. } => {
                crate::error::InputError::Usage(e.to_string()).into()
            }
            DeriveError::Start { .. } => crate::error::InputError::Usage(e.to_string()).into(),
            _ => crate::error::Error::Internal(e.to_string()),
        }
    }
}

/// Run the script with `python` on `config` (a config.json on disk) within `timeout`.
pub fn derive(python: &Path, config: &Path, timeout: Duration) -> Result<Derived, DeriveError> {
    let mut child = Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(config)
        .env("TRANSFORMERS_VERBOSITY", "error")
        .env("HF_HUB_OFFLINE", "1")
        .env("PYTHONWARNINGS", "ignore")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| DeriveError::Start {
            python: python.to_path_buf(),
            reason: e.to_string(),
        })?;
    let pipe = |p: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(p) = p {
                let _ = p.take(16 << 20).read_to_string(&mut text);
            }
            let _ = tx.send(text);
        });
        rx
    };
    let out = pipe(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = pipe(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(DeriveError::Timeout {
                    python: python.to_path_buf(),
                    secs: timeout.as_secs(),
                });
            }
        }
    }
    let grace = Duration::from_millis(500);
    let stdout = out.recv_timeout(grace).unwrap_or_default();
    let stderr = err.recv_timeout(grace).unwrap_or_default();
    if !stderr.trim().is_empty() {
        tracing::debug!("derive_meta.py stderr: {stderr}");
    }
    parse(&stdout, python, &stderr)
}

/// The script's one JSON line: a report or a refusal.
fn parse(stdout: &str, python: &Path, stderr: &str) -> Result<Derived, DeriveError> {
    let line = stdout
        .lines()
        .map(str::trim)
        .rfind(|l| l.starts_with('{'))
        .unwrap_or("");
    if let Ok(r) = serde_json::from_str::<Refusal>(line) {
        return Err(match r.error.as_str() {
            "no_transformers" => DeriveError::NoTransformers {
                python: python.to_path_buf(),
                message: r.message,
            },
            _ => DeriveError::Refused {
                kind: r.error,
                message: r.message,
            },
        });
    }
    serde_json::from_str::<Derived>(line).map_err(|_| DeriveError::Output {
        python: python.to_path_buf(),
        last: stderr
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or("nothing on stderr")
            .chars()
            .take(200)
            .collect(),
    })
}

/// Derive from config.json text not on disk (a preset): written to a scratch file first.
pub fn derive_text(python: &Path, json: &str, timeout: Duration) -> Result<Derived, DeriveError> {
    let dir = crate::scratch::private_dir("llm-oom-derive-").map_err(DeriveError::Scratch)?;
    let path = dir.join("config.json");
    let r = std::fs::write(&path, json)
        .map_err(DeriveError::Scratch)
        .and_then(|_| derive(python, &path, timeout));
    let _ = std::fs::remove_dir_all(&dir);
    r
}

impl Derived {
    /// "transformers 5.17.0 on the meta device": how reports name this source.
    pub fn source(&self) -> String {
        format!("transformers {} on the meta device", self.transformers)
    }

    /// The tensors, the attention layers and the recurrent state as the estimate reads them.
    /// `None` when a size overflows or passes the parameter bound.
    pub fn to_layout(&self) -> Option<Layout> {
        let mut tensors = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            let vector = t.rows == 1;
            let role = match t.role {
                DerivedRole::Embeddings => Role::Embedding,
                DerivedRole::LmHead => Role::LmHead,
                DerivedRole::Vision => Role::Vision,
                DerivedRole::Conv => Role::Conv,
                _ if vector => Role::Vector,
                DerivedRole::Norms => Role::Vector,
                DerivedRole::Attention => Role::AttnO,
                DerivedRole::Mlp | DerivedRole::Experts => Role::MlpUp,
                DerivedRole::Router => Role::Router,
                DerivedRole::Mixer | DerivedRole::Other => Role::Mixer,
            };
            tensors.push(TensorGroup {
                role,
                rows: t.rows,
                cols: t.cols,
                count: t.count,
                routed: t.role == DerivedRole::Experts,
            });
        }
        bounded_parameters(&tensors)?;
        let mut attention: Vec<AttentionGroup> = Vec::new();
        let mut state: Vec<StateGroup> = Vec::new();
        for l in &self.layers {
            let row = match (l.mla, l.k, l.v) {
                _ if l.shared_kv => None,
                (Some(m), _, _) => Some(KvRow::Latent {
                    kv_lora_rank: m.kv_lora_rank,
                    rope_dim: m.rope_dim,
                    full_k: m.full_k,
                    full_v: m.full_v,
                    index_dim: m.index_dim,
                }),
                (None, Some(k), Some(v)) => Some(KvRow::Heads { k, v }),
                _ => None,
            };
            if let Some(row) = row {
                match attention
                    .iter_mut()
                    .find(|g| g.row == row && g.window == l.window)
                {
                    Some(g) => g.layers = g.layers.saturating_add(1),
                    None => attention.push(AttentionGroup {
                        layers: 1,
                        window: l.window,
                        row,
                    }),
                }
            }
            if let Some(s) = l.state {
                let one = StateGroup {
                    layers: 1,
                    conv_channels: s.conv_channels,
                    conv_kernel: s.conv_kernel,
                    ssm: s.ssm.unwrap_or(0),
                    scan: None,
                };
                match state.iter_mut().find(|g| {
                    (g.conv_channels, g.conv_kernel, g.ssm)
                        == (one.conv_channels, one.conv_kernel, one.ssm)
                }) {
                    Some(g) => g.layers = g.layers.saturating_add(1),
                    None => state.push(one),
                }
            }
        }
        Some(Layout {
            tensors,
            attention,
            state,
            mtp: None,
        })
    }

    /// Parameters of the language model alone (all but the vision tower / projector).
    pub fn text_parameters(&self) -> u64 {
        self.parameters
            .saturating_sub(self.by_role.get("vision").copied().unwrap_or(0))
    }

    /// A `Spec` for a model no hand-written family claims: its fields from the config as
    /// transformers filled it, its tensors and cache from what was built. `base` carries what the
    /// config reader knows without a family (the storage dtype, notes).
    pub fn spec(&self, name: &str, base: super::config::Storage) -> Option<Spec> {
        let layout = self.to_layout()?;
        let t = &self.text;
        let hidden = t.hidden_size.unwrap_or(0);
        let heads = t.num_attention_heads.unwrap_or(0);
        let head_dim = t
            .head_dim
            .or_else(|| hidden.checked_div(heads))
            .unwrap_or(0);
        let sliding: Vec<&AttentionGroup> = layout
            .attention
            .iter()
            .filter(|g| g.window.is_some())
            .collect();
        let mut notes = base.notes;
        let fused = self.layers.iter().filter(|l| l.from_config).count();
        if fused > 0 {
            notes.push(format!(
                "the K/V widths of {fused} layer{} are the config's KV heads × head_dim: their \
                 attention fuses its projections",
                if fused == 1 { "" } else { "s" }
            ));
        }
        notes.push(format!(
            "parameters and cache: {} ({})",
            self.source(),
            self.class
        ));
        Some(Spec {
            name: name.to_string(),
            architecture: self.model_type.clone(),
            hidden_size: hidden,
            intermediate_size: t.intermediate_size.unwrap_or(0),
            num_layers: t.num_hidden_layers,
            num_heads: heads,
            num_kv_heads: t.num_key_value_heads.unwrap_or(heads),
            head_dim,
            vocab_size: t.vocab_size.unwrap_or(0),
            max_position_embeddings: t.max_position_embeddings,
            tie_word_embeddings: t.tie_word_embeddings,
            sliding_window: sliding.first().and_then(|g| g.window),
            sliding_layers: sliding
                .iter()
                .map(|g| g.layers)
                .fold(0, u64::saturating_add),
            experts: t.experts.map(|e| super::spec::Experts {
                count: e.count,
                active: e.active.min(e.count),
                intermediate_size: e.intermediate_size,
                sparse_layers: e.sparse_layers.min(t.num_hidden_layers),
                shared_intermediate_size: e.shared_intermediate_size,
            }),
            qkv_bias: false,
            qk_norm: false,
            norms_per_layer: 2,
            fused_projections: false,
            rope_theta: 10_000.0,
            rms_norm_eps: 1e-6,
            numerics: Default::default(),
            native_dtype: base.native_dtype,
            gguf: None,
            checkpoint: None,
            notes,
            layout: Some(layout),
            keep_dense: base.keep_dense,
            vision: Vec::new(),
            vision_layers: 0,
            images: None,
            mmproj_bytes: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_and_garbage_are_typed_errors() {
        let py = Path::new("python3");
        let e = parse(
            r#"{"error": "unknown_model_type", "message": "transformers 5.17.0 does not know model_type `x`"}"#,
            py,
            "",
        )
        .unwrap_err();
        assert!(matches!(e, DeriveError::Refused { .. }), "{e}");
        assert!(e.to_string().contains("model_type `x`"));
        let e = parse("", py, "Traceback\nImportError: no torch\n").unwrap_err();
        assert!(e.to_string().contains("ImportError: no torch"), "{e}");
        let e = parse(
            r#"{"error":"no_transformers","message":"ModuleNotFoundError"}"#,
            py,
            "",
        )
        .unwrap_err();
        assert!(matches!(e, DeriveError::NoTransformers { .. }), "{e}");
    }

    #[test]
    fn a_python_that_hangs_is_stopped_and_one_that_is_missing_is_named() {
        let e = derive_text(Path::new("python3"), "{}", Duration::from_millis(1)).unwrap_err();
        assert!(matches!(e, DeriveError::Timeout { .. }), "{e}");
        let e = derive_text(Path::new("/nonexistent/python"), "{}", TIMEOUT).unwrap_err();
        assert!(matches!(e, DeriveError::Start { .. }), "{e}");
        assert!(
            e.to_string().starts_with("--python /nonexistent/python "),
            "{e}"
        );
        // Without torch (the system python3 here, or any): a typed refusal, not a traceback.
        match derive_text(Path::new("python3"), r#"{"model_type":"llama"}"#, TIMEOUT) {
            Ok(_) | Err(DeriveError::NoTransformers { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn layers_group_by_window_and_row_and_shared_layers_cache_nothing() {
        let d: Derived = serde_json::from_str(
            r#"{"transformers":"5.17.0","torch":"2.11.0","model_type":"m","class":"M","parameters":30,
            "by_role":{"attention":20,"norms":10},"by_dtype":{"float32":30},
            "tensors":[{"role":"attention","rows":2,"cols":5,"count":2},{"role":"norms","rows":1,"cols":10,"count":1}],
            "config_dtype":null,
            "text":{"model_type":"m","hidden_size":10,"intermediate_size":null,"num_hidden_layers":4,"num_attention_heads":2,
              "num_key_value_heads":1,"head_dim":5,"vocab_size":7,"max_position_embeddings":null,"tie_word_embeddings":true},
            "layers":[{"type":"sliding_attention","k":5,"v":5,"window":8},{"type":"full_attention","k":5,"v":5},
              {"type":"sliding_attention","k":5,"v":5,"window":8},{"type":"full_attention","shared_kv":true},
              {"type":"linear_attention","state":{"conv_channels":6,"conv_kernel":4,"ssm":64}}]}"#,
        )
        .unwrap();
        let l = d.to_layout().unwrap();
        assert_eq!(
            l.attention,
            vec![
                AttentionGroup {
                    layers: 2,
                    window: Some(8),
                    row: KvRow::Heads { k: 5, v: 5 }
                },
                AttentionGroup {
                    layers: 1,
                    window: None,
                    row: KvRow::Heads { k: 5, v: 5 }
                },
            ]
        );
        assert_eq!(l.state.len(), 1);
        assert_eq!(bounded_parameters(&l.tensors), Some(30));
    }
}
