//! What a model is, as far as memory is concerned: its `Spec`, and where `--model` finds it.

pub mod checkpoint;
pub mod config;
pub mod derive;
pub mod facts;
pub mod families;
pub mod gguf;
pub mod guard;
pub mod images;
pub mod layout;
pub mod mmproj;
pub mod ollama_tags;
pub mod presets;
pub mod quant;
pub mod source;
pub mod spec;
pub mod tokenizer;

pub use facts::{facts, ModelFacts};
pub use source::{resolve, ModelSource, ResolvedModel, SourceKind};
pub use spec::{Experts, Role, Spec, TensorGroup};
