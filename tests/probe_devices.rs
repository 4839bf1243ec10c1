//! `diagnose --device cuda:0,cuda:1`, what a CPU can check of it: the device list as typed, the
//! transformers child taking its multi-GPU path, and the child's own pieces run in a real Python
//! (transformers' `device_map="auto"` over two GPUs computed on a meta model, random weights
//! drawn on the devices of that map, the GPU an out-of-memory message names). Running it on two
//! GPUs needs the 2-GPU machine. The Python parts need LLM_OOM_TEST_PYTHON (a Python with torch
//! and transformers); without it they say so and only the flag checks run.

mod util;

use serde_json::Value;
use util::{llm_oom, temp};

fn fixture() -> String {
    format!("{}/tests/fixtures/tiny-llama", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_device_list_is_gpus_each_once_and_transformers_only() {
    let home = temp();
    for (args, says) in [
        (&["--device", "cuda:0,cpu"][..], "GPUs only"),
        (&["--device", "cuda:1,cuda:1"][..], "named twice"),
        // candle over several GPUs is its tensor-parallel probe: a CUDA build with NCCL
        // (tests/probe_tensor_parallel.rs runs it with ranks on the CPU)
        (
            &["--device", "cuda:0,cuda:1", "--engine", "candle"][..],
            "feature",
        ),
        (
            &["--device", "cuda:0,cuda:1", "--engine", "llama.cpp"][..],
            "not probed across GPUs",
        ),
        (
            &["--device", "cuda:0,cuda:1", "--engine", "vllm"][..],
            "--engine vllm --tp N",
        ),
    ] {
        let out = llm_oom(home.path())
            .args(["diagnose", "--model", &fixture()])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

#[test]
fn two_gpus_reach_the_transformers_child_which_opens_each() {
    let Some(python) = std::env::var_os("LLM_OOM_TEST_PYTHON") else {
        eprintln!("LLM_OOM_TEST_PYTHON is not set: the transformers child is not run here");
        return;
    };
    let home = temp();
    let out = llm_oom(home.path())
        .args([
            "diagnose",
            "--model",
            &fixture(),
            "--device",
            "cuda:0,cuda:1",
            "--random-weights",
            "-p",
            "48",
            "-n",
            "8",
            "--python",
        ])
        .arg(&python)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // A machine where NVML sees fewer than two GPUs is refused before the child starts.
    if err.contains("no CUDA GPU found") || err.contains("this machine has 1 GPU") {
        assert_eq!(out.status.code(), Some(2), "{err}");
        return;
    }
    // It announces both GPUs; a torch without CUDA is refused by the child's multi-GPU opening
    // (its own message, not the one-GPU one), as bad input.
    assert!(err.contains("on cuda:0 + cuda:1"), "{err}");
    let has_cuda = !err.contains("CUDA is not available");
    if !has_cuda {
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("whose torch sees the GPUs"), "{err}");
    }
}

/// Runs `code` after importing the embedded probe as a module (its torch and transformers
/// imported as the child does) and returns the JSON it prints.
fn probe_python(code: &str) -> Option<Value> {
    let python = std::env::var_os("LLM_OOM_TEST_PYTHON")?;
    let script = format!(
        "import importlib.util, json, sys\n\
         spec = importlib.util.spec_from_file_location('probe', '{}/src/probe/transformers_probe.py')\n\
         probe = importlib.util.module_from_spec(spec); spec.loader.exec_module(probe)\n\
         probe.import_libs(); torch = probe.torch\n{code}",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = std::process::Command::new(python)
        .args(["-c", &script])
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default().to_string();
    Some(
        serde_json::from_str(&last)
            .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr))),
    )
}

#[test]
fn device_map_auto_over_two_gpus_spreads_the_layers_and_random_weights_land_there() {
    let code = format!(
        r#"
from transformers import AutoConfig, AutoModelForCausalLM
cfg = AutoConfig.from_pretrained('{dir}')
def meta():
    with torch.device('meta'):
        return AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
m = meta()
layer = sum(p.numel() * 2 for p in m.model.layers[0].parameters())
embed = m.model.embed_tokens.weight.numel() * 2
roomy = {{0: embed + int(1.5 * layer), 1: 4 * layer + 2 * embed}}
dm = probe.device_map_for(m, roomy)
tight = probe.device_map_for(meta(), {{0: layer // 2, 1: layer // 2}})
# random weights drawn on the map's devices (the CPU stands in for both GPUs here)
model = probe.materialize(m, dm, device_of=lambda v: torch.device('cpu'))
meta_left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
# random weights: the end-of-sequence token may win any step, so all four are asked for
out = model.generate(torch.randint(3, 250, (1, 8)), max_new_tokens=4, min_new_tokens=4, do_sample=False)
msg = ('CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total capacity of 23.65 GiB '
       'of which 3.06 MiB is free. Including non-PyTorch memory, this process has 23.64 GiB memory in use.')
bad = []
for devs in (['cuda:0', 'cpu'], ['cuda:0'], ['cuda:1', 'cuda:1']):
    try:
        probe.Child({{'model': '{dir}', 'device': 'cuda:0', 'dtype': 'bf16', 'devices': devs}})
        bad.append(None)
    except probe.Fatal as e:
        bad.append(e.code)
ok = probe.Child({{'model': '{dir}', 'device': 'cuda:0', 'dtype': 'bf16', 'devices': ['cuda', 'cuda:1']}}).devices
print(json.dumps({{'map': {{k: str(v) for k, v in dm.items()}}, 'offloaded': probe.offloaded(dm),
                  'tight_offloaded': probe.offloaded(tight), 'meta_left': meta_left,
                  'generated': int(out.shape[1]), 'rotary_ok': bool(torch.allclose(
                      model.model.rotary_emb.inv_freq,
                      AutoModelForCausalLM.from_config(cfg).model.rotary_emb.inv_freq)),
                  'named': probe.parse_oom_device(msg), 'unnamed': probe.parse_oom_device('CUDA error'),
                  'bad': bad, 'ok': ok}}))
"#,
        dir = fixture()
    );
    let Some(v) = probe_python(&code) else {
        eprintln!("LLM_OOM_TEST_PYTHON is not set: the probe's Python is not run here");
        return;
    };
    // both GPUs take layers; nothing goes to the CPU or the disk when they have room
    let on: Vec<&str> = v["map"]
        .as_object()
        .unwrap()
        .values()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert!(on.contains(&"0") && on.contains(&"1"), "{v}");
    assert_eq!(v["offloaded"], serde_json::json!([]), "{v}");
    // too little room: part of the model is off the GPUs, which the probe reports as an OOM
    assert!(!v["tight_offloaded"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(v["meta_left"], serde_json::json!([]), "{v}");
    assert_eq!(v["generated"], 12);
    assert_eq!(v["rotary_ok"], true);
    assert_eq!(v["named"], "cuda:1");
    assert_eq!(v["unnamed"], Value::Null);
    assert_eq!(v["bad"], serde_json::json!([2, 2, 2]), "{v}");
    assert_eq!(v["ok"], serde_json::json!(["cuda:0", "cuda:1"]));
}
