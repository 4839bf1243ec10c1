//! Any bytes as a config.json: the reader refuses them or gives a `Spec`, and every estimate and
//! budget of that `Spec` runs without a panic or an overflow (debug assertions are on).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use llm_oom::budget::Planner;
use llm_oom::estimate::{Engine, Workload};
use llm_oom::model::config::parse_config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(spec) = parse_config(text, Path::new("config.json"), "fuzz") else {
        return;
    };
    for engine in Engine::ALL {
        let w = Workload {
            prompt_tokens: 2048,
            max_new_tokens: 256,
            batch: 4,
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
