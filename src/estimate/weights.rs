//! Weight bytes, exactly, for every storage format: dense dtypes, bitsandbytes, GPTQ/AWQ, and
//! llama.cpp's quantization mixes. Quantizers leave embeddings, norms and biases alone; each rule
//! below names the code it mirrors.

use std::num::Saturating;

use super::Engine;
use crate::dtype::{ElemBytes, Fp8Scale, GgmlType, GgufMix, WeightDtype};
use crate::model::{Role, Spec, TensorGroup};

/// Bytes of all weights of `spec` stored as `dtype`. A GGUF source stored in its own format is
/// priced from its real tensor table, not from this rule. Saturating: a model whose bytes do not
/// fit in 64 bits prices at `u64::MAX`, which no card holds.
pub fn weight_bytes(spec: &Spec, dtype: WeightDtype) -> u64 {
    // llama.cpp's --mmproj: the projector file's own bytes stand for the vision tower.
    let Some(mmproj) = spec.mmproj_bytes else {
        return model_bytes(spec, dtype);
    };
    let own_vision = spec
        .tensors()
        .iter()
        .filter(|t| t.role == Role::Vision)
        .map(|t| group_bytes(spec, t, dtype))
        .fold(0, u64::saturating_add);
    model_bytes(spec, dtype)
        .saturating_sub(own_vision)
        .saturating_add(mmproj)
}

/// The model's own weights: the GGUF's or the checkpoint's real bytes when stored as asked, else
/// the rule over its tensors.
fn model_bytes(spec: &Spec, dtype: WeightDtype) -> u64 {
    if let Some(g) = &spec.gguf {
        if dtype == spec.native_dtype {
            return g.total_bytes;
        }
    }
    // The checkpoint's own bytes, read from its safetensors headers, for the dtype it is stored in.
    if let Some(c) = &spec.checkpoint {
        if dtype == spec.native_dtype {
            return c.total_bytes;
        }
    }
    spec.tensors()
        .iter()
        .map(|t| group_bytes(spec, t, dtype))
        .fold(0, u64::saturating_add)
}

/// The vision tower's share of the weights in `dtype`: its tensors are `Role::Vision`, whether a
/// family counted them (`spec.vision`) or transformers built them (`plan --python`'s layout),
/// kept at the checkpoint's dense precision (llama.cpp's mmproj in f16), or llama.cpp's
/// `--mmproj` file's real bytes when one is given.
pub fn vision_bytes(spec: &Spec, dtype: WeightDtype) -> u64 {
    if let Some(mmproj) = spec.mmproj_bytes {
        return mmproj;
    }
    if spec.vision.is_empty() && spec.layout.is_none() {
        return 0;
    }
    spec.tensors()
        .iter()
        .filter(|t| t.role == Role::Vision)
        .map(|t| group_bytes(spec, t, dtype))
        .fold(0, u64::saturating_add)
}

/// The weights as `engine` holds them on the GPU: the checkpoint's bytes, plus what vLLM's MXFP4
/// MoE adds by padding the routed experts for its kernel. On CUDA cards below Blackwell (compute
/// capability 8.x and 9.0, FlashInfer's MXFP4 path off by default) vLLM takes the Marlin backend,
/// whose `create_weights` rounds each partition's expert width up to a multiple of 128 and the
/// hidden size to a multiple of 256, and allocates w13/w2 (and their e8m0 scales) at those shapes
/// (vllm 0.11.0, PyPI sdist: vllm/model_executor/layers/quantization/mxfp4.py `get_mxfp4_backend`,
/// `Mxfp4MoEMethod.create_weights`; utils/marlin_utils_fp4.py `prepare_moe_fp4_layer_for_marlin`
/// repacks them at the same size). `spec` is one rank's, so the width is the partition's.
pub fn engine_weight_bytes(spec: &Spec, dtype: WeightDtype, engine: Engine) -> u64 {
    let bytes = weight_bytes(spec, dtype);
    if engine != Engine::Vllm || dtype != WeightDtype::Mxfp4 {
        return bytes;
    }
    let padding = spec
        .tensors()
        .iter()
        .filter_map(|t| marlin_mxfp4_padded(t).map(|p| (t, p)))
        .map(|(t, p)| group_bytes(spec, &p, dtype).saturating_sub(group_bytes(spec, t, dtype)))
        .fold(0, u64::saturating_add);
    bytes.saturating_add(padding)
}

/// Marlin's MXFP4 MoE: `n % 256 == 0` and `k % 128 == 0` per GEMM, so the expert width
/// (intermediate_size_per_partition) rounds up to 128 and the hidden size to 256.
fn marlin_mxfp4_padded(t: &TensorGroup) -> Option<TensorGroup> {
    const INTER: u64 = 128;
    const HIDDEN: u64 = 256;
    let up = |n: u64, m: u64| n.div_ceil(m).saturating_mul(m);
    if !t.routed {
        return None;
    }
    let mut p = *t;
    match t.role {
        Role::MlpGate | Role::MlpUp => {
            p.rows = up(t.rows, INTER);
            p.cols = up(t.cols, HIDDEN);
        }
        Role::MlpDown => {
            p.rows = up(t.rows, HIDDEN);
            p.cols = up(t.cols, INTER);
        }
        _ => return None,
    }
    Some(p)
}

type S = Saturating<u64>;

fn s(n: u64) -> S {
    Saturating(n)
}

pub fn group_bytes(spec: &Spec, t: &TensorGroup, dtype: WeightDtype) -> u64 {
    let n = t.rows.saturating_mul(t.cols);
    let (sn, count, rows, cols) = (s(n), s(t.count), s(t.rows), s(t.cols));
    let params = s(t.params());
    let dense = s(dtype.dense_bytes());
    let bytes: S = match dtype {
        WeightDtype::F32 | WeightDtype::F16 | WeightDtype::Bf16 => params * dense,
        _ if t.role == Role::Vector => {
            params
                * if matches!(dtype, WeightDtype::Gguf(_)) {
                    s(4)
                } else {
                    dense
                }
        }
        WeightDtype::Gguf(mix) => s(gguf_group_bytes(spec, t, mix)),
        // transformers' bitsandbytes integration keeps the embeddings and lm_head in 16 bits.
        _ if !t.role.is_linear() => params * dense,
        // What the checkpoint's own `modules_to_not_convert` / `ignore` keeps in 16 bits.
        // A pattern naming MLP projections keeps the dense and shared ones, never routed experts.
        _ if dtype == spec.native_dtype && spec.keep_dense.contains(&t.role) && !t.routed => {
            params * dense
        }
        // FP8, MXFP4, NVFP4, HQQ and compressed-tensors integer checkpoints leave routers
        // (DeepSeek's is not an nn.Linear; the others list it in their ignore lists) in 16 bits.
        WeightDtype::Fp8 { .. }
        | WeightDtype::Mxfp4
        | WeightDtype::Nvfp4
        | WeightDtype::Hqq { .. }
        | WeightDtype::IntGroup { .. }
            if t.role == Role::Router =>
        {
            params * dense
        }
        // One byte per weight and an f32 scale per tensor, output row or block.
        WeightDtype::Fp8 { scale } => {
            let scales = match scale {
                Fp8Scale::Tensor => s(1),
                Fp8Scale::Channel => rows,
                Fp8Scale::Block { rows, cols } => {
                    s(t.rows.div_ceil(rows.max(1))) * s(t.cols.div_ceil(cols.max(1)))
                }
            };
            count * (sn + s(4) * scales)
        }
        // Two values per byte plus an e8m0 scale byte per 32.
        WeightDtype::Mxfp4 => count * s(n.div_ceil(2) + n.div_ceil(32)),
        // Two values per byte, an fp8 scale per 16, and the tensor's f32 weight and input scales.
        WeightDtype::Nvfp4 => count * (s(n.div_ceil(2)) + s(n.div_ceil(16)) + s(8)),
        // Packed values plus an f16 scale and zero per group.
        WeightDtype::Hqq { bits, group_size } => {
            count * (packed(n, bits as u64) + s(4) * s(n.div_ceil(group_size.max(1))))
        }
        // torchao int4: packed values plus a bf16 scale and zero point per (output, group).
        WeightDtype::TorchaoInt4 { group_size } => {
            count * (packed(n, 4) + s(4) * rows * s(t.cols.div_ceil(group_size.max(1))))
        }
        // torchao int8: a byte per weight, a bf16 scale and an int64 zero point per output row.
        WeightDtype::TorchaoInt8 => count * (sn + s(10) * rows),
        // LLM.int8(): int8 weight `CB` plus an f32 scale per output row `SCB`.
        WeightDtype::Int8 => count * (sn + s(4) * rows),
        // bitsandbytes 4-bit: two weights per byte, an absmax per block of 64; with double
        // quantization the absmax is 8-bit with one f32 scale per 256 absmax values.
        WeightDtype::Nf4 { double_quant } | WeightDtype::Fp4 { double_quant } => {
            let blocks = n.div_ceil(64);
            let absmax = if double_quant {
                s(blocks) + s(4) * s(blocks.div_ceil(256))
            } else {
                s(4) * s(blocks)
            };
            count * (s(n.div_ceil(2)) + absmax)
        }
        // GPTQ: packed ints, an f16 scale and packed zero per (group, output), an int32 g_idx per input.
        WeightDtype::Gptq { bits, group_size } => {
            let groups = rows * s(t.cols.div_ceil(group_size.max(1)));
            let b = bits as u64;
            count * (packed(n, b) + groups * s(2) + packed(groups.0, b) + s(4) * cols)
        }
        WeightDtype::Awq { bits, group_size } => {
            let groups = rows * s(t.cols.div_ceil(group_size.max(1)));
            let b = bits as u64;
            count * (packed(n, b) + groups * s(2) + packed(groups.0, b))
        }
        // Packed ints, a 16-bit scale per (output, group), the int32 [rows, cols] shape.
        WeightDtype::IntGroup { bits, group_size } => {
            let groups = rows * s(t.cols.div_ceil(group_size.max(1)));
            count * (packed(n, bits as u64) + groups * s(2) + s(8))
        }
    };
    bytes.0
}

/// `n` values of `bits` bits, in whole bytes.
fn packed(n: u64, bits: u64) -> S {
    s(ElemBytes::new(bits, 8).of(n))
}

/// llama.cpp `llama_tensor_get_type`: the output matrix goes to q6_K (q8_0 stays q8_0); for the
/// `_M` mixes `attn_v` and `ffn_down` get q6_K in the layers `use_more_bits` picks.
fn gguf_group_bytes(spec: &Spec, t: &TensorGroup, mix: GgufMix) -> u64 {
    let base = match mix {
        GgufMix::Q8_0 => GgmlType::Q8_0,
        GgufMix::Q6K => GgmlType::Q6K,
        GgufMix::Q5KM => GgmlType::Q5K,
        GgufMix::Q4KM => GgmlType::Q4K,
        GgufMix::Q4_0 => GgmlType::Q4_0,
    };
    let q6 = GgmlType::Q6K.elem_bytes();
    let n = t.rows.saturating_mul(t.cols);
    let bytes = |e: ElemBytes, count: u64| count.saturating_mul(e.of(n));
    match t.role {
        // Norms, biases and (for state-space layers) the conv1d kernels stay f32.
        Role::Vector | Role::Conv => t.params().saturating_mul(4),
        // The router stays in full precision (llama-quantize skips `ffn_gate_inp`).
        Role::Router => t.params().saturating_mul(4),
        // llama.cpp loads a vision tower from its own mmproj file, f16 as converted
        Role::Vision => t.params().saturating_mul(2),
        Role::LmHead if base == GgmlType::Q8_0 => bytes(base.elem_bytes(), 1),
        Role::LmHead => bytes(q6, 1),
        Role::AttnV | Role::MlpDown if matches!(mix, GgufMix::Q4KM | GgufMix::Q5KM) => {
            let layers = spec.num_layers.max(1);
            let more = if t.count % layers == 0 {
                (t.count / layers).saturating_mul(more_bits_layers(layers))
            } else {
                0
            };
            bytes(q6, more).saturating_add(bytes(base.elem_bytes(), t.count.saturating_sub(more)))
        }
        _ => bytes(base.elem_bytes(), t.count),
    }
}

/// How many of `n` layers llama.cpp's `use_more_bits` upgrades: the first and last eighth, and every
/// third layer in between.
pub fn more_bits_layers(n: u64) -> u64 {
    // Closed form of `(0..n).filter(|i| i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2)`.
    let first = n / 8;
    let last = (u128::from(n) * 7 / 8) as u64;
    first + (n - last) + (last - first) / 3
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::presets;

    fn preset(id: &str) -> Spec {
        let (id, json) = presets::find(id).unwrap();
        presets::load(id, json).unwrap()
    }

    fn fixture(name: &str) -> Spec {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/fp8-ignored")
            .join(name)
            .join("config.json");
        let text = std::fs::read_to_string(&path).unwrap();
        crate::model::config::parse_config(&text, &path, name).unwrap()
    }

    #[test]
    fn fp8_ignored_layers_price_the_attention_in_bf16_per_rank() {
        // Qwen3-235B-A22B in FP8 blocks of 128 × 128 at TP 4; `ignored_layers` keeps self_attn in
        // bf16. One rank's attention: q and o 2048 × 4096 (16 × 32 blocks), k and v one KV head,
        // 128 × 4096 (1 × 32 blocks). bf16 costs one more byte a weight, less the blocks' f32 scale.
        let rank = |name: &str| {
            let spec = crate::placement::vllm::rank_spec(&fixture(name), 4, true);
            weight_bytes(&spec, spec.native_dtype)
        };
        let qo = 2048 * 4096 - 4 * 16 * 32;
        let kv = 128 * 4096 - 4 * 32;
        assert_eq!(rank("ignored") - rank("plain"), 94 * (2 * qo + 2 * kv));
        assert_eq!(rank("ignored") - rank("plain"), 1_675_215_360);
    }

    /// torchao's tensors for one 4096 × 4096 projection (rows are outputs): int4 `qdata`
    /// [4096, 2048] bytes with bf16 `scale` and `zero_point` [32, 4096] each at group 128; int8
    /// `int_data` [4096, 4096] with a bf16 scale and an int64 zero point per row.
    #[test]
    fn torchao_int4_and_int8_store_what_their_tensors_hold() {
        let spec = preset("llama-3.1-8b-instruct");
        let q = TensorGroup {
            role: Role::AttnQ,
            rows: 4096,
            cols: 4096,
            count: 32,
            routed: false,
        };
        let int4 = WeightDtype::TorchaoInt4 { group_size: 128 };
        assert_eq!(
            group_bytes(&spec, &q, int4),
            32 * (4096 * 2048 + 2 * 2 * 32 * 4096)
        );
        assert_eq!(
            group_bytes(&spec, &q, WeightDtype::TorchaoInt8),
            32 * (4096 * 4096 + 4096 * (2 + 8))
        );
    }

    #[test]
    fn vllm_pads_gpt_oss_mxfp4_experts_for_marlin() {
        let spec = preset("gpt-oss-120b");
        let stored = weight_bytes(&spec, WeightDtype::Mxfp4);
        let held = engine_weight_bytes(&spec, WeightDtype::Mxfp4, Engine::Vllm);
        // gate and up [2880 → 2944, 2880 → 3072], down [2880 → 3072, 2880 → 2944]: each of the
        // 36 × 128 expert matrices grows from 2880² to 2944 × 3072 values at 17/32 byte each.
        let per_matrix =
            (2944 * 3072 / 2 + 2944 * 3072 / 32) - (2880 * 2880 / 2 + 2880 * 2880 / 32);
        assert_eq!(held - stored, 3 * 36 * 128 * per_matrix);
        assert_eq!(held - stored, 5_504_827_392);
        // vLLM's "Model loading took 64.4–66.0 GiB" on one H100 (vllm#23278, vllm#33155).
        let gib = held as f64 / (1u64 << 30) as f64;
        assert!((64.4..=66.0).contains(&gib), "{gib}");
        // Other engines, and vLLM with the experts in another format, hold what is stored.
        assert_eq!(
            engine_weight_bytes(&spec, WeightDtype::Mxfp4, Engine::Transformers),
            stored
        );
        assert_eq!(
            engine_weight_bytes(&spec, WeightDtype::Bf16, Engine::Vllm),
            weight_bytes(&spec, WeightDtype::Bf16)
        );
    }

    #[test]
    fn vllm_pads_each_tensor_parallel_partition_of_the_experts() {
        // At TP 2 each rank's expert width is 1440, which Marlin rounds up to 1536.
        let spec = crate::placement::vllm::rank_spec(&preset("gpt-oss-120b"), 2, true);
        let stored = weight_bytes(&spec, WeightDtype::Mxfp4);
        let held = engine_weight_bytes(&spec, WeightDtype::Mxfp4, Engine::Vllm);
        let m = |n: u64| n / 2 + n / 32;
        let per_matrix = m(1536 * 3072) - m(1440 * 2880);
        assert_eq!(held - stored, 3 * 36 * 128 * per_matrix);
    }

    #[test]
    fn parameter_counts_match_the_published_checkpoints() {
        // Totals from each model card's safetensors metadata.
        for (id, params) in [
            ("mistralai/Mistral-7B-Instruct-v0.2", 7_241_732_096u64),
            ("meta-llama/Llama-2-7b-hf", 6_738_415_616),
            ("meta-llama/Llama-2-13b-hf", 13_015_864_320),
            ("meta-llama/Meta-Llama-3-8B", 8_030_261_248),
            ("meta-llama/Llama-3.1-8B-Instruct", 8_030_261_248),
            ("Qwen/Qwen2.5-0.5B-Instruct", 494_032_768),
            ("Qwen/Qwen2.5-7B-Instruct", 7_615_616_512),
            ("Qwen/Qwen3-8B", 8_190_735_360),
            ("google/gemma-2-9b-it", 9_241_705_984),
            ("microsoft/Phi-3-mini-4k-instruct", 3_821_079_552),
            ("mistralai/Mixtral-8x7B-Instruct-v0.1", 46_702_792_704),
            ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", 1_100_048_384),
            ("HuggingFaceTB/SmolLM2-135M-Instruct", 134_515_008),
        ] {
            assert_eq!(preset(id).parameters(), params, "{id}");
        }
    }

    #[test]
    fn dense_dtypes_are_params_times_width() {
        let m = preset("mistralai/Mistral-7B-Instruct-v0.2");
        // 13,812.5 MiB (to one decimal), as the H200 measured it.
        assert_eq!(weight_bytes(&m, WeightDtype::Bf16), 14_483_464_192);
        assert_eq!(
            format!(
                "{:.1}",
                weight_bytes(&m, WeightDtype::Bf16) as f64 / 1048576.0
            ),
            "13812.5"
        );
        assert_eq!(weight_bytes(&m, WeightDtype::F32), 28_966_928_384);
        // Llama-2-7B: 12,852.5 MiB, as PyTorch allocated on the H200 (shared/notes/gpu-machine.md).
        let llama2 = weight_bytes(&preset("meta-llama/Llama-2-7b-hf"), WeightDtype::F16);
        assert_eq!(llama2, 13_476_831_232);
        assert_eq!(format!("{:.1}", llama2 as f64 / 1048576.0), "12852.5");
    }

    #[test]
    fn q4_k_m_matches_a_real_llama_quantize_file() {
        // mistral-7b-instruct-v0.2.Q4_K_M.gguf is 4,368,439,584 bytes; the tensors are all but
        // its ~0.7 MB of metadata (the 32,000-token vocabulary).
        let w = weight_bytes(
            &preset("mistralai/Mistral-7B-Instruct-v0.2"),
            WeightDtype::Gguf(GgufMix::Q4KM),
        );
        assert_eq!(w, 4_367_704_064);
        assert!(4_368_439_584 - w < 1_000_000);
    }

    #[test]
    fn bitsandbytes_keeps_embeddings_and_head_in_16_bits() {
        let m = preset("mistralai/Mistral-7B-Instruct-v0.2");
        let linear: u64 = m
            .tensors()
            .iter()
            .filter(|t| t.role.is_linear())
            .map(TensorGroup::params)
            .sum();
        let other = m.parameters() - linear;
        let rows: u64 = m
            .tensors()
            .iter()
            .filter(|t| t.role.is_linear())
            .map(|t| t.rows * t.count)
            .sum();
        assert_eq!(
            weight_bytes(&m, WeightDtype::Int8),
            linear + 4 * rows + 2 * other
        );
        // nf4 + double quant: 0.5 byte per weight + 1/64 absmax + the nested scales.
        let nf4 = weight_bytes(&m, WeightDtype::Nf4 { double_quant: true });
        let per_weight = (nf4 - 2 * other) as f64 / linear as f64;
        assert!(
            (per_weight - (0.5 + 1.0 / 64.0 + 4.0 / (64.0 * 256.0))).abs() < 1e-4,
            "{per_weight}"
        );
        assert!(
            nf4 < weight_bytes(
                &m,
                WeightDtype::Nf4 {
                    double_quant: false
                }
            )
        );
    }

    #[test]
    fn use_more_bits_matches_llama_cpp() {
        // 32 layers: 0-3, 28-31, and 6, 9, …, 27.
        assert_eq!(more_bits_layers(32), 16);
        assert_eq!(more_bits_layers(1), 1);
        for n in 0..200u64 {
            let looped = (0..n)
                .filter(|&i| i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2)
                .count() as u64;
            assert_eq!(more_bits_layers(n), looped, "{n}");
        }
        assert!(more_bits_layers(u64::MAX) > 0);
    }
}
