//! A tensor-parallel probe: one child per rank. What each rank is told (its device, its rank, how
//! to meet the others), and how the ranks' answers become one: the figures of the fullest rank —
//! or of the rank that failed — with every rank's memory beside them (`per_device`), so the
//! verdict is about one card and names it.

use super::protocol::TensorParallel;
use super::protocol::{DeviceHello, DeviceMemory, Hello, Join, Outcome, Setup, TaskResult};
use crate::error::{Error, InputError, Result};
use crate::request::Device;

/// One setup per rank (`world` empty: the one child's setup as it is).
pub fn rank_setups(setup: &Setup, world: &[Device]) -> Result<Vec<Setup>> {
    if world.is_empty() {
        return Ok(vec![setup.clone()]);
    }
    let join = rendezvous(world)?;
    Ok(world
        .iter()
        .enumerate()
        .map(|(rank, &device)| Setup {
            device,
            devices: Vec::new(),
            tensor_parallel: Some(TensorParallel {
                rank,
                world: world.len(),
                join: join.clone(),
            }),
            ..setup.clone()
        })
        .collect())
}

/// How this world's ranks meet: a fresh NCCL id on GPUs, a free loopback port on the CPU.
fn rendezvous(world: &[Device]) -> Result<Join> {
    if world.iter().all(|d| *d == Device::Cpu) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| {
            Error::Internal(format!(
                "no loopback port for the CPU ranks to meet on: {e}"
            ))
        })?;
        let addr = l
            .local_addr()
            .map_err(|e| Error::Internal(format!("no loopback port: {e}")))?;
        return Ok(Join::Tcp {
            addr: addr.to_string(),
        });
    }
    if world.contains(&Device::Cpu) {
        return Err(InputError::Usage(
            "tensor-parallel ranks are all GPUs or all on the CPU".into(),
        )
        .into());
    }
    if !cfg!(feature = "nccl") {
        return Err(InputError::Usage(
            "tensor parallelism over GPUs runs over NCCL: this llm-oom was built without it; rebuild with `cargo build --release --features nccl` (needs libnccl.so.2, e.g. pip install nvidia-nccl-cu13)".into(),
        )
        .into());
    }
    Ok(Join::Nccl {
        id_file: id_file()?.display().to_string(),
    })
}

/// A fresh path for one world's NCCL id, in a scratch folder of its own (removed with it: see
/// [`remove_id_file`]).
fn id_file() -> Result<std::path::PathBuf> {
    let dir = crate::scratch::private_dir("llm-oom-nccl-")
        .map_err(|e| Error::Internal(format!("no folder for the NCCL id: {e}")))?;
    Ok(dir.join("world.id"))
}

/// Once every rank has joined, the world's id is of no more use.
pub fn remove_id_file(setups: &[Setup]) {
    let Some(Join::Nccl { id_file }) = setups
        .first()
        .and_then(|s| s.tensor_parallel.as_ref())
        .map(|t| &t.join)
    else {
        return;
    };
    let path = std::path::Path::new(id_file);
    let _ = std::fs::remove_file(path);
    if let Some(dir) = path.parent() {
        // the world's own folder, empty once its id is gone
        let _ = std::fs::remove_dir(dir);
    }
}

/// The world's greeting: rank 0's, with the tightest rank's capacity (the card the verdict is
/// about) and every rank's own figures in `devices`.
pub fn merge_hellos(hellos: Vec<Hello>, world: bool) -> Hello {
    let devices: Vec<DeviceHello> = hellos
        .iter()
        .enumerate()
        .map(|(rank, h)| DeviceHello {
            device: h.device,
            rank: Some(rank),
            base_bytes: h.base_bytes,
            ballast_bytes: h.ballast_bytes,
            capacity_bytes: h.capacity_bytes,
            device_total: h.device_total,
            device_free: h.device_free,
        })
        .collect();
    let mut notes: Vec<String> = Vec::new();
    for n in hellos.iter().flat_map(|h| &h.notes) {
        if !notes.contains(n) {
            notes.push(n.clone());
        }
    }
    let capacity = hellos.iter().map(|h| h.capacity_bytes).min();
    let mut first = match hellos.into_iter().next() {
        Some(h) => h,
        None => return empty_hello(),
    };
    if world {
        first.capacity_bytes = capacity.unwrap_or(first.capacity_bytes);
        first.notes = notes;
        first.devices = devices;
    }
    first
}

fn empty_hello() -> Hello {
    Hello {
        pid: 0,
        device: Device::Cpu,
        meter: crate::meter::Meter::HostAllocator,
        base_bytes: 0,
        ballast_bytes: 0,
        capacity_bytes: 0,
        device_total: None,
        device_free: None,
        notes: Vec::new(),
        devices: Vec::new(),
    }
}

/// The ranks' answers as one: the `failed` rank's (else the rank with the highest peak), every
/// answering rank's memory in `per_device`, and a failure named by its rank and device.
pub fn merge_results(
    results: Vec<Option<TaskResult>>,
    world: &[Device],
    hello: Option<&Hello>,
    failed: Option<usize>,
) -> Option<TaskResult> {
    let lead = failed.or_else(|| {
        results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|r| (i, r.peak)))
            .max_by_key(|&(i, peak)| (peak, std::cmp::Reverse(i)))
            .map(|(i, _)| i)
    })?;
    let capacity = |i: usize| {
        hello
            .and_then(|h| h.devices.get(i))
            .map_or(0, |d| d.capacity_bytes)
    };
    let per_device = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let r = r.as_ref()?;
            Some(DeviceMemory {
                device: world.get(i).copied().unwrap_or(Device::Cpu),
                rank: Some(i),
                before: r.before,
                peak: r.peak,
                after: r.after,
                used_peak: r.used.peak,
                capacity_bytes: capacity(i),
                weights_bytes: r.weights_bytes,
                nvml_bytes: None,
            })
        })
        .collect();
    let mut lead_result = results.into_iter().nth(lead).flatten()?;
    lead_result.per_device = per_device;
    if failed.is_some() {
        let device = world.get(lead).copied().unwrap_or(Device::Cpu);
        lead_result.failed_rank = Some(lead);
        if lead_result.outcome == Outcome::Oom {
            lead_result.oom_device = Some(device);
        }
        let stopped = "; the other ranks were stopped (they wait for it in their all-reduces)";
        lead_result.error = lead_result
            .error
            .map(|e| format!("rank {lead} ({device}): {e}{stopped}"));
    }
    Some(lead_result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_world_has_a_folder_of_its_own_for_its_id() {
        let (Ok(a), Ok(b)) = (id_file(), id_file()) else {
            panic!("no folder for the id");
        };
        assert_ne!(a.parent(), b.parent());
        for id in [a, b] {
            assert!(
                !id.exists(),
                "rank 0 writes the id; nothing is there before it"
            );
            if let Some(dir) = id.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }

    fn answer(peak: u64, outcome: Outcome) -> TaskResult {
        let mut r = TaskResult::new("concurrency");
        r.peak = peak;
        r.outcome = outcome;
        r
    }

    #[test]
    fn the_world_answers_with_its_fullest_rank_or_the_one_that_failed() {
        let world = [Device::Cuda(0), Device::Cuda(1)];
        let ok = merge_results(
            vec![Some(answer(5, Outcome::Ok)), Some(answer(7, Outcome::Ok))],
            &world,
            None,
            None,
        )
        .unwrap();
        assert_eq!(ok.peak, 7);
        assert_eq!(ok.per_device.len(), 2);
        assert_eq!(ok.per_device[1].rank, Some(1));
        assert_eq!(ok.failed_rank, None);
        // rank 1 ran out; rank 0, stopped in its all-reduce, never answered
        let oom = merge_results(
            vec![None, Some(answer(9, Outcome::Oom))],
            &world,
            None,
            Some(1),
        )
        .unwrap();
        assert_eq!(oom.oom_device, Some(Device::Cuda(1)));
        assert_eq!(oom.failed_rank, Some(1));
        assert_eq!(oom.per_device.len(), 1);
        let label = super::super::protocol::TaskDevices::first_oom_label(&[oom.devices().unwrap()]);
        assert_eq!(label.as_deref(), Some("cuda:1 (rank 1 of 2)"));
    }

    #[test]
    fn each_rank_is_told_its_place_and_cpu_ranks_meet_on_the_loopback() {
        let setup: Setup = serde_json::from_value(serde_json::json!({
            "model": "m", "device": "cpu", "dtype": "f32", "vram_limit": null,
            "random_weights": true, "eager": false, "seed": 42}))
        .unwrap();
        let ranks = rank_setups(&setup, &[Device::Cpu, Device::Cpu]).unwrap();
        let tp = ranks[1].tensor_parallel.as_ref().unwrap();
        assert_eq!((tp.rank, tp.world), (1, 2));
        assert!(matches!(&tp.join, Join::Tcp { addr } if addr.starts_with("127.0.0.1:")));
        assert_eq!(rank_setups(&setup, &[]).unwrap(), vec![setup.clone()]);
        assert!(rank_setups(&setup, &[Device::Cpu, Device::Cuda(0)]).is_err());
    }
}
