//! The runtime the probe measures with, through the hidden `run` command: on the CPU, on a tiny
//! llama written as a config.json, the weights and the KV cache hold exactly the estimated bytes.

mod util;

use serde_json::Value;
use util::{run, temp, write, TINY_LLAMA};

#[test]
fn weights_and_kv_cache_are_the_estimated_bytes() {
    let home = temp();
    let dir = home.path().join("tiny");
    write(&dir.join("config.json"), TINY_LLAMA);
    // A real checkpoint, so that every run below computes with the same weights.
    let spec = llm_oom::model::config::parse_config(TINY_LLAMA, &dir, "tiny").unwrap();
    let w = llm_oom::runtime::weights::Weights::random(
        &spec,
        candle_core::DType::F32,
        &candle_core::Device::Cpu,
        1,
        None,
    )
    .unwrap();
    let named: std::collections::HashMap<String, candle_core::Tensor> =
        w.named().into_iter().map(|(n, t)| (n, t.clone())).collect();
    candle_core::safetensors::save(&named, dir.join("model.safetensors")).unwrap();
    let mut tokens = Vec::new();
    for extra in [
        &[][..],
        &["--concat-cache"][..],
        &["--attention-chunk", "0", "--prefill-chunk", "7"][..],
        &["--attention-chunk", "5"][..],
    ] {
        let mut args = vec![
            "run",
            "--model",
            dir.to_str().unwrap(),
            "--dtype",
            "f32",
            "--prompt-tokens",
            "24",
            "--max-new-tokens",
            "3",
            "--batch",
            "2",
        ];
        args.extend_from_slice(extra);
        let r = run(home.path(), &args);
        assert_eq!(r.code, 0, "{extra:?}: {}", r.stderr);
        let j: Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(
            j["weights_bytes"], j["weights_bytes_estimated"],
            "{extra:?}"
        );
        assert_eq!(j["weights_bytes"], 3_283_200u64 * 4);
        assert_eq!(
            j["kv_cache_bytes"], j["kv_cache_bytes_estimated"],
            "{extra:?}"
        );
        assert!(j["decode_tokens_per_second"].as_f64().unwrap() > 0.0);
        tokens.push(j["tokens"].clone());
    }
    // The same weights give the same greedy tokens however attention is sliced (eager's mask and
    // softmax, or the one-step masked softmax) and the prompt prefilled.
    assert_eq!(tokens[0].as_array().map(Vec::len), Some(3));
    assert!(tokens.iter().all(|t| *t == tokens[0]), "{tokens:?}");
}

#[test]
fn unsupported_models_and_devices_are_bad_input() {
    let home = temp();
    // a causal LM plan sizes like llama, but whose blocks the runtime does not know
    let dir = home.path().join("olmo");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"model_type":"olmo","architectures":["OlmoForCausalLM"],"hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":2,"num_attention_heads":4,"vocab_size":97}"#,
    )
    .unwrap();
    let r = run(
        home.path(),
        &[
            "run",
            "--model",
            dir.to_str().unwrap(),
            "--prompt-tokens",
            "4",
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("does not run `olmo` models yet"),
        "{}",
        r.stderr
    );
    let r = run(
        home.path(),
        &["run", "--quantize", "q3", "--prompt-tokens", "4"],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("use q8_0 or q4k"), "{}", r.stderr);
    let r = run(
        home.path(),
        &["run", "--device", "tpu", "--prompt-tokens", "4"],
    );
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("not a device"), "{}", r.stderr);
}

#[test]
fn the_kernel_compiling_helper_refuses_in_one_line_what_it_cannot_do() {
    // `__compile-kernels` is what a card's first candle run starts side by side (runtime::jit):
    // a build without CUDA, or a module it does not know, is one line on stderr and a failure.
    let home = temp();
    let r = run(home.path(), &["__compile-kernels", "--gpu", "0", "unary"]);
    assert_ne!(r.code, 0, "{}", r.stderr);
    let line = r.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{line}");
    if cfg!(feature = "cuda") {
        let r = run(home.path(), &["__compile-kernels", "--gpu", "0", "nope"]);
        assert!(
            r.stderr.contains("no kernel module named \"nope\""),
            "{}",
            r.stderr
        );
    } else {
        assert!(line.contains("without the `cuda` feature"), "{line}");
    }
}
