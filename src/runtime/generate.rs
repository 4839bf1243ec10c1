//! Greedy generation with the knobs users run: a batch of equal-length synthetic prompts, the
//! prompt prefilled whole or in chunks, then N decode steps. Times are taken after a device
//! synchronisation, so they are the GPU's, not the launch queue's.

use std::time::Instant;

use candle_core::{Device, Tensor};
use serde::Serialize;

use super::decoder::{argmax, Attention, Decoder};
use super::kv_cache::{CacheMode, KvCache};
use super::weights::Weights;
use super::{Result, RuntimeError};
use crate::model::Spec;

#[derive(Debug, Clone, Copy)]
pub struct GenerateConfig {
    pub prompt_tokens: usize,
    pub new_tokens: usize,
    pub batch: usize,
    /// Feed the prompt in slices of this many tokens (`None`: one pass).
    pub prefill_chunk: Option<usize>,
    pub attention: Attention,
    pub cache: CacheMode,
}

#[derive(Debug, Clone, Serialize)]
pub struct GenerateStats {
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
    pub decode_tokens_per_second: f64,
    pub kv_cache_bytes: u64,
    pub weights_bytes: u64,
    /// The generated token ids, one row per sequence.
    pub tokens: Vec<Vec<u32>>,
}

/// Deterministic synthetic prompt ids: row `r`, position `i`.
pub fn synthetic_prompt(
    batch: usize,
    len: usize,
    vocab: usize,
    device: &Device,
) -> candle_core::Result<Tensor> {
    let ids: Vec<u32> = (0..batch)
        .flat_map(|r| {
            (0..len).map(move |i| ((i * 7919 + r * 104_729 + 1) % (vocab - 1) + 1) as u32)
        })
        .collect();
    Tensor::from_vec(ids, (batch, len), device)
}

fn sync(device: &Device) {
    let _ = device.synchronize();
}

pub fn generate(
    spec: &Spec,
    weights: &Weights,
    cfg: &GenerateConfig,
    device: &Device,
) -> Result<GenerateStats> {
    let err = |e| RuntimeError::from_candle(e, device);
    let total = cfg.prompt_tokens + cfg.new_tokens;
    let decoder = Decoder::new(spec, weights, cfg.attention, total, device)?;
    let mut cache = KvCache::new(cfg.cache, spec, cfg.batch, total, weights.dtype, device)?;
    let prompt = synthetic_prompt(
        cfg.batch,
        cfg.prompt_tokens,
        spec.vocab_size as usize,
        device,
    )
    .map_err(err)?;

    sync(device);
    let t0 = Instant::now();
    let step = cfg.prefill_chunk.unwrap_or(cfg.prompt_tokens).max(1);
    let mut logits = None;
    let mut start = 0;
    while start < cfg.prompt_tokens {
        let n = step.min(cfg.prompt_tokens - start);
        logits = Some(decoder.forward(&prompt.narrow(1, start, n).map_err(err)?, &mut cache)?);
        start += n;
    }
    let Some(mut logits) = logits else {
        return Err(RuntimeError::Candle(
            "an empty prompt cannot be prefilled".into(),
        ));
    };
    sync(device);
    let prefill_seconds = t0.elapsed().as_secs_f64();

    let mut generated: Vec<Vec<u32>> = vec![Vec::with_capacity(cfg.new_tokens); cfg.batch];
    let t1 = Instant::now();
    // As `generate` does: the prefill yields the first new token, each of the N − 1 decode passes
    // the next, so the cache ends holding prompt + N − 1 tokens.
    for step in 0..cfg.new_tokens {
        let next = argmax(&logits).map_err(err)?;
        for (row, id) in next.to_vec1::<u32>().map_err(err)?.into_iter().enumerate() {
            generated[row].push(id);
        }
        if step + 1 < cfg.new_tokens {
            logits = decoder.forward(&next.reshape((cfg.batch, 1)).map_err(err)?, &mut cache)?;
        }
    }
    sync(device);
    let decode_seconds = t1.elapsed().as_secs_f64();
    let decode_passes = cfg.new_tokens.saturating_sub(1);
    Ok(GenerateStats {
        prefill_seconds,
        decode_seconds,
        decode_tokens_per_second: if decode_seconds > 0.0 {
            (decode_passes * cfg.batch) as f64 / decode_seconds
        } else {
            0.0
        },
        kv_cache_bytes: cache.bytes(),
        weights_bytes: weights.bytes(),
        tokens: generated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::KvDtype;
    use crate::estimate::kv_bytes;
    use crate::model::config::parse_config;
    use candle_core::DType;

    fn tiny() -> Spec {
        let json = r#"{"model_type":"llama","hidden_size":64,"intermediate_size":172,"num_hidden_layers":2,
            "num_attention_heads":4,"num_key_value_heads":2,"vocab_size":97,"max_position_embeddings":512,
            "rms_norm_eps":1e-5,"rope_theta":10000.0,"tie_word_embeddings":false}"#;
        parse_config(json, std::path::Path::new("tiny"), "tiny").unwrap()
    }

    fn cfg(
        attention: Attention,
        cache: CacheMode,
        prefill_chunk: Option<usize>,
        batch: usize,
    ) -> GenerateConfig {
        GenerateConfig {
            prompt_tokens: 37,
            new_tokens: 5,
            batch,
            prefill_chunk,
            attention,
            cache,
        }
    }

    fn logits_after_prompt(
        spec: &Spec,
        w: &Weights,
        attention: Attention,
        chunk: Option<usize>,
        batch: usize,
    ) -> Vec<Vec<f32>> {
        let dev = Device::Cpu;
        let d = Decoder::new(spec, w, attention, 64, &dev).unwrap();
        let mut cache =
            KvCache::new(CacheMode::Preallocated, spec, batch, 64, DType::F32, &dev).unwrap();
        let prompt = synthetic_prompt(batch, 37, 97, &dev).unwrap();
        let step = chunk.unwrap_or(37);
        let mut out = None;
        let mut s = 0;
        while s < 37 {
            let n = step.min(37 - s);
            out = Some(
                d.forward(&prompt.narrow(1, s, n).unwrap(), &mut cache)
                    .unwrap(),
            );
            s += n;
        }
        out.unwrap().to_vec2().unwrap()
    }

    fn close(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
        a.iter()
            .flatten()
            .zip(b.iter().flatten())
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    #[test]
    fn chunked_prefill_and_chunked_attention_match_one_pass() {
        let spec = tiny();
        let w = Weights::random(&spec, DType::F32, &Device::Cpu, 7, None).unwrap();
        let one = logits_after_prompt(&spec, &w, Attention::Eager, None, 2);
        assert!(
            close(
                &one,
                &logits_after_prompt(&spec, &w, Attention::Eager, Some(8), 2)
            ) < 1e-4
        );
        assert!(
            close(
                &one,
                &logits_after_prompt(&spec, &w, Attention::Chunked(5), None, 2)
            ) < 1e-4
        );
        assert!(
            close(
                &one,
                &logits_after_prompt(&spec, &w, Attention::Chunked(3), Some(11), 2)
            ) < 1e-4
        );
    }

    #[test]
    fn batch_rows_equal_single_sequences() {
        let spec = tiny();
        let w = Weights::random(&spec, DType::F32, &Device::Cpu, 11, None).unwrap();
        let both = generate(
            &spec,
            &w,
            &cfg(Attention::Eager, CacheMode::Concatenated, None, 2),
            &Device::Cpu,
        )
        .unwrap();
        let batch = logits_after_prompt(&spec, &w, Attention::Eager, None, 2);
        let single = logits_after_prompt(&spec, &w, Attention::Eager, None, 1);
        assert!(close(&batch[..1], &single) < 1e-4);
        assert_eq!(both.tokens.len(), 2);
        assert_eq!(both.tokens[0].len(), 5);
        // The cache mode does not change what is generated.
        let pre = generate(
            &spec,
            &w,
            &cfg(Attention::Eager, CacheMode::Preallocated, Some(10), 2),
            &Device::Cpu,
        )
        .unwrap();
        assert_eq!(both.tokens, pre.tokens);
    }

    #[test]
    fn kv_cache_bytes_equal_the_formula() {
        let spec = tiny();
        let w = Weights::random(&spec, DType::F32, &Device::Cpu, 3, None).unwrap();
        for batch in [1, 3] {
            let s = generate(
                &spec,
                &w,
                &cfg(Attention::Chunked(16), CacheMode::Concatenated, None, batch),
                &Device::Cpu,
            )
            .unwrap();
            // The concatenated cache holds the prompt and all but the last generated token.
            let held = 37 + 5 - 1;
            assert_eq!(
                s.kv_cache_bytes,
                kv_bytes(&spec, KvDtype::F32, held as u64, batch as u64, false)
            );
            let p = generate(
                &spec,
                &w,
                &cfg(Attention::Chunked(16), CacheMode::Preallocated, None, batch),
                &Device::Cpu,
            )
            .unwrap();
            assert_eq!(
                p.kv_cache_bytes,
                kv_bytes(&spec, KvDtype::F32, 42, batch as u64, false)
            );
        }
        assert_eq!(w.bytes(), spec.parameters() * 4);
    }

    #[test]
    fn unsupported_families_say_so() {
        let mut spec = tiny();
        spec.architecture = "gemma3".into();
        assert!(matches!(
            Weights::random(&spec, DType::F32, &Device::Cpu, 1, None),
            Err(RuntimeError::Unsupported(_))
        ));
    }
}
