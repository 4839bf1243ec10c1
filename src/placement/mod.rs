//! Where each part of a model lands when it is spread over several GPUs and the host: the rules
//! of each engine's placement, and a table per device. `accelerate.rs` is transformers'
//! `device_map="auto"`. Uses the `Spec` and the estimate; commands/plan.rs calls it.

pub mod accelerate;
pub mod llamacpp;
pub mod vllm;

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
    /// Which worker of a parallel engine this GPU is (vLLM's tensor/pipeline ranks, its node).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<vllm::Rank>,
}

impl DeviceShare {
    /// How reports name the device: `cuda:1`, or `node1/cuda:3` across nodes.
    pub fn label(&self) -> String {
        match (&self.rank, self.device) {
            (Some(r), Place::Gpu(_)) if r.nodes > 1 => {
                format!("node{}/cuda:{}", r.node, r.local_gpu)
            }
            (Some(r), Place::Gpu(_)) => format!("cuda:{}", r.local_gpu),
            _ => self.device.to_string(),
        }
    }

    /// Another safety margin for this row (an engine's own), its free bytes moved by the change.
    pub(crate) fn set_margin(&mut self, margin: u64) {
        let signed = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
        self.free_bytes = self
            .free_bytes
            .saturating_add(signed(self.margin_bytes))
            .saturating_sub(signed(margin));
        self.margin_bytes = margin;
    }

    /// Adds `bytes` of compute buffers beside the layers' (llama.cpp's CLIP buffer on the
    /// device that holds the mmproj).
    pub(crate) fn add_activations(&mut self, bytes: u64) {
        self.activations_bytes = self.activations_bytes.saturating_add(bytes);
        self.free_bytes = self
            .free_bytes
            .saturating_sub(i64::try_from(bytes).unwrap_or(i64::MAX));
    }
}

/// The placement of one model and workload over the devices.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    pub engine: &'static str,
    /// transformers' `device_map` strategy; `None` for llama.cpp.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
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
    /// transformers refuses the placement at load (bitsandbytes with anything on the CPU or disk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// When a GPU runs out: a `max_memory` that moves layers off it, priced again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<Fix>,
    /// vLLM's tensor/pipeline layout and what each rank holds of the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel: Option<vllm::ParallelFacts>,
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
    split_parts(spec, bytes, false).0
}

/// [`parts`] with the vision tower apart: the layers share only the language model's body, and
/// the tower's bytes are returned beside (llama.cpp loads it from its own mmproj file, whole, on
/// one device).
pub fn parts_and_tower(spec: &Spec, bytes: impl Fn(&TensorGroup) -> u64) -> (Parts, u64) {
    split_parts(spec, bytes, true)
}

fn split_parts(
    spec: &Spec,
    bytes: impl Fn(&TensorGroup) -> u64,
    tower_apart: bool,
) -> (Parts, u64) {
    let groups = spec.tensors();
    let of = |role: Role| -> u64 { groups.iter().filter(|t| t.role == role).map(&bytes).sum() };
    let norm = bytes(&TensorGroup {
        role: Role::Vector,
        rows: 1,
        cols: spec.hidden_size,
        count: 1,
        routed: false,
    });
    let tower = if tower_apart { of(Role::Vision) } else { 0 };
    let body: u64 = groups
        .iter()
        .filter(|t| !matches!(t.role, Role::Embedding | Role::LmHead))
        .map(&bytes)
        .sum();
    let layer = body.saturating_sub(norm).saturating_sub(tower) / spec.num_layers.max(1);
    let embed = of(Role::Embedding);
    let head = if spec.tie_word_embeddings {
        embed
    } else {
        of(Role::LmHead)
    };
    (
        Parts {
            embed,
            layer,
            norm,
            head,
        },
        tower,
    )
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

/// Where transformers registers a model's modules: the language model's (`model`, or
/// `model.language_model` under a vision-language wrapper such as `Gemma3Model`), and the vision
/// tower's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleNames {
    /// The language model: `{text}.embed_tokens`, `{text}.layers.N`, `{text}.norm`.
    pub text: &'static str,
    /// The vision tower (`model.vision_tower`, Qwen's `model.visual`); `None` for text only.
    pub tower: Option<&'static str>,
    /// The tower's encoder layers, its `_no_split_modules` blocks: `{tower_layers}.N`.
    pub tower_layers: &'static str,
    /// The projector into the language model, beside the tower (Qwen's merger is inside it).
    pub projector: Option<&'static str>,
}

/// The module names of `spec`'s model as transformers 5.17 builds it: a text-only
/// `*ForCausalLM`, or a `*ForConditionalGeneration` whose `*Model` holds `vision_tower`,
/// `multi_modal_projector` and `language_model` in that order (models/gemma3/modeling_gemma3.py
/// `Gemma3Model.__init__`; Qwen-VL's `visual` holds its merger).
pub fn module_names(spec: &Spec) -> ModuleNames {
    if spec.vision.is_empty() {
        return ModuleNames {
            text: "model",
            tower: None,
            tower_layers: "",
            projector: None,
        };
    }
    if spec.architecture.starts_with("qwen") {
        ModuleNames {
            text: "model.language_model",
            tower: Some("model.visual"),
            tower_layers: "model.visual.blocks",
            projector: None,
        }
    } else {
        ModuleNames {
            text: "model.language_model",
            tower: Some("model.vision_tower"),
            tower_layers: "model.vision_tower.encoder.layers",
            projector: Some("model.multi_modal_projector"),
        }
    }
}

/// The tower's encoder layers' bytes: `tower` spread over `layers` (the first ones take the
/// remainder), or `tower` whole when the family gives no layer count.
fn tower_shares(tower: u64, layers: u64) -> Vec<u64> {
    if layers == 0 {
        return vec![tower];
    }
    let (share, rest) = (tower / layers, tower % layers);
    (0..layers).map(|i| share + u64::from(i < rest)).collect()
}

/// The module tree of a `*ForCausalLM` (or a vision-language `*ForConditionalGeneration`) as
/// transformers registers it. A vision tower of `tower` bytes comes first, as in transformers'
/// `Gemma3Model`, so accelerate places it before the text layers: whole where it fits, else
/// split at its encoder layers (`SiglipEncoderLayer` is in `_no_split_modules`). Its bytes,
/// the projector's included, are spread over those layers (the patch embeddings, post norm and
/// projector are ~3 % of Gemma-3's tower); the projector is a module of no bytes after it.
pub fn module_tree(
    spec: &Spec,
    p: Parts,
    tower: u64,
    ties: Ties,
) -> (Node, Vec<accelerate::TieGroup>) {
    let tied = spec.tie_word_embeddings;
    let names = module_names(spec);
    let t = names.text;
    let layers = (0..spec.num_layers)
        .map(|i| Node {
            no_split: true,
            ..Node::leaf(format!("{t}.layers.{i}"), p.layer)
        })
        .collect();
    let text = vec![
        Node::leaf(format!("{t}.embed_tokens"), p.embed),
        Node::parent(format!("{t}.layers"), layers, false),
        Node::leaf(format!("{t}.norm"), p.norm),
        // inv_freq, an f32 buffer of head_dim / 2
        Node::leaf(format!("{t}.rotary_emb"), spec.head_dim / 2 * 4),
    ];
    let model = match names.tower.filter(|_| tower > 0) {
        None => Node::parent("model", text, false),
        Some(name) => {
            let tower_node = if spec.vision_layers == 0 {
                Node::leaf(name, tower)
            } else {
                let blocks = tower_shares(tower, spec.vision_layers)
                    .into_iter()
                    .enumerate()
                    .map(|(i, b)| Node {
                        no_split: true,
                        ..Node::leaf(format!("{}.{i}", names.tower_layers), b)
                    })
                    .collect();
                Node::parent(
                    name,
                    vec![Node::parent(names.tower_layers, blocks, false)],
                    false,
                )
            };
            let mut children = vec![tower_node];
            children.extend(names.projector.map(|n| Node::leaf(n, 0)));
            children.push(Node::parent(t, text, false));
            Node::parent("model", children, false)
        }
    };
    let head = if tied && ties == Ties::Seen {
        0
    } else {
        p.head
    };
    let root = Node::parent("", vec![model, Node::leaf("lm_head", head)], false);
    let groups = if tied && ties == Ties::Seen {
        vec![vec![
            "lm_head.weight".to_string(),
            format!("{t}.embed_tokens.weight"),
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
    /// What the CUDA context already holds when accelerate reads `mem_get_info` (its default
    /// budget is the free memory then).
    pub context: u64,
    pub strategy: Strategy,
}

/// transformers' `from_pretrained(device_map="auto")` for `spec` in `dtype`: which device takes
/// which layers, the `max_memory` it computed, and every module's device.
pub fn auto_device_map(
    spec: &Spec,
    dtype: WeightDtype,
    d: &Devices,
    ties: Ties,
) -> (MaxMemory, Vec<(String, Place)>) {
    let (p, tower) = parts_and_tower(spec, placement_bytes(spec, dtype));
    let (root, groups) = module_tree(spec, p, tower, ties);
    let user_set = d.max_memory.is_some();
    let gpus = d
        .max_memory
        .clone()
        .unwrap_or_else(|| d.gpus.iter().map(|g| g.saturating_sub(d.context)).collect());
    let mut mm = MaxMemory {
        gpus: gpus.iter().map(|&b| b as f64).collect(),
        cpu: d
            .host_ram
            .map(|h| h as f64 * if user_set { 1.0 } else { 0.9 }),
    };
    // a mean over ~10 leaf modules per layer: never above the decoder layer
    let mean_leaf = p.layer / 10;
    if d.strategy != Strategy::Sequential {
        let low_zero = d.strategy == Strategy::BalancedLow0;
        mm = balanced_memory(&root, mm, user_set, low_zero, mean_leaf);
    }
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
    let (real, tower) = parts_and_tower(spec, |t| group_bytes(spec, t, dtype));
    let names = module_names(spec);
    let t = names.text;
    let (embed, norm) = (format!("{t}.embed_tokens"), format!("{t}.norm"));
    let layers_total = spec.num_layers;
    let at = |m: &str| device_of(&map, m).unwrap_or(Place::Disk);
    let mut places: Vec<Place> = (0..d.gpus.len() as u32).map(Place::Gpu).collect();
    places.extend([Place::Cpu, Place::Disk]);
    let kv_per_layer = e.kv_cache / layers_total.max(1);
    let off = |m: &str| !matches!(at(m), Place::Gpu(_));
    // Where each layer went, looked up once (the map is searched by name).
    let layer_at: Vec<Place> = (0..layers_total)
        .map(|i| at(&format!("{t}.layers.{i}")))
        .collect();
    // The vision tower's blocks (its encoder layers, or the tower whole) and where each went.
    let tower_at: Vec<(Place, u64)> = match names.tower.filter(|_| tower > 0) {
        None => Vec::new(),
        Some(name) if spec.vision_layers == 0 => vec![(at(name), tower)],
        Some(_) => tower_shares(tower, spec.vision_layers)
            .into_iter()
            .enumerate()
            .map(|(i, b)| (at(&format!("{}.{i}", names.tower_layers)), b))
            .collect(),
    };
    let offloaded = layer_at.iter().any(|p| !matches!(p, Place::Gpu(_)));
    let tower_off = tower_at
        .iter()
        .filter(|(p, _)| !matches!(p, Place::Gpu(_)))
        .map(|(_, b)| *b)
        .max();
    // the largest offloaded part is what accelerate's reserve on GPU 0 is for
    let in_transit = [
        (offloaded, real.layer),
        (off(&embed), real.embed),
        (off("lm_head") && !spec.tie_word_embeddings, real.head),
        (tower_off.is_some(), tower_off.unwrap_or(0)),
    ]
    .iter()
    .filter(|(o, _)| *o)
    .map(|(_, b)| *b)
    .max();
    let mut devices = Vec::new();
    for place in places {
        let layers = layer_at.iter().filter(|p| **p == place).count() as u64;
        let mut holds = Vec::new();
        let mut weights = layers.saturating_mul(real.layer);
        let here: Vec<u64> = tower_at
            .iter()
            .filter(|(p, _)| *p == place)
            .map(|(_, b)| *b)
            .collect();
        if !here.is_empty() {
            holds.push(if here.len() == tower_at.len() {
                "vision tower".to_string()
            } else {
                format!(
                    "vision tower ({} of {} encoder layers)",
                    here.len(),
                    tower_at.len()
                )
            });
            weights = weights.saturating_add(here.iter().fold(0u64, |a, b| a.saturating_add(*b)));
        }
        for (m, bytes, label) in [
            (embed.as_str(), real.embed, "embeddings"),
            (norm.as_str(), real.norm, "final norm"),
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
            let s = if layers == 1 { "" } else { "s" };
            holds.insert(0, format!("{layers} layer{s}"));
        }
        let gpu = matches!(place, Place::Gpu(_));
        if let Some(t) = in_transit.filter(|_| place == Place::Gpu(0)) {
            // accelerate's hooks bring each offloaded module onto GPU 0 to run it
            holds.push("an offloaded module in transit".into());
            weights = weights.saturating_add(t);
        }
        let capacity = match place {
            Place::Gpu(i) => d.gpus.get(i as usize).copied().unwrap_or(0),
            Place::Cpu => d.host_ram.unwrap_or(0),
            Place::Disk => 0,
        };
        if !gpu && layers == 0 && holds.is_empty() {
            continue;
        }
        let kv = if gpu {
            layers.saturating_mul(kv_per_layer)
        } else {
            0
        };
        // offloaded layers compute on GPU 0: their cache lives there
        let kv = if place == Place::Gpu(0) {
            let away = layers_total - layers_on(&map, t, layers_total);
            kv.saturating_add(away.saturating_mul(kv_per_layer))
        } else {
            kv
        };
        let max_memory = match place {
            Place::Gpu(i) => mm.gpus.get(i as usize).copied().unwrap_or(0.0) as u64,
            Place::Cpu => mm.cpu.unwrap_or(0.0) as u64,
            Place::Disk => 0,
        };
        let mut row = priced(place, capacity, layers, weights, kv, holds, e);
        row.max_memory_bytes = max_memory;
        devices.push(row);
    }
    let mut p = finish(spec, d, devices, layers_on(&map, t, layers_total));
    p.refused = bnb_refusal(dtype, &p);
    p
}

/// transformers' bitsandbytes quantizers (`validate_environment`) raise when `device_map` puts
/// some modules, not all, on the CPU or the disk, unless `llm_int8_enable_fp32_cpu_offload`.
fn bnb_refusal(dtype: WeightDtype, p: &Placement) -> Option<String> {
    let bnb = matches!(
        dtype,
        WeightDtype::Nf4 { .. } | WeightDtype::Fp4 { .. } | WeightDtype::Int8
    );
    let off: Vec<String> = p
        .devices
        .iter()
        .filter(|s| matches!(s.device, Place::Cpu | Place::Disk))
        .flat_map(|s| s.holds.iter().map(move |h| format!("{h} on {}", s.device)))
        .collect();
    (bnb && !off.is_empty()).then(|| {
        format!(
            "bitsandbytes refuses this device_map at load ({}): \"ValueError: Some modules are \
             dispatched on the CPU or the disk. Make sure you have enough GPU RAM to fit the \
             quantized model.\" Keep them in 32 bits on the CPU with \
             llm_int8_enable_fp32_cpu_offload=True and a custom device_map, or give the GPUs more room",
            off.join(", ")
        )
    })
}

/// One device's row: the weights and KV cache placed there, and on a GPU that runs anything the
/// workload's activations, a CUDA runtime and the safety margin; `free` what the capacity leaves.
pub(crate) fn priced(
    place: Place,
    capacity: u64,
    layers: u64,
    weights: u64,
    kv: u64,
    holds: Vec<String>,
    e: &Estimate,
) -> DeviceShare {
    let gpu = matches!(place, Place::Gpu(_));
    let acts = if gpu && !holds.is_empty() {
        e.activations
    } else {
        0
    };
    let runtime = if gpu {
        e.runtime.saturating_add(e.allocator)
    } else {
        0
    };
    let margin = if gpu { safety_margin(capacity) } else { 0 };
    let need = [weights, kv, acts, runtime, margin]
        .iter()
        .fold(0u64, |a, b| a.saturating_add(*b));
    let free = if place == Place::Disk {
        0
    } else {
        i64::try_from(capacity)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(need).unwrap_or(i64::MAX))
    };
    DeviceShare {
        device: place,
        capacity_bytes: capacity,
        max_memory_bytes: capacity,
        layers,
        weights_bytes: weights,
        kv_cache_bytes: kv,
        activations_bytes: acts,
        runtime_bytes: runtime,
        margin_bytes: margin,
        free_bytes: free,
        holds,
        rank: None,
    }
}

/// A `max_memory` that makes every GPU's table fit and that transformers accepts: for the
/// strategy asked, then for `"sequential"` (no balancing cap: GPU 0 fills first), each found by
/// placing and cutting the budget of the device that runs out by its shortfall (16 tries).
pub fn fitting_max_memory(
    spec: &Spec,
    dtype: WeightDtype,
    d: &Devices,
    e: &Estimate,
) -> Option<(Vec<u64>, Placement)> {
    let first = plan_auto(spec, dtype, d, e);
    let rooms: Vec<u64> = first
        .devices
        .iter()
        .filter(|s| matches!(s.device, Place::Gpu(_)))
        .map(|s| {
            s.capacity_bytes.saturating_sub(
                s.kv_cache_bytes
                    .saturating_add(s.activations_bytes)
                    .saturating_add(s.runtime_bytes)
                    .saturating_add(s.margin_bytes),
            )
        })
        .collect();
    [d.strategy, Strategy::Sequential]
        .into_iter()
        .find_map(|strategy| cut_until_fits(spec, dtype, d, e, rooms.clone(), strategy))
}

fn cut_until_fits(
    spec: &Spec,
    dtype: WeightDtype,
    d: &Devices,
    e: &Estimate,
    mut budgets: Vec<u64>,
    strategy: Strategy,
) -> Option<(Vec<u64>, Placement)> {
    for _ in 0..16 {
        let tried = Devices {
            max_memory: Some(budgets.clone()),
            strategy,
            ..d.clone()
        };
        let p = plan_auto(spec, dtype, &tried, e);
        if p.refused.is_some() {
            return None;
        }
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

fn layers_on(map: &[(String, Place)], text: &str, n: u64) -> u64 {
    (0..n)
        .filter(|i| {
            matches!(
                device_of(map, &format!("{text}.layers.{i}")),
                Some(Place::Gpu(_))
            )
        })
        .count() as u64
}

fn finish(spec: &Spec, d: &Devices, devices: Vec<DeviceShare>, on_gpus: u64) -> Placement {
    let mut p = finish_with(spec, d, devices, on_gpus, "transformers", load_with(d));
    p.strategy = Some(d.strategy);
    p
}

/// The placement's summary fields: what is offloaded, which device runs out, the notes.
pub(crate) fn finish_with(
    spec: &Spec,
    d: &Devices,
    devices: Vec<DeviceShare>,
    on_gpus: u64,
    engine: &'static str,
    load_with: String,
) -> Placement {
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
        let off = (sum(Place::Cpu) + sum(Place::Disk)) as f64;
        let rest = spec.num_layers - on_gpus;
        notes.push(if engine == "llama.cpp" {
            format!(
                "{on_gpus} of {} layers fit on the GPU(s); the other {rest} run on the CPU and read \
                 their weights from host RAM every token (an estimate: at ~60 GB/s of dual-channel \
                 DDR5, ~{:.0} ms per token for those weights alone)",
                spec.num_layers,
                off / 60e9 * 1e3
            )
        } else {
            format!(
                "{on_gpus} of {} layers fit on the GPU(s); the other {rest} are offloaded and \
                 copied to GPU 0 for every forward pass, so each token reads them over PCIe (an \
                 estimate: at ~25 GB/s, ~{:.0} ms per token for those weights alone)",
                spec.num_layers,
                off / 25e9 * 1e3
            )
        });
    }
    notes.push(
        "activations are counted on every GPU that runs layers (the layers run one device at a \
         time, so each needs room for one layer's work); the KV cache sits with its layers"
            .into(),
    );
    let _ = d;
    Placement {
        engine,
        strategy: None,
        layers_total: spec.num_layers,
        layers_on_gpus: on_gpus,
        host_weights_bytes: sum(Place::Cpu),
        disk_weights_bytes: sum(Place::Disk),
        load_with,
        refused: None,
        fix: None,
        parallel: None,
        runs_out,
        devices,
        notes,
    }
}

/// The `from_pretrained` arguments of a placement: `device_map="auto"`, and `max_memory` when
/// one was set (each GPU in GiB when whole, else MiB; the host RAM offered).
fn load_with(d: &Devices) -> String {
    let map = match d.strategy {
        Strategy::Balanced => "auto",
        Strategy::BalancedLow0 => "balanced_low_0",
        Strategy::Sequential => "sequential",
    };
    let Some(mm) = &d.max_memory else {
        return format!("device_map=\"{map}\"");
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
    format!("device_map=\"{map}\", max_memory={{{}}}", parts.join(", "))
}

/// What a fitting `max_memory` changes: the arguments, and each GPU's remainder then.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fix {
    pub load_with: String,
    pub layers_on_gpus: u64,
    /// Each GPU (as reports name it, `DeviceShare::label`) and what it keeps free.
    pub free_bytes: Vec<(String, i64)>,
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
                .map(|s| (s.label(), s.free_bytes))
                .collect(),
        }
    }
}

/// A size as reports print it.
pub fn show(b: u64) -> String {
    Bytes(b).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str) -> Spec {
        crate::model::presets::from_file(id)
    }

    #[test]
    fn bitsandbytes_places_by_half_a_byte_per_linear_weight_and_16_bit_embeddings() {
        let s = spec("llama-3.1-8b-instruct");
        let bf16 = parts(&s, placement_bytes(&s, WeightDtype::Bf16));
        let nf4 = parts(
            &s,
            placement_bytes(&s, WeightDtype::Nf4 { double_quant: true }),
        );
        assert_eq!(nf4.embed, bf16.embed);
        assert_eq!(nf4.head, bf16.head);
        // 2 norms of 4096 stay 16-bit; the 218 M linear weights go from 2 bytes to 0.5
        let norms = 2 * 4096 * 2;
        assert_eq!((nf4.layer - norms) * 4, bf16.layer - norms);
        // the real bytes carry bitsandbytes' absmax on top
        let real = parts(&s, |t| {
            group_bytes(&s, t, WeightDtype::Nf4 { double_quant: true })
        });
        assert!(real.layer > nf4.layer);
    }

    #[test]
    fn a_tied_head_weighs_nothing_when_transformers_sees_the_tie() {
        let s = spec("qwen2.5-0.5b-instruct");
        let p = parts(&s, placement_bytes(&s, WeightDtype::Bf16));
        let (seen, ties) = module_tree(&s, p, 0, Ties::Seen);
        let (unseen, none) = module_tree(&s, p, 0, Ties::Unseen);
        assert_eq!(ties.len(), 1);
        assert!(none.is_empty());
        assert_eq!(unseen.size - seen.size, p.embed);
    }

    fn gemma3_plan(gpus: Vec<u64>) -> Placement {
        let s = spec("gemma-3-27b-it");
        let w = crate::estimate::Workload {
            prompt_tokens: 512,
            max_new_tokens: 64,
            batch: 1,
            weight_dtype: WeightDtype::Bf16,
            kv_dtype: crate::dtype::KvDtype::Bf16,
            engine: crate::estimate::Engine::Transformers,
            llama: Default::default(),
        };
        let e = crate::estimate::estimate(&s, &w, 80 << 30);
        let d = Devices {
            gpus: gpus.clone(),
            host_ram: Some(64 << 30),
            max_memory: Some(gpus),
            context: 0,
            strategy: Strategy::Balanced,
        };
        plan_auto(&s, WeightDtype::Bf16, &d, &e)
    }

    #[test]
    fn a_vision_tower_is_placed_first_and_whole_and_not_in_the_layers_share() {
        let s = spec("gemma-3-27b-it");
        let names = module_names(&s);
        assert_eq!(names.text, "model.language_model");
        assert_eq!(module_names(&spec("llama-3.1-8b-instruct")).text, "model");
        let (_, tower) = parts_and_tower(&s, |t| group_bytes(&s, t, WeightDtype::Bf16));
        assert!(tower > 800 << 20, "{tower}");
        let p = gemma3_plan(vec![80 << 30, 80 << 30]);
        let gpu0 = &p.devices[0];
        assert_eq!(gpu0.holds[1], "vision tower");
        assert!(p.devices[1..]
            .iter()
            .all(|d| !d.holds.iter().any(|h| h.contains("vision"))));
        // every byte once: the tower on its own, the layers at the text layers' share
        let placed: u64 = p.devices.iter().map(|d| d.weights_bytes).sum();
        let all: u64 = s
            .tensors()
            .iter()
            .map(|t| group_bytes(&s, t, WeightDtype::Bf16))
            .sum();
        // the head is tied: its bytes are the embeddings'; the layers' share rounds down
        assert!(s.tie_word_embeddings);
        assert!(
            placed <= all && all - placed < s.num_layers,
            "{placed} {all}"
        );
    }

    #[test]
    fn a_vision_tower_that_does_not_fit_gpu_0_splits_at_its_encoder_layers() {
        // GPU 0 keeps the 2.8 GB embeddings free: 12 of the 27 SigLIP layers fit in the rest,
        // as accelerate placed them (tests/fixtures/placement/gemma-3-27b-it.json, 3GiB+24GiB)
        let p = gemma3_plan(vec![3 << 30, 24 << 30]);
        assert!(p.devices[0]
            .holds
            .contains(&"vision tower (12 of 27 encoder layers)".to_string()));
        assert!(p.devices[1]
            .holds
            .contains(&"vision tower (15 of 27 encoder layers)".to_string()));
    }

    #[test]
    fn without_max_memory_one_gpu_gives_90_percent_of_its_free_memory() {
        let s = spec("llama-3.1-8b-instruct");
        let d = Devices {
            gpus: vec![16 << 30],
            host_ram: Some(64 << 30),
            max_memory: None,
            context: 500 << 20,
            strategy: Strategy::Balanced,
        };
        let (mm, _) = auto_device_map(&s, WeightDtype::Bf16, &d, Ties::Seen);
        assert_eq!(mm.gpus, vec![((16u64 << 30) - (500 << 20)) as f64 * 0.9]);
        assert_eq!(mm.cpu, Some((64u64 << 30) as f64 * 0.9));
    }
}
