//! The ceilings on every size a user or a file can set, checked where the request or the `Spec` is
//! built. They are far above any real model or card (the largest published configs have ~200 layers,
//! 128 heads, 512 experts, a 262k vocabulary, 10M tokens of context), so a real input never meets
//! them; what they exclude is the input whose products would not fit in 64 bits. Past them, byte
//! arithmetic is still saturating (a saturated size never fits a card), but a size past its
//! ceiling is refused up front with the bound named (exit 2). docs/reliability.md lists them.

use crate::error::InputError;

/// Prompt tokens, and new tokens, per sequence (`--prompt-tokens`, `--max-new-tokens`).
pub const MAX_TOKENS: u64 = 10_000_000;
/// Sequences at once (`--batch`).
pub const MAX_BATCH: u64 = 65_536;
/// The card (`--vram`): 1 PiB.
pub const MAX_VRAM: u64 = 1 << 50;
/// The smallest card (`--vram`): 64 MiB (`24B` is 24 bytes, a typo for 24GB).
pub const MIN_VRAM: u64 = 64 << 20;
/// Decoder layers (`num_hidden_layers`, GGUF `block_count`).
pub const MAX_LAYERS: u64 = 65_536;
/// Attention heads, KV heads, and any other head count of a config.
pub const MAX_HEADS: u64 = 65_536;
/// Experts per layer, and experts per token.
pub const MAX_EXPERTS: u64 = 65_536;
/// Vocabulary size.
pub const MAX_VOCAB: u64 = 1 << 24;
/// A width: hidden, intermediate, head_dim, LoRA ranks, state sizes (1,048,576).
pub const MAX_DIM: u64 = 1 << 20;
/// Any other integer of a config (context length, windows, kernels): 2^32.
pub const MAX_OTHER: u64 = 1 << 32;
/// Elements of one GGUF tensor (2^44, 16 Ti elements).
pub const MAX_TENSOR_ELEMENTS: u64 = 1 << 44;

/// The ceiling for a config.json or GGUF key, and what it bounds (for the message).
pub fn for_key(key: &str) -> (u64, &'static str) {
    let k = key.rsplit('.').next().unwrap_or(key).to_ascii_lowercase();
    let full = key.to_ascii_lowercase();
    if k.contains("vocab") {
        (MAX_VOCAB, "vocabulary size")
    } else if k.contains("layer") || k == "block_count" {
        (MAX_LAYERS, "layer count")
    } else if k.contains("head_count") || k.contains("heads") || k == "n_head" {
        (MAX_HEADS, "head count")
    } else if k.contains("experts") || k.starts_with("expert_") && k.ends_with("count") {
        (MAX_EXPERTS, "expert count")
    } else if k.contains("size")
        || k.contains("dim")
        || k.contains("rank")
        || k.contains("length") && !k.contains("context")
        || k == "n_embd"
        || k == "d_model"
        || k == "n_inner"
        || full.ends_with("ssm.state_size")
    {
        (MAX_DIM, "width")
    } else {
        (MAX_OTHER, "integer field")
    }
}

/// A workload flag within its ceiling, else the error that names it.
pub fn flag(what: &'static str, value: u64) -> Result<u64, InputError> {
    if matches!(what, "--vram" | "--host-ram") && value < MIN_VRAM {
        return Err(InputError::Usage(format!(
            "{what} is {value} bytes, below llm-oom's floor of 64 MiB; write the unit, like 24GB or 24GiB"
        )));
    }
    let max = match what {
        "--batch" | "OLLAMA_NUM_PARALLEL" => MAX_BATCH,
        "--vram" | "--host-ram" | "--fit-target" => MAX_VRAM,
        _ => MAX_TOKENS,
    };
    if value > max {
        return Err(InputError::TooLarge {
            what: what.to_string(),
            value: value.to_string(),
            max: if max == MAX_VRAM {
                format!("1 PiB ({} bytes)", crate::units::group(max))
            } else {
                crate::units::group(max)
            },
        });
    }
    Ok(value)
}

/// Counts an engine's flags take (`--max-model-len`, `--context-length`, …): each 1 or more.
pub fn at_least_one(flags: &[(&str, Option<u64>)]) -> Result<(), InputError> {
    match flags.iter().find(|(_, v)| *v == Some(0)) {
        Some((flag, _)) => Err(InputError::Usage(format!("{flag} 0: write 1 or more"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_get_the_ceiling_of_what_they_count() {
        assert_eq!(for_key("num_hidden_layers").0, MAX_LAYERS);
        assert_eq!(for_key("llama.block_count").0, MAX_LAYERS);
        assert_eq!(for_key("num_key_value_heads").0, MAX_HEADS);
        assert_eq!(for_key("llama.attention.head_count_kv").0, MAX_HEADS);
        assert_eq!(for_key("num_local_experts").0, MAX_EXPERTS);
        assert_eq!(for_key("llama.expert_count").0, MAX_EXPERTS);
        assert_eq!(for_key("shared_expert_intermediate_size").0, MAX_DIM);
        assert_eq!(for_key("llama.embedding_length").0, MAX_DIM);
        assert_eq!(for_key("vocab_size").0, MAX_VOCAB);
        assert_eq!(for_key("max_position_embeddings").0, MAX_OTHER);
        assert_eq!(for_key("llama.context_length").0, MAX_OTHER);
    }

    #[test]
    fn flags_past_their_ceiling_are_refused_by_name() {
        assert!(flag("--prompt-tokens", MAX_TOKENS).is_ok());
        let e = flag("--prompt-tokens", 140_737_488_355_327).unwrap_err();
        assert!(e.to_string().contains("--prompt-tokens"), "{e}");
        assert!(e.to_string().contains("10,000,000"), "{e}");
        assert!(flag("--batch", MAX_BATCH + 1).is_err());
        assert!(flag("--vram", 24).is_err());
        assert!(flag("--vram", MIN_VRAM).is_ok());
        assert!(flag("--host-ram", 64).is_err());
        assert!(flag("--host-ram", MIN_VRAM).is_ok());
    }
}
