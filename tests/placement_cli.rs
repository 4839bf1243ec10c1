//! `plan` with several GPUs and with offload, through the real binary: the devices as typed, the
//! per-device table, the device that runs out, and a `max_memory` that is priced again.

mod util;

use serde_json::Value;
use util::llm_oom;

fn plan(args: &[&str]) -> (i32, Value, String) {
    let home = tempfile::tempdir().unwrap();
    let out = llm_oom(home.path())
        .arg("plan")
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), json, stderr)
}

fn gpus(p: &Value) -> Vec<&Value> {
    p["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["device"].as_str().unwrap().starts_with("cuda:"))
        .collect()
}

#[test]
fn a_70b_in_nf4_on_two_24_gib_cards_is_refused_by_bitsandbytes_for_its_offloaded_head() {
    let (code, r, err) = plan(&[
        "--model",
        "meta-llama/Llama-3.3-70B-Instruct",
        "--dtype",
        "nf4",
        "--vram",
        "2x24GiB",
        "--host-ram",
        "64GiB",
        "--json",
    ]);
    assert_eq!(code, 1, "{err}");
    let p = &r["placement"];
    let g = gpus(p);
    assert_eq!(g.len(), 2);
    // every layer is somewhere, all on the GPUs; the last GPU takes more (GPU 0 keeps the reserve)
    let layers: u64 = p["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["layers"].as_u64().unwrap())
        .sum();
    assert_eq!(layers, 80);
    assert_eq!(p["layers_on_gpus"], 80);
    assert!(g[1]["layers"].as_u64() > g[0]["layers"].as_u64());
    // lm_head (2 GiB in bf16) no longer fits: on the CPU, which bitsandbytes refuses
    let cpu = p["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["device"] == "cpu")
        .unwrap();
    assert!(
        cpu["holds"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h == "lm_head"),
        "{cpu}"
    );
    assert_eq!(r["verdict"]["cause"], "weights");
    assert_eq!(r["verdict"]["stage"], "load");
    assert!(r["verdict"]["summary"]
        .as_str()
        .unwrap()
        .contains("llm_int8_enable_fp32_cpu_offload"));
    // each row adds up: capacity − parts = free
    for d in &g {
        let parts: i64 = [
            "weights_bytes",
            "kv_cache_bytes",
            "activations_bytes",
            "runtime_bytes",
            "margin_bytes",
        ]
        .iter()
        .map(|k| d[*k].as_i64().unwrap())
        .sum();
        assert_eq!(
            d["capacity_bytes"].as_i64().unwrap() - parts,
            d["free_bytes"].as_i64().unwrap()
        );
    }
}

#[test]
fn the_gpu_that_runs_out_is_named_with_a_max_memory_that_fits() {
    // 70B in bf16 over 2 × 24 GiB and 128 GiB of RAM: GPU 0 fills to its free memory minus the
    // reserve, then the KV cache of every offloaded layer and the layer in transit land on it.
    let (code, r, err) = plan(&[
        "--model",
        "meta-llama/Llama-3.3-70B-Instruct",
        "--vram",
        "2x24GiB",
        "--host-ram",
        "128GiB",
        "--json",
    ]);
    assert_eq!(code, 1, "{err}");
    let p = &r["placement"];
    assert_eq!(p["runs_out"], "cuda:0");
    assert!(r["verdict"]["summary"]
        .as_str()
        .unwrap()
        .starts_with("cuda:0 runs out"));
    let fix = &p["fix"];
    assert!(
        fix["load_with"]
            .as_str()
            .unwrap()
            .contains("max_memory={0: "),
        "{fix}"
    );
    for x in fix["free_bytes"].as_array().unwrap() {
        assert!(x[1].as_i64().unwrap() >= 0, "{fix}");
    }
    assert!(fix["layers_on_gpus"].as_u64().unwrap() < p["layers_on_gpus"].as_u64().unwrap());
}

#[test]
fn a_list_of_unequal_cards_is_read_and_shown() {
    let (code, r, err) = plan(&[
        "--model",
        "mistralai/Mistral-7B-Instruct-v0.2",
        "--vram",
        "24GiB,12GiB",
        "--host-ram",
        "32GiB",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let g = gpus(&r["placement"]);
    assert_eq!(g[0]["capacity_bytes"], 24u64 << 30);
    assert_eq!(g[1]["capacity_bytes"], 12u64 << 30);
    assert_eq!(r["verdict"]["cause"], "none");
    // the single-device fields stay: the first card
    assert_eq!(r["device"]["vram_bytes"], 24u64 << 30);
    let home = tempfile::tempdir().unwrap();
    let out = llm_oom(home.path())
        .args([
            "plan",
            "--model",
            "mistralai/Mistral-7B-Instruct-v0.2",
            "--vram",
            "2xrtx4090",
            "--color",
            "never",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2 GPUs: 24.0 GiB + 24.0 GiB"), "{text}");
    assert!(text.contains("Per device (device_map=\"auto\""), "{text}");
}

#[test]
fn one_card_too_small_gets_the_offload_answer() {
    let (code, r, err) = plan(&[
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--vram",
        "12GiB",
        "--host-ram",
        "64GiB",
        "--json",
    ]);
    assert_eq!(code, 1, "{err}");
    let p = &r["placement"];
    let on = p["layers_on_gpus"].as_u64().unwrap();
    assert!(on > 0 && on < 32, "{p}");
    assert!(p["host_weights_bytes"].as_u64().unwrap() > 0);
    assert!(p["notes"][0].as_str().unwrap().contains("offloaded"));
}

#[test]
fn bad_device_lists_are_usage_errors() {
    for bad in ["0x24GiB", "65x24GiB", "24GiB,,24GiB", "2x24"] {
        let (code, _, err) = plan(&["--vram", bad]);
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(err.contains("--vram"), "{bad}: {err}");
    }
}

#[test]
fn llama_cpp_splits_layers_by_tensor_split_with_the_output_last_and_the_embeddings_on_the_cpu() {
    let (code, r, err) = plan(&[
        "--model",
        "meta-llama/Llama-3.3-70B-Instruct",
        "--dtype",
        "q4_k_m",
        "--engine",
        "llama.cpp",
        "--vram",
        "2x24GB",
        "--host-ram",
        "64GiB",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let p = &r["placement"];
    assert_eq!(p["engine"], "llama.cpp");
    assert_eq!(p["load_with"], "-ngl 999 --tensor-split 1,1");
    let g = gpus(p);
    // 81 slots over 1:1: slots 0..=40 on GPU 0, the rest and the output on GPU 1
    assert_eq!(g[0]["layers"], 41);
    assert_eq!(g[1]["layers"], 39);
    assert!(g[1]["holds"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h == "output"));
    let cpu = p["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["device"] == "cpu")
        .unwrap();
    assert_eq!(cpu["holds"][0], "token_embd");
}

#[test]
fn llama_cpp_on_a_small_card_gets_the_largest_ngl_that_fits() {
    let (code, r, err) = plan(&[
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--dtype",
        "q4_k_m",
        "--engine",
        "llama.cpp",
        "--vram",
        "4GiB",
        "--host-ram",
        "64GiB",
        "--json",
    ]);
    assert_eq!(code, 1, "{err}");
    let fix = &r["placement"]["fix"];
    let flags = fix["load_with"].as_str().unwrap();
    let ngl: u64 = flags.strip_prefix("-ngl ").unwrap().parse().unwrap();
    assert!(ngl > 0 && ngl < 33, "{flags}");
    // -ngl N puts N − 1 layers and the output on the GPU
    assert_eq!(fix["layers_on_gpus"].as_u64().unwrap(), ngl - 1);
    assert!(fix["free_bytes"][0][1].as_i64().unwrap() >= 0);
}

#[test]
fn an_engine_without_a_placement_says_it_plans_one_card() {
    // llm-oom's own candle runtime runs on one GPU
    let (_, r, err) = plan(&[
        "--model",
        "mistralai/Mistral-7B-Instruct-v0.2",
        "--engine",
        "candle",
        "--vram",
        "2x24GiB",
        "--json",
    ]);
    assert!(r.get("placement").is_none(), "{err}");
    let notes = r["notes"].to_string();
    assert!(
        notes.contains("not modelled yet") && notes.contains("one 24.0 GiB card"),
        "{notes}"
    );
}
