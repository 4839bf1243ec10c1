//! Real checkpoints for the runtime: safetensors written by the test (one file, shards with an
//! index, the Hugging Face cache layout) load into the same model the random weights were, and
//! broken checkpoints are clear errors.

mod util;

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use llm_oom::model::config::parse_config;
use llm_oom::runtime::weights::Weights;
use llm_oom::runtime::{generate, Attention, CacheMode, GenerateConfig};
use serde_json::Value;
use util::{run, temp, write, TINY_LLAMA};

fn spec(json: &str) -> llm_oom::model::Spec {
    parse_config(json, Path::new("config.json"), "tiny").unwrap()
}

fn tensors(w: &Weights) -> HashMap<String, Tensor> {
    w.named().into_iter().map(|(n, t)| (n, t.clone())).collect()
}

fn tokens(s: &llm_oom::model::Spec, w: &Weights) -> Vec<Vec<u32>> {
    let cfg = GenerateConfig {
        prompt_tokens: 12,
        new_tokens: 6,
        batch: 2,
        prefill_chunk: None,
        attention: Attention::Chunked(4),
        cache: CacheMode::Preallocated,
    };
    generate(s, w, &cfg, &Device::Cpu).unwrap().tokens
}

#[test]
fn a_saved_checkpoint_loads_into_the_same_model() {
    let home = temp();
    let s = spec(TINY_LLAMA);
    let w = Weights::random(&s, DType::F32, &Device::Cpu, 5, None).unwrap();
    let dir = home.path().join("one");
    write(&dir.join("config.json"), TINY_LLAMA);
    candle_core::safetensors::save(&tensors(&w), dir.join("model.safetensors")).unwrap();
    let loaded = Weights::load(&s, &dir, DType::F32, &Device::Cpu, None).unwrap();
    assert_eq!(loaded.bytes(), w.bytes());
    assert_eq!(tokens(&s, &loaded), tokens(&s, &w));

    // Two shards and an index, as large checkpoints come.
    let sharded = home.path().join("sharded");
    write(&sharded.join("config.json"), TINY_LLAMA);
    let all = tensors(&w);
    let (mut a, mut b) = (HashMap::new(), HashMap::new());
    let mut map = serde_json::Map::new();
    for (i, (n, t)) in all.into_iter().enumerate() {
        let shard = if i % 2 == 0 {
            "model-00001-of-00002.safetensors"
        } else {
            "model-00002-of-00002.safetensors"
        };
        map.insert(n.clone(), Value::from(shard));
        if i % 2 == 0 {
            a.insert(n, t)
        } else {
            b.insert(n, t)
        };
    }
    candle_core::safetensors::save(&a, sharded.join("model-00001-of-00002.safetensors")).unwrap();
    candle_core::safetensors::save(&b, sharded.join("model-00002-of-00002.safetensors")).unwrap();
    write(
        &sharded.join("model.safetensors.index.json"),
        &serde_json::json!({ "weight_map": map }).to_string(),
    );
    let from_shards = Weights::load(&s, &sharded, DType::F32, &Device::Cpu, None).unwrap();
    assert_eq!(tokens(&s, &from_shards), tokens(&s, &w));

    // The Hugging Face cache layout, through the binary, offline.
    let snap = home
        .path()
        .join("hf/hub/models--acme--tiny/snapshots/abc123");
    write(
        &home.path().join("hf/hub/models--acme--tiny/refs/main"),
        "abc123",
    );
    write(&snap.join("config.json"), TINY_LLAMA);
    std::fs::copy(
        dir.join("model.safetensors"),
        snap.join("model.safetensors"),
    )
    .unwrap();
    let r = run(
        home.path(),
        &[
            "run",
            "--model",
            "acme/tiny",
            "--dtype",
            "f32",
            "--prompt-tokens",
            "8",
            "--max-new-tokens",
            "2",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(j["weights"], "checkpoint");
    assert_eq!(j["weights_bytes"], j["weights_bytes_estimated"]);
    let r = run(
        home.path(),
        &[
            "run",
            "--model",
            "acme/tiny",
            "--dtype",
            "f32",
            "--prompt-tokens",
            "8",
            "--max-new-tokens",
            "2",
            "--random-weights",
        ],
    );
    assert_eq!(
        serde_json::from_str::<Value>(&r.stdout).unwrap()["weights"],
        "random"
    );
}

#[test]
fn broken_checkpoints_are_one_line_errors() {
    let home = temp();
    let s = spec(TINY_LLAMA);
    let w = Weights::random(&s, DType::F32, &Device::Cpu, 9, None).unwrap();
    let case = |name: &str, edit: &dyn Fn(&Path, HashMap<String, Tensor>)| {
        let dir = home.path().join(name);
        write(&dir.join("config.json"), TINY_LLAMA);
        edit(&dir, tensors(&w));
        run(
            home.path(),
            &[
                "run",
                "--model",
                dir.to_str().unwrap(),
                "--dtype",
                "f32",
                "--prompt-tokens",
                "4",
                "--max-new-tokens",
                "1",
            ],
        )
    };
    let truncated = case("truncated", &|dir, t| {
        let f = dir.join("model.safetensors");
        candle_core::safetensors::save(&t, &f).unwrap();
        let len = std::fs::metadata(&f).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
    });
    let missing = case("missing", &|dir, mut t| {
        t.remove("model.layers.1.mlp.down_proj.weight");
        candle_core::safetensors::save(&t, dir.join("model.safetensors")).unwrap();
    });
    let mismatch = case("mismatch", &|dir, t| {
        candle_core::safetensors::save(&t, dir.join("model.safetensors")).unwrap();
        write(
            &dir.join("config.json"),
            &TINY_LLAMA.replace("\"intermediate_size\":688", "\"intermediate_size\":512"),
        );
    });
    let unlisted = case("unlisted", &|dir, t| {
        candle_core::safetensors::save(&t, dir.join("model-00001-of-00002.safetensors")).unwrap();
        write(
            &dir.join("model.safetensors.index.json"),
            r#"{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}"#,
        );
    });
    for (r, needle) in [
        // Refused when the model is read, before any weight: its byte ranges pass the file's end.
        (truncated, "it is truncated"),
        (
            missing,
            "has no tensor `model.layers.1.mlp.down_proj.weight`",
        ),
        (
            mismatch,
            "has shape [688, 256] in the checkpoint but the config implies [512, 256]",
        ),
        (unlisted, "which is missing; the download is incomplete"),
    ] {
        assert_eq!(r.code, 2, "{needle}: {}", r.stderr);
        assert!(
            r.stderr.contains(needle) && r.stderr.trim().lines().count() == 1,
            "{needle}: {}",
            r.stderr
        );
    }
}
