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

fn read(path: &Path) -> Result<String, InputError> {
    std::fs::read_to_string(path).map_err(|source| InputError::Io {
        path: path.to_path_buf(),
        source,
    })
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
            let w = checkpoint::from_dir(path, spec.num_layers)?;
            attach(&mut spec, w);
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
                let w = checkpoint::from_dir(dir, spec.num_layers)?;
                attach(&mut spec, w);
            }
        }
        return Ok(found(spec, SourceKind::ConfigFile, path.to_path_buf()));
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
        attach(&mut spec, w);
        return Ok(found(spec, SourceKind::HfCache, config));
    }
    if let Some((id, json)) = presets::find(model) {
        let spec = presets::load(id, json)?;
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
        return Err(InputError::ModelNotFound {
            id: model.to_string(),
            tried,
        });
    }
    let config = fetch_config(model, cache)?;
    let mut spec = parse_config(&read(&config)?, &config, model)?;
    let w = checkpoint::from_hub(&hub, model, spec.num_layers)?;
    attach(&mut spec, w);
    Ok(found(spec, SourceKind::Hub, config))
}

/// Price the weights from the checkpoint's headers when they were read, and say so.
fn attach(spec: &mut Spec, w: Option<checkpoint::CheckpointWeights>) {
    if let Some(w) = w {
        spec.notes.push(w.note());
        spec.checkpoint = Some(w);
    }
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
