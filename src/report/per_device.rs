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
            let outcome = match (t.outcome, t.oom_device, t.failed_rank) {
                // tensor parallel: the rank is what tells the failing one apart
                (Outcome::Oom, Some(_), Some(r)) if d.rank == Some(r) => "ran out".to_string(),
                (Outcome::Oom, Some(o), None) if o == d.device => "ran out".to_string(),
                (Outcome::Oom, Some(_), _) => "ok".to_string(),
                (_, _, Some(r)) if d.rank != Some(r) => "ok".to_string(),
                (o, _, _) => format!("{o:?}").to_lowercase(),
            };
            let device = match d.rank {
                Some(r) => format!("{} rank {r}", d.device),
                None => d.device.to_string(),
            };
            out.push(vec![
                t.label.clone(),
                device,
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
    out.push_str(&style.bold(title(tasks)));
    out.push('\n');
    let mut t = table(&HEADER, 3);
    for r in rows(tasks) {
        t.add_row(r);
    }
    out.push_str(&t.to_string());
    out.push_str("\n\n");
}

fn tensor_parallel(tasks: &[TaskDevices]) -> bool {
    tasks
        .iter()
        .flat_map(|t| &t.devices)
        .any(|d| d.rank.is_some())
}

fn title(tasks: &[TaskDevices]) -> &'static str {
    if tensor_parallel(tasks) {
        "Per rank (tensor parallel, one probe process per rank: its bytes on its device; a rank stopped when another failed is not listed)"
    } else {
        "Per GPU (device_map=\"auto\": the process's bytes on each, live tensors = max_memory_allocated)"
    }
}

pub fn markdown(out: &mut String, tasks: &[TaskDevices]) {
    if tasks.is_empty() {
        return;
    }
    out.push_str(&format!(
        "#### {}\n\n| {} |\n|---|---|---|{}\n",
        if tensor_parallel(tasks) {
            "Per rank"
        } else {
            "Per GPU"
        },
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
            rank: None,
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
            failed_rank: None,
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

    #[test]
    fn tensor_parallel_ranks_are_told_apart_by_their_rank() {
        let rank = |r: usize| DeviceMemory {
            rank: Some(r),
            ..gpu(0, 8 << 30)
        };
        // two CPU-like ranks on the same device name: the rank says which ran out
        let tasks = vec![TaskDevices {
            label: "concurrency".into(),
            outcome: Outcome::Oom,
            devices: vec![rank(0), rank(1)],
            oom_device: Some(Device::Cuda(0)),
            failed_rank: Some(1),
        }];
        let r = rows(&tasks);
        assert_eq!(
            (r[0][1].as_str(), r[0][2].as_str()),
            ("cuda:0 rank 0", "ok")
        );
        assert_eq!(
            (r[1][1].as_str(), r[1][2].as_str()),
            ("cuda:0 rank 1", "ran out")
        );
        let mut out = String::new();
        text(&mut out, &tasks, &Style { color: false });
        assert!(out.starts_with("Per rank (tensor parallel"), "{out}");
    }
}
