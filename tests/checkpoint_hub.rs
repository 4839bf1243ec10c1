//! `plan` prices weights from the checkpoint's own safetensors headers: read from a local folder,
//! or fetched from a hub with HTTP range requests. The hub here is a real HTTP server on
//! 127.0.0.1 that answers like huggingface.co (`/<id>/resolve/main/<file>`, `Range` → 206 with
//! `Content-Range`, `x-repo-commit`, `etag`) from real safetensors files this test writes.

mod util;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use safetensors::tensor::{Dtype, TensorView};
use util::{llm_oom, temp, write, Run, TINY_LLAMA};

const ID: &str = "acme/tiny-fp8";
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// One request the server saw: path, Range header, Authorization header, bytes sent.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    range: Option<String>,
    auth: Option<String>,
    body_bytes: usize,
}

/// A hub on 127.0.0.1 serving the files of `root` as `/<id>/resolve/main/<file>`.
struct Hub {
    endpoint: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

fn serve(root: PathBuf) -> Hub {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let root = root.clone();
            let log = log.clone();
            std::thread::spawn(move || answer(stream, &root, &log));
        }
    });
    Hub { endpoint, seen }
}

fn answer(mut stream: TcpStream, root: &Path, log: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let prefix = format!("/{ID}/resolve/main/");
        let file = path.strip_prefix(&prefix).map(|f| root.join(f));
        let data = file.and_then(|f| std::fs::read(f).ok());
        let range = headers.get("range").cloned();
        let (status, body, extra) = match &data {
            None => ("404 Not Found", b"Entry not found".to_vec(), String::new()),
            Some(d) => match range.as_deref().and_then(|r| r.strip_prefix("bytes=")) {
                Some(r) => {
                    let (a, b) = r.split_once('-').unwrap();
                    let a: usize = a.parse().unwrap();
                    let b: usize = if b.is_empty() {
                        d.len() - 1
                    } else {
                        b.parse::<usize>().unwrap().min(d.len() - 1)
                    };
                    let body = d.get(a..=b).unwrap_or(&[]).to_vec();
                    let cr = format!("Content-Range: bytes {a}-{b}/{}\r\n", d.len());
                    ("206 Partial Content", body, cr)
                }
                None => ("200 OK", d.clone(), String::new()),
            },
        };
        log.lock().unwrap().push(Seen {
            path: path.clone(),
            range,
            auth: headers.get("authorization").cloned(),
            body_bytes: body.len(),
        });
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nx-repo-commit: {COMMIT}\r\netag: \"e{}\"\r\n{extra}\r\n",
            body.len(),
            path.len()
        );
        if stream.write_all(head.as_bytes()).is_err() || stream.write_all(&body).is_err() {
            return;
        }
    }
}

/// A shard written by the safetensors crate: `tensors` of (name, dtype, shape).
fn shard(path: &Path, tensors: &[(&str, Dtype, Vec<usize>)]) -> u64 {
    let data: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, d, s)| vec![7u8; s.iter().product::<usize>() * d.bitsize() / 8])
        .collect();
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .zip(&data)
        .map(|((n, d, s), b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
    data.iter().map(|d| d.len() as u64).sum()
}

/// The repository: config.json, an index and two mixed-precision shards (FP8 weights with f32
/// scales, bf16 embeddings, U8-packed FP4 experts, and an MTP layer past num_hidden_layers that
/// must not count). Returns the bytes the loaded tensors hold.
fn repo(root: &Path) -> u64 {
    std::fs::create_dir_all(root).unwrap();
    write(&root.join("config.json"), TINY_LLAMA);
    let a = shard(
        &root.join("model-00001-of-00002.safetensors"),
        &[
            ("model.embed_tokens.weight", Dtype::BF16, vec![1000, 256]),
            (
                "model.layers.0.self_attn.q_proj.weight",
                Dtype::F8_E4M3,
                vec![256, 256],
            ),
            (
                "model.layers.0.self_attn.q_proj.weight_scale_inv",
                Dtype::F32,
                vec![2, 2],
            ),
        ],
    );
    let b = shard(
        &root.join("model-00002-of-00002.safetensors"),
        &[
            (
                "model.layers.3.mlp.experts.down_blocks",
                Dtype::U8,
                vec![256, 344],
            ),
            (
                "model.layers.3.mlp.experts.down_scales",
                Dtype::U8,
                vec![256, 22],
            ),
            ("lm_head.weight", Dtype::BF16, vec![1000, 256]),
            ("model.layers.4.eh_proj.weight", Dtype::BF16, vec![256, 512]),
        ],
    );
    let mtp = 256 * 512 * 2;
    let index = r#"{"metadata":{"total_size":0},"weight_map":{
        "model.embed_tokens.weight":"model-00001-of-00002.safetensors",
        "model.layers.0.self_attn.q_proj.weight":"model-00001-of-00002.safetensors",
        "model.layers.0.self_attn.q_proj.weight_scale_inv":"model-00001-of-00002.safetensors",
        "model.layers.3.mlp.experts.down_blocks":"model-00002-of-00002.safetensors",
        "model.layers.3.mlp.experts.down_scales":"model-00002-of-00002.safetensors",
        "lm_head.weight":"model-00002-of-00002.safetensors",
        "model.layers.4.eh_proj.weight":"model-00002-of-00002.safetensors"}}"#;
    write(&root.join("model.safetensors.index.json"), index);
    a + b - mtp
}

fn plan_json(
    home: &Path,
    hub: &Hub,
    offline: bool,
    token: Option<&str>,
) -> (Run, serde_json::Value) {
    let mut c = llm_oom(home);
    c.env("HF_ENDPOINT", &hub.endpoint)
        .env("HF_HUB_OFFLINE", if offline { "1" } else { "0" })
        .env_remove("HF_TOKEN");
    if let Some(t) = token {
        c.env("HF_TOKEN", t);
    }
    let run: Run = c
        .args(["plan", "--model", ID, "--vram", "24GB", "--json"])
        .output()
        .unwrap()
        .into();
    let v = serde_json::from_str(&run.stdout).unwrap_or(serde_json::Value::Null);
    (run, v)
}

#[test]
fn hub_headers_are_fetched_by_range_cached_and_used_offline() {
    let home = temp();
    let served = temp();
    let expected = repo(served.path());
    let hub = serve(served.path().to_path_buf());

    let (run, v) = plan_json(home.path(), &hub, false, Some("hf_secret"));
    assert!(
        run.code == 0 || run.code == 1,
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    assert_eq!(v["weights_from"], "safetensors_headers", "{}", run.stdout);
    assert_eq!(v["weights_bytes"].as_u64(), Some(expected));
    assert_eq!(v["model"]["source"]["kind"], "hub");
    let notes = v["notes"].to_string();
    assert!(notes.contains("2 shards"), "{notes}");
    assert!(notes.contains("not loaded and not counted"), "{notes}");

    let seen = hub.seen.lock().unwrap().clone();
    let shard_reqs: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.path.ends_with(".safetensors"))
        .collect();
    // Two range requests per shard (the length, then the header), never a whole shard.
    assert_eq!(shard_reqs.len(), 4, "{seen:#?}");
    assert!(shard_reqs.iter().all(|s| s.range.is_some()), "{seen:#?}");
    let shard_bytes: usize = shard_reqs.iter().map(|s| s.body_bytes).sum();
    assert!(shard_bytes < 2_000, "{shard_bytes} bytes of shards fetched");
    assert!(seen
        .iter()
        .all(|s| s.auth.as_deref() == Some("Bearer hf_secret")));

    // The cache now holds config, index and headers, in the HF layout.
    let snap = home
        .path()
        .join("hf/hub/models--acme--tiny-fp8/snapshots")
        .join(COMMIT);
    assert!(snap.join("model.safetensors.index.json").is_file());
    assert!(snap
        .join("model-00002-of-00002.safetensors.llm-oom-header")
        .is_file());

    // Offline: the same answer, and not one request.
    let before = hub.seen.lock().unwrap().len();
    let (run, v) = plan_json(home.path(), &hub, true, None);
    assert!(run.code == 0 || run.code == 1, "{}", run.stderr);
    assert_eq!(v["weights_bytes"].as_u64(), Some(expected));
    assert_eq!(v["weights_from"], "safetensors_headers");
    assert_eq!(hub.seen.lock().unwrap().len(), before);
}

#[test]
fn offline_with_only_a_cached_config_prices_from_the_config() {
    let home = temp();
    let snap = home
        .path()
        .join("hf/hub/models--acme--tiny-fp8/snapshots")
        .join(COMMIT);
    write(&snap.join("config.json"), TINY_LLAMA);
    write(
        &home.path().join("hf/hub/models--acme--tiny-fp8/refs/main"),
        COMMIT,
    );
    let empty = temp();
    let hub = serve(empty.path().to_path_buf());
    let (run, v) = plan_json(home.path(), &hub, true, None);
    assert!(run.code == 0 || run.code == 1, "{}", run.stderr);
    assert_eq!(v["weights_from"], "config");
    assert!(hub.seen.lock().unwrap().is_empty());
}

#[test]
fn a_missing_shard_or_a_truncated_header_is_refused_naming_the_file() {
    // The index names a shard the hub does not have.
    let home = temp();
    let served = temp();
    repo(served.path());
    std::fs::remove_file(served.path().join("model-00002-of-00002.safetensors")).unwrap();
    let hub = serve(served.path().to_path_buf());
    let (run, _) = plan_json(home.path(), &hub, false, None);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("model-00002-of-00002.safetensors") && run.stderr.contains("not found"),
        "{}",
        run.stderr
    );

    // A shard whose header is cut short.
    let home = temp();
    let served = temp();
    repo(served.path());
    let p = served.path().join("model-00001-of-00002.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    std::fs::write(&p, &bytes[..8 + n / 2]).unwrap();
    let hub = serve(served.path().to_path_buf());
    let (run, _) = plan_json(home.path(), &hub, false, None);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("model-00001-of-00002.safetensors") && run.stderr.contains("truncated"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_local_folder_is_priced_from_its_shards() {
    let home = temp();
    let dir = temp();
    let expected = repo(dir.path());
    let run = util::run(
        home.path(),
        &[
            "plan",
            "--model",
            dir.path().to_str().unwrap(),
            "--vram",
            "24GB",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["weights_from"], "safetensors_headers");
    assert_eq!(v["weights_bytes"].as_u64(), Some(expected));
    // The text report says where the weights came from.
    let text = util::run(
        home.path(),
        &[
            "plan",
            "--model",
            dir.path().to_str().unwrap(),
            "--vram",
            "24GB",
        ],
    );
    assert!(
        text.stdout.contains("safetensors headers"),
        "{}",
        text.stdout
    );
    // Asked for another dtype, the weights are priced from the config's shapes.
    let run = util::run(
        home.path(),
        &[
            "plan",
            "--model",
            dir.path().to_str().unwrap(),
            "--vram",
            "24GB",
            "--json",
            "--dtype",
            "nf4",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["weights_from"], "config");
}
