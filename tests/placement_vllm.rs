//! `plan --engine vllm` with tensor and pipeline parallelism, through the real binary: a row per
//! rank, the rank that runs out named, the layout that fits priced again, nodes and their labels,
//! and vLLM's own refusals as bad input.

mod util;

use serde_json::Value;
use util::llm_oom;

fn plan(args: &[&str]) -> (i32, Value, String) {
    let home = tempfile::tempdir().unwrap();
    let out = llm_oom(home.path())
        .arg("plan")
        .args(args)
        .args(["--host-ram", "64GiB"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), json, stderr)
}

fn rows(r: &Value) -> &Vec<Value> {
    r["placement"]["devices"].as_array().unwrap()
}

#[test]
fn mixtral_in_bf16_on_two_40_gb_cards_runs_a_rank_out_and_tp_4_fits() {
    let (code, r, err) = plan(&[
        "--model",
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "--engine",
        "vllm",
        "--vram",
        "2xa100-40gb",
        "--tp",
        "2",
        "--json",
    ]);
    assert_eq!(code, 1, "{err}");
    let d = rows(&r);
    assert_eq!(d.len(), 2);
    // each rank holds half of every expert, of the padded vocabulary and of the 8 KV heads
    let p = &r["placement"]["parallel"];
    assert_eq!(p["tensor_parallel_size"], 2);
    assert_eq!(p["kv_heads_per_rank"], 4);
    assert_eq!(p["vocab_per_rank"], 16_000);
    // (the norms and the 8 × 4096 routers of 32 layers are whole on both: ~1.3 MB more)
    let half = r["weights_bytes"].as_u64().unwrap() / 2;
    let w0 = d[0]["weights_bytes"].as_u64().unwrap();
    assert!(w0 >= half && w0 - half < 2 << 20, "{w0} vs {half}");
    // every row adds up, and the first short rank is the verdict's
    for row in d {
        let parts: i64 = [
            "weights_bytes",
            "kv_cache_bytes",
            "activations_bytes",
            "runtime_bytes",
            "margin_bytes",
        ]
        .iter()
        .map(|k| row[*k].as_i64().unwrap())
        .sum();
        assert_eq!(
            row["capacity_bytes"].as_i64().unwrap() - parts,
            row["free_bytes"].as_i64().unwrap()
        );
        assert_eq!(row["rank"]["tp_rank"], row["rank"]["rank"]);
    }
    assert_eq!(r["placement"]["runs_out"], "cuda:0");
    let summary = r["verdict"]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("cuda:0 runs out with --tensor-parallel-size 2"),
        "{summary}"
    );
    let fix = &r["placement"]["fix"];
    assert!(fix["load_with"]
        .as_str()
        .unwrap()
        .starts_with("--tensor-parallel-size 4"));
    assert_eq!(fix["free_bytes"].as_array().unwrap().len(), 4);
}

#[test]
fn a_405b_in_fp8_over_two_nodes_of_eight_splits_63_63_with_tp_in_the_node() {
    let (code, r, err) = plan(&[
        "--model",
        "meta-llama/Llama-3.1-405B-Instruct",
        "--dtype",
        "fp8",
        "--engine",
        "vllm",
        "--vram",
        "h100",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let p = &r["placement"]["parallel"];
    assert_eq!(
        (
            p["tensor_parallel_size"].as_u64(),
            p["pipeline_parallel_size"].as_u64()
        ),
        (Some(8), Some(2))
    );
    assert_eq!(p["layers_per_stage"], serde_json::json!([63, 63]));
    let d = rows(&r);
    assert_eq!(d.len(), 16);
    assert_eq!(d[8]["rank"]["node"], 1);
    assert_eq!(d[8]["rank"]["local_gpu"], 0);
    assert_eq!(d[8]["rank"]["pp_stage"], 1);
    // the first stage has the embeddings, the last the head; only the last computes logits
    let holds = |i: usize| d[i]["holds"].to_string();
    assert!(holds(0).contains("embed_tokens 1/8") && !holds(0).contains("lm_head"));
    assert!(holds(15).contains("lm_head 1/8"));
    assert!(d[15]["activations_bytes"].as_u64() > d[0]["activations_bytes"].as_u64());
    // the text names the node of each GPU
    let home = tempfile::tempdir().unwrap();
    let out = llm_oom(home.path())
        .args([
            "plan",
            "--model",
            "meta-llama/Llama-3.1-405B-Instruct",
            "--dtype",
            "fp8",
            "--engine",
            "vllm",
            "--vram",
            "h100",
            "--nodes",
            "2",
            "--gpus-per-node",
            "8",
            "--host-ram",
            "64GiB",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("node1/cuda:0–7 (each)"), "{text}");
    assert!(text.contains("TP within a node, PP across nodes"), "{text}");
}

#[test]
fn tp_past_the_kv_heads_replicates_them_so_the_cache_per_rank_stops_shrinking() {
    let kv_at = |tp: &str| {
        let (code, r, err) = plan(&[
            "--model",
            "meta-llama/Llama-3.3-70B-Instruct",
            "--engine",
            "vllm",
            "--vram",
            "80GiB",
            "--tp",
            tp,
            "-p",
            "16000",
            "--json",
        ]);
        assert!(code == 0 || code == 1, "{err}");
        let p = &r["placement"]["parallel"];
        (
            rows(&r)[0]["kv_cache_bytes"].as_u64().unwrap(),
            p["kv_head_replicas"].as_u64().unwrap(),
            r["placement"]["notes"].to_string(),
        )
    };
    let (four, _, _) = kv_at("4");
    let (eight, one, _) = kv_at("8");
    let (sixteen, two, notes) = kv_at("16");
    assert_eq!(four, 2 * eight);
    assert_eq!((one, two), (1, 2));
    assert_eq!(sixteen, eight);
    assert!(notes.contains("replicated on 2 ranks"), "{notes}");
}

#[test]
fn what_vllm_refuses_is_bad_input_in_one_line() {
    for args in [
        // 64 heads do not divide by 3
        &["--engine", "vllm", "--vram", "80GiB", "--tp", "3"][..],
        // the flags are vLLM's
        &["--vram", "80GiB", "--tp", "2"][..],
        // more ranks than GPUs named
        &["--engine", "vllm", "--vram", "2x80GiB", "--tp", "4"][..],
        // --nodes needs --gpus-per-node (clap)
        &["--engine", "vllm", "--vram", "80GiB", "--nodes", "2"][..],
    ] {
        let mut all = vec!["--model", "meta-llama/Llama-3.3-70B-Instruct"];
        all.extend_from_slice(args);
        let (code, _, err) = plan(&all);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(!err.trim().is_empty(), "{args:?}");
    }
    let (_, _, err) = plan(&[
        "--model",
        "meta-llama/Llama-3.3-70B-Instruct",
        "--engine",
        "vllm",
        "--vram",
        "80GiB",
        "--tp",
        "3",
    ]);
    assert!(
        err.contains("divisible by tensor parallel size (3)"),
        "{err}"
    );
}

#[test]
fn one_card_too_small_gets_the_tensor_parallel_size_that_fits_priced_per_rank() {
    let (code, r, err) = plan(&[
        "--model",
        "meta-llama/Llama-3.3-70B-Instruct",
        "--engine",
        "vllm",
        "--vram",
        "80GiB",
        "--json",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(r.get("placement").is_none());
    let a = &r["across_gpus"][0];
    assert_eq!(a["change"]["kind"], "more_gpus");
    let n = a["change"]["value"].as_u64().unwrap();
    assert!(a["how"]
        .as_str()
        .unwrap()
        .starts_with(&format!("--tensor-parallel-size {n}")));
    assert_eq!(a["per_device"].as_array().unwrap().len() as u64, n);
    assert_eq!(a["new_budget"]["fits"], true);
}
