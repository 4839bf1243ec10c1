//! The library's errors. `InputError` is what the user can fix (exit code 2); everything else is
//! ours or the machine's (exit code 3). Every message is one line that says what to do.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Input(#[from] InputError),
    /// The device ran out of memory: a finding, not a failure (exit code 1).
    #[error("{0}")]
    OutOfMemory(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// An engine the probe would run in is not installed (python3 without torch or transformers).
    #[error("{0}")]
    EngineUnavailable(String),
}

impl Error {
    /// The process exit code of the JSON contract: 2 for bad input, 3 for internal failures.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Input(_) => 2,
            Error::OutOfMemory(_) => 1,
            Error::Internal(_) | Error::EngineUnavailable(_) => 3,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("`{0}` is not a memory size; write it like 24GiB, 80GB or 512MiB")]
    Size(String),
    #[error("`{0}` is not a dtype; use one of f32, f16, bf16, int8, nf4, fp4, fp8, mxfp4, nvfp4, q8_0, q6_k, q5_k_m, q4_k_m, q4_0")]
    Dtype(String),
    #[error("`{0}` is not a KV-cache dtype; use one of f32, f16, bf16, fp8, q8_0, q4_0")]
    KvDtype(String),
    #[error("{what} must be at least 1 (got {value})")]
    NotPositive { what: &'static str, value: i64 },
    /// `hint`: how to reach the hub from here (unset HF_HUB_OFFLINE when it is set; an id of the
    /// form owner/name otherwise).
    #[error("model `{id}` was not found ({tried}); pass a local directory or config.json, a .gguf file, one of `llm-oom plan --list-presets`, {hint}")]
    ModelNotFound {
        id: String,
        tried: String,
        hint: String,
    },
    #[error("could not fetch config.json of `{id}` from the Hugging Face hub: {reason}; for gated models set HF_TOKEN, or pass a local directory")]
    Hub { id: String, reason: String },
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not valid JSON ({source}); pass the model's config.json", path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{} has no `{field}`, which llm-oom needs to size the model; add it or pass another config", path.display())]
    MissingField { path: PathBuf, field: String },
    #[error("{}: `{field}` = {value} is not usable ({why})", path.display())]
    BadField {
        path: PathBuf,
        field: String,
        value: String,
        why: String,
    },
    /// `supported`: the model types llm-oom has a family for (`config::supported_model_types`).
    /// `reason`: what stopped it being sized as a generic llama-shaped decoder.
    #[error("{}: llm-oom has no family for `{arch}`, and it is not sized generically: {reason} (model types it sizes: {supported}); to size it, pass `--python` with a Python whose transformers knows `{arch}` (the safetensors headers of a checkpoint beside the config then give its weights), plan a model of a listed type, or measure this one in its own engine with `llm-oom watch -- <your command>`", path.display())]
    UnknownArchitecture {
        path: PathBuf,
        arch: String,
        supported: String,
        reason: String,
    },
    #[error("{} is not a readable GGUF file ({reason}); re-download it or check it with llama.cpp's gguf-dump", path.display())]
    Gguf { path: PathBuf, reason: String },
    #[error("{model} was trained for at most {max} tokens, but prompt + new tokens is {requested}: beyond that its output degrades whatever the memory; lower --prompt-tokens or --max-new-tokens")]
    ContextTooLong {
        model: String,
        requested: u64,
        max: u64,
    },
    #[error("{what} = {value} is past llm-oom's ceiling of {max} (docs/reliability.md lists the ceilings); lower it")]
    TooLarge {
        what: String,
        value: String,
        max: String,
    },
    #[error("{0}")]
    Usage(String),
    #[error("{} is not a PyTorch memory snapshot llm-oom can read: {reason}", path.display())]
    Snapshot { path: PathBuf, reason: String },
    #[error("the checkpoint's {file} cannot be read ({reason}); check the repository or pass the folder of a complete download")]
    Checkpoint { file: String, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
