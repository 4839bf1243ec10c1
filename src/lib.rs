//! llm-oom: why a local LLM runs out of GPU memory, and what to change.
//!
//! The layers, top to bottom (each uses only those below it; `docs/architecture.md` has the map):
//! `commands` (plan, explain, diagnose, watch, run: each a request → report function) →
//! `verdict` (the causes and every road to a verdict, remedies and their price) →
//! `probe` (the stages in a child process) → `runtime` (the candle decoder) and `meter` →
//! `budget` (what fits on a card) → `estimate` (bytes per engine) → `model` (the `Spec`) →
//! `logparse`, `request`, `dtype`, `units`, `exit`, `error`. `report` renders the commands'
//! reports; the `llm-oom` binary only parses flags, calls a command and prints.

pub mod budget;
pub mod cards;
pub mod commands;
pub mod dtype;
pub mod error;
pub mod estimate;
pub mod exit;
pub mod holes;
pub mod limits;
pub mod logparse;
pub mod meter;
pub mod model;
pub mod placement;
pub mod probe;
pub mod report;
pub mod request;
pub mod runtime;
pub mod scratch;
pub mod snapshot;
pub mod units;
pub mod verdict;

pub use error::{Error, InputError, Result};
pub use exit::ExitStatus;

// The lib's own unit tests run with the counting allocator, as the binary does (the meters
// themselves are tested in tests/meters.rs, where nothing else allocates meanwhile).
#[cfg(test)]
#[global_allocator]
static ALLOC: meter::host::CountingAlloc = meter::host::CountingAlloc;
