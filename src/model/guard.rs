//! The refusal of configs llm-oom would misread. A field that changes a model's memory, on a
//! family whose reader does not model it, means the estimate would be confidently wrong (DeepSeek's
//! MLA read as llama, Jamba's Mamba layers counted as attention): the config is refused with the
//! field's name instead of sized.

use serde_json::Value;

use super::config::Reader;
use crate::error::InputError;

/// What every refusal of this guard says: `unmodelled` recognises them by it.
const UNMODELLED: &str = "llm-oom does not model";

/// The config.json a refusal of this guard names, when `e` is one: a field or layer type the
/// family does not model, which transformers (`plan --python`) may still build.
pub fn unmodelled(e: &InputError) -> Option<&std::path::Path> {
    match e {
        InputError::BadField { path, why, .. } if why.contains(UNMODELLED) => Some(path),
        _ => None,
    }
}

/// Config keys (a trailing `_` = every key with that prefix) that change weights or cache in ways
/// a uniform decoder does not have, and what they are.
const MEMORY_FIELDS: &[(&str, &str)] = &[
    ("kv_lora_rank", "multi-head latent attention"),
    ("q_lora_rank", "multi-head latent attention"),
    ("qk_rope_head_dim", "multi-head latent attention"),
    ("n_routed_experts", "routed experts"),
    ("n_shared_experts", "shared experts"),
    ("first_k_dense_replace", "dense and MoE layers mixed"),
    ("moe_layer_freq", "MoE every few layers"),
    ("moe_intermediate_size", "experts"),
    ("num_local_experts", "experts"),
    ("num_experts", "experts"),
    ("num_experts_per_tok", "experts"),
    ("shared_expert_intermediate_size", "a shared expert"),
    ("shared_intermediate_size", "a shared MLP"),
    ("attn_layer_period", "attention in only some layers"),
    ("attn_layer_offset", "attention in only some layers"),
    ("attn_layer_indices", "attention in only some layers"),
    ("expert_layer_period", "experts in only some layers"),
    ("expert_layer_offset", "experts in only some layers"),
    ("mamba_", "state-space (Mamba) layers"),
    ("ssm_", "state-space layers"),
    ("linear_", "linear-attention layers"),
    ("state_size", "state-space layers"),
    ("conv_kernel", "state-space layers"),
    (
        "full_attention_interval",
        "full attention in only some layers",
    ),
    ("attention_chunk_size", "chunked local attention"),
    ("interleave_moe_layer_step", "MoE every few layers"),
    ("no_rope_layers", "chunked and global attention layers"),
    ("intermediate_size_mlp", "dense and MoE layers mixed"),
    (
        "sliding_window_pattern",
        "local and global attention layers",
    ),
    ("num_kv_shared_layers", "layers sharing a KV cache"),
    ("hybrid_override_pattern", "a hybrid layer pattern"),
    ("layers_block_type", "a hybrid layer pattern"),
    ("altup_num_inputs", "AltUp layers"),
    ("laurel_rank", "LAuReL layers"),
    ("multi_query_group_num", "multi-query groups"),
    ("expert_dtype", "experts stored in a dtype of their own"),
    ("hc_mult", "hyper-connection residual streams"),
    ("o_lora_rank", "a low-rank grouped output projection"),
    ("compress_ratios", "compressed attention layers"),
    ("compress_rates", "compressed attention layers"),
    ("num_hash_layers", "hash-routed expert layers"),
];

/// `layer_types` values a uniform decoder with optional sliding windows understands.
const PLAIN_LAYER_TYPES: &[&str] = &["full_attention", "sliding_attention"];

fn active(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => false,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Bool(true) => true,
    }
}

/// `pattern` is a key, or with a trailing `_` a prefix.
fn matches(key: &str, pattern: &str) -> bool {
    if pattern.ends_with('_') {
        key.starts_with(pattern)
    } else {
        key == pattern
    }
}

/// What `key` means when it is one of `MEMORY_FIELDS` and set to something other than off: the
/// signal that a config is not a plain decoder.
pub(crate) fn memory_field(key: &str, v: &Value) -> Option<&'static str> {
    if !active(v) {
        return None;
    }
    MEMORY_FIELDS
        .iter()
        .find(|(f, _)| matches(key, f))
        .map(|(_, what)| *what)
}

/// `layer_types` values a uniform decoder with optional sliding windows understands.
pub(crate) fn plain_layer_type(t: &str) -> bool {
    PLAIN_LAYER_TYPES.contains(&t)
}

fn modelled(key: &str, modelled: &[&str]) -> bool {
    modelled.iter().any(|m| matches(key, m))
}

/// Refuse `r` when it has a memory field outside `models`, or a `layer_types` entry outside
/// `layer_types` (the plain full/sliding pair when the family lists none).
pub(crate) fn check(
    r: &Reader,
    arch: &str,
    models: &[&str],
    layer_types: &[&str],
) -> Result<(), InputError> {
    for map in [r.cfg, r.outer] {
        for (key, v) in map {
            if !active(v) || modelled(key, models) {
                continue;
            }
            let what = MEMORY_FIELDS.iter().find(|(f, _)| matches(key, f));
            if let Some((_, what)) = what {
                return Err(r.bad(
                    key,
                    v,
                    &format!(
                        "it means {what}, which {UNMODELLED} for `{arch}`; sizing it as a plain decoder would be wrong — plan with a GGUF file of the model or one of `llm-oom plan --list-presets`"
                    ),
                ));
            }
        }
    }
    let allowed = if layer_types.is_empty() {
        PLAIN_LAYER_TYPES
    } else {
        layer_types
    };
    if let Some(Value::Array(types)) = r.get("layer_types") {
        if let Some(t) = types
            .iter()
            .find(|t| !t.as_str().is_some_and(|s| allowed.contains(&s)))
        {
            return Err(r.bad(
                "layer_types",
                t,
                &format!("{UNMODELLED} `{arch}` layers of that type; it cannot size this model"),
            ));
        }
    }
    Ok(())
}
