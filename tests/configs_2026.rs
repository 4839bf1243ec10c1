//! The real configs of models released in 2026 (tests/fixtures/configs-2026, sources in its
//! manifest.json) planned by the real binary.
//!
//! Without a Python: each is either planned offline by a hand-written family or refused with the
//! one-line refusal and exit code 2 — which one is pinned per config, so the list of refused
//! architectures is written down here. Kimi-K2.5's INT4 experts are priced as its checkpoint
//! stores them, against a hand computation from the checkpoint's own tensor table.
//!
//! With LLM_OOM_TEST_PYTHON_TF525 — a Python with torch and transformers 5.25, or a script that
//! runs one (for example `PYTHONPATH=~/.cache/tf525 exec ~/.cache/llm-oom-venv/bin/python "$@"`
//! after `pip install --no-deps --target ~/.cache/tf525 transformers==5.25.0
//! 'huggingface-hub>=2.4,<3' httpx2 httpcore2==2.17.0 truststore`, the venv's torch 2.11 left as
//! it is) — every config is planned with `--python`, and its parameter
//! count and KV bytes per token equal what the embedded meta-device script reports for it; where
//! a hand-written family claims the config, the family's offline count equals it too, less the
//! vision tower it leaves out.

mod util;

use std::path::{Path, PathBuf};

use util::{json, llm_oom, temp};

/// How `plan` without a Python treats a config.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Offline {
    /// A hand-written family sizes it: its parameter count equals transformers' less
    /// `vision_left_out` (the vision tower the family does not count).
    Family { vision_left_out: bool },
    /// No family: refused in one line, exit code 2.
    Refused,
}

/// (directory, model_type, the type named in a refusal, offline, transformers 5.25 builds it).
type Config = (&'static str, &'static str, &'static str, Offline, bool);

const CONFIGS: &[Config] = &[
    (
        "deepseek-v3.2",
        "deepseek_v32",
        "deepseek_v32",
        Offline::Family {
            vision_left_out: false,
        },
        true,
    ),
    (
        "deepseek-v4-flash",
        "deepseek_v4",
        "deepseek_v4",
        Offline::Family {
            vision_left_out: false,
        },
        true,
    ),
    (
        "glm-5.1",
        "glm_moe_dsa",
        "glm_moe_dsa",
        Offline::Family {
            vision_left_out: false,
        },
        true,
    ),
    // Sliding layers of 16 KV heads × 256, every sixth layer global with 4 KV heads × 512 whose
    // keys are its values; the SigLIP-style tower counted too.
    (
        "gemma-4-31b-it",
        "gemma4",
        "gemma4_text",
        Offline::Family {
            vision_left_out: false,
        },
        true,
    ),
    (
        "kimi-k2.5",
        "kimi_k25",
        "kimi_k25",
        Offline::Family {
            vision_left_out: true,
        },
        true,
    ),
    // Remote code no transformers release knows (`kimi_k3`, its text model a `kimi_linear` of its
    // own): `--python` says so and plans the family's count, which
    // `kimi_k3_counts_what_its_checkpoint_holds` holds to the checkpoint's safetensors headers.
    (
        "kimi-k3",
        "kimi_k3",
        "kimi_k3",
        Offline::Family {
            vision_left_out: true,
        },
        false,
    ),
    // A remote-code model: no transformers release knows `mimo_v2`, so `--python` refuses it;
    // offline it is sized as transformers 5.25's `mimo_v2_flash`, which
    // `mimo_v2_5_is_sized_as_transformers_builds_mimo_v2_flash` checks against the meta device.
    (
        "mimo-v2.5",
        "mimo_v2",
        "mimo_v2",
        Offline::Family {
            vision_left_out: false,
        },
        false,
    ),
    (
        "minimax-m2.7",
        "minimax_m2",
        "minimax_m2",
        Offline::Family {
            vision_left_out: false,
        },
        true,
    ),
    // Mamba-2 layers, MoE layers and six attention layers, pattern `MEMEM*E…`.
    (
        "nemotron-3-nano-30b-a3b",
        "nemotron_h",
        "nemotron_h",
        Offline::Family {
            vision_left_out: false,
        },
        true,
    ),
    (
        "qwen3.6-27b",
        "qwen3_5",
        "qwen3_5",
        Offline::Family {
            vision_left_out: false,
        },
        true,
    ),
];

fn dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/configs-2026")
        .join(name)
}

fn python() -> Option<PathBuf> {
    std::env::var_os("LLM_OOM_TEST_PYTHON_TF525").map(PathBuf::from)
}

/// `plan --json` on an 8×H200 budget (what these models are run on); `extra` adds `--python`.
fn plan(name: &str, extra: &[&std::ffi::OsStr]) -> std::process::Output {
    let home = temp();
    llm_oom(home.path())
        .args(["plan", "--json", "--vram", "1120GiB", "-m"])
        .arg(dir(name))
        .args(extra)
        .output()
        .expect("the binary runs")
}

#[test]
fn the_manifest_names_every_config_and_its_model_type() {
    let manifest = std::fs::read_to_string(dir("manifest.json")).unwrap();
    let m = json(&manifest);
    let listed = m["configs"].as_array().unwrap();
    assert_eq!(listed.len(), CONFIGS.len());
    for &(name, model_type, ..) in CONFIGS {
        let entry = listed
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not in the manifest"));
        assert_eq!(entry["model_type"], model_type, "{name}");
        assert!(entry["source"].as_str().is_some_and(|s| !s.is_empty()));
        let config = std::fs::read_to_string(dir(name).join("config.json")).unwrap();
        assert_eq!(json(&config)["model_type"], model_type, "{name}");
    }
}

#[test]
fn without_python_each_config_is_planned_or_refused_as_pinned() {
    for &(name, _, refused_as, offline, _) in CONFIGS {
        let out = plan(name, &[]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        match offline {
            Offline::Family { .. } => {
                // 0 fits, 1 does not: either way a plan.
                assert!(matches!(out.status.code(), Some(0 | 1)), "{name}: {stderr}");
                let v = json(&stdout);
                assert!(v["model"]["parameters"].as_u64().unwrap() > 0, "{name}");
                assert!(
                    v["kv_cache_bytes_per_token"].as_u64().unwrap() > 0,
                    "{name}"
                );
                assert_eq!(v["weights_from"], "config", "{name}");
            }
            Offline::Refused => {
                assert_eq!(out.status.code(), Some(2), "{name}: {stdout}{stderr}");
                assert!(stdout.is_empty(), "{name}: {stdout}");
                let line = stderr.trim_end();
                assert_eq!(line.lines().count(), 1, "{name}: {stderr}");
                assert!(
                    line.contains(&format!("no family for `{refused_as}`")),
                    "{name}: {line}"
                );
                // What would make it work is said.
                assert!(line.contains("plan a model of a listed type"), "{line}");
            }
        }
    }
}

/// Kimi-K2.5's checkpoint (its tensor table in the manifest's source): each routed expert
/// projection is int32-packed INT4 (two per byte), a bf16 scale per 32 inputs of each output
/// row, and an int32 [2] `weight_shape`; everything else (attention, the dense first layer,
/// the shared experts, the router, embeddings, lm_head, norms) stays bf16.
#[test]
fn kimi_k2_5_sizes_its_int4_experts_as_the_checkpoint_stores_them() {
    let out = plan("kimi-k2.5", &[]);
    let v = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(v["model"]["native_dtype"], "int4-g32");
    // The MoonViT tower in `vision_config` is said to be left out, not left out silently.
    assert!(
        v["notes"]
            .to_string()
            .contains("vision tower in `vision_config` is not counted"),
        "{}",
        v["notes"]
    );

    let (h, moe, experts, sparse): (u64, u64, u64, u64) = (7168, 2048, 384, 60);
    let modules = sparse * experts * 3;
    let n = h * moe;
    // gate/up: [2048 out, 7168 in] → 2048 × 224 scales; down: [7168 out, 2048 in] → 7168 × 64.
    let scales = 2048 * (7168 / 32) * 2;
    assert_eq!(scales, 7168 * (2048 / 32) * 2);
    let expert_bytes = modules * (n / 2 + scales + 8);
    // The checkpoint's table: 157.50 GiB of packed weights and 19.69 GiB of scales per projection.
    assert_eq!(modules / 3 * n / 2, 157 * (1 << 30) + (1 << 29));
    let expert_params = modules * n;
    let params = v["model"]["parameters"].as_u64().unwrap();
    let dense_bytes = (params - expert_params) * 2;
    assert_eq!(v["weights_bytes"], expert_bytes + dense_bytes, "{v}");
    // 553.2 GiB for the language model; the checkpoint's 554.30 GiB holds the vision tower too.
    let gib = v["weights_bytes"].as_f64().unwrap() / (1u64 << 30) as f64;
    assert!((553.0..554.3).contains(&gib), "{gib}");
}

/// Kimi-K3 (`kimi_k3`): Kimi Delta Attention in 69 layers, gated MLA in 24, 896 SiTU experts on
/// a 3584-wide latent. The language model's 2,779,484,476,000 parameters are what the
/// checkpoint's safetensors headers hold (its manifest source: 1,503,647,073,024 elements, the
/// MXFP4 experts two to a byte with a uint8 scale per 32, `A_log` zero-padded from 96 to 128 per
/// KDA layer, the MoonViT tower and projector 447,358,976); the unit test
/// `kimi_k3_counts_the_remote_code_model` spells that sum out. Only the 24 MLA layers cache per
/// token: the 512 + 64 latent, 27,648 bytes in bf16; the KDA layers keep a fixed state.
#[test]
fn kimi_k3_counts_what_its_checkpoint_holds() {
    let out = plan("kimi-k3", &[]);
    let v = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(v["model"]["parameters"], 2_779_484_476_000_u64);
    assert_eq!(v["kv_cache_bytes_per_token"], 24 * (512 + 64) * 2);
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("Kimi Delta Attention in 69 of 93 layers"),
        "{notes}"
    );
    assert!(notes.contains("MoonViT vision tower"), "{notes}");
    assert!(notes.contains("mxfp4-pack-quantized"), "{notes}");
    // the checkpoint's language model, 1,559,965,606,912 bytes by its safetensors headers: the
    // experts' 3 × 92 × 896 packed matrices and uint8 scales, the rest bf16 — less the f32
    // tensors counted at bf16: q/k/v conv1d (3 × 69 × 12,288 × 4), dt_bias (69 × 12,288),
    // o_norm (69 × 128), e_score_correction_bias (92 × 896) and A_log (69 × 128 f32 stored
    // against 69 × 96 counted)
    let f32_at_bf16 = 2 * (3 * 69 * 12_288 * 4 + 69 * 12_288 + 69 * 128 + 92 * 896)
        + (69 * 128 * 4 - 69 * 96 * 2);
    assert_eq!(f32_at_bf16, 22_249_280);
    assert_eq!(v["weights_bytes"], 1_559_965_606_912_u64 - f32_at_bf16);
}

/// Step-3.7-Flash in the hub's spelling (`step3p7` wrapping `step3p5`). No verbatim copy of the
/// released config.json was found, so there is no fixture; the config below holds every field
/// that sizes the model, each as a public test asserts it of the released
/// `stepfun-ai/Step-3.7-Flash-NVFP4` config.json and its GGUF (GitHub index file 57398570390):
/// 45 layers of 4,096, `layer_types` full every fourth (0, 4, …, 44) and sliding otherwise with a
/// window of 512, 64 query heads on full layers and 96 on sliding ones, 8 KV heads of 128 on
/// every layer, dense layers 0-2 of 11,264, `moe_layers_enum` 3..=44 with 288 experts of 1,280
/// (top 8) and a shared one of 1,280, a head-wise attention gate, a vocabulary of 128,896 and an
/// untied head (`output.weight` apart from `token_embd.weight`). Offline the family counts the
/// language model; with transformers 5.25 (which builds `Step3p7ForConditionalGeneration`) the
/// meta device counts the same plus the vision tower and projector, and caches the same K and V.
#[test]
fn step_3_7_flash_shape_is_sized_as_transformers_5_25_builds_it() {
    let n = 45;
    let types: Vec<&str> = (0..n)
        .map(|i| {
            if i % 4 == 0 {
                "full_attention"
            } else {
                "sliding_attention"
            }
        })
        .collect();
    let moe: Vec<String> = (3..n).map(|i| i.to_string()).collect();
    let config = serde_json::json!({
        "architectures": ["Step3p7ForConditionalGeneration"],
        "model_type": "step3p7",
        "text_config": {
            "architectures": ["Step3p5ForCausalLM"], "model_type": "step3p5",
            "hidden_size": 4096, "intermediate_size": 11264, "num_hidden_layers": 45,
            "num_nextn_predict_layers": 3, "vocab_size": 128896, "num_attention_heads": 64,
            "max_position_embeddings": 262144,
            "num_attention_groups": 8, "head_dim": 128,
            "attention_other_setting": {"attention_type": "sliding_attention",
                "num_attention_heads": 96, "num_attention_groups": 8, "head_dim": 128},
            "layer_types": types, "sliding_window": 512, "moe_num_experts": 288, "moe_top_k": 8,
            "moe_intermediate_size": 1280, "share_expert_dim": 1280,
            "moe_layers_enum": moe.join(","), "use_head_wise_attn_gate": true,
            "tie_word_embeddings": false
        }
    });
    let dir = temp();
    let path = dir.path().join("config.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let home = temp();
    let out = llm_oom(home.path())
        .args(["plan", "--json", "--vram", "1120GiB", "-m"])
        .arg(dir.path())
        .output()
        .expect("the binary runs");
    let v = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(v["weights_from"], "config");
    let params = v["model"]["parameters"].as_u64().unwrap();
    let kv = v["kv_cache_bytes_per_token"].as_u64().unwrap();
    assert_eq!((params, kv), (196_956_130_368, 45 * 2 * 8 * 128 * 2));
    let Some(py) = python() else {
        eprintln!("LLM_OOM_TEST_PYTHON_TF525 unset: the meta-device comparison skipped");
        return;
    };
    let (built, vision, built_kv) = script_counts(&py, &path);
    assert_eq!(
        (built, vision, built_kv),
        (198_937_145_152, 1_981_014_784, kv)
    );
    assert_eq!(params, built - vision);
}

/// Plans `name` offline with `engine`: (parameters, the MTP layer's parameters, KV bytes per
/// token).
fn dsa_counts(name: &str, engine: &str) -> (u64, u64, u64) {
    let out = plan(name, &["--engine".as_ref(), engine.as_ref()]);
    let v = json(&String::from_utf8_lossy(&out.stdout));
    assert!(v["notes"].to_string().contains("lightning indexer"), "{v}");
    (
        v["model"]["parameters"].as_u64().unwrap(),
        v["model"]["mtp"]["parameters"].as_u64().unwrap(),
        v["kv_cache_bytes_per_token"].as_u64().unwrap(),
    )
}

/// DeepSeek-V3.2 is DeepSeek-V3 with DSA's lightning indexer in every layer, the MTP layer's
/// included. The checkpoint's 685,396,921,376 (manifest.json) counts every tensor of its 163
/// files: the trunk, the MTP layer, and two things the model does not hold as parameters — the
/// MTP layer's own copies of the embedding and head (`model.layers.61.embed_tokens`,
/// `model.layers.61.shared_head.head`, which vLLM's DeepSeekMTP shares with the trunk) and the
/// FP32 `weight_scale_inv` of each FP8 weight, 128×128 blocks (45,932 FP8 tensors, 41,591,584
/// scale elements by the checkpoint's header audit). Both are worked out here by hand.
#[test]
fn deepseek_v3_2_counts_its_checkpoint_with_the_mtp_layer() {
    let (params, mtp, kv) = dsa_counts("deepseek-v3.2", "vllm");
    let (h, vocab, layers): (u64, u64, u64) = (7168, 129_280, 61);
    let attention = 1536 * h + 1536 // q_a_proj, q_a_layernorm
        + 128 * 192 * 1536 // q_b_proj
        + 576 * h + 512 // kv_a_proj_with_mqa, kv_a_layernorm
        + 128 * 256 * 512 // kv_b_proj
        + h * 128 * 128; // o_proj
    let indexer = 64 * 128 * 1536 // wq_b: q_lora_rank → 64 heads × 128
        + 128 * h // wk
        + 2 * 128 // k_norm, a LayerNorm: weight and bias
        + 64 * h; // weights_proj
    assert_eq!(indexer, 13_959_424);
    let dense = attention + indexer + 2 * h + 3 * h * 18_432;
    let sparse = attention + indexer + 2 * h
        + 256 * h + 256 // gate, e_score_correction_bias
        + 256 * 3 * h * 2048 // routed experts
        + 3 * h * 2048; // shared expert
    let trunk = 2 * vocab * h + h + 3 * dense + 58 * sparse;
    assert_eq!(params, trunk);
    assert_eq!(params, 671_877_944_064);
    let mtp_layer = sparse + 3 * h + 2 * h * h; // enorm, hnorm, shared_head.norm; eh_proj
    assert_eq!(mtp, mtp_layer);
    assert_eq!(mtp, 11_624_027_648);

    // One f32 scale per 128×128 block of each FP8 weight: attention and indexer projections in
    // all 62 layers, the 3 dense MLPs, 256 + 1 experts' three projections in 59 MoE layers.
    let blocks = |rows: u64, cols: u64| rows.div_ceil(128) * cols.div_ceil(128);
    let attention_scales = blocks(1536, h)
        + blocks(128 * 192, 1536)
        + blocks(576, h)
        + blocks(128 * 256, 512)
        + blocks(h, 128 * 128)
        + blocks(64 * 128, 1536)
        + blocks(128, h);
    let expert_scales = 2 * blocks(2048, h) + blocks(h, 2048);
    let scales = 62 * attention_scales + 3 * 3 * blocks(18_432, h) + 59 * 257 * expert_scales;
    assert_eq!(scales, 41_591_584);
    let mtp_embedding_and_head = 2 * vocab * h;
    assert_eq!(
        params + mtp + mtp_embedding_and_head + scales,
        685_396_921_376
    );

    // KV per token and layer: the MLA latent (512 + 64) in bf16 and the indexer key, which vLLM
    // keeps as 128 fp8 bytes and one f32 scale: 1,152 + 132 bytes.
    assert_eq!(kv, layers * ((512 + 64) * 2 + 128 + 4));
    assert_eq!(kv, 78_324);
    // transformers keeps the indexer key in the cache's dtype: 1,152 + 256.
    assert_eq!(dsa_counts("deepseek-v3.2", "transformers").2, 61 * 1408);
}

/// DeepSeek-V4-Flash: not MLA but one shared KV head of 512 per layer, a compressor in 41 of its
/// 43 layers (21 CSA with the lightning indexer, 20 HCA, by the first 43 `compress_ratios`),
/// `hc_mult` residual streams, 256 experts and a shared MLP in every layer, the first three
/// routed by a `tid2eid` table. Its `quantization_config` is FP8 in 128×128 blocks: each linear
/// weight one byte and an f32 scale per block; embeddings, head, routers (the indexer's
/// `weights_proj` too), norms, sinks, the compressors' position biases, the hyper-connections and
/// the buffers stay bf16. transformers does not build the MTP layer.
#[test]
fn deepseek_v4_flash_prices_its_fp8_blocks() {
    let out = plan("deepseek-v4-flash", &[]);
    let v = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(v["model"]["native_dtype"], "fp8-block128x128");
    let (h, vocab): (u64, u64) = (4096, 129_280);
    let blocks = |rows: u64, cols: u64| rows.div_ceil(128) * cols.div_ceil(128);
    let fp8 = |rows: u64, cols: u64, count: u64| count * (rows * cols + 4 * blocks(rows, cols));
    let linear = fp8(1024, h, 43) // q_a_proj
        + fp8(64 * 512, 1024, 43) // q_b_proj
        + fp8(512, h, 43) // kv_proj
        + fp8(8 * 1024, 64 * 512 / 8, 43) // o_a_proj
        + fp8(h, 8 * 1024, 43) // o_b_proj
        + fp8(512, h, 2 * 20) // HCA compressor: kv_proj, gate_proj
        + fp8(1024, h, 2 * 21) // CSA compressor
        + fp8(256, h, 2 * 21) // indexer kv_proj, gate_proj
        + fp8(64 * 128, 1024, 21) // indexer q_b_proj
        + fp8(2048, h, 256 * 43 * 2) // experts' gate and up
        + fp8(h, 2048, 256 * 43) // experts' down
        + fp8(2048, h, 2 * 43) // shared MLP
        + fp8(h, 2048, 43);
    let vectors = 43 * (1024 + 512 + 64) // q_a_norm, kv_norm, sinks
        + 20 * (128 * 512 + 512) // HCA position_bias, kv_norm
        + 21 * (4 * 1024 + 512 + 4 * 256 + 128) // CSA's and its indexer's
        + 86 * (24 * 4 * h + 24 + 3) // attn_hc, ffn_hc
        + 86 * h // input and post-attention norms
        + 40 * 256 + 3 * vocab * 6 // e_score_correction_bias, tid2eid
        + h + 4 * 4 * h + 4 + 1; // norm, hc_head
    let dense = 2 * vocab * h + vectors + 256 * h * 43 + 64 * h * 21;
    assert_eq!(v["weights_bytes"], linear + 2 * dense, "{v}");
    assert_eq!(v["weights_bytes"], 285_551_449_262u64);
    assert_eq!(v["model"]["parameters"], 284_334_567_511u64);
    // A key and a value of 512 in bf16 in each of the 43 layers, as transformers reports them.
    assert_eq!(v["kv_cache_bytes_per_token"], 43 * 2 * (512 + 512));
}

/// GLM-5.1: 78 layers of MLA (q_lora_rank 2048, 64 heads of 192 + 64, values of 256) with the
/// indexer (32 heads of 128) in every layer (no `index_topk_freq`: every layer runs its own),
/// 3 dense layers, then 256 experts and a shared one. The checkpoint is bf16, its MTP layer
/// shares the embedding and head: its 753,864,139,008 are the trunk and the MTP layer exactly.
#[test]
fn glm_5_1_counts_its_checkpoint_with_the_mtp_layer() {
    let (params, mtp, kv) = dsa_counts("glm-5.1", "vllm");
    let (h, vocab, layers): (u64, u64, u64) = (6144, 154_880, 78);
    let attention = 2048 * h + 2048 // q_a_proj, q_a_layernorm
        + 64 * 256 * 2048 // q_b_proj: 64 heads × (192 + 64)
        + 576 * h + 512 // kv_a_proj_with_mqa, kv_a_layernorm
        + 64 * (192 + 256) * 512 // kv_b_proj
        + h * 64 * 256; // o_proj
    let indexer = 32 * 128 * 2048 + 128 * h + 2 * 128 + 32 * h;
    assert_eq!(indexer, 9_371_904);
    let dense = attention + indexer + 2 * h + 3 * h * 12_288;
    let sparse = attention + indexer + 2 * h
        + 256 * h + 256 // gate, e_score_correction_bias
        + 256 * 3 * h * 2048 // routed experts
        + 3 * h * 2048; // shared expert
    let trunk = 2 * vocab * h + h + 3 * dense + 75 * sparse;
    assert_eq!(params, trunk);
    assert_eq!(params, 743_911_218_432);
    assert_eq!(mtp, sparse + 3 * h + 2 * h * h);
    assert_eq!(mtp, 9_952_920_576);
    assert_eq!(params + mtp, 753_864_139_008);

    assert_eq!(kv, layers * ((512 + 64) * 2 + 128 + 4));
    assert_eq!(kv, 100_152);
    assert_eq!(dsa_counts("glm-5.1", "transformers").2, 78 * 1408);
}

/// MiMo-V2.5 (`mimo_v2`, remote code): transformers 5.25 knows the decoder as `mimo_v2_flash`,
/// so its meta-device build is of the config with that model_type, without the vision and audio
/// encoders' configs (their presence makes the script build an image-text model, which
/// `mimo_v2_flash` is not; the family leaves them out and says so) and without the legacy
/// `rope_scaling` (transformers would make it the one RoPE of every layer type, which its
/// per-type rotary embedding cannot read; RoPE changes no size). The offline family counts what
/// that build holds and caches: 9 full layers of 4 KV heads and 39 sliding ones of 8, K of 192
/// and V of 128 per head.
#[test]
fn mimo_v2_5_is_sized_as_transformers_builds_mimo_v2_flash() {
    let out = plan("mimo-v2.5", &[]);
    let v = json(&String::from_utf8_lossy(&out.stdout));
    let (params, kv) = (
        v["model"]["parameters"].as_u64().unwrap(),
        v["kv_cache_bytes_per_token"].as_u64().unwrap(),
    );
    assert_eq!(params, 308_778_780_864);
    assert_eq!(kv, 2 * (9 * (4 * 192 + 4 * 128) + 39 * (8 * 192 + 8 * 128)));
    assert_eq!(kv, 222_720);
    let notes = v["notes"].to_string();
    assert!(notes.contains("`vision_config`, `audio_config`"), "{notes}");
    assert!(notes.contains("`mimo_v2_flash`"), "{notes}");
    let Some(py) = python() else {
        eprintln!("LLM_OOM_TEST_PYTHON_TF525 unset: the meta-device comparison skipped");
        return;
    };
    let config = std::fs::read_to_string(dir("mimo-v2.5").join("config.json")).unwrap();
    let mut c = json(&config);
    let o = c.as_object_mut().unwrap();
    o.insert("model_type".into(), "mimo_v2_flash".into());
    for key in ["vision_config", "audio_config", "rope_scaling"] {
        o.remove(key);
    }
    let flash = temp();
    std::fs::write(flash.path().join("config.json"), c.to_string()).unwrap();
    let (built, vision, built_kv) = script_counts(&py, &flash.path().join("config.json"));
    assert_eq!((params, vision, kv), (built, 0, built_kv));
    // `plan --python` on that config plans the same build.
    let home = temp();
    let out = llm_oom(home.path())
        .args(["plan", "--json", "--vram", "1120GiB", "-m"])
        .arg(flash.path())
        .args(["--python".as_ref(), py.as_os_str()])
        .output()
        .expect("the binary runs");
    let v = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(v["weights_from"], "transformers_meta");
    assert_eq!(v["model"]["parameters"], params);
    assert_eq!(v["kv_cache_bytes_per_token"], kv);
}

/// What the embedded script reports for a config under `py`: its parameters, vision parameters
/// and KV bytes per token in bf16 (keys and values, or the MLA latent, of every layer that keeps
/// its own; none for a layer that reuses another's or keeps only a recurrent state).
fn script_counts(py: &Path, config: &Path) -> (u64, u64, u64) {
    let out = std::process::Command::new(py)
        .arg("-c")
        .arg(llm_oom::model::derive::SCRIPT)
        .arg(config)
        .output()
        .expect("the Python runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = json(text.lines().find(|l| l.starts_with('{')).unwrap_or("{}"));
    assert!(v["error"].is_null(), "{config:?}: {v}");
    let kv: u64 = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            if l["shared_kv"] == true {
                0
            } else if l["mla"].is_object() {
                // The latent, and a DSA layer's indexer key.
                2 * (l["mla"]["kv_lora_rank"].as_u64().unwrap()
                    + l["mla"]["rope_dim"].as_u64().unwrap()
                    + l["mla"]["index_dim"].as_u64().unwrap_or(0))
            } else {
                2 * (l["k"].as_u64().unwrap_or(0) + l["v"].as_u64().unwrap_or(0))
            }
        })
        .sum();
    (
        v["parameters"].as_u64().unwrap(),
        v["by_role"]["vision"].as_u64().unwrap_or(0),
        kv,
    )
}

#[test]
fn with_transformers_5_25_each_config_is_planned_as_the_meta_device_builds_it() {
    let Some(py) = python() else {
        eprintln!("LLM_OOM_TEST_PYTHON_TF525 unset: skipped");
        return;
    };
    // Each check is mostly two interpreters importing torch: three configs at a time. A failed
    // check fails the scope (its message printed by the thread that failed).
    std::thread::scope(|s| {
        for chunk in CONFIGS.chunks(CONFIGS.len().div_ceil(3)) {
            let py = &py;
            s.spawn(move || chunk.iter().for_each(|c| planned_as_built(py, c)));
        }
    });
}

fn planned_as_built(py: &Path, &(name, model_type, _, offline, builds): &Config) {
    let out = plan(name, &["--python".as_ref(), py.as_os_str()]);
    if !builds && offline != Offline::Refused {
        // transformers does not know the type: the family plans it, and a note says so.
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(matches!(out.status.code(), Some(0 | 1)), "{name}: {stdout}");
        let v = json(&stdout);
        assert_eq!(v["weights_from"], "config", "{name}");
        assert!(
            v["notes"]
                .to_string()
                .contains(&format!("does not know model_type `{model_type}`")),
            "{}",
            v["notes"]
        );
        let hand = json(&String::from_utf8_lossy(&plan(name, &[]).stdout));
        assert_eq!(v["model"]["parameters"], hand["model"]["parameters"]);
        assert_eq!(
            v["kv_cache_bytes_per_token"],
            hand["kv_cache_bytes_per_token"]
        );
        return;
    }
    if !builds {
        // Refused in one line that names what transformers does not know.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!("does not know model_type `{model_type}`")),
            "{stderr}"
        );
        return;
    }
    let (params, vision, kv) = script_counts(py, &dir(name).join("config.json"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{name}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&stdout);
    assert_eq!(v["weights_from"], "transformers_meta", "{name}");
    assert_eq!(v["model"]["parameters"], params, "{name}");
    assert_eq!(v["derived"]["parameters"], params, "{name}");
    assert_eq!(v["kv_cache_bytes_per_token"], kv, "{name}");
    assert!(v["derived"]["transformers"]
        .as_str()
        .is_some_and(|t| t.starts_with("5.25")));
    if let Offline::Family { vision_left_out } = offline {
        let hand = json(&String::from_utf8_lossy(&plan(name, &[]).stdout));
        let left_out = if vision_left_out { vision } else { 0 };
        assert!(!vision_left_out || vision > 0, "{name}");
        assert_eq!(hand["model"]["parameters"], params - left_out, "{name}");
        assert_eq!(hand["kv_cache_bytes_per_token"], kv, "{name}");
        // With transformers the tower is counted, and no note says otherwise.
        assert!(
            !v["notes"].to_string().contains("is not counted"),
            "{}",
            v["notes"]
        );
    }
}
