//! llm-oom: why a local LLM runs out of GPU memory, and what to change.
//!
//! The flow runs one way: `model` (the `Spec` of a model) → `estimate` (bytes by component for a
//! workload and engine) → `budget` (what fits on a card) → `diagnosis` (verdict and remedies) →
//! `report` (one value, rendered as text, JSON or Markdown). The `llm-oom` binary only parses flags
//! and prints.

pub mod budget;
pub mod cards;
pub mod diagnose;
pub mod diagnosis;
pub mod dtype;
pub mod error;
pub mod estimate;
pub mod explain;
pub mod logparse;
pub mod meter;
pub mod model;
pub mod plan;
pub mod probe;
pub mod report;
pub mod runtime;
pub mod units;
pub mod watch;

pub use error::{Error, InputError, Result};

// The lib's own unit tests run with the counting allocator, as the binary does (the meters
// themselves are tested in tests/meters.rs, where nothing else allocates meanwhile).
#[cfg(test)]
#[global_allocator]
static ALLOC: meter::host::CountingAlloc = meter::host::CountingAlloc;
