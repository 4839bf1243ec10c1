//! ollama's own defaults around the llama-server it launches, read in ollama@fb307609
//! (2026-08-21): it starts `llama-server -c num_ctx×OLLAMA_NUM_PARALLEL -np OLLAMA_NUM_PARALLEL`
//! (llm/llama_server.go), with `--cache-type-k/-v` from OLLAMA_KV_CACHE_TYPE (f16 when unset),
//! flash attention `auto` unless OLLAMA_FLASH_ATTENTION says otherwise, `-ngl` left to
//! llama-server's own fitting unless `num_gpu` is set, and `-b`/`-ub` from the context
//! (server/sched.go `generationBatchForContext`). The default `num_ctx` follows the card
//! (server/routes.go): 262,144 from 47 GiB of VRAM, 32,768 from 23 GiB, else 4,096, never past the
//! model's trained context; when that automatic context does not load, ollama retries with the
//! next lower of those (`nextLowerAutoNumCtx`). OLLAMA_NUM_PARALLEL defaults to 1
//! (envconfig/config.go).

use serde::Serialize;

use super::llamacpp::LlamaCppArgs;
use crate::dtype::KvDtype;
use crate::error::InputError;
use crate::units::GIB;

/// The ollama source the defaults are read from.
pub const VERSION: &str = "ollama@fb307609, 2026-08-21";

/// What the user set of ollama's knobs (`None` = ollama's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct OllamaArgs {
    /// `num_ctx` (a request option, `PARAMETER num_ctx` or OLLAMA_CONTEXT_LENGTH).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_ctx: Option<u64>,
    /// `num_gpu`: the layers ollama offloads. Set, ollama passes `-ngl N` (0: `-ngl 0`, the
    /// CPU alone) and llama-server does not fit layers itself; unset (-1), no `-ngl` is passed
    /// (llm/llama_server.go, the launch's "GPU layer offloading").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_gpu: Option<u64>,
    /// The settings this plan took from ollama's environment (no flag gave them).
    #[serde(skip)]
    pub from_env: Env,
}

/// ollama's environment as envconfig/config.go reads it: each value trimmed of spaces and
/// quotes (`Var`); an empty one is unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Env {
    /// OLLAMA_NUM_PARALLEL (`Uint`, default 1; server/sched.go takes at least 1).
    pub num_parallel: Option<u64>,
    /// OLLAMA_KV_CACHE_TYPE, lowercased, passed to llama-server as `--cache-type-k/-v`
    /// (llm/server.go `NewLlamaServer`, llm/llama_server.go).
    pub kv_cache_type: Option<KvDtype>,
    /// OLLAMA_FLASH_ATTENTION (`BoolWithDefault`): set, `--flash-attn on|off`; unset, `auto`
    /// (llm/llama_server.go `LlamaServerFlashAttention`).
    pub flash_attention: Option<bool>,
    /// OLLAMA_CONTEXT_LENGTH (`Uint`, 0 = ollama's automatic context; server/routes.go
    /// `usesAutomaticNumCtx`, api/types.go `DefaultOptions`).
    pub context_length: Option<u64>,
}

/// The variables [`Env`] reads.
pub const ENV_VARS: [&str; 4] = [
    "OLLAMA_NUM_PARALLEL",
    "OLLAMA_KV_CACHE_TYPE",
    "OLLAMA_FLASH_ATTENTION",
    "OLLAMA_CONTEXT_LENGTH",
];

impl Env {
    /// ollama's environment through `get` (`std::env::var` in the binary). ollama logs a bad
    /// number and uses its default, and reads a bad boolean as true; a plan that guessed would
    /// price another server, so a bad value is refused, naming the variable.
    pub fn read(get: impl Fn(&str) -> Option<String>) -> Result<Env, InputError> {
        let var = |k: &str| {
            get(k)
                .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').to_string())
                .filter(|v| !v.is_empty())
        };
        let uint = |k: &str| -> Result<Option<u64>, InputError> {
            var(k)
                .map(|v| {
                    v.parse::<u64>().map_err(|_| {
                        InputError::Usage(format!(
                            "{k}={v} is not a whole number of 0 or more; set it to one or unset it"
                        ))
                    })
                })
                .transpose()
        };
        let num_parallel = uint("OLLAMA_NUM_PARALLEL")?
            .map(|n| crate::limits::flag("OLLAMA_NUM_PARALLEL", n.max(1)))
            .transpose()?;
        let context_length = uint("OLLAMA_CONTEXT_LENGTH")?
            .filter(|&n| n > 0)
            .map(|n| crate::limits::flag("OLLAMA_CONTEXT_LENGTH", n))
            .transpose()?;
        let kv_cache_type = var("OLLAMA_KV_CACHE_TYPE")
            .map(|v| match v.to_ascii_lowercase().as_str() {
                "f32" => Ok(KvDtype::F32),
                "f16" => Ok(KvDtype::F16),
                "bf16" => Ok(KvDtype::Bf16),
                "q8_0" => Ok(KvDtype::Q8_0),
                "q4_0" => Ok(KvDtype::Q4_0),
                _ => Err(InputError::Usage(format!(
                    "OLLAMA_KV_CACHE_TYPE={v} is not a cache type llm-oom prices for llama-server; \
                     use f16, q8_0 or q4_0 (or f32, bf16)"
                ))),
            })
            .transpose()?;
        // Go's strconv.ParseBool.
        let flash_attention = var("OLLAMA_FLASH_ATTENTION")
            .map(|v| match v.as_str() {
                "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
                "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
                _ => Err(InputError::Usage(format!(
                    "OLLAMA_FLASH_ATTENTION={v} is not a boolean (ollama would read it as on); \
                     set 1 or 0"
                ))),
            })
            .transpose()?;
        Ok(Env {
            num_parallel,
            kv_cache_type,
            flash_attention,
            context_length,
        })
    }
}

/// The model families ollama loads with one slot whatever OLLAMA_NUM_PARALLEL says (server/sched.go
/// `load`, ollama#4165).
const ONE_SLOT: [&str; 11] = [
    "mllama",
    "qwen3vl",
    "qwen3vlmoe",
    "qwen35",
    "qwen35moe",
    "qwen3next",
    "lfm2",
    "lfm2moe",
    "nemotron_h",
    "nemotron_h_moe",
    "nemotron_h_omni",
];

/// Whether ollama runs `architecture` (a config's `model_type` or a GGUF's architecture) with one
/// slot: the names compared without underscores (`qwen3_next` is ollama's `qwen3next`).
pub fn one_slot_only(architecture: &str) -> bool {
    let plain = |s: &str| s.replace('_', "").to_ascii_lowercase();
    let a = plain(architecture);
    ONE_SLOT.iter().any(|f| plain(f) == a)
}

/// ollama's automatic `num_ctx` for a card of `vram` bytes (server/routes.go), capped by the
/// model's trained context (`effectiveContext`).
pub fn default_num_ctx(vram: u64, trained: Option<u64>) -> u64 {
    let tier = if vram >= 47 * GIB {
        262_144
    } else if vram >= 23 * GIB {
        32_768
    } else {
        4_096
    };
    cap(tier, trained)
}

fn cap(num_ctx: u64, trained: Option<u64>) -> u64 {
    match trained {
        Some(t) if t > 0 && num_ctx > t => t,
        _ => num_ctx,
    }
}

/// The next automatic context ollama tries when one does not load (`nextLowerAutoNumCtx`).
pub fn next_lower_num_ctx(num_ctx: u64) -> Option<u64> {
    if num_ctx > 32_768 {
        Some(32_768)
    } else if num_ctx > 4_096 {
        Some(4_096)
    } else {
        None
    }
}

/// `-b`/`-ub` ollama passes for a context of `ctx` cells in all (`generationBatchForContext`).
pub fn generation_batch(ctx: u64) -> u64 {
    if ctx > 32_768 {
        2048
    } else if ctx > 4_096 {
        1024
    } else {
        512
    }
}

/// Whether ollama keeps the larger batch: the predicted VRAM within 80 % of what is available,
/// within 75 % (-ub 1024) or 60 % (2048) of it, with 768 MiB (1024) or 2 GiB (2048) to spare
/// beyond the 80 % (`generationBatchFits`).
pub fn generation_batch_fits(batch: u64, predicted: u64, available: u64) -> bool {
    if predicted == 0 || available == 0 {
        return true;
    }
    let threshold = available / 100 * 80;
    if predicted > threshold {
        return false;
    }
    let (headroom, surcharge) = match batch {
        b if b >= 2048 => (available / 100 * 60, 2 * GIB),
        b if b >= 1024 => (available / 100 * 75, 768 << 20),
        _ => (u64::MAX, 0),
    };
    predicted <= headroom && surcharge <= threshold - predicted
}

/// The llama-server flags ollama launches for `num_ctx` and `parallel` slots, batch `ub`.
pub fn launch(num_ctx: u64, parallel: u64, ub: u64) -> LlamaCppArgs {
    LlamaCppArgs {
        ctx_size: Some(num_ctx.saturating_mul(parallel.max(1))),
        ubatch: Some(ub),
        batch: Some(ub),
        flash_attn: None,
        unified: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_context_follows_the_card_and_the_model() {
        assert_eq!(default_num_ctx(8 * GIB, Some(131_072)), 4_096);
        assert_eq!(default_num_ctx(24 * GIB, Some(131_072)), 32_768);
        // 23 GiB is the threshold (a 24 GB card reads a little under 24 GiB).
        assert_eq!(default_num_ctx(23 * GIB - 1, None), 4_096);
        assert_eq!(default_num_ctx(80 * GIB, Some(131_072)), 131_072);
        assert_eq!(default_num_ctx(80 * GIB, None), 262_144);
        assert_eq!(default_num_ctx(24 * GIB, Some(8_192)), 8_192);
    }

    #[test]
    fn some_families_get_one_slot() {
        assert!(one_slot_only("qwen3_next"));
        assert!(one_slot_only("qwen3next"));
        assert!(one_slot_only("nemotron_h"));
        assert!(one_slot_only("mllama"));
        assert!(!one_slot_only("llama"));
        assert!(!one_slot_only("qwen3"));
    }

    #[test]
    fn automatic_context_steps_down_then_stops() {
        assert_eq!(next_lower_num_ctx(131_072), Some(32_768));
        assert_eq!(next_lower_num_ctx(32_768), Some(4_096));
        assert_eq!(next_lower_num_ctx(4_096), None);
    }

    #[test]
    fn the_batch_grows_with_the_context_when_there_is_headroom() {
        assert_eq!(generation_batch(4_096), 512);
        assert_eq!(generation_batch(32_768), 1024);
        assert_eq!(generation_batch(131_072), 2048);
        assert!(generation_batch_fits(1024, 10 * GIB, 24 * GIB));
        // 20 of 24 GiB is past 75 %.
        assert!(!generation_batch_fits(1024, 20 * GIB, 24 * GIB));
        assert!(!generation_batch_fits(2048, 15 * GIB, 24 * GIB));
        assert!(generation_batch_fits(512, 19 * GIB, 24 * GIB));
        let l = launch(4_096, 2, 512);
        assert_eq!((l.ctx_size, l.ubatch), (Some(8_192), Some(512)));
    }

    fn env(pairs: &[(&str, &str)]) -> Result<Env, InputError> {
        Env::read(|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn the_environment_is_read_as_ollama_reads_it() {
        assert_eq!(env(&[]).unwrap(), Env::default());
        let e = env(&[
            ("OLLAMA_NUM_PARALLEL", " 4 "),
            ("OLLAMA_KV_CACHE_TYPE", "Q8_0"),
            ("OLLAMA_FLASH_ATTENTION", "\"true\""),
            ("OLLAMA_CONTEXT_LENGTH", "8192"),
        ])
        .unwrap();
        assert_eq!(e.num_parallel, Some(4));
        assert_eq!(e.kv_cache_type, Some(KvDtype::Q8_0));
        assert_eq!(e.flash_attention, Some(true));
        assert_eq!(e.context_length, Some(8192));
        // 0 slots is one (server/sched.go), context 0 is the automatic one, empty is unset.
        let e = env(&[
            ("OLLAMA_NUM_PARALLEL", "0"),
            ("OLLAMA_CONTEXT_LENGTH", "0"),
            ("OLLAMA_FLASH_ATTENTION", ""),
        ])
        .unwrap();
        assert_eq!(
            (e.num_parallel, e.context_length, e.flash_attention),
            (Some(1), None, None)
        );
        assert_eq!(
            env(&[("OLLAMA_FLASH_ATTENTION", "0")])
                .unwrap()
                .flash_attention,
            Some(false)
        );
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        for (k, v) in [
            ("OLLAMA_NUM_PARALLEL", "two"),
            ("OLLAMA_NUM_PARALLEL", "-1"),
            ("OLLAMA_CONTEXT_LENGTH", "8k"),
            ("OLLAMA_KV_CACHE_TYPE", "fp8"),
            ("OLLAMA_FLASH_ATTENTION", "yes"),
        ] {
            let e = env(&[(k, v)]).unwrap_err().to_string();
            assert!(e.contains(&format!("{k}={v}")), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
