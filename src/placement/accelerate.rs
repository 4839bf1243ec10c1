//! transformers/accelerate `device_map="auto"`, rule for rule.
//!
//! Mirrors transformers 5.17 `integrations/accelerate.py` (`get_max_memory`,
//! `get_balanced_memory`, `infer_auto_device_map`, `get_module_size_with_ties`) and accelerate
//! 1.15 `utils/modeling.py` (`get_max_layer_size`), which the transformers copy keeps:
//! - modules are treated in registration order; a module that does not fit is split into its
//!   children unless it is a leaf or one of the model's `_no_split_modules` (the decoder layer),
//!   then the next device is tried: the GPUs in order, then `cpu`, then `disk`;
//! - on GPU 0 and on the CPU (accelerate's "main devices") the largest remaining layer is kept
//!   free, so an offloaded layer can be brought back in to run;
//! - a module tied to another (embeddings ↔ lm_head) is placed together with it;
//! - `"auto"`/`"balanced"` first caps every GPU but the last at `total / GPUs + 1.25 × the largest
//!   no-split block` (`get_balanced_memory`); with one GPU and no `max_memory` given, 90 % of its
//!   free memory; without `max_memory`, 90 % of the host's available RAM; bitsandbytes takes 90 %
//!   of every budget again (`adjust_max_memory`).
//!
//! Sizes are floats where Python's are (`max_memory[0] *= 0.9`), compared the same way.

use std::collections::VecDeque;

use serde::Serialize;

/// Where a module lands: a GPU's index, the host RAM, or the offload folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(into = "String")]
pub enum Place {
    Gpu(u32),
    Cpu,
    Disk,
}

impl From<Place> for String {
    fn from(p: Place) -> String {
        p.to_string()
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Gpu(i) => write!(f, "cuda:{i}"),
            Place::Cpu => f.write_str("cpu"),
            Place::Disk => f.write_str("disk"),
        }
    }
}

/// One `nn.Module` as accelerate sees it: its dotted name, the bytes of every tensor under it,
/// its children in registration order, and whether it is a `_no_split_modules` class.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub size: u64,
    pub children: Vec<Node>,
    pub no_split: bool,
}

impl Node {
    pub fn leaf(name: impl Into<String>, size: u64) -> Node {
        Node {
            name: name.into(),
            size,
            children: Vec::new(),
            no_split: false,
        }
    }
    pub fn parent(name: impl Into<String>, children: Vec<Node>, no_split: bool) -> Node {
        let size = children.iter().fold(0u64, |a, c| a.saturating_add(c.size));
        Node {
            name: name.into(),
            size,
            children,
            no_split,
        }
    }
    fn atomic(&self) -> bool {
        self.children.is_empty() || self.no_split
    }
}

/// `max_memory`: the budget of each GPU in order, and of the CPU (`None`: no CPU tier; the disk
/// always follows).
#[derive(Debug, Clone, PartialEq)]
pub struct MaxMemory {
    pub gpus: Vec<f64>,
    pub cpu: Option<f64>,
}

/// How `device_map` was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// `"auto"` and `"balanced"` (the same code path).
    Balanced,
    BalancedLow0,
    Sequential,
}

/// `get_balanced_memory`: caps every GPU but the last so the layers spread evenly. `user_set`:
/// the caller passed `max_memory` (then one GPU keeps all of it).
pub fn balanced_memory(
    root: &Node,
    mut mm: MaxMemory,
    user_set: bool,
    low_zero: bool,
    mean_leaf: u64,
) -> MaxMemory {
    let live: Vec<usize> = (0..mm.gpus.len()).filter(|&i| mm.gpus[i] > 0.0).collect();
    let n = live.len();
    if n == 0 {
        return mm;
    }
    let low_zero = low_zero && n > 1;
    if n == 1 && !user_set {
        if let Some(first) = mm.gpus.first_mut() {
            *first *= 0.9;
        }
    }
    let largest_block = no_split_max(root);
    let share = root.size / (if low_zero { n - 1 } else { n }) as u64;
    let buffer = (1.25 * largest_block.max(mean_leaf) as f64) as u64;
    let per_gpu = share.saturating_add(buffer) as f64;
    let gpu0 = mm.gpus.first().copied().unwrap_or(0.0);
    for &i in &live[..n - 1] {
        let cap = if low_zero && i == 0 { gpu0 } else { per_gpu };
        mm.gpus[i] = cap.min(mm.gpus[i]);
    }
    if low_zero {
        let rest: f64 = mm.gpus.iter().skip(1).take(n - 1).sum();
        let min_zero = (root.size as f64 - rest).max(0.0);
        mm.gpus[0] = min_zero.min(mm.gpus[0]);
    }
    mm
}

fn no_split_max(n: &Node) -> u64 {
    let here = if n.no_split { n.size } else { 0 };
    n.children.iter().map(no_split_max).fold(here, u64::max)
}

/// `get_max_layer_size`: the largest atomic module (leaf or no-split) among `modules`, and every
/// name that reaches it.
fn max_layer(modules: &VecDeque<&Node>) -> (u64, Vec<String>) {
    let mut best = 0u64;
    let mut names = Vec::new();
    let mut todo: VecDeque<&Node> = modules.clone();
    while let Some(m) = todo.pop_front() {
        if m.atomic() {
            if m.size > best {
                best = m.size;
                names = vec![m.name.clone()];
            } else if m.size == best {
                names.push(m.name.clone());
            }
        } else {
            for c in m.children.iter().rev() {
                todo.push_front(c);
            }
        }
    }
    (best, names)
}

/// A tie group: parameter names that share one tensor (`lm_head.weight`,
/// `model.embed_tokens.weight`).
pub type TieGroup = Vec<String>;

/// `infer_auto_device_map`: the device of every module it placed, in the order it placed them.
pub fn infer_device_map(root: &Node, mm: &MaxMemory, ties: &[TieGroup]) -> Vec<(String, Place)> {
    let mut devices: Vec<(Place, Option<f64>)> = mm
        .gpus
        .iter()
        .enumerate()
        .map(|(i, &m)| (Place::Gpu(i as u32), Some(m)))
        .collect();
    if let Some(cpu) = mm.cpu {
        devices.push((Place::Cpu, Some(cpu)));
    }
    devices.push((Place::Disk, None));
    let main = |p: Place| p == Place::Gpu(0) || p == Place::Cpu;
    let mut used = vec![0f64; devices.len()];
    let mut map = Vec::new();
    let mut current = 0usize;
    let mut treat: VecDeque<&Node> = root.children.iter().collect();
    let (mut max_size, mut max_names) = max_layer(&treat);
    while let Some(m) = treat.pop_front() {
        let dotted = format!("{}.", m.name);
        max_names.retain(|n| *n != m.name && !n.starts_with(&dotted));
        if max_names.is_empty() {
            (max_size, max_names) = max_layer(&treat);
        }
        let tied = tied_outside(&m.name, ties);
        let Some(&(place, budget)) = devices.get(current) else {
            break;
        };
        let mut cap = budget;
        let mut reserved = 0f64;
        if main(place) {
            cap = cap.map(|c| c - max_size as f64);
            reserved = max_size as f64;
        }
        let (with_ties, tied_names) = size_with_ties(m.size, &tied, &treat);
        let here = used[current];
        if cap.is_none_or(|c| here + with_ties as f64 <= c) {
            used[current] += with_ties as f64;
            map.push((m.name.clone(), place));
            for t in tied_names {
                treat.retain(|n| n.name != t);
                map.push((t, place));
            }
            continue;
        }
        // The tied modules here (embeddings, lm_head) are leaves: they cannot be split.
        if cap.is_some_and(|c| here + m.size as f64 >= c) && !m.atomic() {
            for c in m.children.iter().rev() {
                treat.push_front(c);
            }
            (max_size, max_names) = max_layer(&treat);
            continue;
        }
        used[current] += reserved;
        current += 1;
        treat.push_front(m);
    }
    map
}

/// The parameters tied to something inside `name` that live outside it.
fn tied_outside(name: &str, ties: &[TieGroup]) -> Vec<String> {
    let inside = |k: &str| format!("{k}.").contains(&format!("{name}."));
    ties.iter()
        .filter(|g| g.iter().any(|k| inside(k)) && !g.iter().all(|k| inside(k)))
        .flat_map(|g| g.iter().filter(|k| !inside(k)).cloned())
        .collect()
}

/// transformers' `get_module_size_with_ties`: the module plus every still-unplaced module that
/// holds one of its tied parameters.
fn size_with_ties(size: u64, tied: &[String], treat: &VecDeque<&Node>) -> (u64, Vec<String>) {
    let mut total = size;
    let mut names: Vec<String> = Vec::new();
    for p in tied {
        if let Some(n) = treat
            .iter()
            .find(|n| p.starts_with(&format!("{}.", n.name)))
        {
            if !names.contains(&n.name) {
                names.push(n.name.clone());
                total = total.saturating_add(n.size);
            }
        }
    }
    (total, names)
}

/// The device of `module` in a device map: its own entry or its nearest placed ancestor's.
pub fn device_of(map: &[(String, Place)], module: &str) -> Option<Place> {
    map.iter()
        .filter(|(k, _)| k == module || module.starts_with(&format!("{k}.")))
        .max_by_key(|(k, _)| k.len())
        .map(|(_, p)| *p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy(layers: u64, layer: u64, embed: u64, tied: bool) -> Node {
        let mut model = vec![Node::leaf("model.embed_tokens", embed)];
        model.push(Node::parent(
            "model.layers",
            (0..layers)
                .map(|i| Node {
                    no_split: true,
                    ..Node::leaf(format!("model.layers.{i}"), layer)
                })
                .collect(),
            false,
        ));
        model.push(Node::leaf("model.norm", 8));
        Node::parent(
            "",
            vec![
                Node::parent("model", model, false),
                Node::leaf("lm_head", if tied { 0 } else { embed }),
            ],
            false,
        )
    }

    #[test]
    fn what_fits_whole_stays_whole_on_gpu_0() {
        let root = toy(4, 100, 50, false);
        let mm = MaxMemory {
            gpus: vec![1000.0],
            cpu: Some(1000.0),
        };
        let map = infer_device_map(&root, &mm, &[]);
        assert_eq!(
            map,
            vec![
                ("model".into(), Place::Gpu(0)),
                ("lm_head".into(), Place::Gpu(0))
            ]
        );
    }

    #[test]
    fn gpu_0_keeps_the_largest_layer_free_and_the_rest_spills_in_order() {
        // 4 layers of 100 + embed 50 + head 50: GPU 0 of 300 keeps 100 free → embed + 1 layer
        // (150 ≤ 200, a second layer would be 250 > 200).
        let root = toy(4, 100, 50, false);
        let mm = MaxMemory {
            gpus: vec![300.0, 250.0],
            cpu: Some(10_000.0),
        };
        let map = infer_device_map(&root, &mm, &[]);
        let at = |m: &str| device_of(&map, m);
        assert_eq!(at("model.embed_tokens"), Some(Place::Gpu(0)));
        assert_eq!(at("model.layers.0"), Some(Place::Gpu(0)));
        assert_eq!(at("model.layers.1"), Some(Place::Gpu(1)));
        assert_eq!(at("model.layers.2"), Some(Place::Gpu(1)));
        // GPU 1 has no reserve: 2 × 100 = 200, a third would pass 250.
        assert_eq!(at("model.layers.3"), Some(Place::Cpu));
        assert_eq!(at("lm_head"), Some(Place::Cpu));
    }

    #[test]
    fn a_tied_head_goes_where_the_embeddings_go() {
        let root = toy(4, 100, 50, true);
        let ties = vec![vec![
            "lm_head.weight".to_string(),
            "model.embed_tokens.weight".to_string(),
        ]];
        let mm = MaxMemory {
            gpus: vec![300.0, 1000.0],
            cpu: None,
        };
        let map = infer_device_map(&root, &mm, &ties);
        assert_eq!(device_of(&map, "lm_head"), Some(Place::Gpu(0)));
        assert_eq!(device_of(&map, "model.layers.3"), Some(Place::Gpu(1)));
    }

    #[test]
    fn balanced_caps_all_gpus_but_the_last() {
        let root = toy(4, 100, 50, false);
        let mm = MaxMemory {
            gpus: vec![1000.0, 1000.0],
            cpu: None,
        };
        let b = balanced_memory(&root, mm, true, false, 10);
        // 508 / 2 + 1.25 × 100
        assert_eq!(b.gpus, vec![254.0 + 125.0, 1000.0]);
        let one = balanced_memory(
            &root,
            MaxMemory {
                gpus: vec![1000.0],
                cpu: None,
            },
            false,
            false,
            10,
        );
        assert_eq!(one.gpus, vec![900.0]);
    }
}
