//! The largest prompt the estimator allows, ignoring the model's context limit — what the
//! calibration harness brackets its binary search with.
//!
//! cargo run --example predict_limit -- <model> <batch> <new-tokens> <engine> <vram>

use llm_oom::budget::{largest, Planner};
use llm_oom::estimate::Workload;

fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let [model, batch, new, engine, vram] = a.as_slice() else {
        anyhow::bail!("usage: predict_limit <model> <batch> <new-tokens> <engine> <vram>");
    };
    let spec = llm_oom::model::resolve(model)?.spec;
    let weight_dtype = spec.native_dtype;
    let w = Workload {
        prompt_tokens: 1,
        max_new_tokens: new.parse()?,
        batch: batch.parse()?,
        weight_dtype,
        kv_dtype: weight_dtype.compute_kv_dtype(),
        engine: engine.parse()?,
        llama: Default::default(),
    };
    let vram: llm_oom::units::Bytes = vram.parse()?;
    let planner = Planner::new(&spec, vram.0);
    let p = largest(1, 1_000_000, |p| {
        planner.fits(&Workload {
            prompt_tokens: p,
            ..w
        })
    });
    println!("{}", p.unwrap_or(0));
    Ok(())
}
