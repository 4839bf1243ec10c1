//! The storage format of a quantized checkpoint, from config.json's `quantization_config`: which
//! format its linear layers are in, and which tensors it keeps in 16 bits. Each format's rule for
//! the rest (embeddings, norms, routers) lives in `estimate::weights`.

use serde_json::{Map, Value};

use super::config::Reader;
use super::spec::Role;
use crate::dtype::{Fp8Scale, WeightDtype};
use crate::error::InputError;

type Obj = Map<String, Value>;

/// `torch_dtype` values read as their own dtype; any other is sized as bf16 with a note.
const TORCH_DTYPES: &[&str] = &["float32", "float16", "bfloat16", "auto"];

/// The checkpoint's weight format and the roles its ignore list keeps dense.
pub(crate) fn read(
    r: &Reader,
    notes: &mut Vec<String>,
) -> Result<(WeightDtype, Vec<Role>), InputError> {
    let key = if r.str("torch_dtype").is_some() {
        "torch_dtype"
    } else {
        "dtype"
    };
    let torch = r.str(key);
    let base = match torch {
        Some("float32") => WeightDtype::F32,
        Some("float16") => WeightDtype::F16,
        _ => WeightDtype::Bf16,
    };
    if let Some(t) = torch.filter(|t| !TORCH_DTYPES.contains(t)) {
        notes.push(format!(
            "unknown {key} `{t}` (llm-oom reads {}): weights sized as bf16 — pass --dtype to size them otherwise",
            TORCH_DTYPES.join(", ")
        ));
    }
    // A multimodal checkpoint may declare it on its language model only (Kimi-K3's
    // `text_config.quantization_config`), which is what the format applies to.
    let nested = r
        .outer
        .get("text_config")
        .and_then(|t| t.get("quantization_config"));
    let Some(Value::Object(q)) = r.outer.get("quantization_config").or(nested) else {
        return Ok((base, Vec::new()));
    };
    let bits = |obj: &Obj, keys: &[&str], allowed: std::ops::RangeInclusive<u8>| {
        checked_bits(r, method_of(q), obj, keys, allowed)
    };
    let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("");
    let b = |k: &str| q.get(k).and_then(Value::as_bool).unwrap_or(false);
    let n = |k: &str| q.get(k).and_then(Value::as_u64);
    let dtype = match method {
        "bitsandbytes" if b("load_in_4bit") => {
            let double_quant = b("bnb_4bit_use_double_quant");
            match q.get("bnb_4bit_quant_type").and_then(Value::as_str) {
                Some("fp4") => WeightDtype::Fp4 { double_quant },
                _ => WeightDtype::Nf4 { double_quant },
            }
        }
        "bitsandbytes" if b("load_in_8bit") => WeightDtype::Int8,
        "gptq" => WeightDtype::Gptq {
            bits: bits(q, &["bits"], 2..=8)?,
            group_size: n("group_size").filter(|g| *g > 0).unwrap_or(128),
        },
        "awq" => WeightDtype::Awq {
            bits: bits(q, &["bits", "w_bit"], 2..=8)?,
            group_size: n("group_size")
                .or_else(|| n("q_group_size"))
                .filter(|g| *g > 0)
                .unwrap_or(128),
        },
        // transformers' FineGrainedFP8 (DeepSeek-V3): `weight_block_size` [128, 128], else per row.
        "fp8" => WeightDtype::Fp8 {
            scale: match q.get("weight_block_size").and_then(Value::as_array) {
                Some(a) if a.len() == 2 => match (a[0].as_u64(), a[1].as_u64()) {
                    (Some(rows), Some(cols)) if rows > 0 && cols > 0 => {
                        Fp8Scale::Block { rows, cols }
                    }
                    _ => Fp8Scale::Channel,
                },
                _ => Fp8Scale::Channel,
            },
        },
        // fbgemm: one f32 scale per output channel.
        "fbgemm_fp8" => WeightDtype::Fp8 {
            scale: Fp8Scale::Channel,
        },
        "mxfp4" => WeightDtype::Mxfp4,
        "modelopt" => match q.get("quant_algo").and_then(Value::as_str) {
            Some("NVFP4") => WeightDtype::Nvfp4,
            Some("FP8") => WeightDtype::Fp8 {
                scale: Fp8Scale::Tensor,
            },
            other => {
                notes.push(format!(
                    "modelopt quant_algo `{}` is not priced yet; weights sized as {base} — pass --dtype to override",
                    other.unwrap_or("?")
                ));
                base
            }
        },
        "compressed-tensors" => compressed_tensors(q).unwrap_or_else(|| {
            notes.push(format!(
                "this compressed-tensors scheme is not priced yet; weights sized as {base} — pass --dtype to override"
            ));
            base
        }),
        "hqq" => {
            let p = q
                .get("quant_config")
                .and_then(|c| c.get("weight_quant_params"))
                .and_then(Value::as_object)
                .unwrap_or(q);
            let g = |k: &str| p.get(k).and_then(Value::as_u64);
            WeightDtype::Hqq {
                bits: bits(p, &["nbits"], 1..=8)?,
                group_size: g("group_size").filter(|g| *g > 0).unwrap_or(64),
            }
        }
        "torchao" => torchao(q).unwrap_or_else(|| {
            notes.push(format!(
                "this torchao quant_type is not priced yet; weights sized as {base} — pass --dtype to override"
            ));
            base
        }),
        other => {
            notes.push(format!(
                "quantization_config `{other}` is not priced yet; weights sized as {base} — pass --dtype to override"
            ));
            base
        }
    };
    let keep = keep_dense(q, notes);
    Ok((dtype, keep))
}

fn method_of(q: &Obj) -> &str {
    q.get("quant_method").and_then(Value::as_str).unwrap_or("")
}

/// A quantization's bits per weight: 4 when the config leaves them out, refused outside
/// `allowed` (a `bits: 0` sized as 4-bit would be a confident wrong answer).
fn checked_bits(
    r: &Reader,
    method: &str,
    obj: &Obj,
    keys: &[&str],
    allowed: std::ops::RangeInclusive<u8>,
) -> Result<u8, InputError> {
    let Some((key, v)) = keys
        .iter()
        .find_map(|k| obj.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v)))
    else {
        return Ok(4);
    };
    match v
        .as_u64()
        .and_then(|n| u8::try_from(n).ok())
        .filter(|b| allowed.contains(b))
    {
        Some(b) => Ok(b),
        None => Err(r.bad(
            &format!("quantization_config.{key}"),
            v,
            &format!(
                "{method} stores {} to {} bits per weight",
                allowed.start(),
                allowed.end()
            ),
        )),
    }
}

/// compressed-tensors: the weights scheme of its first config group.
fn compressed_tensors(q: &Obj) -> Option<WeightDtype> {
    let groups = q.get("config_groups")?.as_object()?;
    let w = groups.values().next()?.get("weights")?;
    let num_bits = w.get("num_bits")?.as_u64()?;
    let kind = w.get("type").and_then(Value::as_str).unwrap_or("int");
    let strategy = w
        .get("strategy")
        .and_then(Value::as_str)
        .unwrap_or("tensor");
    match (kind, num_bits) {
        ("float", 8) => Some(WeightDtype::Fp8 {
            scale: match strategy {
                "channel" => Fp8Scale::Channel,
                "block" => {
                    let b = w.get("block_structure")?.as_array()?;
                    Fp8Scale::Block {
                        rows: b.first()?.as_u64()?.max(1),
                        cols: b.get(1)?.as_u64()?.max(1),
                    }
                }
                _ => Fp8Scale::Tensor,
            },
        }),
        ("float", 4) if w.get("group_size").and_then(Value::as_u64) == Some(16) => {
            Some(WeightDtype::Nvfp4)
        }
        // `mxfp4-pack-quantized`: OCP MXFP4, e2m1 values with one e8m0 (uint8) scale per 32.
        ("float", 4) if w.get("group_size").and_then(Value::as_u64) == Some(32) => {
            Some(WeightDtype::Mxfp4)
        }
        // int4/int8 weight-only (W4A16): packed ints with a scale per group, and a zero point
        // unless the scheme is symmetric.
        ("int", b) if (2..=8).contains(&b) => {
            let bits = b as u8;
            let group_size = w
                .get("group_size")
                .and_then(Value::as_u64)
                .filter(|g| *g > 0)
                .unwrap_or(128);
            Some(
                if w.get("symmetric").and_then(Value::as_bool) == Some(true) {
                    WeightDtype::IntGroup { bits, group_size }
                } else {
                    WeightDtype::Awq { bits, group_size }
                },
            )
        }
        _ => None,
    }
}

/// torchao, as transformers' `TorchAoConfig.to_dict` writes it: `quant_type`
/// `{"default": {"_type": "Int4WeightOnlyConfig", "_version": 2, "_data": {"group_size": 128, …}}}`
/// (transformers 5.17, utils/quantization_config.py). Float8 weight-only quantizes per row; the
/// dynamic-activation Float8 config per tensor unless its `granularity` says `PerRow`.
fn torchao(q: &Obj) -> Option<WeightDtype> {
    let c = q.get("quant_type")?.get("default")?;
    let data = c.get("_data");
    let per_row = data
        .and_then(|d| d.get("granularity"))
        .is_some_and(|g| g.to_string().contains("PerRow"));
    Some(match c.get("_type")?.as_str()? {
        "Int4WeightOnlyConfig" => WeightDtype::TorchaoInt4 {
            group_size: data
                .and_then(|d| d.get("group_size"))
                .and_then(Value::as_u64)
                .filter(|g| *g > 0)
                .unwrap_or(128),
        },
        "Int8WeightOnlyConfig" | "Int8DynamicActivationInt8WeightConfig" => {
            WeightDtype::TorchaoInt8
        }
        "Float8WeightOnlyConfig" => WeightDtype::Fp8 {
            scale: Fp8Scale::Channel,
        },
        "Float8DynamicActivationFloat8WeightConfig" => WeightDtype::Fp8 {
            scale: if per_row {
                Fp8Scale::Channel
            } else {
                Fp8Scale::Tensor
            },
        },
        _ => return None,
    })
}

/// The roles named by `modules_to_not_convert`, `ignored_layers`, `ignore`,
/// `llm_int8_skip_modules` or `exclude_modules`. `ignored_layers` is what vLLM's `Fp8Config`
/// reads first (falling back to `modules_to_not_convert`; vllm 0.11.0, PyPI sdist,
/// vllm/model_executor/layers/quantization/fp8.py `Fp8Config.from_config`), and transformers'
/// `FineGrainedFP8Config` takes it as `modules_to_not_convert`. A pattern that names no role llm-oom tracks (one layer, say) is reported.
fn keep_dense(q: &Obj, notes: &mut Vec<String>) -> Vec<Role> {
    let mut roles = Vec::new();
    for key in [
        "modules_to_not_convert",
        "ignored_layers",
        "ignore",
        "llm_int8_skip_modules",
        "exclude_modules",
    ] {
        let Some(list) = q.get(key).and_then(Value::as_array) else {
            continue;
        };
        for p in list.iter().filter_map(Value::as_str) {
            let found = roles_of(p);
            if found.is_empty() && !names_vectors_only(p) {
                notes.push(format!(
                    "quantization_config `{key}` entry `{p}` names tensors llm-oom does not track apart; they are sized as quantized"
                ));
            }
            for r in found {
                if !roles.contains(&r) {
                    roles.push(r);
                }
            }
        }
    }
    roles
}

/// Entries that name only vectors (biases, norms, MiniMax-M2's `e_score_correction_bias`): no
/// quantization method stores those quantized, so keeping them dense changes no size.
fn names_vectors_only(pattern: &str) -> bool {
    let p = pattern.trim_start_matches("re:");
    p.ends_with("bias") || p.ends_with("norm") || p.ends_with("layernorm")
}

fn roles_of(pattern: &str) -> Vec<Role> {
    let p = pattern.trim_start_matches("re:");
    let mut out = Vec::new();
    if p.contains("lm_head") {
        out.push(Role::LmHead);
    }
    if p.contains("embed") {
        out.push(Role::Embedding);
    }
    if p.contains("self_attn") || p.ends_with(".attn") || p.contains("attention") {
        // A pattern naming one projection (MiMo's `model.layers.N.self_attn.o_proj`) keeps that
        // one; else the whole attention.
        let named: Vec<Role> = if p.contains("qkv_proj") {
            vec![Role::AttnQ, Role::AttnK, Role::AttnV]
        } else {
            [
                ("q_proj", Role::AttnQ),
                ("k_proj", Role::AttnK),
                ("v_proj", Role::AttnV),
                ("o_proj", Role::AttnO),
            ]
            .into_iter()
            .filter(|(name, _)| p.contains(name))
            .map(|(_, r)| r)
            .collect()
        };
        if named.is_empty() {
            out.extend([Role::AttnQ, Role::AttnK, Role::AttnV, Role::AttnO]);
        } else {
            out.extend(named);
        }
    }
    if p.contains("router")
        || p == "gate"
        || p.ends_with(".gate")
        || p.ends_with("mlp.gate")
        || p.ends_with("mlp.gate$")
        || p.contains("block_sparse_moe.gate")
    {
        out.push(Role::Router);
    }
    // The dense MLP (`mlp.gate_proj`…) and shared experts: routed experts stay quantized.
    if p.contains("shared_expert") || p.contains("mlp\\.(") || p.contains("mlp.gate_proj") {
        out.extend([Role::MlpGate, Role::MlpUp, Role::MlpDown]);
    }
    if p.contains("mamba") || p.contains("linear_attn") || p.contains("mixer") {
        out.push(Role::Mixer);
    }
    if p.contains("vision") || p.contains("visual") || p.contains("mm_projector") {
        out.push(Role::Vision);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(text: &str) -> Obj {
        match serde_json::from_str(text) {
            Ok(Value::Object(o)) => o,
            other => panic!("{other:?}"),
        }
    }

    fn int4(symmetric: bool) -> Obj {
        obj(&format!(
            r#"{{"quant_method": "compressed-tensors", "format": "pack-quantized",
                "config_groups": {{"group_0": {{"targets": ["Linear"], "weights":
                {{"num_bits": 4, "type": "int", "group_size": 32, "strategy": "group",
                  "symmetric": {symmetric}}}}}}}}}"#
        ))
    }

    #[test]
    fn symmetric_int_groups_have_no_zero_point_and_asymmetric_ones_do() {
        assert_eq!(
            compressed_tensors(&int4(true)),
            Some(WeightDtype::IntGroup {
                bits: 4,
                group_size: 32
            })
        );
        assert_eq!(
            compressed_tensors(&int4(false)),
            Some(WeightDtype::Awq {
                bits: 4,
                group_size: 32
            })
        );
    }

    /// The `quant_type` transformers' `TorchAoConfig.to_dict` writes (torchao's `config_to_dict`:
    /// `_type`, `_version`, `_data`), one per config class llm-oom prices.
    #[test]
    fn torchao_quant_types_are_read_from_their_config_dicts() {
        let q = |t: &str, data: &str| {
            obj(&format!(
                r#"{{"quant_method": "torchao", "quant_type": {{"default":
                    {{"_type": "{t}", "_version": 2, "_data": {data}}}}}}}"#
            ))
        };
        let int4 = r#"{"group_size": 32, "int4_packing_format":
            {"_type": "Int4PackingFormat", "_data": "PLAIN"}}"#;
        assert_eq!(
            torchao(&q("Int4WeightOnlyConfig", int4)),
            Some(WeightDtype::TorchaoInt4 { group_size: 32 })
        );
        assert_eq!(
            torchao(&q("Int4WeightOnlyConfig", "{}")),
            Some(WeightDtype::TorchaoInt4 { group_size: 128 })
        );
        for t in [
            "Int8WeightOnlyConfig",
            "Int8DynamicActivationInt8WeightConfig",
        ] {
            assert_eq!(torchao(&q(t, "{}")), Some(WeightDtype::TorchaoInt8));
        }
        let channel = Some(WeightDtype::Fp8 {
            scale: Fp8Scale::Channel,
        });
        assert_eq!(torchao(&q("Float8WeightOnlyConfig", "{}")), channel);
        assert_eq!(
            torchao(&q("Float8DynamicActivationFloat8WeightConfig", "{}")),
            Some(WeightDtype::Fp8 {
                scale: Fp8Scale::Tensor
            })
        );
        let per_row = r#"{"granularity": [{"_type": "PerRow", "_data": {"dim": -1}},
            {"_type": "PerRow", "_data": {"dim": -1}}]}"#;
        assert_eq!(
            torchao(&q("Float8DynamicActivationFloat8WeightConfig", per_row)),
            channel
        );
        assert_eq!(torchao(&q("UIntXWeightOnlyConfig", "{}")), None);
        assert_eq!(torchao(&obj(r#"{"quant_type": "int4_weight_only"}"#)), None);
    }

    /// MiniMax-M2's FP8 `modules_to_not_convert`: `gate` is the router, and the correction bias
    /// is a vector no method quantizes, so neither is reported as untracked.
    #[test]
    fn a_bare_gate_is_the_router_and_a_bias_needs_no_note() {
        assert_eq!(roles_of("gate"), [Role::Router]);
        assert_eq!(
            roles_of("model.layers.3.block_sparse_moe.gate"),
            [Role::Router]
        );
        let q =
            obj(r#"{"modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"]}"#);
        let mut notes = Vec::new();
        let roles = keep_dense(&q, &mut notes);
        assert_eq!(roles, [Role::Router, Role::LmHead]);
        assert!(notes.is_empty(), "{notes:?}");
        keep_dense(&obj(r#"{"ignore": ["model.layers.0"]}"#), &mut notes);
        assert_eq!(notes.len(), 1, "{notes:?}");
    }

    #[test]
    fn ignore_patterns_for_shared_experts_and_the_dense_mlp_keep_mlp_roles() {
        let mlp = [Role::MlpGate, Role::MlpUp, Role::MlpDown];
        assert_eq!(roles_of("re:.*shared_experts.*"), mlp);
        assert_eq!(roles_of(r"re:.*mlp\.(gate|up|gate_up|down)_proj.*"), mlp);
        assert!(roles_of("re:.*self_attn.*").contains(&Role::AttnK));
        // One projection keeps that projection.
        assert_eq!(roles_of("model.layers.0.self_attn.o_proj"), [Role::AttnO]);
        assert_eq!(
            roles_of("re:.*self_attn.qkv_proj"),
            [Role::AttnQ, Role::AttnK, Role::AttnV]
        );
        // One layer's module names no role apart.
        assert!(roles_of("model.layers.0.mlp.experts.3.up_proj").is_empty());
    }

    #[test]
    fn vllms_ignored_layers_keep_attention_embeddings_and_router_dense() {
        let mut notes = Vec::new();
        let q = obj(r#"{"quant_method": "fp8", "weight_block_size": [128, 128],
                "ignored_layers": ["lm_head", "model.embed_tokens", "re:.*self_attn.*",
                                   "re:.*mlp.gate$"]}"#);
        let roles = keep_dense(&q, &mut notes);
        for r in [
            Role::LmHead,
            Role::Embedding,
            Role::AttnQ,
            Role::AttnK,
            Role::AttnV,
            Role::AttnO,
            Role::Router,
        ] {
            assert!(roles.contains(&r), "{r:?} in {roles:?}");
        }
        assert!(!roles.contains(&Role::MlpUp), "{roles:?}");
        assert!(notes.is_empty(), "{notes:?}");
        // Without the list nothing is kept apart.
        let plain = obj(r#"{"quant_method": "fp8", "weight_block_size": [128, 128]}"#);
        assert!(keep_dense(&plain, &mut notes).is_empty());
    }
}
