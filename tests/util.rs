//! A small harness that runs the real `llm-oom` binary the way a user does (after ripgrep's
//! tests/util.rs): a temp dir, a command builder, the output and exit code.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The command's stdout as JSON (a test failure naming the output otherwise).
pub fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"))
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// The binary with a clean, offline Hugging Face environment rooted in `home`.
pub fn llm_oom(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_llm-oom"));
    c.env("HF_HOME", home.join("hf"))
        .env_remove("HF_HUB_CACHE")
        .env("HF_HUB_OFFLINE", "1")
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG");
    // ollama's settings, read by `plan --engine ollama`: a test sets the ones it means.
    for v in [
        "OLLAMA_NUM_PARALLEL",
        "OLLAMA_KV_CACHE_TYPE",
        "OLLAMA_FLASH_ATTENTION",
        "OLLAMA_CONTEXT_LENGTH",
    ] {
        c.env_remove(v);
    }
    c
}

/// `llm_oom` on one compute thread: the CPU runtime keeps about 0.5 MiB of scratch per rayon
/// thread, and which threads take work depends on the machine's load, so at the few-MiB limits
/// the measured tests set, a figure near the limit moved between runs (diagnose_cli's
/// find-limits, the diagnose contract).
pub fn llm_oom_one_thread(home: &Path) -> Command {
    let mut c = llm_oom(home);
    c.env("RAYON_NUM_THREADS", "1");
    c
}

pub fn run(home: &Path, args: &[&str]) -> Run {
    llm_oom(home)
        .args(args)
        .output()
        .expect("the binary runs")
        .into()
}

pub fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temp dir")
}

/// Write a file, creating its folders.
pub fn write(path: &Path, text: &str) -> PathBuf {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    std::fs::write(path, text).expect("write");
    path.to_path_buf()
}

/// The probe's tiny llama: 616 k parameters (2.5 MB in f32), 4 heads over 2 KV heads, vocabulary
/// 1,000, 1 KiB of KV cache per token: fast even in a debug build.
pub const TINY_PROBE: &str = r#"{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":128,
"intermediate_size":344,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
"vocab_size":1000,"max_position_embeddings":65536,"tie_word_embeddings":false,"torch_dtype":"float32"}"#;

/// A small llama config.json.
pub const TINY_LLAMA: &str = r#"{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":256,
"intermediate_size":688,"num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":2,
"vocab_size":1000,"max_position_embeddings":4096,"tie_word_embeddings":false,"torch_dtype":"bfloat16"}"#;

/// A metadata value as a GGUF v3 header writes it.
pub enum Meta {
    Str(&'static str),
    U32(u32),
    U64(u64),
    Bool(bool),
}

/// GGUF v3 bytes: the metadata, then the tensor infos (no data).
pub fn gguf(meta: &[(&str, Meta)], tensors: &[(String, Vec<u64>, u32)]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend((meta.len() as u64).to_le_bytes());
    let string = |b: &mut Vec<u8>, s: &str| {
        b.extend((s.len() as u64).to_le_bytes());
        b.extend(s.as_bytes());
    };
    for (k, v) in meta {
        string(&mut b, k);
        match v {
            Meta::Str(s) => {
                b.extend(8u32.to_le_bytes());
                string(&mut b, s);
            }
            Meta::U32(n) => {
                b.extend(4u32.to_le_bytes());
                b.extend(n.to_le_bytes());
            }
            Meta::U64(n) => {
                b.extend(10u32.to_le_bytes());
                b.extend(n.to_le_bytes());
            }
            Meta::Bool(x) => {
                b.extend(7u32.to_le_bytes());
                b.push(u8::from(*x));
            }
        }
    }
    for (name, dims, dtype) in tensors {
        string(&mut b, name);
        b.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            b.extend(d.to_le_bytes());
        }
        b.extend(dtype.to_le_bytes());
        b.extend(0u64.to_le_bytes());
    }
    b
}

/// A GGUF v3 header: `general.architecture` = llama, integer metadata (u32 where the value
/// fits, else u64, as llama.cpp writes them), tensor infos (no data).
pub fn gguf_header(meta: &[(String, u64)], tensors: &[(String, Vec<u64>, u32)]) -> Vec<u8> {
    let mut all = vec![("general.architecture", Meta::Str("llama"))];
    all.extend(meta.iter().map(|(k, v)| {
        let v = match u32::try_from(*v) {
            Ok(small) => Meta::U32(small),
            Err(_) => Meta::U64(*v),
        };
        (k.as_str(), v)
    }));
    gguf(&all, tensors)
}
