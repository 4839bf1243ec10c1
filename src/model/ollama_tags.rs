//! ollama's library tags (`llama3.1:8b`, `qwen3:30b-a3b`, `gpt-oss:20b`, `…:8b-instruct-q8_0`)
//! resolved to the checkpoint behind them and the quantization the tag pulls. Each row is what
//! the tag's page on ollama.com/library lists (architecture, parameters, quantization of the
//! default tag); a tag without a size is the family's default (`llama3.1` = `llama3.1:latest` =
//! `llama3.1:8b`). A trailing quant in the tag (`-q8_0`, `-fp16`, `-q4_K_M`) overrides the default.

use crate::dtype::WeightDtype;

/// One library tag: the Hugging Face checkpoint of the same architecture and the default quant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    /// `family:size` as `ollama pull` takes it.
    pub tag: &'static str,
    /// The checkpoint (a preset where llm-oom ships one) whose config the GGUF was made from.
    pub model: &'static str,
    /// The quantization `ollama pull <tag>` downloads.
    pub quant: &'static str,
    /// Where the row comes from.
    pub source: &'static str,
}

const fn row(tag: &'static str, model: &'static str, quant: &'static str) -> Tag {
    Tag {
        tag,
        model,
        quant,
        source: "ollama.com/library, the tag's page",
    }
}

/// The popular library tags. The first row of a family is its default (`:latest`).
pub const TAGS: &[Tag] = &[
    row("llama3.1:8b", "meta-llama/Llama-3.1-8B-Instruct", "q4_k_m"),
    row(
        "llama3.1:70b",
        "meta-llama/Llama-3.1-70B-Instruct",
        "q4_k_m",
    ),
    row(
        "llama3.1:405b",
        "meta-llama/Llama-3.1-405B-Instruct",
        "q4_k_m",
    ),
    row("llama3.2:3b", "meta-llama/Llama-3.2-3B-Instruct", "q4_k_m"),
    row("llama3.2:1b", "meta-llama/Llama-3.2-1B-Instruct", "q8_0"),
    row(
        "llama3.3:70b",
        "meta-llama/Llama-3.3-70B-Instruct",
        "q4_k_m",
    ),
    row("qwen2.5:7b", "Qwen/Qwen2.5-7B-Instruct", "q4_k_m"),
    row("qwen2.5:0.5b", "Qwen/Qwen2.5-0.5B-Instruct", "q4_k_m"),
    row("qwen2.5:1.5b", "Qwen/Qwen2.5-1.5B-Instruct", "q4_k_m"),
    row("qwen2.5:3b", "Qwen/Qwen2.5-3B-Instruct", "q4_k_m"),
    row("qwen2.5:14b", "Qwen/Qwen2.5-14B-Instruct", "q4_k_m"),
    row("qwen2.5:32b", "Qwen/Qwen2.5-32B-Instruct", "q4_k_m"),
    row("qwen2.5:72b", "Qwen/Qwen2.5-72B-Instruct", "q4_k_m"),
    row("qwen3:8b", "Qwen/Qwen3-8B", "q4_k_m"),
    row("qwen3:4b", "Qwen/Qwen3-4B", "q4_k_m"),
    row("qwen3:14b", "Qwen/Qwen3-14B", "q4_k_m"),
    row("qwen3:32b", "Qwen/Qwen3-32B", "q4_k_m"),
    row("qwen3:30b-a3b", "Qwen/Qwen3-30B-A3B", "q4_k_m"),
    row("qwen3:235b-a22b", "Qwen/Qwen3-235B-A22B", "q4_k_m"),
    row("gemma3:4b", "google/gemma-3-4b-it", "q4_k_m"),
    row("gemma3:1b", "google/gemma-3-1b-it", "q4_k_m"),
    row("gemma3:12b", "google/gemma-3-12b-it", "q4_k_m"),
    row("gemma3:27b", "google/gemma-3-27b-it", "q4_k_m"),
    row("mistral:7b", "mistralai/Mistral-7B-Instruct-v0.3", "q4_k_m"),
    row("phi4:14b", "microsoft/phi-4", "q4_k_m"),
    row(
        "deepseek-r1:8b",
        "deepseek-ai/DeepSeek-R1-0528-Qwen3-8B",
        "q4_k_m",
    ),
    row(
        "deepseek-r1:1.5b",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        "q4_k_m",
    ),
    row(
        "deepseek-r1:7b",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
        "q4_k_m",
    ),
    row(
        "deepseek-r1:14b",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
        "q4_k_m",
    ),
    row(
        "deepseek-r1:32b",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
        "q4_k_m",
    ),
    row(
        "deepseek-r1:70b",
        "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
        "q4_k_m",
    ),
    row("gpt-oss:20b", "openai/gpt-oss-20b", "mxfp4"),
    row("gpt-oss:120b", "openai/gpt-oss-120b", "mxfp4"),
];

/// A tag as the user wrote it, resolved: the row and the quant it pulls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resolved {
    pub tag: &'static Tag,
    pub quant: WeightDtype,
}

/// `llama3.1`, `llama3.1:latest`, `llama3.1:8b`, `llama3.1:8b-instruct-q8_0`; `None` for a name
/// the table does not hold (a path, a Hugging Face id, another tag).
pub fn find(name: &str) -> Option<Resolved> {
    let name = name.trim();
    if name.contains('/') || name.contains('\\') {
        return None;
    }
    let (family, rest) = name.split_once(':').unwrap_or((name, "latest"));
    let family = family.to_ascii_lowercase();
    let rest = rest.to_ascii_lowercase();
    let in_family = || {
        TAGS.iter()
            .filter(move |t| t.tag.split_once(':').is_some_and(|(f, _)| f == family))
    };
    let mut rows = in_family();
    let first = rows.next()?;
    let tag = if rest == "latest" {
        first
    } else {
        // The longest size that starts the tag: `30b-a3b-q8_0` is `30b-a3b`, not `30b`.
        std::iter::once(first)
            .chain(rows)
            .filter(|t| {
                let size = t.tag.split_once(':').map_or("", |(_, s)| s);
                rest == size || rest.starts_with(&format!("{size}-"))
            })
            .max_by_key(|t| t.tag.len())?
    };
    let size = tag.tag.split_once(':').map_or("", |(_, s)| s);
    let quant = rest
        .strip_prefix(size)
        .and_then(|tail| tail.rsplit('-').next())
        .and_then(|q| q.parse::<WeightDtype>().ok())
        .or_else(|| tag.quant.parse().ok())?;
    Some(Resolved { tag, quant })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> WeightDtype {
        s.parse().unwrap()
    }

    #[test]
    fn a_family_alone_is_its_default_tag() {
        let r = find("llama3.1").unwrap();
        assert_eq!(r.tag.tag, "llama3.1:8b");
        assert_eq!(r.quant, q("q4_k_m"));
        assert_eq!(find("llama3.1:latest").unwrap().tag.tag, "llama3.1:8b");
        assert_eq!(find("qwen3").unwrap().tag.model, "Qwen/Qwen3-8B");
    }

    #[test]
    fn sizes_and_quant_suffixes_resolve() {
        let r = find("qwen3:30b-a3b").unwrap();
        assert_eq!(r.tag.model, "Qwen/Qwen3-30B-A3B");
        let r = find("llama3.1:8b-instruct-q8_0").unwrap();
        assert_eq!((r.tag.tag, r.quant), ("llama3.1:8b", q("q8_0")));
        let r = find("llama3.1:8b-instruct-fp16").unwrap();
        assert_eq!(r.quant, q("f16"));
        let r = find("qwen3:30b-a3b-q4_K_M").unwrap();
        assert_eq!((r.tag.tag, r.quant), ("qwen3:30b-a3b", q("q4_k_m")));
        assert_eq!(find("gpt-oss:20b").unwrap().quant, WeightDtype::Mxfp4);
    }

    #[test]
    fn paths_ids_and_unknown_tags_are_not_tags() {
        assert!(find("meta-llama/Llama-3.1-8B-Instruct").is_none());
        assert!(find("./model.gguf").is_none());
        assert!(find("llama3.1:9b").is_none());
        assert!(find("nosuchmodel:7b").is_none());
    }

    #[test]
    fn every_row_names_a_quant_llm_oom_prices() {
        for t in TAGS {
            assert!(t.quant.parse::<WeightDtype>().is_ok(), "{}", t.tag);
            assert!(t.tag.contains(':') && t.model.contains('/'), "{}", t.tag);
        }
    }
}
