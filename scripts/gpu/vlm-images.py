#!/usr/bin/env python3
"""What images cost a vision-language model in transformers, measured, against `llm-oom plan
--images`: the model built by from_config on the device (random weights of the real shapes, bf16,
SDPA), then for each case

  - the vision encoder alone (`model.model.get_image_features`): PyTorch's allocated peak above
    what was allocated before, against plan's `vision_encoder` row;
  - the whole request (`generate()` of the text prompt with the images' tokens in it): the
    allocated peak above the weights, against plan's KV cache + activations + vision encoder,
    and plan's peak on the card against the reserved peak plus the CUDA context.

Inputs are built as the processors build them (transformers 5.17): Gemma-3, `mm_tokens_per_image`
image tokens between `<start_of_image>` and `<end_of_image>` and pixel values at the SigLIP's
image_size; Qwen2.5-VL, `smart_resize`'s grid (H/14 × W/14 patches of 3·2·14·14 values, merged
2 × 2 into tokens) between `<|vision_start|>` and `<|vision_end|>`.

    python3 scripts/gpu/vlm-images.py OUT.jsonl BINARY [--device cuda:0] [--tiny]

--tiny shrinks every config (2 layers, narrow) for a dry run of the plumbing on the CPU; its
numbers are not compared.
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CASES = [
    # (config file, images, image size, text prompt tokens, new tokens)
    ("tests/fixtures/vision/qwen2.5-vl-7b-instruct.json", 2, 1024, 512, 16),
    ("tests/fixtures/vision/qwen2.5-vl-7b-instruct.json", 4, 672, 256, 16),
    ("presets/gemma-3-27b-it.json", 4, 896, 512, 16),
    ("presets/gemma-3-27b-it.json", 8, 896, 256, 16),
]


def smart_resize(h, w, factor=28, min_pixels=56 * 56, max_pixels=28 * 28 * 1280):
    """Qwen2-VL's smart_resize (models/qwen2_vl/image_processing_qwen2_vl.py)."""
    import math
    hb = max(factor, round(h / factor) * factor)
    wb = max(factor, round(w / factor) * factor)
    if hb * wb > max_pixels:
        beta = math.sqrt((h * w) / max_pixels)
        hb = math.floor(h / beta / factor) * factor
        wb = math.floor(w / beta / factor) * factor
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb = math.ceil(h * beta / factor) * factor
        wb = math.ceil(w * beta / factor) * factor
    return hb, wb


def tiny(cfg):
    cfg = json.loads(json.dumps(cfg))
    t = cfg.get("text_config", cfg)
    t.update(num_hidden_layers=2, hidden_size=512, intermediate_size=512, num_attention_heads=4,
             num_key_value_heads=2)
    if "head_dim" in t:
        t["head_dim"] = 128
    v = cfg["vision_config"]
    if v.get("model_type") == "siglip_vision_model":
        v.update(num_hidden_layers=2, hidden_size=128, intermediate_size=256, num_attention_heads=4)
    else:
        v.update(depth=2, hidden_size=128, intermediate_size=256, num_heads=4, out_hidden_size=512,
                 fullatt_block_indexes=[1])
    return cfg


def inputs(torch, cfg, images, size, prompt, device):
    """input_ids and the image arguments as the model's processor makes them."""
    g = torch.Generator().manual_seed(0)
    text = lambda n: torch.randint(100, 1000, (n,), generator=g)
    if cfg["model_type"] == "gemma3":
        v = cfg["vision_config"]
        per = cfg.get("mm_tokens_per_image", 256)
        parts = [text(prompt)]
        for _ in range(images):
            parts += [torch.tensor([cfg["boi_token_index"]]), torch.full((per,), cfg["image_token_index"]),
                      torch.tensor([cfg["eoi_token_index"]])]
        ids = torch.cat(parts).unsqueeze(0)
        px = torch.randn(images, 3, v["image_size"], v["image_size"], generator=g)
        return ids, {"pixel_values": px.to(device, torch.bfloat16)}, images * per
    v = cfg["vision_config"]
    patch, merge, tps = v["patch_size"], v["spatial_merge_size"], v["temporal_patch_size"]
    h, w = smart_resize(size, size, factor=patch * merge)
    gh, gw = h // patch, w // patch
    per = gh * gw // (merge * merge)
    parts = [text(prompt)]
    for _ in range(images):
        parts += [torch.tensor([cfg["vision_start_token_id"]]), torch.full((per,), cfg["image_token_id"]),
                  torch.tensor([cfg["vision_end_token_id"]])]
    ids = torch.cat(parts).unsqueeze(0)
    px = torch.randn(images * gh * gw, 3 * tps * patch * patch, generator=g)
    thw = torch.tensor([[1, gh, gw]] * images)
    return ids, {"pixel_values": px.to(device, torch.bfloat16), "image_grid_thw": thw.to(device)}, images * per


def plan(binary, path, images, size, prompt, new, device_bytes):
    args = [binary, "plan", "--json", "-m", path, "--images", str(images), "--image-size",
            "%dx%d" % (size, size), "-p", str(prompt), "-n", str(new), "--dtype", "bf16",
            "--vram", "%dB" % device_bytes]
    p = subprocess.run(args, capture_output=True, text=True)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"error": (p.stderr or p.stdout)[-400:]}


def main():
    out_path, binary = sys.argv[1], sys.argv[2]
    device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda:0"
    shrink = "--tiny" in sys.argv
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForImageTextToText
    cuda = device.startswith("cuda")
    out = open(out_path, "a")
    env = {"kind": "env", "torch": torch.__version__, "transformers": transformers.__version__,
           "device": torch.cuda.get_device_name(0) if cuda else "cpu", "tiny": shrink,
           "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if cuda:
        free, total = torch.cuda.mem_get_info()
        env.update(total_bytes=total, context_bytes=total - free)
    out.write(json.dumps(env) + "\n"); out.flush()
    print(json.dumps(env), flush=True)
    built = {}
    for path, images, size, prompt, new in CASES:
        raw = json.load(open(os.path.join(ROOT, path)))
        cfg = tiny(raw) if shrink else raw
        rec = {"kind": "case", "config": path, "images": images, "image_size": size, "prompt": prompt,
               "new": new}
        try:
            if path not in built:
                built.clear()
                if cuda:
                    torch.cuda.empty_cache()
                tmp = os.path.join("/tmp", "vlm-" + os.path.basename(path).replace(".json", ""))
                os.makedirs(tmp, exist_ok=True)
                with open(os.path.join(tmp, "config.json"), "w") as f:
                    json.dump(cfg, f)
                c = AutoConfig.from_pretrained(tmp)
                t0 = time.time()
                with torch.device(device):
                    m = AutoModelForImageTextToText.from_config(c, dtype=torch.bfloat16,
                                                                attn_implementation="sdpa")
                m.eval()
                if cuda:
                    torch.cuda.synchronize()
                built[path] = (m, time.time() - t0)
            m, build_s = built[path]
            weights = torch.cuda.memory_allocated() if cuda else sum(
                p.numel() * p.element_size() for p in m.parameters())
            rec.update(weights_bytes=weights, params=sum(p.numel() for p in m.parameters()),
                       build_s=round(build_s, 2))
            ids, extra, image_tokens = inputs(torch, cfg, images, size, prompt, device)
            ids = ids.to(device)
            rec.update(prompt_total=int(ids.shape[1]), image_tokens=image_tokens)
            with torch.no_grad():
                if cuda:
                    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated() if cuda else 0
                feats = m.model.get_image_features(**extra)
                if cuda:
                    torch.cuda.synchronize()
                    rec["encoder_peak_above_bytes"] = torch.cuda.max_memory_allocated() - before
                del feats
                if cuda:
                    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
                t0 = time.time()
                o = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                               min_new_tokens=new, do_sample=False, **extra)
                if cuda:
                    torch.cuda.synchronize()
                    rec["request_peak_above_weights_bytes"] = torch.cuda.max_memory_allocated() - weights
                    rec["request_peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
                rec["generated"] = int(o.shape[1] - ids.shape[1])
                rec["generate_s"] = round(time.time() - t0, 2)
                del o
            rec["outcome"] = "ok"
        except Exception as e:  # noqa: BLE001 - an OOM or an API mismatch, recorded
            rec["outcome"] = "error"
            rec["message"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
        p = plan(binary, os.path.join(ROOT, path), images, size, prompt, new,
                 env.get("total_bytes", 80 << 30))
        comp = p.get("components") or {}
        rec["plan"] = {"images": p.get("images"), "weights": p.get("weights_bytes"),
                       "kv_cache": comp.get("kv_cache"), "activations": comp.get("activations"),
                       "vision_encoder": comp.get("vision_encoder"), "vision_tower": comp.get("vision_tower"),
                       "runtime": comp.get("runtime"), "error": p.get("error")}
        out.write(json.dumps(rec) + "\n"); out.flush()
        print(json.dumps(rec), flush=True)
        if cuda:
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
