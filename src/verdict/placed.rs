//! The verdict of a placement over several devices: the first device whose table goes below zero
//! is the one that runs out, and what fills it names the cause.

use crate::placement::accelerate::Place;
use crate::placement::{show, DeviceShare, Placement};
use crate::verdict::{Cause, Evidence, Stage, Verdict};

/// One line per device: what it holds and what is left.
fn line(s: &DeviceShare) -> Evidence {
    let what = if s.holds.is_empty() {
        "nothing".to_string()
    } else {
        s.holds.join(", ")
    };
    let text = match s.device {
        Place::Disk => format!("disk: {what} ({} of weights)", show(s.weights_bytes)),
        Place::Cpu => format!(
            "cpu: {what} ({} of weights in {} of host RAM)",
            show(s.weights_bytes),
            show(s.capacity_bytes)
        ),
        Place::Gpu(_) => format!(
            "{}: {what} — weights {}, KV cache {}, activations {}, runtime {}, margin {}; {} {}",
            s.label(),
            show(s.weights_bytes),
            show(s.kv_cache_bytes),
            show(s.activations_bytes),
            show(s.runtime_bytes),
            show(s.margin_bytes),
            show(s.free_bytes.unsigned_abs()),
            if s.free_bytes < 0 { "short" } else { "free" },
        ),
    };
    Evidence::bytes(text, s.free_bytes.unsigned_abs())
}

/// Fits when every GPU and the host keep a non-negative remainder; else the first device short.
pub fn from_placement(p: &Placement) -> Verdict {
    let evidence: Vec<Evidence> = p.devices.iter().map(line).collect();
    let gpus = p
        .devices
        .iter()
        .filter(|s| matches!(s.device, Place::Gpu(_)))
        .count();
    let offload = if p.layers_on_gpus < p.layers_total {
        format!(
            "; {} of {} layers on the GPU(s), {} of weights offloaded to host RAM{}",
            p.layers_on_gpus,
            p.layers_total,
            show(p.host_weights_bytes),
            if p.disk_weights_bytes > 0 {
                format!(" and {} to disk", show(p.disk_weights_bytes))
            } else {
                String::new()
            }
        )
    } else {
        String::new()
    };
    let fix = p.fix.as_ref().map_or(String::new(), |f| {
        format!(
            ". With {} it fits ({} of {} layers on the GPUs)",
            f.load_with, f.layers_on_gpus, p.layers_total
        )
    });
    if let Some(why) = &p.refused {
        return Verdict {
            record: None,
            rule: None,
            cause: Cause::Weights,
            stage: Stage::Load,
            confidence: 0.85,
            summary: format!("{why}{fix}"),
            evidence,
            contributing: Vec::new(),
        };
    }
    let Some(short) = p
        .runs_out
        .and_then(|d| p.devices.iter().find(|s| s.device == d))
    else {
        return Verdict {
            record: None,
            rule: None,
            cause: Cause::None,
            stage: Stage::Unknown,
            confidence: 0.8,
            summary: format!("fits on {gpus} GPU(s) with {}{offload}", p.load_with),
            evidence,
            contributing: Vec::new(),
        };
    };
    let (cause, stage) = cause_of(short);
    Verdict {
        record: None,
        rule: None,
        cause,
        stage,
        confidence: 0.8,
        summary: format!(
            "{} runs out with {}: it holds {} and is {} short{offload}{fix}",
            short.label(),
            p.load_with,
            short.holds.join(", "),
            show(short.free_bytes.unsigned_abs())
        ),
        evidence,
        contributing: Vec::new(),
    }
}

fn cause_of(s: &DeviceShare) -> (Cause, Stage) {
    if s.device == Place::Cpu {
        return (Cause::HostMemory, Stage::Load);
    }
    let fixed = s
        .weights_bytes
        .saturating_add(s.runtime_bytes)
        .saturating_add(s.margin_bytes);
    // The weights when they (with the runtime and margin) do not fit at all; else what the
    // workload adds on top of them, the larger of the KV cache and the activations.
    let cause = if fixed > s.capacity_bytes {
        Cause::Weights
    } else if s.kv_cache_bytes >= s.activations_bytes {
        Cause::KvCache
    } else {
        Cause::Activations
    };
    let stage = if fixed > s.capacity_bytes {
        Stage::Load
    } else if s.kv_cache_bytes >= s.activations_bytes {
        Stage::LongGeneration
    } else {
        Stage::FirstToken
    };
    (cause, stage)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(weights: u64, kv: u64, acts: u64) -> DeviceShare {
        let cap = 80u64 << 30;
        let need = weights + kv + acts + (3 << 30);
        DeviceShare {
            device: Place::Gpu(0),
            capacity_bytes: cap,
            max_memory_bytes: cap,
            layers: 80,
            weights_bytes: weights,
            kv_cache_bytes: kv,
            activations_bytes: acts,
            runtime_bytes: 2 << 30,
            margin_bytes: 1 << 30,
            free_bytes: cap as i64 - need as i64,
            holds: vec!["80 layers".into()],
            rank: None,
        }
    }

    #[test]
    fn weights_that_fit_leave_the_cause_to_what_the_workload_adds() {
        // 48 GiB of weights fit the 80 GiB card: the 35 GiB cache on top is what runs it out
        assert_eq!(
            cause_of(&gpu(48 << 30, 35 << 30, 1 << 30)),
            (Cause::KvCache, Stage::LongGeneration)
        );
        assert_eq!(
            cause_of(&gpu(70 << 30, 1 << 30, 9 << 30)),
            (Cause::Activations, Stage::FirstToken)
        );
        // weights past the card: the weights, at load
        assert_eq!(
            cause_of(&gpu(90 << 30, 1 << 30, 1 << 30)),
            (Cause::Weights, Stage::Load)
        );
    }
}
