//! The decoder's weights, from one of three places: drawn at random on the device (`random`:
//! every tensor in place, so a 7B model never passes through host memory; memory is what real
//! weights would take), read from a checkpoint's safetensors (`load`), or from a GGUF file's
//! quantized tensors (`load_gguf`). Linear layers are dense or quantized ([`Linear`]); with
//! `--quantize` the dense ones are quantized at load, as llama.cpp and candle's quantized models
//! hold them.
//!
//! Every tensor is asked for by its Hugging Face name; the GGUF source maps it to llama.cpp's.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::ops::Range;
use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Module, Tensor};

use super::parallel::{self, Rank, Split, VocabShard};
use super::{Result, RuntimeError};
use crate::model::Spec;

/// The block types `--quantize` offers (serialised as `q8_0`, `q4k` in the probe's protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Quantize {
    #[serde(rename = "q8_0")]
    Q8_0,
    #[serde(rename = "q4k")]
    Q4K,
}

impl std::str::FromStr for Quantize {
    type Err = crate::error::InputError;
    /// `--quantize q8_0|q4k`, checked.
    fn from_str(s: &str) -> std::result::Result<Quantize, Self::Err> {
        Quantize::parse(s).ok_or_else(|| {
            crate::error::InputError::Usage(format!(
                "`--quantize {s}` is not a block type the runtime quantizes to; use q8_0 or q4k"
            ))
        })
    }
}

impl Quantize {
    pub fn parse(s: &str) -> Option<Quantize> {
        match s.trim().to_ascii_lowercase().as_str() {
            "q8_0" | "q8" => Some(Quantize::Q8_0),
            "q4k" | "q4_k" | "q4_k_m" => Some(Quantize::Q4K),
            _ => None,
        }
    }

    /// The block type a `rows × cols` linear layer gets: the one asked for when its rows split
    /// into whole blocks, else Q8_0 (32 values) when they do, else none (it stays dense). llama.cpp
    /// falls back the same way for shapes k-quants cannot take.
    pub fn for_columns(self, cols: usize) -> Option<GgmlDType> {
        let want = match self {
            Quantize::Q8_0 => GgmlDType::Q8_0,
            Quantize::Q4K => GgmlDType::Q4K,
        };
        [want, GgmlDType::Q8_0]
            .into_iter()
            .find(|t| cols % t.block_size() == 0)
    }
}

/// Bytes a `rows × cols` matrix takes in block type `t` (rows are quantized independently).
pub fn quantized_bytes(t: GgmlDType, rows: usize, cols: usize) -> u64 {
    (rows * (cols / t.block_size()) * t.type_size()) as u64
}

/// A linear layer's weight: dense (out × in, the runtime dtype) or quantized blocks.
pub enum Linear {
    Dense(Tensor),
    Quantized {
        matmul: QMatMul,
        bytes: u64,
        rows: usize,
    },
}

impl Linear {
    /// `x` (b, l, in) → (b, l, out). Quantized layers take and give f32 (what candle's quantized
    /// kernels work in); the result is cast back to `x`'s dtype.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (b, l, d) = x.dims3()?;
        match self {
            Linear::Dense(w) => x.reshape((b * l, d))?.matmul(&w.t()?)?.reshape((b, l, ())),
            Linear::Quantized { matmul, .. } => {
                let dtype = x.dtype();
                matmul
                    .forward(&x.to_dtype(DType::F32)?.reshape((b * l, d))?)?
                    .to_dtype(dtype)?
                    .reshape((b, l, ()))
            }
        }
    }

    pub fn bytes(&self) -> u64 {
        match self {
            Linear::Dense(t) => tensor_bytes(t),
            Linear::Quantized { bytes, .. } => *bytes,
        }
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        match self {
            Linear::Dense(t) => t.dims().first().copied().unwrap_or(0),
            Linear::Quantized { rows, .. } => *rows,
        }
    }

    /// The dense weight, if this layer is dense (tests compare them).
    pub fn dense(&self) -> Option<&Tensor> {
        match self {
            Linear::Dense(t) => Some(t),
            Linear::Quantized { .. } => None,
        }
    }
}

/// q, k and v as three matmuls, or one fused `qkv_proj` (phi3) whose output is split.
pub enum Qkv {
    Split { q: Linear, k: Linear, v: Linear },
    Fused(Linear),
}

/// A gated MLP: gate and up as two matmuls or one fused `gate_up_proj` (phi3).
pub enum GateUp {
    Split { gate: Linear, up: Linear },
    Fused(Linear),
}

pub struct Ffn {
    pub gate_up: GateUp,
    pub down: Linear,
}

/// Mixture of experts: every expert resident, `active` of them run per token.
pub struct Moe {
    pub router: Linear,
    pub experts: Vec<Ffn>,
    /// qwen2-moe's always-on expert and its sigmoid gate (hidden → 1).
    pub shared: Option<(Ffn, Linear)>,
    pub active: usize,
    /// Mixtral's tensor names (`block_sparse_moe`, `w1/w3/w2`) rather than qwen-moe's.
    pub mixtral_names: bool,
}

pub enum Mlp {
    Dense(Ffn),
    Moe(Moe),
}

pub struct LayerWeights {
    pub qkv: Qkv,
    pub o: Linear,
    pub qkv_bias: Option<(Tensor, Tensor, Tensor)>,
    /// Per-head RMSNorm of q and k (qwen3).
    pub qk_norm: Option<(Tensor, Tensor)>,
    pub mlp: Mlp,
    pub input_norm: Tensor,
    /// Before the MLP (llama), or on the attention's output (gemma2, which then has the next two).
    pub post_attention_norm: Tensor,
    /// gemma2: before and after the MLP.
    pub ffn_norms: Option<(Tensor, Tensor)>,
}

pub struct Weights {
    pub embed: Tensor,
    pub layers: Vec<LayerWeights>,
    pub norm: Tensor,
    /// `None` when the embeddings are tied to the output.
    pub lm_head: Option<Linear>,
    pub dtype: DType,
    /// A tensor-parallel rank's rows of the (padded) vocabulary, in `embed` and `lm_head`.
    pub vocab: Option<VocabShard>,
}

/// The families the decoder runs: llama-style blocks (RMSNorm, RoPE, GQA, gated MLP) with the
/// variants of mistral, qwen2/3 (biases, q/k norms), phi3 (fused projections), gemma2 (four norms,
/// GELU, soft-capping) and mixtral / qwen-moe (experts).
pub fn check_supported(spec: &Spec) -> Result<()> {
    const RUNS: [&str; 9] = [
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "phi3",
        "gemma2",
        "mixtral",
        "qwen2_moe",
        "qwen3_moe",
    ];
    if RUNS.contains(&spec.architecture.as_str()) {
        Ok(())
    } else {
        Err(RuntimeError::Unsupported(spec.architecture.clone()))
    }
}

fn tensor_bytes(t: &Tensor) -> u64 {
    (t.elem_count() * t.dtype().size_in_bytes()) as u64
}

/// Where tensors come from.
enum Source<'a> {
    Random {
        /// One quantized random draw per shape, uploaded for every layer that has the shape
        /// (quantizing each layer's own draw on the host would take minutes for a 7B model; the
        /// bytes on the device are the same).
        quantized: RefCell<HashMap<(usize, usize, usize), Vec<u8>>>,
    },
    Safetensors {
        st: MmapedSafetensors,
        dir: &'a Path,
    },
    Gguf {
        content: gguf_file::Content,
        reader: RefCell<BufReader<File>>,
        path: &'a Path,
    },
}

struct Loader<'a> {
    spec: &'a Spec,
    dtype: DType,
    device: &'a Device,
    quantize: Option<Quantize>,
    source: Source<'a>,
    /// A tensor-parallel rank: only its part of each tensor is drawn or read.
    rank: Option<Rank>,
}

impl Loader<'_> {
    fn err(&self, e: candle_core::Error) -> RuntimeError {
        RuntimeError::from_candle(e, self.device)
    }

    fn missing(&self, name: &str) -> RuntimeError {
        let place = match &self.source {
            Source::Safetensors { dir, .. } => dir.display().to_string(),
            Source::Gguf { path, .. } => path.display().to_string(),
            Source::Random { .. } => "the random draw".into(),
        };
        RuntimeError::Checkpoint(format!(
            "{place} has no tensor `{name}`: the weights do not match the model's config"
        ))
    }

    fn check_shape(&self, name: &str, got: &[usize], want: &[usize]) -> Result<()> {
        if got == want {
            Ok(())
        } else {
            Err(RuntimeError::Checkpoint(format!(
                "`{name}` has shape {got:?} in the checkpoint but the config implies {want:?}: the two do not belong together"
            )))
        }
    }

    /// A checkpoint's tensor on `device`, checked against the shape the config implies.
    fn safetensor(
        &self,
        st: &MmapedSafetensors,
        name: &str,
        shape: &[usize],
        device: &Device,
    ) -> Result<Tensor> {
        let t = st.load(name, device).map_err(|e| {
            if e.to_string().contains("cannot find tensor") {
                self.missing(name)
            } else {
                self.err(e)
            }
        })?;
        self.check_shape(name, t.dims(), shape)?;
        Ok(t)
    }

    /// A GGUF file's tensor, by its Hugging Face name.
    fn gguf_tensor(&self, hf: &str, shape: &[usize]) -> Result<QTensor> {
        let Source::Gguf {
            content,
            reader,
            path,
        } = &self.source
        else {
            return Err(RuntimeError::Candle("not a GGUF source".into()));
        };
        let name = gguf_name(hf).ok_or_else(|| self.missing(hf))?;
        if !content.tensor_infos.contains_key(&name) {
            return Err(self.missing(&name));
        }
        let t = content
            .tensor(&mut *reader.borrow_mut(), &name, self.device)
            .map_err(|e| {
                let why = e.to_string();
                if why.contains("OUT_OF_MEMORY") || why.contains("out of memory") {
                    self.err(e)
                } else {
                    RuntimeError::Checkpoint(format!(
                        "cannot read `{name}` from {} ({}); the file is damaged or incomplete",
                        path.display(),
                        why.lines().next().unwrap_or_default()
                    ))
                }
            })?;
        self.check_shape(&name, t.shape().dims(), shape)?;
        Ok(t)
    }

    /// A dense tensor in the runtime dtype; `fill` is what a random draw holds.
    fn dense(&self, name: &str, shape: &[usize], fill: Fill) -> Result<Tensor> {
        let t = match &self.source {
            Source::Random { .. } => {
                let n: usize = shape.iter().product();
                match fill {
                    Fill::Ones => Tensor::ones(shape, self.dtype, self.device),
                    Fill::Zeros => Tensor::zeros(shape, self.dtype, self.device),
                    Fill::Normal => normal(shape, self.dtype, self.device),
                }
                .map_err(|e| {
                    self.err(e)
                        .requesting(n.saturating_mul(self.dtype.size_in_bytes()) as u64)
                })?
            }
            Source::Safetensors { st, .. } => self
                .safetensor(st, name, shape, self.device)?
                .to_dtype(self.dtype)
                .map_err(|e| self.err(e))?,
            Source::Gguf { .. } => self
                .gguf_tensor(name, shape)?
                .dequantize(self.device)
                .and_then(|t| t.to_dtype(self.dtype))
                .map_err(|e| self.err(e))?,
        };
        Ok(t)
    }

    /// An RMSNorm weight as the checkpoint stores it. Gemma applies `1 + w` (the decoder adds
    /// the one), so its random norms are zeros.
    fn norm(&self, name: &str, n: usize) -> Result<Tensor> {
        let fill = if self.spec.numerics.gemma_norms {
            Fill::Zeros
        } else {
            Fill::Ones
        };
        self.dense(name, &[n], fill)
    }

    /// A linear layer `rows × cols` (out × in), quantized when the source is or `--quantize` asks.
    fn linear(&self, name: &str, rows: usize, cols: usize) -> Result<Linear> {
        self.linear_as(name, rows, cols, self.quantize)
    }

    fn linear_as(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        quantize: Option<Quantize>,
    ) -> Result<Linear> {
        let quant = quantize.and_then(|q| q.for_columns(cols));
        match (&self.source, quant) {
            (Source::Gguf { .. }, _) => {
                let t = self.gguf_tensor(name, &[rows, cols])?;
                match t.dtype() {
                    GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => t
                        .dequantize(self.device)
                        .and_then(|t| t.to_dtype(self.dtype))
                        .map(Linear::Dense)
                        .map_err(|e| self.err(e)),
                    _ => self.quantized(t, rows),
                }
            }
            (_, None) => Ok(Linear::Dense(self.dense(
                name,
                &[rows, cols],
                Fill::Normal,
            )?)),
            (Source::Random { quantized }, Some(q)) => {
                let key = (rows, cols, q.type_size());
                let mut cache = quantized.borrow_mut();
                let data = match cache.entry(key) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => e.insert(
                        Tensor::randn(0f32, 0.02, (rows, cols), &Device::Cpu)
                            .and_then(|t| QTensor::quantize(&t, q))
                            .and_then(|t| t.data().map(Cow::into_owned))
                            .map_err(|e| self.err(e))?,
                    ),
                };
                let t = QStorage::from_data(Cow::Borrowed(data), self.device, q)
                    .and_then(|s| QTensor::new(s, (rows, cols)))
                    .map_err(|e| self.err(e).requesting(data.len() as u64))?;
                self.quantized(t, rows)
            }
            (Source::Safetensors { st, .. }, Some(q)) => {
                // Quantize on the host, from the mapped file: the dense copy never reaches the card.
                let t = self.safetensor(st, name, &[rows, cols], &Device::Cpu)?;
                let t = QTensor::quantize_onto(&t, q, self.device).map_err(|e| self.err(e))?;
                self.quantized(t, rows)
            }
        }
    }

    fn quantized(&self, t: QTensor, rows: usize) -> Result<Linear> {
        let bytes = t.storage_size_in_bytes() as u64;
        let matmul = QMatMul::from_qtensor(t).map_err(|e| self.err(e))?;
        Ok(Linear::Quantized {
            matmul,
            bytes,
            rows,
        })
    }

    fn ffn(&self, p: &str, inter: usize, names: FfnNames) -> Result<Ffn> {
        let h = self.spec.hidden_size as usize;
        let mine = self.rank.map_or(0..inter, |r| r.part(inter));
        let rows = |parts: Vec<Range<usize>>| self.split(|_| Split::Rows(parts));
        let gate_up = if self.spec.fused_projections {
            let both = vec![mine.clone(), inter + mine.start..inter + mine.end];
            GateUp::Fused(self.cut_linear(
                &format!("{p}.gate_up_proj.weight"),
                2 * inter,
                h,
                &rows(both),
            )?)
        } else {
            let split = rows(vec![mine.clone()]);
            GateUp::Split {
                gate: self.cut_linear(&format!("{p}.{}.weight", names.0), inter, h, &split)?,
                up: self.cut_linear(&format!("{p}.{}.weight", names.1), inter, h, &split)?,
            }
        };
        let cols = self.split(|_| Split::Cols(mine));
        Ok(Ffn {
            gate_up,
            down: self.cut_linear(&format!("{p}.{}.weight", names.2), h, inter, &cols)?,
        })
    }

    /// `f`'s split for a tensor-parallel rank; whole without one.
    fn split(&self, f: impl FnOnce(Rank) -> Split) -> Split {
        self.rank.map_or(Split::Whole, f)
    }

    /// A dense tensor of `full` shape as this rank keeps it: drawn in its own shape, or cut from
    /// the checkpoint's on the host (the whole tensor never reaches the device).
    fn cut_dense(&self, name: &str, full: &[usize], split: &Split, fill: Fill) -> Result<Tensor> {
        if *split == Split::Whole {
            return self.dense(name, full, fill);
        }
        match &self.source {
            Source::Random { .. } => self.dense(name, &split.local_shape(full), fill),
            Source::Safetensors { st, .. } => self
                .safetensor(st, name, full, &Device::Cpu)
                .and_then(|t| split.cut(&t).map_err(|e| self.err(e)))?
                .to_dtype(self.dtype)
                .and_then(|t| t.to_device(self.device))
                .map_err(|e| self.err(e)),
            Source::Gguf { .. } => Err(RuntimeError::Parallel(
                "the tensor-parallel runtime reads safetensors checkpoints or draws random weights, not GGUF files".into(),
            )),
        }
    }

    fn cut_linear(&self, name: &str, rows: usize, cols: usize, split: &Split) -> Result<Linear> {
        match split {
            Split::Whole => self.linear(name, rows, cols),
            _ => Ok(Linear::Dense(self.cut_dense(
                name,
                &[rows, cols],
                split,
                Fill::Normal,
            )?)),
        }
    }

    fn layer(&self, n: u64) -> Result<LayerWeights> {
        let s = self.spec;
        let (h, hd) = (s.hidden_size as usize, s.head_dim as usize);
        let (q, kv) = (s.q_dim() as usize, s.kv_dim() as usize);
        let p = format!("model.layers.{n}");
        let a = format!("{p}.self_attn");
        // a rank's query and KV rows: its heads × head_dim
        let (qr, kr) = match self.rank {
            Some(r) => {
                let heads = parallel::heads(s, r);
                let rows = |h: Range<usize>| h.start * hd..h.end * hd;
                (rows(heads.q), rows(heads.kv))
            }
            None => (0..q, 0..kv),
        };
        let (q_split, kv_split) = (
            self.split(|_| Split::Rows(vec![qr.clone()])),
            self.split(|_| Split::Rows(vec![kr.clone()])),
        );
        let qkv = if s.fused_projections {
            let shift = |r: &Range<usize>, by: usize| r.start + by..r.end + by;
            let fused =
                self.split(|_| Split::Rows(vec![qr.clone(), shift(&kr, q), shift(&kr, q + kv)]));
            Qkv::Fused(self.cut_linear(&format!("{a}.qkv_proj.weight"), q + 2 * kv, h, &fused)?)
        } else {
            Qkv::Split {
                q: self.cut_linear(&format!("{a}.q_proj.weight"), q, h, &q_split)?,
                k: self.cut_linear(&format!("{a}.k_proj.weight"), kv, h, &kv_split)?,
                v: self.cut_linear(&format!("{a}.v_proj.weight"), kv, h, &kv_split)?,
            }
        };
        let qkv_bias = if s.qkv_bias {
            let bias = |name: &str, n: usize, split: &Split| {
                self.cut_dense(&format!("{a}.{name}"), &[n], split, Fill::Normal)
            };
            Some((
                bias("q_proj.bias", q, &q_split)?,
                bias("k_proj.bias", kv, &kv_split)?,
                bias("v_proj.bias", kv, &kv_split)?,
            ))
        } else {
            None
        };
        let o_split = self.split(|_| Split::Cols(qr.clone()));
        let qk_norm = if s.qk_norm {
            Some((
                self.norm(&format!("{a}.q_norm.weight"), hd)?,
                self.norm(&format!("{a}.k_norm.weight"), hd)?,
            ))
        } else {
            None
        };
        let mlp = match &s.experts {
            Some(e) if n >= s.num_layers - e.sparse_layers.min(s.num_layers) => {
                let mixtral = s.architecture == "mixtral";
                let (base, names) = if mixtral {
                    (format!("{p}.block_sparse_moe"), FfnNames("w1", "w3", "w2"))
                } else {
                    (format!("{p}.mlp"), LLAMA_FFN)
                };
                // routers stay in the compute dtype under --quantize (small, and precision-bound)
                let router =
                    self.linear_as(&format!("{base}.gate.weight"), e.count as usize, h, None)?;
                let experts = (0..e.count)
                    .map(|j| {
                        self.ffn(
                            &format!("{base}.experts.{j}"),
                            e.intermediate_size as usize,
                            names,
                        )
                    })
                    .collect::<Result<Vec<_>>>()?;
                let shared = if e.shared_intermediate_size > 0 {
                    Some((
                        self.ffn(
                            &format!("{base}.shared_expert"),
                            e.shared_intermediate_size as usize,
                            LLAMA_FFN,
                        )?,
                        self.linear_as(&format!("{base}.shared_expert_gate.weight"), 1, h, None)?,
                    ))
                } else {
                    None
                };
                Mlp::Moe(Moe {
                    router,
                    experts,
                    shared,
                    active: e.active as usize,
                    mixtral_names: mixtral,
                })
            }
            _ => Mlp::Dense(self.ffn(
                &format!("{p}.mlp"),
                s.intermediate_size as usize,
                LLAMA_FFN,
            )?),
        };
        let ffn_norms = if s.norms_per_layer >= 4 {
            Some((
                self.norm(&format!("{p}.pre_feedforward_layernorm.weight"), h)?,
                self.norm(&format!("{p}.post_feedforward_layernorm.weight"), h)?,
            ))
        } else {
            None
        };
        Ok(LayerWeights {
            qkv,
            o: self.cut_linear(&format!("{a}.o_proj.weight"), h, q, &o_split)?,
            qkv_bias,
            qk_norm,
            mlp,
            input_norm: self.norm(&format!("{p}.input_layernorm.weight"), h)?,
            post_attention_norm: self.norm(&format!("{p}.post_attention_layernorm.weight"), h)?,
            ffn_norms,
        })
    }

    fn weights(&self) -> Result<Weights> {
        let s = self.spec;
        let (h, v) = (s.hidden_size as usize, s.vocab_size as usize);
        if self.rank.is_some() && self.quantize.is_some() {
            return Err(RuntimeError::Parallel(
                "the tensor-parallel runtime keeps its weights in the compute dtype; drop --quantize".into(),
            ));
        }
        let layers = (0..s.num_layers)
            .map(|n| self.layer(n))
            .collect::<Result<Vec<_>>>()?;
        let vocab = self.rank.map(|r| parallel::vocab_shard(s, r));
        let rows = vocab.map_or(Split::Whole, Split::Vocab);
        Ok(Weights {
            embed: self.cut_dense("model.embed_tokens.weight", &[v, h], &rows, Fill::Normal)?,
            layers,
            norm: self.norm("model.norm.weight", h)?,
            lm_head: if s.tie_word_embeddings {
                None
            } else if vocab.is_some() {
                Some(self.cut_linear("lm_head.weight", v, h, &rows)?)
            } else {
                // The output projection stays in the runtime dtype under --quantize, as the
                // embeddings do (what candle's and most GGUF quantizations keep wider).
                Some(self.linear_as("lm_head.weight", v, h, None)?)
            },
            dtype: self.dtype,
            vocab,
        })
    }
}

/// Names of gate, up and down within an expert or MLP.
#[derive(Clone, Copy)]
struct FfnNames(&'static str, &'static str, &'static str);
const LLAMA_FFN: FfnNames = FfnNames("gate_proj", "up_proj", "down_proj");

#[derive(Clone, Copy)]
enum Fill {
    Ones,
    Zeros,
    Normal,
}

impl Weights {
    /// Every tensor drawn from N(0, 0.02²) on `device` (norms are ones), `seed` fixing the draw;
    /// linear layers quantized when `quantize` is given.
    pub fn random(
        spec: &Spec,
        dtype: DType,
        device: &Device,
        seed: u64,
        quantize: Option<Quantize>,
    ) -> Result<Weights> {
        Weights::random_part(spec, dtype, device, seed, quantize, None)
    }

    /// [`Weights::random`] of one tensor-parallel rank's part only (`None`: the whole model).
    pub fn random_part(
        spec: &Spec,
        dtype: DType,
        device: &Device,
        seed: u64,
        quantize: Option<Quantize>,
        rank: Option<Rank>,
    ) -> Result<Weights> {
        check_supported(spec)?;
        if let Some(r) = rank {
            parallel::check(spec, r.world)?;
        }
        let _ = device.set_seed(seed);
        Loader {
            spec,
            dtype,
            device,
            quantize,
            source: Source::Random {
                quantized: RefCell::default(),
            },
            rank,
        }
        .weights()
    }

    /// Read a checkpoint folder's safetensors (one file or the shards of
    /// `model.safetensors.index.json`), check every tensor against the shapes `spec` gives, and
    /// convert to `dtype` (or quantize) on `device`.
    pub fn load(
        spec: &Spec,
        dir: &Path,
        dtype: DType,
        device: &Device,
        quantize: Option<Quantize>,
    ) -> Result<Weights> {
        Weights::load_part(spec, dir, dtype, device, quantize, None)
    }

    /// [`Weights::load`] of one tensor-parallel rank's part: each tensor is read on the host and
    /// only this rank's rows or columns go to `device`.
    pub fn load_part(
        spec: &Spec,
        dir: &Path,
        dtype: DType,
        device: &Device,
        quantize: Option<Quantize>,
        rank: Option<Rank>,
    ) -> Result<Weights> {
        check_supported(spec)?;
        if let Some(r) = rank {
            parallel::check(spec, r.world)?;
        }
        let files = checkpoint_files(dir)?;
        // SAFETY: the files are memory-mapped read-only; like every safetensors reader, this
        // assumes nobody rewrites the checkpoint while it is being read.
        let st = unsafe { MmapedSafetensors::multi(&files) }.map_err(|e| {
            RuntimeError::Checkpoint(format!(
                "cannot read the safetensors in {} ({}); re-download the checkpoint",
                dir.display(),
                first_line(&e)
            ))
        })?;
        Loader {
            spec,
            dtype,
            device,
            quantize,
            source: Source::Safetensors { st, dir },
            rank,
        }
        .weights()
    }

    /// Read a GGUF file's tensors onto `device`: quantized linear layers stay quantized (candle's
    /// QMatMul); embeddings, norms and 16/32-bit tensors become `dtype`.
    pub fn load_gguf(spec: &Spec, path: &Path, dtype: DType, device: &Device) -> Result<Weights> {
        check_supported(spec)?;
        if !GGUF_RUNS.contains(&spec.architecture.as_str()) {
            return Err(RuntimeError::Unsupported(format!(
                "{} (as GGUF; the runtime reads GGUF files of {})",
                spec.architecture,
                GGUF_RUNS.join(", ")
            )));
        }
        let bad = |why: String| {
            RuntimeError::Checkpoint(format!("cannot read {} ({why})", path.display()))
        };
        let file = File::open(path).map_err(|e| bad(e.to_string()))?;
        let mut reader = BufReader::new(file);
        let content = crate::model::gguf::read_content(&mut reader)
            .map_err(|e| bad(e.lines().next().unwrap_or_default().to_string()))?;
        Loader {
            spec,
            dtype,
            device,
            quantize: None,
            source: Source::Gguf {
                content,
                reader: RefCell::new(reader),
                path,
            },
            rank: None,
        }
        .weights()
    }

    /// Every dense tensor with its Hugging Face name (what `load` reads back; tests save them).
    pub fn named(&self) -> Vec<(String, &Tensor)> {
        let mut v: Vec<(String, &Tensor)> = vec![
            ("model.embed_tokens.weight".into(), &self.embed),
            ("model.norm.weight".into(), &self.norm),
        ];
        fn lin<'a>(v: &mut Vec<(String, &'a Tensor)>, name: String, l: &'a Linear) {
            if let Some(t) = l.dense() {
                v.push((name, t));
            }
        }
        if let Some(h) = &self.lm_head {
            lin(&mut v, "lm_head.weight".into(), h);
        }
        for (i, l) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            match &l.qkv {
                Qkv::Split { q, k, v: vv } => {
                    lin(&mut v, format!("{p}.self_attn.q_proj.weight"), q);
                    lin(&mut v, format!("{p}.self_attn.k_proj.weight"), k);
                    lin(&mut v, format!("{p}.self_attn.v_proj.weight"), vv);
                }
                Qkv::Fused(f) => lin(&mut v, format!("{p}.self_attn.qkv_proj.weight"), f),
            }
            lin(&mut v, format!("{p}.self_attn.o_proj.weight"), &l.o);
            fn ffn<'a>(v: &mut Vec<(String, &'a Tensor)>, p: &str, f: &'a Ffn, n: FfnNames) {
                match &f.gate_up {
                    GateUp::Split { gate, up } => {
                        lin(v, format!("{p}.{}.weight", n.0), gate);
                        lin(v, format!("{p}.{}.weight", n.1), up);
                    }
                    GateUp::Fused(g) => lin(v, format!("{p}.gate_up_proj.weight"), g),
                }
                lin(v, format!("{p}.{}.weight", n.2), &f.down);
            }
            match &l.mlp {
                Mlp::Dense(f) => ffn(&mut v, &format!("{p}.mlp"), f, LLAMA_FFN),
                Mlp::Moe(m) => {
                    let (base, names) = if m.mixtral_names {
                        (format!("{p}.block_sparse_moe"), FfnNames("w1", "w3", "w2"))
                    } else {
                        (format!("{p}.mlp"), LLAMA_FFN)
                    };
                    lin(&mut v, format!("{base}.gate.weight"), &m.router);
                    for (j, e) in m.experts.iter().enumerate() {
                        ffn(&mut v, &format!("{base}.experts.{j}"), e, names);
                    }
                    if let Some((f, g)) = &m.shared {
                        ffn(&mut v, &format!("{base}.shared_expert"), f, LLAMA_FFN);
                        lin(&mut v, format!("{base}.shared_expert_gate.weight"), g);
                    }
                }
            }
            v.push((format!("{p}.input_layernorm.weight"), &l.input_norm));
            v.push((
                format!("{p}.post_attention_layernorm.weight"),
                &l.post_attention_norm,
            ));
            if let Some((bq, bk, bv)) = &l.qkv_bias {
                v.push((format!("{p}.self_attn.q_proj.bias"), bq));
                v.push((format!("{p}.self_attn.k_proj.bias"), bk));
                v.push((format!("{p}.self_attn.v_proj.bias"), bv));
            }
            if let Some((qn, kn)) = &l.qk_norm {
                v.push((format!("{p}.self_attn.q_norm.weight"), qn));
                v.push((format!("{p}.self_attn.k_norm.weight"), kn));
            }
            if let Some((pre, post)) = &l.ffn_norms {
                v.push((format!("{p}.pre_feedforward_layernorm.weight"), pre));
                v.push((format!("{p}.post_feedforward_layernorm.weight"), post));
            }
        }
        v
    }

    /// Bytes the weight tensors occupy.
    pub fn bytes(&self) -> u64 {
        let ffn = |f: &Ffn| {
            f.down.bytes()
                + match &f.gate_up {
                    GateUp::Split { gate, up } => gate.bytes() + up.bytes(),
                    GateUp::Fused(g) => g.bytes(),
                }
        };
        let layers: u64 = self
            .layers
            .iter()
            .map(|l| {
                let qkv = match &l.qkv {
                    Qkv::Split { q, k, v } => q.bytes() + k.bytes() + v.bytes(),
                    Qkv::Fused(f) => f.bytes(),
                };
                let mlp = match &l.mlp {
                    Mlp::Dense(f) => ffn(f),
                    Mlp::Moe(m) => {
                        m.router.bytes()
                            + m.experts.iter().map(ffn).sum::<u64>()
                            + m.shared.as_ref().map_or(0, |(f, g)| ffn(f) + g.bytes())
                    }
                };
                let vectors = [&l.input_norm, &l.post_attention_norm]
                    .into_iter()
                    .chain(l.qkv_bias.iter().flat_map(|(a, b, c)| [a, b, c]))
                    .chain(l.qk_norm.iter().flat_map(|(a, b)| [a, b]))
                    .chain(l.ffn_norms.iter().flat_map(|(a, b)| [a, b]))
                    .map(tensor_bytes)
                    .sum::<u64>();
                qkv + l.o.bytes() + mlp + vectors
            })
            .sum();
        layers
            + tensor_bytes(&self.embed)
            + tensor_bytes(&self.norm)
            + self.lm_head.as_ref().map_or(0, Linear::bytes)
    }
}

/// Where a run's weights come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightSource {
    /// The model's exact shapes drawn on the device.
    Random,
    /// A checkpoint folder's safetensors.
    Safetensors(PathBuf),
    /// A GGUF file's (quantized) tensors.
    Gguf(PathBuf),
}

impl WeightSource {
    pub fn load(
        &self,
        spec: &Spec,
        dtype: DType,
        device: &Device,
        seed: u64,
        quantize: Option<Quantize>,
    ) -> Result<Weights> {
        match self {
            WeightSource::Random => Weights::random(spec, dtype, device, seed, quantize),
            WeightSource::Safetensors(dir) => Weights::load(spec, dir, dtype, device, quantize),
            WeightSource::Gguf(path) => Weights::load_gguf(spec, path, dtype, device),
        }
    }

    /// One tensor-parallel rank's part of the weights (a GGUF file is refused).
    pub fn load_part(
        &self,
        spec: &Spec,
        dtype: DType,
        device: &Device,
        seed: u64,
        rank: Rank,
    ) -> Result<Weights> {
        match self {
            WeightSource::Random => Weights::random_part(spec, dtype, device, seed, None, Some(rank)),
            WeightSource::Safetensors(dir) => {
                Weights::load_part(spec, dir, dtype, device, None, Some(rank))
            }
            WeightSource::Gguf(_) => Err(RuntimeError::Parallel(
                "the tensor-parallel runtime reads safetensors checkpoints or draws random weights, not GGUF files; pass the model's Hugging Face folder".into(),
            )),
        }
    }

    /// `random`, `checkpoint` or `gguf`, as reports name it.
    pub fn name(&self) -> &'static str {
        match self {
            WeightSource::Random => "random",
            WeightSource::Safetensors(_) => "checkpoint",
            WeightSource::Gguf(_) => "gguf",
        }
    }
}

/// Architectures whose GGUF tensors the runtime maps (llama.cpp's names and layouts).
const GGUF_RUNS: [&str; 3] = ["llama", "qwen2", "qwen3"];

/// llama.cpp's name for a Hugging Face tensor name.
pub fn gguf_name(hf: &str) -> Option<String> {
    match hf {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.norm.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (n, name) = rest.split_once('.')?;
    let (stem, kind) = name.rsplit_once('.')?;
    let g = match stem {
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm" => "ffn_norm",
        _ => return None,
    };
    Some(format!("blk.{n}.{g}.{kind}"))
}

fn first_line(e: &candle_core::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// The safetensors files of a checkpoint folder: the shards `model.safetensors.index.json` names,
/// else every `*.safetensors` in it. Empty when there are none (the model then runs with random
/// weights of its shapes).
pub fn checkpoint_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|e| {
            RuntimeError::Checkpoint(format!("cannot read {}: {e}", index.display()))
        })?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            RuntimeError::Checkpoint(format!("{} is not valid JSON ({e})", index.display()))
        })?;
        let mut shards: Vec<String> = json["weight_map"]
            .as_object()
            .map(|m| {
                m.values()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        shards.sort();
        shards.dedup();
        let files: Vec<PathBuf> = shards.iter().map(|s| dir.join(s)).collect();
        if let Some(missing) = files.iter().find(|f| !f.is_file()) {
            return Err(RuntimeError::Checkpoint(format!(
                "{} lists {}, which is missing; the download is incomplete",
                index.display(),
                missing.display()
            )));
        }
        return Ok(files);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    Ok(files)
}

/// The most of a random tensor drawn in f32 at once.
const RANDOM_BLOCK: usize = 64 << 20;

/// A N(0, 0.02) draw in `dtype`. curand draws only f32 and f64, so a tensor larger than
/// RANDOM_BLOCK in f32 is drawn a block of rows at a time and written into its place: the largest
/// transient is one block, not the whole tensor in f32 (which held 3.25 GiB beyond the model while
/// loading Qwen2.5-7B's 152k-row embeddings on the H200 and turned a tight card's verdict into
/// `weights`).
fn normal(shape: &[usize], dtype: DType, device: &Device) -> candle_core::Result<Tensor> {
    let n: usize = shape.iter().product();
    let row: usize = shape.iter().skip(1).product::<usize>().max(1);
    let rows = shape.first().copied().unwrap_or(1);
    if dtype == DType::F32 || dtype == DType::F64 || n.saturating_mul(4) <= RANDOM_BLOCK || rows < 2
    {
        return Tensor::randn(0f32, 0.02, shape, device)?.to_dtype(dtype);
    }
    let per = (RANDOM_BLOCK / row.saturating_mul(4)).max(1);
    let out = Tensor::zeros(shape, dtype, device)?;
    let mut at = 0;
    while at < rows {
        let take = per.min(rows - at);
        let mut dims = shape.to_vec();
        dims[0] = take;
        let block = Tensor::randn(0f32, 0.02, dims.as_slice(), device)?.to_dtype(dtype)?;
        out.slice_set(&block, 0, at)?;
        at += take;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_random_tensor_is_drawn_in_blocks_into_its_dtype() {
        // 2 × RANDOM_BLOCK in f32: drawn in two blocks of rows, each written into a bf16 tensor.
        let rows = 2 * RANDOM_BLOCK / (1024 * 4);
        let t = normal(&[rows, 1024], DType::BF16, &Device::Cpu).unwrap();
        assert_eq!(t.dtype(), DType::BF16);
        assert_eq!(t.dims(), &[rows, 1024]);
        let f = t.to_dtype(DType::F32).unwrap();
        let std = f
            .sqr()
            .unwrap()
            .mean_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            .sqrt();
        assert!((std - 0.02).abs() < 0.001, "std {std}");
        // The last block is filled too (not left as the zeros it started as).
        let last = f
            .narrow(0, rows - 1, 1)
            .unwrap()
            .abs()
            .unwrap()
            .sum_all()
            .unwrap();
        assert!(last.to_scalar::<f32>().unwrap() > 0.0);
    }

    #[test]
    fn quantize_falls_back_where_blocks_do_not_fit() {
        assert_eq!(Quantize::Q4K.for_columns(4096), Some(GgmlDType::Q4K));
        assert_eq!(Quantize::Q4K.for_columns(576), Some(GgmlDType::Q8_0));
        assert_eq!(Quantize::Q8_0.for_columns(100), None);
        assert_eq!(quantized_bytes(GgmlDType::Q8_0, 2, 64), 2 * 2 * 34);
        assert_eq!(quantized_bytes(GgmlDType::Q4K, 1, 4096), 16 * 144);
    }

    #[test]
    fn hugging_face_names_map_to_llama_cpp_names() {
        assert_eq!(
            gguf_name("model.layers.3.self_attn.q_proj.bias").as_deref(),
            Some("blk.3.attn_q.bias")
        );
        assert_eq!(
            gguf_name("model.layers.0.post_attention_layernorm.weight").as_deref(),
            Some("blk.0.ffn_norm.weight")
        );
        assert_eq!(
            gguf_name("lm_head.weight").as_deref(),
            Some("output.weight")
        );
        assert_eq!(gguf_name("model.layers.0.mlp.experts.0.w1.weight"), None);
    }
}
