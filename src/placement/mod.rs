//! Where each part of a model lands when it is spread over several GPUs and the host: the rules
//! of each engine's placement, and a table per device. `accelerate.rs` is transformers'
//! `device_map="auto"`. Uses the `Spec` and the estimate; commands/plan.rs calls it.

pub mod accelerate;

use serde::Serialize;

use crate::dtype::WeightDtype;
use crate::estimate::weights::group_bytes;
use crate::estimate::{safety_margin, Estimate};
use crate::model::{Role, Spec, TensorGroup};
use crate::units::{Bytes, GIB, MIB};
use accelerate::{balanced_memory, device_of, infer_device_map, MaxMemory, Node, Place, Strategy};

/// One device's share of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceShare {
    pub device: Place,
    /// Memory of the device (a GPU's total, the host RAM offered, none for the disk).
    pub capacity_bytes: u64,
    /// What accelerate may put there (`max_memory` after its own caps).
    pub max_memory_bytes: u64,
    pub layers: u64,
    pub weights_bytes: u64,
    pub kv_cache_bytes: u64,
    pub activations_bytes: u64,
    /// CUDA context, library workspaces and the allocator's rounding (every GPU has its own).
    pub runtime_bytes: u64,
    pub margin_bytes: u64,
    /// capacity − everything above; negative: this device runs out.
    pub free_bytes: i64,
    pub holds: Vec<String>,
}

/// The placement of one model and workload over the devices.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    pub engine: &'static str,
    pub strategy: Strategy,
    pub layers_total: u64,
    pub layers_on_gpus: u64,
    /// Weights accelerate keeps in host RAM (streamed to GPU 0 layer by layer) and on disk.
    pub host_weights_bytes: u64,
    pub disk_weights_bytes: u64,
    pub devices: Vec<DeviceShare>,
    /// The first GPU whose table goes below zero.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_out: Option<Place>,
    /// The `from_pretrained` arguments that give this placement.
    pub load_with: String,
    /// When a GPU runs out: a `max_memory` that moves layers off it, priced again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<Fix>,
    pub notes: Vec<String>,
}

/// What each part of a decoder weighs: per accelerate (the sizes it places by) and for real.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    pub embed: u64,
    pub layer: u64,
    pub norm: u64,
    pub head: u64,
}

/// The parts' bytes with `bytes` pricing each tensor group; the decoder layers share what is
/// neither embeddings, head nor final norm (the mean, for models whose layers differ).
pub fn parts(spec: &Spec, bytes: impl Fn(&TensorGroup) -> u64) -> Parts {
    let groups = spec.tensors();
    let of = |role: Role| -> u64 { groups.iter().filter(|t| t.role == role).map(&bytes).sum() };
    let norm = bytes(&TensorGroup {
        role: Role::Vector,
        rows: 1,
        cols: spec.hidden_size,
        count: 1,
        routed: false,
    });
    let body: u64 = groups
        .iter()
        .filter(|t| !matches!(t.role, Role::Embedding | Role::LmHead))
        .map(&bytes)
        .sum();
    let layer = body.saturating_sub(norm) / spec.num_layers.max(1);
    let embed = of(Role::Embedding);
    let head = if spec.tie_word_embeddings {
        embed
    } else {
        of(Role::LmHead)
    };
    Parts {
        embed,
        layer,
        norm,
        head,
    }
}

/// transformers' `param_element_size`: bitsandbytes counts a quantized linear weight at 0.5
/// (4-bit) or 1 byte (8-bit) per element, everything else at its dtype's width; the other
/// formats at their real bytes.
pub fn placement_bytes(spec: &Spec, dtype: WeightDtype) -> impl Fn(&TensorGroup) -> u64 + '_ {
    move |t: &TensorGroup| match dtype {
        WeightDtype::Nf4 { .. } | WeightDtype::Fp4 { .. } if t.role.is_linear() => t.params() / 2,
        WeightDtype::Int8 if t.role.is_linear() => t.params(),
        WeightDtype::Nf4 { .. } | WeightDtype::Fp4 { .. } | WeightDtype::Int8 => t.params() * 2,
        _ => group_bytes(spec, t, dtype),
    }
}

/// Whether accelerate sees the tie (transformers' own path does; accelerate's
/// `infer_auto_device_map` called directly on a transformers 5 meta model does not, and counts
/// lm_head as a second copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ties {
    Seen,
    Unseen,
}

/// The module tree of a `*ForCausalLM` as transformers registers it.
pub fn module_tree(spec: &Spec, p: Parts, ties: Ties) -> (Node, Vec<accelerate::TieGroup>) {
    let tied = spec.tie_word_embeddings;
    let layers = (0..spec.num_layers)
        .map(|i| Node {
            no_split: true,
            ..Node::leaf(format!("model.layers.{i}"), p.layer)
        })
        .collect();
    let model = Node::parent(
        "model",
        vec![
            Node::leaf("model.embed_tokens", p.embed),
            Node::parent("model.layers", layers, false),
            Node::leaf("model.norm", p.norm),
            // inv_freq, an f32 buffer of head_dim / 2
            Node::leaf("model.rotary_emb", spec.head_dim / 2 * 4),
        ],
        false,
    );
    let head = if tied && ties == Ties::Seen {
        0
    } else {
        p.head
    };
    let root = Node::parent("", vec![model, Node::leaf("lm_head", head)], false);
    let groups = if tied && ties == Ties::Seen {
        vec![vec![
            "lm_head.weight".to_string(),
            "model.embed_tokens.weight".to_string(),
        ]]
    } else {
        Vec::new()
    };
    (root, groups)
}

/// What a placement needs besides the model: the GPUs' totals, the host RAM, and whether the
/// user passed `max_memory` (else transformers takes 90 % of one GPU and of the host RAM).
#[derive(Debug, Clone)]
pub struct Devices {
    pub gpus: Vec<u64>,
    pub host_ram: Option<u64>,
    pub max_memory: Option<Vec<u64>>,
}

/// transformers' `from_pretrained(device_map="auto")` for `spec` in `dtype`: which device takes
/// which layers, the `max_memory` it computed, and every module's device.
pub fn auto_device_map(
    spec: &Spec,
    dtype: WeightDtype,
    d: &Devices,
    ties: Ties,
) -> (MaxMemory, Vec<(String, Place)>) {
    let p = parts(spec, placement_bytes(spec, dtype));
    let (root, groups) = module_tree(spec, p, ties);
    let user_set = d.max_memory.is_some();
    // max_memory never passes the card
    let gpus = d.max_memory.clone().unwrap_or_else(|| d.gpus.clone());
    let mut mm = MaxMemory {
        gpus: gpus.iter().map(|&b| b as f64).collect(),
        cpu: d
            .host_ram
            .map(|h| h as f64 * if user_set { 1.0 } else { 0.9 }),
    };
    // a mean over ~10 leaf modules per layer: never above the decoder layer
    let mean_leaf = p.layer / 10;
    mm = balanced_memory(&root, mm, user_set, false, mean_leaf);
    if matches!(
        dtype,
        WeightDtype::Nf4 { .. } | WeightDtype::Fp4 { .. } | WeightDtype::Int8
    ) {
        mm.gpus.iter_mut().for_each(|g| *g *= 0.9);
        if let Some(c) = mm.cpu.as_mut() {
            *c *= 0.9;
        }
    }
    let map = infer_device_map(&root, &mm, &groups);
    (mm, map)
}

/// The per-device table for `device_map="auto"` with the workload's estimate `e` (priced on one
/// device): weights where accelerate put them, the KV cache with its layers, activations on
/// every GPU that runs layers, a CUDA context per GPU.
pub fn plan_auto(spec: &Spec, dtype: WeightDtype, d: &Devices, e: &Estimate) -> Placement {
    let (mm, map) = auto_device_map(spec, dtype, d, Ties::Seen);
    let real = parts(spec, |t| group_bytes(spec, t, dtype));
    let layers_total = spec.num_layers;
    let at = |m: &str| device_of(&map, m).unwrap_or(Place::Disk);
    let mut places: Vec<Place> = (0..d.gpus.len() as u32).map(Place::Gpu).collect();
    places.extend([Place::Cpu, Place::Disk]);
    let kv_per_layer = e.kv_cache / layers_total.max(1);
    let offloaded =
        (0..layers_total).any(|i| !matches!(at(&format!("model.layers.{i}")), Place::Gpu(_)));
    let mut devices = Vec::new();
    for place in places {
        let layers = (0..layers_total)
            .filter(|i| at(&format!("model.layers.{i}")) == place)
            .count() as u64;
        let mut holds = Vec::new();
        let mut weights = layers.saturating_mul(real.layer);
        for (m, bytes, label) in [
            ("model.embed_tokens", real.embed, "embeddings"),
            ("model.norm", real.norm, "final norm"),
            ("lm_head", real.head, "lm_head"),
        ] {
            if at(m) == place {
                holds.push(label.to_string());
                if !(m == "lm_head" && spec.tie_word_embeddings) {
                    weights = weights.saturating_add(bytes);
                }
            }
        }
        if layers > 0 {
            holds.insert(0, format!("{layers} layers"));
        }
        let gpu = matches!(place, Place::Gpu(_));
        if gpu && place == Place::Gpu(0) && offloaded {
            // accelerate's hooks bring each offloaded layer onto GPU 0 to run it
            holds.push("offloaded layer in transit".into());
            weights = weights.saturating_add(real.layer);
        }
        let capacity = match place {
            Place::Gpu(i) => d.gpus.get(i as usize).copied().unwrap_or(0),
            Place::Cpu => d.host_ram.unwrap_or(0),
            Place::Disk => 0,
        };
        if !gpu && layers == 0 && holds.is_empty() {
            continue;
        }
        let used_gpu = gpu && (layers > 0 || !holds.is_empty());
        let kv = if gpu {
            layers.saturating_mul(kv_per_layer)
        } else {
            0
        };
        // offloaded layers compute on GPU 0: their cache lives there
        let kv = if place == Place::Gpu(0) {
            kv.saturating_add(
                (layers_total - layers_on(&map, layers_total)).saturating_mul(kv_per_layer),
            )
        } else {
            kv
        };
        let acts = if used_gpu { e.activations } else { 0 };
        let runtime = if gpu {
            e.runtime.saturating_add(e.allocator)
        } else {
            0
        };
        let margin = if gpu { safety_margin(capacity) } else { 0 };
        let need = weights
            .saturating_add(kv)
            .saturating_add(acts)
            .saturating_add(runtime)
            .saturating_add(margin);
        let free = if place == Place::Disk {
            0
        } else {
            i64::try_from(capacity)
                .unwrap_or(i64::MAX)
                .saturating_sub(i64::try_from(need).unwrap_or(i64::MAX))
        };
        let max_memory = match place {
            Place::Gpu(i) => mm.gpus.get(i as usize).copied().unwrap_or(0.0) as u64,
            Place::Cpu => mm.cpu.unwrap_or(0.0) as u64,
            Place::Disk => 0,
        };
        devices.push(DeviceShare {
            device: place,
            capacity_bytes: capacity,
            max_memory_bytes: max_memory,
            layers,
            weights_bytes: weights,
            kv_cache_bytes: kv,
            activations_bytes: acts,
            runtime_bytes: runtime,
            margin_bytes: margin,
            free_bytes: free,
            holds,
        });
    }
    finish(spec, d, devices, layers_on(&map, layers_total))
}

/// A `max_memory` that makes every GPU's table fit, found by placing and cutting the budget of
/// the device that runs out by its shortfall (at most 16 tries); `None` when no cut helps.
pub fn fitting_max_memory(
    spec: &Spec,
    dtype: WeightDtype,
    d: &Devices,
    e: &Estimate,
) -> Option<(Vec<u64>, Placement)> {
    let first = plan_auto(spec, dtype, d, e);
    let mut budgets: Vec<u64> = first
        .devices
        .iter()
        .filter(|s| matches!(s.device, Place::Gpu(_)))
        .map(|s| {
            s.capacity_bytes.saturating_sub(
                s.kv_cache_bytes + s.activations_bytes + s.runtime_bytes + s.margin_bytes,
            )
        })
        .collect();
    for _ in 0..16 {
        let tried = Devices {
            max_memory: Some(budgets.clone()),
            ..d.clone()
        };
        let p = plan_auto(spec, dtype, &tried, e);
        match p.runs_out {
            None => return Some((budgets, p)),
            Some(Place::Gpu(i)) => {
                let s = p.devices.iter().find(|s| s.device == Place::Gpu(i))?;
                let b = budgets.get_mut(i as usize)?;
                let cut = s.free_bytes.unsigned_abs().max(256 << 20);
                *b = b.checked_sub(cut)?;
            }
            Some(_) => return None,
        }
    }
    None
}

fn layers_on(map: &[(String, Place)], n: u64) -> u64 {
    (0..n)
        .filter(|i| {
            matches!(
                device_of(map, &format!("model.layers.{i}")),
                Some(Place::Gpu(_))
            )
        })
        .count() as u64
}

fn finish(spec: &Spec, d: &Devices, devices: Vec<DeviceShare>, on_gpus: u64) -> Placement {
    let sum = |p: Place| {
        devices
            .iter()
            .filter(|s| s.device == p)
            .map(|s| s.weights_bytes)
            .sum::<u64>()
    };
    let runs_out = devices
        .iter()
        .find(|s| s.free_bytes < 0 && s.device != Place::Disk)
        .map(|s| s.device);
    let mut notes = Vec::new();
    if on_gpus < spec.num_layers {
        notes.push(format!(
            "{on_gpus} of {} layers fit on the GPU(s); the other {} are offloaded and copied to \
             GPU 0 for every forward pass, so each token reads them over PCIe (an estimate: at \
             ~25 GB/s, ~{:.0} ms per token for those weights alone)",
            spec.num_layers,
            spec.num_layers - on_gpus,
            (sum(Place::Cpu) + sum(Place::Disk)) as f64 / 25e9 * 1e3
        ));
    }
    notes.push(
        "activations are counted on every GPU that runs layers (device_map runs them one device at \
         a time, so each needs room for one layer's work); the KV cache sits with its layers"
            .into(),
    );
    Placement {
        engine: "transformers",
        strategy: Strategy::Balanced,
        layers_total: spec.num_layers,
        layers_on_gpus: on_gpus,
        host_weights_bytes: sum(Place::Cpu),
        disk_weights_bytes: sum(Place::Disk),
        load_with: load_with(d),
        fix: None,
        runs_out,
        devices,
        notes,
    }
}

/// The `from_pretrained` arguments of a placement: `device_map="auto"`, and `max_memory` when
/// one was set (each GPU in GiB when whole, else MiB; the host RAM offered).
fn load_with(d: &Devices) -> String {
    let Some(mm) = &d.max_memory else {
        return "device_map=\"auto\"".into();
    };
    let size = |b: u64| {
        if b % GIB == 0 {
            format!("\"{}GiB\"", b / GIB)
        } else {
            format!("\"{}MiB\"", b / MIB)
        }
    };
    let mut parts: Vec<String> = mm
        .iter()
        .enumerate()
        .map(|(i, &b)| format!("{i}: {}", size(b)))
        .collect();
    if let Some(h) = d.host_ram {
        parts.push(format!("\"cpu\": {}", size(h)));
    }
    format!("device_map=\"auto\", max_memory={{{}}}", parts.join(", "))
}

/// What a fitting `max_memory` changes: the arguments, and each GPU's remainder then.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fix {
    pub load_with: String,
    pub layers_on_gpus: u64,
    pub free_bytes: Vec<(Place, i64)>,
}

impl Fix {
    pub fn of(p: &Placement) -> Fix {
        Fix {
            load_with: p.load_with.clone(),
            layers_on_gpus: p.layers_on_gpus,
            free_bytes: p
                .devices
                .iter()
                .filter(|s| matches!(s.device, Place::Gpu(_)))
                .map(|s| (s.device, s.free_bytes))
                .collect(),
        }
    }
}

/// A size as reports print it.
pub fn show(b: u64) -> String {
    Bytes(b).to_string()
}
