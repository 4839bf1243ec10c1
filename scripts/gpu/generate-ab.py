#!/usr/bin/env python3
"""Why does diagnose's decisive fresh run fit where transformers' own trial runs out?

One variant per FRESH process, the same Child set-up as scripts/gpu/transformers-limits.py's trial
(the probe's own code: ballast, random weights of the preset's shapes, from_config on the device).
Variants differ only in what happens between the load and the generate() the user runs:

  trial      the trial's plain generate() right after the load (what a user's program does)
  settle     the same, after the probe's settle() (gc, synchronize, empty_cache)
  dict       the plain generate() with return_dict_in_generate=True and a no-op logits processor
  probe      the probe's own generate task through Child.run (settle first, Mark processor, dict)
  nosettle   the probe's generate task with settle() made a no-op

    python3 scripts/gpu/generate-ab.py '{"preset": ..., "attn": ..., "batch": 1, "new": 64,
        "prompt": 1509, "vram_limit": BYTES, "variant": "trial"}'
prints one JSON line: outcome, peak_allocated, peak_reserved, reserved_unallocated at the failure
or the end, the allocator's segment count, the failure's first line.
"""
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    spec = json.loads(sys.argv[1])
    limits = load(os.path.join(HERE, "transformers-limits.py"), "transformers_limits")
    probe = limits.load_probe()
    probe.import_libs()
    torch = probe.torch
    variant = spec["variant"]
    folder = tempfile.mkdtemp(prefix="ab-model-")
    rec = {"variant": variant, "prompt": spec["prompt"], "outcome": "error"}
    child = None
    peaks = []
    try:
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(limits.preset(spec["preset"]), f)
        setup = {"model": folder, "device": spec.get("device", "cuda:0"), "dtype": "bf16", "vram_limit": spec["vram_limit"],
                 "random_weights": True, "eager": spec["attn"] == "eager", "seed": 0,
                 "attn_implementation": spec["attn"], "fast_forward": "none"}
        child = probe.Child(setup)
        child.open()
        r = child.run({"task": "load"})
        if r["outcome"] != "ok":
            rec["outcome"] = "load-" + r["outcome"]
            return rec
        dev = child.device
        b, p, n = spec["batch"], spec["prompt"], spec["new"]
        # Every reset of the peak counters first folds the peak so far in: the probe resets per phase.
        original_reset = child.meter.reset_peak

        cuda = dev.type == "cuda"

        def peak_now():
            if cuda:
                return (torch.cuda.max_memory_allocated(dev), torch.cuda.max_memory_reserved(dev))
            return (child.meter.peak(), child.meter.peak())

        def folding_reset():
            peaks.append(peak_now())
            original_reset()

        child.meter.reset_peak = folding_reset
        if variant == "nosettle":
            child.meter.settle = lambda: None
        if variant == "settle":
            child.meter.settle()
        child.meter.sync()
        original_reset()
        peaks.clear()
        t0 = time.time()
        try:
            if variant in ("probe", "nosettle"):
                g = {"task": "generate", "label": "ab", "prompt_tokens": p, "new_tokens": n, "batch": b,
                     "decode_steps": n - 1}
                res = child.run(g)
                rec["outcome"] = res["outcome"]
                rec["probe_message"] = ((res.get("oom") or {}).get("message") or res.get("error") or "")[:300]
            else:
                torch.manual_seed(1)
                ids = torch.randint(3, child.vocab - 1, (b, p), device=dev)
                mask = torch.ones_like(ids)
                kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
                if variant == "dict":
                    from transformers import LogitsProcessor, LogitsProcessorList

                    class Noop(LogitsProcessor):
                        def __call__(self, input_ids, scores):
                            return scores

                    kw.update(return_dict_in_generate=True, use_cache=True,
                              logits_processor=LogitsProcessorList([Noop()]))
                with torch.no_grad():
                    out = model_generate(child.model, ids, mask, kw)
                child.meter.sync()
                rec["outcome"] = "ok"
                del out
        except Exception as e:  # noqa: BLE001
            rec["outcome"] = "oom" if probe.is_oom(e) else "error"
            rec["message"] = probe.first_line(e)[:300]
        rec["seconds"] = round(time.time() - t0, 3)
        peaks.append(peak_now())
        rec["peak_allocated"] = max(a for a, _ in peaks)
        rec["peak_reserved"] = max(r for _, r in peaks)
        if cuda:
            st = torch.cuda.memory_stats(dev)
            rec["reserved_unallocated_end"] = int(torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev))
            rec["segments"] = int(st.get("segment.all.current", 0))
            rec["num_alloc_retries"] = int(st.get("num_alloc_retries", 0))
        rec["base_bytes"] = int(child.meter.base)
        rec["ballast_bytes"] = int(child.meter.ballast.bytes) if hasattr(child.meter, "ballast") else None
        return rec
    finally:
        if child is not None:
            child.close()
        shutil.rmtree(folder, ignore_errors=True)
        sys.stdout.write(json.dumps(rec) + "\n")
        sys.stdout.flush()


def model_generate(model, ids, mask, kw):
    return model.generate(ids, attention_mask=mask, **kw)


if __name__ == "__main__":
    main()
