//! A causal LM no family claims, with llama's standard fields and `layer_types`, planned from
//! those fields with the assumption said: `ministral` (transformers 5.17's modeling_ministral.py
//! is llama's block — gated MLP, RMSNorm before attention and MLP, no biases, no q/k norms — with
//! full and sliding-window layers from `layer_types`). With LLM_OOM_TEST_PYTHON (a Python with
//! torch and transformers 5.17), the parameter count is held to the meta-device build.

mod util;

use std::path::PathBuf;

use util::{json, llm_oom, temp, write};

const MINISTRAL: &str = r#"{"architectures":["MinistralForCausalLM"],"model_type":"ministral",
 "hidden_size":256,"intermediate_size":768,"num_hidden_layers":4,"num_attention_heads":8,
 "num_key_value_heads":2,"head_dim":32,"vocab_size":1000,"rms_norm_eps":1e-5,
 "max_position_embeddings":4096,"sliding_window":64,
 "layer_types":["sliding_attention","full_attention","sliding_attention","full_attention"],
 "tie_word_embeddings":false,"torch_dtype":"bfloat16"}"#;

/// embeddings + lm_head + 4 × (q, o of 256 × 256; k, v of 64 × 256; gate, up, down of
/// 768 × 256; two norms) + the final norm.
const PARAMETERS: u64 =
    2 * 1000 * 256 + 4 * (2 * 256 * 256 + 2 * 64 * 256 + 3 * 768 * 256 + 2 * 256) + 256;

const COUNT: &str = r#"
import json, sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
cfg = AutoConfig.for_model(**json.load(open(sys.argv[1])))
with torch.device("meta"):
    m = AutoModelForCausalLM.from_config(cfg)
print(sum(p.numel() for p in m.parameters()))
"#;

#[test]
fn an_unknown_llama_shaped_causal_lm_is_planned_from_its_standard_fields() {
    let home = temp();
    let config = write(&home.path().join("m").join("config.json"), MINISTRAL);
    let config_arg = config.to_str().unwrap();
    let out = llm_oom(home.path())
        .args(["plan", "--json", "--vram", "24GiB", "--model", config_arg])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&stdout);
    assert_eq!(v["model"]["parameters"], PARAMETERS, "{stdout}");
    assert_eq!(v["weights_from"], "config");
    assert_eq!(v["weights_bytes"], PARAMETERS * 2);
    let notes = v["notes"].to_string();
    for said in [
        "`ministral` is not a family llm-oom knows; sized as a llama-shaped decoder",
        "2 full-attention and 2 sliding-window (64 tokens) layers",
        "gated MLP, RMSNorm before attention and MLP, no biases, no q/k norms",
        "pass --python with a transformers that knows `ministral`",
    ] {
        assert!(notes.contains(said), "{said}: {notes}");
    }
    // The text report says it too.
    let text = llm_oom(home.path())
        .args(["plan", "--vram", "24GiB", "--model", config_arg])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&text.stdout)
        .contains("note: `ministral` is not a family llm-oom knows"));

    // Experts under the same model type are refused, naming the field and what would work.
    let moe = write(
        &home.path().join("moe").join("config.json"),
        &MINISTRAL.replace(r#""head_dim":32,"#, r#""head_dim":32,"num_experts":8,"#),
    );
    let refused = llm_oom(home.path())
        .args(["plan", "--vram", "24GiB", "--model", moe.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    for said in [
        "no family for `ministral`",
        "`num_experts`",
        "pass `--python` with a Python whose transformers knows `ministral`",
    ] {
        assert!(stderr.contains(said), "{said}: {stderr}");
    }

    let Some(py) = std::env::var_os("LLM_OOM_TEST_PYTHON").map(PathBuf::from) else {
        eprintln!("LLM_OOM_TEST_PYTHON unset: the meta-device count is skipped");
        return;
    };
    let script = write(&home.path().join("count.py"), COUNT);
    let counted = std::process::Command::new(&py)
        .arg(&script)
        .arg(&config)
        .output()
        .unwrap();
    let counted: u64 = String::from_utf8_lossy(&counted.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&counted.stderr)));
    assert_eq!(counted, PARAMETERS);
}
