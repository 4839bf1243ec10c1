//! The meters on a real GPU, printed as JSON lines:
//! context overhead, pool reserved vs used after freeing a large tensor (before and after trim),
//! the largest-block search beside a deliberately fragmented pool, the ballast leaving the asked
//! limit, and NVML seeing a second process that holds memory.
//!
//! cargo build --release --features cuda --example meters_gpu   (run on the GPU machine)

use candle_core::{DType, Device, Tensor};
use llm_oom::meter::device::{Ballast, DeviceMeter};
use llm_oom::meter::gpu::read_gpu;
use serde_json::json;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn main() -> anyhow::Result<()> {
    let before = read_gpu(0).map_err(anyhow::Error::msg)?;
    let me = std::process::id();
    let device = Device::new_cuda(0)?;
    let meter = DeviceMeter::for_device(&device).map_err(anyhow::Error::msg)?;
    let after = read_gpu(0).map_err(anyhow::Error::msg)?;
    let own = after
        .processes
        .iter()
        .find(|p| p.pid == me)
        .and_then(|p| p.bytes);
    println!(
        "{}",
        json!({"check": "context", "free_before": before.free_bytes, "free_after": after.free_bytes,
               "context_bytes_by_free": before.free_bytes.saturating_sub(after.free_bytes), "nvml_own_bytes": own,
               "meter": meter.source(), "reading": meter.read()})
    );

    // A 4 GiB tensor, freed: what the pool keeps until it is trimmed.
    meter.reset_peak();
    let t = Tensor::zeros((4 * GIB as usize,), DType::U8, &device)?;
    let held = meter.read();
    drop(t);
    let freed = meter.read();
    meter.settle();
    let trimmed = meter.read();
    println!(
        "{}",
        json!({"check": "pool", "with_tensor": held, "after_free": freed, "after_trim": trimmed})
    );

    // Fragment the pool: 64 blocks of 256 MiB, every other one freed.
    let mut blocks = Vec::new();
    for _ in 0..64 {
        blocks.push(Some(Tensor::zeros(
            ((256 * MIB) as usize,),
            DType::U8,
            &device,
        )?));
    }
    for b in blocks.iter_mut().step_by(2) {
        *b = None;
    }
    let _ = device.synchronize();
    let frag = meter.read();
    let largest = meter.largest_block(2 * MIB, u64::MAX);
    let free_now = meter.read().free;
    println!(
        "{}",
        json!({"check": "fragmented", "reading_before_search": frag, "largest_block": largest, "free": free_now,
               "note": "32 x 256 MiB still held, 32 freed in between; the search allocates outside the pool"})
    );
    drop(blocks);
    meter.settle();

    // The ballast: leave exactly 24 GiB usable.
    let free = meter.read().free.unwrap_or(0);
    let want = 24 * GIB;
    let ballast = Ballast::hold(&meter, free.saturating_sub(want)).map_err(anyhow::Error::msg)?;
    let left = meter.read().free.unwrap_or(0);
    println!(
        "{}",
        json!({"check": "ballast", "free_before": free, "ballast": ballast.bytes, "free_after": left,
               "asked": want, "error_pct": (left as f64 - want as f64) / want as f64 * 100.0})
    );
    // An allocation of the limit minus 64 MiB fits; one of the limit plus 64 MiB does not.
    let fits = Tensor::zeros(((want - 64 * MIB) as usize,), DType::U8, &device).is_ok();
    meter.settle();
    let over = Tensor::zeros(((want + 64 * MIB) as usize,), DType::U8, &device).is_ok();
    println!(
        "{}",
        json!({"check": "ballast_edges", "limit_minus_64MiB_fits": fits, "limit_plus_64MiB_fits": over})
    );
    drop(ballast);

    // A second process that holds 2 GiB: NVML must list it.
    let mut child = std::process::Command::new("python3")
        .args([
            "-c",
            "import torch,time; x=torch.empty(2<<30, dtype=torch.uint8, device='cuda'); print('ok', flush=True); time.sleep(8)",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    if let Some(out) = child.stdout.take() {
        use std::io::BufRead;
        let _ = std::io::BufReader::new(out).lines().next();
    }
    let seen = read_gpu(0).map_err(anyhow::Error::msg)?;
    let other = seen.processes.iter().find(|p| p.pid == child.id()).cloned();
    println!(
        "{}",
        json!({"check": "second_process", "pid": child.id(), "nvml_sees": other})
    );
    let _ = child.kill();
    let _ = child.wait();
    Ok(())
}
