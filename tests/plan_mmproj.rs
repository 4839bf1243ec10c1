//! `plan --mmproj FILE` (llama.cpp): a GGUF language model with its multimodal projector file.
//! The projector's tensors are the vision tower row, its warm-up CLIP compute buffer the vision
//! encoder row (with or without --images), and its projector type gives `--images` its rule.

mod util;

use std::path::{Path, PathBuf};

use util::{gguf, json, run, temp, Meta};

const F32: u32 = 0;
const F16: u32 = 1;
const Q4_K: u32 = 12;
const Q6_K: u32 = 14;

/// gemma-3-4b-it's language model as a Q4_K_M GGUF holds it (Q6_K for V and the FFN down
/// projection here throughout).
fn write_gemma3_4b(dir: &Path) -> PathBuf {
    let meta = [
        ("general.architecture", Meta::Str("gemma3")),
        ("general.file_type", Meta::U32(15)),
        ("gemma3.block_count", Meta::U32(34)),
        ("gemma3.embedding_length", Meta::U32(2560)),
        ("gemma3.feed_forward_length", Meta::U32(10240)),
        ("gemma3.attention.head_count", Meta::U32(8)),
        ("gemma3.attention.head_count_kv", Meta::U32(4)),
        ("gemma3.attention.key_length", Meta::U32(256)),
        ("gemma3.attention.value_length", Meta::U32(256)),
        ("gemma3.attention.sliding_window", Meta::U32(1024)),
        ("gemma3.context_length", Meta::U32(131_072)),
        ("gemma3.vocab_size", Meta::U32(262_208)),
    ];
    let mut t = vec![
        ("token_embd.weight".to_string(), vec![2560, 262_208], Q6_K),
        ("output_norm.weight".to_string(), vec![2560], F32),
    ];
    for i in 0..34 {
        let b = |s: &str| format!("blk.{i}.{s}.weight");
        t.push((b("attn_q"), vec![2560, 2048], Q4_K));
        t.push((b("attn_k"), vec![2560, 1024], Q4_K));
        t.push((b("attn_v"), vec![2560, 1024], Q6_K));
        t.push((b("attn_output"), vec![2048, 2560], Q4_K));
        t.push((b("ffn_gate"), vec![2560, 10240], Q4_K));
        t.push((b("ffn_up"), vec![2560, 10240], Q4_K));
        t.push((b("ffn_down"), vec![10240, 2560], Q6_K));
        for n in [
            "attn_norm",
            "post_attention_norm",
            "ffn_norm",
            "post_ffw_norm",
        ] {
            t.push((b(n), vec![2560], F32));
        }
        t.push((b("attn_q_norm"), vec![256], F32));
        t.push((b("attn_k_norm"), vec![256], F32));
    }
    let path = dir.join("gemma-3-4b-it-Q4_K_M.gguf");
    std::fs::write(&path, gguf(&meta, &t)).unwrap();
    path
}

/// Gemma-3's SigLIP as `convert_hf_to_gguf.py --mmproj` writes it: 896 px, 14 px patches, 27
/// blocks 1,152 wide with 16 heads and 4,304 in the MLP, projecting to the 4B's 2,560; matrices
/// in f16, vectors in f32. `over` replaces metadata values.
fn write_gemma3_mmproj(dir: &Path, name: &str, over: Overrides) -> PathBuf {
    let mut meta = vec![
        ("general.architecture", Meta::Str("clip")),
        ("clip.projector_type", Meta::Str("gemma3")),
        ("clip.has_vision_encoder", Meta::Bool(true)),
        ("clip.use_gelu", Meta::Bool(true)),
        ("clip.vision.image_size", Meta::U32(896)),
        ("clip.vision.patch_size", Meta::U32(14)),
        ("clip.vision.embedding_length", Meta::U32(1152)),
        ("clip.vision.feed_forward_length", Meta::U32(4304)),
        ("clip.vision.block_count", Meta::U32(27)),
        ("clip.vision.attention.head_count", Meta::U32(16)),
        ("clip.vision.projection_dim", Meta::U32(2560)),
    ];
    for (k, v) in over {
        meta.retain(|(key, _)| *key != k);
        meta.push((k, v));
    }
    let mut t = vec![
        (
            "v.patch_embd.weight".to_string(),
            vec![14, 14, 3, 1152],
            F16,
        ),
        ("v.patch_embd.bias".to_string(), vec![1152], F32),
        ("v.position_embd.weight".to_string(), vec![1152, 4096], F16),
        ("v.post_ln.weight".to_string(), vec![1152], F32),
        ("v.post_ln.bias".to_string(), vec![1152], F32),
        (
            "mm.input_projection.weight".to_string(),
            vec![1152, 2560],
            F16,
        ),
        ("mm.soft_emb_norm.weight".to_string(), vec![1152], F32),
    ];
    for i in 0..27 {
        let n = |s: &str| format!("v.blk.{i}.{s}");
        for m in ["attn_q", "attn_k", "attn_v", "attn_out"] {
            t.push((n(&format!("{m}.weight")), vec![1152, 1152], F16));
            t.push((n(&format!("{m}.bias")), vec![1152], F32));
        }
        for m in ["ln1", "ln2"] {
            t.push((n(&format!("{m}.weight")), vec![1152], F32));
            t.push((n(&format!("{m}.bias")), vec![1152], F32));
        }
        t.push((n("ffn_up.weight"), vec![1152, 4304], F16));
        t.push((n("ffn_up.bias"), vec![4304], F32));
        t.push((n("ffn_down.weight"), vec![4304, 1152], F16));
        t.push((n("ffn_down.bias"), vec![1152], F32));
    }
    let path = dir.join(name);
    std::fs::write(&path, gguf(&meta, &t)).unwrap();
    path
}

/// Metadata values a test puts in place of the good file's.
type Overrides = Vec<(&'static str, Meta)>;

/// The SigLIP's 419,816,304 parameters: 419,415,552 in f16 matrices, 400,752 in f32 vectors.
const MMPROJ_BYTES: u64 = 419_415_552 * 2 + 400_752 * 4;

fn plan(dir: &Path, model: &Path, extra: &[&str]) -> util::Run {
    let mut args = vec!["plan", "-m", model.to_str().unwrap(), "--vram", "24GB"];
    args.extend_from_slice(extra);
    run(dir, &args)
}

#[test]
fn gemma3_gguf_with_its_mmproj_takes_four_images() {
    let home = temp();
    let model = write_gemma3_4b(home.path());
    let mm = write_gemma3_mmproj(home.path(), "mmproj-gemma-3-4b-it-f16.gguf", vec![]);
    let mm = mm.to_str().unwrap();
    let r = plan(home.path(), &model, &["--mmproj", mm, "--images", "4"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    for row in [
        "Workload  3,072 prompt + 256 new tokens × 1 sequence",
        "│ vision encoder ┆  121 MiB",
        "the vision encoder row is the CLIP compute buffer (tools/mtmd/clip.cpp, \
         `alloc_compute_meta`), 121 MiB for one 896x896 image with flash attention on",
        "a gemma3 projector over a ViT of 27 blocks, 1,152 wide",
    ] {
        assert!(r.stdout.contains(row), "{row}\n{}", r.stdout);
    }

    // `-mm`, llama.cpp's short flag, says the same
    let j = json(&plan(home.path(), &model, &["-mm", mm, "--images", "4", "--json"]).stdout);
    assert_eq!(j["workload"]["prompt_tokens"], 2048 + 4 * 256);
    assert_eq!(j["images"]["tokens_per_image"], 256);
    assert_eq!(j["images"]["prompt_tokens_added"], 1024);
    assert_eq!(j["images"]["model_type"], "gemma3");
    // the config.json path's figure: 4,096 patches × (4,304 + 3 × 1,152) f32, 121.25 MiB, what
    // llama.cpp logs for this tower with flash attention (ggml-org/llama.cpp#22790)
    assert_eq!(j["components"]["vision_encoder"], 127_139_840);
    // the mmproj's own tensors, as stored
    assert_eq!(j["components"]["vision_tower"], MMPROJ_BYTES);
    assert_eq!(MMPROJ_BYTES, 840_434_112);
    // the language model's weights plus the projector's
    let lm = json(&plan(home.path(), &model, &["--json"]).stdout);
    assert_eq!(
        j["components"]["weights"].as_u64().unwrap(),
        lm["components"]["weights"].as_u64().unwrap() + MMPROJ_BYTES
    );
    // without flash attention: the 16 heads' f32 scores of 4,096² positions
    let off = json(
        &plan(
            home.path(),
            &model,
            &["--mmproj", mm, "--images", "4", "-fa", "off", "--json"],
        )
        .stdout,
    );
    assert_eq!(
        off["components"]["vision_encoder"],
        16_u64 * 4096 * 4096 * 4 + 5 * 4096 * 1152 * 4
    );
}

/// llama.cpp loads and warms up the mmproj at start: its weights and its CLIP compute buffer are
/// on the GPU whether or not a request carries an image.
#[test]
fn mmproj_without_images_still_counts_the_tower_and_its_warmup_buffer() {
    let home = temp();
    let model = write_gemma3_4b(home.path());
    let mm = write_gemma3_mmproj(home.path(), "mmproj.gguf", vec![]);
    let r = plan(home.path(), &model, &["--mmproj", mm.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains(
            "--mmproj without --images: llama.cpp still loads the projector and warms up its \
             CLIP compute buffer at start (121 MiB for the 896x896 warm-up image"
        ),
        "{}",
        r.stdout
    );
    let j = json(
        &plan(
            home.path(),
            &model,
            &["--mmproj", mm.to_str().unwrap(), "--json"],
        )
        .stdout,
    );
    assert_eq!(j["workload"]["prompt_tokens"], 2048);
    assert!(j["images"].is_null());
    assert_eq!(j["components"]["vision_encoder"], 127_139_840);
    assert_eq!(j["components"]["vision_tower"], MMPROJ_BYTES);
}

#[test]
fn a_gguf_without_mmproj_still_refuses_images() {
    let home = temp();
    let model = write_gemma3_4b(home.path());
    let r = plan(home.path(), &model, &["--images", "1"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("is a text-only model"), "{}", r.stderr);
}

#[test]
fn hostile_mmproj_files_and_other_engines_are_one_line_and_exit_2() {
    let home = temp();
    let model = write_gemma3_4b(home.path());
    let cases: Vec<(&str, Overrides, &str)> = vec![
        (
            "zero-patch.gguf",
            vec![("clip.vision.patch_size", Meta::U32(0))],
            "`clip.vision.patch_size` = 0",
        ),
        (
            "huge-image.gguf",
            vec![("clip.vision.image_size", Meta::U32(1 << 20))],
            "`clip.vision.image_size` = 1048576",
        ),
        (
            "wrong-projector.gguf",
            vec![("clip.projector_type", Meta::Str("resampler"))],
            "`clip.projector_type` = resampler is not usable (llm-oom has an image rule for the \
             projectors gemma3, qwen2vl_merger, qwen2.5vl_merger, qwen3vl_merger, mlp, mlp_norm",
        ),
    ];
    for (name, over, says) in cases {
        let mm = write_gemma3_mmproj(home.path(), name, over);
        for extra in [&[][..], &["--images", "2"][..]] {
            let mut args = vec!["--mmproj", mm.to_str().unwrap()];
            args.extend_from_slice(extra);
            let r = plan(home.path(), &model, &args);
            assert_eq!(r.code, 2, "{name}: {}{}", r.stdout, r.stderr);
            assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
            assert!(r.stderr.contains(says), "{name}: {}", r.stderr);
        }
    }
    // a file that is not a GGUF, a file that is not there
    let junk = home.path().join("junk.gguf");
    std::fs::write(&junk, b"not a gguf at all").unwrap();
    for mm in [junk, home.path().join("missing.gguf")] {
        let r = plan(home.path(), &model, &["--mmproj", mm.to_str().unwrap()]);
        assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    }
    // only llama.cpp reads an mmproj
    let mm = write_gemma3_mmproj(home.path(), "ok.gguf", vec![]);
    let r = plan(
        home.path(),
        &model,
        &["--mmproj", mm.to_str().unwrap(), "--engine", "vllm"],
    );
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("--mmproj is llama.cpp's multimodal projector"),
        "{}",
        r.stderr
    );
}

/// A config.json model with --mmproj: the file's tensors take the place of the tower the config
/// implies (priced f16 by rule), and the rest of the weights stay as they were.
#[test]
fn mmproj_replaces_a_config_paths_vision_tower() {
    let home = temp();
    let mm = write_gemma3_mmproj(home.path(), "mmproj.gguf", vec![]);
    let gemma3 = Path::new(env!("CARGO_MANIFEST_DIR")).join("presets/gemma-3-27b-it.json");
    let base = [
        "--engine",
        "llama.cpp",
        "--dtype",
        "q4_k_m",
        "--images",
        "1",
        "--json",
    ];
    let without = json(&plan(home.path(), &gemma3, &base).stdout);
    let mut args = base.to_vec();
    args.extend(["--mmproj", mm.to_str().unwrap()]);
    let with = json(&plan(home.path(), &gemma3, &args).stdout);
    let c = |j: &serde_json::Value, k: &str| j["components"][k].as_u64().unwrap();
    assert_eq!(c(&with, "vision_tower"), MMPROJ_BYTES);
    assert_eq!(
        c(&with, "weights") + c(&without, "vision_tower"),
        c(&without, "weights") + MMPROJ_BYTES
    );
    // the same SigLIP, the same CLIP compute buffer and tokens
    assert_eq!(c(&with, "vision_encoder"), c(&without, "vision_encoder"));
    assert_eq!(with["images"], without["images"]);
}
