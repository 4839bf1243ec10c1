//! Any bytes as a GGUF file: the header reader refuses them or gives a `Spec`, and the estimate and
//! budget of that `Spec` run without a panic or an overflow (debug assertions are on).
#![no_main]

use std::io::Cursor;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use llm_oom::budget::Planner;
use llm_oom::estimate::{Engine, Workload};
use llm_oom::model::gguf::read_gguf_from;

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = read_gguf_from(&mut Cursor::new(data), Path::new("fuzz.gguf"), "fuzz") else {
        return;
    };
    for engine in [Engine::LlamaCpp, Engine::Transformers] {
        let w = Workload {
            prompt_tokens: 4096,
            max_new_tokens: 256,
            batch: 2,
            weight_dtype: spec.native_dtype,
            kv_dtype: spec.native_dtype.compute_kv_dtype(),
            engine,
            llama: Default::default(),
        };
        let p = Planner::new(&spec, 24 << 30);
        let e = p.estimate(&w);
        assert!(e.total >= e.weights);
        let _ = p.budget(&w);
    }
});
