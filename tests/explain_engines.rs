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
