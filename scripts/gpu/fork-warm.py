#!/usr/bin/env python3
"""For a fork server (a warm diagnose took 17.6 s when this was written): can a
process that imported torch and transformers, without starting CUDA, fork children that then use
CUDA, and how much of a fresh child's time does that save?

`fork-warm.py cold PRESET` runs one probe-like child body in this fresh process and prints its
times. `fork-warm.py server PRESET N` imports what the probe imports (torch, transformers, the
auto classes, the model's modeling module, torch._dynamo, torch.distributed.tensor), checks CUDA
is not initialised, then forks N children one after another; each runs the same body and the
parent prints, per child, the wall time from fork to its exit. One JSON line per child."""
import json
import os
import sys
import time

T_START = time.perf_counter()


def body(preset, t_begin):
    t = {}
    t0 = time.perf_counter()

    def mark(k):
        nonlocal t0
        now = time.perf_counter()
        t[k] = round(now - t0, 3)
        t0 = now

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    mark("imports")
    torch.cuda.init()
    x = torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    mark("cuda_init")
    cfg = AutoConfig.from_pretrained(preset)
    with torch.device("cuda"):
        m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    torch.cuda.synchronize()
    mark("build_on_cuda")
    m.eval()
    ids = torch.randint(0, cfg.vocab_size, (1, 2048), device="cuda")
    for k in ("gen1", "gen2"):
        with torch.no_grad():
            m.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        mark(k)
    t["body_total"] = round(time.perf_counter() - t_begin, 3)
    t["peak_allocated"] = torch.cuda.max_memory_allocated()
    del x
    return t


def main():
    mode, preset = sys.argv[1], sys.argv[2]
    if mode == "cold":
        t = body(preset, T_START)
        t["mode"] = "cold (since the interpreter's first line)"
        print(json.dumps(t), flush=True)
        return
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    t0 = time.perf_counter()
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.distributed.tensor  # noqa: F401
    cfg = AutoConfig.from_pretrained(preset)
    # The model's modeling module, as from_config would import it.
    AutoModelForCausalLM._model_mapping[type(cfg)]
    server = {
        "mode": "server imports",
        "seconds": round(time.perf_counter() - t0, 3),
        "cuda_initialised_before_fork": torch.cuda.is_initialized(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    print(json.dumps(server), flush=True)
    for i in range(n):
        f0 = time.perf_counter()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                t = body(preset, f0)
                t["mode"] = f"forked child {i + 1} (since fork)"
            except BaseException as e:  # the point is to see it fail, if it does
                t = {"mode": f"forked child {i + 1}", "error": f"{type(e).__name__}: {e}"}
            os.write(w, json.dumps(t).encode())
            os._exit(0)
        os.close(w)
        chunks = []
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            chunks.append(b)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        t = json.loads(b"".join(chunks) or b"{}")
        t["fork_to_exit"] = round(time.perf_counter() - f0, 3)
        t["exit_status"] = status
        print(json.dumps(t), flush=True)


if __name__ == "__main__":
    main()
