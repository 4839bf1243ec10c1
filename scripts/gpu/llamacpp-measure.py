#!/usr/bin/env python3
"""llama.cpp's memory, measured: its own per-buffer report and the device's NVML peak for one
run, and the largest context that loads and generates under a memory cap.

    python3 scripts/gpu/llamacpp-measure.py run  OUT.jsonl GGUF TAG [llama args ...]
    python3 scripts/gpu/llamacpp-measure.py ctx  OUT.jsonl GGUF TAG CAP_MIB LO HI [llama args ...]
    python3 scripts/gpu/llamacpp-measure.py ballast CAP_MIB        (holds all but CAP_MIB; for tests)

A run is `$LLAMA_BIN -m GGUF --fit off -n $NEW -f PROMPT [args]` (the completion tool, no TTY);
PROMPT is $LLAMA_PROMPT_TOKENS words, so the prompt spans at least one full -ub micro-batch. While
it runs, NVML's device-level used memory is sampled every 10 ms; the record is
  {kind:"run", tag, gguf, args, rc, seconds, peak_used (bytes over the idle device, ballast
   excluded), buffers: [{what: model|kv|rs|compute|output, device, mib}], breakdown: the exit table
   rows {device, total, free, self, model, context, compute, unaccounted} (MiB), oom: the first
   out-of-memory line, log: the log's path under $LLAMACPP_LOGS}
`ctx` bisects -c in steps of 256 (llama.cpp pads the context to 256) between LO and HI with a
ballast holding all the device but CAP_MIB (cudaMalloc through libcudart, outside llama.cpp), and
writes every trial and {kind:"ctx_limit", largest_ok, first_fail}.
--fit off: llama.cpp's default (--fit on) shrinks an unset context and the offload to the free
memory; measuring its memory needs the asked values kept. The default is measured apart.
"""
import ctypes
import json
import os
import re
import subprocess
import sys
import threading
import time

MIB = 1 << 20
BIN = os.environ.get("LLAMA_BIN", ".gl/llama-cpp-cuda/bin/llama-completion")
LOGS = os.environ.get("LLAMACPP_LOGS", "/tmp/llamacpp-logs")
NEW = os.environ.get("LLAMA_NEW", "8")
PROMPT_TOKENS = int(os.environ.get("LLAMA_PROMPT_TOKENS", "1200"))
TIMEOUT = int(os.environ.get("LLAMA_TIMEOUT_S", "90"))


class Nvml:
    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    def __init__(self, index=0):
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:  # no GPU (a dry run of the parsing on the CPU build): no device meter
            self.lib = None
            return
        self.lib.nvmlInit_v2()
        self.handle = ctypes.c_void_p()
        self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.handle))

    def used(self):
        if self.lib is None:
            return 0, 0
        m = Nvml.Memory()
        self.lib.nvmlDeviceGetMemoryInfo(self.handle, ctypes.byref(m))
        return int(m.used), int(m.total)


class Sampler(threading.Thread):
    def __init__(self, nvml):
        super().__init__(daemon=True)
        self.nvml, self.peak, self.stop = nvml, 0, False

    def run(self):
        while not self.stop:
            self.peak = max(self.peak, self.nvml.used()[0])
            time.sleep(0.01)


BUFFER = re.compile(r"(?P<fn>\w+):\s+(?P<dev>\S+)\s+(?P<what>model|KV|RS|compute|output) buffer size\s*=\s*(?P<mib>[\d.]+) MiB")
TABLE = re.compile(r"\|\s+-\s+(?P<dev>\S+)(?: \((?P<desc>[^)]*)\))?\s+\|\s+(?P<total>\d+)\s+=\s+(?P<free>\d+)\s+\+\s+\((?P<self>\d+)\s+=\s+"
                   r"(?P<model>\d+)\s+\+\s+(?P<context>\d+)\s+\+\s+(?P<compute>\d+)\)\s+\+\s+(?P<unacc>-?\d+)")
HOST_ROW = re.compile(r"\|\s+-\s+(?P<dev>Host|CPU\S*)\s+\|\s+(?P<self>\d+)\s+=\s+(?P<model>\d+)\s+\+\s+(?P<context>\d+)\s+\+\s+(?P<compute>\d+)")
OOM = re.compile(r"out of memory|failed to allocate|cudaMalloc failed|unable to allocate|failed to create context|"
                 r"failed to load model", re.I)


def parse(log):
    buffers, table, oom = [], [], None
    for line in log.splitlines():
        m = BUFFER.search(line.strip())
        if m:
            buffers.append({"what": m["what"].lower(), "device": m["dev"], "mib": float(m["mib"]), "fn": m["fn"]})
        m = TABLE.search(line)
        if m:
            table.append({k: (int(v) if k not in ("dev", "desc") and v is not None else v) for k, v in m.groupdict().items()})
        m = HOST_ROW.search(line)
        if m and not TABLE.search(line):
            table.append({k: (int(v) if k != "dev" else v) for k, v in m.groupdict().items()})
        if oom is None and OOM.search(line):
            oom = line.strip()[:400]
    return buffers, table, oom


def prompt_file():
    path = os.path.join(LOGS, "prompt-%d.txt" % PROMPT_TOKENS)
    if not os.path.exists(path):
        os.makedirs(LOGS, exist_ok=True)
        words = ["memory", "river", "stone", "light", "garden", "number", "winter", "signal"]
        with open(path, "w") as f:
            f.write(" ".join(words[i % len(words)] for i in range(PROMPT_TOKENS)))
    return path


def run_once(nvml, gguf, tag, args, idle_used, ballast_bytes=0):
    os.makedirs(LOGS, exist_ok=True)
    n = len([x for x in os.listdir(LOGS) if x.endswith(".log")])
    log_path = os.path.join(LOGS, "%03d-%s.log" % (n, re.sub(r"[^A-Za-z0-9_.-]+", "_", tag)[:80]))
    cmd = [BIN, "-m", gguf, "--fit", "off", "-n", NEW, "-f", prompt_file(), "--no-display-prompt",
           "-no-cnv", "--temp", "0", "-lv", "4"] + list(args)
    s = Sampler(nvml)
    s.start()
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        rc, out = p.returncode, (p.stderr or "") + "\n" + (p.stdout or "")
    except subprocess.TimeoutExpired as e:
        rc, out = "timeout", (e.stderr or b"").decode("utf-8", "replace") if isinstance(e.stderr, bytes) else str(e.stderr or "")
    dt = time.time() - t0
    s.stop = True
    s.join()
    with open(log_path, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n" + out)
    buffers, table, oom = parse(out)
    return {"kind": "run", "tag": tag, "gguf": os.path.basename(gguf), "args": list(args), "rc": rc,
            "seconds": round(dt, 2), "peak_used": s.peak - idle_used - ballast_bytes, "idle_used": idle_used,
            "ballast_bytes": ballast_bytes, "buffers": buffers, "breakdown": table, "oom": oom,
            "log": os.path.basename(log_path)}


BALLAST_CHILD = r"""
import ctypes, sys, time
cap = int(sys.argv[1]) << 20
rt = None
for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
    try:
        rt = ctypes.CDLL(name); break
    except OSError:
        pass
free, total = ctypes.c_size_t(), ctypes.c_size_t()
rt.cudaSetDevice(0)
rt.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total))
want = free.value - cap
held, chunk, ptrs = 0, 1 << 30, []
while want - held > (1 << 20):
    size = min(chunk, want - held)
    p = ctypes.c_void_p()
    if rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(size)) != 0:
        if chunk <= (1 << 20):
            break
        chunk //= 2
        continue
    ptrs.append(p); held += size
rt.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total))
print("%d %d" % (held, free.value), flush=True)
sys.stdin.read()
"""


class Ballast:
    """All of the device but CAP_MIB held by another process (its CUDA context included)."""

    def __init__(self, cap_mib):
        self.p = subprocess.Popen([sys.executable, "-c", BALLAST_CHILD, str(cap_mib)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        held, free = self.p.stdout.readline().split()
        self.held, self.free = int(held), int(free)

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self.p.kill()


def main():
    mode = sys.argv[1]
    if mode == "ballast":
        b = Ballast(int(sys.argv[2]))
        print(json.dumps({"held": b.held, "free": b.free}))
        b.close()
        return
    out_path, gguf, tag = sys.argv[2:5]
    nvml = Nvml(0)
    out = open(out_path, "a")
    if mode == "run":
        idle = nvml.used()[0]
        rec = run_once(nvml, gguf, tag, sys.argv[5:], idle)
        out.write(json.dumps(rec) + "\n")
        print(tag, rec["rc"], rec["peak_used"] // MIB, "MiB", rec["seconds"], "s", rec["oom"] or "", flush=True)
        return
    cap, lo, hi = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
    args = sys.argv[8:]
    idle = nvml.used()[0]
    b = Ballast(cap)
    try:
        ballast_bytes = nvml.used()[0] - idle
        ok, bad = None, None
        lo, hi = lo // 256, (hi + 255) // 256
        while lo <= hi:
            mid = (lo + hi) // 2
            c = mid * 256
            rec = run_once(nvml, gguf, "%s-c%d" % (tag, c), args + ["-c", str(c)], idle, ballast_bytes)
            rec.update({"cap_mib": cap, "ctx": c, "device_free": b.free})
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print(tag, "cap", cap, "c", c, "rc", rec["rc"], rec["oom"] or "", flush=True)
            if rec["rc"] == 0:
                ok, lo = c, mid + 1
            else:
                bad, hi = c, mid - 1
        out.write(json.dumps({"kind": "ctx_limit", "tag": tag, "gguf": os.path.basename(gguf), "args": args,
                              "cap_mib": cap, "device_free": b.free, "largest_ok": ok, "first_fail": bad}) + "\n")
    finally:
        b.close()


if __name__ == "__main__":
    main()
