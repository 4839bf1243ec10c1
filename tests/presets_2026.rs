//! The embedded presets of the 2026 headline models (src/model/presets.rs): each is the config in
//! tests/fixtures/configs-2026 (sources in its manifest.json) less the fields that name tokens,
//! dropout or loading code, so each plans exactly as its fixture does — by its Hugging Face id
//! and by the id without its organisation — to the counts tests/configs_2026.rs pins (and
//! docs/models.md lists, from transformers 5.25's meta-device build).
//!
//! With LLM_OOM_TEST_PYTHON_TF525 (a Python with torch and transformers 5.25, as in
//! tests/configs_2026.rs) each preset is also planned with `--python`, to what its fixture gives.

mod util;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde_json::Value;
use util::{json, llm_oom, temp};

/// What a preset plans to offline: parameters, the MTP layer's parameters, KV bytes per token
/// (transformers; vLLM where it keeps the cache otherwise), and the weight bytes where a test of
/// tests/configs_2026.rs works them out (bf16 presets: two bytes a parameter).
struct Pinned {
    fixture: &'static str,
    id: &'static str,
    parameters: u64,
    mtp: Option<u64>,
    kv: u64,
    kv_vllm: u64,
    weights: Option<u64>,
}

const PRESETS: &[Pinned] = &[
    // tests/configs_2026.rs: deepseek_v3_2_counts_its_checkpoint_with_the_mtp_layer.
    Pinned {
        fixture: "deepseek-v3.2",
        id: "deepseek-ai/DeepSeek-V3.2",
        parameters: 671_877_944_064,
        mtp: Some(11_624_027_648),
        kv: 61 * 1408,
        kv_vllm: 78_324,
        weights: None,
    },
    // deepseek_v4_flash_prices_its_fp8_blocks.
    Pinned {
        fixture: "deepseek-v4-flash",
        id: "deepseek-ai/DeepSeek-V4-Flash",
        parameters: 284_334_567_511,
        mtp: None,
        kv: 43 * 2 * (512 + 512),
        kv_vllm: 43 * 2 * (512 + 512),
        weights: Some(285_551_449_262),
    },
    // glm_5_1_counts_its_checkpoint_with_the_mtp_layer.
    Pinned {
        fixture: "glm-5.1",
        id: "zai-org/GLM-5.1",
        parameters: 743_911_218_432,
        mtp: Some(9_952_920_576),
        kv: 78 * 1408,
        kv_vllm: 100_152,
        weights: Some(2 * 743_911_218_432),
    },
    // The vision tower counted (docs/models.md: transformers' 31,273,088,876).
    Pinned {
        fixture: "gemma-4-31b-it",
        id: "google/gemma-4-31B-it",
        parameters: 31_273_088_876,
        mtp: None,
        kv: 901_120,
        kv_vllm: 901_120,
        weights: Some(2 * 31_273_088_876),
    },
    // kimi_k2_5_sizes_its_int4_experts_as_the_checkpoint_stores_them: the language model
    // (docs/models.md: 1,026,408,232,448 without the vision tower, 594,205,858,816 bytes).
    Pinned {
        fixture: "kimi-k2.5",
        id: "moonshotai/Kimi-K2.5",
        parameters: 1_026_408_232_448,
        mtp: None,
        kv: 70_272,
        kv_vllm: 70_272,
        weights: Some(594_205_858_816),
    },
    // tests/configs_2026.rs: kimi_k3_counts_what_its_checkpoint_holds (the language model, the
    // MoonViT tower left out; the routed experts in MXFP4 as `text_config.quantization_config`
    // declares, 22,249,280 bytes under the checkpoint's 1,559,965,606,912: its float32 vectors
    // and convolutions at bf16). Only the 24 MLA layers cache per token: the 512 + 64 latent.
    Pinned {
        fixture: "kimi-k3",
        id: "moonshotai/Kimi-K3",
        parameters: 2_779_484_476_000,
        mtp: None,
        kv: 27_648,
        kv_vllm: 27_648,
        weights: Some(1_559_965_606_912 - 22_249_280),
    },
    Pinned {
        fixture: "minimax-m2.7",
        id: "MiniMaxAI/MiniMax-M2.7",
        parameters: 228_689_764_864,
        mtp: None,
        kv: 253_952,
        kv_vllm: 253_952,
        weights: None,
    },
    Pinned {
        fixture: "nemotron-3-nano-30b-a3b",
        id: "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B",
        parameters: 31_577_940_288,
        mtp: None,
        kv: 6_144,
        kv_vllm: 6_144,
        weights: Some(2 * 31_577_940_288),
    },
    Pinned {
        fixture: "qwen3.6-27b",
        id: "Qwen/Qwen3.6-27B",
        parameters: 27_356_728_560,
        mtp: Some(424_699_392),
        kv: 65_536,
        kv_vllm: 65_536,
        weights: Some(2 * 27_356_728_560),
    },
];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/configs-2026")
        .join(name)
        .join("config.json")
}

/// `plan --json` on an 8×H200 budget, as tests/configs_2026.rs plans the fixtures.
fn plan(model: &OsStr, extra: &[&OsStr]) -> Value {
    let home = temp();
    let out = llm_oom(home.path())
        .args(["plan", "--json", "--vram", "1120GiB", "-m"])
        .arg(model)
        .args(extra)
        .output()
        .expect("the binary runs");
    // 0 fits, 1 does not: either way a plan.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{model:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    json(&String::from_utf8_lossy(&out.stdout))
}

/// What sizes the model in a plan: parameters, the MTP layer, the native format, weight bytes,
/// KV bytes per token, and the plan's components (the cache, recurrent state and activations
/// among them).
fn sizes(v: &Value) -> Value {
    serde_json::json!({
        "parameters": v["model"]["parameters"],
        "layers": v["model"]["layers"],
        "architecture": v["model"]["architecture"],
        "mtp": v["model"]["mtp"],
        "native_dtype": v["model"]["native_dtype"],
        "weights_bytes": v["weights_bytes"],
        "kv_cache_bytes_per_token": v["kv_cache_bytes_per_token"],
        "components": v["components"],
        "weights_from": v["weights_from"],
    })
}

fn short(id: &str) -> &str {
    id.rsplit('/').next().unwrap_or(id)
}

#[test]
fn each_preset_is_found_by_its_id_and_its_short_id_and_plans_as_its_fixture() {
    for p in PRESETS {
        for engine in ["transformers", "vllm"] {
            let e: &[&OsStr] = &["--engine".as_ref(), engine.as_ref()];
            let want = sizes(&plan(fixture(p.fixture).as_os_str(), e));
            for asked in [p.id, short(p.id), &p.id.to_ascii_lowercase()] {
                let v = plan(asked.as_ref(), e);
                assert_eq!(v["model"]["name"], p.id, "{asked}");
                assert_eq!(v["model"]["source"]["kind"], "preset", "{asked}");
                assert_eq!(sizes(&v), want, "{asked} ({engine})");
                // Found by its own name: no note that another model's shape was planned.
                assert!(
                    !v["notes"].to_string().contains("planned with the preset"),
                    "{asked}"
                );
            }
            let v = plan(p.id.as_ref(), e);
            assert_eq!(v["weights_from"], "config", "{}", p.id);
            assert_eq!(v["model"]["parameters"], p.parameters, "{}", p.id);
            match p.mtp {
                Some(mtp) => assert_eq!(v["model"]["mtp"]["parameters"], mtp, "{}", p.id),
                None => assert!(v["model"]["mtp"].is_null(), "{}", p.id),
            }
            let kv = if engine == "vllm" { p.kv_vllm } else { p.kv };
            assert_eq!(v["kv_cache_bytes_per_token"], kv, "{} ({engine})", p.id);
            if let Some(w) = p.weights {
                assert_eq!(v["weights_bytes"], w, "{}", p.id);
            }
        }
    }
}

#[test]
fn each_preset_is_listed_with_its_parameters() {
    let home = temp();
    let out = llm_oom(home.path())
        .args(["plan", "--list-presets", "--json"])
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(0));
    let listed = json(&String::from_utf8_lossy(&out.stdout));
    let listed = listed.as_array().expect("a list");
    for p in PRESETS {
        let row = listed
            .iter()
            .find(|r| r["id"] == p.id)
            .unwrap_or_else(|| panic!("{} is not listed", p.id));
        assert_eq!(row["parameters"], p.parameters, "{}", p.id);
    }
}

/// Each preset file is its fixture, `_name_or_path` added and only fields that name tokens,
/// dropout or loading code left out: every other field, nested ones included, is kept as is.
#[test]
fn each_preset_file_keeps_every_field_of_its_fixture_that_can_size_it() {
    const LEFT_OUT: &[&str] = &[
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "initializer_range",
        "attention_dropout",
        "hidden_dropout",
        "auto_map",
        "use_cache",
        "ignore_index",
    ];
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(k, _)| !LEFT_OUT.contains(&k.as_str()) && *k != "_name_or_path")
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    for p in PRESETS {
        let (id, text) = llm_oom::model::presets::find(p.id).expect("the preset");
        assert_eq!(id, p.id);
        let preset = json(text);
        assert_eq!(preset["_name_or_path"], p.id);
        let config = json(&std::fs::read_to_string(fixture(p.fixture)).expect("the fixture"));
        assert_eq!(strip(&preset), strip(&config), "{}", p.id);
    }
}

#[test]
fn with_transformers_5_25_each_preset_plans_as_its_fixture() {
    let Some(py) = std::env::var_os("LLM_OOM_TEST_PYTHON_TF525") else {
        eprintln!("LLM_OOM_TEST_PYTHON_TF525 unset: skipped");
        return;
    };
    // Remote code no transformers release builds: `--python` plans the family's count.
    const REMOTE_CODE: &[&str] = &["kimi-k3"];
    // Mostly interpreters importing torch: three presets at a time.
    std::thread::scope(|s| {
        for chunk in PRESETS.chunks(PRESETS.len().div_ceil(3)) {
            let py = &py;
            s.spawn(move || {
                for p in chunk {
                    let e: &[&OsStr] = &["--python".as_ref(), py.as_os_str()];
                    let want = plan(fixture(p.fixture).as_os_str(), e);
                    let got = plan(p.id.as_ref(), e);
                    if REMOTE_CODE.contains(&p.fixture) {
                        assert_eq!(got["weights_from"], "config", "{}", p.id);
                        assert_eq!(sizes(&got), sizes(&want), "{}", p.id);
                        continue;
                    }
                    assert_eq!(got["weights_from"], "transformers_meta", "{}", p.id);
                    assert_eq!(sizes(&got), sizes(&want), "{}", p.id);
                    assert_eq!(
                        got["derived"]["parameters"], want["derived"]["parameters"],
                        "{}",
                        p.id
                    );
                }
            });
        }
    });
}
