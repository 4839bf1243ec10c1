//! Remedies that spread the model over more GPUs of the same card, each priced per device by the
//! engine's own placement: vLLM's `--tensor-parallel-size` (and pipeline stages across nodes
//! past one node), transformers' `device_map="auto"` with a `max_memory` that fits, llama.cpp's
//! `-ngl N --tensor-split 1,1`.

use super::remedy::{Change, DevicePeak, Remedy};
use crate::estimate::{Engine, Estimate, Profile, Workload};
use crate::model::Spec;
use crate::placement::accelerate::{Place, Strategy};
use crate::placement::llamacpp::{fitting_layers, plan_layers, Split};
use crate::placement::vllm::{larger_layouts, plan_parallel, Parallel};
use crate::placement::{fitting_max_memory, plan_auto, Devices, Placement};

/// The most GPUs of one card a remedy proposes in one node.
const NODE: u64 = 8;

/// What more GPUs of a `card`-byte card would do for a workload that does not fit one
/// (`est` is its one-card estimate): the fewest GPUs that hold it whole, per engine, and for
/// llama.cpp on two GPUs the most layers that fit when not all do (the rest in `host_ram`).
pub fn across_gpus(
    spec: &Spec,
    w: &Workload,
    card: u64,
    host_ram: Option<u64>,
    est: &Estimate,
) -> Vec<Remedy> {
    let on = |n: u64| Devices {
        gpus: vec![card; n as usize],
        host_ram,
        max_memory: None,
        context: est.runtime,
        strategy: Strategy::Balanced,
    };
    match w.engine {
        Engine::Vllm => vllm(spec, w, card, est).into_iter().collect(),
        Engine::Transformers | Engine::TransformersEager if spec.gguf.is_none() => {
            transformers(spec, w, &on, est).into_iter().collect()
        }
        Engine::LlamaCpp => llamacpp(spec, w, &on, est),
        _ => Vec::new(),
    }
}

fn peaks(p: &Placement) -> Vec<DevicePeak> {
    p.devices
        .iter()
        .filter(|s| matches!(s.device, Place::Gpu(_)))
        .map(|s| DevicePeak {
            device: s.label(),
            peak_bytes: u64::try_from(i128::from(s.capacity_bytes) - i128::from(s.free_bytes))
                .unwrap_or(u64::MAX),
            capacity_bytes: s.capacity_bytes,
            free_bytes: s.free_bytes,
        })
        .collect()
}

fn vllm(spec: &Spec, w: &Workload, card: u64, est: &Estimate) -> Option<Remedy> {
    let one = Parallel {
        tensor: 1,
        pipeline: 1,
        nodes: 1,
        gpus_per_node: NODE,
        gpu_memory_utilization: Profile::of(Engine::Vllm).memory_fraction,
    };
    larger_layouts(spec, &one).into_iter().find_map(|l| {
        let p = plan_parallel(spec, w, &vec![card; l.ranks() as usize], &l);
        p.runs_out.is_none().then(|| {
            let mut how = p.load_with.clone();
            if l.nodes > 1 {
                how.push_str(&format!(
                    " on {} nodes × {} GPUs (Ray: TP within a node, PP across nodes)",
                    l.nodes, l.gpus_per_node
                ));
            }
            Remedy::spread(Change::MoreGpus(l.ranks()), how, est.total, peaks(&p))
        })
    })
}

/// The fewest GPUs (2 to 8) on which `device_map="auto"` keeps every layer on the GPUs, with
/// the `max_memory` llm-oom finds when the default placement runs a GPU out.
fn transformers(
    spec: &Spec,
    w: &Workload,
    on: &dyn Fn(u64) -> Devices,
    est: &Estimate,
) -> Option<Remedy> {
    (2..=NODE).find_map(|n| {
        let d = on(n);
        let whole = |p: &Placement| {
            p.runs_out.is_none()
                && p.refused.is_none()
                && p.layers_on_gpus == p.layers_total
                && p.host_weights_bytes == 0
                && p.disk_weights_bytes == 0
        };
        let first = plan_auto(spec, w.weight_dtype, &d, est);
        let p = if whole(&first) {
            first
        } else {
            fitting_max_memory(spec, w.weight_dtype, &d, est)
                .map(|(_, p)| p)
                .filter(whole)?
        };
        Some(Remedy::spread(
            Change::MoreGpus(n),
            format!("from_pretrained(..., {})", p.load_with),
            est.total,
            peaks(&p),
        ))
    })
}

/// `-ngl 999 --tensor-split 1,…,1` on the fewest GPUs that hold every layer; when two do not,
/// also the largest `-ngl` two GPUs hold (the rest on the CPU).
fn llamacpp(
    spec: &Spec,
    w: &Workload,
    devices: &dyn Fn(u64) -> Devices,
    est: &Estimate,
) -> Vec<Remedy> {
    let mut out = Vec::new();
    let split = |n: u64| Split {
        ngl: 999,
        tensor_split: vec![1.0; n as usize],
        kv_offload: true,
    };
    for n in 2..=NODE {
        let p = plan_layers(spec, w.weight_dtype, &devices(n), &split(n), est);
        if p.runs_out.is_none() {
            out.push(Remedy::spread(
                Change::MoreGpus(n),
                p.load_with.clone(),
                est.total,
                peaks(&p),
            ));
            break;
        }
        if n == 2 {
            if let Some(part) = fitting_layers(spec, w.weight_dtype, &devices(2), &split(2), est)
                .filter(|p| p.layers_on_gpus > 0)
            {
                let mut r = Remedy::spread(
                    Change::MoreGpus(2),
                    part.load_with.clone(),
                    est.total,
                    peaks(&part),
                );
                r.action.push_str(&format!(
                    ", {} of {} layers on the GPUs (the rest on the CPU)",
                    part.layers_on_gpus, part.layers_total
                ));
                out.push(r);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::{KvDtype, WeightDtype};
    use crate::estimate::estimate;

    fn spec(id: &str) -> Spec {
        crate::model::presets::from_file(id)
    }

    fn work(engine: Engine, dtype: WeightDtype) -> Workload {
        Workload {
            llama: Default::default(),
            prompt_tokens: 2048,
            max_new_tokens: 256,
            batch: 1,
            weight_dtype: dtype,
            kv_dtype: dtype.compute_kv_dtype(),
            engine,
        }
    }

    #[test]
    fn a_70b_in_bf16_on_one_80_gib_card_gets_tp_2_with_the_context_its_ranks_hold() {
        // TP 2 puts 65 GiB of weights on each 80 GiB card: it fits the workload, but not one
        // sequence of the model's 131,072 tokens, so vLLM needs a --max-model-len
        let s = spec("llama-3.3-70b-instruct");
        let w = work(Engine::Vllm, WeightDtype::Bf16);
        let e = estimate(&s, &w, 80 << 30);
        let r = across_gpus(&s, &w, 80 << 30, None, &e);
        assert_eq!(r.len(), 1);
        assert!(r[0].fits());
        assert_eq!(r[0].change, Change::MoreGpus(2));
        assert!(
            r[0].how
                .starts_with("--tensor-parallel-size 2 --max-model-len "),
            "{}",
            r[0].how
        );
        assert_eq!(r[0].per_device.len(), 2);
    }

    #[test]
    fn transformers_gets_a_max_memory_that_keeps_every_layer_on_the_gpus() {
        let s = spec("llama-3.3-70b-instruct");
        let w = work(
            Engine::Transformers,
            WeightDtype::Nf4 { double_quant: true },
        );
        let e = estimate(&s, &w, 24 << 30);
        let r = across_gpus(&s, &w, 24 << 30, Some(64 << 30), &e);
        assert_eq!(r.len(), 1);
        assert!(r[0].fits());
        assert!(r[0].how.contains("device_map="), "{}", r[0].how);
        assert!(r[0].per_device.iter().all(|d| d.free_bytes >= 0));
    }

    #[test]
    fn llama_cpp_on_two_cards_gets_the_most_layers_they_hold_and_the_cards_that_hold_all() {
        let s = spec("llama-3.3-70b-instruct");
        let w = Workload {
            llama: Default::default(),
            kv_dtype: KvDtype::F16,
            ..work(Engine::LlamaCpp, "q4_k_m".parse().unwrap())
        };
        let e = estimate(&s, &w, 16 << 30);
        let r = across_gpus(&s, &w, 16 << 30, Some(64 << 30), &e);
        assert_eq!(r.len(), 2, "{r:#?}");
        assert!(r[0].how.starts_with("-ngl ") && r[0].how.ends_with("--tensor-split 1,1"));
        assert!(r[0].action.contains("layers on the GPUs"));
        assert!(r[1].fits());
        assert!(matches!(r[1].change, Change::MoreGpus(n) if n > 2));
    }
}
