//! `plan --lora-rank` and `plan --draft-model`: each row's bytes against a count by hand from the
//! published configs, and the verdict turning when the rows push the workload over the card.

mod util;

use std::path::PathBuf;

use serde_json::Value;
use util::{json, run, temp, write};

const TARGET: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/presets/llama-3.1-8b-instruct.json"
);

/// meta-llama/Llama-3.2-1B-Instruct's published config.json: the classic draft of Llama-3.1-8B.
const LLAMA_3_2_1B: &str = include_str!("fixtures/draft/llama-3.2-1b-instruct.json");

/// Llama-3.2-1B by hand: embedding 128,256 × 2,048 (tied), 16 layers of q 2,048², k and v
/// 2,048 × 512, o 2,048², MLP 3 × 2,048 × 8,192 and two norms, one final norm.
const DRAFT_PARAMS: u64 = 128_256 * 2_048
    + 16 * (2 * 2_048 * 2_048 + 2 * 2_048 * 512 + 3 * 2_048 * 8_192 + 2 * 2_048)
    + 2_048;
/// 16 layers × 8 KV heads × 64 × (K and V) × 2 bytes.
const DRAFT_KV_PER_TOKEN: u64 = 16 * 8 * 64 * 2 * 2;

/// Llama-3.1-8B's Linears, (in + out) per layer: q 4,096 + 4,096, k and v 4,096 + 1,024,
/// o 4,096 + 4,096, gate, up and down 4,096 + 14,336; 32 layers.
const Q: u64 = 4_096 + 4_096;
const KV: u64 = 4_096 + 1_024;
const O: u64 = 4_096 + 4_096;
const MLP: u64 = 4_096 + 14_336;
const LAYERS: u64 = 32;

fn draft_config(dir: &std::path::Path) -> PathBuf {
    write(&dir.join("Llama-3.2-1B-Instruct/config.json"), LLAMA_3_2_1B)
}

fn plan(args: &[&str]) -> (i32, Value) {
    let home = temp();
    let mut all = vec!["plan", "--json", "-m", TARGET];
    all.extend_from_slice(args);
    let r = run(home.path(), &all);
    assert!(r.code == 0 || r.code == 1, "{}\n{}", r.stdout, r.stderr);
    (r.code, json(&r.stdout))
}

fn c(v: &Value, key: &str) -> u64 {
    v["components"][key].as_u64().unwrap_or(0)
}

/// Every component of the table adds up to the total.
fn adds_up(v: &Value) {
    let sum: u64 = [
        "weights",
        "kv_cache",
        "activations",
        "allocator",
        "runtime",
        "margin",
        "adapters",
        "draft_weights",
        "draft_kv_cache",
        "vision_encoder",
    ]
    .iter()
    .map(|k| c(v, k))
    .sum();
    assert_eq!(sum, c(v, "total"), "{}", v["components"]);
}

#[test]
fn the_draft_rows_are_its_weights_and_its_cache_for_the_same_tokens() {
    let dir = temp();
    let draft = draft_config(dir.path());
    let d = draft.to_str().unwrap();
    let work = ["--vram", "80GiB", "-p", "4000", "-n", "1000"];
    let (_, alone) = plan(&work);
    let (_, with) = plan(&[&work[..], &["--draft-model", d]].concat());
    assert_eq!(
        DRAFT_PARAMS, 1_235_814_400,
        "Llama-3.2-1B's published count"
    );
    assert_eq!(c(&with, "draft_weights"), DRAFT_PARAMS * 2);
    assert_eq!(c(&with, "draft_kv_cache"), DRAFT_KV_PER_TOKEN * 5_000);
    assert_eq!(c(&alone, "draft_weights"), 0);
    adds_up(&with);
    for same in ["weights", "kv_cache", "runtime", "margin"] {
        assert_eq!(c(&with, same), c(&alone, same), "{same}");
    }
    let text = run(
        dir.path(),
        &[&["plan", "-m", TARGET], &work[..], &["--draft-model", d]].concat(),
    );
    for row in ["draft weights", "draft KV cache", "num_assistant_tokens=20"] {
        assert!(text.stdout.contains(row), "{row}:\n{}", text.stdout);
    }
}

#[test]
fn the_target_verifies_the_candidate_tokens_at_the_decode_peak() {
    let dir = temp();
    let draft = draft_config(dir.path());
    let d = draft.to_str().unwrap();
    // A short prompt and a long answer: the last decode step is the peak.
    let work = ["--vram", "80GiB", "-p", "100", "-n", "8000"];
    let (_, alone) = plan(&work);
    assert_eq!(alone["components"]["peak_phase"], "decode");
    let extra = |k: &str| {
        let (_, with) = plan(
            &[
                &work[..],
                &["--draft-model", d, "--num-speculative-tokens", k],
            ]
            .concat(),
        );
        adds_up(&with);
        c(&with, "activations") - c(&alone, "activations")
    };
    // At least the K candidates' f32 logits and their softmax (vocabulary 128,256 × 8 bytes),
    // and linear in K.
    let (five, ten) = (extra("5"), extra("10"));
    assert!(five >= 5 * 128_256 * 8, "{five}");
    assert!(ten.abs_diff(2 * five) <= 2, "{five} {ten}");
}

#[test]
fn vllm_keeps_the_draft_in_the_same_blocks_and_its_weights_before_the_cache() {
    let dir = temp();
    let draft = draft_config(dir.path());
    let d = draft.to_str().unwrap();
    let work = [
        "--engine",
        "vllm",
        "--vram",
        "80GiB",
        "--max-model-len",
        "16384",
    ];
    let (_, alone) = plan(&work);
    let (_, with) = plan(&[&work[..], &["--draft-model", d]].concat());
    let s = |v: &Value, k: &str| v["vllm_startup"][k].as_u64().unwrap_or(0);
    assert_eq!(s(&with, "draft_weights_bytes"), DRAFT_PARAMS * 2);
    assert_eq!(
        s(&alone, "available_kv_bytes") - s(&with, "available_kv_bytes"),
        DRAFT_PARAMS * 2
    );
    // Llama-3.1-8B's 128 KiB a token and the draft's 32 KiB share each block of 16 tokens.
    let target_per_token = 32 * 8 * 128 * 2 * 2;
    let block = 16 * (target_per_token + DRAFT_KV_PER_TOKEN);
    assert_eq!(
        s(&with, "num_blocks"),
        s(&with, "available_kv_bytes") / block
    );
    assert_eq!(
        s(&with, "needed_kv_bytes"),
        16_384 * (target_per_token + DRAFT_KV_PER_TOKEN)
    );
    // The request's own rows: 2,304 tokens, already whole blocks.
    assert_eq!(c(&with, "draft_kv_cache"), DRAFT_KV_PER_TOKEN * 2_304);
    adds_up(&with);
}

#[test]
fn llama_cpp_gives_the_draft_its_own_kv_buffer() {
    let dir = temp();
    let draft = draft_config(dir.path());
    let d = draft.to_str().unwrap();
    // 3,840 + 256 = 4,096 cells, a multiple of llama.cpp's 256: the f16 KV buffer is exact.
    let work = [
        "--engine",
        "llama.cpp",
        "--vram",
        "24GiB",
        "-p",
        "3840",
        "-n",
        "256",
    ];
    let (_, alone) = plan(&work);
    let (_, with) = plan(&[&work[..], &["--draft-model", d]].concat());
    assert_eq!(c(&with, "draft_kv_cache"), DRAFT_KV_PER_TOKEN * 4_096);
    // Its own compute buffer beside the target's.
    assert!(c(&with, "activations") > c(&alone, "activations"));
    // The input embedding stays in host memory, but a tied output layer is loaded again on
    // the GPU: Llama-3.2-1B's whole bytes are there (in the target's bf16).
    assert_eq!(c(&with, "draft_weights"), DRAFT_PARAMS * 2);
    adds_up(&with);
}

#[test]
fn vllm_preallocates_every_module_for_every_slot() {
    let work = ["--engine", "vllm", "--vram", "80GiB"];
    let (_, alone) = plan(&work);
    // The adapter targets q and v (PEFT's default), but vLLM wraps all seven Linears.
    let (_, with) = plan(&[&work[..], &["--lora-rank", "16", "--max-loras", "4"]].concat());
    let per_layer = Q + 2 * KV + O + 3 * MLP;
    let hand = 4 * 16 * per_layer * LAYERS * 2;
    assert_eq!(hand, 335_544_320);
    assert_eq!(c(&with, "adapters"), hand);
    assert_eq!(with["vllm_startup"]["adapters_bytes"].as_u64(), Some(hand));
    let kv = |v: &Value| {
        v["vllm_startup"]["available_kv_bytes"]
            .as_u64()
            .unwrap_or(0)
    };
    assert_eq!(kv(&alone) - kv(&with), hand);
    adds_up(&with);
}

#[test]
fn peft_wraps_the_targets_in_f32() {
    let work = ["--vram", "80GiB"];
    let (_, default) = plan(&[&work[..], &["--lora-rank", "8"]].concat());
    assert_eq!(c(&default, "adapters"), 8 * (Q + KV) * LAYERS * 4);
    let (_, attention) = plan(
        &[
            &work[..],
            &[
                "--lora-rank",
                "64",
                "--lora-targets",
                "q,k,v,o",
                "--max-loras",
                "2",
            ],
        ]
        .concat(),
    );
    assert_eq!(
        c(&attention, "adapters"),
        2 * 64 * (Q + 2 * KV + O) * LAYERS * 4
    );
    adds_up(&attention);
    let text = run(
        temp().path(),
        &["plan", "-m", TARGET, "--vram", "80GiB", "--lora-rank", "8"],
    );
    assert!(text.stdout.contains("LoRA adapters"), "{}", text.stdout);
    assert!(
        text.stdout
            .contains("optimizer state and gradients are not priced"),
        "{}",
        text.stdout
    );
}

/// A card the model alone fits with 1 GiB to spare: the rows push it over.
#[test]
fn the_rows_turn_the_verdict() {
    let dir = temp();
    let draft = draft_config(dir.path());
    let d = draft.to_str().unwrap();
    let (_, probe) = plan(&["--vram", "40GiB"]);
    let card = format!("{}MiB", (c(&probe, "total") >> 20) + 1024);
    for (extra, remedy) in [
        (vec!["--draft-model", d], "drop_draft"),
        (
            vec![
                "--lora-rank",
                "256",
                "--lora-targets",
                "q,k,v,o,gate,up,down",
            ],
            "merge_adapters",
        ),
    ] {
        let (code, alone) = plan(&["--vram", &card]);
        assert_eq!((code, alone["budget"]["fits"].as_bool()), (0, Some(true)));
        let (code, with) = plan(&[&["--vram", card.as_str()][..], &extra].concat());
        assert_eq!(
            (code, with["budget"]["fits"].as_bool()),
            (1, Some(false)),
            "{extra:?}: {}",
            with["components"]
        );
        // Over the card by the rows, not by anything else.
        let vram = with["device"]["vram_bytes"].as_u64().unwrap_or(0);
        assert!(c(&alone, "total") <= vram && c(&with, "total") > vram);
        // The first remedy takes the rows away, back to the model alone's peak.
        let first = &with["remedies"][0];
        assert_eq!(first["change"]["kind"], remedy, "{}", with["remedies"]);
        assert_eq!(
            first["new_budget"]["peak_bytes"].as_u64(),
            Some(c(&alone, "total"))
        );
        assert_eq!(first["new_budget"]["fits"], true);
    }
}

#[test]
fn what_cannot_be_planned_is_refused_before_any_work() {
    let dir = temp();
    let draft = draft_config(dir.path());
    let d = draft.to_str().unwrap();
    for (args, says) in [
        (
            vec!["--draft-model", d, "--batch", "2"],
            "only supported for batch_size = 1",
        ),
        (
            vec!["--lora-rank", "8", "--lora-targets", "q,lm_head"],
            "lm_head",
        ),
        (vec!["--lora-rank", "0"], "--lora-rank"),
        (vec!["--lora-rank", "8", "--exact"], "--exact"),
        (
            vec!["--lora-rank", "8", "--vram", "24GiB,24GiB"],
            "one card",
        ),
        (
            vec!["--draft-model", "/nonexistent/draft"],
            "--draft-model /nonexistent/draft: cannot read",
        ),
        (
            vec!["--lora-rank", "8", "--engine", "candle"],
            "transformers, vLLM, SGLang and llama.cpp",
        ),
    ] {
        let home = temp();
        let r = run(home.path(), &[&["plan", "-m", TARGET][..], &args].concat());
        assert_eq!(r.code, 2, "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
    }
    // The adapter flags mean nothing without a rank, nor K without a draft.
    for args in [
        vec!["--max-loras", "4"],
        vec!["--num-speculative-tokens", "4"],
    ] {
        let home = temp();
        let r = run(home.path(), &[&["plan", "-m", TARGET][..], &args].concat());
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
    }
}

#[test]
fn vllm_refuses_to_start_when_the_slots_take_the_cache_and_merging_starts_it() {
    let work = [
        "--engine",
        "vllm",
        "--vram",
        "24GiB",
        "--max-model-len",
        "8192",
    ];
    let (code, alone) = plan(&work);
    assert_eq!(code, 0);
    assert_eq!(alone["vllm_startup"]["starts"], true);
    // Eight slots of rank 256 over every Linear: 10 GiB in bf16.
    let (code, with) = plan(&[&work[..], &["--lora-rank", "256", "--max-loras", "8"]].concat());
    let slots = 8 * 256 * (Q + 2 * KV + O + 3 * MLP) * LAYERS * 2;
    assert_eq!(slots, 10 << 30);
    assert_eq!(code, 1);
    assert_eq!(with["vllm_startup"]["starts"], false);
    assert_eq!(with["vllm_startup"]["adapters_bytes"].as_u64(), Some(slots));
    let evidence = with["verdict"]["evidence"].to_string();
    assert!(evidence.contains("LoRA slots 10.0 GiB"), "{evidence}");
    assert_eq!(with["remedies"][0]["change"]["kind"], "merge_adapters");
}

const DEEPSEEK_V3: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/presets/deepseek-v3.json");

/// DeepSeek-V3's config with 4 layers and 16 experts: its shapes, small enough for one card.
fn small_deepseek(dir: &std::path::Path) -> PathBuf {
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(DEEPSEEK_V3).unwrap()).unwrap();
    v["num_hidden_layers"] = 4.into();
    v["n_routed_experts"] = 16.into();
    v["n_group"] = 1.into();
    v["topk_group"] = 1.into();
    write(&dir.join("small-v3/config.json"), &v.to_string())
}

/// One MTP layer of DeepSeek-V3's shape with `experts` routed experts, by hand: MLA attention
/// (q_a 1,536 × 7,168 and its norm, q_b 128 × 192 × 1,536, kv_a 576 × 7,168 and the 512 norm,
/// kv_b 128 × 256 × 512, o 7,168 × 16,384), two norms, the router and its bias, the experts and
/// the shared expert of 2,048, then enorm, hnorm, shared_head.norm and eh_proj (14,336 → 7,168).
fn mtp_params(experts: u64) -> u64 {
    let h = 7_168;
    let attention =
        1_536 * h + 1_536 + 128 * 192 * 1_536 + 576 * h + 512 + 128 * 256 * 512 + h * 128 * 128;
    let moe = experts * h + experts + experts * 3 * h * 2_048 + 3 * h * 2_048;
    attention + 2 * h + moe + 3 * h + 2 * h * h
}

#[test]
fn mtp_prices_the_checkpoints_own_layer_as_the_draft() {
    let home = temp();
    let base = ["plan", "--json", "-m", DEEPSEEK_V3, "--engine", "vllm"];
    let work = ["--vram", "h200", "--dtype", "bf16"];
    let r = run(home.path(), &[&base[..], &work, &["--mtp"]].concat());
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let v = json(&r.stdout);
    assert_eq!(mtp_params(256), 11_610_068_224);
    assert_eq!(v["model"]["mtp"]["layers"], 1);
    assert_eq!(v["model"]["mtp"]["parameters"], mtp_params(256));
    assert_eq!(c(&v, "draft_weights"), mtp_params(256) * 2);
    // One MLA layer's latent, 512 + 64 elements of 2 bytes, for 2,304 tokens (whole blocks).
    assert_eq!(c(&v, "draft_kv_cache"), 576 * 2 * 2_304);
    adds_up(&v);
    let notes = v["notes"].to_string();
    assert!(
        notes.contains(r#"\"method\": \"mtp\", \"num_speculative_tokens\": 1"#),
        "{notes}"
    );
    // The model's own count leaves the layer out, with or without --mtp, and says so.
    let home = temp();
    let r = run(home.path(), &[&base[..1], &base[2..], &work].concat());
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("61 layers (+ 1 MTP layer, 11.61 B params, not counted)"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("+ 1 multi-token-prediction layer(s)"));
}

#[test]
fn vllm_takes_the_mtp_weights_from_the_cache_and_its_blocks_hold_both() {
    let dir = temp();
    let model = small_deepseek(dir.path());
    let m = model.to_str().unwrap();
    let work = [
        "plan",
        "--json",
        "-m",
        m,
        "--engine",
        "vllm",
        "--vram",
        "80GiB",
        "--dtype",
        "bf16",
        "--max-model-len",
        "16384",
    ];
    let home = temp();
    let alone = json(&run(home.path(), &work).stdout);
    let with = json(
        &run(
            home.path(),
            &[&work[..], &["--mtp", "--num-speculative-tokens", "3"]].concat(),
        )
        .stdout,
    );
    let s = |v: &Value, k: &str| v["vllm_startup"][k].as_u64().unwrap_or(0);
    assert_eq!(with["model"]["mtp"]["parameters"], mtp_params(16));
    assert_eq!(s(&with, "draft_weights_bytes"), mtp_params(16) * 2);
    assert_eq!(
        s(&alone, "available_kv_bytes") - s(&with, "available_kv_bytes"),
        mtp_params(16) * 2
    );
    // 4 trunk layers and the MTP layer, 576 elements of 2 bytes each, per token.
    assert_eq!(s(&with, "needed_kv_bytes"), 16_384 * 5 * 576 * 2);
    assert!(with["notes"]
        .to_string()
        .contains("num_speculative_tokens\\\": 3"));
    // Two MTP layers: K = 3 is neither at most 2 nor a multiple of 2.
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&model).unwrap()).unwrap();
    v["num_nextn_predict_layers"] = 2.into();
    let two = write(&dir.path().join("two-mtp/config.json"), &v.to_string());
    let mut args = work.to_vec();
    args[3] = two.to_str().unwrap();
    for (k, refused) in [("3", true), ("4", false)] {
        let r = run(
            home.path(),
            &[&args[..], &["--mtp", "--num-speculative-tokens", k]].concat(),
        );
        assert_eq!(r.code == 2, refused, "{k}: {}", r.stderr);
        if refused {
            assert!(r.stderr.contains("a multiple of 2"), "{}", r.stderr);
        }
    }
    adds_up(&with);
}

#[test]
fn mtp_is_refused_where_it_cannot_be_planned() {
    let dir = temp();
    let draft = draft_config(dir.path());
    let d = draft.to_str().unwrap();
    for (model, args, says) in [
        (
            TARGET,
            vec!["--engine", "vllm", "--mtp"],
            "has no multi-token-prediction layers",
        ),
        (
            DEEPSEEK_V3,
            vec!["--mtp"],
            "--mtp: transformers does not load the multi-token-prediction layers",
        ),
        (
            DEEPSEEK_V3,
            vec!["--engine", "llama.cpp", "--mtp"],
            "--mtp: the MTP draft is priced for vLLM (--speculative-config method mtp) and \
             SGLang (--speculative-algorithm NEXTN)",
        ),
        (
            DEEPSEEK_V3,
            vec![
                "--engine",
                "sglang",
                "--lora-rank",
                "8",
                "--lora-targets",
                "q,up",
            ],
            "--lora-targets: SGLang allocates LoRA buffers for gate, up and down of each of the \
             256 routed experts",
        ),
        (
            DEEPSEEK_V3,
            vec!["--engine", "sglang", "--mtp", "--lora-rank", "8"],
            "--lora-rank and --mtp: SGLang refuses it at start-up: \"Currently LoRA is only \
             compatible with NGRAM speculative decoding.\"",
        ),
        (
            DEEPSEEK_V3,
            vec!["--mtp", "--draft-model", d],
            "--draft-model",
        ),
        (
            DEEPSEEK_V3,
            vec!["--engine", "vllm", "--mtp", "--tp", "2"],
            "--mtp: planned on one card",
        ),
    ] {
        let home = temp();
        let r = run(
            home.path(),
            &[&["plan", "-m", model, "--vram", "h200"][..], &args].concat(),
        );
        assert_eq!(r.code, 2, "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
        if says.starts_with("--mtp")
            || says.starts_with("--lora-rank")
            || says.starts_with("has no")
        {
            assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
        }
    }
}

#[test]
fn qwen3_6s_mtp_module_is_one_full_attention_layer_and_its_fc() {
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/configs-2026/qwen3.6-27b/config.json"
    );
    let home = temp();
    let r = run(
        home.path(),
        &[
            "plan", "--json", "-m", config, "--engine", "vllm", "--vram", "h200", "--mtp",
        ],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let v = json(&r.stdout);
    // hidden 5,120; q 24 × 256 (doubled by the output gate), k and v 4 × 256, o; q and k norms
    // of 256; two norms; MLP 3 × 5,120 × 17,408; then pre_fc_norm_embedding,
    // pre_fc_norm_hidden, norm and fc (10,240 → 5,120).
    let (h, q, kv) = (5_120u64, 24 * 256u64, 4 * 256u64);
    let hand =
        2 * q * h + 2 * kv * h + h * q + 2 * 256 + 2 * h + 3 * h * 17_408 + 3 * h + 2 * h * h;
    assert_eq!(hand, 424_699_392);
    assert_eq!(v["model"]["mtp"]["parameters"], hand);
    assert_eq!(c(&v, "draft_weights"), hand * 2);
    // One full-attention layer: K and V of 4 heads × 256, 2 bytes, 2,304 tokens.
    assert_eq!(c(&v, "draft_kv_cache"), 2 * kv * 2 * 2_304);
    adds_up(&v);
}

#[test]
fn mtp_layers_no_family_builds_are_said_and_not_priced() {
    let dir = temp();
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(TARGET).unwrap()).unwrap();
    v["num_nextn_predict_layers"] = 1.into();
    let model = write(&dir.path().join("with-nextn/config.json"), &v.to_string());
    let m = model.to_str().unwrap();
    let home = temp();
    let r = run(home.path(), &["plan", "--json", "-m", m, "--vram", "h200"]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let notes = json(&r.stdout)["notes"].to_string();
    assert!(
        notes.contains("declares 1 multi-token-prediction layer(s) (`num_nextn_predict_layers`)"),
        "{notes}"
    );
    let r = run(
        home.path(),
        &[
            "plan", "-m", m, "--vram", "h200", "--engine", "vllm", "--mtp",
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stdout);
    assert!(r
        .stderr
        .contains("has no multi-token-prediction layers llm-oom sizes"));
}

/// SGLang's startup as `plan --json` reports it.
fn sg(v: &Value, k: &str) -> u64 {
    v["sglang_startup"][k].as_u64().unwrap_or(0)
}

#[test]
fn sglang_takes_the_lora_buffers_of_the_stacked_modules_before_its_pool() {
    let work = [
        "--engine",
        "sglang",
        "--vram",
        "80GiB",
        "--mem-fraction-static",
        "0.85",
    ];
    let (_, alone) = plan(&work);
    let (_, with) = plan(&[&work[..], &["--lora-rank", "16", "--max-loras", "4"]].concat());
    // PEFT's q_proj, v_proj normalize to qkv_proj (lora/utils.py): A 4 × (16 × 3) × 4,096 and
    // B 4 × (4,096 + 2 × 1,024) × 16 per layer, 32 layers, bf16.
    let lora = 4 * (16 * 3 * 4_096 + (4_096 + 2 * 1_024) * 16) * LAYERS * 2;
    assert_eq!(lora, 75_497_472);
    assert_eq!(c(&with, "adapters"), lora);
    assert_eq!(sg(&with, "lora_bytes"), lora);
    // init_lora_manager runs before init_memory_pool: the buffers come off the pool.
    assert_eq!(sg(&alone, "pool_bytes") - sg(&with, "pool_bytes"), lora);
    assert_eq!(
        sg(&with, "max_total_num_tokens"),
        sg(&with, "pool_bytes") / (32 * 8 * 128 * 2 * 2)
    );
    // o and down targeted: those two, no stacking.
    let (_, od) = plan(
        &[
            &work[..],
            &[
                "--lora-rank",
                "8",
                "--max-loras",
                "1",
                "--lora-targets",
                "o,down",
            ],
        ]
        .concat(),
    );
    assert_eq!(c(&od, "adapters"), 8 * (O + MLP) * LAYERS * 2);
    adds_up(&with);
}

#[test]
fn sglang_gives_a_standalone_draft_its_own_pool_after_the_models() {
    let dir = temp();
    let draft = draft_config(dir.path());
    let d = draft.to_str().unwrap();
    let work = [
        "--engine",
        "sglang",
        "--vram",
        "80GiB",
        "--mem-fraction-static",
        "0.85",
    ];
    let (_, alone) = plan(&work);
    let (_, with) = plan(&[&work[..], &["--draft-model", d]].concat());
    assert_eq!(
        with["sglang_startup"]["speculative_algorithm"],
        "STANDALONE"
    );
    assert_eq!(sg(&with, "draft_weights_bytes"), DRAFT_PARAMS * 2);
    assert_eq!(sg(&with, "draft_load_bytes"), DRAFT_PARAMS * 2);
    // The model's pool is profiled before the draft worker exists: the same tokens.
    assert_eq!(
        sg(&with, "max_total_num_tokens"),
        sg(&alone, "max_total_num_tokens")
    );
    // draft_runner_cache_size = max_total_num_tokens, in the draft's 16 layers.
    assert_eq!(sg(&with, "draft_cell_size"), DRAFT_KV_PER_TOKEN);
    assert_eq!(
        sg(&with, "draft_kv_bytes"),
        sg(&with, "max_total_num_tokens") * DRAFT_KV_PER_TOKEN
    );
    // free 79.5 GiB × 0.15 = 12.8 GB left: 2.47 GB of weights + 373,079 × 32 KiB = 12.2 GB do not fit.
    assert_eq!(with["sglang_startup"]["starts"], false);
    let msg = with["sglang_startup"]["message"].as_str().unwrap_or("");
    assert!(msg.starts_with("torch.OutOfMemoryError"), "{msg}");
    // f ≤ (free − load + weights × ¼) / (free × 1¼): (85,362,475,008 − 2,471,628,800
    //   + 16,060,522,496 / 4) / (85,362,475,008 × 1.25) = 0.8144… → 0.81.
    assert_eq!(with["sglang_startup"]["fraction_for_draft"], 0.81);
    let (_, ok) = plan(
        &[
            &work[..4],
            &["--mem-fraction-static", "0.81", "--draft-model", d],
        ]
        .concat(),
    );
    assert_eq!(ok["sglang_startup"]["starts"], true);
    // Without a fraction SGLang's default reserves 6,144 MiB more for STANDALONE:
    // (81,920 − 13,440 − 6,144) / 81,920 = 0.7607… on an 80 GiB card.
    let (_, default) = plan(&[&work[..4], &["--draft-model", d]].concat());
    assert_eq!(default["sglang_startup"]["mem_fraction_static"], 0.761);
    assert_eq!(default["sglang_startup"]["starts"], true);
    assert_eq!(c(&with, "draft_kv_cache"), DRAFT_KV_PER_TOKEN * 2_304);
    adds_up(&with);
}

#[test]
fn sglang_runs_the_mtp_layer_as_a_nextn_draft_with_the_models_embedding() {
    let dir = temp();
    let model = small_deepseek(dir.path());
    let m = model.to_str().unwrap();
    let work = [
        "plan", "--json", "-m", m, "--engine", "sglang", "--vram", "80GiB", "--dtype", "bf16",
    ];
    let home = temp();
    let at = |extra: &[&str]| json(&run(home.path(), &[&work[..], extra].concat()).stdout);
    let with = at(&["--mtp", "--mem-fraction-static", "0.7"]);
    let s = &with["sglang_startup"];
    assert_eq!(s["speculative_algorithm"], "NEXTN");
    assert_eq!(sg(&with, "draft_weights_bytes"), mtp_params(16) * 2);
    // deepseek_nextn.py loads its own embed_tokens and lm_head (129,280 × 7,168 each, bf16)
    // until set_embed_and_head swaps in the model's.
    assert_eq!(
        sg(&with, "draft_load_bytes"),
        mtp_params(16) * 2 + 2 * 129_280 * 7_168 * 2
    );
    // One MLA layer's latent, 576 elements of 2 bytes, for each of the model's pool tokens
    // (4 layers × 1,152 bytes a token).
    assert_eq!(sg(&with, "cell_size"), 4 * 1_152);
    assert_eq!(sg(&with, "draft_cell_size"), 1_152);
    assert_eq!(
        sg(&with, "draft_kv_bytes"),
        sg(&with, "max_total_num_tokens") * 1_152
    );
    assert_eq!(s["starts"], true);
    assert_eq!(c(&with, "draft_weights"), mtp_params(16) * 2);
    // SGLang's default on 80 GiB with NEXTN: (81,920 − 13,440 − 2,048) / 81,920 = 0.8109…; the
    // draft's pool, a quarter of the model's, no longer fits the 15 GiB left.
    let default = at(&["--mtp"]);
    assert_eq!(default["sglang_startup"]["mem_fraction_static"], 0.811);
    assert_eq!(default["sglang_startup"]["starts"], false);
    assert_eq!(default["sglang_startup"]["fraction_for_draft"], 0.76);
    let how = default["remedies"].to_string();
    assert!(how.contains("--mem-fraction-static 0.76"), "{how}");
    assert!(how.contains("drop --speculative-algorithm NEXTN"), "{how}");
    assert!(default["notes"]
        .to_string()
        .contains("--speculative-algorithm NEXTN"));
    adds_up(&with);
}
