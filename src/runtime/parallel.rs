//! Tensor parallelism in the runtime, the way vLLM shards a model over `--tensor-parallel-size N`
//! ranks (src/placement/vllm.rs prices the same rule):
//! - q, k, v and the MLP's (and every expert's) gate and up are column-parallel: rank `r` keeps
//!   its heads' rows (`heads / N` query heads; `kv_heads / N` KV heads, or with `N > kv_heads`
//!   the one KV head its query heads read, replicated on `N / kv_heads` ranks) and its `1 / N` of
//!   the intermediate rows;
//! - o and down are row-parallel: the same columns; their outputs are partial sums, added by an
//!   all-reduce ([`Communicator::all_reduce_sum`]) before the residual;
//! - the embedding and `lm_head` are vocab-parallel: the vocabulary padded to a multiple of 64,
//!   `1 / N` of its rows per rank; a token outside a rank's rows looks up zeros and the
//!   all-reduce adds the one rank that holds it; each rank's logits are placed in a zero row of
//!   the whole padded vocabulary and summed, so every rank ends with all the logits;
//! - norms, biases' shares, q/k norms and routers as vLLM keeps them (replicated, or cut with
//!   their rows).
//!
//! Each rank's KV cache holds its KV heads only (the cache is built from [`rank_spec`]).

use std::ops::Range;
use std::sync::{Arc, Barrier, Mutex};

use candle_core::{DType, Tensor};

use super::{Result, RuntimeError};
use crate::model::Spec;
use crate::placement::vllm::{self, Parallel};

/// One rank of a tensor-parallel world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rank {
    pub rank: usize,
    pub world: usize,
}

impl Rank {
    /// The `1 / world` of `0..full` this rank keeps (`full` divides exactly: see [`check`]).
    pub fn part(&self, full: usize) -> Range<usize> {
        let per = full / self.world.max(1);
        self.rank * per..(self.rank + 1) * per
    }
}

/// What the ranks of one world use to add their partial results.
pub trait Communicator {
    fn rank(&self) -> Rank;
    /// The element-wise sum of `t` over every rank; every rank calls it in the same order.
    fn all_reduce_sum(&self, t: &Tensor) -> candle_core::Result<Tensor>;
}

/// Refuse a world the model does not split into: vLLM's own refusals (heads, KV heads, the padded
/// vocabulary) and the MLP's and experts' widths, which must divide too.
pub fn check(spec: &Spec, world: usize) -> Result<()> {
    let p = Parallel {
        tensor: world as u64,
        pipeline: 1,
        nodes: 1,
        gpus_per_node: world as u64,
        gpu_memory_utilization: 0.9,
    };
    vllm::check(spec, &p).map_err(|e| RuntimeError::Parallel(e.to_string()))?;
    let w = world as u64;
    let widths = [
        ("intermediate_size", spec.intermediate_size),
        (
            "the experts' intermediate size",
            spec.experts.as_ref().map_or(0, |e| e.intermediate_size),
        ),
        (
            "the shared expert's intermediate size",
            spec.experts
                .as_ref()
                .map_or(0, |e| e.shared_intermediate_size),
        ),
    ];
    for (what, n) in widths {
        if n % w != 0 {
            return Err(RuntimeError::Parallel(format!(
                "--tensor-parallel-size {world}: {what} ({n}) does not divide by {world}; use a divisor of it"
            )));
        }
    }
    Ok(())
}

/// The model as one rank runs it: its heads, KV heads and widths (the vocabulary stays whole:
/// the prompt's ids and the logits are the model's).
pub fn rank_spec(spec: &Spec, world: usize) -> Spec {
    vllm::rank_spec(spec, world as u64, true)
}

/// Where rank `r`'s heads start: its first query head and its first KV head.
pub struct Heads {
    pub q: Range<usize>,
    pub kv: Range<usize>,
}

pub fn heads(spec: &Spec, r: Rank) -> Heads {
    let (h, kv) = (spec.num_heads as usize, spec.num_kv_heads as usize);
    let q = r.part(h);
    let kv = if r.world >= kv {
        // N / kv ranks share each KV head: the one their query heads read.
        let k = r.rank / (r.world / kv.max(1)).max(1);
        k..k + 1
    } else {
        r.part(kv)
    };
    Heads { q, kv }
}

/// The vocabulary rows rank `r` holds: `start..start + rows` of the padded vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VocabShard {
    pub start: usize,
    pub rows: usize,
    /// The model's vocabulary (the padded rows past it are zeros and never looked up).
    pub vocab: usize,
    pub padded: usize,
}

pub fn vocab_shard(spec: &Spec, r: Rank) -> VocabShard {
    let padded = vllm::pad_vocab(spec.vocab_size) as usize;
    let part = r.part(padded);
    VocabShard {
        start: part.start,
        rows: part.len(),
        vocab: spec.vocab_size as usize,
        padded,
    }
}

/// The embeddings of `ids` (flat, u32) from a rank's rows: ids outside them give zero rows, so the
/// sum over the ranks is the whole table's lookup.
pub fn embed_lookup(table: &Tensor, ids: &Tensor, v: VocabShard) -> candle_core::Result<Tensor> {
    let dev = ids.device();
    let n = ids.elem_count();
    let start = Tensor::new(v.start as u32, dev)?.broadcast_as(n)?;
    let end = Tensor::new((v.start + v.rows) as u32, dev)?.broadcast_as(n)?;
    let inside = (ids.ge(&start)? * ids.lt(&end)?)?;
    // outside ids become `start` first, so the subtraction never wraps
    let local = (inside.where_cond(ids, &start)? - &start)?;
    let rows = table.index_select(&local, 0)?;
    let keep = inside.to_dtype(rows.dtype())?.unsqueeze(1)?;
    rows.broadcast_mul(&keep)
}

/// A rank's logits (b, rows) placed in the whole padded vocabulary (b, padded), zeros elsewhere.
pub fn place_logits(local: &Tensor, v: VocabShard) -> candle_core::Result<Tensor> {
    let (b, rows) = local.dims2()?;
    let mut parts = Vec::with_capacity(3);
    if v.start > 0 {
        parts.push(Tensor::zeros((b, v.start), local.dtype(), local.device())?);
    }
    parts.push(local.clone());
    let after = v.padded.saturating_sub(v.start + rows);
    if after > 0 {
        parts.push(Tensor::zeros((b, after), local.dtype(), local.device())?);
    }
    Tensor::cat(&parts, 1)
}

/// How a checkpoint tensor is cut for one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Split {
    /// Replicated.
    Whole,
    /// These row ranges, concatenated (a fused qkv or gate_up keeps a range of each part).
    Rows(Vec<Range<usize>>),
    /// These columns (row-parallel o and down).
    Cols(Range<usize>),
    /// Vocab-parallel rows, zero past the vocabulary.
    Vocab(VocabShard),
}

impl Split {
    /// The shape a rank holds of a tensor of `full` shape.
    pub fn local_shape(&self, full: &[usize]) -> Vec<usize> {
        let mut s = full.to_vec();
        let (axis, len) = match self {
            Split::Whole => return s,
            Split::Rows(r) => (0, r.iter().map(Range::len).sum()),
            Split::Cols(c) => (1, c.len()),
            Split::Vocab(v) => (0, v.rows),
        };
        if let Some(d) = s.get_mut(axis) {
            *d = len;
        }
        s
    }

    /// This rank's part of a whole tensor.
    pub fn cut(&self, t: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Split::Whole => Ok(t.clone()),
            Split::Rows(r) => {
                let parts = r
                    .iter()
                    .map(|p| t.narrow(0, p.start, p.len()))
                    .collect::<candle_core::Result<Vec<_>>>()?;
                Tensor::cat(&parts, 0)?.contiguous()
            }
            Split::Cols(c) => t.narrow(1, c.start, c.len())?.contiguous(),
            Split::Vocab(v) => {
                let have = v.vocab.saturating_sub(v.start).min(v.rows);
                let mut parts = Vec::with_capacity(2);
                if have > 0 {
                    parts.push(t.narrow(0, v.start, have)?);
                }
                if have < v.rows {
                    let mut shape = t.dims().to_vec();
                    if let Some(rows) = shape.first_mut() {
                        *rows = v.rows - have;
                    }
                    parts.push(Tensor::zeros(shape, t.dtype(), t.device())?);
                }
                Tensor::cat(&parts, 0)?.contiguous()
            }
        }
    }
}

/// The ranks of one process, for tests and the CPU: every rank a thread, their all-reduce a
/// barrier. Each rank adds the ranks' tensors in rank order (in f32), so every rank gets the same
/// bits.
pub struct InProcess {
    me: Rank,
    shared: Arc<Shared>,
}

struct Shared {
    slots: Mutex<Vec<Option<Tensor>>>,
    barrier: Barrier,
}

impl InProcess {
    /// One communicator per rank of a world of `world`.
    pub fn group(world: usize) -> Vec<InProcess> {
        let shared = Arc::new(Shared {
            slots: Mutex::new(vec![None; world]),
            barrier: Barrier::new(world),
        });
        (0..world)
            .map(|rank| InProcess {
                me: Rank { rank, world },
                shared: Arc::clone(&shared),
            })
            .collect()
    }
}

impl Communicator for InProcess {
    fn rank(&self) -> Rank {
        self.me
    }

    fn all_reduce_sum(&self, t: &Tensor) -> candle_core::Result<Tensor> {
        let poisoned = || candle_core::Error::Msg("a rank panicked during an all-reduce".into());
        {
            let mut slots = self.shared.slots.lock().map_err(|_| poisoned())?;
            slots[self.me.rank] = Some(t.to_dtype(DType::F32)?);
        }
        self.shared.barrier.wait();
        let sum = {
            let slots = self.shared.slots.lock().map_err(|_| poisoned())?;
            sum_in_order(slots.iter().flatten())?
        };
        // nobody writes the next reduction's slot before every rank has read this one
        self.shared.barrier.wait();
        sum.to_dtype(t.dtype())
    }
}

/// `a₀ + a₁ + …` in that order.
pub fn sum_in_order<'a>(
    mut parts: impl Iterator<Item = &'a Tensor>,
) -> candle_core::Result<Tensor> {
    let first = parts
        .next()
        .ok_or_else(|| candle_core::Error::Msg("an all-reduce over no ranks".into()))?;
    parts.try_fold(first.clone(), |acc, t| acc + t)
}

/// Run `f` on every rank of an in-process world, each in its own thread; the results in rank order.
pub fn run_ranks<T: Send>(
    world: usize,
    f: impl Fn(&InProcess) -> T + Sync,
) -> std::thread::Result<Vec<T>> {
    let comms = InProcess::group(world);
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|c| {
                let f = &f;
                s.spawn(move || f(c))
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_in_process_all_reduce_gives_every_rank_the_same_sum() {
        let out = run_ranks(3, |c| {
            let t = Tensor::new(&[c.rank().rank as f32, 1.0], &candle_core::Device::Cpu).unwrap();
            let a = c.all_reduce_sum(&t).unwrap().to_vec1::<f32>().unwrap();
            let b = c.all_reduce_sum(&(t * 2.0).unwrap()).unwrap();
            (a, b.to_vec1::<f32>().unwrap())
        })
        .unwrap();
        for (a, b) in out {
            assert_eq!(a, vec![3.0, 3.0]);
            assert_eq!(b, vec![6.0, 6.0]);
        }
    }

    #[test]
    fn a_vocab_shard_pads_and_looks_up_only_its_rows() {
        let dev = candle_core::Device::Cpu;
        let table = Tensor::arange(0f32, 10.0, &dev)
            .unwrap()
            .reshape((10, 1))
            .unwrap();
        // vocab 10 pads to 64; two ranks of 32 rows: rank 1 holds only padding
        let v = VocabShard {
            start: 0,
            rows: 32,
            vocab: 10,
            padded: 64,
        };
        let mine = Split::Vocab(v).cut(&table).unwrap();
        assert_eq!(mine.dims(), &[32, 1]);
        let ids = Tensor::new(&[3u32, 9, 0], &dev).unwrap();
        let got = embed_lookup(&mine, &ids, v).unwrap();
        assert_eq!(
            got.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            vec![3.0, 9.0, 0.0]
        );
        let other = VocabShard { start: 32, ..v };
        let theirs = Split::Vocab(other).cut(&table).unwrap();
        let none = embed_lookup(&theirs, &ids, other).unwrap();
        assert_eq!(
            none.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            vec![0.0; 3]
        );
        let placed =
            place_logits(&Tensor::ones((1, 32), DType::F32, &dev).unwrap(), other).unwrap();
        assert_eq!(placed.dims(), &[1, 64]);
    }
}
