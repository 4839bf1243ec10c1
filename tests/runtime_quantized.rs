//! Quantized weights in the runtime: GGUF files written with candle's GGUF writer (llama.cpp's
//! names, its q/k row permutation for interleaved RoPE, f32 and Q8_0 blocks) load and compute the
//! same model as the safetensors they came from; `--quantize` holds the linear layers at the bytes
//! their block types take; a GGUF of an architecture the runtime does not map is a clear error.

mod util;

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use llm_oom::model::config::parse_config;
use llm_oom::model::Spec;
use llm_oom::runtime::setup::runtime_weight_bytes;
use llm_oom::runtime::weights::{Quantize, WeightSource, Weights};
use llm_oom::runtime::{Attention, CacheMode, Decoder, KvCache};
use serde_json::Value as Json;
use util::{run, temp, write};

/// Rows of whole Q4K blocks (256) so every quantizer applies.
const CONFIG: &str = r#"{"model_type":"llama","architectures":["LlamaForCausalLM"],"hidden_size":256,
    "intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
    "vocab_size":101,"max_position_embeddings":256,"rms_norm_eps":1e-5,"rope_theta":10000.0,
    "tie_word_embeddings":false,"torch_dtype":"float32"}"#;

fn spec() -> Spec {
    parse_config(CONFIG, Path::new("config.json"), "tiny").unwrap()
}

fn logits(spec: &Spec, w: &Weights) -> Vec<f32> {
    let dev = Device::Cpu;
    let d = Decoder::new(spec, w, Attention::Chunked(4), 12, &dev).unwrap();
    let mut cache = KvCache::new(CacheMode::Preallocated, spec, 1, 12, DType::F32, &dev).unwrap();
    let ids = Tensor::new(&[[5u32, 9, 77, 3, 41, 8, 60, 2, 19, 33]], &dev).unwrap();
    d.forward(&ids, &mut cache)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// llama.cpp's converter permutes q and k rows so that RoPE rotates adjacent pairs.
fn permute(w: &Tensor, heads: usize) -> Tensor {
    let (out, inp) = w.dims2().unwrap();
    w.reshape((heads, 2, out / heads / 2, inp))
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .reshape((out, inp))
        .unwrap()
}

/// The weights as a llama.cpp GGUF, linear layers in `linear` blocks (f32 for the rest).
fn write_gguf(path: &Path, spec: &Spec, w: &Weights, linear: GgmlDType, arch: &str) {
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    for (name, t) in w.named() {
        let g = llm_oom::runtime::weights::gguf_name(&name).unwrap();
        let t = if name.ends_with("q_proj.weight") {
            permute(t, spec.num_heads as usize)
        } else if name.ends_with("k_proj.weight") {
            permute(t, spec.num_kv_heads as usize)
        } else {
            t.clone()
        };
        let block = if t.rank() == 2 && g != "token_embd.weight" {
            linear
        } else {
            GgmlDType::F32
        };
        tensors.push((g, QTensor::quantize(&t, block).unwrap()));
    }
    let u = |n: u64| Value::U32(n as u32);
    let meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (format!("{arch}.embedding_length"), u(spec.hidden_size)),
        (format!("{arch}.block_count"), u(spec.num_layers)),
        (format!("{arch}.attention.head_count"), u(spec.num_heads)),
        (
            format!("{arch}.attention.head_count_kv"),
            u(spec.num_kv_heads),
        ),
        (
            format!("{arch}.feed_forward_length"),
            u(spec.intermediate_size),
        ),
        (format!("{arch}.context_length"), u(256)),
        (format!("{arch}.rope.freq_base"), Value::F32(10_000.0)),
        (
            format!("{arch}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-5),
        ),
    ];
    let meta: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &meta, &tensors).unwrap();
}

#[test]
fn a_gguf_file_computes_the_model_it_was_converted_from() {
    let home = temp();
    let s = spec();
    let w = Weights::random(&s, DType::F32, &Device::Cpu, 21, None).unwrap();
    let dense = logits(&s, &w);

    // f32 blocks: the names, the q/k permutation and the interleaved RoPE are exact.
    let exact = home.path().join("tiny-f32.gguf");
    write_gguf(&exact, &s, &w, GgmlDType::F32, "llama");
    let gs = llm_oom::model::gguf::read_gguf(&exact, "tiny").unwrap();
    let g = Weights::load_gguf(&gs, &exact, DType::F32, &Device::Cpu).unwrap();
    let d = max_diff(&logits(&gs, &g), &dense);
    assert!(d < 1e-4, "f32 GGUF logits differ by {d}");
    assert_eq!(g.bytes(), w.bytes());

    // Q8_0 blocks: quantized matmuls, close to the dense model, at the file's bytes.
    let q8 = home.path().join("tiny-q8_0.gguf");
    write_gguf(&q8, &s, &w, GgmlDType::Q8_0, "llama");
    let gs = llm_oom::model::gguf::read_gguf(&q8, "tiny").unwrap();
    let g = Weights::load_gguf(&gs, &q8, DType::F32, &Device::Cpu).unwrap();
    let (got, scale) = (
        logits(&gs, &g),
        dense.iter().map(|x| x.abs()).fold(0.0, f32::max),
    );
    let d = max_diff(&got, &dense);
    assert!(
        d < 0.05 * scale,
        "Q8_0 logits differ by {d} (scale {scale})"
    );
    assert!(
        d > 0.0,
        "a Q8_0 model that computes exactly like f32 did not quantize"
    );
    let source = WeightSource::Gguf(q8.clone());
    assert_eq!(
        g.bytes(),
        runtime_weight_bytes(&gs, llm_oom::dtype::WeightDtype::F32, &source, None)
    );

    // Through the binary: the file's weights, their bytes as predicted.
    let r = run(
        home.path(),
        &[
            "run",
            "--model",
            q8.to_str().unwrap(),
            "--dtype",
            "f32",
            "--prompt-tokens",
            "8",
            "--max-new-tokens",
            "2",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j: Json = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(j["weights"], "gguf");
    assert_eq!(j["weights_bytes"], j["weights_bytes_estimated"]);

    // diagnose probes the GGUF's own blocks; its weights are what the runtime's formula says
    let r = run(
        home.path(),
        &[
            "diagnose",
            "--json",
            "--engine",
            "candle",
            "--model",
            q8.to_str().unwrap(),
            "--device",
            "cpu",
            "-p",
            "32",
            "-n",
            "8",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j: Json = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(j["verdict"]["cause"], "none", "{}", j["verdict"]);
    assert_eq!(j["measured"]["weights"], g.bytes());
    assert_eq!(j["measured"]["compute"]["quantized"], true);
}

#[test]
fn quantize_holds_linear_layers_at_their_block_bytes() {
    let s = spec();
    let dense = Weights::random(&s, DType::F32, &Device::Cpu, 4, None).unwrap();
    for q in [Quantize::Q8_0, Quantize::Q4K] {
        let w = Weights::random(&s, DType::F32, &Device::Cpu, 4, Some(q)).unwrap();
        let want = runtime_weight_bytes(
            &s,
            llm_oom::dtype::WeightDtype::F32,
            &WeightSource::Random,
            Some(q),
        );
        assert_eq!(w.bytes(), want, "{q:?}");
        assert!(w.bytes() < dense.bytes() / 3, "{q:?}: {}", w.bytes());
        assert!(logits(&s, &w).iter().all(|x| x.is_finite()));
    }

    // A checkpoint quantized at load computes close to its dense self.
    let home = temp();
    let dir = home.path().join("ckpt");
    write(&dir.join("config.json"), CONFIG);
    let named: HashMap<String, Tensor> = dense
        .named()
        .into_iter()
        .map(|(n, t)| (n, t.clone()))
        .collect();
    candle_core::safetensors::save(&named, dir.join("model.safetensors")).unwrap();
    let q = Weights::load(&s, &dir, DType::F32, &Device::Cpu, Some(Quantize::Q8_0)).unwrap();
    let (a, b) = (logits(&s, &q), logits(&s, &dense));
    let scale = b.iter().map(|x| x.abs()).fold(0.0, f32::max);
    assert!(max_diff(&a, &b) < 0.05 * scale);

    // Through the binary, with a q4k request on shapes that take it.
    let r = run(
        home.path(),
        &[
            "run",
            "--model",
            dir.to_str().unwrap(),
            "--dtype",
            "f32",
            "--quantize",
            "q4k",
            "--prompt-tokens",
            "8",
            "--max-new-tokens",
            "2",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j: Json = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(j["quantize"], "q4k");
    assert_eq!(j["weights_bytes"], j["weights_bytes_estimated"]);
}

#[test]
fn a_gguf_the_runtime_does_not_map_is_a_clear_error() {
    let home = temp();
    let s = spec();
    let w = Weights::random(&s, DType::F32, &Device::Cpu, 2, None).unwrap();
    let f = home.path().join("gemma.gguf");
    write_gguf(&f, &s, &w, GgmlDType::F32, "gemma2");
    let r = run(
        home.path(),
        &[
            "run",
            "--model",
            f.to_str().unwrap(),
            "--prompt-tokens",
            "4",
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("as GGUF; the runtime reads GGUF files of llama, qwen2, qwen3")
            && r.stderr.trim().lines().count() == 1,
        "{}",
        r.stderr
    );

    // A truncated file is named, not a panic.
    let good = home.path().join("tiny.gguf");
    write_gguf(&good, &s, &w, GgmlDType::Q8_0, "llama");
    let len = std::fs::metadata(&good).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&good)
        .unwrap()
        .set_len(len - 4096)
        .unwrap();
    let r = run(
        home.path(),
        &[
            "run",
            "--model",
            good.to_str().unwrap(),
            "--dtype",
            "f32",
            "--prompt-tokens",
            "4",
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("the file is damaged or incomplete"),
        "{}",
        r.stderr
    );
}
