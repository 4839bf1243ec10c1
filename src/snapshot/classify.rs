//! Which part of the workload a stack allocated for: the rules `attribute` applies to each block's
//! frames (innermost first). In order: the innermost frame that builds, loads or moves parameters
//! (a module's `__init__`, `reset_parameters`, `_init_weights`, `post_init`; `from_pretrained`,
//! `load_state_dict`, transformers' `core_model_loading.py`, whose loader threads carry no
//! `from_pretrained` frame; safetensors; a module's `.to()`/`.cuda()`/`_apply`) or that grows the
//! KV cache (transformers' `cache_utils.py`: `update`, `lazy_initialization`) decides weights or KV
//! cache; else the innermost `modeling_*.py` frame → activations of that module (attention, MLP,
//! logits, embeddings, norm, or the layer); generation code → logits; anything else → other; no
//! frames → unattributed (allocated while the record was off), never folded into "other".

use std::collections::HashMap;
use std::io::Read;

use serde::Serialize;

use super::Frame;

/// Largest model source file read to find a frame's enclosing class.
const MAX_SOURCE_BYTES: u64 = 4 << 20;

/// The `class` lines of model files named in frames, read once each when the file is there (the
/// snapshot read on the machine that made it): `modeling_mistral.py:54` → `MistralMLP`. Only files
/// named `modeling_*.py` are read, never run.
#[derive(Debug, Default)]
pub struct Sources {
    classes: HashMap<String, Vec<(i64, String)>>,
}

impl Sources {
    pub fn enclosing_class(&mut self, f: &Frame) -> Option<&str> {
        if !is_model_file(f) {
            return None;
        }
        let classes = self
            .classes
            .entry(f.filename.clone())
            .or_insert_with(|| read_classes(&f.filename));
        classes
            .iter()
            .rev()
            .find(|(line, _)| *line <= f.line)
            .map(|(_, c)| c.as_str())
    }
}

fn read_classes(path: &str) -> Vec<(i64, String)> {
    let mut text = String::new();
    let ok = std::fs::File::open(path)
        .and_then(|f| f.take(MAX_SOURCE_BYTES).read_to_string(&mut text))
        .is_ok();
    if !ok {
        return Vec::new();
    }
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let rest = l.strip_prefix("class ")?;
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            Some((i as i64 + 1, name))
        })
        .collect()
}

fn kind_of_class(class: &str) -> Option<Component> {
    let c = class.to_ascii_lowercase();
    if c.contains("attention") {
        Some(Component::Attention)
    } else if ["mlp", "feedforward", "expert", "moe"]
        .iter()
        .any(|k| c.contains(k))
    {
        Some(Component::Mlp)
    } else if c.contains("norm") {
        Some(Component::Norm)
    } else if c.contains("embedding") {
        Some(Component::Embeddings)
    } else if c.contains("forcausallm")
        || c.contains("lmhead")
        || c.contains("forconditionalgeneration")
    {
        Some(Component::Logits)
    } else {
        None
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    Weights,
    KvCache,
    Attention,
    Mlp,
    Logits,
    Embeddings,
    Norm,
    /// Activations of a model file's module the rules do not name (hidden states, residuals).
    LayerActivations,
    Other,
    /// Allocated while history was off (or before it was turned on): no frames to read.
    Unattributed,
}

impl Component {
    pub fn is_activation(self) -> bool {
        matches!(
            self,
            Component::Attention
                | Component::Mlp
                | Component::Logits
                | Component::Embeddings
                | Component::Norm
                | Component::LayerActivations
        )
    }

    pub fn label(self) -> &'static str {
        match self {
            Component::Weights => "weights",
            Component::KvCache => "KV cache",
            Component::Attention => "activations: attention",
            Component::Mlp => "activations: MLP",
            Component::Logits => "activations: lm_head / logits",
            Component::Embeddings => "activations: embeddings",
            Component::Norm => "activations: norm",
            Component::LayerActivations => "activations: other in the model",
            Component::Other => "other",
            Component::Unattributed => "unattributed (no stack recorded)",
        }
    }
}

/// Functions that load or move parameters (transformers, accelerate, vLLM, torch's `.to()`).
const LOAD_NAMES: &[&str] = &[
    "from_pretrained",
    "load_state_dict",
    "_load_state_dict_into_meta_model",
    "_load_pretrained_model",
    "_load_from_state_dict",
    "caching_allocator_warmup",
    "load_checkpoint_and_dispatch",
    "dispatch_model",
    "set_module_tensor_to_device",
    "load_weights",
    "load_model",
    "to_empty",
    // Building a model on the device (`from_config` under `torch.device("cuda")`, or a module's
    // constructor): parameters and buffers are made in these.
    "reset_parameters",
    "_init_weights",
    "init_weights",
    "_initialize_weights",
    "initialize_weights",
    "post_init",
    "smart_apply",
    "from_config",
    "_from_config",
];
/// Function names of KV-cache allocation outside transformers' cache_utils.py (vLLM, SGLang).
const KV_NAMES: &[&str] = &[
    "_allocate_kv_cache",
    "allocate_kv_cache",
    "initialize_kv_cache",
    "_init_cache",
    "_allocate_kv_cache_tensors",
];

/// The path from the package down (`transformers/models/llama/modeling_llama.py`).
pub fn short_path(filename: &str) -> &str {
    if let Some(i) = filename.rfind("site-packages/") {
        return &filename[i + "site-packages/".len()..];
    }
    if let Some(i) = filename.rfind("dist-packages/") {
        return &filename[i + "dist-packages/".len()..];
    }
    let mut cut = filename.len();
    for _ in 0..2 {
        match filename[..cut].rfind('/') {
            Some(i) => cut = i,
            None => return filename,
        }
    }
    &filename[cut + 1..]
}

fn base(f: &Frame) -> &str {
    f.filename.rsplit('/').next().unwrap_or(&f.filename)
}

/// A frame that makes, loads or moves parameters and buffers.
fn is_load(f: &Frame) -> bool {
    let torch_move = f.filename.ends_with("torch/nn/modules/module.py")
        && matches!(f.name.as_str(), "to" | "cuda" | "_apply" | "convert");
    // A constructor of a torch module, a model file's module or torch's Parameter.
    let init = f.name == "__init__"
        && (f.filename.contains("torch/nn/modules/")
            || f.filename.ends_with("torch/nn/parameter.py")
            || is_model_file(f)
            || base(f) == "modeling_utils.py");
    LOAD_NAMES.contains(&f.name.as_str())
        || f.filename.contains("/safetensors/")
        || base(f) == "core_model_loading.py"
        || f.filename.ends_with("torch/nn/init.py")
        || (base(f) == "modeling_utils.py" && f.name.starts_with("_load"))
        || f.filename.contains("model_loader/")
        || torch_move
        || init
}

fn is_kv(f: &Frame) -> bool {
    base(f) == "cache_utils.py"
        || KV_NAMES.contains(&f.name.as_str())
        || base(f) == "cache_engine.py"
        || f.filename.contains("/kv_cache")
        || base(f) == "memory_pool.py"
}

fn is_model_file(f: &Frame) -> bool {
    let b = base(f);
    b.starts_with("modeling_")
        && b.ends_with(".py")
        && !matches!(
            b,
            "modeling_utils.py" | "modeling_layers.py" | "modeling_outputs.py"
        )
}

fn kind_of(f: &Frame) -> Option<Component> {
    let n = f.name.to_ascii_lowercase();
    let file = f.filename.as_str();
    let b = base(f);
    if n.contains("attention")
        || n.contains("attn")
        || n.contains("rotary")
        || n.contains("rope")
        || n == "repeat_kv"
        || file.contains("integrations/") && b.contains("attention")
        || b == "modeling_flash_attention_utils.py"
        || b == "modeling_rope_utils.py"
        || file.ends_with("torch/nn/functional.py") && n.contains("scaled_dot_product")
    {
        return Some(Component::Attention);
    }
    if b == "activations.py" || n.contains("mlp") || n.contains("expert") || n.contains("moe") {
        return Some(Component::Mlp);
    }
    if file.ends_with("torch/nn/modules/sparse.py") || n.contains("embed") {
        return Some(Component::Embeddings);
    }
    if file.ends_with("torch/nn/modules/normalization.py") || n.contains("norm") {
        return Some(Component::Norm);
    }
    None
}

/// The component of one stack and the frame that names its site. `sources` reads the enclosing
/// class of the model frame when its file is on this machine; without it the names decide.
pub fn classify<'a>(frames: &'a [Frame], sources: &mut Sources) -> (Component, Option<&'a Frame>) {
    if frames.is_empty() {
        return (Component::Unattributed, None);
    }
    // The innermost of a cache frame and a weights frame decides: a cache built inside a module's
    // constructor is the cache, a parameter made under a generate() call is a parameter.
    for f in frames {
        if is_kv(f) {
            return (Component::KvCache, Some(f));
        }
        if is_load(f) {
            return (Component::Weights, Some(f));
        }
    }
    if let Some(i) = frames.iter().position(is_model_file) {
        let site = &frames[i];
        let kind = sources
            .enclosing_class(site)
            .and_then(kind_of_class)
            .or_else(|| frames[..=i].iter().rev().find_map(kind_of));
        let outermost = !frames[i + 1..].iter().any(is_model_file);
        let c = match kind {
            Some(k) => k,
            None if outermost => Component::Logits,
            None => Component::LayerActivations,
        };
        return (c, Some(site));
    }
    if let Some(f) = frames
        .iter()
        .find(|f| f.filename.contains("transformers/generation/"))
    {
        return (Component::Logits, Some(f));
    }
    let site = frames
        .iter()
        .find(|f| !f.filename.contains("torch/"))
        .or(frames.first());
    (Component::Other, site)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SP: &str = "/usr/lib/python3.12/site-packages/";

    fn st(frames: &[(&str, &str)]) -> Vec<Frame> {
        frames
            .iter()
            .enumerate()
            .map(|(i, (file, name))| Frame {
                filename: if file.starts_with('/') {
                    (*file).to_string()
                } else {
                    format!("{SP}{file}")
                },
                line: i as i64 + 1,
                name: (*name).to_string(),
            })
            .collect()
    }

    fn component(frames: &[(&str, &str)]) -> Component {
        classify(&st(frames), &mut Sources::default()).0
    }

    const MODEL: &str = "transformers/models/llama/modeling_llama.py";

    /// `AutoModelForCausalLM.from_config(cfg)` under `torch.device("cuda")`: the parameter is made
    /// in the module's constructor, with a model file's `__init__` above it.
    #[test]
    fn a_module_built_on_the_device_is_weights() {
        let init = [
            ("torch/nn/modules/linear.py", "__init__"),
            (MODEL, "__init__"),
            (MODEL, "__init__"),
            ("torch/nn/modules/container.py", "<listcomp>"),
            (MODEL, "__init__"),
            ("transformers/modeling_utils.py", "_from_config"),
            ("transformers/models/auto/auto_factory.py", "from_config"),
            ("/home/user/run.py", "main"),
        ];
        assert_eq!(component(&init), Component::Weights);
        // A buffer made in a rotary embedding's constructor, and the init pass after it.
        let buffer = [
            (MODEL, "__init__"),
            (MODEL, "__init__"),
            ("/home/user/run.py", "main"),
        ];
        assert_eq!(component(&buffer), Component::Weights);
        let post = [
            ("torch/nn/init.py", "normal_"),
            ("transformers/modeling_utils.py", "_init_weights"),
            ("transformers/modeling_utils.py", "smart_apply"),
            ("transformers/modeling_utils.py", "post_init"),
            ("/home/user/run.py", "main"),
        ];
        assert_eq!(component(&post), Component::Weights);
    }

    /// transformers 5.17's `from_pretrained` copies each tensor to the device in a loader thread:
    /// the stack ends in the thread pool, with no `from_pretrained` frame.
    #[test]
    fn a_tensor_loaded_in_transformers_loader_thread_is_weights() {
        let thread = [
            ("transformers/core_model_loading.py", "_materialize_copy"),
            ("transformers/core_model_loading.py", "_job"),
            ("/usr/lib/python3.12/concurrent/futures/thread.py", "run"),
            (
                "/usr/lib/python3.12/concurrent/futures/thread.py",
                "_worker",
            ),
            ("/usr/lib/python3.12/threading.py", "run"),
            ("/usr/lib/python3.12/threading.py", "_bootstrap_inner"),
            ("/usr/lib/python3.12/threading.py", "_bootstrap"),
        ];
        assert_eq!(component(&thread), Component::Weights);
        let warmup = [
            ("transformers/modeling_utils.py", "caching_allocator_warmup"),
            ("transformers/modeling_utils.py", "_load_pretrained_model"),
            ("transformers/modeling_utils.py", "from_pretrained"),
        ];
        assert_eq!(component(&warmup), Component::Weights);
        let safetensors = [
            ("safetensors/torch.py", "load_file"),
            ("/app.py", "<module>"),
        ];
        assert_eq!(component(&safetensors), Component::Weights);
    }

    /// The H200 record's load: `model.to("cuda")`, through torch's `_apply` and `convert`.
    #[test]
    fn a_module_moved_to_the_device_is_weights() {
        let to = [
            ("torch/nn/modules/module.py", "convert"),
            ("torch/nn/modules/module.py", "_apply"),
            ("torch/nn/modules/module.py", "_apply"),
            ("torch/nn/modules/module.py", "to"),
            ("transformers/modeling_utils.py", "to"),
            ("/work/scripts/gpu/snapshot-workload.py", "main"),
        ];
        assert_eq!(component(&to), Component::Weights);
    }

    #[test]
    fn cache_utils_is_the_kv_cache_and_the_rest_of_forward_activations() {
        let update = [
            ("transformers/cache_utils.py", "update"),
            ("transformers/cache_utils.py", "update"),
            (MODEL, "forward"),
            ("torch/nn/modules/module.py", "_call_impl"),
            ("transformers/generation/utils.py", "_sample"),
        ];
        assert_eq!(component(&update), Component::KvCache);
        let lazy = [
            ("transformers/cache_utils.py", "lazy_initialization"),
            ("transformers/cache_utils.py", "update"),
            (MODEL, "forward"),
        ];
        assert_eq!(component(&lazy), Component::KvCache);
        let mlp = [
            ("torch/nn/functional.py", "silu"),
            ("transformers/activations.py", "forward"),
            ("torch/nn/modules/module.py", "_call_impl"),
            (MODEL, "forward"),
            ("transformers/generation/utils.py", "generate"),
        ];
        assert_eq!(component(&mlp), Component::Mlp);
        let linear = [
            ("torch/nn/modules/linear.py", "forward"),
            ("torch/nn/modules/module.py", "_call_impl"),
            (MODEL, "forward"),
            ("torch/nn/modules/module.py", "_call_impl"),
            (MODEL, "forward"),
        ];
        assert!(component(&linear).is_activation());
    }

    #[test]
    fn no_stack_is_unattributed_and_a_program_s_own_tensor_is_other() {
        assert_eq!(component(&[]), Component::Unattributed);
        assert_ne!(Component::Unattributed.label(), Component::Other.label());
        let ballast = [
            ("/work/scripts/gpu/snapshot-workload.py", "main"),
            ("/work/scripts/gpu/snapshot-workload.py", "<module>"),
        ];
        assert_eq!(component(&ballast), Component::Other);
    }
}
