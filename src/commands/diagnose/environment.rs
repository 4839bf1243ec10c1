//! Stage 0, before the probe takes anything: the GPU and who else holds it, and the host's memory.

use crate::meter::gpu::{read_gpu, GpuInfo, GpuProcess};
use crate::meter::host::host_memory;
use crate::request::Device;

pub struct Environment {
    pub gpu: Option<GpuInfo>,
    /// Other processes that hold memory on the GPU.
    pub others: Vec<GpuProcess>,
    /// Host RAM: total and available.
    pub host: Option<(u64, u64)>,
}

impl Environment {
    pub fn read(device: Device, notes: &mut Vec<String>) -> Environment {
        let gpu = device
            .gpu()
            .and_then(|index| read_gpu(index).map_err(|why| notes.push(why)).ok());
        let others = gpu
            .as_ref()
            .map(|g| {
                g.processes
                    .iter()
                    .filter(|p| p.bytes.unwrap_or(0) > 0)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Environment {
            gpu,
            others,
            host: host_memory(),
        }
    }

    /// What other processes hold, in bytes.
    pub fn others_hold(&self) -> u64 {
        self.others.iter().filter_map(|p| p.bytes).sum()
    }
}
