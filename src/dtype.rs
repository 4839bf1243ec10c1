//! How weights and the KV cache are stored: the byte cost of one element, exactly, as a fraction
//! (GGUF blocks make it fractional: q8_0 is 34 bytes per 32 weights).

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

use crate::error::InputError;

/// Bytes per element as a fraction `num / den`, so sums over billions of weights stay exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElemBytes {
    pub num: u64,
    pub den: u64,
}

impl ElemBytes {
    pub const fn new(num: u64, den: u64) -> Self {
        Self { num, den }
    }
    /// Bytes for `n` elements, rounded up to whole blocks.
    pub fn of(self, n: u64) -> u64 {
        u64::try_from((n as u128 * self.num as u128).div_ceil(self.den.max(1) as u128))
            .unwrap_or(u64::MAX)
    }
    pub fn as_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

/// The GGUF block types llm-oom prices, with llama.cpp's block layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GgmlType {
    F32,
    F16,
    Bf16,
    Q8_0,
    Q6K,
    Q5K,
    Q4K,
    Q4_0,
}

impl GgmlType {
    pub fn elem_bytes(self) -> ElemBytes {
        match self {
            GgmlType::F32 => ElemBytes::new(4, 1),
            GgmlType::F16 | GgmlType::Bf16 => ElemBytes::new(2, 1),
            GgmlType::Q8_0 => ElemBytes::new(34, 32),
            GgmlType::Q6K => ElemBytes::new(210, 256),
            GgmlType::Q5K => ElemBytes::new(176, 256),
            GgmlType::Q4K => ElemBytes::new(144, 256),
            GgmlType::Q4_0 => ElemBytes::new(18, 32),
        }
    }
}

/// A weight format a model can be loaded in. The bitsandbytes and GPTQ/AWQ variants quantize only
/// the linear layers; GGUF quant mixes follow llama.cpp's per-tensor rules (see `estimate::weights`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightDtype {
    F32,
    F16,
    Bf16,
    /// bitsandbytes LLM.int8(): int8 weights plus one f32 scale per output row.
    Int8,
    /// bitsandbytes 4-bit, blocks of 64 with an absmax each; `double_quant` stores the absmax in 8 bits.
    Nf4 {
        double_quant: bool,
    },
    Fp4 {
        double_quant: bool,
    },
    /// GPTQ / AWQ packed integers with per-group scales and zeros.
    Gptq {
        bits: u8,
        group_size: u64,
    },
    Awq {
        bits: u8,
        group_size: u64,
    },
    /// Symmetric integers packed with a 16-bit scale per group and no zero point, plus the
    /// original shape (two int32) per tensor: compressed-tensors `pack-quantized` with
    /// `symmetric: true` (Kimi-K2.5's INT4 experts).
    IntGroup {
        bits: u8,
        group_size: u64,
    },
    /// A llama.cpp quantization mix (what `llama-quantize` would produce).
    Gguf(GgufMix),
    /// FP8 (e4m3) weights, one byte each, with f32 scales per tensor, per output row or per block
    /// (DeepSeek-V3's `weight_block_size` [128, 128]).
    Fp8 {
        scale: Fp8Scale,
    },
    /// MXFP4 (OCP microscaling): 4-bit e2m1 values in blocks of 32 sharing one e8m0 scale byte —
    /// 17 bytes per 32 weights; gpt-oss ships its experts so.
    Mxfp4,
    /// NVFP4 (ModelOpt): 4-bit e2m1 in blocks of 16 with an fp8 scale each, and two f32 scales per
    /// tensor — 9 bytes per 16 weights plus 8.
    Nvfp4,
    /// HQQ: `bits`-bit packed weights with an f16 scale and an f16 zero per group of `group_size`.
    Hqq {
        bits: u8,
        group_size: u64,
    },
    /// torchao's int4 weight-only (`Int4WeightOnlyConfig`; its plain, tile-packed and
    /// preshuffled tensors alike): two values per byte, a bf16 scale and a bf16 zero point per
    /// (output, group of `group_size` inputs). Tile packing's padding to whole tiles is not counted.
    TorchaoInt4 {
        group_size: u64,
    },
    /// torchao's int8 weights (`Int8WeightOnlyConfig`, `Int8DynamicActivationInt8WeightConfig`):
    /// one byte per weight with a bf16 scale and an int64 zero point per output row
    /// (`AffineQuantizedTensor`, plain layout).
    TorchaoInt8,
}

/// Where an FP8 checkpoint keeps its f32 scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8Scale {
    Tensor,
    Channel,
    Block { rows: u64, cols: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufMix {
    Q8_0,
    Q6K,
    Q5KM,
    Q4KM,
    Q4_0,
}

impl WeightDtype {
    /// The dtype that arithmetic and the KV cache use when the weights are stored this way.
    pub fn compute_kv_dtype(self) -> KvDtype {
        match self {
            WeightDtype::F32 => KvDtype::F32,
            WeightDtype::F16
            | WeightDtype::Gptq { .. }
            | WeightDtype::Awq { .. }
            | WeightDtype::IntGroup { .. } => KvDtype::F16,
            WeightDtype::Gguf(_) => KvDtype::F16,
            _ => KvDtype::Bf16,
        }
    }
    /// Bytes of one element of unquantized tensors (embeddings, norms, lm_head) in this format.
    pub fn dense_bytes(self) -> u64 {
        match self {
            WeightDtype::F32 => 4,
            _ => 2,
        }
    }
    pub fn is_quantized(self) -> bool {
        !matches!(
            self,
            WeightDtype::F32 | WeightDtype::F16 | WeightDtype::Bf16
        )
    }
}

impl FromStr for WeightDtype {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" => WeightDtype::F32,
            "f16" | "fp16" | "float16" | "half" => WeightDtype::F16,
            "bf16" | "bfloat16" => WeightDtype::Bf16,
            "int8" | "8bit" | "llm.int8" => WeightDtype::Int8,
            "nf4" | "4bit" => WeightDtype::Nf4 { double_quant: true },
            "fp4" => WeightDtype::Fp4 { double_quant: true },
            "q8_0" => WeightDtype::Gguf(GgufMix::Q8_0),
            "q6_k" => WeightDtype::Gguf(GgufMix::Q6K),
            "q5_k_m" | "q5_k" => WeightDtype::Gguf(GgufMix::Q5KM),
            "q4_k_m" | "q4_k" => WeightDtype::Gguf(GgufMix::Q4KM),
            "q4_0" => WeightDtype::Gguf(GgufMix::Q4_0),
            "fp8" | "float8" => WeightDtype::Fp8 {
                scale: Fp8Scale::Channel,
            },
            "mxfp4" => WeightDtype::Mxfp4,
            "nvfp4" => WeightDtype::Nvfp4,
            _ => return Err(InputError::Dtype(s.to_string())),
        })
    }
}

impl fmt::Display for WeightDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeightDtype::F32 => f.write_str("f32"),
            WeightDtype::F16 => f.write_str("f16"),
            WeightDtype::Bf16 => f.write_str("bf16"),
            WeightDtype::Int8 => f.write_str("int8"),
            WeightDtype::Nf4 { double_quant: true } => f.write_str("nf4"),
            WeightDtype::Nf4 {
                double_quant: false,
            } => f.write_str("nf4 (no double quant)"),
            WeightDtype::Fp4 { double_quant: true } => f.write_str("fp4"),
            WeightDtype::Fp4 {
                double_quant: false,
            } => f.write_str("fp4 (no double quant)"),
            WeightDtype::Gptq { bits, group_size } => write!(f, "gptq-{bits}bit-g{group_size}"),
            WeightDtype::Awq { bits, group_size } => write!(f, "awq-{bits}bit-g{group_size}"),
            WeightDtype::IntGroup { bits, group_size } => write!(f, "int{bits}-g{group_size}"),
            WeightDtype::Gguf(m) => f.write_str(match m {
                GgufMix::Q8_0 => "q8_0",
                GgufMix::Q6K => "q6_k",
                GgufMix::Q5KM => "q5_k_m",
                GgufMix::Q4KM => "q4_k_m",
                GgufMix::Q4_0 => "q4_0",
            }),
            WeightDtype::Fp8 {
                scale: Fp8Scale::Channel,
            } => f.write_str("fp8"),
            WeightDtype::Fp8 {
                scale: Fp8Scale::Tensor,
            } => f.write_str("fp8-per-tensor"),
            WeightDtype::Fp8 {
                scale: Fp8Scale::Block { rows, cols },
            } => write!(f, "fp8-block{rows}x{cols}"),
            WeightDtype::Mxfp4 => f.write_str("mxfp4"),
            WeightDtype::Nvfp4 => f.write_str("nvfp4"),
            WeightDtype::Hqq { bits, group_size } => write!(f, "hqq-{bits}bit-g{group_size}"),
            WeightDtype::TorchaoInt4 { group_size } => write!(f, "torchao-int4-g{group_size}"),
            WeightDtype::TorchaoInt8 => f.write_str("torchao-int8"),
        }
    }
}

impl Serialize for WeightDtype {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// How the KV cache stores one element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvDtype {
    F32,
    F16,
    Bf16,
    Fp8,
    Q8_0,
    Q4_0,
}

impl KvDtype {
    pub fn elem_bytes(self) -> ElemBytes {
        match self {
            KvDtype::F32 => ElemBytes::new(4, 1),
            KvDtype::F16 | KvDtype::Bf16 => ElemBytes::new(2, 1),
            KvDtype::Fp8 => ElemBytes::new(1, 1),
            KvDtype::Q8_0 => GgmlType::Q8_0.elem_bytes(),
            KvDtype::Q4_0 => GgmlType::Q4_0.elem_bytes(),
        }
    }
}

impl FromStr for KvDtype {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" => KvDtype::F32,
            "f16" | "fp16" | "float16" => KvDtype::F16,
            "bf16" | "bfloat16" => KvDtype::Bf16,
            "fp8" | "fp8_e4m3" | "fp8_e5m2" | "int8" => KvDtype::Fp8,
            "q8_0" => KvDtype::Q8_0,
            "q4_0" => KvDtype::Q4_0,
            _ => return Err(InputError::KvDtype(s.to_string())),
        })
    }
}

impl fmt::Display for KvDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KvDtype::F32 => "f32",
            KvDtype::F16 => "f16",
            KvDtype::Bf16 => "bf16",
            KvDtype::Fp8 => "fp8",
            KvDtype::Q8_0 => "q8_0",
            KvDtype::Q4_0 => "q4_0",
        })
    }
}

impl Serialize for KvDtype {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_layouts_are_llama_cpp_s() {
        // 32 weights of q8_0: an f16 scale + 32 int8 = 34 bytes.
        assert_eq!(GgmlType::Q8_0.elem_bytes().of(32), 34);
        // one 256-weight super-block of q4_K is 144 bytes, of q6_K 210 bytes.
        assert_eq!(GgmlType::Q4K.elem_bytes().of(256), 144);
        assert_eq!(GgmlType::Q6K.elem_bytes().of(512), 420);
        assert_eq!(GgmlType::Q4_0.elem_bytes().of(64), 36);
    }

    #[test]
    fn dtype_names_round_trip() {
        for s in [
            "f32", "f16", "bf16", "int8", "nf4", "fp4", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0",
            "fp8", "mxfp4", "nvfp4",
        ] {
            let d: WeightDtype = s.parse().unwrap();
            assert_eq!(d.to_string(), s);
        }
        assert!("int3".parse::<WeightDtype>().is_err());
        assert!("q2".parse::<KvDtype>().is_err());
    }
}

/// The dtype the runtime and the probes compute in. Parsed once at the CLI edge; serialised by
/// name (`f32`, `f16`, `bf16`) in the probe's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ComputeDtype {
    F32,
    F16,
    Bf16,
}

impl ComputeDtype {
    pub fn as_str(self) -> &'static str {
        match self {
            ComputeDtype::F32 => "f32",
            ComputeDtype::F16 => "f16",
            ComputeDtype::Bf16 => "bf16",
        }
    }

    /// The weights' dtype when they are held dense in this dtype.
    pub fn weights(self) -> WeightDtype {
        match self {
            ComputeDtype::F32 => WeightDtype::F32,
            ComputeDtype::F16 => WeightDtype::F16,
            ComputeDtype::Bf16 => WeightDtype::Bf16,
        }
    }

    /// The KV cache's dtype: the compute dtype.
    pub fn kv(self) -> KvDtype {
        match self {
            ComputeDtype::F32 => KvDtype::F32,
            ComputeDtype::F16 => KvDtype::F16,
            ComputeDtype::Bf16 => KvDtype::Bf16,
        }
    }

    /// A dense dtype's compute dtype; `None` for quantized weights (the probe cannot run them
    /// dense without being told a dtype).
    pub fn of_weights(w: WeightDtype) -> Option<ComputeDtype> {
        match w {
            WeightDtype::F32 => Some(ComputeDtype::F32),
            WeightDtype::F16 => Some(ComputeDtype::F16),
            WeightDtype::Bf16 => Some(ComputeDtype::Bf16),
            _ => None,
        }
    }
}

impl std::fmt::Display for ComputeDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ComputeDtype {
    type Err = InputError;
    fn from_str(s: &str) -> Result<ComputeDtype, InputError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" => Ok(ComputeDtype::F32),
            "f16" | "fp16" | "float16" => Ok(ComputeDtype::F16),
            "bf16" | "bfloat16" => Ok(ComputeDtype::Bf16),
            other => Err(InputError::Usage(format!(
                "the probe runs f32, f16 or bf16 weights, not `{other}`; pass --dtype bf16 (quantized dtypes are priced by `llm-oom plan`)"
            ))),
        }
    }
}
