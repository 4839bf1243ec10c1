//! `plan --python`: the model built by transformers on the meta device as the source of
//! parameters and cache. Every hand-written family's preset is held to it (parameters, KV bytes
//! per token and recurrent state equal), an architecture no family claims is planned from it and
//! refused without it, and a config transformers does not know is one line and exit code 2.
//! Needs LLM_OOM_TEST_PYTHON: a Python with torch and transformers 5.17 (which builds every
//! preset's architecture, Qwen3.5 included).

mod util;

use std::path::PathBuf;

use llm_oom::dtype::KvDtype;
use llm_oom::estimate::{kv_bytes_per_token, state_bytes, CachePolicy, Engine};
use llm_oom::model::derive::{derive, derive_text, DeriveError, Derived, TIMEOUT};
use llm_oom::model::presets;
use util::{json, llm_oom, temp, write};

fn python() -> Option<PathBuf> {
    std::env::var_os("LLM_OOM_TEST_PYTHON").map(PathBuf::from)
}

fn derived_spec(hand: &llm_oom::model::Spec, d: &Derived) -> llm_oom::model::Spec {
    let mut s = hand.clone();
    s.layout = Some(d.to_layout().expect("within the parameter bound"));
    s.vision = Vec::new();
    s
}

#[test]
fn every_hand_written_family_counts_what_transformers_builds() {
    let Some(py) = python() else {
        eprintln!("LLM_OOM_TEST_PYTHON unset: skipped");
        return;
    };
    let t = CachePolicy::of(Engine::Transformers);
    let mut wrong = Vec::new();
    // Every preset: llama, mistral, mixtral, qwen2/2.5, qwen3, qwen3_moe, gemma2, gemma3, phi3,
    // phimoe, deepseek_v2/v3 (MLA), llama4, gpt_oss, jamba, mamba2, qwen3_next, falcon_h1,
    // granitemoehybrid, qwen3_vl_moe, qwen3_5_moe, and the 2026 presets: deepseek_v32,
    // deepseek_v4, glm_moe_dsa, gemma4, kimi_k25, minimax_m2, nemotron_h, qwen3_5.
    // Each build is mostly the interpreter importing torch: three at a time.
    let built: Vec<_> = std::thread::scope(|s| {
        let py = &py;
        let workers: Vec<_> = presets::PRESETS
            .chunks(presets::PRESETS.len().div_ceil(3))
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|&(id, text)| (id, text, derive_text(py, text, TIMEOUT)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a worker"))
            .collect()
    });
    assert_eq!(built.len(), presets::PRESETS.len());
    // Remote code no transformers release builds: nothing to hold it to here (its count is held
    // to its checkpoint's headers by tests/configs_2026.rs).
    const REMOTE_CODE: &[&str] = &["moonshotai/Kimi-K3"];
    for (id, text, d) in built {
        if REMOTE_CODE.contains(&id) {
            assert!(
                d.is_err(),
                "{id}: transformers builds it now; hold it to the build"
            );
            continue;
        }
        let hand = presets::load(id, text).expect("it parses");
        let d = d.unwrap_or_else(|e| panic!("{id}: {e}"));
        let meta = derived_spec(&hand, &d);
        // A family that leaves a vision tower out counts the language model alone.
        let params = if hand.vision.is_empty() {
            d.text_parameters()
        } else {
            d.parameters
        };
        let got = (
            hand.parameters(),
            kv_bytes_per_token(&hand, KvDtype::Bf16),
            state_bytes(&hand, KvDtype::Bf16, t),
        );
        let want = (
            params,
            kv_bytes_per_token(&meta, KvDtype::Bf16),
            state_bytes(&meta, KvDtype::Bf16, t),
        );
        if got != want {
            wrong.push(format!(
                "{id} ({}): hand (params, kv/token, state) {got:?}, transformers {want:?}",
                d.class
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The multimodal configs whose vision tower (and projector) a hand-written family counts:
/// Gemma-3's SigLIP, Qwen2-VL's and Qwen2.5-VL's ViT, Mistral-3's Pixtral with its patch merger,
/// LLaVA's CLIP (every layer built), LLaVA-NeXT's (with its `image_newline`), Pixtral-12B's
/// LLaVA-wrapped Pixtral, Llama-4's ViT with its pixel-shuffle adapter, and InternVL's ViT with its projector. The plan's parameters are transformers'
/// whole model, tower included.
#[test]
fn every_counted_vision_tower_is_what_transformers_builds() {
    let Some(py) = python() else {
        eprintln!("LLM_OOM_TEST_PYTHON unset: skipped");
        return;
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut wrong = Vec::new();
    for path in [
        "presets/gemma-3-27b-it.json",
        "tests/fixtures/vision/qwen2-vl-7b-instruct.json",
        "tests/fixtures/vision/qwen2.5-vl-7b-instruct.json",
        "tests/fixtures/vision/mistral3-defaults.json",
        "tests/fixtures/vision/llava-1.5-7b-hf.json",
        "tests/fixtures/vision/llava-v1.6-mistral-7b-hf.json",
        "tests/fixtures/vision/pixtral-12b.json",
        "presets/llama-4-scout-17b-16e-instruct.json",
        "tests/fixtures/vision/internvl-defaults.json",
    ] {
        let text = std::fs::read_to_string(root.join(path)).expect("the fixture");
        let hand = presets::load(path, &text).expect("it parses");
        let d = derive_text(&py, &text, TIMEOUT).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(!hand.vision.is_empty(), "{path}: no vision tower counted");
        let vision: u64 = hand.vision.iter().map(|t| t.params()).sum();
        let got = (hand.parameters(), vision);
        let want = (d.parameters, d.parameters - d.text_parameters());
        if got != want {
            wrong.push(format!(
                "{path} ({}): hand (params, vision) {got:?}, transformers {want:?}",
                d.class
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Phi-3.5-vision's `Phi3VForCausalLM` is the checkpoint's remote code, which transformers does
/// not ship: its parts are built here from transformers' own classes on the meta device —
/// `Phi3ForCausalLM` from the top level's text fields, `CLIPVisionModel` from
/// clip-vit-large-patch14-336's `CLIPVisionConfig` (as modeling_phi3_v.py builds it), the
/// `glb_GN` and `sub_GN` separators (image_dim_out · 4 each) and `img_projection`'s two linears.
const PHI3_V_COUNT: &str = r#"
import json, sys, torch
from transformers import Phi3Config, Phi3ForCausalLM, CLIPVisionConfig, CLIPVisionModel
c = json.load(open(sys.argv[1]))
keys = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
        "original_max_position_embeddings", "tie_word_embeddings", "rms_norm_eps"]
text = Phi3Config(**{k: c[k] for k in keys})
clip = CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                        num_attention_heads=16, image_size=336, patch_size=14, projection_dim=768)
with torch.device("meta"):
    lm = Phi3ForCausalLM(text)
    tower = CLIPVisionModel(clip)
    dim = c["img_processor"]["image_dim_out"] * 4
    proj = torch.nn.Sequential(torch.nn.Linear(dim, c["hidden_size"]), torch.nn.GELU(),
                               torch.nn.Linear(c["hidden_size"], c["hidden_size"]))
n = lambda m: sum(p.numel() for p in m.parameters())
vision = n(tower) + 2 * dim + n(proj)
print(json.dumps({"parameters": n(lm) + vision, "vision": vision}))
"#;

#[test]
fn phi3_v_counts_phi3_clip_its_separators_and_projector() {
    let Some(py) = python() else {
        eprintln!("LLM_OOM_TEST_PYTHON unset: skipped");
        return;
    };
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/vision/phi-3.5-vision-instruct.json"
    );
    let text = std::fs::read_to_string(path).expect("the fixture");
    let hand = presets::load(path, &text).expect("it parses");
    let out = std::process::Command::new(&py)
        .args(["-c", PHI3_V_COUNT, path])
        .output()
        .expect("the interpreter runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = json(&String::from_utf8_lossy(&out.stdout));
    let vision: u64 = hand.vision.iter().map(|t| t.params()).sum();
    assert_eq!(want["parameters"], hand.parameters());
    assert_eq!(want["vision"], vision);
    // 3,821,079,552 of Phi-3-mini's decoder and 325,541,888 of tower
    assert_eq!(hand.parameters(), 4_146_621_440);
}

/// starcoder2 (transformers 5.17 knows it; llm-oom has no family): LayerNorm with biases, an
/// ungated MLP with biases, sliding-window attention in every layer.
const STARCODER2: &str = r#"{"architectures":["Starcoder2ForCausalLM"],"model_type":"starcoder2",
 "hidden_size":256,"intermediate_size":1024,"num_hidden_layers":6,"num_attention_heads":8,
 "num_key_value_heads":2,"vocab_size":1000,"max_position_embeddings":4096,"sliding_window":1024,
 "use_bias":true,"norm_type":"layer_norm","torch_dtype":"bfloat16","bos_token_id":0,"eos_token_id":0}"#;

const COUNT: &str = r#"
import json, sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
cfg = AutoConfig.for_model(**json.load(open(sys.argv[1])))
with torch.device("meta"):
    m = AutoModelForCausalLM.from_config(cfg)
print(sum(p.numel() for p in m.parameters()))
"#;

#[test]
fn an_architecture_without_a_family_is_planned_with_python_and_refused_without() {
    let Some(py) = python() else {
        eprintln!("LLM_OOM_TEST_PYTHON unset: skipped");
        return;
    };
    let home = temp();
    let config = write(&home.path().join("m").join("config.json"), STARCODER2);
    let config_arg = config.to_str().unwrap();
    let without = llm_oom(home.path())
        .args(["plan", "-m", config_arg, "--vram", "24GiB"])
        .output()
        .unwrap();
    assert_eq!(without.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&without.stderr).contains("starcoder2"));

    let with = llm_oom(home.path())
        .args([
            "plan", "--json", "--vram", "24GiB", "-p", "4096", "-m", config_arg, "--python",
        ])
        .arg(&py)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&with.stdout);
    assert_eq!(
        with.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&with.stderr)
    );
    let v = json(&out);
    let script = write(&home.path().join("count.py"), COUNT);
    let counted = std::process::Command::new(&py)
        .arg(&script)
        .arg(&config)
        .output()
        .unwrap();
    let counted: u64 = String::from_utf8_lossy(&counted.stdout)
        .trim()
        .parse()
        .unwrap();
    assert_eq!(v["model"]["parameters"], counted, "{out}");
    assert_eq!(v["derived"]["parameters"], counted);
    assert_eq!(v["derived"]["class"], "Starcoder2ForCausalLM");
    assert_eq!(v["weights_from"], "transformers_meta");
    // bf16 weights: two bytes a parameter.
    assert_eq!(v["weights_bytes"], counted * 2);
    // 6 layers × (K + V) × 2 KV heads × 32 × 2 bytes, every layer in the 1024-token window.
    assert_eq!(v["kv_cache_bytes_per_token"], 6 * 2 * 2 * 32 * 2);
    // The cache per layer as the model keeps it.
    let layers = v["derived"]["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 6);
    assert!(layers
        .iter()
        .all(|l| l["window"] == 1024 && l["k"] == 64 && l["v"] == 64));
    let notes = v["notes"].to_string();
    assert!(notes.contains("transformers 5.17"), "{notes}");
    assert!(notes.contains("on the meta device"), "{notes}");
    // The text report names the source beside the bytes it gave.
    let text = llm_oom(home.path())
        .args(["plan", "--vram", "24GiB", "-m", config_arg, "--python"])
        .arg(&py)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("Per token KV cache"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("(transformers 5.17") && line.contains("on the meta device)"),
        "{line}"
    );
}

#[test]
fn an_architecture_without_a_family_is_priced_from_the_shards_beside_it() {
    let Some(py) = python() else {
        eprintln!("LLM_OOM_TEST_PYTHON unset: skipped");
        return;
    };
    let home = temp();
    let dir = home.path().join("starcoder2");
    let config = write(&dir.join("config.json"), STARCODER2);
    let script = write(&home.path().join("count.py"), COUNT);
    let counted = std::process::Command::new(&py)
        .arg(&script)
        .arg(&config)
        .output()
        .unwrap();
    let counted: u64 = String::from_utf8_lossy(&counted.stdout)
        .trim()
        .parse()
        .unwrap();
    // One bf16 tensor of as many elements: the checkpoint's own bytes.
    let header = format!(
        r#"{{"model.w":{{"dtype":"BF16","shape":[{counted}],"data_offsets":[0,{}]}}}}"#,
        2 * counted
    );
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.resize(bytes.len() + 2 * counted as usize, 0);
    std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
    let plan = |json: bool| {
        let mut c = llm_oom(home.path());
        c.args([
            "plan",
            "--vram",
            "8GiB",
            "-m",
            dir.to_str().unwrap(),
            "--python",
        ])
        .arg(&py);
        if json {
            c.arg("--json");
        }
        let run: util::Run = c.output().unwrap().into();
        assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
        run.stdout
    };
    let v = json(&plan(true));
    assert_eq!(v["weights_from"], "safetensors_headers");
    assert_eq!(v["weights_bytes"], 2 * counted);
    assert_eq!(v["derived"]["parameters"], counted);
    let text = plan(false);
    assert!(
        text.contains("(the checkpoint's safetensors headers) · cache: transformers 5.17"),
        "{text}"
    );
}

/// OLMoE-1B-7B's shape (olmoe: no hand-written family): 64 routed experts, 8 active, in all 16
/// layers.
const OLMOE: &str = r#"{"architectures":["OlmoeForCausalLM"],"model_type":"olmoe","hidden_size":2048,
 "intermediate_size":1024,"num_hidden_layers":16,"num_attention_heads":16,"num_key_value_heads":16,
 "num_experts":64,"num_experts_per_tok":8,"vocab_size":50304,"max_position_embeddings":4096,
 "torch_dtype":"bfloat16","pad_token_id":1,"bos_token_id":null,"eos_token_id":50279}"#;

#[test]
fn a_mixture_of_experts_without_a_family_keeps_its_experts() {
    let Some(py) = python() else {
        eprintln!("LLM_OOM_TEST_PYTHON unset: skipped");
        return;
    };
    let home = temp();
    let config = write(&home.path().join("olmoe").join("config.json"), OLMOE);
    let run: util::Run = llm_oom(home.path())
        .args([
            "plan",
            "--json",
            "--vram",
            "80GiB",
            "-m",
            config.to_str().unwrap(),
            "--python",
        ])
        .arg(&py)
        .output()
        .unwrap()
        .into();
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let v = json(&run.stdout);
    let script = write(&home.path().join("count.py"), COUNT);
    let counted = std::process::Command::new(&py)
        .arg(&script)
        .arg(&config)
        .output()
        .unwrap();
    let counted: u64 = String::from_utf8_lossy(&counted.stdout)
        .trim()
        .parse()
        .unwrap();
    assert_eq!(v["model"]["parameters"], counted);
    assert_eq!(v["model"]["experts"], 64);
    assert_eq!(
        v["derived"]["by_role"]["experts"],
        16u64 * 64 * 3 * 2048 * 1024
    );
    // 16 layers × (K + V) × 2048 × 2 bytes.
    assert_eq!(v["kv_cache_bytes_per_token"], 16 * 2 * 2048 * 2);
}

/// olmo2 is sized as llama without Python; transformers' Olmo2 normalises q and k over their full
/// width (4 layers × (512 + 512) more parameters): with --python the plan counts those and says so.
const OLMO2: &str = r#"{"architectures":["Olmo2ForCausalLM"],"model_type":"olmo2","hidden_size":512,
 "intermediate_size":1024,"num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":8,
 "vocab_size":1000,"max_position_embeddings":4096,"torch_dtype":"bfloat16","pad_token_id":1,
 "bos_token_id":null,"eos_token_id":2}"#;

#[test]
fn where_the_family_and_transformers_differ_the_plan_is_transformers_and_says_both() {
    let Some(py) = python() else {
        eprintln!("LLM_OOM_TEST_PYTHON unset: skipped");
        return;
    };
    let home = temp();
    let config = write(&home.path().join("olmo2").join("config.json"), OLMO2);
    let plan = |python: bool| {
        let mut c = llm_oom(home.path());
        c.args([
            "plan",
            "--json",
            "--vram",
            "24GiB",
            "-m",
            config.to_str().unwrap(),
        ]);
        if python {
            c.arg("--python").arg(&py);
        }
        let run: util::Run = c.output().unwrap().into();
        assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
        json(&run.stdout)
    };
    let script = write(&home.path().join("count.py"), COUNT);
    let counted = std::process::Command::new(&py)
        .arg(&script)
        .arg(&config)
        .output()
        .unwrap();
    let counted: u64 = String::from_utf8_lossy(&counted.stdout)
        .trim()
        .parse()
        .unwrap();
    let hand = plan(false);
    let derived = plan(true);
    assert_eq!(hand["model"]["parameters"], counted - 4 * (512 + 512));
    assert_eq!(derived["model"]["parameters"], counted);
    assert_eq!(derived["weights_bytes"], counted * 2);
    let notes = derived["notes"].to_string();
    assert!(notes.contains("hand-written family differs"), "{notes}");
    assert!(
        notes.contains(&llm_oom::units::group(counted - 4096)),
        "{notes}"
    );
}

#[test]
fn fused_attention_projections_still_cache_keys_and_values() {
    let Some(py) = python() else {
        eprintln!("LLM_OOM_TEST_PYTHON unset: skipped");
        return;
    };
    // GPT-2's c_attn computes q, k and v in one Conv1D.
    let d = derive_text(
        &py,
        r#"{"model_type":"gpt2","n_embd":128,"n_layer":2,"n_head":4,"vocab_size":500,"n_positions":512}"#,
        TIMEOUT,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.class, "GPT2LMHeadModel");
    let home = temp();
    let storage = llm_oom::model::config::storage("{}", &home.path().join("config.json")).unwrap();
    let spec = d.spec("gpt2", storage).unwrap();
    // 2 layers × (K + V) × 128 × 2 bytes.
    assert_eq!(kv_bytes_per_token(&spec, KvDtype::Bf16), 2 * 2 * 128 * 2);
    assert!(spec
        .notes
        .iter()
        .any(|n| n.contains("fuses its projections")));
}

#[test]
fn a_field_the_family_refuses_is_planned_as_transformers_builds_it_and_said() {
    let Some(py) = python() else {
        eprintln!("LLM_OOM_TEST_PYTHON unset: skipped");
        return;
    };
    let home = temp();
    // A mistral config with a Mamba field: the family refuses it; transformers' Mistral ignores it.
    let config = write(
        &home.path().join("config.json"),
        r#"{"architectures":["MistralForCausalLM"],"model_type":"mistral","hidden_size":256,
        "intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,
        "vocab_size":1000,"mamba_d_state":16,"torch_dtype":"bfloat16","bos_token_id":1,"eos_token_id":2}"#,
    );
    let path = config.to_str().unwrap();
    let refused = util::run(home.path(), &["plan", "-m", path, "--vram", "8GiB"]);
    assert_eq!(refused.code, 2);
    assert!(
        refused.stderr.contains("mamba_d_state"),
        "{}",
        refused.stderr
    );
    let run: util::Run = llm_oom(home.path())
        .args(["plan", "--json", "-m", path, "--vram", "8GiB", "--python"])
        .arg(&py)
        .output()
        .unwrap()
        .into();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = json(&run.stdout);
    assert_eq!(v["derived"]["class"], "MistralForCausalLM");
    let notes = v["notes"].to_string();
    assert!(notes.contains("family refuses this config"), "{notes}");
    assert!(notes.contains("mamba_d_state"), "{notes}");
    // 2 layers × (K + V) × 2 KV heads × 32 × 2 bytes.
    assert_eq!(v["kv_cache_bytes_per_token"], 2 * 2 * 2 * 32 * 2);
}

#[test]
fn a_config_transformers_does_not_know_is_one_line_and_exit_2() {
    let Some(py) = python() else {
        eprintln!("LLM_OOM_TEST_PYTHON unset: skipped");
        return;
    };
    let home = temp();
    let config = write(
        &home.path().join("config.json"),
        r#"{"model_type":"no_such_model_llm_oom","hidden_size":64,"num_hidden_layers":2}"#,
    );
    let e = derive(&py, &config, TIMEOUT).unwrap_err();
    assert!(matches!(e, DeriveError::Refused { .. }), "{e}");
    let run: util::Run = llm_oom(home.path())
        .args([
            "plan",
            "-m",
            config.to_str().unwrap(),
            "--vram",
            "24GiB",
            "--python",
        ])
        .arg(&py)
        .output()
        .unwrap()
        .into();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("does not know model_type `no_such_model_llm_oom`"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("Traceback"));
}
