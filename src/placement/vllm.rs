//! vLLM's tensor and pipeline parallelism (`--tensor-parallel-size`, `--pipeline-parallel-size`,
//! on Ray across nodes), rank by rank, as each vLLM worker builds its part of the model:
//! - **tensor parallel** (`vllm/model_executor/layers/linear.py`): column-parallel linears (q, k,
//!   v, gate, up, the experts' w13) keep 1/TP of their output rows, row-parallel ones (o, down,
//!   w2) 1/TP of their input columns; norms and routers are replicated;
//! - **KV heads** (`QKVParallelLinear`): `max(1, kv_heads / TP)` per rank; with TP > kv_heads each
//!   KV head is replicated on `TP / kv_heads` ranks (vLLM asserts the division is exact). An MLA
//!   model's latent (`kv_a_proj_with_mqa`, `q_a_proj`) is replicated and so is its cache;
//! - **vocab-parallel** embedding and `lm_head` (`vocab_parallel_embedding.py`): the vocabulary is
//!   padded to a multiple of 64 (`DEFAULT_VOCAB_PADDING_SIZE`, `pad_vocab_size`), then divided by
//!   TP (`divide`, exact); the logits are gathered whole on every rank of the last stage;
//! - **pipeline parallel** (`vllm/distributed/utils.py`, `get_pp_indices`): `layers // PP` per
//!   stage, the remainder one each to the stages from the second-last backwards; the first stage
//!   holds `embed_tokens`, the last the final norm and `lm_head` (and, tied, its own
//!   `embed_tokens`); ranks are numbered `stage × TP + tp_rank`, so a TP group is consecutive GPUs;
//! - **per rank** vLLM may use `gpu_memory_utilization` (0.90) of the card: the rest is margin.

use serde::Serialize;

use crate::dtype::{KvDtype, WeightDtype};
use crate::error::InputError;
use crate::estimate::weights::group_bytes;
use crate::estimate::{
    estimate, kv_bytes_in, safety_margin, CachePolicy, Engine, KvLayout, Profile, Workload,
};
use crate::model::layout::KvRow;
use crate::model::{Role, Spec, TensorGroup};
use crate::request::ParallelRequest;
use crate::units::{group, Bytes, MIB};

use super::accelerate::Place;
use super::{parts_and_tower, DeviceShare, Placement};

/// vLLM's `DEFAULT_VOCAB_PADDING_SIZE`.
pub const VOCAB_PADDING: u64 = 64;

/// What NCCL's communicator and vLLM's custom all-reduce buffers take on each rank, per process
/// group of more than one rank (the TP group, the PP group). The figure is vLLM's own
/// measurement (PR #10511, 2024-12-13): Llama-3-8B on an H100 80GB, `non_torch_memory` 1.79 GiB
/// per rank at TP 1 and 3.58 GiB at TP 2. An NVLink-SHARP node allocates this much; PCIe cards
/// allocate less, so a plan errs on the safe side. Not measured by llm-oom.
pub const NCCL_PER_GROUP: u64 = 1833 * MIB;

/// The largest tensor- or pipeline-parallel size llm-oom plans (64 GPUs in all).
pub const MAX_RANKS: u64 = 64;

/// How vLLM is asked to spread the model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Parallel {
    pub tensor: u64,
    pub pipeline: u64,
    pub nodes: u64,
    pub gpus_per_node: u64,
    pub gpu_memory_utilization: f64,
}

impl Parallel {
    pub fn ranks(&self) -> u64 {
        self.tensor.saturating_mul(self.pipeline)
    }

    /// The flags, as `vllm serve` takes them.
    pub fn flags(&self) -> String {
        let mut f = format!("--tensor-parallel-size {}", self.tensor);
        if self.pipeline > 1 {
            f.push_str(&format!(" --pipeline-parallel-size {}", self.pipeline));
        }
        let default = Profile::of(Engine::Vllm).memory_fraction;
        if (self.gpu_memory_utilization - default).abs() > 1e-9 {
            f.push_str(&format!(
                " --gpu-memory-utilization {:.2}",
                self.gpu_memory_utilization
            ));
        }
        f
    }
}

/// Which worker a GPU is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rank {
    pub rank: u64,
    pub tp_rank: u64,
    pub pp_stage: u64,
    pub node: u64,
    pub local_gpu: u64,
    /// How many nodes the layout spans (labels name the node only when more than one).
    #[serde(skip)]
    pub nodes: u64,
}

/// What a placement over vLLM ranks reports beside the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParallelFacts {
    pub tensor_parallel_size: u64,
    pub pipeline_parallel_size: u64,
    pub nodes: u64,
    pub gpus_per_node: u64,
    pub gpu_memory_utilization: f64,
    pub kv_heads_per_rank: u64,
    /// Ranks that hold a copy of each KV head (1 unless TP > kv_heads).
    pub kv_head_replicas: u64,
    pub vocab_padded: u64,
    pub vocab_per_rank: u64,
    pub layers_per_stage: Vec<u64>,
    /// The longest `--max-model-len` every rank has KV-cache room for (vLLM refuses to start
    /// when one sequence of it does not fit); at most the model's context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
}

/// `pad_vocab_size`: up to the next multiple of 64.
pub fn pad_vocab(vocab: u64) -> u64 {
    vocab.div_ceil(VOCAB_PADDING).saturating_mul(VOCAB_PADDING)
}

/// KV heads on each rank and how many ranks hold each (`QKVParallelLinear`).
pub fn kv_heads_per_rank(kv_heads: u64, tp: u64) -> (u64, u64) {
    let tp = tp.max(1);
    if kv_heads == 0 {
        return (0, 1);
    }
    if tp >= kv_heads {
        (1, tp / kv_heads)
    } else {
        (kv_heads / tp, 1)
    }
}

/// Layers per pipeline stage, as `get_pp_indices` splits them.
pub fn pp_partition(layers: u64, stages: u64) -> Vec<u64> {
    let stages = stages.clamp(1, MAX_RANKS) as usize;
    let mut parts = vec![layers / stages as u64; stages];
    let rest = (layers % stages as u64) as usize;
    // `for i in range(2, remaining_layers + 2): partitions[-i] += 1`
    for i in 2..rest + 2 {
        if let Some(p) = parts.get_mut(stages.wrapping_sub(i)) {
            *p += 1;
        }
    }
    parts
}

/// `get_pp_indices(num_hidden_layers, pp_rank, pp_size)`: the stage's `[start, end)`.
pub fn pp_indices(layers: u64, stage: u64, stages: u64) -> (u64, u64) {
    let parts = pp_partition(layers, stages);
    let start: u64 = parts.iter().take(stage as usize).sum();
    (
        start,
        start + parts.get(stage as usize).copied().unwrap_or(0),
    )
}

/// Multi-head latent attention: its latent projections and cache are replicated.
pub fn is_mla(spec: &Spec) -> bool {
    spec.attention_groups()
        .iter()
        .any(|g| matches!(g.row, KvRow::Latent { .. }))
}

/// `rows` of K or V heads as one rank keeps them: its heads' share, else 1/TP.
fn kv_rows(spec: &Spec, rows: u64, tp: u64) -> u64 {
    let kv = spec.num_kv_heads;
    let (per_rank, _) = kv_heads_per_rank(kv, tp);
    if kv > 0 && rows % kv == 0 {
        rows / kv * per_rank
    } else {
        rows.div_ceil(tp)
    }
}

/// One tensor group as each tensor-parallel rank holds it.
pub fn shard(spec: &Spec, t: &TensorGroup, tp: u64) -> TensorGroup {
    let tp = tp.max(1);
    let mla = is_mla(spec);
    let mut s = *t;
    match t.role {
        Role::Embedding | Role::LmHead => s.rows = pad_vocab(t.rows) / tp,
        // MLA's q_a_proj and kv_a_proj_with_mqa are ReplicatedLinear
        Role::AttnQ | Role::AttnK if mla && t.rows != spec.q_dim() => {}
        Role::AttnK | Role::AttnV if !mla => s.rows = kv_rows(spec, t.rows, tp),
        Role::AttnQ | Role::AttnK | Role::AttnV | Role::MlpGate | Role::MlpUp | Role::Conv => {
            s.rows = t.rows.div_ceil(tp)
        }
        Role::AttnO | Role::MlpDown => s.cols = t.cols.div_ceil(tp),
        // in_proj / dt_proj are column-, x_proj / out_proj row-parallel: the wide side is split
        Role::Mixer if t.rows >= t.cols => s.rows = t.rows.div_ceil(tp),
        Role::Mixer => s.cols = t.cols.div_ceil(tp),
        // vLLM's vision encoders build each encoder layer's attention and MLP from
        // QKVParallelLinear / ColumnParallelLinear / RowParallelLinear (models/siglip.py; the
        // default `mm_encoder_tp_mode` "weights"): a matrix repeated per encoder layer is split;
        // the patch and position embeddings, norms, biases and the projector (Gemma-3's is a
        // plain Parameter) are counted whole on every rank.
        Role::Vision
            if t.rows > 1
                && t.cols > 1
                && spec.vision_layers > 0
                && t.count % spec.vision_layers == 0 =>
        {
            s.rows = t.rows.div_ceil(tp)
        }
        Role::Router | Role::Vector | Role::Vision => {}
    }
    s
}

/// The model as one tensor-parallel rank runs it: heads, KV heads, MLP and expert widths and
/// recurrent state divided; `logits`: whether this rank's stage computes them.
pub fn rank_spec(spec: &Spec, tp: u64, logits: bool) -> Spec {
    let tp = tp.max(1);
    let mut s = spec.clone();
    s.num_heads = spec.num_heads.div_ceil(tp);
    s.num_kv_heads = kv_heads_per_rank(spec.num_kv_heads, tp).0;
    s.intermediate_size = spec.intermediate_size.div_ceil(tp);
    if let Some(e) = s.experts.as_mut() {
        e.intermediate_size = e.intermediate_size.div_ceil(tp);
        e.shared_intermediate_size = e.shared_intermediate_size.div_ceil(tp);
    }
    if !logits {
        s.vocab_size = 0;
    }
    s.checkpoint = None;
    if let Some(l) = s.layout.as_mut() {
        for g in &mut l.attention {
            if let KvRow::Heads { k, v } = g.row {
                g.row = KvRow::Heads {
                    k: kv_rows(spec, k, tp),
                    v: kv_rows(spec, v, tp),
                };
            }
        }
        for g in &mut l.state {
            g.conv_channels = g.conv_channels.div_ceil(tp);
            g.ssm = g.ssm.div_ceil(tp);
        }
        l.tensors = l.tensors.iter().map(|t| shard(spec, t, tp)).collect();
    }
    s
}

/// vLLM's own refusals for a layout, as one line each: heads, KV heads and the padded vocabulary
/// must divide by TP; a stage needs a layer.
pub fn check(spec: &Spec, p: &Parallel) -> Result<(), InputError> {
    let tp = p.tensor;
    let refuse = |why: String| Err(InputError::Usage(why));
    if spec.num_heads > 0 && spec.num_heads % tp != 0 {
        return refuse(format!(
            "--tensor-parallel-size {tp}: vLLM refuses it (\"Total number of attention heads ({}) \
             must be divisible by tensor parallel size ({tp})\"); use a divisor of {}",
            spec.num_heads, spec.num_heads
        ));
    }
    let kv = spec.num_kv_heads;
    let kv_splits = kv == 0 || is_mla(spec) || if tp >= kv { tp % kv == 0 } else { kv % tp == 0 };
    if !kv_splits {
        return refuse(format!(
            "--tensor-parallel-size {tp}: vLLM cannot split {kv} KV heads over {tp} ranks \
             (QKVParallelLinear divides one by the other); use a size that divides {kv} or that {kv} divides"
        ));
    }
    let padded = pad_vocab(spec.vocab_size);
    if padded % tp != 0 {
        return refuse(format!(
            "--tensor-parallel-size {tp}: the vocabulary padded to {} does not divide by {tp} \
             (vLLM's VocabParallelEmbedding asserts it); use a power of two",
            group(padded)
        ));
    }
    if p.pipeline > spec.num_layers {
        return refuse(format!(
            "--pipeline-parallel-size {}: more stages than the model's {} layers",
            p.pipeline, spec.num_layers
        ));
    }
    Ok(())
}

/// What one rank holds, before the table's arithmetic.
struct Held {
    layers: u64,
    weights: u64,
    holds: Vec<String>,
}

/// The weights of pipeline stage `stage` on one of its TP ranks.
fn held(spec: &Spec, dtype: WeightDtype, p: &Parallel, stage: u64) -> Held {
    let tp = p.tensor;
    let (per, tower) = parts_and_tower(spec, |t| group_bytes(spec, &shard(spec, t, tp), dtype));
    let (start, end) = pp_indices(spec.num_layers, stage, p.pipeline);
    let layers = end - start;
    let mut weights = layers.saturating_mul(per.layer);
    let mut holds = Vec::new();
    if layers > 0 {
        holds.push(format!("layers {start}–{}", end.saturating_sub(1)));
    }
    // Every pipeline stage builds the vision tower (gemma3_mm.py and its kin construct
    // `vision_tower` whatever the stage; only the language model's layers are PPMissingLayer).
    if tower > 0 {
        holds.push("vision tower".to_string());
        weights = weights.saturating_add(tower);
    }
    let share = if tp > 1 {
        format!(" 1/{tp}")
    } else {
        String::new()
    };
    let (first, last) = (stage == 0, stage + 1 == p.pipeline);
    if first || (last && spec.tie_word_embeddings) {
        holds.push(format!("embed_tokens{share}"));
        weights = weights.saturating_add(per.embed);
    }
    if last {
        holds.push(format!("final norm, lm_head{share}"));
        weights = weights.saturating_add(per.norm);
        // a tied head is the embedding tensor, counted above
        if !spec.tie_word_embeddings {
            weights = weights.saturating_add(per.head);
        }
    }
    Held {
        layers,
        weights,
        holds,
    }
}

/// The KV cache of the workload on one rank of `stage`: its heads' share of every layer's rows
/// (replicated heads and MLA latents whole), for its stage's share of the layers.
fn rank_kv(spec: &Spec, w: &Workload, p: &Parallel, layers: u64) -> u64 {
    let rank = rank_spec(spec, p.tensor, true);
    let tokens = match Profile::of(Engine::Vllm).kv_layout {
        KvLayout::Paged { block } => w
            .total_tokens()
            .div_ceil(block.max(1))
            .saturating_mul(block),
        _ => w.total_tokens(),
    };
    let all = kv_bytes_in(
        &rank,
        w.kv_dtype,
        tokens,
        w.batch,
        CachePolicy::of(Engine::Vllm),
    );
    share_of_layers(all, layers, spec.num_layers)
}

fn share_of_layers(bytes: u64, layers: u64, total: u64) -> u64 {
    (u128::from(bytes) * u128::from(layers) / u128::from(total.max(1))) as u64
}

/// The runtime of one rank: CUDA context and graphs (the vLLM profile's figure), plus NCCL's
/// buffers for each process group of more than one rank.
fn rank_runtime(p: &Parallel) -> u64 {
    let groups = u64::from(p.tensor > 1) + u64::from(p.pipeline > 1);
    Profile::of(Engine::Vllm)
        .runtime_overhead
        .saturating_add(groups.saturating_mul(NCCL_PER_GROUP))
}

/// One rank's activations: the workload's on the rank's widths, the logits only on the last
/// stage, and on every later stage the hidden states and residual it receives
/// (`IntermediateTensors` of `max_num_batched_tokens` rows).
fn rank_activations(spec: &Spec, w: &Workload, p: &Parallel, stage: u64, capacity: u64) -> u64 {
    let last = stage + 1 == p.pipeline;
    let acts = estimate(&rank_spec(spec, p.tensor, last), w, capacity).activations;
    if stage == 0 {
        return acts;
    }
    let rows = Profile::of(Engine::Vllm).prefill_chunk.unwrap_or(8192);
    let width = w
        .weight_dtype
        .compute_kv_dtype()
        .elem_bytes()
        .of(spec.hidden_size);
    acts.saturating_add(rows.saturating_mul(width).saturating_mul(2))
}

/// Each rank's table for vLLM over `gpus` (one per rank, in rank order) with layout `p`.
pub fn plan_parallel(spec: &Spec, w: &Workload, gpus: &[u64], p: &Parallel) -> Placement {
    let mut devices = Vec::new();
    let kv_layers: Vec<u64> = pp_partition(spec.num_layers, p.pipeline);
    for stage in 0..p.pipeline {
        let h = held(spec, w.weight_dtype, p, stage);
        let kv = rank_kv(spec, w, p, h.layers);
        for tp_rank in 0..p.tensor {
            let rank = stage * p.tensor + tp_rank;
            let capacity = gpus.get(rank as usize).copied().unwrap_or(0);
            devices.push(row(
                spec,
                w,
                p,
                Slot {
                    rank,
                    tp_rank,
                    stage,
                    capacity,
                },
                &h,
                kv,
            ));
        }
    }
    let runs_out = devices.iter().find(|s| s.free_bytes < 0).map(|s| s.device);
    let facts = facts(spec, w, p, &devices, kv_layers);
    let notes = notes(spec, p, &devices, &facts);
    let mut load_with = p.flags();
    // vLLM will not start with the default (the model's context) when it does not fit
    if let Some(len) = facts
        .max_model_len
        .filter(|&l| l > 0 && Some(l) < spec.max_position_embeddings)
    {
        load_with.push_str(&format!(" --max-model-len {len}"));
    }
    Placement {
        engine: "vllm",
        strategy: None,
        layers_total: spec.num_layers,
        layers_on_gpus: spec.num_layers,
        host_weights_bytes: 0,
        disk_weights_bytes: 0,
        devices,
        runs_out,
        load_with,
        refused: None,
        fix: None,
        parallel: Some(facts),
        notes,
    }
}

#[derive(Clone, Copy)]
struct Slot {
    rank: u64,
    tp_rank: u64,
    stage: u64,
    capacity: u64,
}

fn row(spec: &Spec, w: &Workload, p: &Parallel, at: Slot, h: &Held, kv: u64) -> DeviceShare {
    let cap = at.capacity;
    let usable = (cap as f64 * p.gpu_memory_utilization) as u64;
    let acts = rank_activations(spec, w, p, at.stage, cap);
    let runtime = rank_runtime(p);
    let margin = cap
        .saturating_sub(usable)
        .saturating_add(safety_margin(cap));
    let need = [h.weights, kv, acts, runtime, margin]
        .iter()
        .fold(0u64, |a, b| a.saturating_add(*b));
    let free = i64::try_from(cap)
        .unwrap_or(i64::MAX)
        .saturating_sub(i64::try_from(need).unwrap_or(i64::MAX));
    let gpn = p.gpus_per_node.max(1);
    DeviceShare {
        device: Place::Gpu(u32::try_from(at.rank).unwrap_or(u32::MAX)),
        capacity_bytes: cap,
        max_memory_bytes: usable,
        layers: h.layers,
        weights_bytes: h.weights,
        kv_cache_bytes: kv,
        activations_bytes: acts,
        runtime_bytes: runtime,
        margin_bytes: margin,
        free_bytes: free,
        holds: h.holds.clone(),
        rank: Some(Rank {
            rank: at.rank,
            tp_rank: at.tp_rank,
            pp_stage: at.stage,
            node: at.rank / gpn,
            local_gpu: at.rank % gpn,
            nodes: p.nodes,
        }),
    }
}

fn facts(
    spec: &Spec,
    w: &Workload,
    p: &Parallel,
    devices: &[DeviceShare],
    layers_per_stage: Vec<u64>,
) -> ParallelFacts {
    let (kv_heads_per_rank, kv_head_replicas) = kv_heads_per_rank(spec.num_kv_heads, p.tensor);
    let padded = pad_vocab(spec.vocab_size);
    ParallelFacts {
        tensor_parallel_size: p.tensor,
        pipeline_parallel_size: p.pipeline,
        nodes: p.nodes,
        gpus_per_node: p.gpus_per_node,
        gpu_memory_utilization: p.gpu_memory_utilization,
        kv_heads_per_rank,
        kv_head_replicas,
        vocab_padded: padded,
        vocab_per_rank: padded / p.tensor.max(1),
        layers_per_stage,
        max_model_len: max_model_len(spec, w, p, devices),
    }
}

/// The longest context one sequence can have on every rank within what vLLM leaves for its KV
/// cache (`gpu_memory_utilization` × the card, less weights, activations and runtime); at most
/// the model's context, `None` when the model states none.
fn max_model_len(spec: &Spec, w: &Workload, p: &Parallel, devices: &[DeviceShare]) -> Option<u64> {
    let ctx = spec.max_position_embeddings?;
    let mut best = ctx;
    for d in devices {
        let room = d
            .max_memory_bytes
            .saturating_sub(d.weights_bytes)
            .saturating_sub(d.activations_bytes)
            .saturating_sub(d.runtime_bytes);
        let one = |t: u64| {
            rank_kv(
                spec,
                &Workload {
                    prompt_tokens: t,
                    max_new_tokens: 0,
                    batch: 1,
                    ..*w
                },
                p,
                d.layers,
            )
        };
        if one(best) <= room {
            continue;
        }
        // the largest t with one(t) ≤ room, by bisection (the cache grows with t)
        let (mut lo, mut hi) = (0u64, best);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if one(mid) <= room {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        best = lo;
    }
    Some(best)
}

fn notes(spec: &Spec, p: &Parallel, devices: &[DeviceShare], f: &ParallelFacts) -> Vec<String> {
    let mut n = Vec::new();
    if f.kv_head_replicas > 1 {
        n.push(format!(
            "TP {} > {} KV heads: each rank keeps 1 KV head, every head replicated on {} ranks — the \
             KV cache per rank is 1/{} of the model's, not 1/{}",
            p.tensor, spec.num_kv_heads, f.kv_head_replicas, spec.num_kv_heads, p.tensor
        ));
    }
    if is_mla(spec) && p.tensor > 1 {
        n.push("MLA: the latent KV cache is not split by TP — every rank holds all of it".into());
    }
    if p.pipeline > 1 {
        let stages: Vec<String> = f.layers_per_stage.iter().map(u64::to_string).collect();
        n.push(format!(
            "pipeline stages hold {} layers (vLLM's get_pp_indices; VLLM_PP_LAYER_PARTITION overrides it)",
            stages.join(" / ")
        ));
    }
    if p.nodes > 1 {
        n.push(if p.tensor > p.gpus_per_node {
            format!(
                "the TP group of {} spans nodes of {} GPUs: every layer's all-reduce crosses the \
                 network; vLLM recommends TP within a node and PP across nodes \
                 (--tensor-parallel-size {} --pipeline-parallel-size {})",
                p.tensor, p.gpus_per_node, p.gpus_per_node, p.nodes
            )
        } else {
            format!(
                "{} nodes × {} GPUs on Ray: TP within a node, PP across nodes, as vLLM recommends",
                p.nodes, p.gpus_per_node
            )
        });
    }
    if let (Some(len), Some(ctx)) = (f.max_model_len, spec.max_position_embeddings) {
        // 0: not even the weights fit, which the table says
        if len > 0 && len < ctx {
            let tight = devices
                .iter()
                .min_by_key(|d| d.max_memory_bytes.saturating_sub(d.weights_bytes))
                .map_or_else(String::new, DeviceShare::label);
            n.push(format!(
                "vLLM checks at start that one sequence of --max-model-len fits each rank's KV \
                 cache: the default, the model's {} tokens, does not ({tight} is the tightest); \
                 start with --max-model-len {} or less",
                group(ctx),
                group(len)
            ));
        }
    }
    n.push(format!(
        "per rank: margin is the {:.0} % gpu_memory_utilization leaves plus llm-oom's safety \
         margin; runtime is the CUDA context and graphs ({}) plus {} of NCCL buffers per process \
         group of more than one rank (vLLM's measurement on an H100, PR #10511)",
        (1.0 - p.gpu_memory_utilization) * 100.0,
        Bytes(Profile::of(Engine::Vllm).runtime_overhead),
        Bytes(NCCL_PER_GROUP)
    ));
    n
}

/// vLLM's layout from the flags and the GPUs `--vram` names (`listed`, empty for one card of
/// `card` bytes): the layout, one capacity per rank in rank order, and what was assumed.
/// Without `--nodes`, TP × PP GPUs of one node; several GPUs named and no size asked: TP over
/// all of them (vLLM itself would use one). With `--nodes N --gpus-per-node M`: TP defaults to
/// M and PP to N — TP within a node, PP across nodes, vLLM's recommendation.
pub fn resolve(
    ask: &ParallelRequest,
    listed: &[u64],
    card: u64,
) -> Result<(Parallel, Vec<u64>, Vec<String>), InputError> {
    let bound = |what: &str, v: u64| {
        if v == 0 || v > MAX_RANKS {
            Err(InputError::Usage(format!(
                "{what} {v}: write 1 to {MAX_RANKS}"
            )))
        } else {
            Ok(v)
        }
    };
    let mut notes = Vec::new();
    let (tp, pp, nodes, gpn, gpus) = match (ask.nodes, ask.gpus_per_node) {
        (Some(n), Some(g)) => {
            let (n, g) = (bound("--nodes", n)?, bound("--gpus-per-node", g)?);
            let node: Vec<u64> = match listed.len() {
                0 | 1 => vec![card; g as usize],
                l if l as u64 == g => listed.to_vec(),
                l => {
                    return Err(InputError::Usage(format!(
                        "--nodes {n} --gpus-per-node {g}: --vram names {l} GPUs; give one size \
                         (every GPU) or {g} (one node's GPUs)"
                    )))
                }
            };
            let all: Vec<u64> = node
                .iter()
                .copied()
                .cycle()
                .take((n * g) as usize)
                .collect();
            (
                ask.tensor.unwrap_or(g),
                ask.pipeline.unwrap_or(n),
                n,
                g,
                all,
            )
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(InputError::Usage(
                "--nodes and --gpus-per-node go together, like --nodes 2 --gpus-per-node 8".into(),
            ))
        }
        (None, None) => {
            let (tp, pp) = match (ask.tensor, ask.pipeline, listed.len() as u64) {
                (None, None, l) if l > 1 => {
                    notes.push(format!(
                        "vLLM uses one GPU unless told: planned with --tensor-parallel-size {l}, \
                         one rank per GPU named"
                    ));
                    (l, 1)
                }
                (t, p, _) => (t.unwrap_or(1), p.unwrap_or(1)),
            };
            let need = bound("--tensor-parallel-size", tp)?
                .saturating_mul(bound("--pipeline-parallel-size", pp)?);
            let all = if listed.len() > 1 {
                listed.to_vec()
            } else {
                vec![card; need.min(MAX_RANKS) as usize]
            };
            (tp, pp, 1, all.len() as u64, all)
        }
    };
    let (tp, pp) = (
        bound("--tensor-parallel-size", tp)?,
        bound("--pipeline-parallel-size", pp)?,
    );
    let need = tp.saturating_mul(pp);
    if need > MAX_RANKS {
        return Err(InputError::Usage(format!(
            "--tensor-parallel-size {tp} × --pipeline-parallel-size {pp} is {need} GPUs; llm-oom \
             plans at most {MAX_RANKS}"
        )));
    }
    if need > gpus.len() as u64 {
        return Err(InputError::Usage(format!(
            "--tensor-parallel-size {tp} × --pipeline-parallel-size {pp} needs {need} GPUs; {} \
             are given — name more with --vram (4x80GiB) or --nodes/--gpus-per-node",
            gpus.len()
        )));
    }
    if need < gpus.len() as u64 {
        notes.push(format!(
            "vLLM uses {need} of the {} GPUs given (the first, in CUDA_VISIBLE_DEVICES order)",
            gpus.len()
        ));
    }
    let p = Parallel {
        tensor: tp,
        pipeline: pp,
        nodes,
        gpus_per_node: gpn,
        gpu_memory_utilization: Profile::of(Engine::Vllm).memory_fraction,
    };
    Ok((p, gpus.into_iter().take(need as usize).collect(), notes))
}

/// Layouts with more GPUs of the same card than `from`, smallest first: TP doubled up to a node
/// of `from.gpus_per_node` (at least 8) GPUs, then one more pipeline stage at a time on nodes
/// of that size; only those vLLM accepts for `spec`.
pub fn larger_layouts(spec: &Spec, from: &Parallel) -> Vec<Parallel> {
    let node = from.gpus_per_node.max(8);
    let with = |tensor: u64, pipeline: u64| {
        let ranks = tensor * pipeline;
        Parallel {
            tensor,
            pipeline,
            nodes: ranks.div_ceil(node),
            gpus_per_node: ranks.min(node),
            ..*from
        }
    };
    let ok = |p: &Parallel| check(spec, p).is_ok();
    let mut out: Vec<Parallel> = std::iter::successors(Some(from.tensor * 2), |t| Some(t * 2))
        .take_while(|&t| t <= node)
        .map(|t| with(t, from.pipeline))
        .filter(ok)
        .collect();
    let widest = out.last().map_or(from.tensor, |p| p.tensor);
    out.extend(
        (from.pipeline + 1..=MAX_RANKS / widest.max(1))
            .map(|pp| with(widest, pp))
            .filter(ok),
    );
    out
}

/// What makes every rank fit when one runs out: the same layout at
/// `--gpu-memory-utilization 0.95`, then the KV cache in fp8, then the smallest larger layout of
/// the same card; its flags and the placement it gives.
pub fn fitting(spec: &Spec, w: &Workload, gpus: &[u64], p: &Parallel) -> Option<Placement> {
    let card = gpus.iter().copied().min().unwrap_or(0);
    let raised = Parallel {
        gpu_memory_utilization: 0.95,
        ..*p
    };
    if let Some(fit) = Some(plan_parallel(spec, w, gpus, &raised)).filter(|x| x.runs_out.is_none())
    {
        return Some(fit);
    }
    if w.kv_dtype.elem_bytes().as_f64() > 1.0 {
        let fp8 = Workload {
            kv_dtype: KvDtype::Fp8,
            ..*w
        };
        let mut x = plan_parallel(spec, &fp8, gpus, p);
        if x.runs_out.is_none() {
            x.load_with.push_str(" --kv-cache-dtype fp8");
            return Some(x);
        }
    }
    larger_layouts(spec, p).into_iter().find_map(|l| {
        let more = vec![card; l.ranks() as usize];
        Some(plan_parallel(spec, w, &more, &l)).filter(|x| x.runs_out.is_none())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str) -> Spec {
        crate::model::presets::from_file(id)
    }

    fn layout(tp: u64, pp: u64) -> Parallel {
        Parallel {
            tensor: tp,
            pipeline: pp,
            nodes: 1,
            gpus_per_node: tp * pp,
            gpu_memory_utilization: 0.9,
        }
    }

    /// Gemma-3-27B's SigLIP under vLLM: at TP 2 each rank holds half of every encoder layer's
    /// matrices and the rest (embeddings, norms, biases, projector) whole; at PP 2 both stages
    /// build the whole tower beside their layers.
    #[test]
    fn the_vision_tower_is_split_by_tp_and_built_on_every_stage() {
        let g = spec("gemma-3-27b-it");
        assert_eq!(g.vision_layers, 27);
        let bytes = |tp: u64| -> u64 {
            g.vision
                .iter()
                .map(|t| group_bytes(&g, &shard(&g, t, tp), WeightDtype::Bf16))
                .sum()
        };
        let per_layer: u64 = g
            .vision
            .iter()
            .filter(|t| t.rows > 1 && t.cols > 1 && t.count % 27 == 0)
            .map(|t| group_bytes(&g, t, WeightDtype::Bf16))
            .sum();
        // 27 layers of q, k, v, o (1,152²) and fc1, fc2 (4,304 × 1,152), bf16
        assert_eq!(per_layer, 27 * (4 * 1152 * 1152 + 2 * 4304 * 1152) * 2);
        assert_eq!(bytes(1) - bytes(2), per_layer / 2);
        let pp = layout(1, 2);
        let (a, b) = (
            held(&g, WeightDtype::Bf16, &pp, 0),
            held(&g, WeightDtype::Bf16, &pp, 1),
        );
        for h in [&a, &b] {
            assert!(h.holds.iter().any(|x| x == "vision tower"), "{:?}", h.holds);
        }
        let whole = held(&g, WeightDtype::Bf16, &layout(1, 1), 0);
        // the tied embedding is on both stages too (the last one's lm_head)
        let embed = parts_and_tower(&g, |t| group_bytes(&g, t, WeightDtype::Bf16))
            .0
            .embed;
        assert_eq!(a.weights + b.weights, whole.weights + bytes(1) + embed);
    }

    fn work(prompt: u64, batch: u64) -> Workload {
        Workload {
            llama: Default::default(),
            prompt_tokens: prompt,
            max_new_tokens: 256,
            batch,
            weight_dtype: WeightDtype::Bf16,
            kv_dtype: KvDtype::Bf16,
            engine: Engine::Vllm,
        }
    }

    #[test]
    fn pp_splits_the_remainder_from_the_second_last_stage_backwards() {
        // Llama-3.1-405B over 4 stages: the 2 left over go to stages 2 and 1
        assert_eq!(pp_partition(126, 4), vec![31, 32, 32, 31]);
        assert_eq!(pp_partition(80, 2), vec![40, 40]);
        assert_eq!(pp_partition(81, 2), vec![41, 40]);
        assert_eq!(pp_partition(32, 3), vec![11, 11, 10]);
        assert_eq!(pp_partition(10, 4), vec![2, 3, 3, 2]);
        assert_eq!(pp_indices(126, 1, 4), (31, 63));
        assert_eq!(pp_indices(126, 3, 4), (95, 126));
    }

    #[test]
    fn vocab_pads_to_64_then_divides_by_tp() {
        assert_eq!(pad_vocab(128_256), 128_256);
        assert_eq!(pad_vocab(32_000), 32_000);
        assert_eq!(pad_vocab(32_001), 32_064);
        assert_eq!(pad_vocab(151_655), 151_680);
        let s = spec("mixtral-8x7b-instruct-v0.1");
        let embed = s
            .tensors()
            .into_iter()
            .find(|t| t.role == Role::Embedding)
            .unwrap();
        assert_eq!(shard(&s, &embed, 2).rows, 16_000);
    }

    #[test]
    fn kv_heads_are_replicated_when_tp_passes_them() {
        assert_eq!(kv_heads_per_rank(8, 2), (4, 1));
        assert_eq!(kv_heads_per_rank(8, 8), (1, 1));
        assert_eq!(kv_heads_per_rank(8, 16), (1, 2));
        assert_eq!(kv_heads_per_rank(2, 8), (1, 4));
        // Llama-3.3-70B (8 KV heads): TP 16 keeps one head per rank, so the cache per rank
        // stays 1/8 of the whole, not 1/16
        let s = spec("llama-3.3-70b-instruct");
        let whole = rank_kv(&s, &work(4096, 1), &layout(1, 1), s.num_layers);
        let at8 = rank_kv(&s, &work(4096, 1), &layout(8, 1), s.num_layers);
        let at16 = rank_kv(&s, &work(4096, 1), &layout(16, 1), s.num_layers);
        assert_eq!(at8 * 8, whole);
        assert_eq!(at16, at8);
    }

    #[test]
    fn column_and_row_parallel_linears_keep_one_tp_th_and_norms_stay_whole() {
        let s = spec("llama-3.3-70b-instruct");
        for t in s.tensors() {
            let r = shard(&s, &t, 4);
            match t.role {
                Role::Vector => assert_eq!(r, t),
                Role::Embedding | Role::LmHead => assert_eq!(r.rows * 4, t.rows),
                _ => assert_eq!(r.params() * 4, t.params(), "{:?}", t.role),
            }
        }
    }

    #[test]
    fn mla_latents_are_replicated_and_so_is_their_cache() {
        let s = spec("deepseek-v2-lite");
        let kv_a = s
            .tensors()
            .into_iter()
            .find(|t| t.role == Role::AttnK)
            .unwrap();
        assert_eq!(shard(&s, &kv_a, 4), kv_a);
        let one = rank_kv(&s, &work(1024, 1), &layout(1, 1), s.num_layers);
        let four = rank_kv(&s, &work(1024, 1), &layout(4, 1), s.num_layers);
        assert_eq!(one, four);
    }

    #[test]
    fn the_stages_hold_the_embeddings_first_and_the_head_last() {
        let s = spec("llama-3.3-70b-instruct");
        let p = layout(2, 2);
        let first = held(&s, WeightDtype::Bf16, &p, 0);
        let last = held(&s, WeightDtype::Bf16, &p, 1);
        assert_eq!(first.holds, vec!["layers 0–39", "embed_tokens 1/2"]);
        assert_eq!(last.holds, vec!["layers 40–79", "final norm, lm_head 1/2"]);
        // the two stages' four ranks hold the whole model once (norms aside)
        let whole = crate::estimate::weight_bytes(&s, WeightDtype::Bf16);
        let sum = 2 * (first.weights + last.weights);
        let norms = 80 * 2 * 8192 * 2 + 8192 * 2;
        assert!(sum >= whole && sum - whole <= norms, "{sum} vs {whole}");
    }

    #[test]
    fn a_tied_model_holds_the_embedding_on_both_ends_of_the_pipeline() {
        let s = spec("qwen2.5-0.5b-instruct");
        let p = layout(1, 2);
        let first = held(&s, WeightDtype::Bf16, &p, 0);
        let last = held(&s, WeightDtype::Bf16, &p, 1);
        assert!(first.holds.iter().any(|h| h.starts_with("embed_tokens")));
        assert!(last.holds.iter().any(|h| h.starts_with("embed_tokens")));
        let one = held(&s, WeightDtype::Bf16, &layout(1, 1), 0);
        assert_eq!(one.holds.iter().filter(|h| h.contains("embed")).count(), 1);
    }

    #[test]
    fn vllm_refuses_what_does_not_divide() {
        let s = spec("llama-3.3-70b-instruct");
        assert!(check(&s, &layout(8, 1)).is_ok());
        assert!(check(&s, &layout(3, 1)).is_err());
        assert!(check(&s, &layout(1, 81)).is_err());
        // Qwen2.5-7B: 28 heads, 4 KV heads; TP 7 divides the heads but not the KV heads
        let q = spec("qwen2.5-7b-instruct");
        let e = check(&q, &layout(7, 1)).unwrap_err().to_string();
        assert!(e.contains("KV heads"), "{e}");
    }

    #[test]
    fn every_rank_is_priced_and_the_first_short_one_runs_out() {
        let s = spec("llama-3.3-70b-instruct");
        let p = layout(2, 1);
        let fits = plan_parallel(&s, &work(2048, 1), &[80 << 30; 2], &p);
        assert_eq!(fits.devices.len(), 2);
        assert_eq!(fits.runs_out, None);
        for d in &fits.devices {
            let parts = d.weights_bytes
                + d.kv_cache_bytes
                + d.activations_bytes
                + d.runtime_bytes
                + d.margin_bytes;
            assert_eq!(d.capacity_bytes as i64 - parts as i64, d.free_bytes);
            assert_eq!(d.runtime_bytes, (1 << 30) + NCCL_PER_GROUP);
        }
        // on 2 × 40 GiB the 65 GiB of weights per rank do not fit: rank 0 is named
        let short = plan_parallel(&s, &work(2048, 1), &[40 << 30; 2], &p);
        assert_eq!(short.runs_out, Some(Place::Gpu(0)));
    }

    #[test]
    fn later_stages_receive_hidden_states_and_only_the_last_computes_logits() {
        let s = spec("llama-3.3-70b-instruct");
        let p = layout(1, 3);
        let w = work(8192, 1);
        let a: Vec<u64> = (0..3)
            .map(|st| rank_activations(&s, &w, &p, st, 80 << 30))
            .collect();
        let received = 8192 * 8192 * 2 * 2;
        assert_eq!(a[1] - a[0], received);
        assert!(a[2] > a[1], "the last stage adds the logits");
    }

    #[test]
    fn max_model_len_is_what_the_tightest_rank_has_room_for() {
        let s = spec("llama-3.3-70b-instruct");
        let roomy = plan_parallel(&s, &work(2048, 1), &[80 << 30; 4], &layout(4, 1));
        assert_eq!(
            roomy.parallel.as_ref().unwrap().max_model_len,
            Some(131_072)
        );
        // TP 2 on two 80 GiB cards: 65 GiB of weights per rank leave a few GiB of cache, far
        // short of 131,072 tokens — vLLM asks for a smaller --max-model-len
        let tight = plan_parallel(&s, &work(2048, 1), &[80 << 30; 2], &layout(2, 1));
        let len = tight.parallel.as_ref().unwrap().max_model_len.unwrap();
        assert!(len < 131_072 && len > 2304, "{len}");
        assert!(tight.notes.iter().any(|n| n.contains("--max-model-len")));
        // one more token than that does not fit the tightest rank's room
        let d = &tight.devices[0];
        let room = d.max_memory_bytes - d.weights_bytes - d.activations_bytes - d.runtime_bytes;
        let one = |t| {
            rank_kv(
                &s,
                &Workload {
                    prompt_tokens: t,
                    max_new_tokens: 0,
                    ..work(1, 1)
                },
                &layout(2, 1),
                80,
            )
        };
        assert!(one(len) <= room && one(len + 16) > room);
    }

    #[test]
    fn the_flags_resolve_to_ranks_with_vllms_defaults() {
        let ask = |tp, pp, nodes, gpn| ParallelRequest {
            tensor: tp,
            pipeline: pp,
            nodes,
            gpus_per_node: gpn,
        };
        // several GPUs named, no size: TP over all of them, said in a note
        let (p, g, notes) =
            resolve(&ask(None, None, None, None), &[24 << 30; 2], 24 << 30).unwrap();
        assert_eq!((p.tensor, p.pipeline, g.len()), (2, 1, 2));
        assert!(notes[0].contains("one GPU unless told"));
        // one card and --tp 4: four of it
        let (p, g, _) = resolve(&ask(Some(4), None, None, None), &[], 80 << 30).unwrap();
        assert_eq!((p.tensor, g), (4, vec![80 << 30; 4]));
        // nodes: TP within the node, PP across nodes
        let (p, g, _) = resolve(&ask(None, None, Some(2), Some(8)), &[], 80 << 30).unwrap();
        assert_eq!((p.tensor, p.pipeline, p.nodes, g.len()), (8, 2, 2, 16));
        // too few GPUs, a lone --nodes, zero or too many: refused with what to write
        for bad in [
            resolve(&ask(Some(4), None, None, None), &[24 << 30; 2], 24 << 30),
            resolve(&ask(None, None, Some(2), None), &[], 80 << 30),
            resolve(&ask(Some(0), None, None, None), &[], 80 << 30),
            resolve(&ask(Some(64), Some(2), None, None), &[], 80 << 30),
            resolve(&ask(None, None, Some(2), Some(8)), &[80 << 30; 3], 80 << 30),
        ] {
            let e = bad.unwrap_err().to_string();
            assert!(!e.is_empty() && !e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn larger_layouts_double_tp_within_a_node_then_add_stages() {
        let s = spec("llama-3.3-70b-instruct");
        let one = layout(1, 1);
        let l: Vec<(u64, u64, u64)> = larger_layouts(&s, &one)
            .iter()
            .take(5)
            .map(|p| (p.tensor, p.pipeline, p.nodes))
            .collect();
        assert_eq!(
            l,
            vec![(2, 1, 1), (4, 1, 1), (8, 1, 1), (8, 2, 2), (8, 3, 3)]
        );
        // Qwen2.5-7B's 28 heads stop TP at 4
        let q = spec("qwen2.5-7b-instruct");
        let l = larger_layouts(&q, &one);
        assert!(l.iter().all(|p| p.tensor <= 4), "{l:?}");
    }

    #[test]
    fn a_rank_that_runs_out_is_fixed_by_the_cheapest_change_that_fits() {
        let s = spec("llama-3.3-70b-instruct");
        let w = work(2048, 1);
        // 70B bf16 over 2 × 48 GiB: 65 GiB a rank does not fit; 4 ranks do
        let gpus = [48 << 30; 2];
        let p = layout(2, 1);
        assert!(plan_parallel(&s, &w, &gpus, &p).runs_out.is_some());
        let fix = fitting(&s, &w, &gpus, &p).unwrap();
        assert!(
            fix.load_with.starts_with("--tensor-parallel-size 4"),
            "{}",
            fix.load_with
        );
        assert!(fix.runs_out.is_none());
        // a long batch on a layout whose weights fit: more utilization or an fp8 cache first
        let long = work(30_000, 16);
        let gpus = [80 << 30; 4];
        let p = layout(4, 1);
        assert!(plan_parallel(&s, &long, &gpus, &p).runs_out.is_some());
        let fix = fitting(&s, &long, &gpus, &p).unwrap();
        assert!(
            fix.load_with.contains("--gpu-memory-utilization 0.95")
                || fix.load_with.contains("--kv-cache-dtype fp8"),
            "{}",
            fix.load_with
        );
    }
}
