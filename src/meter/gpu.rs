//! The card as NVML sees it: name, memory, driver, and which processes hold memory.

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::Nvml;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub free_bytes: u64,
    pub driver: String,
    pub processes: Vec<GpuProcess>,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub name: String,
    pub bytes: Option<u64>,
}

/// Read GPU `index` through NVML. `Err` carries the one-line reason it is not available.
pub fn read_gpu(index: u32) -> Result<GpuInfo, String> {
    read_with(&open()?, index)
}

/// How many GPUs NVML sees; `Err` carries why none can be counted (no driver, no NVML).
pub fn count() -> Result<u32, String> {
    let nvml = Nvml::init().map_err(|e| format!("NVML: {e}"))?;
    nvml.device_count()
        .map_err(|e| format!("NVML cannot count the GPUs: {e}"))
}

fn open() -> Result<Nvml, String> {
    Nvml::init().map_err(|e| format!("NVML not available ({e}): no NVIDIA driver on this machine"))
}

fn read_with(nvml: &Nvml, index: u32) -> Result<GpuInfo, String> {
    let device = nvml
        .device_by_index(index)
        .map_err(|e| format!("NVML sees no GPU {index} ({e})"))?;
    let mem = device
        .memory_info()
        .map_err(|e| format!("NVML cannot read GPU {index}'s memory ({e})"))?;
    let processes = device
        .running_compute_processes()
        .unwrap_or_default()
        .into_iter()
        .map(|p| GpuProcess {
            pid: p.pid,
            name: process_name(p.pid),
            bytes: match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(b),
                UsedGpuMemory::Unavailable => None,
            },
        })
        .collect();
    Ok(GpuInfo {
        index,
        name: device.name().unwrap_or_else(|_| "unknown GPU".into()),
        total_bytes: mem.total,
        used_bytes: mem.used,
        free_bytes: mem.free,
        driver: nvml.sys_driver_version().unwrap_or_default(),
        processes,
    })
}

/// Every GPU NVML sees, each with its compute capability (`9.0`), and the CUDA version the driver
/// supports (`13.0`).
pub struct AllGpus {
    pub gpus: Vec<(GpuInfo, Option<String>)>,
    pub cuda_driver: Option<String>,
}

/// [`AllGpus`]; `Err`: NVML is not there.
pub fn read_all() -> Result<AllGpus, String> {
    let nvml = open()?;
    let count = nvml
        .device_count()
        .map_err(|e| format!("NVML cannot count the GPUs ({e})"))?;
    let cuda = nvml
        .sys_cuda_driver_version()
        .ok()
        .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
    let mut gpus = Vec::new();
    for index in 0..count {
        let cc = nvml
            .device_by_index(index)
            .and_then(|d| d.cuda_compute_capability())
            .ok()
            .map(|c| format!("{}.{}", c.major, c.minor));
        gpus.push((read_with(&nvml, index)?, cc));
    }
    Ok(AllGpus {
        gpus,
        cuda_driver: cuda,
    })
}

fn process_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_nvml_is_a_note_not_a_panic() {
        // On CI (no driver) this is the Err branch; on a GPU machine the Ok branch. Both are normal.
        match read_gpu(0) {
            Ok(gpu) => assert!(gpu.total_bytes >= gpu.free_bytes),
            Err(note) => assert!(!note.contains('\n') && note.contains("NVML")),
        }
    }
}

/// NVML kept open for repeated samples (init costs milliseconds; a sampler calls this every 20 ms).
pub struct GpuSampler {
    nvml: Nvml,
    index: u32,
}

/// One reading: the device's used and total memory, and what the given pids hold on it.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct GpuReading {
    pub device_used: u64,
    pub device_total: u64,
    pub tree: u64,
    pub others: u64,
}

impl GpuSampler {
    pub fn open(index: u32) -> Result<GpuSampler, String> {
        let nvml = Nvml::init().map_err(|e| {
            format!("NVML not available ({e}): GPU memory is not sampled, host memory only")
        })?;
        nvml.device_by_index(index)
            .map_err(|e| format!("NVML sees no GPU {index} ({e}): host memory only"))?;
        Ok(GpuSampler { nvml, index })
    }

    pub fn read(&self, pids: &[u32]) -> Option<GpuReading> {
        let device = self.nvml.device_by_index(self.index).ok()?;
        let mem = device.memory_info().ok()?;
        let (mut tree, mut others) = (0, 0);
        for p in device.running_compute_processes().unwrap_or_default() {
            let bytes = match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => b,
                UsedGpuMemory::Unavailable => 0,
            };
            if pids.contains(&p.pid) {
                tree += bytes;
            } else {
                others += bytes;
            }
        }
        Some(GpuReading {
            device_used: mem.used,
            device_total: mem.total,
            tree,
            others,
        })
    }
}
