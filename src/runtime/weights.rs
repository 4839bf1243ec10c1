//! The decoder's weights: drawn at random on the device (`random`: every tensor in place, so a 7B
//! model never passes through host memory and is ready in about a second; memory is what real
//! weights would take), or read from a checkpoint's safetensors files (`load`).

use std::path::{Path, PathBuf};

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};

use super::{Result, RuntimeError};
use crate::model::Spec;

pub struct LayerWeights {
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    pub o: Tensor,
    pub qkv_bias: Option<(Tensor, Tensor, Tensor)>,
    pub gate: Tensor,
    pub up: Tensor,
    pub down: Tensor,
    pub input_norm: Tensor,
    pub post_attention_norm: Tensor,
}

pub struct Weights {
    pub embed: Tensor,
    pub layers: Vec<LayerWeights>,
    pub norm: Tensor,
    /// `None` when the embeddings are tied to the output.
    pub lm_head: Option<Tensor>,
    pub dtype: DType,
}

/// The families the decoder runs as written: llama-style blocks (RMSNorm, RoPE, GQA, SwiGLU).
pub fn check_supported(spec: &Spec) -> Result<()> {
    let ok = matches!(spec.architecture.as_str(), "llama" | "mistral" | "qwen2")
        && spec.experts.is_none()
        && !spec.fused_projections;
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::Unsupported(spec.architecture.clone()))
    }
}

impl Weights {
    /// Every tensor drawn from N(0, 0.02²) on `device` (norms are ones), `seed` fixing the draw.
    pub fn random(spec: &Spec, dtype: DType, device: &Device, seed: u64) -> Result<Weights> {
        check_supported(spec)?;
        let _ = device.set_seed(seed);
        let err = |e| RuntimeError::from_candle(e, device);
        let (h, i, v) = (
            spec.hidden_size as usize,
            spec.intermediate_size as usize,
            spec.vocab_size as usize,
        );
        let (q, kv) = (spec.q_dim() as usize, spec.kv_dim() as usize);
        let w = |rows: usize, cols: usize| -> Result<Tensor> {
            Tensor::randn(0f32, 0.02, (rows, cols), device)
                .and_then(|t| t.to_dtype(dtype))
                // drawn in f32, then converted: the f32 draw is the largest allocation
                .map_err(|e| err(e).requesting((rows * cols * 4) as u64))
        };
        let ones = |n: usize| -> Result<Tensor> { Tensor::ones(n, dtype, device).map_err(err) };
        let bias = |n: usize| -> Result<Tensor> {
            Tensor::randn(0f32, 0.02, n, device)
                .and_then(|t| t.to_dtype(dtype))
                .map_err(err)
        };
        let mut layers = Vec::with_capacity(spec.num_layers as usize);
        for _ in 0..spec.num_layers {
            layers.push(LayerWeights {
                q: w(q, h)?,
                k: w(kv, h)?,
                v: w(kv, h)?,
                o: w(h, q)?,
                qkv_bias: if spec.qkv_bias {
                    Some((bias(q)?, bias(kv)?, bias(kv)?))
                } else {
                    None
                },
                gate: w(i, h)?,
                up: w(i, h)?,
                down: w(h, i)?,
                input_norm: ones(h)?,
                post_attention_norm: ones(h)?,
            });
        }
        Ok(Weights {
            embed: w(v, h)?,
            layers,
            norm: ones(h)?,
            lm_head: if spec.tie_word_embeddings {
                None
            } else {
                Some(w(v, h)?)
            },
            dtype,
        })
    }

    /// Every tensor with its Hugging Face name (the names `load` reads).
    pub fn named(&self) -> Vec<(String, &Tensor)> {
        let mut v: Vec<(String, &Tensor)> = vec![
            ("model.embed_tokens.weight".into(), &self.embed),
            ("model.norm.weight".into(), &self.norm),
        ];
        if let Some(h) = &self.lm_head {
            v.push(("lm_head.weight".into(), h));
        }
        for (i, l) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            for (name, t) in [
                ("self_attn.q_proj.weight", &l.q),
                ("self_attn.k_proj.weight", &l.k),
                ("self_attn.v_proj.weight", &l.v),
                ("self_attn.o_proj.weight", &l.o),
                ("mlp.gate_proj.weight", &l.gate),
                ("mlp.up_proj.weight", &l.up),
                ("mlp.down_proj.weight", &l.down),
                ("input_layernorm.weight", &l.input_norm),
                ("post_attention_layernorm.weight", &l.post_attention_norm),
            ] {
                v.push((format!("{p}.{name}"), t));
            }
            if let Some((bq, bk, bv)) = &l.qkv_bias {
                v.push((format!("{p}.self_attn.q_proj.bias"), bq));
                v.push((format!("{p}.self_attn.k_proj.bias"), bk));
                v.push((format!("{p}.self_attn.v_proj.bias"), bv));
            }
        }
        v
    }

    /// Read a checkpoint folder's safetensors (one file or the shards of
    /// `model.safetensors.index.json`), check every tensor against the shapes `spec` gives, and
    /// convert to `dtype` on `device`.
    pub fn load(spec: &Spec, dir: &Path, dtype: DType, device: &Device) -> Result<Weights> {
        check_supported(spec)?;
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
        let get = |name: &str, shape: &[usize]| -> Result<Tensor> {
            let t = st.load(name, device).map_err(|e| {
                let why = first_line(&e);
                if why.contains("cannot find tensor") {
                    RuntimeError::Checkpoint(format!(
                        "{} has no tensor `{name}`: the checkpoint does not match its config.json",
                        dir.display()
                    ))
                } else {
                    RuntimeError::from_candle(e, device)
                }
            })?;
            if t.dims() != shape {
                return Err(RuntimeError::Checkpoint(format!(
                    "`{name}` has shape {:?} in the checkpoint but config.json implies {shape:?}: the two do not belong together",
                    t.dims()
                )));
            }
            t.to_dtype(dtype)
                .map_err(|e| RuntimeError::from_candle(e, device))
        };
        let (h, i, v) = (
            spec.hidden_size as usize,
            spec.intermediate_size as usize,
            spec.vocab_size as usize,
        );
        let (q, kv) = (spec.q_dim() as usize, spec.kv_dim() as usize);
        let mut layers = Vec::with_capacity(spec.num_layers as usize);
        for n in 0..spec.num_layers {
            let p = format!("model.layers.{n}");
            let qkv_bias = if spec.qkv_bias {
                Some((
                    get(&format!("{p}.self_attn.q_proj.bias"), &[q])?,
                    get(&format!("{p}.self_attn.k_proj.bias"), &[kv])?,
                    get(&format!("{p}.self_attn.v_proj.bias"), &[kv])?,
                ))
            } else {
                None
            };
            layers.push(LayerWeights {
                q: get(&format!("{p}.self_attn.q_proj.weight"), &[q, h])?,
                k: get(&format!("{p}.self_attn.k_proj.weight"), &[kv, h])?,
                v: get(&format!("{p}.self_attn.v_proj.weight"), &[kv, h])?,
                o: get(&format!("{p}.self_attn.o_proj.weight"), &[h, q])?,
                qkv_bias,
                gate: get(&format!("{p}.mlp.gate_proj.weight"), &[i, h])?,
                up: get(&format!("{p}.mlp.up_proj.weight"), &[i, h])?,
                down: get(&format!("{p}.mlp.down_proj.weight"), &[h, i])?,
                input_norm: get(&format!("{p}.input_layernorm.weight"), &[h])?,
                post_attention_norm: get(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
            });
        }
        Ok(Weights {
            embed: get("model.embed_tokens.weight", &[v, h])?,
            layers,
            norm: get("model.norm.weight", &[h])?,
            lm_head: if spec.tie_word_embeddings {
                None
            } else {
                Some(get("lm_head.weight", &[v, h])?)
            },
            dtype,
        })
    }

    /// Bytes the weight tensors occupy.
    pub fn bytes(&self) -> u64 {
        let t = |t: &Tensor| (t.elem_count() * t.dtype().size_in_bytes()) as u64;
        let layers: u64 = self
            .layers
            .iter()
            .map(|l| {
                [
                    &l.q,
                    &l.k,
                    &l.v,
                    &l.o,
                    &l.gate,
                    &l.up,
                    &l.down,
                    &l.input_norm,
                    &l.post_attention_norm,
                ]
                .iter()
                .map(|x| t(x))
                .sum::<u64>()
                    + l.qkv_bias
                        .as_ref()
                        .map_or(0, |(a, b, c)| t(a) + t(b) + t(c))
            })
            .sum();
        layers + t(&self.embed) + t(&self.norm) + self.lm_head.as_ref().map_or(0, t)
    }
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
