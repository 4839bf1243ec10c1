//! `plan --images`: the images' tokens join the prompt by the model's processor rule, and the
//! vision encoder's activations are their own component, in the table, the JSON and the total.

mod util;

use util::{json, run, temp, write};

const GEMMA3: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/presets/gemma-3-27b-it.json");
const QWEN3_VL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/presets/qwen3-vl-30b-a3b-instruct.json"
);
const QWEN35: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/presets/qwen3.5-35b-a3b.json");
const TEXT_ONLY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/presets/qwen2.5-7b-instruct.json"
);

/// Qwen/Qwen2.5-VL-7B-Instruct's config.json (its language model is qwen2's).
const QWEN25_VL: &str = r#"{"architectures":["Qwen2_5_VLForConditionalGeneration"],"hidden_act":"silu",
"hidden_size":3584,"intermediate_size":18944,"max_position_embeddings":128000,"max_window_layers":28,
"model_type":"qwen2_5_vl","num_attention_heads":28,"num_hidden_layers":28,"num_key_value_heads":4,
"rms_norm_eps":1e-06,"rope_theta":1000000.0,"sliding_window":32768,"tie_word_embeddings":false,
"torch_dtype":"bfloat16","use_sliding_window":false,"vocab_size":152064,
"rope_scaling":{"type":"mrope","mrope_section":[16,24,24]},
"vision_config":{"depth":32,"hidden_act":"silu","hidden_size":1280,"intermediate_size":3420,
"num_heads":16,"in_chans":3,"out_hidden_size":3584,"patch_size":14,"spatial_merge_size":2,
"spatial_patch_size":14,"window_size":112,"fullatt_block_indexes":[7,15,23,31],
"tokens_per_second":2,"temporal_patch_size":2}}"#;

#[test]
fn gemma3_four_images_add_1024_tokens_and_a_vision_encoder_row() {
    let home = temp();
    let args = ["plan", "-m", GEMMA3, "--images", "4", "--vram", "24GB"];
    let r = run(home.path(), &args);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("Workload  3,072 prompt + 256 new tokens × 1 sequence"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("│ vision encoder ┆  413 MiB"),
        "{}",
        r.stdout
    );
    // The model line names the tower its parameters include (SigLIP's 27 layers + projector).
    assert!(
        r.stdout.contains(
            "Model     gemma3_text + a vision tower of 27 layers (0.42 B) · 27.43 B params"
        ),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(
            "--images 4: each image is 896x896 px, 256 tokens (a fixed count per image, as the \
             processor expands it); the prompt is 2,048 text + 1,024 image tokens = 3,072 tokens"
        ),
        "{}",
        r.stdout
    );

    let mut with_json = args.to_vec();
    with_json.push("--json");
    let j = json(&run(home.path(), &with_json).stdout);
    assert_eq!(j["workload"]["prompt_tokens"], 3072);
    assert_eq!(j["model"]["vision"]["layers"], 27);
    assert_eq!(j["model"]["vision"]["parameters"], 423_060_336u64);
    assert_eq!(j["images"]["images"], 4);
    assert_eq!(j["images"]["tokens_per_image"], 256);
    assert_eq!(j["images"]["prompt_tokens_added"], 1024);
    assert_eq!(j["images"]["encoder_positions_per_image"], 4096);
    // SDPA: the MLP's peak, 4 images × 4,096 patches × (4 copies of the 1,152-wide stream + 2
    // intermediate tensors of 4,304) bf16 values — 433,061,888 B, what transformers allocated on
    // the H200 (docs/calibration/vlm-images-h200-2026-12-06.jsonl)
    let encoder = 4 * 4096 * (1152 * 4 + 4304 * 2) * 2;
    assert_eq!(encoder, 433_061_888);
    assert_eq!(j["components"]["vision_encoder"], encoder);
    let c = &j["components"];
    let parts = [
        "weights",
        "kv_cache",
        "activations",
        "allocator",
        "runtime",
        "margin",
        "vision_encoder",
    ]
    .iter()
    .map(|k| c[k].as_u64().unwrap())
    .sum::<u64>();
    assert_eq!(c["total"].as_u64().unwrap(), parts);

    // Without --images: the same plan has no vision row and 2,048 prompt tokens.
    let plain = json(
        &run(
            home.path(),
            &["plan", "-m", GEMMA3, "--vram", "24GB", "--json"],
        )
        .stdout,
    );
    assert_eq!(plain["workload"]["prompt_tokens"], 2048);
    assert!(plain["components"].get("vision_encoder").is_none());
    assert!(plain.get("images").is_none());
}

#[test]
fn qwen25_vl_resizes_1024_square_to_980_and_eager_holds_one_images_scores() {
    let home = temp();
    let cfg = write(&home.path().join("qwen25vl/config.json"), QWEN25_VL);
    let cfg = cfg.to_str().unwrap();
    let base = [
        "plan",
        "-m",
        cfg,
        "--images",
        "2",
        "--image-size",
        "1024x1024",
        "--vram",
        "80GB",
        "--json",
    ];
    let sdpa = json(&run(home.path(), &base).stdout);
    // smart_resize: 1024 → 980 (35 × 28); 70 × 70 patches, 35 × 35 = 1,225 tokens an image
    assert_eq!(sdpa["images"]["height"], 980);
    assert_eq!(sdpa["images"]["tokens_per_image"], 1225);
    assert_eq!(sdpa["workload"]["prompt_tokens"], 2048 + 2 * 1225);
    // the attention's peak: 2 × 4,900 patches × 1,280 × (5 bf16 copies — 2 of the stream and
    // the qkv tensor's 3 — and 6 float32 ones of the rotary embedding) bytes
    assert_eq!(
        sdpa["components"]["vision_encoder"],
        2u64 * 4900 * 1280 * (5 * 2 + 6 * 4)
    );
    assert_eq!(sdpa["components"]["vision_encoder"], 426_496_000u64);

    let mut eager_args = base.to_vec();
    eager_args.extend(["--engine", "transformers-eager"]);
    let eager = json(&run(home.path(), &eager_args).stdout);
    // 16 heads × 4,900² scores of one image in bf16 beside their f32 softmax, with the
    // residual, q, k and v of both images
    assert_eq!(
        eager["components"]["vision_encoder"],
        16u64 * 4900 * 4900 * 6 + 2 * 4900 * 1280 * (5 * 2 + 6 * 4)
    );
}

#[test]
fn qwen3_vl_keeps_1024_square_and_gives_1024_tokens() {
    let home = temp();
    let base = [
        "plan",
        "-m",
        QWEN3_VL,
        "--images",
        "2",
        "--image-size",
        "1024x1024",
        "--vram",
        "80GB",
        "--json",
    ];
    let r = run(home.path(), &base);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let sdpa = json(&r.stdout);
    // smart_resize with factor 16 × 2 = 32: 1024 stays; 64 × 64 patches, 32 × 32 = 1,024 tokens
    assert_eq!(sdpa["images"]["height"], 1024);
    assert_eq!(sdpa["images"]["width"], 1024);
    assert_eq!(sdpa["images"]["tokens_per_image"], 1024);
    assert_eq!(sdpa["images"]["encoder_positions_per_image"], 4096);
    assert_eq!(sdpa["workload"]["prompt_tokens"], 2048 + 2 * 1024);
    // the attention's peak, 2 × 4,096 patches × 1,152 × (5 bf16 and 6 float32 copies), beside
    // the DeepStack features, 2 × 1,024 tokens × 3 × 2,048 bf16 values
    let deepstack = 2u64 * 1024 * 3 * 2048 * 2;
    assert_eq!(
        sdpa["components"]["vision_encoder"],
        2u64 * 4096 * 1152 * 34 + deepstack
    );
    assert_eq!(sdpa["components"]["vision_encoder"], 346_030_080u64);

    let mut eager_args = base.to_vec();
    eager_args.extend(["--engine", "transformers-eager"]);
    let eager = json(&run(home.path(), &eager_args).stdout);
    // one image's 16 × 4,096² scores in bf16 beside their f32 softmax, with both images'
    // residual, q, k and v
    assert_eq!(
        eager["components"]["vision_encoder"],
        16u64 * 4096 * 4096 * 6 + 2 * 4096 * 1152 * 34 + deepstack
    );

    // Qwen3.5 has the same processor and tower; without --image-size, the largest image the
    // processor keeps: 4096 × 4096, 16,384 tokens.
    let r = run(
        home.path(),
        &["plan", "-m", QWEN35, "--images", "1", "--vram", "80GB"],
    );
    assert!(
        r.stdout.contains(
            "--images 1: each image is the largest the processor keeps, 4096x4096 px, 16,384 tokens"
        ),
        "{}{}",
        r.stdout,
        r.stderr
    );
}

#[test]
fn images_on_a_text_only_model_is_one_line_and_exit_2() {
    let home = temp();
    let r = run(
        home.path(),
        &["plan", "-m", TEXT_ONLY, "--images", "1", "--vram", "24GB"],
    );
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("is a text-only model"), "{}", r.stderr);
}

#[test]
fn bad_image_flags_are_one_line_and_exit_2() {
    let home = temp();
    for (extra, says) in [
        (&["--images", "0"][..], "--images"),
        (
            &["--images", "1", "--image-size", "big"][..],
            "--image-size big",
        ),
        (
            &["--images", "1", "--engine", "sglang"][..],
            "planned for transformers, vLLM and llama.cpp; sglang is not modelled",
        ),
        (
            &["--images", "1", "--engine", "ollama"][..],
            "ollama is not modelled",
        ),
        (
            &["--images", "1", "--engine", "llama.cpp", "-ub", "128"][..],
            "Gemma-3 decodes an image's 256 tokens with non-causal attention in one ubatch",
        ),
        (
            &[
                "--images",
                "4",
                "--engine",
                "vllm",
                "--limit-mm-per-prompt",
                "2",
            ][..],
            "vLLM takes at most 2 image(s) in one prompt",
        ),
        (
            &["--images", "1", "--limit-mm-per-prompt", "2"][..],
            "--limit-mm-per-prompt is a vLLM flag",
        ),
        (
            &["--images", "1", "--engine", "vllm", "--vllm-version", "v0"][..],
            "follows V1's encoder profile",
        ),
    ] {
        let mut args = vec!["plan", "-m", GEMMA3, "--vram", "24GB"];
        args.extend_from_slice(extra);
        let r = run(home.path(), &args);
        assert_eq!(r.code, 2, "{extra:?}: {}{}", r.stdout, r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
        assert!(r.stderr.contains(says), "{extra:?}: {}", r.stderr);
    }
}

/// The sizes the real processor is asked about: (height, width).
const SIZES: &[(u64, u64)] = &[
    (1024, 1024),
    (768, 1024),
    (10, 10),
    (3000, 4000),
    (42, 1000),
    (1080, 1920),
    (14, 2800),
    (8000, 8000),
    (3000, 4000),
    (100, 20000),
];

/// transformers' own `smart_resize` (its source, read from the installed
/// `models/qwen2_vl/image_processing_qwen2_vl.py` and run as it is: importing the module needs
/// torchvision) and Gemma3Config's `mm_tokens_per_image`, for the sizes above.
const REFERENCE: &str = r#"
import ast, json, math, os, sys
import transformers
from transformers.models.gemma3.configuration_gemma3 import Gemma3Config
path = os.path.join(os.path.dirname(transformers.__file__), "models", "qwen2_vl", "image_processing_qwen2_vl.py")
tree = ast.parse(open(path).read())
fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "smart_resize")
scope = {"math": math}
exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), scope)
sizes = json.loads(sys.argv[1])
out = []
for h, w in sizes:
    rh, rw = scope["smart_resize"](h, w, factor=28, min_pixels=56 * 56, max_pixels=28 * 28 * 1280)
    out.append([rh, rw, (rh // 14 // 2) * (rw // 14 // 2)])
# Qwen3-VL / Qwen3.5: Qwen2VLImageProcessor with the published preprocessor_config.json's
# patch_size 16, merge_size 2 and size 65,536 ..= 16,777,216.
out3 = []
for h, w in sizes:
    rh, rw = scope["smart_resize"](h, w, factor=32, min_pixels=65536, max_pixels=16777216)
    out3.append([rh, rw, (rh // 16 // 2) * (rw // 16 // 2)])
print(json.dumps({"qwen": out, "qwen3": out3, "gemma3": Gemma3Config().mm_tokens_per_image, "version": transformers.__version__}))
"#;

#[test]
fn tokens_equal_what_transformers_computes() {
    let Some(py) = std::env::var_os("LLM_OOM_TEST_PYTHON") else {
        eprintln!("LLM_OOM_TEST_PYTHON unset: skipped");
        return;
    };
    let sizes = serde_json::to_string(SIZES).unwrap();
    let out = std::process::Command::new(py)
        .args(["-c", REFERENCE, &sizes])
        .output()
        .expect("the interpreter runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reference = json(&String::from_utf8_lossy(&out.stdout));
    let home = temp();
    let cfg = write(&home.path().join("qwen25vl/config.json"), QWEN25_VL);
    let cfg = cfg.to_str().unwrap();
    // Each size through plan against the reference's height, width and tokens for `key`.
    let sizes_agree = |model: &str, key: &str, label: &str| {
        for (i, (h, w)) in SIZES.iter().enumerate() {
            let size = format!("{w}x{h}");
            let j = json(
                &run(
                    home.path(),
                    &[
                        "plan",
                        "-m",
                        model,
                        "--images",
                        "1",
                        "--image-size",
                        &size,
                        "--vram",
                        "80GB",
                        "--json",
                    ],
                )
                .stdout,
            );
            let want = &reference[key][i];
            assert_eq!(
                (
                    &j["images"]["height"],
                    &j["images"]["width"],
                    &j["images"]["tokens_per_image"]
                ),
                (&want[0], &want[1], &want[2]),
                "{label}{size} (transformers {})",
                reference["version"]
            );
        }
    };
    sizes_agree(cfg, "qwen", "");
    sizes_agree(QWEN3_VL, "qwen3", "Qwen3-VL ");
    let g = json(
        &run(
            home.path(),
            &[
                "plan", "-m", GEMMA3, "--images", "1", "--vram", "80GB", "--json",
            ],
        )
        .stdout,
    );
    assert_eq!(g["images"]["tokens_per_image"], reference["gemma3"]);
}

/// The vision tower's weights are their own row, apart from the encoder's activations: Gemma-3's
/// SigLIP and projector, 423,060,336 bf16 parameters, with or without --images; the JSON keeps
/// them inside `weights` (the components still sum to the total) and names them `vision_tower`.
#[test]
fn the_vision_tower_is_its_own_row_beside_the_encoders_activations() {
    let home = temp();
    let tower = 423_060_336u64 * 2;
    let plain = run(home.path(), &["plan", "-m", GEMMA3, "--vram", "80GiB"]);
    assert_eq!(plain.code, 0, "{}{}", plain.stdout, plain.stderr);
    assert!(
        plain.stdout.contains("│ vision tower ┆  807 MiB"),
        "{}",
        plain.stdout
    );
    assert!(!plain.stdout.contains("vision encoder"), "{}", plain.stdout);
    let with = run(
        home.path(),
        &["plan", "-m", GEMMA3, "--vram", "80GiB", "--images", "1"],
    );
    assert!(
        with.stdout.contains("│ vision tower   ┆  807 MiB"),
        "{}",
        with.stdout
    );
    assert!(with.stdout.contains("│ vision encoder"), "{}", with.stdout);

    let j = json(
        &run(
            home.path(),
            &["plan", "-m", GEMMA3, "--vram", "80GiB", "--json"],
        )
        .stdout,
    );
    let c = &j["components"];
    assert_eq!(c["vision_tower"], tower);
    assert!(c["weights"].as_u64().unwrap() > tower);
    assert!(c.get("vision_encoder").is_none());
    let parts = [
        "weights",
        "kv_cache",
        "activations",
        "allocator",
        "runtime",
        "margin",
    ]
    .iter()
    .map(|k| c[k].as_u64().unwrap())
    .sum::<u64>();
    assert_eq!(c["total"].as_u64().unwrap(), parts);

    // A text-only model has no such row.
    let text = run(
        home.path(),
        &["plan", "-m", TEXT_ONLY, "--vram", "80GiB", "--json"],
    );
    assert!(json(&text.stdout)["components"]
        .get("vision_tower")
        .is_none());
    let text = run(home.path(), &["plan", "-m", TEXT_ONLY, "--vram", "80GiB"]);
    assert!(!text.stdout.contains("vision tower"), "{}", text.stdout);
}

const QWEN25_VL_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/vision/qwen2.5-vl-7b-instruct.json"
);

/// `plan --engine vllm` on one card, as JSON.
fn vllm_plan(home: &std::path::Path, model: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "plan", "-m", model, "--engine", "vllm", "--vram", "80GB", "--json",
    ];
    args.extend_from_slice(extra);
    let r = run(home, &args);
    assert!(
        r.code == 0 || r.code == 1,
        "{args:?}: {}{}",
        r.stdout,
        r.stderr
    );
    json(&r.stdout)
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn vllm_gemma3_profiles_32_images_and_the_encoder_cache_comes_off_the_kv_cache() {
    let home = temp();
    // `--limit-mm-per-prompt 0`: vLLM takes no images and profiles the language model alone
    let plain = vllm_plan(home.path(), GEMMA3, &["--limit-mm-per-prompt", "0"]);
    let four = vllm_plan(home.path(), GEMMA3, &["--images", "4"]);
    let eight = vllm_plan(home.path(), GEMMA3, &["--images", "8"]);
    // 4 × 256 image tokens join the 2,048 text tokens
    assert_eq!(four["workload"]["prompt_tokens"], 2048 + 4 * 256);
    assert_eq!(eight["workload"]["prompt_tokens"], 2048 + 8 * 256);
    let s = &four["vllm_startup"];
    let e = &s["encoder_profile"];
    // an 80 GB card: max_num_batched_tokens 8,192, so the encoder budget is 8,192 tokens and
    // the profile encodes 8,192 / 256 = 32 images of 896 × 896
    assert_eq!(s["max_num_batched_tokens"], 8192);
    assert_eq!(e["tokens_per_item"], 256);
    assert_eq!(e["encoder_budget"], 8192);
    assert_eq!(e["items"], 32);
    // SigLIP's MLP for 32 images of 4,096 patches: (1,152 × 4 + 4,304 × 2) bf16 values each
    assert_eq!(
        u(&e["encoder_bytes"]),
        32 * 4096 * (1152 * 4 + 4304 * 2) * 2
    );
    // the encoder cache: 32 × 256 vectors of the language model's 5,376, bf16
    let cache = 32 * 256 * 5376 * 2;
    assert_eq!(u(&e["cache_bytes"]), cache);
    // the language model's own profile is larger than the tower's 2.7 GiB, so the cache is
    // what the images add; the KV cache shrinks by exactly that
    let lm = u(&plain["vllm_startup"]["peak_activation_bytes"]);
    assert!(lm > u(&e["encoder_bytes"]));
    assert_eq!(u(&s["peak_activation_bytes"]), lm + cache);
    assert_eq!(u(&s["vision_encoder_bytes"]), cache);
    assert_eq!(
        u(&plain["vllm_startup"]["available_kv_bytes"]) - u(&s["available_kv_bytes"]),
        cache
    );
    assert!(u(&s["kv_tokens"]) < u(&plain["vllm_startup"]["kv_tokens"]));
    assert_eq!(u(&four["components"]["vision_encoder"]), cache);
    // whatever --images: the profile is vLLM's, not the request's; the longer prompt is what
    // more images cost
    assert_eq!(
        eight["vllm_startup"]["available_kv_bytes"],
        s["available_kv_bytes"]
    );
    let row = |j: &serde_json::Value| u(&j["budget"]["table"][0]["max_total_tokens"]);
    assert!(row(&four) < row(&plain), "{} {}", row(&four), row(&plain));
    assert!(plain["vllm_startup"].get("encoder_profile").is_none());
    // no --images: vLLM profiles the encoder all the same, and the requests are text
    let none = vllm_plan(home.path(), GEMMA3, &[]);
    assert_eq!(none["workload"]["prompt_tokens"], 2048);
    assert!(none.get("images").is_none());
    assert_eq!(none["vllm_startup"]["encoder_profile"], *e);
    assert_eq!(
        none["vllm_startup"]["available_kv_bytes"],
        s["available_kv_bytes"]
    );
    assert_eq!(u(&none["components"]["vision_encoder"]), cache);

    // one sequence, two images a prompt: the decoder side allows 1 × 2 items
    let two = vllm_plan(
        home.path(),
        GEMMA3,
        &[
            "--images",
            "2",
            "--limit-mm-per-prompt",
            "2",
            "--max-num-seqs",
            "1",
        ],
    );
    let e2 = &two["vllm_startup"]["encoder_profile"];
    assert_eq!(e2["items"], 2);
    assert_eq!(u(&e2["cache_bytes"]), 2 * 256 * 5376 * 2);

    // the table has the row, and the note says why
    let text = run(
        home.path(),
        &[
            "plan", "-m", GEMMA3, "--engine", "vllm", "--vram", "80GB", "--images", "4",
        ],
    );
    assert!(
        text.stdout.contains("│ vision encoder ┆ 84.0 MiB"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(
            "vLLM profiles the vision encoder at start-up, whatever --images: 32 image(s) of 256 \
             tokens"
        ),
        "{}",
        text.stdout
    );
}

#[test]
fn vllm_qwen25_vl_profiles_six_of_its_largest_images() {
    let home = temp();
    let plain = vllm_plan(
        home.path(),
        QWEN25_VL_FIXTURE,
        &["--limit-mm-per-prompt", "0"],
    );
    let four = vllm_plan(
        home.path(),
        QWEN25_VL_FIXTURE,
        &["--images", "4", "--image-size", "1024x1024"],
    );
    // the request's images: 1024² → 980², 1,225 tokens each
    assert_eq!(four["workload"]["prompt_tokens"], 2048 + 4 * 1225);
    let s = &four["vllm_startup"];
    let e = &s["encoder_profile"];
    // the profile's: the largest the processor keeps, 28 × 28 × 1,280 px → 1,280 tokens of
    // 5,120 patches; 8,192 / 1,280 = 6 of them
    assert_eq!(e["tokens_per_item"], 1280);
    assert_eq!(e["items"], 6);
    // the attention's peak: 5 bf16 and 6 float32 copies of the 1,280-wide stream
    assert_eq!(u(&e["encoder_bytes"]), 6 * 5120 * 1280 * (5 * 2 + 6 * 4));
    let cache = 6 * 1280 * 3584 * 2;
    assert_eq!(u(&e["cache_bytes"]), cache);
    let lm = u(&plain["vllm_startup"]["peak_activation_bytes"]);
    let added = u(&e["encoder_bytes"]).max(lm) + cache - lm;
    assert_eq!(u(&s["vision_encoder_bytes"]), added);
    assert_eq!(
        u(&plain["vllm_startup"]["available_kv_bytes"]) - u(&s["available_kv_bytes"]),
        added
    );
    assert_eq!(u(&four["components"]["vision_encoder"]), added);
}

/// google/gemma-3-12b-it's config.json.
const GEMMA3_12B: &str = r#"{"architectures":["Gemma3ForConditionalGeneration"],"boi_token_index":255999,
"eoi_token_index":256000,"eos_token_id":[1,106],"image_token_index":262144,"initializer_range":0.02,
"mm_tokens_per_image":256,"model_type":"gemma3","text_config":{"hidden_size":3840,"intermediate_size":15360,
"model_type":"gemma3_text","num_attention_heads":16,"num_hidden_layers":48,"num_key_value_heads":8,
"rope_scaling":{"factor":8.0,"rope_type":"linear"},"sliding_window":1024},"torch_dtype":"bfloat16",
"vision_config":{"hidden_size":1152,"image_size":896,"intermediate_size":4304,"model_type":"siglip_vision_model",
"num_attention_heads":16,"num_hidden_layers":27,"patch_size":14,"vision_use_head":false}}"#;

/// llama.cpp: the mmproj's weights are the vision tower row, the CLIP compute buffer is the vision
/// encoder row (once, whatever --images: one image per graph), and `-c` holds the images' tokens.
#[test]
fn llamacpp_gemma3_12b_four_images_on_a_24gb_card() {
    let home = temp();
    let cfg = write(&home.path().join("gemma-3-12b-it/config.json"), GEMMA3_12B);
    let model = cfg.to_str().unwrap();
    let args = [
        "plan",
        "-m",
        model,
        "--images",
        "4",
        "--engine",
        "llama.cpp",
        "--dtype",
        "q4_k_m",
        "--vram",
        "24GB",
    ];
    let r = run(home.path(), &args);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    for row in [
        "Workload  3,072 prompt + 256 new tokens × 1 sequence",
        "│ vision tower   ┆  804 MiB",
        "│ vision encoder ┆  121 MiB",
        "the vision encoder row is the CLIP compute buffer (tools/mtmd/clip.cpp, \
         `alloc_compute_meta`), 121 MiB for one 896x896 image with flash attention on",
    ] {
        assert!(r.stdout.contains(row), "{row}\n{}", r.stdout);
    }

    let mut with_json = args.to_vec();
    with_json.push("--json");
    let j = json(&run(home.path(), &with_json).stdout);
    assert_eq!(j["workload"]["prompt_tokens"], 3072);
    assert_eq!(j["images"]["tokens_per_image"], 256);
    assert_eq!(j["images"]["prompt_tokens_added"], 1024);
    // 4,096 patches × (4,304 + 3 × 1,152) f32: 121.25 MiB, what llama.cpp logs for this tower
    // (https://github.com/ggml-org/llama.cpp/pull/22790)
    assert_eq!(j["components"]["vision_encoder"], 127_139_840);
    // the SigLIP's 421,290,864 parameters in f16
    assert_eq!(j["components"]["vision_tower"], 842_581_728);
    // one image at a time: 1 image or 4, the same buffer
    let mut one = with_json.clone();
    one[4] = "1";
    let j1 = json(&run(home.path(), &one).stdout);
    assert_eq!(j1["components"]["vision_encoder"], 127_139_840);
    assert_eq!(j1["workload"]["prompt_tokens"], 2048 + 256);
    // without flash attention the 16 heads' f32 scores of 4,096² positions
    let mut off = with_json.clone();
    off.extend(["-fa", "off"]);
    let j2 = json(&run(home.path(), &off).stdout);
    assert_eq!(
        j2["components"]["vision_encoder"],
        16_u64 * 4096 * 4096 * 4 + 5 * 4096 * 1152 * 4
    );
}

/// llama.cpp's mmproj on two cards: tools/mtmd/clip.cpp opens its backend on the first GPU, so
/// cuda:0 holds the whole vision tower and the CLIP compute buffer beside its layers, and the
/// layers share only the language model (the same bytes per layer as the text model alone).
#[test]
fn llamacpp_puts_the_mmproj_and_its_buffer_on_the_first_gpu() {
    let home = temp();
    let plan = |model: &str, images: &[&str]| {
        let mut args = vec![
            "plan",
            "-m",
            model,
            "--engine",
            "llama.cpp",
            "--dtype",
            "q4_k_m",
            "--vram",
            "2x12GiB",
            "--json",
        ];
        args.extend(images);
        json(&run(home.path(), &args).stdout)
    };
    let vlm = plan(GEMMA3, &["--images", "2"]);
    let gpus = vlm["placement"]["devices"].as_array().unwrap().clone();
    let row = |i: usize, k: &str| gpus[i][k].as_u64().unwrap();
    assert_eq!(gpus[0]["device"], "cuda:0");
    assert!(gpus[0]["holds"].to_string().contains("mmproj"), "{gpus:?}");
    assert!(!gpus[1]["holds"].to_string().contains("mmproj"), "{gpus:?}");
    let encoder = vlm["components"]["vision_encoder"].as_u64().unwrap();
    assert!(encoder > 0);
    assert_eq!(
        row(0, "activations_bytes") - row(1, "activations_bytes"),
        encoder
    );
    // Its language model alone (the preset's text_config as a gemma3_text config), split the
    // same way: cuda:0 holds exactly the tower more, cuda:1 the same.
    let preset: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(GEMMA3).unwrap()).unwrap();
    let mut text = preset["text_config"].clone();
    text["model_type"] = "gemma3_text".into();
    text["architectures"] = serde_json::json!(["Gemma3ForCausalLM"]);
    let cfg = write(
        &home.path().join("gemma-3-27b-text/config.json"),
        &text.to_string(),
    );
    let alone = plan(cfg.to_str().unwrap(), &[]);
    let text_gpus = alone["placement"]["devices"].as_array().unwrap().clone();
    assert_eq!(text_gpus[0]["layers"], gpus[0]["layers"]);
    assert!(!text_gpus[0]["holds"].to_string().contains("mmproj"));
    assert_eq!(
        row(0, "weights_bytes") - text_gpus[0]["weights_bytes"].as_u64().unwrap(),
        vlm["components"]["vision_tower"].as_u64().unwrap()
    );
    assert_eq!(text_gpus[1]["weights_bytes"], gpus[1]["weights_bytes"]);
}

/// transformers 5.17.0's `Mistral3Config().to_dict()` (its defaults are Mistral-Small-3.1-24B's:
/// a 1540 px Pixtral tower with 14 px patches, spatial_merge_size 2, a 40-layer mistral text
/// model); built from the class, not copied from the model's repository.
const MISTRAL3_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/vision/mistral3-defaults.json"
);

#[test]
fn mistral3_gives_a_1024_square_37_rows_of_38_tokens() {
    let home = temp();
    let out = run(
        home.path(),
        &[
            "plan",
            "-m",
            MISTRAL3_FIXTURE,
            "--images",
            "2",
            "--image-size",
            "1024x1024",
            "--vram",
            "80GB",
            "--json",
        ],
    );
    let j = json(&out.stdout);
    // PixtralProcessor: 1024 → 1036 (37 cells of 28 px), 37 rows × (37 + [IMG_BREAK]) = 1,406
    assert_eq!(j["images"]["height"], 1036);
    assert_eq!(j["images"]["tokens_per_image"], 1406);
    assert_eq!(j["workload"]["prompt_tokens"], 2048 + 2 * 1406);
    // both images' 5,476 patches in one sequence: the MLP's peak beside the 10,952² bf16 mask
    assert_eq!(j["components"]["vision_encoder"], 621_197_440u64);
}

/// transformers 5.17.0's `InternVLConfig().to_dict()` (448 px tiles of 14 px patches,
/// downsample_ratio 0.5, a 32-layer qwen2 text model); built from the class, not copied from a
/// model's repository.
const INTERNVL_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/vision/internvl-defaults.json"
);

const LLAMA4_SCOUT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/presets/llama-4-scout-17b-16e-instruct.json"
);

fn two_square_images(model: &str, vram: &str) -> serde_json::Value {
    let home = temp();
    let out = run(
        home.path(),
        &[
            "plan",
            "-m",
            model,
            "--images",
            "2",
            "--image-size",
            "1024x1024",
            "--vram",
            vram,
            "--json",
        ],
    );
    json(&out.stdout)
}

#[test]
fn internvl_tiles_a_1024_square_in_3_by_3_and_a_thumbnail() {
    let j = two_square_images(INTERNVL_FIXTURE, "80GB");
    // GotOcr2ImageProcessor: 9 tiles and the thumbnail, 2 + 10 × 256 = 2,562 tokens an image
    assert_eq!(j["images"]["tokens_per_image"], 2562);
    assert_eq!(j["workload"]["prompt_tokens"], 2048 + 2 * 2562);
    // 20 tiles of 1,025 positions as one batch: the MLP's peak
    assert_eq!(j["components"]["vision_encoder"], 503_808_000u64);
}

#[test]
fn llama4_tiles_a_1024_square_in_4_by_4_and_a_global_tile() {
    let j = two_square_images(LLAMA4_SCOUT, "400GB");
    // Llama4Processor: 17 tiles × 144, 16 separators and 3 markers = 2,467 tokens an image
    assert_eq!(j["images"]["tokens_per_image"], 2467);
    assert_eq!(j["workload"]["prompt_tokens"], 2048 + 2 * 2467);
    // 34 tiles of 577 positions: the attention's peak with its float32 rotary
    assert_eq!(j["components"]["vision_encoder"], 939_152_896u64);
}

/// transformers 5.17.0's `Phi4MultimodalConfig().to_dict()` (Phi-4-multimodal-instruct's shape:
/// a 448 px SigLIP of 14 px patches, a 32-layer text model); built from the class, not copied
/// from the model's repository.
const PHI4_MM_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/vision/phi4-multimodal-defaults.json"
);

#[test]
fn phi4_multimodal_crops_a_1024_square_in_3_by_3_and_a_global_crop() {
    let j = two_square_images(PHI4_MM_FIXTURE, "80GB");
    // Phi4MultimodalImageProcessor: 256 + 1 + 48 × 48 + 48 + 16 = 2,625 tokens an image
    assert_eq!(j["images"]["tokens_per_image"], 2625);
    assert_eq!(j["workload"]["prompt_tokens"], 2048 + 2 * 2625);
    // 20 crops of 1,024 positions as one batch: SigLIP's MLP peak
    assert_eq!(
        j["components"]["vision_encoder"],
        20u64 * 1024 * 1152 * 4 * 2 + 20 * 1024 * 4304 * 2 * 2
    );
}

/// llava-hf/llava-v1.6-mistral-7b-hf's config.json (LLaVA-NeXT: CLIP ViT-L/14-336, the five
/// `image_grid_pinpoints`, a Mistral-7B text model).
const LLAVA_NEXT_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/vision/llava-v1.6-mistral-7b-hf.json"
);

#[test]
fn llava_next_fits_a_1024_by_768_image_in_2_by_2_crops_and_the_base() {
    let home = temp();
    let args = [
        "plan",
        "-m",
        LLAVA_NEXT_FIXTURE,
        "--images",
        "2",
        "--image-size",
        "1024x768",
        "--vram",
        "80GB",
        "--json",
    ];
    let j = json(&run(home.path(), &args).stdout);
    // LlavaNextProcessor: the 672² canvas, 48 × 48 features less 12 rows of padding, 36 × 48 +
    // 36 newlines + the base crop's 576 = 2,340 tokens an image
    assert_eq!(j["images"]["tokens_per_image"], 2340);
    assert_eq!(j["images"]["height"], 672);
    assert_eq!(j["images"]["width"], 672);
    assert_eq!(j["workload"]["prompt_tokens"], 2048 + 2 * 2340);
    // 2 × 5 crops of 577 positions as one CLIP batch: the MLP's peak
    assert_eq!(
        j["components"]["vision_encoder"],
        10u64 * 577 * 1024 * 4 * 2 + 10 * 577 * 4096 * 2 * 2
    );
    // LLaVA-1.5's CLIP and projector and the 4,096 of `image_newline`, as transformers 5.17
    // builds LlavaNextForConditionalGeneration on the meta device
    assert_eq!(j["model"]["parameters"], 7_566_747_648u64);
    assert_eq!(j["components"]["vision_tower"], 324_491_264u64 * 2);
    // llama.cpp's mtmd tiling is not modelled: one line, exit code 2
    let mut args = args.to_vec();
    args.extend(["--engine", "llama.cpp"]);
    let out = util::llm_oom(home.path()).args(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("llava_next"), "{err}");
}

/// microsoft/Phi-3.5-vision-instruct's config.json (`phi3_v`, remote code: Phi-3-mini's decoder,
/// CLIP ViT-L/14-336, `glb_GN` / `sub_GN` and a two-layer projector).
const PHI3_V_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/vision/phi-3.5-vision-instruct.json"
);

#[test]
fn phi3_v_pads_each_image_to_five_clip_crops() {
    let home = temp();
    let plan = |size: &str, extra: &[&str]| {
        let mut args = vec![
            "plan",
            "-m",
            PHI3_V_FIXTURE,
            "--images",
            "2",
            "--image-size",
            size,
            "--vram",
            "80GB",
            "--json",
        ];
        args.extend_from_slice(extra);
        json(&run(home.path(), &args).stdout)
    };
    // the HD transform: 1024 × 768 scales to 672 × 504 and pads to 672², 2 × 2 crops:
    // (4 + 1) × 144 + 1 + (2 + 1) × 12 = 757 tokens an image
    let j = plan("1024x768", &[]);
    assert_eq!(j["images"]["tokens_per_image"], 757);
    assert_eq!(j["images"]["height"], 672);
    assert_eq!(j["images"]["width"], 672);
    assert_eq!(j["workload"]["prompt_tokens"], 2048 + 2 * 757);
    // the processor pads every image to num_crops + 1 = 5 crops: 2 × 5 crops of 577 positions
    // as one CLIP batch, the MLP's peak
    let encoder = 10u64 * 577 * 1024 * 4 * 2 + 10 * 577 * 4096 * 2 * 2;
    assert_eq!(j["images"]["encoder_positions_per_image"], 5 * 577);
    assert_eq!(j["components"]["vision_encoder"], encoder);
    // Phi-3-mini's 3,821,079,552 and the tower's 325,541,888 (CLIPVisionModel, the separators,
    // the projector), as transformers' classes build them on the meta device
    assert_eq!(j["model"]["parameters"], 4_146_621_440u64);
    assert_eq!(j["components"]["vision_tower"], 325_541_888u64 * 2);
    // 2000 × 500 (ratio 4): 1344 × 336, one row of 4 crops: 5 × 144 + 1 + 2 × 12 = 745 tokens,
    // and the same 5 crops to the encoder
    let wide = plan("2000x500", &[]);
    assert_eq!(wide["images"]["tokens_per_image"], 745);
    assert_eq!(wide["images"]["height"], 336);
    assert_eq!(wide["images"]["width"], 1344);
    assert_eq!(wide["workload"]["prompt_tokens"], 2048 + 2 * 745);
    assert_eq!(wide["components"]["vision_encoder"], encoder);
    // vLLM profiles its largest image, a 4 × 1 column (781 tokens): 8,192 / 781 = 10 images,
    // 50 crops, and their encoder cache of 3,072-wide bf16 vectors
    let v = plan("1024x768", &["--engine", "vllm"]);
    let e = &v["vllm_startup"]["encoder_profile"];
    assert_eq!(e["tokens_per_item"], 781);
    assert_eq!(e["items"], 10);
    assert_eq!(e["encoder_bytes"], 5 * encoder);
    assert_eq!(e["cache_bytes"], 10u64 * 781 * 3072 * 2);
    // llama.cpp's mtmd has no Phi-3-vision projector: one line, exit code 2
    let args = [
        "plan",
        "-m",
        PHI3_V_FIXTURE,
        "--images",
        "2",
        "--image-size",
        "1024x768",
        "--vram",
        "80GB",
        "--engine",
        "llama.cpp",
    ];
    let out = util::llm_oom(home.path()).args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("phi3_v"), "{err}");
}
