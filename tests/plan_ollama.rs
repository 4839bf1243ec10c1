//! `plan --engine ollama` and ollama tags: the tag's quant and architecture, ollama's automatic
//! num_ctx for the card, the llama-server it launches, partial offload, and the remedies in
//! ollama's knobs.

mod util;

use util::{json, run, temp};

fn plan(extra: &[&str]) -> util::Run {
    let home = temp();
    let mut args = vec!["plan"];
    args.extend_from_slice(extra);
    run(home.path(), &args)
}

#[test]
fn a_tag_is_its_q4_k_m_checkpoint_with_ollamas_default_context() {
    let r = plan(&["-m", "llama3.1:8b", "--vram", "8GB", "--json"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let j = json(&r.stdout);
    assert_eq!(j["engine"]["server"], "ollama");
    assert_eq!(j["ollama"]["tag"], "llama3.1:8b");
    assert_eq!(j["ollama"]["quant"], "q4_k_m");
    assert_eq!(j["workload"]["weight_dtype"], "q4_k_m");
    // Under 23 GiB ollama's automatic context is 4,096; one slot.
    assert_eq!(j["ollama"]["num_ctx"], 4096);
    assert_eq!(j["ollama"]["num_ctx_auto"], true);
    assert_eq!(
        j["ollama"]["launches"],
        "llama-server -c 4096 -np 1 -b 512 -ub 512"
    );
    assert_eq!(j["ollama"]["layers_on_gpu"], 32);
    // Q4_K_M weights: about 4.6 GiB, not the 15 GiB of bf16.
    let weights = j["weights_bytes"].as_u64().unwrap();
    assert!((4 << 30..5 << 30).contains(&weights), "{weights}");
    // The KV cache is the 4,096-cell context in f16: 128 KiB a token.
    assert_eq!(j["components"]["kv_cache"], 4096 * 131_072);
}

#[test]
fn engine_ollama_with_a_hub_id_prices_q4_k_m_not_bf16() {
    let r = plan(&[
        "-m",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--engine",
        "ollama",
        "--vram",
        "rtx4090",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let j = json(&r.stdout);
    assert_eq!(j["workload"]["weight_dtype"], "q4_k_m");
    // An RTX 4090 (24,564 MiB) is in the 32k tier (23 GiB and up).
    assert_eq!(j["ollama"]["num_ctx"], 32_768);
    assert!(
        r.stdout.contains("ollama pulls a Q4_K_M GGUF"),
        "{}",
        r.stdout
    );
}

#[test]
fn a_large_num_ctx_on_8gb_is_a_partial_offload_and_the_remedies_are_ollamas() {
    let r = plan(&["-m", "llama3.1:8b", "--vram", "8GB", "--num-ctx", "32768"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("RUNS, PARTLY ON THE CPU"), "{}", r.stdout);
    assert!(
        r.stdout.contains("layers on the GPU (num_gpu "),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("PARAMETER num_ctx "), "{}", r.stdout);
    assert!(
        r.stdout.contains("OLLAMA_KV_CACHE_TYPE=q8_0"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("-ctk"), "{}", r.stdout);
    let j = json(
        &plan(&[
            "-m",
            "llama3.1:8b",
            "--vram",
            "8GB",
            "--num-ctx",
            "32768",
            "--json",
        ])
        .stdout,
    );
    let on_gpu = j["ollama"]["layers_on_gpu"].as_u64().unwrap();
    assert!((1..32).contains(&on_gpu), "{on_gpu}");
    // The num_ctx the remedy names loads every layer.
    let n = j["remedies"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|r| {
            (r["change"]["kind"] == "reduce_context").then(|| r["change"]["value"].as_u64())
        })
        .flatten()
        .expect("a num_ctx remedy");
    let j = json(
        &plan(&[
            "-m",
            "llama3.1:8b",
            "--vram",
            "8GB",
            "--num-ctx",
            &n.to_string(),
            "--json",
        ])
        .stdout,
    );
    assert_eq!(j["ollama"]["layers_on_gpu"], 32, "num_ctx {n}");
}

#[test]
fn parallel_slots_multiply_num_ctx_and_a_quant_suffix_is_read() {
    let r = plan(&[
        "-m",
        "llama3.1:8b-instruct-q8_0",
        "--vram",
        "rtx4090",
        "--parallel",
        "2",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let j = json(&r.stdout);
    assert_eq!(j["ollama"]["quant"], "q8_0");
    assert_eq!(j["ollama"]["num_parallel"], 2);
    assert!(
        j["ollama"]["launches"]
            .as_str()
            .unwrap()
            .starts_with("llama-server -c 65536 -np 2"),
        "{}",
        j["ollama"]["launches"]
    );
}

#[test]
fn an_automatic_context_that_does_not_load_is_retried_lower() {
    // 70B in Q4_K_M on a 24 GB card with 8 GB of host RAM: no split of its layers loads at
    // ollama's 32,768 tokens, so ollama steps down to 4,096 (and still cannot load it).
    let args = [
        "-m",
        "llama3.1:70b",
        "--vram",
        "rtx4090",
        "--host-ram",
        "8GB",
    ];
    let r = plan(&args);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains(
            "ollama's automatic num_ctx 32,768 does not load on this card; it retries with 4,096"
        ),
        "{}",
        r.stdout
    );
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let j = json(&plan(&with_json).stdout);
    assert_eq!(j["ollama"]["num_ctx"], 4096);
    assert_eq!(j["ollama"]["num_ctx_auto"], true);
    // A num_ctx the user set is kept.
    let j = json(
        &plan(&[
            "-m",
            "llama3.1:70b",
            "--vram",
            "24GB",
            "--host-ram",
            "8GB",
            "--num-ctx",
            "32768",
            "--json",
        ])
        .stdout,
    );
    assert_eq!(j["ollama"]["num_ctx"], 32_768);
}

#[test]
fn a_tag_with_another_engine_is_one_line_naming_the_checkpoint() {
    let r = plan(&["-m", "qwen3:8b", "--engine", "vllm", "--vram", "24GB"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("qwen3:8b is an ollama tag (Qwen/Qwen3-8B in q4_k_m); add --engine ollama"),
        "{}",
        r.stderr
    );
}

#[test]
fn ollamas_cache_type_flash_attention_and_num_batch_reach_the_launch() {
    let r = plan(&[
        "-m",
        "llama3.1:8b",
        "--vram",
        "8GB",
        "--flash-attn",
        "off",
        "--kv-dtype",
        "q8_0",
        "--ubatch-size",
        "256",
        "--json",
    ]);
    // ollama passes both as they are (llm/llama_server.go): llama-server refuses the q8_0 V
    // cache with flash attention off.
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let j = json(&r.stdout);
    assert_eq!(
        j["ollama"]["launches"],
        "llama-server -c 4096 -np 1 -b 256 -ub 256 --cache-type-k q8_0 --cache-type-v q8_0 -fa off"
    );
    assert_eq!(
        j["llama_refuses"],
        "llama_init_from_model: quantized V cache requires flash_attn to be enabled"
    );
    // q8_0: 34 bytes per 32 values, half the f16 cache and a little more.
    assert_eq!(j["components"]["kv_cache"], 4096 * (131_072 / 64 * 34));
}

#[test]
fn ollama_and_llama_cpp_context_flags_are_not_mixed() {
    let r = plan(&["-m", "llama3.1:8b", "--vram", "8GB", "--ctx-size", "8192"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("give --num-ctx"), "{}", r.stderr);
    let r = plan(&[
        "-m",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--engine",
        "llama.cpp",
        "--vram",
        "8GB",
        "--num-ctx",
        "8192",
    ]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("--num-ctx is ollama's context"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
}

fn plan_with_env(env: &[(&str, &str)], extra: &[&str]) -> util::Run {
    let home = temp();
    let mut c = util::llm_oom(home.path());
    c.arg("plan").args(extra);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the binary runs").into()
}

#[test]
fn ollamas_environment_sets_the_launch_and_the_report_says_so() {
    let env = [
        ("OLLAMA_NUM_PARALLEL", "2"),
        ("OLLAMA_KV_CACHE_TYPE", "q8_0"),
        ("OLLAMA_CONTEXT_LENGTH", "8192"),
    ];
    let r = plan_with_env(&env, &["-m", "llama3.1:8b", "--vram", "rtx4090", "--json"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let j = json(&r.stdout);
    // 8,192 a slot × 2 slots; the context is the user's, not ollama's automatic one.
    assert_eq!(
        j["ollama"]["launches"],
        "llama-server -c 16384 -np 2 -b 1024 -ub 1024 --cache-type-k q8_0 --cache-type-v q8_0"
    );
    assert_eq!(j["ollama"]["num_ctx_auto"], false);
    assert_eq!(j["workload"]["batch"], 2);
    assert_eq!(j["components"]["kv_cache"], 16_384 * (131_072 / 64 * 34));
    assert_eq!(
        j["ollama"]["from_environment"],
        serde_json::json!([
            "OLLAMA_NUM_PARALLEL=2",
            "OLLAMA_KV_CACHE_TYPE=q8_0",
            "OLLAMA_CONTEXT_LENGTH=8192"
        ])
    );
    let r = plan_with_env(&env, &["-m", "llama3.1:8b", "--vram", "rtx4090"]);
    assert!(
        r.stdout.contains("OLLAMA_NUM_PARALLEL=2 (environment)"),
        "{}",
        r.stdout
    );
}

#[test]
fn the_flags_win_over_ollamas_environment() {
    let env = [
        ("OLLAMA_NUM_PARALLEL", "4"),
        ("OLLAMA_KV_CACHE_TYPE", "q4_0"),
        ("OLLAMA_FLASH_ATTENTION", "1"),
        ("OLLAMA_CONTEXT_LENGTH", "16384"),
    ];
    let r = plan_with_env(
        &env,
        &[
            "-m",
            "llama3.1:8b",
            "--vram",
            "8GB",
            "--parallel",
            "1",
            "--kv-dtype",
            "f16",
            "--flash-attn",
            "auto",
            "--num-ctx",
            "4096",
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let j = json(&r.stdout);
    assert_eq!(
        j["ollama"]["launches"],
        "llama-server -c 4096 -np 1 -b 512 -ub 512"
    );
    assert!(
        j["ollama"].get("from_environment").is_none(),
        "{}",
        j["ollama"]
    );
    assert!(!r.stdout.contains("(environment)"), "{}", r.stdout);
}

#[test]
fn a_quantized_cache_with_flash_attention_off_is_refused_by_llama_server() {
    let env = [
        ("OLLAMA_KV_CACHE_TYPE", "q8_0"),
        ("OLLAMA_FLASH_ATTENTION", "false"),
    ];
    let r = plan_with_env(&env, &["-m", "llama3.1:8b", "--vram", "8GB"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("llama.cpp REFUSES TO START"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("OLLAMA_FLASH_ATTENTION=1"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(
            "llama.cpp would say: llama_init_from_model: quantized V cache requires flash_attn \
             to be enabled"
        ),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("OLLAMA_FLASH_ATTENTION=0 (environment)"),
        "{}",
        r.stdout
    );
}

#[test]
fn a_bad_ollama_variable_is_one_line_naming_it() {
    for (k, v) in [
        ("OLLAMA_NUM_PARALLEL", "two"),
        ("OLLAMA_KV_CACHE_TYPE", "fp8"),
        ("OLLAMA_FLASH_ATTENTION", "yes"),
        ("OLLAMA_CONTEXT_LENGTH", "-1"),
    ] {
        let r = plan_with_env(&[(k, v)], &["-m", "llama3.1:8b", "--vram", "8GB"]);
        assert_eq!(r.code, 2, "{k}: {}{}", r.stdout, r.stderr);
        assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
        assert!(r.stderr.contains(&format!("{k}={v}")), "{}", r.stderr);
    }
    // Another engine does not read ollama's environment.
    let r = plan_with_env(
        &[("OLLAMA_NUM_PARALLEL", "two")],
        &["-m", "meta-llama/Llama-3.1-8B-Instruct", "--vram", "24GB"],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

#[test]
fn num_gpu_is_the_layers_ollama_offloads_whether_they_fit_or_not() {
    // -ngl 20 of llama.cpp's 33 (32 blocks and the output): the last 19 blocks and the output.
    let r = plan(&[
        "-m",
        "llama3.1:8b",
        "--vram",
        "8GB",
        "--num-gpu",
        "20",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let j = json(&r.stdout);
    assert_eq!(j["ollama"]["num_gpu"], 20);
    assert_eq!(j["ollama"]["layers_on_gpu"], 19);
    assert_eq!(
        j["ollama"]["launches"],
        "llama-server -c 4096 -np 1 -b 512 -ub 512 -ngl 20"
    );
    assert!(
        j["verdict"]["summary"]
            .as_str()
            .unwrap()
            .starts_with("ollama loads 19 of 32 layers on the GPU (num_gpu 20)"),
        "{}",
        j["verdict"]["summary"]
    );
    // All layers at num_ctx 32,768 on 8 GB: llama-server does not fit, it runs out at load, and
    // the num_gpu that loads is said.
    let r = plan(&[
        "-m",
        "llama3.1:8b",
        "--vram",
        "8GB",
        "--num-ctx",
        "32768",
        "--num-gpu",
        "99",
    ]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("WOULD OOM — num_gpu 99 (-ngl 99)"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("PARAMETER num_gpu 27 loads"),
        "{}",
        r.stdout
    );
    // num_gpu 0: the CPU alone.
    let j = json(
        &plan(&[
            "-m",
            "llama3.1:8b",
            "--vram",
            "8GB",
            "--num-gpu",
            "0",
            "--json",
        ])
        .stdout,
    );
    assert_eq!(j["ollama"]["layers_on_gpu"], 0);
}

#[test]
fn num_gpu_is_ollamas_alone_and_not_negative() {
    let r = plan(&["-m", "meta-llama/Llama-3.1-8B-Instruct", "--num-gpu", "10"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("add --engine ollama"), "{}", r.stderr);
    let r = plan(&["-m", "llama3.1:8b", "--vram", "8GB", "--num-gpu", "-1"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("--num-gpu -1"), "{}", r.stderr);
}

#[test]
fn a_family_ollama_runs_with_one_slot_ignores_num_parallel() {
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/presets/qwen3-next-80b-a3b-instruct.json"
    );
    let r = plan_with_env(
        &[("OLLAMA_NUM_PARALLEL", "4")],
        &[
            "-m", model, "--engine", "ollama", "--vram", "80GB", "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let j = json(&r.stdout);
    assert_eq!(j["ollama"]["num_parallel"], 1);
    assert_eq!(j["workload"]["batch"], 1);
    let notes = j["notes"].to_string();
    assert!(
        notes.contains("ollama runs qwen3_next with one slot whatever OLLAMA_NUM_PARALLEL says"),
        "{notes}"
    );
}
