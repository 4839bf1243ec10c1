//! llama.cpp's profile replayed against llama.cpp itself: every run recorded on the H200 in
//! docs/calibration/llamacpp-h200-2026-12-01.jsonl (scripts/gpu/llamacpp-h200.sh: llama.cpp's own
//! buffer report and the device's NVML peak) is planned again with the same knobs, and plan's
//! buffers must match: the KV buffer exactly (to llama.cpp's printed 0.01 MiB), the model's GPU
//! bytes and the compute buffer within the tolerances below, the device peak within 3 %, and the
//! largest context under a cap within [0.90, 1.00] of the one that loaded.

mod util;

use serde_json::Value;
use util::{json, run, temp};

const RECORDS: &str = "docs/calibration/llamacpp-h200-2026-12-01.jsonl";
const MIB: f64 = 1048576.0;

fn records() -> Vec<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(RECORDS);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The model and dtype of a GGUF the measuring script wrote (`<preset>-<TYPE>.gguf`, `q8.gguf`).
fn model_of(gguf: &str) -> (String, &'static str) {
    let root = env!("CARGO_MANIFEST_DIR");
    if gguf == "q8.gguf" {
        return (format!("{root}/presets/llama-3.1-8b-instruct.json"), "q8_0");
    }
    let name = gguf.trim_end_matches(".gguf").trim_end_matches("-Q4_K_M");
    let preset = format!("{root}/presets/{name}.json");
    let config = if std::path::Path::new(&preset).exists() {
        preset
    } else {
        format!("{root}/scripts/gpu/gguf-configs/{name}.json")
    };
    (config, "q4_k_m")
}

/// plan's flags for llama.cpp's: `-c`, `-ub`, `-b`, `-fa`, `-ctk`, `-np`.
fn plan_args(args: &[Value], config: &str, dtype: &str, ctx: Option<u64>) -> Vec<String> {
    let mut out: Vec<String> = [
        "plan",
        "--model",
        config,
        "--engine",
        "llama.cpp",
        "--dtype",
        dtype,
        "-p",
        "1",
        "-n",
        "1",
        "--vram",
        "140GiB",
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let a: Vec<&str> = args.iter().filter_map(Value::as_str).collect();
    let mut i = 0;
    while i + 1 < a.len() {
        let v = a[i + 1].to_string();
        match a[i] {
            "-c" => out.extend(["--ctx-size".into(), v]),
            "-ub" => out.extend(["--ubatch-size".into(), v]),
            "-b" => out.extend(["--batch-size".into(), v]),
            "-fa" => out.extend(["--flash-attn".into(), v]),
            "-ctk" => out.extend(["--kv-dtype".into(), v]),
            "-np" => out.extend(["--batch".into(), v]),
            _ => {}
        }
        i += 2;
    }
    if let Some(c) = ctx {
        out.extend(["--ctx-size".into(), c.to_string()]);
    }
    out
}

/// The MiB llama.cpp printed for `what` on the GPU.
fn gpu_mib(rec: &Value, what: &str) -> f64 {
    rec["buffers"]
        .as_array()
        .map(|b| {
            b.iter()
                .filter(|x| x["what"] == what && x["device"] == "CUDA0")
                .filter_map(|x| x["mib"].as_f64())
                .sum()
        })
        .unwrap_or(0.0)
}

fn ngl(rec: &Value) -> Option<u64> {
    let a: Vec<&str> = rec["args"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    a.windows(2)
        .find(|w| w[0] == "-ngl")
        .and_then(|w| w[1].parse().ok())
}

#[test]
fn every_recorded_run_is_replayed_within_its_tolerances() {
    let home = temp();
    let mut rows = 0;
    for rec in records()
        .iter()
        .filter(|r| r["kind"] == "run" && r["rc"] == 0)
    {
        if ngl(rec).is_some_and(|n| n < 99) {
            continue; // partial offload: placement's table, checked in its own test below
        }
        let gguf = rec["gguf"].as_str().expect("gguf");
        let (config, dtype) = model_of(gguf);
        let r = run(
            home.path(),
            &plan_args(rec["args"].as_array().expect("args"), &config, dtype, None)
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        assert_eq!(r.code, 0, "{}: {}", rec["tag"], r.stderr);
        let j = json(&r.stdout);
        let c = &j["components"];
        let tag = rec["tag"].as_str().unwrap_or("?");
        let kv = c["kv_cache"].as_f64().expect("kv") / MIB;
        assert!(
            (kv - gpu_mib(rec, "kv")).abs() < 0.01,
            "{tag}: KV {kv:.2} MiB vs llama.cpp's {:.2}",
            gpu_mib(rec, "kv")
        );
        let compute = c["activations"].as_f64().expect("compute") / MIB;
        let measured = gpu_mib(rec, "compute");
        let tol = if tag.starts_with("qwen3-30b-a3b") {
            MOE_COMPUTE_TOL * measured
        } else {
            0.1
        };
        assert!(
            (compute - measured).abs() <= tol,
            "{tag}: compute {compute:.2} MiB vs llama.cpp's {measured:.2}"
        );
        let model = c["weights"].as_f64().expect("weights") / MIB;
        let on_gpu = gpu_mib(rec, "model");
        assert!(
            (model - on_gpu).abs() <= 0.005 * on_gpu,
            "{tag}: model {model:.2} MiB vs llama.cpp's {on_gpu:.2} on the GPU"
        );
        let peak = rec["peak_used"].as_f64().expect("peak") / MIB;
        let predicted =
            (c["total"].as_f64().expect("total") - c["margin"].as_f64().expect("margin")) / MIB;
        // `LLM_OOM_TABLE=1 cargo test --test llamacpp_replay -- --nocapture` prints
        // docs/accuracy.md's rows.
        if std::env::var_os("LLM_OOM_TABLE").is_some() {
            println!(
                "| {tag} | {model:.0} / {on_gpu:.0} | {kv:.2} / {:.2} | {compute:.1} / {measured:.1} ({:+.1} %) | {predicted:.0} / {peak:.0} ({:+.1} %) |",
                gpu_mib(rec, "kv"),
                100.0 * (compute - measured) / measured.max(1e-9),
                100.0 * (predicted - peak) / peak.max(1e-9)
            );
        }
        assert!(
            (predicted - peak).abs() <= 0.03 * peak,
            "{tag}: peak {predicted:.0} MiB predicted, {peak:.0} measured"
        );
        rows += 1;
    }
    assert!(rows >= 20, "only {rows} runs replayed");
}

/// The dense models' compute buffers are exact (to the 0.01 MiB llama.cpp prints); the MoE's is
/// not: Qwen3-30B-A3B holds 40.8 MiB more than the formula at -c 4096 (341.54 MiB) and 28.8 MiB
/// more without flash attention, the expert routing's tensors (one model measured, not modelled).
const MOE_COMPUTE_TOL: f64 = 0.13;

#[test]
fn the_largest_context_under_a_cap_is_within_ninety_percent_of_what_loaded() {
    let home = temp();
    let mut n = 0;
    for lim in records().iter().filter(|r| r["kind"] == "ctx_limit") {
        let Some(ok) = lim["largest_ok"].as_u64() else {
            continue;
        };
        let gguf = lim["gguf"].as_str().expect("gguf");
        let (config, dtype) = model_of(gguf);
        let free = lim["device_free"].as_u64().expect("device_free");
        let mut args = plan_args(lim["args"].as_array().expect("args"), &config, dtype, None);
        // plan's budget on a card of what the ballast left free: the largest -c that fits
        let at = args.iter().position(|a| a == "140GiB").expect("vram");
        args[at] = format!("{free}B");
        let r = run(
            home.path(),
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let j = json(&r.stdout);
        // the largest prompt + new tokens of one sequence: the context llama.cpp is given
        let predicted = j["budget"]["table"]
            .as_array()
            .and_then(|t| t.iter().find(|r| r["concurrency"] == 1))
            .and_then(|r| r["max_total_tokens"].as_u64())
            .unwrap_or(0);
        let tag = lim["tag"].as_str().unwrap_or("?");
        let share = predicted as f64 / ok as f64;
        if std::env::var_os("LLM_OOM_TABLE").is_some() {
            println!(
                "| {tag} | {} MiB free | {predicted} | {ok} | {share:.3} |",
                free >> 20
            );
        }
        assert!(
            (0.90..=1.0).contains(&share),
            "{tag}: predicted -c {predicted}, {ok} loaded ({share:.3})"
        );
        n += 1;
    }
    assert!(n >= 4, "only {n} context limits replayed");
}

/// Partial offload (`-ngl 16`: the last 15 layers and the output on the GPU), replayed through
/// llama.cpp's placement (`placement::llamacpp::plan_layers`): the GPU's model and KV bytes
/// exactly, its peak (model + KV + compute + runtime) within 3 % of NVML's. The compute buffer of
/// a split graph is not always the full-offload one (Mistral: 185 MiB against 140), which the
/// peak's tolerance absorbs.
#[test]
fn partial_offload_is_replayed_through_llama_cpps_placement() {
    use llm_oom::dtype::WeightDtype;
    use llm_oom::estimate::{estimate, Engine, LlamaCppArgs, Workload};
    use llm_oom::placement::accelerate::{Place, Strategy};
    use llm_oom::placement::llamacpp::{plan_layers, Split};
    use llm_oom::placement::Devices;
    let mut n = 0;
    for rec in records()
        .iter()
        .filter(|r| r["kind"] == "run" && r["rc"] == 0)
    {
        let Some(layers) = ngl(rec).filter(|&l| l < 99) else {
            continue;
        };
        let gguf = rec["gguf"].as_str().expect("gguf");
        let (config, dtype) = model_of(gguf);
        let spec = llm_oom::model::source::resolve(&config)
            .expect("config")
            .spec;
        let dtype: WeightDtype = dtype.parse().expect("dtype");
        let w = Workload {
            prompt_tokens: 1,
            max_new_tokens: 1,
            batch: 1,
            weight_dtype: dtype,
            kv_dtype: dtype.compute_kv_dtype(),
            engine: Engine::LlamaCpp,
            llama: LlamaCppArgs {
                ctx_size: Some(32768),
                ..Default::default()
            },
        };
        let vram = 140u64 << 30;
        let e = estimate(&spec, &w, vram);
        let d = Devices {
            gpus: vec![vram],
            host_ram: Some(128 << 30),
            max_memory: None,
            context: 0,
            strategy: Strategy::Balanced,
        };
        let split = Split {
            ngl: layers,
            tensor_split: vec![1.0],
            kv_offload: true,
        };
        let p = plan_layers(&spec, dtype, &d, &split, &e);
        let gpu = p
            .devices
            .iter()
            .find(|x| x.device == Place::Gpu(0))
            .expect("cuda:0 row");
        let tag = rec["tag"].as_str().unwrap_or("?");
        let mib = |b: u64| b as f64 / MIB;
        assert!(
            (mib(gpu.weights_bytes) - gpu_mib(rec, "model")).abs() <= 0.005 * gpu_mib(rec, "model"),
            "{tag}: model {:.2} vs {:.2}",
            mib(gpu.weights_bytes),
            gpu_mib(rec, "model")
        );
        assert!(
            (mib(gpu.kv_cache_bytes) - gpu_mib(rec, "kv")).abs() < 0.01,
            "{tag}: KV {:.2} vs {:.2}",
            mib(gpu.kv_cache_bytes),
            gpu_mib(rec, "kv")
        );
        let predicted =
            mib(gpu.weights_bytes + gpu.kv_cache_bytes + gpu.activations_bytes + gpu.runtime_bytes);
        let peak = rec["peak_used"].as_f64().expect("peak") / MIB;
        if std::env::var_os("LLM_OOM_TABLE").is_some() {
            println!("| {tag} | {:.0} / {:.0} | {:.2} / {:.2} | {:.1} / {:.1} | {predicted:.0} / {peak:.0} ({:+.1} %) |",
                mib(gpu.weights_bytes), gpu_mib(rec, "model"), mib(gpu.kv_cache_bytes), gpu_mib(rec, "kv"),
                mib(gpu.activations_bytes), gpu_mib(rec, "compute"), 100.0 * (predicted - peak) / peak);
        }
        assert!(
            (predicted - peak).abs() <= 0.03 * peak,
            "{tag}: peak {predicted:.0} vs {peak:.0}"
        );
        n += 1;
    }
    assert_eq!(n, 3, "the three -ngl 16 runs");
}

/// llama.cpp's own `--fit` (on by default, context unset) under a cap, as recorded on the H200
/// (b11312's llama-completion: one sequence): plan with `-c 0 -np 1` on the memory the ballast
/// left picks the context llama.cpp picked, to the token, and keeps the trained context where
/// llama.cpp changed nothing.
#[test]
fn llama_cpps_own_fit_is_replayed_to_the_token() {
    let home = temp();
    let mut n = 0;
    for rec in records().iter().filter(|r| r["kind"] == "fit") {
        let tag = rec["tag"].as_str().unwrap_or("?");
        let gguf = format!("{}-Q4_K_M.gguf", tag.split(':').next().unwrap_or("?"));
        let (config, dtype) = model_of(&gguf);
        let free = rec["device_free"].as_u64().expect("device_free");
        // llama.cpp's chosen context: its `llama_context: n_ctx = N` line
        let chosen: u64 = rec["fit_lines"]
            .as_array()
            .expect("fit_lines")
            .iter()
            .filter_map(Value::as_str)
            .find_map(|l| l.split("llama_context: n_ctx                 = ").nth(1))
            .and_then(|n| n.trim().parse().ok())
            .expect("n_ctx line");
        // plan's flags for llama.cpp's: one sequence, the context left to --fit (`-c 0`), on
        // the memory the ballast left free
        let np = [Value::from("-np"), Value::from("1")];
        let mut args = plan_args(&np, &config, dtype, Some(0));
        let at = args.iter().position(|a| a == "140GiB").expect("vram");
        args[at] = format!("{free}B");
        let r = run(
            home.path(),
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let j = json(&r.stdout);
        let n_ctx = j["llama_server"]["n_ctx"]
            .as_u64()
            .unwrap_or_else(|| panic!("{tag}: {j}"));
        assert_eq!(n_ctx, chosen, "{tag}: plan's --fit context");
        n += 1;
    }
    assert_eq!(n, 2, "the two --fit records");
}
