#!/usr/bin/env python3
"""Record where accelerate and transformers place each module of a model, for llm-oom's
placement replay test (tests/placement_replay.rs).

Every model is built on the meta device from a preset's config.json (no weights are read), in
bf16, and placed twice per device layout:
  - `accelerate`: accelerate.utils.infer_auto_device_map(model, max_memory=..., dtype=bf16,
    no_split_module_classes=model._no_split_modules), the call the brief names;
  - `transformers-auto`: transformers' own `_get_device_map(model, "auto", max_memory, None)`,
    what `from_pretrained(..., device_map="auto", max_memory=...)` runs (get_balanced_memory
    first, then transformers' copy of infer_auto_device_map);
  - `transformers-sequential` and `transformers-balanced_low_0`: the same for those strategies.
For each it records the device of the embeddings, every decoder layer, the final norm and
lm_head, and the module sizes accelerate counted; for a vision-language model (built with
AutoModelForImageTextToText) also the device(s) and sizes of its vision tower and projector.

    /work/venv-torch/bin/python scripts/accelerate-placement.py  # writes tests/fixtures/placement/
"""

import json
import os
import sys
import warnings

import accelerate
import torch
import transformers
from accelerate import init_empty_weights
from accelerate.utils import compute_module_sizes, infer_auto_device_map
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText
from transformers.integrations.accelerate import _get_device_map

GIB = 1024**3
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "placement")

PRESETS = [
    "llama-3.1-8b-instruct",
    "mistral-7b-instruct-v0.2",
    "qwen2.5-7b-instruct",
    "qwen2.5-0.5b-instruct",
    "gemma-2-9b-it",
    "phi-3-mini-4k-instruct",
    "mixtral-8x7b-instruct-v0.1",
    "llama-3.3-70b-instruct",
    "gemma-3-27b-it",
]

# GPU budgets (bytes) and the CPU tier; names are what the fixture files are called.
LAYOUTS = {
    "2x24GiB": {0: 24 * GIB, 1: 24 * GIB, "cpu": 64 * GIB},
    "24GiB+12GiB": {0: 24 * GIB, 1: 12 * GIB, "cpu": 64 * GIB},
    "1x16GiB+cpu": {0: 16 * GIB, "cpu": 64 * GIB},
    "2x8GiB+cpu16GiB": {0: 8 * GIB, 1: 8 * GIB, "cpu": 16 * GIB},
}

# A vision-language model also gets a GPU 0 too small for its vision tower whole, so the tower
# is split at its encoder layers.
VLM_LAYOUTS = {
    "3GiB+24GiB": {0: 3 * GIB, 1: 24 * GIB, "cpu": 64 * GIB},
}


def load_model(preset):
    with open(os.path.join(ROOT, "presets", preset + ".json")) as f:
        raw = json.load(f)
    cfg = AutoConfig.for_model(**{k: v for k, v in raw.items() if k != "_name_or_path"})
    # a vision-language config (Gemma-3's `vision_config`) builds its `*ForConditionalGeneration`
    auto = AutoModelForImageTextToText if "vision_config" in raw else AutoModelForCausalLM
    with init_empty_weights():
        model = auto.from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    return model


def names(model):
    inv = {id(m): n for n, m in model.named_modules()}
    embed = inv[id(model.get_input_embeddings())]
    head = inv[id(model.get_output_embeddings())]
    # the language model's layers beside its embeddings (`model.layers`, or
    # `model.language_model.layers` under a vision-language wrapper, whose tower has its own)
    parent = embed.rsplit(".", 1)[0]
    layers = next(
        n
        for n, m in model.named_modules()
        if n.endswith("layers") and n.startswith(parent + ".") and isinstance(m, torch.nn.ModuleList)
    )
    count = len(dict(model.named_modules())[layers])
    norm = layers.rsplit(".", 1)[0] + ".norm"
    return embed, head, layers, count, norm


def device_of(device_map, module):
    """The device of `module` in a (cleaned) device map: its longest prefix entry."""
    best, where = -1, None
    for k, v in device_map.items():
        if k == "" or module == k or module.startswith(k + "."):
            if len(k) > best:
                best, where = len(k), v
    return where


def tower(model):
    """The vision tower's and projector's module names (`model.vision_tower`,
    `model.multi_modal_projector`), or None for a text-only model."""
    mods = dict(model.named_modules())
    found = [n for n in ("model.vision_tower", "model.multi_modal_projector") if n in mods]
    return found or None


def placement(device_map, model):
    embed, head, layers, count, norm = names(model)
    out = {
        "embed": device_of(device_map, embed),
        "layers": [device_of(device_map, f"{layers}.{i}") for i in range(count)],
        "norm": device_of(device_map, norm),
        "lm_head": device_of(device_map, head),
    }
    for name in tower(model) or []:
        # its device when placed whole, else every device map entry under it
        key = name.rsplit(".", 1)[1]
        whole = device_of(device_map, name)
        out[key] = whole if whole is not None else {k: v for k, v in device_map.items() if k.startswith(name + ".")}
    return out


def sizes(model):
    embed, head, layers, _, _ = names(model)
    s = compute_module_sizes(model, dtype=torch.bfloat16)
    out = {
        "total": s[""],
        "embed": s[embed],
        "layer0": s[f"{layers}.0"],
        "lm_head": s.get(head, 0),
    }
    for name in tower(model) or []:
        out[name.rsplit(".", 1)[1]] = s[name]
    return out


def record(preset):
    model = load_model(preset)
    no_split = list(model._no_split_modules or [])
    runs = []
    layouts = dict(LAYOUTS, **(VLM_LAYOUTS if tower(model) else {}))
    for layout, mm in layouts.items():
        acc = infer_auto_device_map(
            model, max_memory=dict(mm), no_split_module_classes=no_split, dtype=torch.bfloat16
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tra = _get_device_map(model, "auto", dict(mm), None)
            seq = _get_device_map(model, "sequential", dict(mm), None)
            low = _get_device_map(model, "balanced_low_0", dict(mm), None)
        for caller, dm in (
            ("accelerate", acc),
            ("transformers-auto", tra),
            ("transformers-sequential", seq),
            ("transformers-balanced_low_0", low),
        ):
            runs.append(
                {
                    "layout": layout,
                    "max_memory": {str(k): v for k, v in mm.items()},
                    "caller": caller,
                    "placement": placement(dm, model),
                }
            )
    return {
        "preset": preset,
        "architecture": model.config.architectures[0] if model.config.architectures else type(model).__name__,
        "no_split_modules": no_split,
        "tied": bool(getattr(model.config, "tie_word_embeddings", False)),
        "sizes_bf16": sizes(model),
        "versions": {"accelerate": accelerate.__version__, "transformers": transformers.__version__, "torch": torch.__version__},
        "runs": runs,
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    for preset in sys.argv[1:] or PRESETS:
        rec = record(preset)
        with open(os.path.join(OUT, preset + ".json"), "w") as f:
            json.dump(rec, f, indent=1)
            f.write("\n")
        print(preset, [(r["layout"], r["caller"], r["placement"]["lm_head"]) for r in rec["runs"]])


if __name__ == "__main__":
    main()
