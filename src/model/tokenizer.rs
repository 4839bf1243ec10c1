//! Counting a prompt the way the model will see it: the `tokenizer.json` beside the model's
//! config.json (a local checkpoint, or the HF cache), through the `tokenizers` crate — the seeds'
//! first check ("how many tokens is my input, really?").

use std::path::{Path, PathBuf};

use super::source::{ResolvedModel, SourceKind};
use crate::error::InputError;

/// The prompt's token count with the model's tokenizer (special tokens added, as `generate` does),
/// and the tokenizer file used.
pub fn count_prompt_tokens(
    model: &ResolvedModel,
    prompt_file: &Path,
) -> Result<(u64, PathBuf), InputError> {
    let text = std::fs::read_to_string(prompt_file).map_err(|source| InputError::Io {
        path: prompt_file.to_path_buf(),
        source,
    })?;
    let tokenizer = tokenizer_file(model)?;
    let t = tokenizers::Tokenizer::from_file(&tokenizer).map_err(|e| {
        InputError::Usage(format!(
            "{} is not a tokenizer this build can read ({e}); pass --prompt-tokens instead",
            tokenizer.display()
        ))
    })?;
    let encoding = t.encode(text, true).map_err(|e| {
        InputError::Usage(format!(
            "could not tokenize {} with {} ({e}); pass --prompt-tokens instead",
            prompt_file.display(),
            tokenizer.display()
        ))
    })?;
    Ok((encoding.len() as u64, tokenizer))
}

fn tokenizer_file(model: &ResolvedModel) -> Result<PathBuf, InputError> {
    let beside = match model.source.kind {
        SourceKind::Directory | SourceKind::ConfigFile | SourceKind::HfCache | SourceKind::Hub => {
            model
                .source
                .path
                .as_deref()
                .and_then(Path::parent)
                .map(|d| d.join("tokenizer.json"))
        }
        SourceKind::Preset | SourceKind::Gguf => None,
    };
    match beside {
        Some(p) if p.is_file() => Ok(p),
        _ => Err(InputError::Usage(format!(
            "--prompt-file needs {}'s tokenizer.json beside its config.json, and there is none; pass the checkpoint folder (or download it to the HF cache), or give --prompt-tokens",
            model.spec.name
        ))),
    }
}
