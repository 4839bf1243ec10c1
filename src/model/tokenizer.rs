//! Counting a prompt the way the model will see it: the `tokenizer.json` beside the model's
//! config.json (a local checkpoint, or the HF cache), through the `tokenizers` crate — the seeds'
//! first check ("how many tokens is my input, really?").

use std::io::Read;
use std::path::{Path, PathBuf};

use super::source::{ResolvedModel, SourceKind};
use crate::error::InputError;

/// Bytes of the prompt tokenized at once. A file up to this size is counted exactly as one text;
/// a longer one in pieces cut before a space or a line break (a token never spans those in the
/// byte-level tokenizers LLMs use), so memory stays bounded whatever the file.
pub const PROMPT_CHUNK: usize = 1 << 20;

/// Bytes of a prompt file read at most (128 MiB, more than 10M tokens of any real text): a
/// tokenizer that makes few tokens of it (one [UNK] per run of NULs) would otherwise read
/// `/dev/zero` for ever.
pub const MAX_PROMPT_BYTES: u64 = 128 << 20;

/// What counting a prompt file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptCount {
    pub tokens: u64,
    pub tokenizer: PathBuf,
    /// Bytes read; when the count passed `limits::MAX_TOKENS` reading stopped there.
    pub bytes_read: u64,
    /// The count passed `limits::MAX_TOKENS`, or the bytes `MAX_PROMPT_BYTES`: the rest of the
    /// file was not read.
    pub stopped_at_ceiling: bool,
}

/// The prompt's token count with the model's tokenizer (special tokens added once, as `generate`
/// does), streamed in `PROMPT_CHUNK` pieces and stopped past `limits::MAX_TOKENS` tokens or
/// `MAX_PROMPT_BYTES` bytes (`/dev/zero` ends). Bytes that are not UTF-8 count as U+FFFD, as a lossy read would feed them.
pub fn count_prompt_tokens(
    model: &ResolvedModel,
    prompt_file: &Path,
) -> Result<PromptCount, InputError> {
    let tokenizer = tokenizer_file(model)?;
    let t = tokenizers::Tokenizer::from_file(&tokenizer).map_err(|e| {
        InputError::Usage(format!(
            "{} is not a tokenizer this build can read ({e}); pass --prompt-tokens instead",
            tokenizer.display()
        ))
    })?;
    let io = |source| InputError::Io {
        path: prompt_file.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(prompt_file).map_err(io)?;
    let encode = |text: &str, special: bool| {
        t.encode(text, special)
            .map(|e| e.len() as u64)
            .map_err(|e| {
                InputError::Usage(format!(
                    "could not tokenize {} with {} ({e}); pass --prompt-tokens instead",
                    prompt_file.display(),
                    tokenizer.display()
                ))
            })
    };
    let mut count = PromptCount {
        tokens: encode("", true)?,
        tokenizer: tokenizer.clone(),
        bytes_read: 0,
        stopped_at_ceiling: false,
    };
    let mut pieces = Pieces::new(file);
    while let Some(piece) = pieces.next_piece().map_err(io)? {
        count.bytes_read += piece.len() as u64;
        count.tokens = count
            .tokens
            .saturating_add(encode(&String::from_utf8_lossy(&piece), false)?);
        if count.tokens > crate::limits::MAX_TOKENS || count.bytes_read > MAX_PROMPT_BYTES {
            count.stopped_at_ceiling = true;
            break;
        }
    }
    Ok(count)
}

/// A reader cut into pieces of at most `PROMPT_CHUNK` bytes, each ending before a space or line
/// break when there is one in its last quarter, and never inside a UTF-8 character.
struct Pieces<R> {
    reader: R,
    carry: Vec<u8>,
    done: bool,
}

impl<R: Read> Pieces<R> {
    fn new(reader: R) -> Self {
        Pieces {
            reader,
            carry: Vec::new(),
            done: false,
        }
    }

    fn next_piece(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut buf = std::mem::take(&mut self.carry);
        while !self.done && buf.len() < PROMPT_CHUNK {
            let want = (PROMPT_CHUNK - buf.len()) as u64;
            let got = (&mut self.reader).take(want).read_to_end(&mut buf)?;
            self.done = got == 0;
        }
        if buf.is_empty() {
            return Ok(None);
        }
        if buf.len() >= PROMPT_CHUNK {
            let cut = cut_point(&buf);
            self.carry = buf.split_off(cut);
        }
        Ok(Some(buf))
    }
}

/// Where to end a full piece: before the last space or line break in its last quarter, else
/// before the last UTF-8 character start, else at the end.
fn cut_point(buf: &[u8]) -> usize {
    let tail = buf.len() - buf.len() / 4;
    if let Some(i) = buf[tail..].iter().rposition(|b| matches!(b, b' ' | b'\n')) {
        return tail + i;
    }
    match buf.iter().rposition(|b| (b & 0xC0) != 0x80) {
        Some(i) if i > 0 => i,
        _ => buf.len(),
    }
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
