//! Model files a hostile (or unlucky) user hands `--model`: safetensors headers whose byte ranges
//! lie, a checkpoint that is not the model its config.json describes, an index without its
//! shards, zero GGUF fields, a broken symlink, odd dtypes and quantization bits, a preset found by
//! a near name, and Python's `Infinity` in a config.json. Each runs the real binary on real files.

mod util;

use std::path::Path;

use util::{gguf_header, run, temp, write, Run};

const MISTRAL: &str = include_str!("../presets/mistral-7b-instruct-v0.2.json");

/// A safetensors file: 8-byte little-endian header length, the JSON header, then `data` bytes.
fn safetensors(path: &Path, header: &str, data: usize) {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend(header.as_bytes());
    b.extend(vec![0u8; data]);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(path, b).unwrap();
}

fn plan(home: &Path, model: &Path) -> Run {
    plan_args(home, &[model.to_str().unwrap()])
}

fn plan_args(home: &Path, model_and_more: &[&str]) -> Run {
    let mut args = vec!["plan", "--vram", "24GiB", "--model"];
    args.extend_from_slice(model_and_more);
    run(home, &args)
}

fn refused(r: &Run, words: &[&str]) {
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    for w in words {
        assert!(r.stderr.contains(w), "`{w}` not in: {}", r.stderr);
    }
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

#[test]
fn a_header_whose_byte_ranges_lie_is_refused_naming_file_and_tensor() {
    let home = temp();
    let cases = [
        // data_offsets [0, 2^63] in a 200-byte file read as 8,589,934,592 GiB of weights.
        (
            "past-end",
            r#"{"w":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,9223372036854775808]}}"#,
            8,
            "past the 8 data bytes",
        ),
        (
            "backwards",
            r#"{"w":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}}"#,
            8,
            "end before they start",
        ),
        (
            "overlap",
            r#"{"v":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
            12,
            "overlap",
        ),
        (
            "size",
            r#"{"w":{"dtype":"BF16","shape":[4096,4096],"data_offsets":[0,8]}}"#,
            8,
            "needs 33554432 bytes",
        ),
    ];
    for (name, header, data, why) in cases {
        let dir = home.path().join(name);
        write(&dir.join("config.json"), MISTRAL);
        safetensors(&dir.join("model.safetensors"), header, data);
        refused(&plan(home.path(), &dir), &["model.safetensors", "`w`", why]);
    }
}

#[test]
fn a_checkpoint_that_contradicts_its_config_is_refused_with_both_counts() {
    let home = temp();
    // Mistral-7B's config.json beside one 8-byte tensor planned as 7.24 B params, FITS, exit 0.
    let dir = home.path().join("mismatch");
    write(&dir.join("config.json"), MISTRAL);
    safetensors(
        &dir.join("model.safetensors"),
        r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
        8,
    );
    refused(
        &plan(home.path(), &dir),
        &["7,241,732,096", "hold 2 parameters", "config.json"],
    );
    // The config.json of that folder, passed alone, reads the same folder.
    refused(&plan(home.path(), &dir.join("config.json")), &["hold 2"]);
    // A checkpoint that is the config's model plans (its tensors tied or not).
    let dir = home.path().join("match");
    write(&dir.join("config.json"), util::TINY_LLAMA);
    let (h, i, v, l) = (256u64, 688u64, 1000u64, 4u64);
    let kv = 2 * 32;
    let per_layer = h * h * 2 + h * kv * 2 + 3 * h * i + 2 * h;
    let params = v * h * 2 + l * per_layer + h;
    let header = format!(
        r#"{{"model.w":{{"dtype":"BF16","shape":[{params}],"data_offsets":[0,{}]}}}}"#,
        params * 2
    );
    safetensors(
        &dir.join("model.safetensors"),
        &header,
        (params * 2) as usize,
    );
    let r = plan(home.path(), &dir);
    assert!(r.code == 0 || r.code == 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("safetensors headers"), "{}", r.stdout);
    // The same with one embedding stored though the config unties them: still the same model.
    let one = params - v * h;
    let header = format!(
        r#"{{"model.w":{{"dtype":"BF16","shape":[{one}],"data_offsets":[0,{}]}}}}"#,
        one * 2
    );
    safetensors(&dir.join("model.safetensors"), &header, (one * 2) as usize);
    let r = plan(home.path(), &dir);
    assert!(r.code == 0 || r.code == 1, "{}{}", r.stdout, r.stderr);
}

#[test]
fn an_index_without_its_shards_says_so() {
    let home = temp();
    let dir = home.path().join("index-only");
    write(&dir.join("config.json"), util::TINY_LLAMA);
    write(
        &dir.join("model.safetensors.index.json"),
        r#"{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}"#,
    );
    let r = plan(home.path(), &dir);
    assert!(r.code == 0 || r.code == 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("names 2 shards the folder does not hold"),
        "{}",
        r.stdout
    );
}

#[test]
fn a_zero_gguf_field_is_zero_not_missing() {
    let home = temp();
    let meta: Vec<(String, u64)> = [
        ("llama.block_count", 2u64),
        ("llama.embedding_length", 64),
        ("llama.feed_forward_length", 128),
        ("llama.attention.head_count", 0),
        ("llama.vocab_size", 100),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), *v))
    .collect();
    let path = home.path().join("heads-0.gguf");
    std::fs::write(&path, gguf_header(&meta, &[])).unwrap();
    let r = plan(home.path(), &path);
    refused(
        &r,
        &["llama.attention.head_count", "0 is not a valid head count"],
    );
    assert!(!r.stderr.contains("has no"), "{}", r.stderr);
}

#[cfg(unix)]
#[test]
fn a_broken_symlink_is_a_path_not_a_hub_id() {
    let home = temp();
    let link = home.path().join("org").join("model");
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(home.path().join("gone"), &link).unwrap();
    let r = plan(home.path(), &link);
    refused(&r, &["is a broken symlink", "gone"]);
}

#[test]
fn odd_dtypes_and_bits_are_stated_or_refused() {
    let home = temp();
    let with = |name: &str, extra: &str| {
        let text = util::TINY_LLAMA
            .trim_end()
            .trim_end_matches('}')
            .to_string()
            + extra
            + "}";
        write(&home.path().join(name).join("config.json"), &text)
    };
    let f12 = write(
        &home.path().join("f12").join("config.json"),
        &util::TINY_LLAMA.replace("bfloat16", "float12"),
    );
    let r = plan(home.path(), &f12);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("unknown torch_dtype `float12`"),
        "{}",
        r.stdout
    );
    for bits in ["0", "1", "17"] {
        let cfg = with(
            &format!("gptq{bits}"),
            &format!(r#","quantization_config":{{"quant_method":"gptq","bits":{bits}}}"#),
        );
        refused(
            &plan(home.path(), &cfg),
            &["quantization_config.bits", "2 to 8 bits"],
        );
    }
    let cfg = with(
        "awq0",
        r#","quantization_config":{"quant_method":"awq","w_bit":0}"#,
    );
    refused(&plan(home.path(), &cfg), &["quantization_config.w_bit"]);
    let cfg = with(
        "gptq3",
        r#","quantization_config":{"quant_method":"gptq","bits":3}"#,
    );
    assert_eq!(plan(home.path(), &cfg).code, 0);
}

#[test]
fn a_preset_found_by_a_near_name_says_which() {
    let home = temp();
    let r = plan_args(home.path(), &["meta-llama/Llama-3.1-70B-Instruct"]);
    assert!(r.code == 0 || r.code == 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains(
            "planned with the preset for meta-llama/Llama-3.3-70B-Instruct (same architecture)"
        ),
        "{}",
        r.stdout
    );
    let r = plan_args(home.path(), &["Llama-3.3-70B-Instruct"]);
    assert!(
        !r.stdout.contains("planned with the preset"),
        "{}",
        r.stdout
    );
}

#[test]
fn a_config_with_pythons_infinity_plans() {
    let home = temp();
    let preset = include_str!("../presets/mamba-codestral-7b-v0.1.json");
    let text = preset.trim_end().trim_end_matches('}').to_string()
        + r#", "time_step_limit": [0.0, Infinity], "time_step_floor": NaN, "x": -Infinity}"#;
    let cfg = write(&home.path().join("mamba").join("config.json"), &text);
    let r = plan(home.path(), &cfg);
    assert!(r.code == 0 || r.code == 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("params"), "{}", r.stdout);
}
