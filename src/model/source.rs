//! Where `--model` comes from, in order: a local directory or config.json, a GGUF file, the local
//! Hugging Face cache, the embedded presets, then the hub (`HF_ENDPOINT`): config.json, and the
//! safetensors headers that price the weights exactly (`checkpoint`).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::checkpoint;
use super::config::parse_config;
use super::gguf::read_gguf;
use super::presets;
use super::spec::Spec;
use crate::error::InputError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    Directory,
    ConfigFile,
    Gguf,
    HfCache,
    Preset,
    Hub,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelSource {
    pub kind: SourceKind,
    /// The file the facts were read from (none for a preset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct ResolvedModel {
    pub spec: Spec,
    pub source: ModelSource,
}

/// The Hugging Face hub cache folder: `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`.
pub fn hf_hub_cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("HF_HOME").filter(|p| !p.is_empty()) {
        return PathBuf::from(p).join("hub");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".cache").join("huggingface").join("hub")
}

fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .is_ok_and(|v| matches!(v.trim(), "1" | "true" | "TRUE" | "yes" | "ON" | "on"))
}

/// The most of a config.json read (64 MiB; published ones are a few KiB).
pub const MAX_CONFIG_BYTES: u64 = 64 << 20;

fn read(path: &Path) -> Result<String, InputError> {
    use std::io::Read;
    let io = |source| InputError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(InputError::Usage(format!(
            "{} is larger than llm-oom's ceiling of 64 MiB for a config.json (published ones are a few KiB); pass the model's config.json",
            path.display()
        )));
    }
    Ok(text)
}

fn is_gguf(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

/// Resolve what the user passed to `--model`.
pub fn resolve(model: &str) -> Result<ResolvedModel, InputError> {
    let path = Path::new(model);
    if path.is_dir() {
        let config = path.join("config.json");
        if config.is_file() {
            let mut spec = parse_config(&read(&config)?, &config, model)?;
            local_checkpoint(&mut spec, path)?;
            return Ok(found(spec, SourceKind::Directory, config));
        }
        // A folder with one GGUF file (as LM Studio and ollama exports lay them out).
        let ggufs: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|source| InputError::Io {
                path: path.to_path_buf(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_gguf(p))
            .collect();
        if let [one] = ggufs.as_slice() {
            return Ok(found(read_gguf(one, model)?, SourceKind::Gguf, one.clone()));
        }
        return Err(InputError::Usage(format!(
            "{model} is a directory without config.json{}; pass the folder of a Hugging Face checkpoint or a .gguf file",
            if ggufs.len() > 1 { " and with several .gguf files" } else { "" }
        )));
    }
    if path.is_file() {
        if is_gguf(path) {
            return Ok(found(
                read_gguf(path, model)?,
                SourceKind::Gguf,
                path.to_path_buf(),
            ));
        }
        let mut spec = parse_config(&read(path)?, path, model)?;
        // A config.json beside its shards: read their headers too.
        if path.file_name().is_some_and(|n| n == "config.json") {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                local_checkpoint(&mut spec, dir)?;
            }
        }
        return Ok(found(spec, SourceKind::ConfigFile, path.to_path_buf()));
    }
    if !path.exists() {
        // `exists` follows links: a link whose target is gone is a path, never a hub id.
        if let Ok(target) = std::fs::read_link(path) {
            return Err(InputError::Usage(format!(
                "path {model} is a broken symlink (it points to {}, which does not exist); pass a checkpoint folder, a config.json or a .gguf file that is there",
                target.display()
            )));
        }
    }
    if path.exists() {
        return Err(InputError::Usage(format!(
            "{model} is neither a regular file nor a folder; pass a checkpoint folder, a config.json or a .gguf file"
        )));
    }
    if looks_like_path(model) {
        return Err(InputError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        });
    }

    let cache_dir = hf_hub_cache_dir();
    let cache = hf_hub::Cache::new(cache_dir.clone());
    let hub = checkpoint::Hub::from_env(cache_dir.clone(), offline());
    if let Some(config) = cache.model(model.to_string()).get("config.json") {
        let mut spec = parse_config(&read(&config)?, &config, model)?;
        let w = checkpoint::from_hub(&hub, model, spec.num_layers)?;
        attach(&mut spec, w, model)?;
        return Ok(found(spec, SourceKind::HfCache, config));
    }
    if let Some((id, json)) = presets::find(model) {
        let mut spec = presets::load(id, json)?;
        if presets::near_name(model, id) {
            spec.notes.push(format!(
                "`{model}` planned with the preset for {id} (same architecture)"
            ));
        }
        return Ok(ResolvedModel {
            spec,
            source: ModelSource {
                kind: SourceKind::Preset,
                path: None,
            },
        });
    }
    let tried = format!(
        "no folder or file by that name, not in the HF cache at {}, no preset",
        cache_dir.display()
    );
    if offline() || !model.contains('/') {
        let hint = if offline() {
            "or unset HF_HUB_OFFLINE to fetch its config.json from the hub".to_string()
        } else {
            "or a Hugging Face id of the form owner/name to fetch its config.json from the hub"
                .to_string()
        };
        return Err(InputError::ModelNotFound {
            id: model.to_string(),
            tried,
            hint,
        });
    }
    let config = fetch_config(model, cache)?;
    let mut spec = parse_config(&read(&config)?, &config, model)?;
    let w = checkpoint::from_hub(&hub, model, spec.num_layers)?;
    attach(&mut spec, w, model)?;
    Ok(found(spec, SourceKind::Hub, config))
}

/// The safetensors beside a local config.json: priced from their headers, refused when they
/// contradict the config, and a note when the index names shards the folder lacks.
pub fn local_checkpoint(spec: &mut Spec, dir: &Path) -> Result<(), InputError> {
    let mut missing = Vec::new();
    let w = checkpoint::from_dir_noting(dir, spec.num_layers, &mut missing)?;
    if let Some(first) = missing.first() {
        spec.notes.push(format!(
            "{} in {} names {} shard{} the folder does not hold ({first}{}); weights sized from config.json's shapes — pass the folder of the complete download to price the checkpoint's own bytes",
            checkpoint::INDEX,
            dir.display(),
            missing.len(),
            if missing.len() == 1 { "" } else { "s" },
            if missing.len() > 1 { ", …" } else { "" },
        ));
    }
    attach(spec, w, &dir.display().to_string())
}

/// How far the checkpoint's parameters may stray from the config's (rounding, buffers, a vision
/// tower's few percent) before they are two different models.
const PARAMETER_TOLERANCE: f64 = 0.10;

/// Price the weights from the checkpoint's headers when they were read, and say so; refuse a
/// checkpoint whose parameters contradict its config.json.
fn attach(
    spec: &mut Spec,
    w: Option<checkpoint::CheckpointWeights>,
    place: &str,
) -> Result<(), InputError> {
    if let Some(w) = w {
        contradiction(spec, &w, place)?;
        spec.notes.push(w.note());
        spec.checkpoint = Some(w);
    }
    Ok(())
}

/// A checkpoint of plain float tensors (packed, scaled and quantized ones count elements
/// differently) that holds fewer parameters than the config describes, or more than twice as many
/// (a vision tower or a stored lm_head adds some, never a second model), is another model.
fn contradiction(
    spec: &Spec,
    w: &checkpoint::CheckpointWeights,
    place: &str,
) -> Result<(), InputError> {
    if !w.plain_floats || spec.native_dtype.is_quantized() || spec.gguf.is_some() {
        return Ok(());
    }
    let config = spec.parameters();
    let embedding = spec.vocab_size.saturating_mul(spec.hidden_size);
    // A checkpoint may store one embedding where the config unties them (transformers ties them
    // back on load): the lower bound leaves that matrix out.
    let untied = if spec.tie_word_embeddings {
        0
    } else {
        embedding
    };
    let low = config.saturating_sub(untied) as f64 * (1.0 - PARAMETER_TOLERANCE);
    let high = config.saturating_add(embedding) as f64 * 2.0;
    let found = w.parameters as f64;
    if config == 0 || (low..=high).contains(&found) {
        return Ok(());
    }
    Err(InputError::Usage(format!(
        "the safetensors in {place} hold {} parameters but config.json describes {} ({:.2} B): they are not the same model; point --model at the folder whose config.json matches these weights, or put config.json in a folder of its own to size the model from the config alone",
        crate::units::group(w.parameters),
        crate::units::group(config),
        config as f64 / 1e9,
    )))
}

fn found(spec: Spec, kind: SourceKind, path: PathBuf) -> ResolvedModel {
    ResolvedModel {
        spec,
        source: ModelSource {
            kind,
            path: Some(path),
        },
    }
}

fn looks_like_path(s: &str) -> bool {
    s.starts_with('.')
        || s.starts_with('/')
        || s.starts_with('~')
        || s.ends_with(".json")
        || s.ends_with(".gguf")
        || s.matches('/').count() > 1
}

/// Download config.json alone into the HF cache (so the next run is offline).
fn fetch_config(id: &str, cache: hf_hub::Cache) -> Result<PathBuf, InputError> {
    let hub = |reason: String| InputError::Hub {
        id: id.to_string(),
        reason,
    };
    let token = std::env::var("HF_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .or_else(|| cache.token());
    let api = hf_hub::api::sync::ApiBuilder::from_cache(cache)
        .with_endpoint(checkpoint::endpoint())
        .with_token(token)
        .with_progress(false)
        .build()
        .map_err(|e| hub(e.to_string()))?;
    api.model(id.to_string())
        .get("config.json")
        .map_err(|e| hub(e.to_string()))
}
