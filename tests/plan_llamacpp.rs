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
    let meta: Vec<(String, u64)> = [
        ("llama.block_count", 32u64),
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
    let mut t: Vec<(String, Vec<u64>, u32)> = vec![
        ("token_embd.weight".into(), vec![4096, 128_256], Q4_K),
        ("output_norm.weight".into(), vec![4096], F32),
        ("output.weight".into(), vec![4096, 128_256], Q6_K),
    ];
    for i in 0..32 {
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
    let path = dir.join("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf");
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
