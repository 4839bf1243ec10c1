//! `diagnose --engine candle --tensor-parallel-size N`: before the ranks start, the model is
//! checked against N (vLLM's refusals, the widths), and the figures the verdict and the budget
//! read become one rank's: its part of the model (`runtime::parallel::rank_spec`) and its weights
//! as `plan --engine vllm --tp N` prices them per rank.

use super::prepare::Prepared;
use super::DiagnoseRequest;
use crate::error::{InputError, Result};
use crate::estimate::Engine;
use crate::placement::vllm::{self, Parallel};
use crate::request::Device;
use crate::runtime::parallel::{check, rank_spec};
use crate::runtime::setup::{runtime_err, weight_source};
use crate::runtime::weights::WeightSource;

pub fn prepare(req: &DiagnoseRequest, prep: &mut Prepared) -> Result<()> {
    let n = req.ranks.len();
    let refuse = |why: &str| Err(InputError::Usage(why.to_string()).into());
    if req.engine != Engine::Candle {
        return refuse(
            "--tensor-parallel-size runs llm-oom's own tensor-parallel probe: add --engine candle",
        );
    }
    if req.quantize.is_some() {
        return refuse(
            "the tensor-parallel probe keeps its weights in the compute dtype; drop --quantize",
        );
    }
    if matches!(
        weight_source(&prep.source, req.random_weights)?,
        WeightSource::Gguf(_)
    ) {
        return refuse("the tensor-parallel probe reads safetensors checkpoints (or --random-weights), not GGUF files; pass the model's Hugging Face folder");
    }
    if !cfg!(feature = "nccl") && req.ranks.iter().any(|d| *d != Device::Cpu) {
        return refuse("tensor parallelism over GPUs runs over NCCL: this llm-oom was built without it; rebuild with `cargo build --release --features nccl` (needs libnccl.so.2, e.g. pip install nvidia-nccl-cu13)");
    }
    check(&prep.spec, n).map_err(runtime_err)?;
    let p = Parallel {
        tensor: n as u64,
        pipeline: 1,
        nodes: 1,
        gpus_per_node: n as u64,
        gpu_memory_utilization: 0.9,
    };
    let priced = vllm::plan_parallel(&prep.spec, &prep.workload, &vec![0; n], &p);
    let facts = priced.parallel.as_ref();
    prep.expected_weights = priced
        .devices
        .first()
        .map_or(prep.expected_weights, |d| d.weights_bytes);
    let (kv_each, replicas) = vllm::kv_heads_per_rank(prep.spec.num_kv_heads, n as u64);
    prep.notes.push(format!(
        "tensor parallel over {n} ranks, one probe process each: every rank holds 1/{n} of the {} heads, {kv_each} of the {} KV heads{}, 1/{n} of the MLP and {} rows of the vocabulary padded to {} (vLLM's rule, as `plan --engine vllm --tp {n}` prices it); the stages' figures, the verdict and the budget are one rank's, every rank's memory is in the per-rank table",
        prep.spec.num_heads,
        prep.spec.num_kv_heads,
        if replicas > 1 {
            format!(" (each replicated on {replicas} ranks)")
        } else {
            String::new()
        },
        crate::units::group(facts.map_or(0, |f| f.vocab_per_rank)),
        crate::units::group(facts.map_or(0, |f| f.vocab_padded)),
    ));
    prep.spec = rank_spec(&prep.spec, n);
    Ok(())
}
