//! KV-cache bytes: 2 (K and V) × layers × kv_heads × head_dim × element bytes per token, with
//! sliding-window layers holding at most their window.

use crate::dtype::KvDtype;
use crate::model::Spec;

/// Bytes one token adds to the cache of one sequence, while it is shorter than any window.
pub fn kv_bytes_per_token(spec: &Spec, kv: KvDtype) -> u64 {
    2 * spec.num_layers * kv.elem_bytes().of(spec.kv_dim())
}

/// Bytes of the cache of `batch` sequences of `tokens` tokens each. `trim_windows`: whether the
/// engine keeps only the window in sliding-window layers.
pub fn kv_bytes(spec: &Spec, kv: KvDtype, tokens: u64, batch: u64, trim_windows: bool) -> u64 {
    let row = kv.elem_bytes().of(spec.kv_dim());
    let windowed = match spec.sliding_window {
        Some(w) if trim_windows => tokens.min(w),
        _ => tokens,
    };
    let slots = spec.full_attention_layers() * tokens + spec.sliding_layers * windowed;
    batch * 2 * row * slots
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::presets;

    fn preset(id: &str) -> Spec {
        let (id, json) = presets::find(id).unwrap();
        presets::load(id, json).unwrap()
    }

    #[test]
    fn per_token_bytes_are_exact() {
        let m = preset("mistralai/Mistral-7B-Instruct-v0.2");
        assert_eq!(kv_bytes_per_token(&m, KvDtype::Bf16), 131_072);
        assert_eq!(
            kv_bytes(&m, KvDtype::Bf16, 4096, 4, true),
            4 * 4096 * 131_072
        );
        // Llama-2-7B has no GQA: 2 × 32 × 4096 × 2 = 512 KiB per token.
        assert_eq!(
            kv_bytes_per_token(&preset("meta-llama/Llama-2-7b-hf"), KvDtype::F16),
            524_288
        );
        // q8_0: 34 bytes per 32 values.
        assert_eq!(
            kv_bytes_per_token(&m, KvDtype::Q8_0),
            2 * 32 * 1024 / 32 * 34
        );
    }

    #[test]
    fn sliding_layers_stop_at_the_window() {
        let g = preset("google/gemma-2-9b-it");
        assert_eq!((g.sliding_layers, g.sliding_window), (21, Some(4096)));
        let per = 2 * 8 * 256 * 2;
        assert_eq!(
            kv_bytes(&g, KvDtype::Bf16, 8192, 1, true),
            per * (21 * 8192 + 21 * 4096)
        );
        // transformers' generate() keeps every token (measured on the H200).
        assert_eq!(kv_bytes(&g, KvDtype::Bf16, 8192, 1, false), per * 42 * 8192);
        assert_eq!(kv_bytes(&g, KvDtype::Bf16, 1000, 1, true), per * 42 * 1000);
    }
}
