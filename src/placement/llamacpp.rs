//! llama.cpp's layer split (`-ngl N`, `--tensor-split a,b`, `-sm layer`, the default), as
//! `llama_model::load_tensors` assigns it (src/llama-model.cpp):
//! - `i_gpu_start = max(n_layer + 1 − ngl, 0)`, `act_gpu_layers = min(ngl, n_layer + 1)`: the
//!   **last** `ngl` of the `n_layer + 1` slots go to the GPUs, the output layer (`output.weight`,
//!   the final norm) being slot `n_layer` — so `-ngl n_layer` leaves the output on the CPU;
//! - slot `il` goes to the GPU where `upper_bound(cumulative split, (il − i_gpu_start) /
//!   act_gpu_layers)` lands; the split is `--tensor-split` normalised, by default each device's
//!   free memory;
//! - the input layer (`token_embd`) always stays on the CPU;
//! - each layer's KV cache sits with the layer (`--no-kv-offload`: on the CPU).

use crate::dtype::WeightDtype;
use crate::estimate::weights::group_bytes;
use crate::estimate::Estimate;
use crate::model::Spec;

use super::accelerate::Place;
use super::{finish_with, parts_and_tower, priced, Devices, Fix, Placement};

/// The device of each of the `n_layer + 1` slots (the layers, then the output layer).
pub fn slots(n_layer: u64, ngl: u64, split: &[f64]) -> Vec<Place> {
    let total = n_layer.saturating_add(1);
    let act = if split.is_empty() { 0 } else { ngl.min(total) };
    let start = total.saturating_sub(ngl);
    let sum: f64 = split.iter().sum();
    let mut cumulative = Vec::with_capacity(split.len());
    let mut acc = 0.0;
    for s in split {
        acc += s;
        cumulative.push(if sum > 0.0 { acc / sum } else { 0.0 });
    }
    (0..total)
        .map(|il| {
            if il < start || il - start >= act {
                return Place::Cpu;
            }
            let x = (il - start) as f64 / act as f64;
            let gpu = cumulative.iter().take_while(|&&c| c <= x).count();
            Place::Gpu(gpu.min(split.len().saturating_sub(1)) as u32)
        })
        .collect()
}

/// How the layers were asked to split: `-ngl`, `--tensor-split`, `--no-kv-offload`.
#[derive(Debug, Clone)]
pub struct Split {
    pub ngl: u64,
    pub tensor_split: Vec<f64>,
    pub kv_offload: bool,
}

impl Split {
    pub fn flags(&self) -> String {
        let ts: Vec<String> = self.tensor_split.iter().map(|x| format!("{x}")).collect();
        let mut f = format!("-ngl {}", self.ngl);
        if self.tensor_split.len() > 1 {
            f.push_str(&format!(" --tensor-split {}", ts.join(",")));
        }
        if !self.kv_offload {
            f.push_str(" --no-kv-offload");
        }
        f
    }
}

/// Each device's table for llama.cpp's layer split of `spec` in `dtype`.
pub fn plan_layers(
    spec: &Spec,
    dtype: WeightDtype,
    d: &Devices,
    s: &Split,
    e: &Estimate,
) -> Placement {
    let (real, tower) = parts_and_tower(spec, |t| group_bytes(spec, t, dtype));
    // The mmproj (the vision tower) and its CLIP compute buffer (the vision encoder row) sit on
    // the first GPU whatever -ngl says: tools/mtmd/clip.cpp initialises its backend with the
    // first device of type GPU (`ggml_backend_init_by_type`), on the CPU without one.
    let mmproj_at = if d.gpus.is_empty() {
        Place::Cpu
    } else {
        Place::Gpu(0)
    };
    let mmproj = tower > 0 || e.vision_encoder > 0;
    let n = spec.num_layers;
    let at = slots(n, s.ngl, &s.tensor_split);
    let kv_per_layer = e.kv_cache / n.max(1);
    let mut places: Vec<Place> = (0..d.gpus.len() as u32).map(Place::Gpu).collect();
    places.push(Place::Cpu);
    let mut devices = Vec::new();
    for place in places {
        let layers = at[..n as usize].iter().filter(|p| **p == place).count() as u64;
        let mut holds = Vec::new();
        if layers > 0 {
            holds.push(format!(
                "{layers} layer{}",
                if layers == 1 { "" } else { "s" }
            ));
        }
        let mut weights = layers.saturating_mul(real.layer);
        if at.last() == Some(&place) {
            holds.push("output".into());
            weights = weights.saturating_add(real.head).saturating_add(real.norm);
        }
        if place == Place::Cpu {
            holds.push("token_embd".into());
            weights = weights.saturating_add(real.embed);
        }
        let holds_mmproj = mmproj && place == mmproj_at;
        if holds_mmproj {
            holds.push("mmproj".into());
            weights = weights.saturating_add(tower);
        }
        let gpu = matches!(place, Place::Gpu(_));
        // the cache sits with its layer; with --no-kv-offload all of it stays on the CPU
        let kv_layers = match (s.kv_offload, gpu) {
            (true, _) => layers,
            (false, true) => 0,
            (false, false) => n,
        };
        let kv = kv_layers.saturating_mul(kv_per_layer);
        let capacity = match place {
            Place::Gpu(i) => d.gpus.get(i as usize).copied().unwrap_or(0),
            _ => d.host_ram.unwrap_or(0),
        };
        let mut row = priced(place, capacity, layers, weights, kv, holds, e);
        if matches!(place, Place::Gpu(_)) {
            // llama.cpp's own margin: it allocates its buffers once (estimate::llamacpp).
            row.set_margin(crate::estimate::llamacpp::safety_margin(capacity));
        }
        if holds_mmproj {
            row.add_activations(e.vision_encoder);
        }
        devices.push(row);
    }
    let on_gpus = at[..n as usize]
        .iter()
        .filter(|p| matches!(p, Place::Gpu(_)))
        .count() as u64;
    finish_with(spec, d, devices, on_gpus, "llama.cpp", s.flags())
}

/// The most layers that fit: the largest `-ngl` whose every GPU row stays non-negative, with
/// the split asked (by default each card's size, as llama.cpp's free-memory split).
pub fn fitting_ngl(
    spec: &Spec,
    dtype: WeightDtype,
    d: &Devices,
    s: &Split,
    e: &Estimate,
) -> Option<Fix> {
    fitting_layers(spec, dtype, d, s, e).map(|p| Fix::of(&p))
}

/// The placement of the largest `-ngl` that fits (what `fitting_ngl` prices).
pub fn fitting_layers(
    spec: &Spec,
    dtype: WeightDtype,
    d: &Devices,
    s: &Split,
    e: &Estimate,
) -> Option<Placement> {
    (0..=spec.num_layers.saturating_add(1))
        .rev()
        .find_map(|ngl| {
            let tried = Split { ngl, ..s.clone() };
            Some(plan_layers(spec, dtype, d, &tried, e)).filter(|p| p.runs_out.is_none())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_ngl_slots_go_to_the_gpus_and_the_output_is_the_last_slot() {
        // 32 layers, -ngl 32: layer 0 stays on the CPU with the output on GPU 0
        let s = slots(32, 32, &[1.0]);
        assert_eq!(s.len(), 33);
        assert_eq!(s[0], Place::Cpu);
        assert!(s[1..].iter().all(|p| *p == Place::Gpu(0)));
        // -ngl 999: everything
        assert!(slots(32, 999, &[1.0]).iter().all(|p| *p == Place::Gpu(0)));
        // -ngl 0 or no GPU: nothing
        assert!(slots(32, 0, &[1.0]).iter().all(|p| *p == Place::Cpu));
        assert!(slots(32, 99, &[]).iter().all(|p| *p == Place::Cpu));
    }

    #[test]
    fn tensor_split_cuts_at_the_cumulative_share() {
        // 80 layers + output over 1:1 → 41 slots (0..=40 of 81 → x < 0.5) on GPU 0, 40 on GPU 1
        let s = slots(80, 999, &[1.0, 1.0]);
        let g0 = s.iter().filter(|p| **p == Place::Gpu(0)).count();
        assert_eq!(g0, 41);
        assert_eq!(s[80], Place::Gpu(1));
        // 3:1
        let s = slots(80, 999, &[3.0, 1.0]);
        assert_eq!(s.iter().filter(|p| **p == Place::Gpu(1)).count(), 20);
    }
}
