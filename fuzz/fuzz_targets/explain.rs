//! Any bytes, pasted as a log: explain may refuse them (empty, binary) but never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llm_oom::estimate::Engine;
use llm_oom::commands::explain::{explain, ExplainRequest};

fuzz_target!(|data: &[u8]| {
    let req = ExplainRequest { plan: None, engine: Engine::Transformers };
    let _ = explain(data, &req);
});
