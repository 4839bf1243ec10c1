//! `plan --engine llama.cpp` answers in llama.cpp's words: the `-c` the user set is what the KV
//! cache costs, and the remedies are its flags, each priced (`-c`, `-ctk`/`-ctv`, `-fa`, `-np`,
//! `-ngl`), on a real Q4_K_M GGUF header of Llama-3.1-8B's shapes.

mod util;

use std::path::{Path, PathBuf};

use util::{gguf_header, json, run, temp};

/// ggml types as the GGUF stores them.
const F32: u32 = 0;
const Q4_K: u32 = 12;
const Q6_K: u32 = 14;

/// Llama-3.1-8B's tensor table as a Q4_K_M GGUF holds it (Q6_K for V, the FFN down projection
/// and the output, as llama-quantize's Q4_K_M mix does for half of them; here for all).
fn write_llama_8b_q4km(dir: &Path) -> PathBuf {
    write_llama_8b_with_nextn(dir, 0)
}

/// The same with `nextn` multi-token-prediction blocks after the 32 (`block_count` counts them).
fn write_llama_8b_with_nextn(dir: &Path, nextn: u64) -> PathBuf {
    let mut meta: Vec<(String, u64)> = [
        ("llama.block_count", 32 + nextn),
        ("llama.embedding_length", 4096),
        ("llama.feed_forward_length", 14336),
        ("llama.attention.head_count", 32),
        ("llama.attention.head_count_kv", 8),
        ("llama.context_length", 131_072),
        ("llama.vocab_size", 128_256),
        ("general.file_type", 15),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), *v))
    .collect();
    if nextn > 0 {
        meta.push(("llama.nextn_predict_layers".into(), nextn));
    }
    let mut t: Vec<(String, Vec<u64>, u32)> = vec![
        ("token_embd.weight".into(), vec![4096, 128_256], Q4_K),
        ("output_norm.weight".into(), vec![4096], F32),
        ("output.weight".into(), vec![4096, 128_256], Q6_K),
    ];
    for i in 0..32 + nextn {
        let b = |n: &str| format!("blk.{i}.{n}.weight");
        t.push((b("attn_norm"), vec![4096], F32));
        t.push((b("attn_q"), vec![4096, 4096], Q4_K));
        t.push((b("attn_k"), vec![4096, 1024], Q4_K));
        t.push((b("attn_v"), vec![4096, 1024], Q6_K));
        t.push((b("attn_output"), vec![4096, 4096], Q4_K));
        t.push((b("ffn_norm"), vec![4096], F32));
        t.push((b("ffn_gate"), vec![4096, 14336], Q4_K));
        t.push((b("ffn_up"), vec![4096, 14336], Q4_K));
        t.push((b("ffn_down"), vec![14336, 4096], Q6_K));
    }
    let path = dir.join(format!("Meta-Llama-3.1-8B-Instruct-Q4_K_M-{nextn}.gguf"));
    std::fs::write(&path, gguf_header(&meta, &t)).unwrap();
    path
}

fn plan(dir: &Path, model: &Path, extra: &[&str]) -> util::Run {
    let mut args = vec![
        "plan",
        "-m",
        model.to_str().unwrap(),
        "--engine",
        "llama.cpp",
        "--vram",
        "8GB",
    ];
    args.extend_from_slice(extra);
    run(dir, &args)
}

/// The value of the remedy line that starts with `flag ` (`-c 22528` → "22528").
fn remedy(out: &str, flag: &str) -> Option<String> {
    out.lines()
        .map(str::trim)
        .find(|l| l.starts_with(&format!("{flag} ")))
        .map(|l| l[flag.len() + 1..].to_string())
}

#[test]
fn a_32k_context_on_8gb_blames_the_c_and_the_c_it_suggests_is_the_largest_that_fits() {
    let home = temp();
    let m = write_llama_8b_q4km(home.path());
    let r = plan(home.path(), &m, &["--ctx-size", "32768"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("kv_cache: -c 32,768 needs a 4.00 GiB KV cache"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("tokens per sequence"), "{}", r.stdout);
    assert!(r.stdout.contains("stage load"), "{}", r.stdout);
    assert!(
        r.stdout.contains("-fa on -ctk q8_0 -ctv q8_0"),
        "{}",
        r.stdout
    );
    let ngl: u64 = remedy(&r.stdout, "-ngl")
        .unwrap_or_else(|| panic!("no -ngl remedy:\n{}", r.stdout))
        .parse()
        .unwrap();
    assert!((1..32).contains(&ngl), "{ngl}");

    let c: u64 = remedy(&r.stdout, "-c")
        .unwrap_or_else(|| panic!("no -c remedy:\n{}", r.stdout))
        .parse()
        .unwrap();
    assert_eq!(c % 256, 0);
    assert!(c < 32_768 && c > 2304, "{c}");
    let at = |c: u64| plan(home.path(), &m, &["--ctx-size", &c.to_string()]).code;
    assert_eq!(at(c), 0, "-c {c} was said to fit");
    assert_eq!(
        at(c + 256),
        1,
        "-c {} fits too: {c} is not the largest",
        c + 256
    );

    // The q8_0 cache the remedy prices: half the bytes, and the plan with those flags agrees.
    let j = json(&plan(home.path(), &m, &["--ctx-size", "32768", "--json"]).stdout);
    let q8 = j["remedies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["how"] == "-fa on -ctk q8_0 -ctv q8_0")
        .unwrap()["new_budget"]["peak_bytes"]
        .as_u64()
        .unwrap();
    let with_q8 = json(
        &plan(
            home.path(),
            &m,
            &["--ctx-size", "32768", "--kv-dtype", "q8_0", "--json"],
        )
        .stdout,
    );
    assert_eq!(with_q8["components"]["total"].as_u64().unwrap(), q8);
}

#[test]
fn flash_attention_off_is_priced_as_fa_on() {
    let home = temp();
    let m = write_llama_8b_q4km(home.path());
    let r = plan(
        home.path(),
        &m,
        &["--ctx-size", "32768", "--flash-attn", "off"],
    );
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("turn flash attention on"), "{}", r.stdout);
    assert_eq!(
        remedy(&r.stdout, "-fa").as_deref(),
        Some("on"),
        "{}",
        r.stdout
    );
}

#[test]
fn parallel_slots_without_c_multiply_the_cache_and_np_is_the_remedy() {
    let home = temp();
    let m = write_llama_8b_q4km(home.path());
    let r = plan(
        home.path(),
        &m,
        &[
            "--parallel",
            "8",
            "--prompt-tokens",
            "8000",
            "--max-new-tokens",
            "192",
        ],
    );
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("the context of 8 × 8,192 tokens (-c 65,536, 8 slots of 8,192 cells)"),
        "{}",
        r.stdout
    );
    let np: u64 = remedy(&r.stdout, "-np")
        .and_then(|v| v.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| panic!("no -np remedy:\n{}", r.stdout))
        .parse()
        .unwrap();
    assert!((1..8).contains(&np), "{np}");
    let r = plan(
        home.path(),
        &m,
        &[
            "--parallel",
            &np.to_string(),
            "--prompt-tokens",
            "8000",
            "--max-new-tokens",
            "192",
        ],
    );
    assert_eq!(r.code, 0, "-np {np}: {}{}", r.stdout, r.stderr);
}

/// llama-server's own context (`-c 0`, `--fit` on by default in b11312): on 8 GB the trained
/// 131,072 tokens do not fit, so `--fit` lowers `-c` by llama.cpp's interpolation to what leaves
/// 1,024 MiB free; 4 slots (-np auto) share one cache; the plan at that `-c` fits and one 256
/// cells more, with the same slots, leaves less than the target.
#[test]
fn c_0_is_the_context_fit_picks_and_it_leaves_the_target_free() {
    let home = temp();
    let m = write_llama_8b_q4km(home.path());
    let r = plan(home.path(), &m, &["-c", "0", "--json"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let j = json(&r.stdout);
    let s = &j["llama_server"];
    assert_eq!(s["outcome"], "context_reduced", "{s}");
    assert_eq!(
        (s["slots"].as_u64(), s["unified"].as_bool()),
        (Some(4), Some(true))
    );
    assert_eq!(s["n_ctx_auto"].as_u64(), Some(131_072));
    let n_ctx = s["n_ctx"].as_u64().unwrap();
    assert_eq!(n_ctx % 256, 0);
    assert!((4096..131_072).contains(&n_ctx), "{n_ctx}");
    let free = s["free_bytes"].as_u64().unwrap();
    let target = s["target_bytes"].as_u64().unwrap();
    assert_eq!(target, 1 << 30);
    assert!(free - s["projected_bytes"].as_u64().unwrap() >= target);
    assert_eq!(j["workload"]["llama"]["ctx_size"].as_u64(), Some(n_ctx));
    assert_eq!(j["workload"]["llama"]["unified"].as_bool(), Some(true));

    // The text says what llama-server does, and the same -c given by hand is the same plan.
    let t = plan(home.path(), &m, &["-c", "0"]);
    assert!(
        t.stdout.contains(&format!(
            "llama-server --fit sets -c {},{:03}",
            n_ctx / 1000,
            n_ctx % 1000
        )),
        "{}",
        t.stdout
    );
    let by_hand = json(
        &plan(
            home.path(),
            &m,
            &[
                "-c",
                &n_ctx.to_string(),
                "-np",
                "4",
                "--kv-unified",
                "--fit",
                "off",
                "--json",
            ],
        )
        .stdout,
    );
    assert_eq!(by_hand["components"]["total"], j["components"]["total"]);

    // --fit-target 2048 leaves more, so a smaller context.
    let more = json(&plan(home.path(), &m, &["-c", "0", "-fitt", "2048", "--json"]).stdout);
    assert!(more["llama_server"]["n_ctx"].as_u64().unwrap() < n_ctx);
    // --fit-ctx at the trained context: llama.cpp does not lower it, it moves layers instead.
    let r = plan(
        home.path(),
        &m,
        &["-c", "0", "--fit-ctx", "131072", "--json"],
    );
    assert_eq!(r.code, 0, "{}", r.stdout);
    let j = json(&r.stdout);
    assert_eq!(j["llama_server"]["outcome"], "layers_to_cpu");
    assert_eq!(j["llama_server"]["n_ctx"].as_u64(), Some(131_072));
}

/// Separate slots (`-np 2` without --kv-unified): the automatic context is the trained one for
/// each, and --fit rounds to 256 cells a stream.
#[test]
fn separate_slots_double_the_automatic_context() {
    let home = temp();
    let m = write_llama_8b_q4km(home.path());
    let j = json(
        &run(
            home.path(),
            &[
                "plan",
                "-m",
                m.to_str().unwrap(),
                "-c",
                "0",
                "-np",
                "2",
                "--vram",
                "24GB",
                "--json",
            ],
        )
        .stdout,
    );
    let s = &j["llama_server"];
    assert_eq!(
        (s["slots"].as_u64(), s["unified"].as_bool()),
        (Some(2), Some(false))
    );
    assert_eq!(s["n_ctx_auto"].as_u64(), Some(262_144));
    assert_eq!(s["n_ctx"].as_u64().unwrap() % 512, 0);
}

/// Not even --fit-ctx's 4,096 tokens leave the target with every layer on a 4 GB card: llama-server
/// keeps some layers on the GPU and runs the rest on the CPU; with --fit off it runs out.
#[test]
fn on_a_small_card_fit_moves_layers_and_fit_off_runs_out() {
    let home = temp();
    let m = write_llama_8b_q4km(home.path());
    let r = run(
        home.path(),
        &[
            "plan",
            "-m",
            m.to_str().unwrap(),
            "-c",
            "0",
            "--vram",
            "4GiB",
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let j = json(&r.stdout);
    assert_eq!(j["llama_server"]["outcome"], "layers_to_cpu");
    assert_eq!(j["llama_server"]["n_ctx"].as_u64(), Some(4096));
    let on_gpu = j["llama_server"]["layers_on_gpu"].as_u64().unwrap();
    assert!((1..32).contains(&on_gpu), "{on_gpu}");
    let t = run(
        home.path(),
        &[
            "plan",
            "-m",
            m.to_str().unwrap(),
            "-c",
            "0",
            "--vram",
            "4GiB",
        ],
    );
    assert!(t.stdout.contains("RUNS, PARTLY ON THE CPU"), "{}", t.stdout);
    assert!(
        t.stdout
            .contains(&format!("llama-server --fit keeps {on_gpu} of 32 layers")),
        "{}",
        t.stdout
    );
    let off = run(
        home.path(),
        &[
            "plan",
            "-m",
            m.to_str().unwrap(),
            "-c",
            "0",
            "-fit",
            "off",
            "--vram",
            "4GiB",
        ],
    );
    assert_eq!(off.code, 1, "{}", off.stdout);
}

#[test]
fn fit_flags_belong_to_llama_server() {
    let home = temp();
    for (args, says) in [
        (
            vec![
                "plan",
                "-m",
                "meta-llama/Llama-3.1-8B-Instruct",
                "--fit",
                "on",
            ],
            "llama-server's",
        ),
        (
            vec![
                "plan",
                "-m",
                "llama3.1:8b",
                "--engine",
                "ollama",
                "--fit",
                "on",
            ],
            "ollama",
        ),
        (
            vec!["plan", "-m", "x.gguf", "--kv-unified"],
            "--kv-unified is llama-server's",
        ),
        (
            vec!["plan", "-m", "x.gguf", "-c", "0", "--fit-target", "-1"],
            "--fit-target -1",
        ),
    ] {
        let r = run(home.path(), &args);
        assert_eq!(r.code, 2, "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
    }
}

#[test]
fn nextn_blocks_are_left_out_of_the_weights_and_the_cache_as_llama_cpp_skips_them() {
    let dir = temp();
    let plain = write_llama_8b_q4km(dir.path());
    let mtp = write_llama_8b_with_nextn(dir.path(), 1);
    let a = json(&plan(dir.path(), &plain, &["--json"]).stdout);
    let r = plan(dir.path(), &mtp, &["--json"]);
    let b = json(&r.stdout);
    for k in ["weights", "kv_cache"] {
        assert_eq!(a["components"][k], b["components"][k], "{k}");
    }
    assert_eq!(a["model"]["layers"], 32);
    assert_eq!(b["model"]["layers"], 32);
    assert_eq!(a["model"]["parameters"], b["model"]["parameters"]);
    let notes = b["notes"].to_string();
    assert!(
        notes.contains("+ 1 multi-token-prediction (nextn) block(s) in the GGUF"),
        "{notes}"
    );
}

#[test]
fn a_quantized_v_cache_with_flash_attention_off_is_refused_with_both_ways_out_priced() {
    let home = temp();
    let m = write_llama_8b_q4km(home.path());
    let args = ["--ctx-size", "8192", "--kv-dtype", "q8_0"];
    let at = |extra: &[&str]| plan(home.path(), &m, &[&args[..], extra].concat());
    let r = at(&["--flash-attn", "off"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("llama.cpp REFUSES TO START"),
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
    assert_eq!(
        remedy(&r.stdout, "-fa").as_deref(),
        Some("on"),
        "{}",
        r.stdout
    );
    assert_eq!(
        remedy(&r.stdout, "-ctv").as_deref(),
        Some("f16"),
        "{}",
        r.stdout
    );
    // -fa on: the plan with flash attention on, which llama.cpp loads (and `auto` turns it on).
    let j = json(&at(&["--flash-attn", "off", "--json"]).stdout);
    let peak = |how: &str| {
        j["remedies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["how"] == how)
            .unwrap_or_else(|| panic!("no {how}: {j}"))["new_budget"]["peak_bytes"]
            .as_u64()
            .unwrap()
    };
    let on = at(&["--flash-attn", "on", "--json"]);
    assert_eq!(on.code, 0, "{}{}", on.stdout, on.stderr);
    assert_eq!(
        json(&on.stdout)["components"]["total"].as_u64().unwrap(),
        peak("-fa on")
    );
    assert_eq!(at(&[]).code, 0);
    // -ctv f16: K stays q8_0, V in f16 — half-way from the q8_0 cache to the f16 one.
    let q8 = j["components"]["total"].as_u64().unwrap();
    let f16 = json(
        &plan(
            home.path(),
            &m,
            &["--ctx-size", "8192", "--flash-attn", "off", "--json"],
        )
        .stdout,
    )["components"]["total"]
        .as_u64()
        .unwrap();
    assert!(f16 > q8, "{f16} {q8}");
    assert_eq!(peak("-ctv f16"), q8 + (f16 - q8) / 2);
}
