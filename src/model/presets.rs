//! Popular models compiled in, as the config.json facts that size them. They pass through the same
//! parser as a user's config.json, so a preset can never disagree with the real file's reading.

use std::path::Path;

use super::config::parse_config;
use super::spec::Spec;
use crate::error::InputError;

/// (Hugging Face id, config.json subset).
pub const PRESETS: &[(&str, &str)] = &[
    (
        "meta-llama/Llama-2-7b-hf",
        include_str!("../../presets/llama-2-7b.json"),
    ),
    (
        "meta-llama/Llama-2-13b-hf",
        include_str!("../../presets/llama-2-13b.json"),
    ),
    (
        "mistralai/Mistral-7B-Instruct-v0.2",
        include_str!("../../presets/mistral-7b-instruct-v0.2.json"),
    ),
    (
        "meta-llama/Meta-Llama-3-8B",
        include_str!("../../presets/meta-llama-3-8b.json"),
    ),
    (
        "meta-llama/Llama-3.1-8B-Instruct",
        include_str!("../../presets/llama-3.1-8b-instruct.json"),
    ),
    (
        "Qwen/Qwen2.5-0.5B-Instruct",
        include_str!("../../presets/qwen2.5-0.5b-instruct.json"),
    ),
    (
        "Qwen/Qwen2.5-7B-Instruct",
        include_str!("../../presets/qwen2.5-7b-instruct.json"),
    ),
    ("Qwen/Qwen3-8B", include_str!("../../presets/qwen3-8b.json")),
    (
        "google/gemma-2-9b-it",
        include_str!("../../presets/gemma-2-9b-it.json"),
    ),
    (
        "microsoft/Phi-3-mini-4k-instruct",
        include_str!("../../presets/phi-3-mini-4k-instruct.json"),
    ),
    (
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        include_str!("../../presets/mixtral-8x7b-instruct-v0.1.json"),
    ),
    (
        "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
        include_str!("../../presets/tinyllama-1.1b-chat-v1.0.json"),
    ),
    (
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        include_str!("../../presets/smollm2-135m-instruct.json"),
    ),
    (
        "meta-llama/Llama-3.3-70B-Instruct",
        include_str!("../../presets/llama-3.3-70b-instruct.json"),
    ),
    (
        "meta-llama/Llama-3.1-405B-Instruct",
        include_str!("../../presets/llama-3.1-405b-instruct.json"),
    ),
    (
        "deepseek-ai/DeepSeek-V3",
        include_str!("../../presets/deepseek-v3.json"),
    ),
    (
        "deepseek-ai/DeepSeek-V2-Lite",
        include_str!("../../presets/deepseek-v2-lite.json"),
    ),
    (
        "google/gemma-3-27b-it",
        include_str!("../../presets/gemma-3-27b-it.json"),
    ),
    (
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        include_str!("../../presets/llama-4-scout-17b-16e-instruct.json"),
    ),
    (
        "openai/gpt-oss-20b",
        include_str!("../../presets/gpt-oss-20b.json"),
    ),
    (
        "openai/gpt-oss-120b",
        include_str!("../../presets/gpt-oss-120b.json"),
    ),
    (
        "ai21labs/Jamba-v0.1",
        include_str!("../../presets/jamba-v0.1.json"),
    ),
    (
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        include_str!("../../presets/qwen3-next-80b-a3b-instruct.json"),
    ),
    (
        "mistralai/Mamba-Codestral-7B-v0.1",
        include_str!("../../presets/mamba-codestral-7b-v0.1.json"),
    ),
    (
        "Qwen/Qwen3-235B-A22B",
        include_str!("../../presets/qwen3-235b-a22b.json"),
    ),
    (
        "microsoft/Phi-3.5-MoE-instruct",
        include_str!("../../presets/phi-3.5-moe-instruct.json"),
    ),
    (
        "tiiuae/Falcon-H1-7B-Instruct",
        include_str!("../../presets/falcon-h1-7b-instruct.json"),
    ),
    (
        "ibm-granite/granite-4.0-h-tiny",
        include_str!("../../presets/granite-4.0-h-tiny.json"),
    ),
    // huggingface.co/Qwen/Qwen3-VL-30B-A3B-Instruct config.json at commit 1fc78ad, the fields
    // that size it as transcribed in a public test; the vision tower is counted.
    (
        "Qwen/Qwen3-VL-30B-A3B-Instruct",
        include_str!("../../presets/qwen3-vl-30b-a3b-instruct.json"),
    ),
    // huggingface.co/Qwen/Qwen3.5-35B-A3B config.json (revision 59d61f3c), its fields as quoted
    // in public code (text: 34,660,610,688 parameters, which this reproduces); the vision
    // tower is counted.
    (
        "Qwen/Qwen3.5-35B-A3B",
        include_str!("../../presets/qwen3.5-35b-a3b.json"),
    ),
    // deepseek-ai/DeepSeek-V3.2: its raw config.json, copied from a public model-inspection report
    // (GitHub index file 62736905881; tests/fixtures/configs-2026/manifest.json); fields naming
    // tokens, dropout or loading code left out. 671,877,944,064 parameters without the MTP layer's
    // 11,624,027,648; FP8 in 128×128 blocks.
    (
        "deepseek-ai/DeepSeek-V3.2",
        include_str!("../../presets/deepseek-v3.2.json"),
    ),
    // deepseek-ai/DeepSeek-V4-Flash: its raw config.json, copied from a public model-inspection
    // report (GitHub index file 62608729298; tests/fixtures/configs-2026/manifest.json); fields
    // naming tokens, dropout or loading code left out. 284,334,567,511 parameters; FP8 in 128×128
    // blocks.
    (
        "deepseek-ai/DeepSeek-V4-Flash",
        include_str!("../../presets/deepseek-v4-flash.json"),
    ),
    // zai-org/GLM-5.1: its raw config.json, copied from a public model-inspection report (GitHub
    // index file 62604838642; tests/fixtures/configs-2026/manifest.json); fields naming tokens,
    // dropout or loading code left out. 743,911,218,432 parameters without the MTP layer's
    // 9,952,920,576.
    (
        "zai-org/GLM-5.1",
        include_str!("../../presets/glm-5.1.json"),
    ),
    // google/gemma-4-31B-it: the config as transformers 5.7.0 printed it, copied from a public
    // model-inspection report (GitHub index file 62810419502;
    // tests/fixtures/configs-2026/manifest.json); fields naming tokens, dropout or loading code
    // left out. 31,273,088,876 parameters, the vision tower counted.
    (
        "google/gemma-4-31B-it",
        include_str!("../../presets/gemma-4-31b-it.json"),
    ),
    // moonshotai/Kimi-K2.5: the config as transformers 5.7.0 printed it, copied from a public
    // model-inspection report (GitHub index file 62530201892;
    // tests/fixtures/configs-2026/manifest.json); fields naming tokens, dropout or loading code
    // left out. 1,026,408,232,448 parameters, the MoonViT tower not counted offline; INT4 routed
    // experts.
    (
        "moonshotai/Kimi-K2.5",
        include_str!("../../presets/kimi-k2.5.json"),
    ),
    // moonshotai/Kimi-K3: its raw config.json, copied from a public model-inspection report
    // (GitHub index file 62826164383; tests/fixtures/configs-2026/manifest.json); fields naming
    // tokens or loading code left out. 2,779,484,476,000 parameters (remote code: no transformers
    // release builds it), the MoonViT tower not counted; its MXFP4 experts sit in
    // `text_config.quantization_config`, which is not read, so it is sized in bf16.
    (
        "moonshotai/Kimi-K3",
        include_str!("../../presets/kimi-k3.json"),
    ),
    // MiniMaxAI/MiniMax-M2.7: its raw config.json, copied from a public model-inspection report
    // (GitHub index file 62693775865; tests/fixtures/configs-2026/manifest.json); fields naming
    // tokens, dropout or loading code left out. 228,689,764,864 parameters; FP8 in 128×128 blocks.
    (
        "MiniMaxAI/MiniMax-M2.7",
        include_str!("../../presets/minimax-m2.7.json"),
    ),
    // nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B: its raw config.json as a public JAX model test quotes
    // it (GitHub index file 53261316862; tests/fixtures/configs-2026/manifest.json); fields naming
    // tokens, dropout or loading code left out. 31,577,940,288 parameters.
    (
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B",
        include_str!("../../presets/nemotron-3-nano-30b-a3b.json"),
    ),
    // Qwen/Qwen3.6-27B: its raw config.json, copied from a public model-inspection report (GitHub
    // index file 62633829536; tests/fixtures/configs-2026/manifest.json); fields naming tokens,
    // dropout or loading code left out. 27,356,728,560 parameters, the vision tower counted.
    (
        "Qwen/Qwen3.6-27B",
        include_str!("../../presets/qwen3.6-27b.json"),
    ),
];

/// The model `llm-oom plan` uses when none is named.
pub const DEFAULT_MODEL: &str = "Qwen/Qwen2.5-0.5B-Instruct";

/// The model `llm-oom diagnose` probes when none is named: a real model's shape (134.5 M
/// parameters) whose whole staged probe runs in seconds even on a laptop CPU.
pub const DIAGNOSE_DEFAULT_MODEL: &str = "HuggingFaceTB/SmolLM2-135M-Instruct";

/// Find a preset by its id, case-insensitively; the id without its organisation also matches
/// (`Mistral-7B-Instruct-v0.2`). Models differing only in weights share shapes
/// (`Mistral-7B-v0.2` is the Instruct model's shape), so the base-model ids map to the same entry.
pub fn find(id: &str) -> Option<(&'static str, &'static str)> {
    let want = id.trim().to_ascii_lowercase();
    let alias = match want.as_str() {
        "mistralai/mistral-7b-v0.2" | "mistral-7b-v0.2" => "mistralai/mistral-7b-instruct-v0.2",
        "meta-llama/meta-llama-3-8b-instruct" | "meta-llama-3-8b-instruct" => {
            "meta-llama/meta-llama-3-8b"
        }
        "meta-llama/llama-3.1-8b" | "llama-3.1-8b" => "meta-llama/llama-3.1-8b-instruct",
        "meta-llama/llama-2-7b-chat-hf" | "llama-2-7b-chat-hf" => "meta-llama/llama-2-7b-hf",
        "meta-llama/llama-2-13b-chat-hf" | "llama-2-13b-chat-hf" => "meta-llama/llama-2-13b-hf",
        "qwen/qwen2.5-7b" | "qwen2.5-7b" => "qwen/qwen2.5-7b-instruct",
        "qwen/qwen2.5-0.5b" | "qwen2.5-0.5b" => "qwen/qwen2.5-0.5b-instruct",
        // R1 and V3-0324 are V3's shape with other weights.
        "deepseek-ai/deepseek-r1" | "deepseek-r1" | "deepseek-ai/deepseek-v3-0324" => {
            "deepseek-ai/deepseek-v3"
        }
        "deepseek-ai/deepseek-v2-lite-chat" | "deepseek-v2-lite-chat" => {
            "deepseek-ai/deepseek-v2-lite"
        }
        "google/gemma-3-27b-pt" | "gemma-3-27b-pt" => "google/gemma-3-27b-it",
        "meta-llama/llama-3.1-70b-instruct" | "llama-3.1-70b-instruct" => {
            "meta-llama/llama-3.3-70b-instruct"
        }
        "meta-llama/llama-3.1-405b"
        | "llama-3.1-405b"
        | "meta-llama/meta-llama-3.1-405b-instruct"
        | "meta-llama-3.1-405b-instruct" => "meta-llama/llama-3.1-405b-instruct",
        other => other,
    };
    PRESETS.iter().copied().find(|(pid, _)| {
        let p = pid.to_ascii_lowercase();
        p == alias || p.rsplit('/').next() == Some(alias)
    })
}

/// Whether `asked` found preset `id` by another model's name (an alias: `Llama-3.1-70B-Instruct`
/// planned as `Llama-3.3-70B-Instruct`), not by the preset's own id or its name without the
/// organisation.
pub fn near_name(asked: &str, id: &str) -> bool {
    let asked = asked.trim().to_ascii_lowercase();
    let id = id.to_ascii_lowercase();
    asked != id && Some(asked.as_str()) != id.rsplit('/').next()
}

/// Parse a preset into a `Spec` named by its canonical id.
/// A preset by its file in `presets/` (tests: the file stem, e.g. `mixtral-8x7b-instruct-v0.1`).
#[cfg(test)]
pub fn from_file(stem: &str) -> Spec {
    let path = format!("{}/presets/{stem}.json", env!("CARGO_MANIFEST_DIR"));
    let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    load(stem, &json).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn load(id: &str, json: &str) -> Result<Spec, InputError> {
    let path = format!("<preset {id}>");
    parse_config(json, Path::new(&path), id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_parses() {
        for (id, json) in PRESETS {
            let spec = load(id, json).unwrap_or_else(|e| panic!("{id}: {e}"));
            assert_eq!(spec.name, *id);
        }
    }

    #[test]
    fn finds_by_short_name_and_alias() {
        assert_eq!(
            find("Mistral-7B-Instruct-v0.2").unwrap().0,
            "mistralai/Mistral-7B-Instruct-v0.2"
        );
        assert_eq!(
            find("mistralai/mistral-7b-v0.2").unwrap().0,
            "mistralai/Mistral-7B-Instruct-v0.2"
        );
        assert!(find("nobody/nothing").is_none());
        let (id, _) = find("meta-llama/Llama-3.1-70B-Instruct").unwrap();
        assert!(near_name("meta-llama/Llama-3.1-70B-Instruct", id));
        assert!(!near_name(
            "Mistral-7B-Instruct-v0.2",
            "mistralai/Mistral-7B-Instruct-v0.2"
        ));
        assert!(!near_name(" qwen/qwen3-8b", "Qwen/Qwen3-8B"));
        assert!(find(DEFAULT_MODEL).is_some());
        // The id without its organisation, for the 2026 presets too.
        assert_eq!(find("GLM-5.1").unwrap().0, "zai-org/GLM-5.1");
        assert_eq!(find("qwen3.6-27b").unwrap().0, "Qwen/Qwen3.6-27B");
    }
}
