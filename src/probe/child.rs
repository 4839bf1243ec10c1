//! The probe's child process (`llm-oom __probe`): open the device, hold the ballast, load the
//! model once, then run the parent's tasks one by one and report each with its measurements.
//! An out-of-memory is an outcome; the child carries on with the next task.

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use candle_core::{DType, Device};

use super::protocol::{
    FragmentationFacts, GenerateTask, Hello, OomFacts, Outcome, Setup, Task, TaskResult,
};
use crate::error::{Error, Result};
// The query slice of the probe's memory-efficient attention (the score tile stays small beside the
// KV cache, as SDPA's does): the one `estimate::candle` prices.
use crate::estimate::candle::ATTENTION_SLICE;
use crate::meter::device::{cap_pool, Ballast, DeviceMeter};
use crate::meter::host::{self, Part};
use crate::meter::sampler::Sampler;
use crate::model::{resolve, Spec};
use crate::runtime::decoder::argmax;
use crate::runtime::generate::synthetic_prompt;
use crate::runtime::parallel::{rank_spec, Communicator, Rank};
use crate::runtime::setup::{candle_dtype, runtime_err, weight_source};
use crate::runtime::weights::Weights;
use crate::runtime::{open_device, Attention, CacheMode, Decoder, KvCache, RuntimeError};

/// Granularity of the largest-block search, and the largest block it tries.
const BLOCK_STEP: u64 = 2 << 20;
const SEARCH_CAP: u64 = 16 << 30;

struct Child {
    setup: Setup,
    /// The model this child runs: the whole one, or its tensor-parallel rank's part.
    spec: Spec,
    /// The whole model (what a rank's part is read from).
    full: Spec,
    /// A tensor-parallel rank: its place and its all-reduce with the other ranks.
    rank: Option<Rank>,
    comm: Option<Box<dyn Communicator>>,
    source: crate::runtime::weights::WeightSource,
    quantize: Option<crate::runtime::weights::Quantize>,
    device: Device,
    dtype: DType,
    meter: DeviceMeter,
    /// Device bytes outside the meter (CUDA context); 0 on the CPU, whose heap counts everything.
    outside: u64,
    weights: Option<Weights>,
    ballast: Ballast,
    /// The GPU NVML samples for this process (None on the CPU).
    gpu_index: Option<u32>,
    /// The memory pool's cap on a shared GPU: block searches stay below it too.
    pool_cap: Option<u64>,
}

/// Run the child: write the hello, then answer every task line until standard input closes.
pub fn serve(setup: &Setup, input: impl BufRead, mut out: impl Write) -> Result<()> {
    die_with_parent();
    let (mut child, hello) = Child::open(setup)?;
    send(&mut out, &hello)?;
    for line in input.lines() {
        let line = line.map_err(|e| Error::Internal(format!("reading a task: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let task: Task = serde_json::from_str(&line)
            .map_err(|e| Error::Internal(format!("a task the child cannot read ({e}): {line}")))?;
        let result = child.run(&task);
        send(&mut out, &result)?;
    }
    Ok(())
}

fn send(out: &mut impl Write, value: &impl serde::Serialize) -> Result<()> {
    let line = serde_json::to_string(value).map_err(|e| Error::Internal(e.to_string()))?;
    writeln!(out, "{line}")
        .and_then(|_| out.flush())
        .map_err(|e| Error::Internal(format!("the parent stopped listening: {e}")))
}

/// A child must never outlive its parent (and hold GPU memory nobody accounts for).
fn die_with_parent() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_PDEATHSIG only sets a signal number for this process.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
}

impl Child {
    fn open(setup: &Setup) -> Result<(Child, Hello)> {
        let resolved = resolve(&setup.model)?;
        let source = weight_source(&resolved.source, setup.random_weights)?;
        let quantize = setup.quantize;
        let spec = resolved.spec;
        crate::runtime::weights::check_supported(&spec).map_err(runtime_err)?;
        let dtype = candle_dtype(setup.dtype);
        // Before this process's context: a card's first run has the driver compile candle's
        // kernels in processes side by side (one rank of a world would start them for all).
        let compiled = match (setup.device.gpu(), &setup.tensor_parallel) {
            (Some(gpu), None) => crate::runtime::jit::compile_ahead_on(gpu, quantize.is_some()),
            _ => None,
        };
        let device = open_device(setup.device).map_err(runtime_err)?;
        let rank = setup.tensor_parallel.as_ref().map(|t| Rank {
            rank: t.rank,
            world: t.world,
        });
        if let Some(r) = rank {
            crate::runtime::parallel::check(&spec, r.world).map_err(runtime_err)?;
        }
        // Before the base is read: NCCL's buffers are this rank's, as they are in a real world.
        let comm = match &setup.tensor_parallel {
            Some(tp) => Some(join(&tp.join, &device, tp.rank, tp.world)?),
            None => None,
        };
        let mut notes: Vec<String> = compiled
            .as_ref()
            .and_then(crate::runtime::jit::note)
            .into_iter()
            .collect();
        // A shared GPU without a limit: cap the memory pool at what is free less the margin, so
        // the probe runs out before the other processes do.
        let mut pool_cap = None;
        if let (None, Some(margin)) = (setup.vram_limit, setup.shared_gpu_margin) {
            let free = DeviceMeter::for_device(&device)
                .map_err(Error::Internal)?
                .read()
                .free;
            if let Some(free) = free {
                let cap = free.saturating_sub(margin);
                match cap_pool(&device, cap) {
                    Ok(()) => {
                        notes.push(format!(
                            "other processes use this GPU: the probe's memory pool was capped at {} (free {} less a {} margin), so it cannot squeeze them",
                            crate::units::Bytes(cap),
                            crate::units::Bytes(free),
                            crate::units::Bytes(margin)
                        ));
                        pool_cap = Some(cap);
                    }
                    Err(e) => notes.push(format!(
                        "other processes use this GPU and the probe's pool could not be capped ({e}); pass --vram-limit to keep the probe below what they need"
                    )),
                }
            }
        }
        let meter = DeviceMeter::for_device(&device).map_err(Error::Internal)?;
        let r = meter.read();
        let (outside, base, capacity, ballast) = match (r.free, r.total) {
            (Some(free), Some(total)) => {
                // CUDA: what this process holds before any tensor is its context and libraries.
                let own = own_gpu_bytes(setup.device).unwrap_or(total - free);
                let outside = own.saturating_sub(r.reserved.unwrap_or(0));
                let (capacity, ballast) = match setup.vram_limit {
                    Some(limit) if limit > own + free => {
                        notes.push(format!(
                            "the limit {} is more than this GPU has for the probe ({}); probing with what there is",
                            crate::units::Bytes(limit),
                            crate::units::Bytes(own + free)
                        ));
                        (own + free, 0)
                    }
                    Some(limit) => (limit, free - (limit - own.min(limit))),
                    None => (own + pool_cap.unwrap_or(free).min(free), 0),
                };
                (outside, own, capacity, ballast)
            }
            _ => {
                // CPU: the heap is the device; the limit is the allocator's.
                let base = host::current();
                let capacity = match setup.vram_limit {
                    Some(limit) => {
                        host::set_limit(Some(limit));
                        limit
                    }
                    None => host::host_memory().map_or(u64::MAX, |(_, avail)| avail + base),
                };
                (0, base, capacity, 0)
            }
        };
        let ballast = Ballast::hold(&meter, ballast).map_err(|e| {
            Error::Internal(format!(
                "could not hold {} of ballast for --vram-limit: {e}",
                crate::units::Bytes(ballast)
            ))
        })?;
        let after = meter.read();
        let hello = Hello {
            pid: std::process::id(),
            device: setup.device,
            meter: meter.source(),
            base_bytes: base,
            ballast_bytes: ballast.bytes,
            capacity_bytes: capacity,
            device_total: after.total,
            device_free: after.free,
            notes,
            devices: Vec::new(),
        };
        Ok((
            Child {
                setup: setup.clone(),
                spec: match rank {
                    Some(r) => rank_spec(&spec, r.world),
                    None => spec.clone(),
                },
                full: spec,
                rank,
                comm,
                source,
                quantize,
                device,
                dtype,
                meter,
                outside,
                weights: None,
                ballast,
                pool_cap,
                gpu_index: setup.device.gpu(),
            },
            hello,
        ))
    }

    /// Device bytes held now (base included): on CUDA what the pool holds from the device, which
    /// is what runs out (freed blocks it cannot reuse for a larger request count too).
    fn held(&self) -> u64 {
        let r = self.meter.read();
        self.outside + r.reserved.unwrap_or(r.in_use)
    }

    fn peak(&self) -> u64 {
        let r = self.meter.read();
        self.outside + r.reserved_peak.unwrap_or(r.peak)
    }

    /// The same two figures counting only bytes in live tensors (the pool's "used"): exact, what
    /// the peak model is fitted on; the difference is the allocator's slack.
    fn held_used(&self) -> u64 {
        self.outside + self.meter.read().in_use
    }

    fn peak_used(&self) -> u64 {
        self.outside + self.meter.read().peak
    }

    /// What this process holds outside the pool and the ballast grows after the hello: the
    /// kernels' modules and the libraries' workspaces load on first use (NVML's per-process bytes,
    /// less the pool's reservation and the ballast). Counted from then on, so the budget sees them.
    fn refresh_outside(&mut self) {
        if self.gpu_index.is_none() {
            return;
        }
        if let Some(own) = own_gpu_bytes(self.setup.device) {
            let pool = self.meter.read().reserved.unwrap_or(0);
            let outside = own.saturating_sub(pool + self.ballast.bytes);
            self.outside = self.outside.max(outside);
        }
    }

    fn run(&mut self, task: &Task) -> TaskResult {
        host::clear_crossing();
        self.meter.settle();
        self.refresh_outside();
        self.meter.reset_peak();
        let t0 = Instant::now();
        let mut r = match task {
            Task::Load => TaskResult::new("load"),
            Task::Warmup { .. } => TaskResult::new("warmup"),
            Task::Generate(g) => TaskResult::new(&g.label),
            Task::Fragmentation => TaskResult::new("fragmentation"),
        };
        r.before = self.held();
        r.used.before = self.held_used();
        let sampler = Sampler::start(Duration::from_millis(10), self.gpu_index);
        let outcome = match task {
            Task::Load => self.load(&mut r),
            Task::Warmup { prompt_tokens } => {
                // Twice: the first run pays for kernels and workspaces; the second is a clean
                // 16-token measurement the fit uses.
                let g = |p: usize| GenerateTask {
                    label: "warmup".into(),
                    prompt_tokens: p,
                    new_tokens: 2,
                    batch: 1,
                    decode_steps: 1,
                    eager: None,
                };
                let first = g((*prompt_tokens).clamp(16, ATTENTION_SLICE as usize));
                self.generate(&first, &mut r).and_then(|()| {
                    self.meter.settle();
                    self.meter.reset_peak();
                    r.before = self.held();
                    r.used.before = self.held_used();
                    self.generate(&g(16), &mut r)
                })
            }
            Task::Generate(g) => {
                fault_hook(&g.label, self.rank.map(|r| r.rank));
                self.generate(g, &mut r)
            }
            Task::Fragmentation => {
                self.meter.settle();
                let now = self.meter.read();
                let cap = self.search_cap(SEARCH_CAP);
                if let (Some(free), Some(largest)) =
                    (now.free, self.meter.largest_block(BLOCK_STEP, cap))
                {
                    r.fragmentation = Some(FragmentationFacts {
                        free,
                        largest_block: largest,
                        searched_up_to: cap.min(free),
                        reserved: now.reserved.unwrap_or(0),
                        in_use: now.in_use,
                    });
                }
                Ok(())
            }
        };
        host::set_part(Part::Other);
        r.timeline = sampler.finish();
        r.peak = self.peak().max(r.before);
        r.used.peak = self.peak_used().max(r.used.before);
        r.reserved_peak = self.meter.read().reserved_peak.map(|b| b + self.outside);
        match outcome {
            Ok(()) => {}
            Err(Failure::Oom(facts)) => {
                r.outcome = Outcome::Oom;
                r.oom = Some(facts);
            }
            Err(Failure::Other(e)) => {
                r.outcome = Outcome::Error;
                r.error = Some(e);
            }
        }
        self.meter.settle();
        r.after = self.held();
        r.weights_bytes = self.weights.as_ref().map_or(0, Weights::bytes);
        r.seconds = t0.elapsed().as_secs_f64();
        r
    }

    /// The largest block a search may try: on a shared GPU, no more than the pool may still take.
    fn search_cap(&self, want: u64) -> u64 {
        match self.pool_cap {
            Some(cap) => want.min(cap.saturating_sub(self.meter.read().reserved.unwrap_or(0))),
            None => want,
        }
    }

    fn load(&mut self, r: &mut TaskResult) -> std::result::Result<(), Failure> {
        self.weights = None;
        self.meter.settle();
        r.before = self.held();
        r.used.before = self.held_used();
        host::set_part(Part::Weights);
        let w = match self.rank {
            Some(r) => {
                self.source
                    .load_part(&self.full, self.dtype, &self.device, self.setup.seed, r)
            }
            None => self.source.load(
                &self.spec,
                self.dtype,
                &self.device,
                self.setup.seed,
                self.quantize,
            ),
        };
        let w = w.map_err(|e| self.failure(e, Part::Weights))?;
        self.limit_check()?;
        self.sync(Part::Weights)?;
        self.weights = Some(w);
        Ok(())
    }

    fn generate(&self, g: &GenerateTask, r: &mut TaskResult) -> std::result::Result<(), Failure> {
        let Some(weights) = &self.weights else {
            return Err(Failure::Other(
                "no weights: the load did not succeed".into(),
            ));
        };
        let (p, n, b) = (g.prompt_tokens.max(1), g.new_tokens.max(1), g.batch.max(1));
        let total = p + n;
        let eager = g.eager.unwrap_or(self.setup.eager);
        let attention = if eager {
            Attention::Eager
        } else {
            Attention::Chunked(ATTENTION_SLICE as usize)
        };
        host::set_part(Part::Activations);
        let mut decoder = Decoder::new(&self.spec, weights, attention, total, &self.device)
            .map_err(|e| self.failure(e, Part::Activations))?;
        if host::limit().is_some() {
            decoder.interrupt = Some(limit_crossed);
        }
        decoder.comm = self.comm.as_deref();
        host::set_part(Part::KvCache);
        let before_cache = self.held();
        let mut cache = KvCache::new(
            CacheMode::Preallocated,
            &self.spec,
            b,
            total,
            weights.dtype,
            &self.device,
        )
        .map_err(|e| self.failure(e, Part::KvCache))?;
        // The cache's tensors, exactly; the meter's delta across the allocation also counts the
        // cache's bookkeeping on the heap (CPU) or the pool's rounding (CUDA).
        r.kv_bytes = cache.bytes();
        r.kv_bytes_measured = Some(self.held().saturating_sub(before_cache));
        self.limit_check()?;

        host::set_part(Part::Activations);
        let err = |e: candle_core::Error| {
            self.failure(
                RuntimeError::from_candle(e, &self.device),
                Part::Activations,
            )
        };
        let prompt =
            synthetic_prompt(b, p, self.spec.vocab_size as usize, &self.device).map_err(err)?;
        let t0 = Instant::now();
        let mut logits = decoder
            .forward(&prompt, &mut cache)
            .map_err(|e| self.failure(e, Part::Activations))?;
        self.sync(Part::Activations)?;
        r.prefill_seconds = Some(t0.elapsed().as_secs_f64());
        self.limit_check()?;
        r.prefill_peak = Some(self.peak());
        r.used.prefill_peak = Some(self.peak_used());
        drop(prompt);

        // The last `steps` decode passes: a generation of n tokens feeds n − 1 of them, ending with
        // prompt + n − 1 tokens in the cache.
        let steps = g.decode_steps.min(n - 1);
        if steps > 0 {
            self.meter.reset_peak();
            cache
                .skip_to(p + n - 1 - steps)
                .map_err(|e| Failure::Other(e.to_string()))?;
            let t1 = Instant::now();
            for _ in 0..steps {
                let next = argmax(&logits).map_err(err)?;
                logits = decoder
                    .forward(&next.reshape((b, 1)).map_err(err)?, &mut cache)
                    .map_err(|e| self.failure(e, Part::Activations))?;
                self.limit_check()?;
            }
            self.sync(Part::Activations)?;
            let dt = t1.elapsed().as_secs_f64();
            r.decode_peak = Some(self.peak());
            r.used.decode_peak = Some(self.peak_used());
            r.decode_tokens_per_second = Some((steps * b) as f64 / dt.max(1e-9));
        }
        Ok(())
    }

    /// Wait for the device's queued work: an asynchronous CUDA error (an out-of-memory inside a
    /// kernel launch among them) belongs to the part that queued it.
    fn sync(&self, part: Part) -> std::result::Result<(), Failure> {
        self.device
            .synchronize()
            .map_err(|e| self.failure(RuntimeError::from_candle(e, &self.device), part))
    }

    /// On the CPU with a limit: the first allocation past it is this task's out-of-memory.
    fn limit_check(&self) -> std::result::Result<(), Failure> {
        match host::crossing() {
            Some(c) => Err(Failure::Oom(OomFacts {
                requested: Some(c.requested),
                held: c.held,
                part: c.part,
                message: format!(
                    "emulated out of memory: allocating {} with {} held crosses the {} limit",
                    crate::units::Bytes(c.requested),
                    crate::units::Bytes(c.held),
                    crate::units::Bytes(host::limit().unwrap_or(0))
                ),
                free: None,
                largest_block: None,
                cached: None,
                emulated: true,
            })),
            None => Ok(()),
        }
    }

    fn failure(&self, e: RuntimeError, part: Part) -> Failure {
        match e {
            RuntimeError::OutOfMemory {
                message, requested, ..
            } => {
                // By now the failed step's partial tensors are back in the pool: the slack the pool
                // had at the peak is its reserved high-water less its used high-water.
                let now = self.meter.read();
                let cached = now.reserved_peak.map(|r| r.saturating_sub(now.peak));
                Failure::Oom(OomFacts {
                    requested,
                    held: self.peak(),
                    part,
                    message,
                    free: now.free,
                    largest_block: self.meter.largest_block(
                        BLOCK_STEP,
                        self.search_cap(requested.unwrap_or(SEARCH_CAP)),
                    ),
                    cached,
                    emulated: false,
                })
            }
            // With a limit on the CPU, a crossing is the finding even if something else failed after.
            other => match self.limit_check() {
                Err(f) => f,
                Ok(()) => Failure::Other(other.to_string()),
            },
        }
    }
}

fn limit_crossed() -> bool {
    host::crossing().is_some()
}

enum Failure {
    Oom(OomFacts),
    Other(String),
}

/// Fault injection for the parent's tests: `LLM_OOM_PROBE_FAULT=panic:<label>` (or `abort:`,
/// `hang:`) makes the child fail that way at the start of the task with that label;
/// `abort:<label>@1` only tensor-parallel rank 1.
fn fault_hook(label: &str, rank: Option<usize>) {
    let Ok(fault) = std::env::var("LLM_OOM_PROBE_FAULT") else {
        return;
    };
    let Some((how, at)) = fault.split_once(':') else {
        return;
    };
    let (at, only) = match at.split_once('@') {
        Some((at, r)) => (at, r.parse::<usize>().ok()),
        None => (at, None),
    };
    if at != label || only.is_some_and(|r| Some(r) != rank) {
        return;
    }
    match how {
        "panic" => panic!("injected fault at {label}"),
        "abort" => std::process::abort(),
        "hang" => loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        },
        _ => {}
    }
}

/// How long a rank waits for the others to join.
const JOIN_WITHIN: Duration = Duration::from_secs(120);

/// This rank's all-reduce: NCCL on a GPU (the `nccl` build), the loopback on the CPU.
fn join(
    how: &super::protocol::Join,
    device: &Device,
    rank: usize,
    world: usize,
) -> Result<Box<dyn Communicator>> {
    let me = Rank { rank, world };
    match how {
        super::protocol::Join::Tcp { addr } => {
            crate::runtime::tcp::Tcp::join(addr, me, JOIN_WITHIN)
                .map(|c| Box::new(c) as Box<dyn Communicator>)
                .map_err(runtime_err)
        }
        #[cfg(feature = "nccl")]
        super::protocol::Join::Nccl { id_file } => {
            crate::runtime::nccl::Nccl::join(device, me, std::path::Path::new(id_file), JOIN_WITHIN)
                .map(|c| Box::new(c) as Box<dyn Communicator>)
                .map_err(runtime_err)
        }
        #[cfg(not(feature = "nccl"))]
        super::protocol::Join::Nccl { .. } => {
            let _ = device;
            Err(Error::Internal(
                "this llm-oom was built without the `nccl` feature; tensor parallelism on GPUs needs `cargo build --release --features nccl`".into(),
            ))
        }
    }
}

/// This process's own bytes on its GPU as NVML counts them (context included).
fn own_gpu_bytes(device: crate::request::Device) -> Option<u64> {
    let gpu = crate::meter::gpu::read_gpu(device.gpu()?).ok()?;
    gpu.processes
        .iter()
        .find(|p| p.pid == std::process::id())
        .and_then(|p| p.bytes)
}
