//! `llm-oom explain` reads the limit of a capped process, calls fragmentation only when the
//! memory is there but not contiguous, and writes remedies in the knobs of the engine that ran.

mod util;

use serde_json::Value;
use util::{json, run, temp, write};

/// `explain --json` on a log written in the test.
fn explain(log: &str, extra: &[&str]) -> Value {
    let home = temp();
    let path = write(&home.path().join("oom.log"), log);
    let path = path.to_string_lossy().into_owned();
    let mut args = vec!["explain", path.as_str(), "--json"];
    args.extend_from_slice(extra);
    let r = run(home.path(), &args);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    json(&r.stdout)
}

fn cause(v: &Value) -> &str {
    v["verdict"]["cause"].as_str().unwrap_or("")
}

fn summary(v: &Value) -> &str {
    v["verdict"]["summary"].as_str().unwrap_or("")
}

/// Every remedy's action and knob, one string to search.
fn remedies(v: &Value) -> String {
    v["remedies"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| format!("{} | {}", r["action"], r["how"]))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Llama-2-7B, batch 32 × 2,048 under `set_per_process_memory_fraction` (16 GiB of an H100).
const CAPPED: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 62.60 GiB is free. Including non-PyTorch memory, this process has 16.00 GiB memory in use. 16.00 GiB allowed; Of the allocated memory 15.20 GiB is allocated by PyTorch, and 310.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n";

#[test]
fn a_capped_process_is_read_against_its_cap_not_the_card() {
    let v = explain(CAPPED, &[]);
    let s = summary(&v);
    assert!(!s.contains("62.6 GiB free"), "{s}");
    assert!(
        s.contains("capped at 16.0 GiB") && s.contains("62.6 GiB of the card were free"),
        "{s}"
    );
    assert!(
        remedies(&v).contains("set_per_process_memory_fraction"),
        "{v}"
    );
    assert!(
        v["to_decide"]
            .as_str()
            .unwrap_or("")
            .contains("llm-oom watch"),
        "{v}"
    );
    // The batch in the log decides the cause, as on an uncapped card.
    let v = explain(&format!("batch= 32 seq= 2048\n{CAPPED}"), &[]);
    assert_eq!(cause(&v), "concurrency", "{v}");
    let first = v["verdict"]["evidence"][0]["text"].as_str().unwrap_or("");
    assert!(first.contains("0 B free of 16.0 GiB"), "{first}");
}

/// Mistral-7B built by `from_config`, batch 48 × 2,048 under a 20 GiB cap: the MLP's buffer.
const BATCH_48: &str = r#"batch= 48 seq= 2048
Traceback (most recent call last):
  File "/home/user/batch_run.py", line 40, in <module>
    out = model(input_ids=ids, attention_mask=mask)
  File "/opt/torch/.venv/lib/python3.12/site-packages/transformers/models/mistral/modeling_mistral.py", line 238, in forward
    hidden_states = self.mlp(hidden_states)
  File "/opt/torch/.venv/lib/python3.12/site-packages/transformers/models/mistral/modeling_mistral.py", line 47, in forward
    down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.62 GiB. GPU 0 has a total capacity of 79.19 GiB of which 59.20 GiB is free. Including non-PyTorch memory, this process has 19.91 GiB memory in use. 20.00 GiB allowed; Of the allocated memory 16.63 GiB is allocated by PyTorch, and 2.78 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.
"#;

#[test]
fn cached_blocks_beside_a_filled_cap_are_the_batch_not_fragmentation() {
    let v = explain(BATCH_48, &[]);
    assert_eq!(cause(&v), "concurrency", "{v}");
}

const LOGS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/logs");

fn explain_fixture(file: &str) -> Value {
    let log = std::fs::read_to_string(format!("{LOGS}/{file}")).unwrap_or_default();
    explain(&log, &[])
}

#[test]
fn vllm_without_cache_blocks_is_told_vllms_knobs() {
    let r = remedies(&explain_fixture("real-fresh/vllm-10439.log"));
    for knob in [
        "--gpu-memory-utilization",
        "--max-model-len",
        "--kv-cache-dtype fp8",
    ] {
        assert!(r.contains(knob), "{knob} missing:\n{r}");
    }
    assert!(!r.contains("--kv-cache-dtype auto"), "{r}");
    // A KV cache already in fp8 is not offered again.
    let log = "INFO 05-01 10:00:00 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='meta-llama/Llama-3.1-8B', dtype=torch.bfloat16, max_seq_len=131072, kv_cache_dtype=fp8, gpu_memory_utilization=0.90\nERROR 05-01 10:01:00 engine.py:366] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n";
    let r = remedies(&explain(log, &[]));
    assert!(!r.contains("--kv-cache-dtype"), "{r}");
    assert!(r.contains("--max-model-len"), "{r}");
}

#[test]
fn an_ollama_log_is_told_ollamas_knobs_whatever_engine() {
    for file in [
        "real-2026-12c/ollama-ollama-6283.log",
        "real-2026-12c/ollama-ollama-3418.log",
    ] {
        let r = remedies(&explain_fixture(file));
        assert!(r.contains("num_ctx"), "{file}:\n{r}");
        assert!(
            !r.contains("BitsAndBytesConfig")
                && !r.contains("cache_implementation")
                && !r.contains(" -c N"),
            "{file}:\n{r}"
        );
    }
}

#[test]
fn a_q4_k_m_gguf_is_not_told_to_quantize_to_q4_k_m() {
    let r = remedies(&explain_fixture("llamacpp-h200/load-weights.log"));
    assert!(!r.to_lowercase().contains("q4_k_m.gguf q4_k_m"), "{r}");
    assert!(r.contains("Q3_K_M"), "{r}");
}

/// vLLM's "max seq len" refusals: the remedies carry the numbers the log's own figures give,
/// through the rules `plan --engine vllm` uses (whole 16-token blocks, the smallest 0.01 step of
/// `--gpu-memory-utilization` that adds the deficit, fp8 halving the need).
#[test]
fn vllm_kv_remedies_carry_the_logs_own_figures() {
    // vllm-10517 (v0): total_gpu_memory=23.58GiB, gpu_memory_utilization=0.90,
    // kv_cache_size=2.89GiB, # GPU blocks: 1478 (× 16 = 23,648 tokens), max seq len 29,000.
    //   --max-model-len: 23,648 is 1,478 whole blocks → 23648.
    //   one request: 2.89 GiB × 29,008 (1,813 blocks) / 23,648 = 3.545 GiB; deficit 0.655 GiB
    //   (671 MiB); 0.90 + 0.655 / 23.58 = 0.9278 → 0.93.
    //   fp8: 3.545 / 2 = 1.77 GiB of the 2.89 GiB available → fits.
    let r = remedies(&explain_fixture("real-2026-12/vllm-10517.log"));
    assert!(r.contains("--max-model-len 23648"), "{r}");
    assert!(r.contains("--gpu-memory-utilization 0.93"), "{r}");
    assert!(
        r.contains("instead of 0.90 → 671 MiB more for the KV cache"),
        "{r}"
    );
    assert!(
        r.contains("needs 1.77 GiB of the 2.89 GiB available\""),
        "{r}"
    );
    // OpenRLHF-336 (v0): # GPU blocks: 378, max seq len 8,192, KV cache 6,048 tokens = 378 × 16.
    let r = remedies(&explain_fixture("real-2026-12c/vllm-OpenRLHF-336.log"));
    assert!(r.contains("--max-model-len 6048"), "{r}");
    // vllm-34076 (v1): 24.0 GiB needed, 3.18 GiB available, vLLM's estimate 34,736 (2,171
    // blocks); fp8 halves the need to 12.0 GiB, still more than 3.18 GiB.
    let r = remedies(&explain_fixture("real-2026-12e/vllm-vllm-34076.log"));
    assert!(r.contains("--max-model-len 34736"), "{r}");
    assert!(
        r.contains("needs 12.0 GiB of the 3.18 GiB available — still too much"),
        "{r}"
    );
}
