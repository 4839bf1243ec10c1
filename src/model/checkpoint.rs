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
    /// Elements of the counted tensors (their shapes' products).
    #[serde(skip)]
    pub parameters: u64,
    /// Whether every counted tensor is a plain float (`F32`, `F16`, `BF16`): then `parameters` is
    /// the model's parameter count; packed or scaled forms (U8, I32, FP8…) count otherwise.
    #[serde(skip)]
    pub plain_floats: bool,
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
                "; {} tensors ({} bytes) of layers past num_hidden_layers and of mtp.* (multi-token prediction) are not loaded and not counted",
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

/// One tensor of a header: its dtype, byte count and elements.
struct Entry {
    name: String,
    dtype: String,
    bytes: u64,
    elements: u64,
}

/// Bits of one element of a safetensors dtype; `None` for one llm-oom does not know.
fn dtype_bits(d: &str) -> Option<u64> {
    Some(match d {
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        "BOOL" | "U8" | "I8" | "F8_E4M3" | "F8_E5M2" | "F8_E8M0" => 8,
        "U16" | "I16" | "F16" | "BF16" => 16,
        "U32" | "I32" | "F32" => 32,
        "U64" | "I64" | "F64" | "C64" => 64,
        _ => return None,
    })
}

/// The tensors of one header's JSON. `data_len`: the bytes after the header when the file's
/// length is known (a file on disk); every tensor's byte range must lie within it.
fn parse_header(file: &str, json: &[u8], data_len: Option<u64>) -> Result<Vec<Entry>, InputError> {
    let v: Value = serde_json::from_slice(json)
        .map_err(|e| bad(file, format!("its safetensors header is not JSON ({e})")))?;
    let Value::Object(map) = v else {
        return Err(bad(file, "its safetensors header is not a JSON object"));
    };
    let mut out = Vec::with_capacity(map.len());
    let mut ranges: Vec<(u64, u64, String)> = Vec::with_capacity(map.len());
    for (name, t) in map {
        if name == "__metadata__" {
            continue;
        }
        let dtype = t.get("dtype").and_then(Value::as_str);
        let offsets = t
            .get("data_offsets")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_u64).collect::<Vec<_>>());
        let shape = t
            .get("shape")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<_>>>());
        let (Some(d), Some([start, end])) = (dtype, offsets.as_deref()) else {
            return Err(bad(
                file,
                format!("tensor `{name}` has no dtype or no valid data_offsets"),
            ));
        };
        let (start, end) = (*start, *end);
        if end < start {
            return Err(bad(
                file,
                format!("tensor `{name}` has data_offsets [{start}, {end}], which end before they start"),
            ));
        }
        if let Some(len) = data_len.filter(|len| end > *len) {
            return Err(bad(
                file,
                format!(
                    "tensor `{name}` has data_offsets [{start}, {end}], past the {len} data bytes the file holds: it is truncated or its header is wrong"
                ),
            ));
        }
        let Some(Some(dims)) = shape else {
            return Err(bad(
                file,
                format!("tensor `{name}` has no shape of non-negative integers"),
            ));
        };
        let elements = dims
            .iter()
            .try_fold(1u64, |acc, d| acc.checked_mul(*d))
            .ok_or_else(|| bad(file, format!("tensor `{name}`'s shape overflows 64 bits")))?;
        let bytes = end - start;
        if let Some(bits) = dtype_bits(d) {
            let want = elements
                .checked_mul(bits)
                .map(|b| b.div_ceil(8))
                .ok_or_else(|| bad(file, format!("tensor `{name}`'s shape overflows 64 bits")))?;
            if want != bytes {
                return Err(bad(
                    file,
                    format!(
                        "tensor `{name}` ({d}, shape {dims:?}) needs {want} bytes but its data_offsets [{start}, {end}] hold {bytes}"
                    ),
                ));
            }
        }
        ranges.push((start, end, name.clone()));
        out.push(Entry {
            name,
            dtype: d.to_string(),
            bytes,
            elements,
        });
    }
    ranges.sort();
    for w in ranges.windows(2) {
        if let [(_, a_end, a), (b_start, _, b)] = w {
            if b_start < a_end {
                return Err(bad(
                    file,
                    format!("tensors `{a}` and `{b}` overlap (their data_offsets share bytes)"),
                ));
            }
        }
    }
    Ok(out)
}

/// The first 8 bytes and the header of a shard on disk, and the bytes of data after the header.
fn read_file_header(path: &Path, file: &str) -> Result<(Vec<u8>, u64), InputError> {
    let io = |source| InputError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let file_len = f.metadata().map_err(io)?.len();
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
    Ok((out, file_len.saturating_sub(8).saturating_sub(n)))
}

/// A shard's name, its first 8 bytes and header, and (read from disk) its data bytes.
type Shard = (String, Vec<u8>, Option<u64>);

/// The layer a tensor belongs to (`model.layers.12.mlp…` → 12).
fn layer_index(name: &str) -> Option<u64> {
    let at = name.find("layers.")?;
    let rest = &name[at + "layers.".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Sums the headers (`8 bytes + JSON` each, by shard name) into the weights.
fn total(
    headers: &[Shard],
    layers: u64,
    source: HeaderSource,
) -> Result<CheckpointWeights, InputError> {
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    let (mut total, mut count, mut skipped, mut skipped_bytes) = (0u64, 0u64, 0u64, 0u64);
    let (mut parameters, mut plain_floats) = (0u64, true);
    for (file, bytes, data_len) in headers {
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
        for e in parse_header(file, json, *data_len)? {
            // Layers past the model (DeepSeek-V3's `model.layers.61`) and Qwen3-Next / Qwen3.5's
            // `mtp.*`: multi-token-prediction modules transformers does not load
            // (`_keys_to_ignore_on_load_unexpected`) and vLLM only as a draft.
            if e.name.starts_with("mtp.") || layer_index(&e.name).is_some_and(|i| i >= layers) {
                skipped += 1;
                skipped_bytes = skipped_bytes.saturating_add(e.bytes);
                continue;
            }
            count += 1;
            parameters = parameters.saturating_add(e.elements);
            plain_floats &= matches!(e.dtype.as_str(), "F32" | "F16" | "BF16");
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
        parameters,
        plain_floats,
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
/// headers, or `None` when it holds no safetensors, or not every shard its index names.
pub fn from_dir(dir: &Path, layers: u64) -> Result<Option<CheckpointWeights>, InputError> {
    from_dir_noting(dir, layers, &mut Vec::new())
}

/// `from_dir`, with the shards an index names but the folder lacks (neither the file nor its cached
/// header) pushed to `missing`.
pub fn from_dir_noting(
    dir: &Path,
    layers: u64,
    missing: &mut Vec<String>,
) -> Result<Option<CheckpointWeights>, InputError> {
    let shards = match read_opt(&dir.join(INDEX))? {
        Some(text) => shards_of_index(INDEX, &text)?,
        None if dir.join(SINGLE).is_file() => vec![SINGLE.to_string()],
        None => return Ok(None),
    };
    let mut headers = Vec::with_capacity(shards.len());
    let mut absent = Vec::new();
    for s in shards {
        let path = dir.join(&s);
        let cached = dir.join(format!("{s}{CACHED_SUFFIX}"));
        if path.is_file() {
            let shown = path.display().to_string();
            let (bytes, data_len) = read_file_header(&path, &shown)?;
            headers.push((shown, bytes, Some(data_len)));
        } else if cached.is_file() {
            let bytes = std::fs::read(&cached).map_err(|source| InputError::Io {
                path: cached.clone(),
                source,
            })?;
            headers.push((s, bytes, None));
        } else {
            // Index without this shard (only config and index were downloaded, or a part):
            // the caller prices from the config.
            absent.push(s);
        }
    }
    if !absent.is_empty() {
        missing.extend(absent);
        return Ok(None);
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
        headers.push((s, bytes, None));
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
            "model.layers.2.w":{"dtype":"BF16","shape":[4],"data_offsets":[20,28]},
            "mtp.layers.0.w":{"dtype":"BF16","shape":[2],"data_offsets":[28,32]},
            "mtp.fc.weight":{"dtype":"BF16","shape":[2],"data_offsets":[32,36]}}"#,
        );
        let w = total(&[("a".into(), h, None)], 2, HeaderSource::Files).unwrap();
        assert_eq!(w.total_bytes, 20);
        assert_eq!(w.tensor_count, 2);
        assert_eq!((w.skipped_tensors, w.skipped_bytes), (3, 16));
        assert_eq!(w.by_dtype[0], ("F8_E4M3".to_string(), 16));
    }

    #[test]
    fn truncated_and_oversized_headers_name_the_file() {
        let mut h = header(r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#);
        h.truncate(h.len() - 3);
        let e = total(&[("s1.safetensors".into(), h, None)], 1, HeaderSource::Hub).unwrap_err();
        assert!(e.to_string().contains("s1.safetensors"), "{e}");
        let e = header_len("x.safetensors", &u64::MAX.to_le_bytes()).unwrap_err();
        assert!(e.to_string().contains("x.safetensors"), "{e}");
        assert_eq!(layer_index("model.layers.61.mlp.experts.0.w"), Some(61));
        assert_eq!(layer_index("lm_head.weight"), None);
    }

    #[test]
    fn byte_ranges_past_the_file_backwards_overlapping_or_missized_are_refused() {
        let t = |json: &str, len: Option<u64>| {
            parse_header("m.safetensors", json.as_bytes(), len).map(|e| e.len())
        };
        let ok = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                    "b":{"dtype":"F4","shape":[3,2],"data_offsets":[8,11]}}"#;
        assert_eq!(t(ok, Some(11)).unwrap(), 2);
        let cases = [
            (ok, Some(10), "past the 10 data bytes"),
            (
                r#"{"a":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,9223372036854775808]}}"#,
                Some(200),
                "past the 200",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}}"#,
                None,
                "end before they start",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                    "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
                None,
                "overlap",
            ),
            (
                r#"{"a":{"dtype":"BF16","shape":[4,4],"data_offsets":[0,8]}}"#,
                None,
                "needs 32 bytes",
            ),
            (
                r#"{"a":{"dtype":"BF16","shape":[4,-1],"data_offsets":[0,8]}}"#,
                None,
                "no shape",
            ),
        ];
        for (json, len, want) in cases {
            let e = t(json, len).unwrap_err().to_string();
            assert!(e.contains("m.safetensors") && e.contains(want), "{e}");
            assert!(e.contains("`a`") || e.contains("`b`"), "{e}");
        }
    }

    #[test]
    fn counts_parameters_and_whether_they_are_plain_floats() {
        let h = header(
            r#"{"a":{"dtype":"BF16","shape":[4,4],"data_offsets":[0,32]},
                "b":{"dtype":"F32","shape":[3],"data_offsets":[32,44]}}"#,
        );
        let w = total(&[("a".into(), h, Some(44))], 1, HeaderSource::Files).unwrap();
        assert_eq!((w.parameters, w.plain_floats), (19, true));
        let h = header(r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#);
        let w = total(&[("a".into(), h, None)], 1, HeaderSource::Files).unwrap();
        assert!(!w.plain_floats);
    }

    #[test]
    fn an_index_whose_shards_are_missing_names_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(INDEX),
            r#"{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}"#,
        )
        .unwrap();
        let mut missing = Vec::new();
        assert!(from_dir_noting(dir.path(), 1, &mut missing)
            .unwrap()
            .is_none());
        assert_eq!(missing.len(), 2);
    }
}
