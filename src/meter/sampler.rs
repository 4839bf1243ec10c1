//! A timeline of memory during a stage: a thread samples every few milliseconds into a bounded
//! buffer (when it fills, every other sample is dropped and the interval doubles), so the peak
//! between two snapshots is seen and a chart can be drawn, whatever the stage's length.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::gpu::GpuSampler;
use super::host;

/// One moment: what the process held on the host heap and, where NVML sees it, on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySnapshot {
    pub t_ms: u64,
    pub host_heap_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_process_bytes: Option<u64>,
}

/// Most samples kept; a long stage keeps them evenly spread.
pub const MAX_SAMPLES: usize = 512;

pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Vec<MemorySnapshot>>>,
}

impl Sampler {
    /// Start sampling this process every `interval` (GPU `gpu_index` through NVML when given).
    pub fn start(interval: Duration, gpu_index: Option<u32>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("llm-oom-sampler".into())
            .spawn(move || {
                let gpu = gpu_index.and_then(|i| GpuSampler::open(i).ok());
                let me = [std::process::id()];
                let start = Instant::now();
                let mut every = interval.max(Duration::from_millis(1));
                let mut samples = Vec::with_capacity(MAX_SAMPLES);
                loop {
                    samples.push(MemorySnapshot {
                        t_ms: start.elapsed().as_millis() as u64,
                        host_heap_bytes: host::current(),
                        gpu_process_bytes: gpu.as_ref().and_then(|g| g.read(&me)).map(|r| r.tree),
                    });
                    if samples.len() >= MAX_SAMPLES {
                        let mut i = 0usize;
                        samples.retain(|_| {
                            i += 1;
                            i % 2 == 1
                        });
                        every *= 2;
                    }
                    if flag.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::park_timeout(every);
                    if flag.load(Ordering::Relaxed) {
                        // One last sample at the stop.
                        samples.push(MemorySnapshot {
                            t_ms: start.elapsed().as_millis() as u64,
                            host_heap_bytes: host::current(),
                            gpu_process_bytes: gpu
                                .as_ref()
                                .and_then(|g| g.read(&me))
                                .map(|r| r.tree),
                        });
                        break;
                    }
                }
                samples
            })
            .ok();
        Sampler { stop, handle }
    }

    /// Stop, join the thread and return the timeline (empty if the thread could not start).
    pub fn finish(mut self) -> Vec<MemorySnapshot> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take() {
            Some(h) => {
                h.thread().unpark();
                h.join().unwrap_or_default()
            }
            None => Vec::new(),
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}
