//! Replays accelerate's and transformers' real `device_map` placements (recorded on meta-device
//! models by scripts/accelerate-placement.py into tests/fixtures/placement/) through llm-oom's
//! placement, and asks for the same device for the embeddings, every decoder layer, the final
//! norm and lm_head, and a vision-language model's vision tower and projector — and the same
//! module sizes.

use std::path::Path;

use llm_oom::dtype::WeightDtype;
use llm_oom::model::presets::load;
use llm_oom::placement::accelerate::{
    balanced_memory, device_of, infer_device_map, MaxMemory, Place,
};
use llm_oom::placement::{module_names, module_tree, parts_and_tower, placement_bytes, Ties};
use serde_json::Value;

fn place(v: &Value) -> Place {
    match v {
        Value::Number(n) => Place::Gpu(n.as_u64().unwrap() as u32),
        Value::String(s) if s == "cpu" => Place::Cpu,
        Value::String(s) if s == "disk" => Place::Disk,
        other => panic!("not a device: {other}"),
    }
}

fn max_memory(v: &Value) -> MaxMemory {
    let o = v.as_object().unwrap();
    let mut gpus = Vec::new();
    while let Some(b) = o.get(&gpus.len().to_string()) {
        gpus.push(b.as_f64().unwrap());
    }
    MaxMemory {
        gpus,
        cpu: o.get("cpu").and_then(Value::as_f64),
    }
}

#[test]
fn placements_match_accelerate_and_transformers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/placement");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 6, "{} fixtures", files.len());
    let (mut checked, mut agreed, mut runs) = (0, 0, 0);
    let mut misses = Vec::new();
    for f in &files {
        let rec: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        let preset = rec["preset"].as_str().unwrap();
        let json = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("presets/{preset}.json")),
        )
        .unwrap();
        let spec = load(preset, &json).unwrap();
        let (p, tower) = parts_and_tower(&spec, placement_bytes(&spec, WeightDtype::Bf16));
        let sizes = &rec["sizes_bf16"];
        // the tower and its projector, as transformers counts them
        let want_tower = ["vision_tower", "multi_modal_projector"]
            .iter()
            .filter_map(|k| sizes[*k].as_u64())
            .sum::<u64>();
        // SigLIP's embeddings carry an int64 `position_ids` buffer (8 bytes a patch position)
        assert!(
            want_tower.abs_diff(tower) <= 64 << 10,
            "{preset} vision tower {want_tower} vs {tower}"
        );
        let names = module_names(&spec);
        let t = names.text;
        assert_eq!(
            p.layer,
            sizes["layer0"].as_u64().unwrap(),
            "{preset} layer bytes"
        );
        // gemma's embedding carries a 2-byte normalizer buffer
        let embed = sizes["embed"].as_u64().unwrap();
        assert!(
            embed.abs_diff(p.embed) <= 2,
            "{preset} embed {embed} vs {}",
            p.embed
        );
        for run in rec["runs"].as_array().unwrap() {
            runs += 1;
            let caller = run["caller"].as_str().unwrap();
            let mm = max_memory(&run["max_memory"]);
            let ties = if caller == "accelerate" {
                Ties::Unseen
            } else {
                Ties::Seen
            };
            let (root, groups) = module_tree(&spec, p, tower, ties);
            let mm = match caller {
                "accelerate" | "transformers-sequential" => mm,
                "transformers-auto" => balanced_memory(&root, mm, true, false, p.layer / 10),
                "transformers-balanced_low_0" => {
                    balanced_memory(&root, mm, true, true, p.layer / 10)
                }
                other => panic!("caller {other}"),
            };
            let map = infer_device_map(&root, &mm, &groups);
            let want = &run["placement"];
            let mut modules = vec![
                (format!("{t}.embed_tokens"), place(&want["embed"])),
                (format!("{t}.norm"), place(&want["norm"])),
                ("lm_head".to_string(), place(&want["lm_head"])),
            ];
            for (i, d) in want["layers"].as_array().unwrap().iter().enumerate() {
                modules.push((format!("{t}.layers.{i}"), place(d)));
            }
            // the tower and projector: one device when placed whole, else the device of each
            // module under them (the tower's encoder layers are checked; its patch embeddings
            // and post norm are not modules of their own here)
            for (key, name) in [
                ("vision_tower", names.tower),
                ("multi_modal_projector", names.projector),
            ] {
                let Some(d) = want.get(key) else { continue };
                let name = name.unwrap_or_else(|| panic!("{preset}: no {key} module"));
                if let Some(split) = d.as_object() {
                    let prefix = format!("{}.", names.tower_layers);
                    modules.extend(
                        split
                            .iter()
                            .filter(|(m, _)| m.starts_with(&prefix))
                            .map(|(m, d)| (m.clone(), place(d))),
                    );
                    continue;
                }
                let d = place(d);
                let blocks: Vec<String> = if key == "vision_tower" && spec.vision_layers > 0 {
                    (0..spec.vision_layers)
                        .map(|i| format!("{}.{i}", names.tower_layers))
                        .collect()
                } else {
                    vec![name.to_string()]
                };
                modules.extend(blocks.into_iter().map(|b| (b, d)));
            }
            for (m, d) in modules {
                checked += 1;
                let got = device_of(&map, &m);
                if got == Some(d) {
                    agreed += 1;
                } else {
                    misses.push(format!(
                        "{preset} {} {caller}: {m} on {d}, llm-oom {got:?}",
                        run["layout"]
                    ));
                }
            }
        }
    }
    eprintln!("placement agreement: {agreed}/{checked} modules over {runs} placements");
    assert!(
        misses.is_empty(),
        "{} misses:\n{}",
        misses.len(),
        misses.join("\n")
    );
}
