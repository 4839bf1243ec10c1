//! Property tests over the config parser, the GGUF reader, the estimate, the budget and the
//! request builder: no panic and no overflow on any input (these run with overflow checks on),
//! and the invariants — weights and KV cache never shrink as a model or a workload grows, and
//! every limit the budget reports fits by the same estimator while one more does not.

use std::io::Cursor;
use std::path::Path;

use proptest::prelude::*;
use serde_json::Value;

use llm_oom::budget::Planner;
use llm_oom::commands::plan::{plan, PlanRequest};
use llm_oom::dtype::{KvDtype, WeightDtype};
use llm_oom::estimate::{kv_bytes_in, weight_bytes, CachePolicy, Engine, Workload};
use llm_oom::model::config::parse_config;
use llm_oom::model::gguf::read_gguf_from;
use llm_oom::model::presets::PRESETS;
use llm_oom::model::Spec;

mod util;
use util::gguf_header;

/// Integers a hostile file would use: edges of every width and of llm-oom's ceilings.
fn hostile_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..=4,
        Just(u64::MAX),
        Just(i64::MAX as u64),
        Just(1 << 32),
        Just((1 << 32) - 1),
        Just(1 << 33),
        Just(1 << 47),
        Just(65_536),
        Just(65_537),
        Just(1 << 20),
        Just((1 << 20) + 1),
        Just(1 << 24),
        (0u32..64).prop_map(|k| 1u64 << k),
        any::<u64>(),
        1u64..100_000,
    ]
}

/// Every estimate and budget of `spec`, for every engine: must not panic or overflow.
fn exercise(spec: &Spec, prompt: u64, new: u64, batch: u64, vram: u64) {
    for engine in Engine::ALL {
        let w = Workload {
            llama: Default::default(),
            prompt_tokens: prompt,
            max_new_tokens: new,
            batch,
            weight_dtype: spec.native_dtype,
            kv_dtype: spec.native_dtype.compute_kv_dtype(),
            engine,
        };
        let p = Planner::new(spec, vram);
        let e = p.estimate(&w);
        assert!(e.total >= e.weights && e.total >= e.kv_cache);
        let b = p.budget(&w);
        assert_eq!(b.fits, e.total <= vram);
        let _ = p.quantization_what_if(&w);
    }
}

fn preset_json(i: usize) -> serde_json::Map<String, Value> {
    match serde_json::from_str(PRESETS[i % PRESETS.len()].1) {
        Ok(Value::Object(m)) => m,
        _ => panic!("presets are JSON objects"),
    }
}

/// The numeric keys of a config object (and of its `text_config`), as paths.
fn numeric_keys(m: &serde_json::Map<String, Value>) -> Vec<(Option<String>, String)> {
    let mut keys = Vec::new();
    for (k, v) in m {
        match v {
            Value::Number(_) => keys.push((None, k.clone())),
            Value::Object(inner) if k == "text_config" => {
                for (ik, iv) in inner {
                    if iv.is_number() {
                        keys.push((Some(k.clone()), ik.clone()));
                    }
                }
            }
            _ => {}
        }
    }
    keys
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// A preset of every family with one to three of its numbers replaced by hostile ones: the
    /// reader refuses it (exit 2) or every estimate of it runs.
    #[test]
    fn hostile_numbers_in_any_familys_config(
        which in 0usize..1000,
        picks in proptest::collection::vec((0usize..1000, hostile_u64()), 1..4),
        prompt in 1u64..=10_000_000,
        new in 1u64..=10_000_000,
        batch in 1u64..=65_536,
    ) {
        let mut cfg = preset_json(which);
        let keys = numeric_keys(&cfg);
        prop_assume!(!keys.is_empty());
        for (k, n) in picks {
            let (outer, key) = &keys[k % keys.len()];
            let target = match outer {
                Some(o) => cfg.get_mut(o).and_then(Value::as_object_mut),
                None => Some(&mut cfg),
            };
            if let Some(t) = target {
                t.insert(key.clone(), Value::from(n));
            }
        }
        let text = Value::Object(cfg).to_string();
        if let Ok(spec) = parse_config(&text, Path::new("config.json"), "p") {
            exercise(&spec, prompt, new, batch, 24 << 30);
        }
    }

    /// Any text as config.json: refused or read, never a panic.
    #[test]
    fn any_text_as_a_config(text in ".{0,400}") {
        let _ = parse_config(&text, Path::new("config.json"), "p");
    }

    /// A llama-shaped config of hostile sizes: refused, or estimated without overflow.
    #[test]
    fn hostile_llama_shapes(
        hidden in hostile_u64(), layers in hostile_u64(), heads in hostile_u64(),
        kv in hostile_u64(), inter in hostile_u64(), vocab in hostile_u64(),
        experts in hostile_u64(), head_dim in hostile_u64(), moe in any::<bool>(),
    ) {
        let mut cfg = serde_json::json!({
            "model_type": if moe { "mixtral" } else { "llama" },
            "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv, "intermediate_size": inter, "vocab_size": vocab,
            "head_dim": head_dim, "max_position_embeddings": 32768,
        });
        if moe {
            cfg["num_local_experts"] = Value::from(experts);
            cfg["num_experts_per_tok"] = Value::from(2);
        }
        if let Ok(spec) = parse_config(&cfg.to_string(), Path::new("config.json"), "p") {
            exercise(&spec, 2048, 256, 4, 24 << 30);
            // A model whose bytes pass 64 bits never fits.
            let w = weight_bytes(&spec, WeightDtype::Bf16);
            if w == u64::MAX {
                prop_assert!(!Planner::new(&spec, 1 << 50).fits(&workload(1, 1, 1)));
            }
        }
    }

    /// Weights never shrink when a dimension grows, in any dtype.
    #[test]
    fn weights_are_monotone_in_the_model_size(
        hidden in 1u64..8192, layers in 1u64..200, inter in 1u64..30_000, vocab in 1u64..300_000,
        grow in 0usize..4, by in 1u64..1000, dtype in 0usize..8,
    ) {
        let dtypes = ["bf16", "f32", "int8", "nf4", "q4_k_m", "q8_0", "fp8", "mxfp4"];
        let d: WeightDtype = dtypes[dtype].parse().unwrap();
        let base = [hidden, layers, inter, vocab];
        let mut bigger = base;
        bigger[grow] += by;
        let a = llama(base[0] * 4, base[1], base[2], base[3]);
        let b = llama(bigger[0] * 4, bigger[1], bigger[2], bigger[3]);
        prop_assert!(weight_bytes(&a, d) <= weight_bytes(&b, d));
    }

    /// The KV cache never shrinks with more tokens or more sequences, for any engine's policy.
    #[test]
    fn kv_is_monotone_in_tokens_and_batch(
        which in 0usize..1000, tokens in 0u64..2_000_000, more in 0u64..1_000_000,
        batch in 1u64..64, extra in 0u64..64, engine in 0usize..6,
    ) {
        let spec = preset(which);
        let policy = CachePolicy::of(Engine::ALL[engine]);
        let kv = KvDtype::Bf16;
        let base = kv_bytes_in(&spec, kv, tokens, batch, policy);
        prop_assert!(base <= kv_bytes_in(&spec, kv, tokens + more, batch, policy));
        prop_assert!(base <= kv_bytes_in(&spec, kv, tokens, batch + extra, policy));
    }

    /// Every limit the budget reports fits by the same estimator, and one more does not (unless
    /// the model's context or the search's ceiling stopped it).
    #[test]
    fn budget_limits_are_edges_of_the_estimate(
        which in 0usize..1000, prompt in 1u64..20_000, new in 1u64..4_000, batch in 1u64..16,
        vram_gib in 4u64..200, engine in 0usize..6,
    ) {
        let spec = preset(which);
        let w = Workload { engine: Engine::ALL[engine], ..workload_for(&spec, prompt, new, batch) };
        let pl = Planner::new(&spec, vram_gib << 30);
        let b = pl.budget(&w);
        let ctx = spec.max_position_embeddings.unwrap_or(10_000_000).min(10_000_000);
        if let Some(p) = b.max_prompt_tokens {
            let fits = pl.fits(&Workload { prompt_tokens: p, ..w });
            prop_assert!(fits);
            if p + w.max_new_tokens < ctx {
                let over = pl.fits(&Workload { prompt_tokens: p + 1, ..w });
                prop_assert!(!over);
            }
        }
        if let Some(n) = b.max_batch {
            let fits = pl.fits(&Workload { batch: n, ..w });
            prop_assert!(fits);
            if n < 65_536 {
                let over = pl.fits(&Workload { batch: n + 1, ..w });
                prop_assert!(!over);
            }
        }
        for row in b.table.iter().filter(|r| r.max_total_tokens > 0) {
            let fits = pl.fits(&Workload {
                prompt_tokens: row.prompt_tokens,
                max_new_tokens: row.new_tokens,
                batch: row.concurrency,
                ..w
            });
            prop_assert!(fits);
        }
    }

    /// Any sizes through the request builder: refused past a ceiling (exit 2), planned below it.
    #[test]
    fn the_request_builder_bounds_every_size(
        prompt in hostile_u64(), new in hostile_u64(), batch in hostile_u64(),
        vram in hostile_u64(), which in 0usize..1000, engine in 0usize..6,
    ) {
        let req = PlanRequest {
            model: PRESETS[which % PRESETS.len()].0.to_string(),
            dtype: None,
            kv_dtype: None,
            prompt_tokens: prompt.max(1),
            max_new_tokens: new.max(1),
            batch: batch.max(1),
            engine: Engine::ALL[engine],
            vram: Some(vram.max(1)),
            vram_read: None,
            vram_card: None,
            gpu_index: 0,
            gpus: Vec::new(),
            host_ram: Some(64 << 30),
            parallel: Default::default(),
            llama: Default::default(),
            llama_server: None,
            exact: false,
            vllm: Default::default(),
            sglang: Default::default(),
            ollama: None,
            python: None,
            deployment: Default::default(),
        };
        let within = prompt <= 10_000_000
            && new <= 10_000_000
            && batch <= 65_536
            && (64 << 20..=1 << 50).contains(&vram);
        match plan(&req) {
            Ok(r) => {
                prop_assert!(within);
                prop_assert_eq!(r.budget.fits, r.components.total <= vram.max(1));
            }
            Err(e) => {
                prop_assert!(!within, "{e}");
                let m = e.to_string();
                prop_assert!(m.contains("ceiling") || m.contains("floor"), "{m}");
            }
        }
    }

    /// A GGUF header with hostile numbers and tensor dims: refused, or estimated without overflow.
    #[test]
    fn hostile_gguf_headers(
        meta in proptest::collection::vec((0usize..8, hostile_u64()), 0..8),
        dims in proptest::collection::vec(proptest::collection::vec(hostile_u64(), 1..4), 0..4),
        dtype in prop_oneof![Just(0u32), Just(1), Just(8), Just(12), Just(14), Just(99)],
    ) {
        let keys = [
            "llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
            "llama.attention.head_count", "llama.attention.head_count_kv", "llama.expert_count",
            "llama.context_length", "general.alignment",
        ];
        let mut m: Vec<(String, u64)> = vec![
            ("llama.block_count".into(), 2), ("llama.embedding_length".into(), 64),
            ("llama.feed_forward_length".into(), 128), ("llama.attention.head_count".into(), 4),
            ("llama.vocab_size".into(), 100),
        ];
        for (k, v) in meta {
            m.push((keys[k].to_string(), v));
        }
        let tensors: Vec<(String, Vec<u64>, u32)> = dims
            .into_iter()
            .enumerate()
            .map(|(i, d)| (format!("blk.{i}.ffn_up.weight"), d, dtype))
            .collect();
        let bytes = gguf_header(&m, &tensors);
        if let Ok(spec) = read_gguf_from(&mut Cursor::new(bytes), Path::new("h.gguf"), "h") {
            exercise(&spec, 4096, 256, 2, 24 << 30);
        }
    }

    /// Any bytes after a GGUF magic: refused or read, never a panic.
    #[test]
    fn any_bytes_as_a_gguf(tail in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut bytes = b"GGUF\x03\x00\x00\x00".to_vec();
        bytes.extend(tail);
        let _ = read_gguf_from(&mut Cursor::new(bytes), Path::new("x.gguf"), "x");
    }
}

fn preset(i: usize) -> Spec {
    let (id, json) = PRESETS[i % PRESETS.len()];
    llm_oom::model::presets::load(id, json).unwrap()
}

fn workload(prompt: u64, new: u64, batch: u64) -> Workload {
    Workload {
        llama: Default::default(),
        prompt_tokens: prompt,
        max_new_tokens: new,
        batch,
        weight_dtype: WeightDtype::Bf16,
        kv_dtype: KvDtype::Bf16,
        engine: Engine::Transformers,
    }
}

fn workload_for(spec: &Spec, prompt: u64, new: u64, batch: u64) -> Workload {
    Workload {
        weight_dtype: spec.native_dtype,
        kv_dtype: spec.native_dtype.compute_kv_dtype(),
        ..workload(prompt, new, batch)
    }
}

fn llama(hidden: u64, layers: u64, inter: u64, vocab: u64) -> Spec {
    let cfg = serde_json::json!({
        "model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": inter,
        "vocab_size": vocab,
    });
    parse_config(&cfg.to_string(), Path::new("config.json"), "m").unwrap()
}
