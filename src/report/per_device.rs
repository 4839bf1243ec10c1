//! `diagnose --device cuda:0,cuda:1`: every task's memory on each GPU, and the GPU that ran out.

use super::text::{table, Style};
use crate::probe::protocol::{Outcome, TaskDevices};
use crate::units::Bytes;

const HEADER: [&str; 9] = [
    "task",
    "device",
    "outcome",
    "before",
    "peak",
    "live tensors",
    "weights",
    "free at peak",
    "of",
];

fn rows(tasks: &[TaskDevices]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for t in tasks {
        for d in &t.devices {
            let outcome = match (t.outcome, t.oom_device) {
                (Outcome::Oom, Some(o)) if o == d.device => "ran out".to_string(),
                (Outcome::Oom, Some(_)) => "ok".to_string(),
                (o, _) => format!("{o:?}").to_lowercase(),
            };
            out.push(vec![
                t.label.clone(),
                d.device.to_string(),
                outcome,
                Bytes(d.before).to_string(),
                Bytes(d.peak).to_string(),
                Bytes(d.used_peak).to_string(),
                Bytes(d.weights_bytes).to_string(),
                Bytes(d.capacity_bytes.saturating_sub(d.peak)).to_string(),
                Bytes(d.capacity_bytes).to_string(),
            ]);
        }
    }
    out
}

/// The per-GPU table, after the stages; nothing on one device.
pub fn text(out: &mut String, tasks: &[TaskDevices], style: &Style) {
    if tasks.is_empty() {
        return;
    }
    out.push_str(&style.bold(
        "Per GPU (device_map=\"auto\": the process's bytes on each, live tensors = max_memory_allocated)",
    ));
    out.push('\n');
    let mut t = table(&HEADER, 3);
    for r in rows(tasks) {
        t.add_row(r);
    }
    out.push_str(&t.to_string());
    out.push_str("\n\n");
}

pub fn markdown(out: &mut String, tasks: &[TaskDevices]) {
    if tasks.is_empty() {
        return;
    }
    out.push_str(&format!(
        "#### Per GPU\n\n| {} |\n|---|---|---|{}\n",
        HEADER.join(" | "),
        "--:|".repeat(HEADER.len() - 3)
    ));
    for r in rows(tasks) {
        out.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::protocol::DeviceMemory;
    use crate::request::Device;

    fn gpu(i: u32, peak: u64) -> DeviceMemory {
        DeviceMemory {
            device: Device::Cuda(i),
            before: 1 << 30,
            peak,
            after: 1 << 30,
            used_peak: peak - (1 << 28),
            capacity_bytes: 24 << 30,
            weights_bytes: 10 << 30,
            nvml_bytes: None,
        }
    }

    #[test]
    fn the_gpu_the_oom_names_is_the_one_that_ran_out() {
        let tasks = vec![TaskDevices {
            label: "concurrency".into(),
            outcome: Outcome::Oom,
            devices: vec![gpu(0, 20 << 30), gpu(1, 24 << 30)],
            oom_device: Some(Device::Cuda(1)),
        }];
        let r = rows(&tasks);
        assert_eq!(r[0][2], "ok");
        assert_eq!((r[1][1].as_str(), r[1][2].as_str()), ("cuda:1", "ran out"));
        let mut out = String::new();
        text(&mut out, &tasks, &Style { color: false });
        assert!(out.contains("ran out") && out.contains("cuda:0"), "{out}");
        let mut md = String::new();
        markdown(&mut md, &tasks);
        assert!(md.contains("| concurrency | cuda:1 | ran out |"), "{md}");
    }
}
