//! Exact weight bytes from a checkpoint's own safetensors headers.
//!
//! A safetensors file starts with 8 bytes (little-endian u64: the header's length) and a JSON
//! header naming every tensor's dtype, shape and byte range. The sum of those byte ranges is what
//! the weights take — mixed precision, FP8 scales, U8-packed FP4 and all — without reading a
//! weight. For a local folder the headers are read from the shard files; for a hub id,
//! `model.safetensors.index.json` names the shards and each header is fetched with two HTTP range
//! requests (a few KB a shard), then kept in the HF cache beside the snapshot's files as
//! `<shard>.llm-oom-header` so the next run, and `HF_HUB_OFFLINE=1`, need no network.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::error::InputError;

/// The index of a sharded checkpoint, and the file of an unsharded one.
pub const INDEX: &str = "model.safetensors.index.json";
pub const SINGLE: &str = "model.safetensors";
/// The largest header the safetensors format allows (its `MAX_HEADER_SIZE`).
const MAX_HEADER: u64 = 100_000_000;
/// What the cache keeps of a shard: its first 8 bytes and its header.
const CACHED_SUFFIX: &str = ".llm-oom-header";

/// Where the headers were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeaderSource {
    /// The shard files themselves (a local folder or a downloaded snapshot).
    Files,
    /// Headers fetched before and kept in the HF cache.
    Cache,
    /// Range requests to the hub (`HF_ENDPOINT`) in this run.
    Hub,
}

/// The weights as the checkpoint stores them.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointWeights {
    /// Bytes of every tensor the model loads.
    pub total_bytes: u64,
    pub tensor_count: u64,
    pub shards: u64,
    /// Bytes by safetensors dtype (`BF16`, `F8_E4M3`, `U8`…), largest first.
    pub by_dtype: Vec<(String, u64)>,
    /// Tensors of layers past `num_hidden_layers` (multi-token prediction) that transformers does
    /// not load: left out of `total_bytes`.
    pub skipped_tensors: u64,
    pub skipped_bytes: u64,
    pub source: HeaderSource,
}

impl CheckpointWeights {
    /// The line a report shows.
    pub fn note(&self) -> String {
        let dtypes: Vec<String> = self
            .by_dtype
            .iter()
            .map(|(d, b)| format!("{d} {}", crate::units::Bytes(*b)))
            .collect();
        let mut s = format!(
            "weights from the checkpoint's safetensors headers ({} shard{}, {} tensors, {}): {} bytes",
            self.shards,
            if self.shards == 1 { "" } else { "s" },
            self.tensor_count,
            dtypes.join(", "),
            crate::units::group(self.total_bytes)
        );
        if self.skipped_tensors > 0 {
            s.push_str(&format!(
                "; {} tensors ({} bytes) of layers past num_hidden_layers are not loaded and not counted",
                self.skipped_tensors, self.skipped_bytes
            ));
        }
        s
    }
}

fn bad(file: &str, reason: impl Into<String>) -> InputError {
    InputError::Checkpoint {
        file: file.to_string(),
        reason: reason.into(),
    }
}

/// The header's length from a shard's first 8 bytes.
fn header_len(file: &str, first: &[u8]) -> Result<u64, InputError> {
    let eight: [u8; 8] = first
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad(file, "shorter than the 8-byte safetensors header length"))?;
    let n = u64::from_le_bytes(eight);
    if n == 0 || n > MAX_HEADER {
        return Err(bad(
            file,
            format!("header length {n} is not between 1 and {MAX_HEADER} bytes"),
        ));
    }
    Ok(n)
}

/// One tensor of a header: its dtype and byte count.
struct Entry {
    name: String,
    dtype: String,
    bytes: u64,
}

/// The tensors of one header's JSON.
fn parse_header(file: &str, json: &[u8]) -> Result<Vec<Entry>, InputError> {
    let v: Value = serde_json::from_slice(json)
        .map_err(|e| bad(file, format!("its safetensors header is not JSON ({e})")))?;
    let Value::Object(map) = v else {
        return Err(bad(file, "its safetensors header is not a JSON object"));
    };
    let mut out = Vec::with_capacity(map.len());
    for (name, t) in map {
        if name == "__metadata__" {
            continue;
        }
        let dtype = t.get("dtype").and_then(Value::as_str);
        let offsets = t
            .get("data_offsets")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_u64).collect::<Vec<_>>());
        match (dtype, offsets.as_deref()) {
            (Some(d), Some([start, end])) if end >= start => out.push(Entry {
                name,
                dtype: d.to_string(),
                bytes: end - start,
            }),
            _ => {
                return Err(bad(
                    file,
                    format!("tensor `{name}` has no dtype or no valid data_offsets"),
                ))
            }
        }
    }
    Ok(out)
}

/// The first 8 bytes and the header of a shard on disk.
fn read_file_header(path: &Path, file: &str) -> Result<Vec<u8>, InputError> {
    let io = |source| InputError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut first = [0u8; 8];
    f.read_exact(&mut first)
        .map_err(|_| bad(file, "shorter than the 8-byte safetensors header length"))?;
    let n = header_len(file, &first)?;
    let mut out = first.to_vec();
    let read = f.take(n).read_to_end(&mut out).map_err(io)?;
    if (read as u64) < n {
        return Err(bad(
            file,
            format!("its header is truncated: {read} of {n} bytes"),
        ));
    }
    Ok(out)
}

/// The layer a tensor belongs to (`model.layers.12.mlp…` → 12).
fn layer_index(name: &str) -> Option<u64> {
    let at = name.find("layers.")?;
    let rest = &name[at + "layers.".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Sums the headers (`8 bytes + JSON` each, by shard name) into the weights.
fn total(
    headers: &[(String, Vec<u8>)],
    layers: u64,
    source: HeaderSource,
) -> Result<CheckpointWeights, InputError> {
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    let (mut total, mut count, mut skipped, mut skipped_bytes) = (0u64, 0u64, 0u64, 0u64);
    for (file, bytes) in headers {
        let n = header_len(file, bytes)?;
        let json = bytes
            .get(8..)
            .filter(|j| j.len() as u64 == n)
            .ok_or_else(|| {
                bad(
                    file,
                    format!(
                        "its header is truncated: {} of {n} bytes",
                        bytes.len().saturating_sub(8)
                    ),
                )
            })?;
        for e in parse_header(file, json)? {
            if layer_index(&e.name).is_some_and(|i| i >= layers) {
                skipped += 1;
                skipped_bytes = skipped_bytes.saturating_add(e.bytes);
                continue;
            }
            count += 1;
            total = total
                .checked_add(e.bytes)
                .ok_or_else(|| bad(file, "its tensor sizes overflow 64 bits"))?;
            let d = by.entry(e.dtype).or_default();
            *d = d.saturating_add(e.bytes);
        }
    }
    let mut by_dtype: Vec<(String, u64)> = by.into_iter().collect();
    by_dtype.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(CheckpointWeights {
        total_bytes: total,
        tensor_count: count,
        shards: headers.len() as u64,
        by_dtype,
        skipped_tensors: skipped,
        skipped_bytes,
        source,
    })
}

/// The shard names of an index (`weight_map` values), in order.
fn shards_of_index(file: &str, text: &str) -> Result<Vec<String>, InputError> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| bad(file, format!("not valid JSON ({e})")))?;
    let map = v
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| bad(file, "has no `weight_map` object"))?;
    let mut names = BTreeSet::new();
    for (tensor, shard) in map {
        let s = shard
            .as_str()
            .filter(|s| !s.is_empty() && !s.contains("..") && !s.starts_with('/'))
            .ok_or_else(|| bad(file, format!("names no usable shard for `{tensor}`")))?;
        names.insert(s.to_string());
    }
    if names.is_empty() {
        return Err(bad(file, "its `weight_map` is empty"));
    }
    Ok(names.into_iter().collect())
}

/// A local checkpoint folder (a download, or an HF cache snapshot): the weights from its shards'
/// headers, or `None` when it holds no safetensors.
pub fn from_dir(dir: &Path, layers: u64) -> Result<Option<CheckpointWeights>, InputError> {
    let shards = match read_opt(&dir.join(INDEX))? {
        Some(text) => shards_of_index(INDEX, &text)?,
        None if dir.join(SINGLE).is_file() => vec![SINGLE.to_string()],
        None => return Ok(None),
    };
    let mut headers = Vec::with_capacity(shards.len());
    for s in shards {
        let path = dir.join(&s);
        let cached = dir.join(format!("{s}{CACHED_SUFFIX}"));
        let bytes = if path.is_file() {
            read_file_header(&path, &s)?
        } else if cached.is_file() {
            std::fs::read(&cached).map_err(|source| InputError::Io {
                path: cached.clone(),
                source,
            })?
        } else {
            // Index without its shards (only config and index were downloaded).
            return Ok(None);
        };
        headers.push((s, bytes));
    }
    total(&headers, layers, HeaderSource::Files).map(Some)
}

fn read_opt(path: &Path) -> Result<Option<String>, InputError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(InputError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// How to reach the hub: `HF_ENDPOINT` (default huggingface.co) and `HF_TOKEN` (else the cached
/// token).
pub struct Hub {
    pub endpoint: String,
    pub token: Option<String>,
    pub cache: hf_hub::Cache,
    pub offline: bool,
}

impl Hub {
    pub fn from_env(cache_dir: PathBuf, offline: bool) -> Hub {
        let cache = hf_hub::Cache::new(cache_dir);
        let token = std::env::var("HF_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
            .or_else(|| cache.token());
        Hub {
            endpoint: endpoint(),
            token,
            cache,
            offline,
        }
    }

    fn url(&self, id: &str, file: &str) -> String {
        format!("{}/{id}/resolve/main/{file}", self.endpoint)
    }

    /// A GET with the token and, if given, a byte range. `Ok(None)` on 404.
    fn get(
        &self,
        id: &str,
        file: &str,
        range: Option<(u64, u64)>,
    ) -> Result<Option<ureq::Response>, InputError> {
        let mut req = ureq::get(&self.url(id, file)).timeout(std::time::Duration::from_secs(30));
        if let Some(t) = &self.token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        if let Some((a, b)) = range {
            req = req.set("Range", &format!("bytes={a}-{b}"));
        }
        match req.call() {
            Ok(r) => Ok(Some(r)),
            Err(ureq::Error::Status(404, _)) => Ok(None),
            Err(ureq::Error::Status(code, _)) => Err(bad(
                file,
                format!(
                    "the hub answered HTTP {code} for {}{}",
                    self.url(id, file),
                    if matches!(code, 401 | 403) {
                        " (a gated model: set HF_TOKEN)"
                    } else {
                        ""
                    }
                ),
            )),
            Err(e) => Err(bad(file, format!("could not reach the hub: {e}"))),
        }
    }

    /// `len` bytes from `start` of a hub file, by range request; also the commit the hub served.
    fn range(
        &self,
        id: &str,
        file: &str,
        start: u64,
        len: u64,
    ) -> Result<(Vec<u8>, Option<String>), InputError> {
        let end = start.saturating_add(len).saturating_sub(1);
        let r = self
            .get(id, file, Some((start, end)))?
            .ok_or_else(|| bad(file, format!("not found at {}", self.url(id, file))))?;
        let commit = r.header("x-repo-commit").map(str::to_string);
        let mut out = Vec::new();
        r.into_reader()
            .take(len)
            .read_to_end(&mut out)
            .map_err(|e| bad(file, format!("reading its header failed: {e}")))?;
        if (out.len() as u64) < len {
            return Err(bad(
                file,
                format!(
                    "its header is truncated: the hub sent {} of {len} bytes",
                    out.len()
                ),
            ));
        }
        Ok((out, commit))
    }

    /// A shard's header from the hub: 8 bytes, then the JSON.
    fn fetch_header(&self, id: &str, file: &str) -> Result<(Vec<u8>, Option<String>), InputError> {
        let (mut first, commit) = self.range(id, file, 0, 8)?;
        let n = header_len(file, &first)?;
        let (json, _) = self.range(id, file, 8, n)?;
        first.extend(json);
        Ok((first, commit))
    }
}

/// `HF_ENDPOINT`, without a trailing slash; huggingface.co by default.
pub fn endpoint() -> String {
    std::env::var("HF_ENDPOINT")
        .ok()
        .filter(|e| !e.trim().is_empty())
        .unwrap_or_else(|| "https://huggingface.co".into())
        .trim_end_matches('/')
        .to_string()
}

/// The snapshot folder `refs/main` points to, if any.
fn snapshot(hub: &Hub, id: &str) -> Option<PathBuf> {
    let repo = hf_hub::Repo::model(id.to_string());
    let root = hub.cache.path().join(repo.folder_name());
    let commit = std::fs::read_to_string(root.join("refs").join("main")).ok()?;
    Some(root.join("snapshots").join(commit.trim()))
}

/// Keep a fetched file (a header as `<shard>.llm-oom-header`, or the index) in the snapshot
/// folder of the commit the hub served, where `from_dir` and the next run find it.
fn store(hub: &Hub, id: &str, commit: Option<&str>, name: &str, bytes: &[u8]) {
    let dir = match (snapshot(hub, id), commit) {
        (Some(d), _) => d,
        (None, Some(c)) if c.len() == 40 && c.chars().all(|ch| ch.is_ascii_hexdigit()) => {
            if hub.cache.model(id.to_string()).create_ref(c).is_err() {
                return;
            }
            match snapshot(hub, id) {
                Some(d) => d,
                None => return,
            }
        }
        _ => return,
    };
    // A cache that cannot be written only costs the next run a fetch.
    let _ = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(dir.join(name), bytes));
}

/// The weights of hub model `id` from its shards' headers: from the cache when there, else (not
/// offline) by range requests, which are then cached. `None` when the repo has no safetensors
/// checkpoint, or offline when the cache does not hold every header.
pub fn from_hub(hub: &Hub, id: &str, layers: u64) -> Result<Option<CheckpointWeights>, InputError> {
    if let Some(dir) = snapshot(hub, id) {
        if let Some(w) = from_dir(&dir, layers)? {
            let all_files = index_shards_in(&dir).iter().all(|s| dir.join(s).is_file());
            let source = if all_files {
                HeaderSource::Files
            } else {
                HeaderSource::Cache
            };
            return Ok(Some(CheckpointWeights { source, ..w }));
        }
    }
    if hub.offline {
        return Ok(None);
    }
    let (shards, commit) = match hub.get(id, INDEX, None)? {
        Some(r) => {
            let commit = r.header("x-repo-commit").map(str::to_string);
            let text = r
                .into_string()
                .map_err(|e| bad(INDEX, format!("reading it failed: {e}")))?;
            let shards = shards_of_index(INDEX, &text)?;
            store(hub, id, commit.as_deref(), INDEX, text.as_bytes());
            (shards, commit)
        }
        // No index and no model.safetensors (a .bin or GGUF-only repo): price from the config.
        None if hub.get(id, SINGLE, Some((0, 7)))?.is_none() => return Ok(None),
        None => (vec![SINGLE.to_string()], None),
    };
    let mut headers = Vec::with_capacity(shards.len());
    for s in shards {
        let (bytes, c) = hub.fetch_header(id, &s)?;
        let name = format!("{s}{CACHED_SUFFIX}");
        store(hub, id, commit.as_deref().or(c.as_deref()), &name, &bytes);
        headers.push((s, bytes));
    }
    total(&headers, layers, HeaderSource::Hub).map(Some)
}

fn index_shards_in(dir: &Path) -> Vec<String> {
    read_opt(&dir.join(INDEX))
        .ok()
        .flatten()
        .and_then(|t| shards_of_index(INDEX, &t).ok())
        .unwrap_or_else(|| vec![SINGLE.to_string()])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(json: &str) -> Vec<u8> {
        let mut b = (json.len() as u64).to_le_bytes().to_vec();
        b.extend(json.as_bytes());
        b
    }

    #[test]
    fn sums_byte_ranges_and_skips_layers_past_the_model() {
        let h = header(
            r#"{"__metadata__":{"format":"pt"},
            "model.layers.0.w":{"dtype":"F8_E4M3","shape":[4,4],"data_offsets":[0,16]},
            "model.layers.0.w_scale":{"dtype":"F32","shape":[1],"data_offsets":[16,20]},
            "model.layers.2.w":{"dtype":"BF16","shape":[4],"data_offsets":[20,28]}}"#,
        );
        let w = total(&[("a".into(), h)], 2, HeaderSource::Files).unwrap();
        assert_eq!(w.total_bytes, 20);
        assert_eq!(w.tensor_count, 2);
        assert_eq!((w.skipped_tensors, w.skipped_bytes), (1, 8));
        assert_eq!(w.by_dtype[0], ("F8_E4M3".to_string(), 16));
    }

    #[test]
    fn truncated_and_oversized_headers_name_the_file() {
        let mut h = header(r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#);
        h.truncate(h.len() - 3);
        let e = total(&[("s1.safetensors".into(), h)], 1, HeaderSource::Hub).unwrap_err();
        assert!(e.to_string().contains("s1.safetensors"), "{e}");
        let e = header_len("x.safetensors", &u64::MAX.to_le_bytes()).unwrap_err();
        assert!(e.to_string().contains("x.safetensors"), "{e}");
        assert_eq!(layer_index("model.layers.61.mlp.experts.0.w"), Some(61));
        assert_eq!(layer_index("lm_head.weight"), None);
    }
}
