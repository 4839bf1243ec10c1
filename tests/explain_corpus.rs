//! Real OOM logs through the real binary, scored per split of a corpus folder under
//! tests/fixtures/logs/ (each folder has a manifest.json: file, source, engine, oom, cause, stage,
//! evidence, split). `score(folder, split)` works for any folder and any split name, so a new
//! held-out corpus is one more test of a few lines (see `heldout_test_template` below).
//!
//! The public corpus (`real`, 106 logs from GitHub issues) is all `tune` since session 4: its old
//! held-out split was scored once (22/36) and then seen while fixing the rules; those entries say
//! `"was_heldout": true`. The tune test asserts the recorded score, no OOM called `none` and no
//! look-alike called an OOM. A fresh held-out corpus is scored by the lead, once.
//!
//! Any folder and split can also be scored without editing this file:
//! `LLM_OOM_CORPUS=real LLM_OOM_SPLIT=tune cargo test --test explain_corpus -- --ignored --nocapture`.

mod util;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use util::{run, temp};

/// The tune split's recorded score (docs/explain.md says which 8 it misses and why).
const TUNE_RIGHT: usize = 98;
const TUNE_LOGS: usize = 106;

#[derive(Default)]
pub struct Score {
    pub n: usize,
    pub right: usize,
    pub oom_called_none: Vec<String>,
    pub look_alike_called_oom: Vec<String>,
    pub misses: Vec<String>,
    pub per_engine: BTreeMap<String, (usize, usize)>,
    /// (confidence, right) per verdict, for the calibration table.
    pub confidences: Vec<(f64, bool)>,
    /// Logs a second annotator labelled blind from the same thread (the manifest's `second`).
    pub second_n: usize,
    /// … of which the two annotators gave the same cause.
    pub annotators_agree: usize,
    /// … of which llm-oom gave that cause too.
    pub right_where_agreed: usize,
    /// Logs where llm-oom gave the second annotator's cause.
    pub right_vs_second: usize,
}

impl Score {
    pub fn percent(&self) -> f64 {
        100.0 * self.right as f64 / self.n.max(1) as f64
    }
}

fn folder(corpus: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/logs")
        .join(corpus)
}

fn manifest(corpus: &str) -> Vec<Value> {
    let path = folder(corpus).join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str::<Value>(&text)
        .expect("manifest is JSON")
        .as_array()
        .cloned()
        .expect("manifest is a list")
}

/// Run `explain --json` on every log of `split` in tests/fixtures/logs/`corpus` and score it
/// against the manifest's labels.
pub fn score(corpus: &str, split: &str) -> Score {
    let home = temp();
    let dir = folder(corpus);
    let mut s = Score::default();
    for e in manifest(corpus).iter().filter(|e| e["split"] == split) {
        let file = e["file"].as_str().expect("file");
        let path = dir.join(file);
        let r = run(
            home.path(),
            &["explain", path.to_str().expect("path"), "--json"],
        );
        let j: Value = serde_json::from_str(&r.stdout)
            .unwrap_or_else(|err| panic!("{file}: not JSON ({err}): {}", r.stderr));
        let got = j["verdict"]["cause"].as_str().unwrap_or("?").to_string();
        let want = e["cause"].as_str().unwrap_or("?");
        let oom = e["oom"].as_bool().unwrap_or(true);
        assert_eq!(
            r.code,
            if got == "none" { 0 } else { 1 },
            "{file}: exit code"
        );
        let ok = got == want;
        if let Some(second) = e.get("second").and_then(|v| v["cause"].as_str()) {
            s.second_n += 1;
            s.right_vs_second += usize::from(got == second);
            if second == want {
                s.annotators_agree += 1;
                s.right_where_agreed += usize::from(ok);
            }
        }
        s.n += 1;
        s.right += usize::from(ok);
        let engine = e["engine"].as_str().unwrap_or("?").to_string();
        let slot = s.per_engine.entry(engine).or_default();
        slot.0 += usize::from(ok);
        slot.1 += 1;
        let conf = j["verdict"]["confidence"].as_f64().unwrap_or(0.0);
        s.confidences.push((conf, ok));
        if oom && got == "none" {
            s.oom_called_none.push(file.to_string());
        }
        if !oom && got != "none" {
            s.look_alike_called_oom.push(format!("{file} → {got}"));
        }
        if !ok {
            s.misses.push(format!("{file}: {want}, got {got}"));
        }
    }
    s
}

/// Print the score, per engine, the misses and the calibration table (per confidence band).
pub fn report(name: &str, s: &Score) {
    println!(
        "{name}: {}/{} right ({:.1} %), {} OOM(s) called none, {} look-alike(s) called an OOM",
        s.right,
        s.n,
        s.percent(),
        s.oom_called_none.len(),
        s.look_alike_called_oom.len()
    );
    if s.second_n > 0 {
        println!(
            "  a second annotator, blind, labelled {} of them: the two agree on {} ({:.1} %); llm-oom is right on {} of those {} ({:.1} %) and on {} of the {} against the second annotator",
            s.second_n,
            s.annotators_agree,
            100.0 * s.annotators_agree as f64 / s.second_n as f64,
            s.right_where_agreed,
            s.annotators_agree,
            100.0 * s.right_where_agreed as f64 / s.annotators_agree.max(1) as f64,
            s.right_vs_second,
            s.second_n
        );
    }
    for (engine, (right, n)) in &s.per_engine {
        println!("  {engine:<18} {right}/{n}");
    }
    for m in &s.misses {
        println!("  miss {m}");
    }
    for (lo, hi) in [(0.8, 1.01), (0.6, 0.8), (0.0, 0.6)] {
        let band: Vec<bool> = s
            .confidences
            .iter()
            .filter(|c| c.0 >= lo && c.0 < hi)
            .map(|c| c.1)
            .collect();
        let right = band.iter().filter(|&&b| b).count();
        println!("  confidence [{lo}, {hi}): right {right} of {}", band.len());
    }
}

/// The two properties every split must have: no OOM called `none`, no look-alike called an OOM.
pub fn assert_never_none_for_an_oom(s: &Score) {
    assert!(
        s.oom_called_none.is_empty(),
        "OOMs called none: {:?}",
        s.oom_called_none
    );
    assert!(
        s.look_alike_called_oom.is_empty(),
        "look-alikes called an OOM: {:?}",
        s.look_alike_called_oom
    );
}

/// A tune split: all its logs scored, none of its OOMs called `none`, at least `floor` right.
fn assert_tuned(corpus: &str, logs: usize, floor: usize) {
    assert_tuned_except(corpus, logs, floor, &[], &[]);
}

/// `assert_tuned`, except for the OOM logs listed in `wordless` and the look-alikes listed in
/// `read_as_oom`. Wordless: pastes whose text says nothing of memory (no error line, no figure,
/// no out-of-memory word), labelled an OOM by their thread — calling them an OOM would be fitting
/// the label. Read as OOM: logs whose text alone is a real allocation failure in a known
/// wording, which only the thread's later prose shows to be a bug. Each is named where it is
/// listed, with what it holds.
fn assert_tuned_except(
    corpus: &str,
    logs: usize,
    floor: usize,
    wordless: &[&str],
    read_as_oom: &[&str],
) {
    let mut s = score(corpus, "tune");
    report(&format!("{corpus}/tune"), &s);
    assert_eq!(s.n, logs, "{corpus}: the tune split has {logs} logs");
    // A listed exception the reader no longer needs is stale: take it off the list.
    let stale: Vec<&&str> = wordless
        .iter()
        .filter(|w| !s.oom_called_none.iter().any(|f| f == **w))
        .collect();
    assert!(
        stale.is_empty(),
        "{corpus}: listed as wordless but no longer called none: {stale:?}"
    );
    let stale: Vec<&&str> = read_as_oom
        .iter()
        .filter(|w| {
            !s.look_alike_called_oom
                .iter()
                .any(|f| f.split(" → ").next() == Some(**w))
        })
        .collect();
    assert!(
        stale.is_empty(),
        "{corpus}: listed as read as an OOM but no longer: {stale:?}"
    );
    s.oom_called_none
        .retain(|f| !wordless.contains(&f.as_str()));
    s.look_alike_called_oom.retain(|f| {
        let file = f.split(" → ").next().unwrap_or(f);
        !read_as_oom.contains(&file)
    });
    assert_never_none_for_an_oom(&s);
    assert!(
        s.right >= floor,
        "{corpus}/tune: {}/{} right, below the recorded {floor}",
        s.right,
        s.n
    );
}

#[test]
fn tune_split_scores_and_never_calls_an_oom_none() {
    assert_tuned("real", TUNE_LOGS, TUNE_RIGHT);
}

/// The fresh corpus (tests/fixtures/logs/real-fresh, 48 logs from 26 engines, gathered in session
/// 5 by a helper that never ran llm-oom) was scored ONCE as a held-out set: **32/48 right (66.7 %),
/// 3 OOMs called none** (kubernetes-kserve-2290, llamaedge-241, sophgo-llmtpu-8). It was then
/// tuned on (general rules: `exitCode: 137`, a llama.cpp failure line cut off, `*alloc* failed`,
/// Ray's own OutOfMemoryError, vLLM's 0 cache blocks as kv_cache) and is now a tune split
/// (`was_heldout: true`); the next held-out set has to be gathered anew.
const FRESH_LOGS: usize = 48;
/// 38 after session 5; 40 since the rules for real-2026-12 (the optimizer's step, CUDA-graph
/// pools), which this corpus was not tuned for; 43 since the general rules of issue #15's
/// second round (E23 the part the message names, E24 the last phase, this process among
/// several listed).
const FRESH_RIGHT: usize = 43;

#[test]
fn the_fresh_corpus_once_held_out_now_tuned_scores_and_never_calls_an_oom_none() {
    assert_tuned("real-fresh", FRESH_LOGS, FRESH_RIGHT);
}

/// The 2026-12 corpus (tests/fixtures/logs/real-2026-12, 101 logs from 31 engines, issue #15),
/// gathered by a helper who never ran the tool and split by sha256(source) before anything else:
/// - its tune half (55) was scored ONCE before any rule was fitted to it: **27/55 right
///   (49.1 %), 5 OOMs called none** (accelerate-chatlm-mini-chinese-40, dmesg-vllm-54237,
///   pytorch-fastmri-challenge-238, windows-aitextgen-188, windows-comfyui-7550), then tuned to
///   42/55 by another helper who never saw the held-out half;
/// - its held-out half (46, `"was_heldout": true`) was then scored ONCE with those rules:
///   **24/46 right (52.2 %), 6 OOMs called none** (llamacpp-eullm-302,
///   nodellamacpp-ai-product-2, sglang-14948, transformers-chatglm-webui-3, vllm-v1-33297,
///   vllm-v1-club-3090-4), 0 look-alikes called an OOM — far from the 90 % asked. Fixing the
///   six "none" (rules E15–E18 in docs/explain.md) made it 28/46 with none called `none`; it is a
///   tune split now, and the next held-out set has to be gathered anew.
const DEC_LOGS: usize = 101;
/// 75 after E15–E22; 81 with the second round's general rules (E23, E24, newest-first logs,
/// P1's segment, P4's 4 GiB buffer, IPython's traceback head, wrapped old messages).
const DEC_RIGHT: usize = 81;

#[test]
fn the_2026_12_corpus_tuned_scores_and_never_calls_an_oom_none() {
    assert_tuned("real-2026-12", DEC_LOGS, DEC_RIGHT);
}

/// The sealed set of session 6 (52 real logs, 21 engines, 8 look-alikes, gathered by a helper who
/// never ran the tool), scored ONCE in session 7 after the second round of general rules and
/// before any rule saw it: **38/52 right (73.1 %), 2 OOMs called none** (sglang-4184: SGLang's
/// "Decode out of memory happened", then a look-alike; mlx-omlx-2321: "too large for available
/// memory" without "the"), 0 look-alikes called an OOM. Those two were fixed (SGLang's retraction
/// is kv_cache; the wording; "context too large" names the context); it is a tune split now.
const SEALED_LOGS: usize = 52;
const SEALED_RIGHT: usize = 40;

#[test]
fn the_sealed_2026_12b_set_tuned_scores_and_never_calls_an_oom_none() {
    assert_tuned("sealed-2026-12b", SEALED_LOGS, SEALED_RIGHT);
}

/// The sealed set of session 7 (50 real logs, 21 engines, 8 look-alikes, gathered by a helper who
/// never ran the tool), scored ONCE in session 8 before any rule saw it: **26/50 right (52.0 %),
/// 4 OOMs called none** (transformers-inseq-286, kubernetes-gpu-operator-2880,
/// openvino-NoLlama-21, peft-1149), 1 look-alike called an OOM (windows-vibe-1168, `unknown`).
/// Tuned with general rules (the figures under "would exceed allowed memory", a wrapped
/// tt-metal message, IPython's cut traceback head, gunicorn's SIGKILL, TensorRT-LLM's
/// max_batch_size, ComfyUI's compute nodes, vLLM's CUDA-graph estimate, a full disk) to 34/50.
const SEALED_C_LOGS: usize = 50;
const SEALED_C_RIGHT: usize = 34;
/// Labelled OOMs whose paste has no out-of-memory line: an nvidia-smi process table
/// (gpu-operator-2880), OpenVINO's "Got unfinished GenerationStatus" (NoLlama-21). A traceback
/// cut before its error line (peft-1149) is `unknown` since rule E80, not `none`.
const SEALED_C_WORDLESS: &[&str] = &[
    "kubernetes-gpu-operator-2880.log",
    "openvino-NoLlama-21.log",
];

#[test]
fn the_sealed_2026_12c_set_tuned_scores_and_calls_no_worded_oom_none() {
    assert_tuned_except(
        "sealed-2026-12c",
        SEALED_C_LOGS,
        SEALED_C_RIGHT,
        SEALED_C_WORDLESS,
        &[],
    );
}

/// The sealed set gathered in session 8 (49 real logs, 24 engines, 7 look-alikes, by a helper who
/// never ran the tool), scored ONCE the same session after sealed-2026-12c's rules and before any
/// rule saw it: **29/49 right (59.2 %), 10 OOMs called none** (SIGKILLs worded as ollama's
/// "signal: killed" and DeepSpeed's "return code = -9", a negative KV budget, TensorRT-LLM's
/// maxTokensInPagedKvCache check, LM Studio's JSON with no RAM left, a macOS IOGPUMemory panic, and
/// three wordless pastes), 0 look-alikes called an OOM. Tuned with general rules to 37/49.
const SEALED_D_LOGS: usize = 49;
const SEALED_D_RIGHT: usize = 37;
/// Labelled OOMs whose paste has no out-of-memory line: DeepSpeed's launcher killing its
/// subprocesses with the exit code cut off (DeepSpeed-3160), cuBLAS not initialised — a
/// look-alike elsewhere (llama2c-279) — on a card Julia lists nearly full (CUDA.jl-1567). A
/// from_pretrained traceback cut before its error (ChatGLM-6B-631) is `unknown` since rule E80.
const SEALED_D_WORDLESS: &[&str] = &["deepspeed-DeepSpeed-3160.log", "julia-CUDA.jl-1567.log"];

#[test]
fn the_sealed_2026_12d_set_tuned_scores_and_calls_no_worded_oom_none() {
    assert_tuned_except(
        "sealed-2026-12d",
        SEALED_D_LOGS,
        SEALED_D_RIGHT,
        SEALED_D_WORDLESS,
        &[],
    );
}

/// The sealed set gathered in session 8 by a second helper (50 real logs, 30 engines and
/// platforms, 9 look-alikes), scored ONCE after sealed-2026-12d's rules and before any rule saw it:
/// **25/50 right (50.0 %), 1 OOM called none** (ComfyUI's message cut to "Allocation on device"),
/// **3 look-alikes called an OOM** (llama.cpp's pinned-memory fallback twice, TensorRT-LLM's
/// kernel shared memory). Tuned with general rules to 34/50.
const SEALED_E_LOGS: usize = 50;
const SEALED_E_RIGHT: usize = 35;

#[test]
fn the_sealed_2026_12e_set_tuned_scores_and_never_calls_an_oom_none() {
    assert_tuned("sealed-2026-12e", SEALED_E_LOGS, SEALED_E_RIGHT);
}

/// The sealed set gathered in session 8 by a third helper (50 real logs, 27 engines, 8
/// look-alikes), scored ONCE with all of session 8's rules and before any rule saw it: **34/50
/// right (68.0 %), 5 OOMs called none** (Intel XPU's "can NOT allocate", LM Studio's "insufficient
/// system resources", torch elastic's "exitcode: -9", PyTorch's old figures without their head,
/// and a paste with no error line), 0 look-alikes called an OOM. Tuned with general rules to 37/50.
const SEALED_F_LOGS: usize = 50;
const SEALED_F_RIGHT: usize = 38;
/// ollama's offload arithmetic and a helper's analysis, without the kill line (ollama-10739).
const SEALED_F_WORDLESS: &[&str] = &["ollama-ollama-10739.log"];

#[test]
fn the_sealed_2026_12f_set_tuned_scores_and_calls_no_worded_oom_none() {
    assert_tuned_except(
        "sealed-2026-12f",
        SEALED_F_LOGS,
        SEALED_F_RIGHT,
        SEALED_F_WORDLESS,
        &[],
    );
}

/// The sealed set gathered in session 8 by a fourth helper (49 real logs, 30 engines and
/// platforms, 8 look-alikes), scored ONCE in session 9 with all of session 8's rules and before
/// any rule saw it: **30/49 right (61.2 %), 2 OOMs called none** (earlyoom's SIGTERM, llama.cpp
/// on Metal past its working set with "buffer is nil"), **2 look-alikes called an OOM** (LM
/// Studio's loader bug, a device-placement cuBLAS failure). Tuned with general rules to 36/49.
const SEALED_G_LOGS: usize = 49;
const SEALED_G_RIGHT: usize = 37;
/// LM Studio's `failed to allocate buffer for kv cache` at every -c (a loader bug: the bundled
/// llama-server loads the same GGUF), and `CUBLAS_STATUS_ALLOC_FAILED when calling
/// cublasCreate(handle)` on any GPU but cuda:0 (a device-placement bug in that torch version).
const SEALED_G_READ_AS_OOM: &[&str] = &[
    "lmstudio-lmstudio-bug-tracker-2319.log",
    "pytorch-Ant-Multi-Modal-Framework-26.log",
];

#[test]
fn the_sealed_2026_12g_set_tuned_scores_and_never_calls_an_oom_none() {
    assert_tuned_except(
        "sealed-2026-12g",
        SEALED_G_LOGS,
        SEALED_G_RIGHT,
        &[],
        SEALED_G_READ_AS_OOM,
    );
}

/// The eighth and ninth sealed sets (tests/fixtures/logs/sealed-2026-12h, -12i), gathered by two
/// helpers in session 10 from disjoint threads (odd and even issue numbers), each scored once
/// before any rule saw it: 29/45 (64.4 %; 2 OOMs called none, 1 look-alike called an OOM) and
/// 15/22 (68.2 %; 2 OOMs called none, 1 look-alike called an OOM). Tuned with general rules:
/// a kubelet's eviction for node memory, `Killed` after a progress bar in s/it, XLA's
/// fragmentation figures, torch.nn's parameter creation as the load, and Intel XPU's 4 GB
/// limit on one block when the request would have fit.
const SEALED_H_LOGS: usize = 45;
const SEALED_H_RIGHT: usize = 34;
/// stable-diffusion.cpp asking ggml_aligned_malloc for 2.2 EB: a size bug, which the log words
/// as `insufficient memory`.
const SEALED_H_READ_AS_OOM: &[&str] = &["sdcpp-stable-diffusion.cpp-43.log"];
const SEALED_I_LOGS: usize = 22;
const SEALED_I_RIGHT: usize = 17;
/// Pastes with no out-of-memory line: FSDP's allocated/reserved printout alone, and a
/// container's exit cut at "exite".
const SEALED_I_WORDLESS: &[&str] = &[
    "fsdp-pytorch-124260.log",
    "docker-stable-diffusion-webui-docker-64.log",
];

/// The tenth and eleventh sealed sets (tests/fixtures/logs/sealed-2026-12j, -12k), gathered by
/// two helpers in session 11 from disjoint threads (odd and even issue numbers) past the 622
/// sources before them, each scored once before any rule saw it: 29/44 (65.9 %; no OOM called
/// none, no look-alike called an OOM) and 26/40 (65.0 %; 1 OOM called none, 3 look-alikes called
/// an OOM). Tuned with general rules: MLX's buffer-size message wrapped over two lines,
/// llama.cpp's mlock warning (RLIMIT_MLOCK) as a look-alike, a model's own `nn.Linear` in its
/// `__init__` as the load, ComfyUI's loader nodes as the load.
const SEALED_J_LOGS: usize = 44;
const SEALED_J_RIGHT: usize = 32;
const SEALED_K_LOGS: usize = 40;
const SEALED_K_RIGHT: usize = 31;
/// CTranslate2 printing "CUDA failed with error out of memory": the thread blames an allocator
/// change of a new release, which the log itself cannot show.
const SEALED_K_READ_AS_OOM: &[&str] = &["ctranslate2-CTranslate2-690.log"];

#[test]
fn the_sealed_2026_12j_set_tuned_scores_and_never_calls_an_oom_none() {
    assert_tuned_except("sealed-2026-12j", SEALED_J_LOGS, SEALED_J_RIGHT, &[], &[]);
}

#[test]
fn the_sealed_2026_12k_set_tuned_scores_and_never_calls_an_oom_none() {
    assert_tuned_except(
        "sealed-2026-12k",
        SEALED_K_LOGS,
        SEALED_K_RIGHT,
        &[],
        SEALED_K_READ_AS_OOM,
    );
}

/// The twelfth and thirteenth sealed sets (tests/fixtures/logs/sealed-2026-12l, -12m), gathered
/// by two helpers in session 12 from disjoint threads (odd and even) past the 706 sources before
/// them, each labelled again by a second helper who read the threads blind: scored ONCE with the
/// rules of 3224442, before any rule saw them (docs/calibration/explain-first-scores-sealed-2026-
/// 12l-m.jsonl): 19/34 (55.9 %; 2 OOMs called none) and 31/40 (77.5 %; 3 OOMs called none, 1
/// look-alike called an OOM). Where the two annotators agree (61 of 74), 42 right (68.9 %).
/// Tuned with general rules E62-E71.
const SEALED_L_LOGS: usize = 34;
const SEALED_L_RIGHT: usize = 22;
/// kubernetes-10861: `kubectl describe pod` with `Restart Count: 5` and an empty reason — the
/// thread says the container hit its memory limit; nothing in the paste says so.
const SEALED_L_WORDLESS: &[&str] = &["kubernetes-kubernetes-10861.log"];
const SEALED_M_LOGS: usize = 40;
const SEALED_M_RIGHT: usize = 36;

#[test]
fn the_sealed_2026_12l_set_tuned_scores_and_calls_no_worded_oom_none() {
    assert_tuned_except(
        "sealed-2026-12l",
        SEALED_L_LOGS,
        SEALED_L_RIGHT,
        SEALED_L_WORDLESS,
        &[],
    );
}

#[test]
fn the_sealed_2026_12m_set_tuned_scores_and_never_calls_an_oom_none() {
    assert_tuned_except("sealed-2026-12m", SEALED_M_LOGS, SEALED_M_RIGHT, &[], &[]);
}

/// The fourteenth and fifteenth sealed sets (sealed-2026-12n, -12o), gathered in session 13
/// from disjoint threads (odd and even) past the 780 sources before them, each labelled again
/// blind by a second helper: scored ONCE with the rules of a31860b (docs/calibration/explain-
/// first-scores-sealed-2026-12n-o.jsonl): 27/50 (54.0 %; 10 OOMs called none, 2 look-alikes
/// called an OOM) and 24/42 (57.1 %; 2 OOMs none). Scored ONCE more, still unread, after the
/// catalogue of the engines' own messages landed (b943df3, docs/calibration/explain-second-
/// scores-sealed-2026-12n-o.jsonl): 28/50 and 24/42 — rules read from the engines' source
/// carried over no better than the corpus-tuned ones. Then read and tuned.
const SEALED_N_LOGS: usize = 50;
const SEALED_N_RIGHT: usize = 33;
/// OOMs whose paste has no words of one: vllm-787 cuts the exception to `...`; k8s-vllm-28923
/// says it in prose ("Container is killed by Kubernetes when memory crosses the defined limit");
/// Linly-83's DeepSpeed launcher says `exits with return code = 1`; lmstudio-297 prints only an
/// exit code (the second annotator calls it no OOM).
const SEALED_N_WORDLESS: &[&str] = &[
    "vllm-vllm-787.log",
    "k8s-vllm-28923.log",
    "deepspeed-Linly-83.log",
    "lmstudio-lmstudio-bug-tracker-297.log",
];
/// Look-alikes by both annotators that explain reads as an out-of-memory: vmlx-11's macOS
/// panic `completeMemory() prepare count underflow` (sealed-2026-12d's omlx-28 has the same
/// panic labelled kv_cache: the threads disagree), and llama.cpp-3221's `CUDA error 2 … out of
/// memory` while enumerating devices (the driver said out of memory; the maintainer blames the
/// setup).
const SEALED_N_READ_AS_OOM: &[&str] = &["mlx-vmlx-11.log", "llamacpp-llama.cpp-3221.log"];
const SEALED_O_LOGS: usize = 42;
const SEALED_O_RIGHT: usize = 30;

#[test]
fn the_sealed_2026_12n_set_tuned_scores_and_calls_no_worded_oom_none() {
    assert_tuned_except(
        "sealed-2026-12n",
        SEALED_N_LOGS,
        SEALED_N_RIGHT,
        SEALED_N_WORDLESS,
        SEALED_N_READ_AS_OOM,
    );
}

#[test]
fn the_sealed_2026_12o_set_tuned_scores_and_never_calls_an_oom_none() {
    assert_tuned_except("sealed-2026-12o", SEALED_O_LOGS, SEALED_O_RIGHT, &[], &[]);
}

/// The sixteenth and seventeenth sealed sets (sealed-2026-12p, -12q), gathered in session 14
/// from disjoint threads (odd and even) past the 872 sources before them: scored ONCE with the
/// rules of 2dbdc6c — the catalogue and the 12n/o rules in — before any rule saw them (docs/
/// calibration/explain-first-scores-sealed-2026-12p-q.jsonl): 13/27 (48.1 %; 11 OOMs called
/// none, all pastes without an out-of-memory line, 1 look-alike called an OOM) and 15/22
/// (68.2 %; 1 look-alike called an OOM). Tuned with E77-E79.
const SEALED_P_LOGS: usize = 27;
/// 17 since rule E80: two tracebacks cut before their error line (ms-swift-2127, OpenRLHF-95)
/// are `unknown`, as their threads leave them.
const SEALED_P_RIGHT: usize = 17;
/// The gatherer copied these from search excerpts that stop before the error line (the thread's
/// title or prose names the OOM; the paste does not), or the paste has no memory words at all:
/// LocalAI's `rpc error: code = Canceled`, LM Studio's `llama_decode: failed to decode, ret = -3`
/// (GGML_STATUS_FAILED, not ALLOC_FAILED), TensorRT-LLM's assertion cut at `maxTo`. Five more
/// that stop inside a traceback with no error line anywhere (exllamav2-663, ms-swift-2127,
/// DeepSeek-V2-83, OpenRLHF-95, and WeClone-83, logged at vLLM's ERROR level) are `unknown`
/// since rule E80; these have no traceback header or an error word of their own (a cut
/// `RuntimeError: … CUDA ru`), which E80 does not read past.
const SEALED_P_WORDLESS: &[&str] = &[
    "localai-LocalAI-5257.log",
    "tensorrt-llm-cortex.cpp-981.log",
    "lmdeploy-lmdeploy-519.log",
    "lmstudio-lmstudio-bug-tracker-633.log",
    "deepspeed-Baichuan2-113.log",
    "transformers-Qwen-895.log",
];
const SEALED_Q_LOGS: usize = 22;
const SEALED_Q_RIGHT: usize = 16;
/// MLX's `[metal::malloc] Resource limit (499000) exceeded`: the live-buffer count, labelled a
/// look-alike here and an out-of-memory in mlx-lm-1332 (rule E69); the second annotator of this
/// set calls it an out-of-memory too.
const SEALED_Q_READ_AS_OOM: &[&str] = &["mlx-mlx-vlm-1972.log"];

#[test]
fn the_sealed_2026_12p_set_tuned_scores_and_calls_no_worded_oom_none() {
    assert_tuned_except(
        "sealed-2026-12p",
        SEALED_P_LOGS,
        SEALED_P_RIGHT,
        SEALED_P_WORDLESS,
        &[],
    );
}

#[test]
fn the_sealed_2026_12q_set_tuned_scores_and_never_calls_an_oom_none() {
    assert_tuned_except(
        "sealed-2026-12q",
        SEALED_Q_LOGS,
        SEALED_Q_RIGHT,
        &[],
        SEALED_Q_READ_AS_OOM,
    );
}

/// The eighteenth and nineteenth sealed sets (session 15: 31 logs of odd threads with 9
/// look-alikes, 25 of even threads with 10), gathered past 921 earlier sources and scored ONCE
/// with the rules of 0acbaed (E80 in) before any rule saw them (docs/calibration/
/// explain-first-scores-sealed-2026-12r-s.jsonl): **19/31 (61.3 %; 0 OOMs called none, 0
/// look-alikes called an OOM)** and **16/25 (64.0 %; 2 OOMs called none, 1 look-alike called an
/// OOM)**. Tuned with E81–E84 to 20/31 and 20/25.
const SEALED_R_LOGS: usize = 31;
const SEALED_R_RIGHT: usize = 20;
const SEALED_S_LOGS: usize = 25;
const SEALED_S_RIGHT: usize = 20;
/// A CPU run on Windows that stops while loading checkpoint shards and returns to the prompt:
/// no error line at all (the thread: 16 GB of RAM full).
const SEALED_S_WORDLESS: &[&str] = &["transformers-unlimiformer-56.log"];
/// TGI's `Not enough memory to handle 1024 prefill tokens`: its warm-up's own words, which the
/// thread shows to be bitsandbytes' 8-bit path failing on Hopper.
const SEALED_S_READ_AS_OOM: &[&str] = &["tgi-text-generation-inference-780.log"];

/// Session 16's two sealed sets (36 and 17 logs, gathered by docs/corpus-brief.md), scored once
/// with the rules of 032b082 before any rule saw them (docs/calibration/
/// explain-first-scores-sealed-2026-12t-u.jsonl): **29/36 (80.6 %; 3 OOMs called none, 1
/// look-alike called an OOM)** and **6/17 (35.3 %; 2 OOMs called none)**. Tuned with E85 (a
/// negative "Available KV cache memory") to 30/36.
const SEALED_T_LOGS: usize = 36;
const SEALED_T_RIGHT: usize = 30;
const SEALED_U_LOGS: usize = 17;
const SEALED_U_RIGHT: usize = 6;
const SEALED_V_LOGS: usize = 43;
const SEALED_V_RIGHT: usize = 25;
const SEALED_W_LOGS: usize = 42;
const SEALED_W_RIGHT: usize = 22;
/// Host-memory kills with no memory words: BitNet's converter `died with <Signals.SIGKILL: 9>`,
/// LlamaFactory's export ending in `Killed` (the threads: host RAM), and Ray's `Worker
/// unexpectedly exits with a connection error code 2` (the thread: the node's OOM killer).
const SEALED_V_WORDLESS: &[&str] = &[
    "bitnet-BitNet-103.log",
    "llamafactory-LlamaFactory-1975.log",
    "ray-OpenRLHF-1065.log",
];
/// intel-xpu-backend-for-triton#7477: the annotator called it a look-alike (the thread: a
/// driver bug), though its text says "XPU out of memory"; read as an OOM.
const SEALED_V_READ_AS_OOM: &[&str] = &["xpu-intel-xpu-backend-for-triton-7477.log"];
/// cudarc's CUDA_ERROR_ILLEGAL_ADDRESS labelled an OOM by the thread (apache/mahout#696), and
/// alpaca-lora's `killed` at `Loading checkpoint shards: 52%` (host RAM): no memory words.
const SEALED_W_WORDLESS: &[&str] = &["cudarc-mahout-696.log", "transformers-alpaca-lora-546.log"];
/// vLLM's `KeyboardInterrupt: MQLLMEngine terminated` (the thread: lowering
/// gpu_memory_utilization fixed it) and a Windows prompt back after "Loading checkpoint shards:
/// 0%" (the thread: an 8 GB card): no memory words.
const SEALED_T_WORDLESS: &[&str] = &["vllm-vllm-15469.log", "transformers-chatglm3-1317.log"];
/// TensorRT's "skipping tactic … insufficient memory" warnings; the thread calls them harmless
/// (the second annotator read them as an OOM).
const SEALED_T_READ_AS_OOM: &[&str] = &["tensorrt-voltaml-fast-stable-diffusion-15.log"];
/// koboldcpp's `access violation reading 0x…4` after `failed to load model` (the maintainer: the
/// model will not fit), and TensorRT's builder asking 196 GiB of plugin scratch space with 44 GiB
/// available: a build-time workspace refusal, not read as an allocation failure.
const SEALED_U_WORDLESS: &[&str] = &[
    "koboldcpp-koboldcpp-1852.log",
    "tensorrt-llm-TensorRT-LLM-2688.log",
];

#[test]
fn the_sealed_2026_12t_set_tuned_scores_and_calls_no_worded_oom_none() {
    assert_tuned_except(
        "sealed-2026-12t",
        SEALED_T_LOGS,
        SEALED_T_RIGHT,
        SEALED_T_WORDLESS,
        SEALED_T_READ_AS_OOM,
    );
}

#[test]
fn the_sealed_2026_12u_set_tuned_scores_and_calls_no_worded_oom_none() {
    assert_tuned_except(
        "sealed-2026-12u",
        SEALED_U_LOGS,
        SEALED_U_RIGHT,
        SEALED_U_WORDLESS,
        &[],
    );
}

/// Sealed 2026-12v and 12w, scored once at 266b5f8 before any rule change (first sight: 25/43
/// and 22/42; docs/calibration/explain-first-scores-sealed-2026-12v-w.jsonl), now tuned sets.
#[test]
fn the_sealed_2026_12v_set_tuned_scores_and_calls_no_worded_oom_none() {
    assert_tuned_except(
        "sealed-2026-12v",
        SEALED_V_LOGS,
        SEALED_V_RIGHT,
        SEALED_V_WORDLESS,
        SEALED_V_READ_AS_OOM,
    );
}

#[test]
fn the_sealed_2026_12w_set_tuned_scores_and_calls_no_worded_oom_none() {
    assert_tuned_except(
        "sealed-2026-12w",
        SEALED_W_LOGS,
        SEALED_W_RIGHT,
        SEALED_W_WORDLESS,
        &[],
    );
}

#[test]
fn the_sealed_2026_12r_set_tuned_scores_and_never_calls_an_oom_none() {
    assert_tuned("sealed-2026-12r", SEALED_R_LOGS, SEALED_R_RIGHT);
}

#[test]
fn the_sealed_2026_12s_set_tuned_scores_and_calls_no_worded_oom_none() {
    assert_tuned_except(
        "sealed-2026-12s",
        SEALED_S_LOGS,
        SEALED_S_RIGHT,
        SEALED_S_WORDLESS,
        SEALED_S_READ_AS_OOM,
    );
}

#[test]
fn the_sealed_2026_12h_set_tuned_scores_and_never_calls_an_oom_none() {
    assert_tuned_except(
        "sealed-2026-12h",
        SEALED_H_LOGS,
        SEALED_H_RIGHT,
        &[],
        SEALED_H_READ_AS_OOM,
    );
}

#[test]
fn the_sealed_2026_12i_set_tuned_scores_and_calls_no_worded_oom_none() {
    assert_tuned_except(
        "sealed-2026-12i",
        SEALED_I_LOGS,
        SEALED_I_RIGHT,
        SEALED_I_WORDLESS,
        &[],
    );
}

/// llama.cpp's own out-of-memory logs, provoked on the H200 with known causes (#19): the model
/// buffer at load (all layers and -ngl 24), the KV buffer, the compute buffer, and the first
/// kernels of the prompt after every buffer fitted. Every one must be named right.
#[test]
fn llama_cpps_own_h200_logs_are_all_named_right() {
    let s = score("llamacpp-h200", "tune");
    report("llamacpp-h200/tune", &s);
    assert_eq!(s.n, 7);
    assert_eq!(s.right, s.n, "{:?}", s.misses);
}

/// Score any corpus and split by hand (a new held-out set: score it once, then record it).
#[test]
#[ignore = "scores LLM_OOM_CORPUS / LLM_OOM_SPLIT (default real / tune); run with --ignored --nocapture"]
fn heldout_test_template() {
    let corpus = std::env::var("LLM_OOM_CORPUS").unwrap_or_else(|_| "real".into());
    let split = std::env::var("LLM_OOM_SPLIT").unwrap_or_else(|_| "tune".into());
    let s = score(&corpus, &split);
    report(&format!("{corpus}/{split}"), &s);
    assert!(s.n > 0, "no log in {corpus} has split {split}");
    assert_never_none_for_an_oom(&s);
}
