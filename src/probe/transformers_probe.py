#!/usr/bin/env python3
"""llm-oom's probe child for Hugging Face transformers: the staged protocol of src/probe/protocol.rs,
run inside the user's own torch + transformers.

    python3 transformers_probe.py --setup '<Setup JSON>'

Standard output carries JSON lines only: one Hello, then one TaskResult per Task line read from
standard input (serde's JSON for protocol.rs). Everything else (transformers' warnings, tracebacks,
progress) goes to standard error: file descriptor 1 is pointed at stderr before torch is imported,
and the protocol is written to a private duplicate of the original stdout.

Exit codes: 0 stdin closed; 2 bad setup (the last stderr line starts "llm-oom: "); 1 fatal error
while opening the device (same); 3 the parent died; 4 torch or transformers cannot be imported (one
JSON line on stdout: {"error": ..., "kind": "missing_python_package", "package": "torch"|"transformers"});
143/129/130 SIGTERM/SIGHUP/SIGINT.

Setup fields (protocol.rs `Setup`): model (a local folder with config.json, plus safetensors unless
random_weights), device (cpu|cuda|cuda:N), dtype (f32|f16|bf16), vram_limit (bytes or null),
random_weights, quantize (not supported here: ignored with a note), shared_gpu_margin (bytes: caps
PyTorch's pool with set_per_process_memory_fraction at free - margin when no limit is given), eager,
seed. Extra optional fields of this child:
  attn_implementation  string: overrides `eager` ("sdpa", "eager", "flash_attention_2", ...); a task's
                       `eager: true` still selects "eager", `eager: false` this one (or "sdpa").
  fast_forward         "update" (default) | "forward" | "none": how a generate task whose
                       new_tokens - 1 > decode_steps reaches the position of its last decode steps
                       (see Child.generate). "none" always runs one full generate().
  hf_quantization      accepted and ignored (noted).
  trust_remote_code    bool, default false: passed to AutoConfig/AutoModel (local code only).

Memory figures (TaskResult before/peak/after/prefill_peak/decode_peak/reserved_peak, OomFacts.held):
device bytes this process holds, base included, as protocol.rs asks:
  CUDA  main figures  = base + torch.cuda.memory_reserved()   (peaks: max_memory_reserved)
        `used` figures = base + torch.cuda.memory_allocated()  (peaks: max_memory_allocated)
        base = what the process holds outside PyTorch's pool and the ballast (CUDA context, kernels'
        modules, library handles), re-measured at the start of every task and never lowered
        (lazily loaded modules grow it), like the candle child's `outside`.
  CPU   all figures = the process's resident set (VmRSS; peaks VmHWM, reset at every phase by writing
        "5" to /proc/self/clear_refs). RSS, not a tracemalloc count: torch's tensors live outside
        Python's allocator, RSS sees them and the libraries alike, and VmHWM is a true high-water mark
        that no sampling can miss. Freed heap is handed back with malloc_trim(0) when settling.
Extra TaskResult fields (serde ignores them): cache_tokens (tokens in the KV cache at the end),
generated_tokens, path ("full" | "fast_forward:<mode>"), attn_implementation, note; OomFacts gets
requested_segment (the segment size the CUDA caching allocator tried to cudaMalloc, from its OOM
observer).
"""
import ctypes
import ctypes.util
import faulthandler
import gc
import json
import os
import re
import signal
import sys
import threading
import time
import traceback

GIB = 1 << 30
MIB = 1 << 20
BLOCK_STEP = 2 * MIB  # granularity of the largest-block search (as the candle child)
SEARCH_CAP = 16 * GIB  # the largest block it tries
WARMUP_CAP = 512  # the first warm-up's prompt is at most this long

torch = None  # imported by import_libs()
transformers = None

# ---------------------------------------------------------------------------------------------
# Output: JSON lines on a private duplicate of stdout; fd 1 itself goes to stderr.
# ---------------------------------------------------------------------------------------------
_OUT = None


# Seconds a task may run before its Python stacks are written to stderr (and again each period).
STALL_S = float(os.environ.get("LLM_OOM_PROBE_STALL_S", "20"))

def _claim_stdout():
    global _OUT
    if _OUT is None:
        _OUT = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    return _OUT


def send(obj):
    _OUT.write(json.dumps(obj, separators=(",", ":")) + "\n")
    _OUT.flush()


def log(msg):
    """One line on stderr; a fatal one starts "llm-oom: " (what session.rs quotes when a child dies
    before its hello)."""
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


class Fatal(Exception):
    def __init__(self, msg, code=1):
        super().__init__(msg)
        self.code = code


_BYTECODE_CACHE = None  # where this process keeps compiled bytecode (`_keep_bytecode`), when it does
_COMPILED_AHEAD = None  # (files, processes, seconds) when its first start compiled them ahead


def _private_dir(d):
    """`d`, made 0700 if missing; OSError unless this user owns it and no one else may enter it
    (what is read from it runs, or is trusted, as this user)."""
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.stat(d)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError("%s is not private to this user" % d)
    return d


def _keep_bytecode():
    """With bytecode writing off (PYTHONDONTWRITEBYTECODE, `-B`) and no compiled files beside the
    sources (as uv installs packages by default), every new interpreter compiles torch's 2,141
    modules again before it can run: on an H100 machine so set up, importing torch and transformers
    took 11.4-15.7 s, and 6.2 s once their bytecode was kept in a cache of its own
    (PYTHONPYCACHEPREFIX; docs/accuracy.md). So the probe keeps it in a private folder of the
    user's cache (`$XDG_CACHE_HOME/llm-oom/pycache`, 0700), never beside the sources. Its first
    start writes it (~90 MB); every later warm process reads it. With enough cores that first start
    compiles the sources in processes side by side before importing (`_compile_ahead`)."""
    global _BYTECODE_CACHE
    if not sys.flags.dont_write_bytecode or sys.pycache_prefix:
        return
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    try:
        d = _private_dir(os.path.join(base, "llm-oom", "pycache"))
    except OSError:
        return  # not made, or not private to this user: bytecode read from it would run as them
    sys.pycache_prefix = d
    sys.dont_write_bytecode = False
    _BYTECODE_CACHE = d
    try:
        import importlib.util
        spec = importlib.util.find_spec("torch")
        first = spec is not None and spec.origin and not os.path.exists(importlib.util.cache_from_source(spec.origin))
    except (ImportError, ValueError, NotImplementedError):
        first = False
    workers = min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
                  COMPILE_AHEAD_MAX_WORKERS)
    if first and workers >= COMPILE_AHEAD_MIN_WORKERS:
        _compile_ahead(d, workers)


COMPILE_AHEAD_MIN_WORKERS = 8  # below this the import's own compilation is as quick (measured)
COMPILE_AHEAD_MAX_WORKERS = 16
COMPILE_AHEAD_TIMEOUT_S = 60  # well inside ZYGOTE_START_S, which the relay waits for the warm process
_COMPILE_WORKER = (
    "import py_compile, sys\n"
    "for f in sys.stdin.buffer.read().decode('utf-8', 'surrogateescape').split('\\0'):\n"
    "    if f:\n"
    "        try:\n"
    "            py_compile.compile(f, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)\n"
    "        except Exception:\n"
    "            pass\n")


def _compile_sources(roots=("torch", "transformers", "accelerate")):
    """The Python sources of `roots` and of everything they require (their installed distributions'
    RECORDs, requirements under an extra left out), less tests and transformers' model families
    other than `auto` (the one a model needs is compiled when imported)."""
    import importlib.metadata as md
    seen, todo, files = set(), list(roots), []
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = md.distribution(name)
        except Exception:  # noqa: BLE001 - not installed, or broken metadata: nothing to compile
            continue
        for req in dist.requires or []:
            if "extra ==" in req.replace("extra==", "extra =="):
                continue
            m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
            if m:
                todo.append(m.group(1))
        for f in dist.files or []:
            rel = str(f)
            if not rel.endswith(".py") or "/tests/" in rel or "/testing/_internal/" in rel:
                continue
            if rel.startswith("transformers/models/") and rel.count("/") > 2 \
                    and not rel.startswith("transformers/models/auto/"):
                continue
            files.append(str(dist.locate_file(f)))
    return files


def _compile_ahead(prefix, workers):
    """Compile the sources the import will read into the bytecode cache `prefix`, in `workers`
    processes side by side, before the import: the import alone compiles its ~2,300 modules one
    after another (about 6 s of a first start). The workers compile more than the import reads
    (whole distributions), so this is done only with enough cores. Waited on, at most
    COMPILE_AHEAD_TIMEOUT_S; a file that fails is left to the import."""
    import subprocess
    started = time.time()
    files = _compile_sources()
    if not files:
        return
    flags = ["-I", "-X", "pycache_prefix=" + prefix] + ["-O"] * sys.flags.optimize
    procs = []
    for i in range(workers):
        share = files[i::workers]
        if not share:
            continue
        try:
            p = subprocess.Popen([sys.executable] + flags + ["-c", _COMPILE_WORKER], stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:
            break
        procs.append((p, "\0".join(share).encode("utf-8", "surrogateescape")))
    for p, data in procs:
        try:
            p.stdin.write(data)
            p.stdin.close()
        except OSError:
            pass
    deadline = time.time() + COMPILE_AHEAD_TIMEOUT_S
    for p, _ in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    global _COMPILED_AHEAD
    _COMPILED_AHEAD = (len(files), len(procs), time.time() - started)  # the listing and starts too


def import_libs():
    """Import torch and transformers; exit 4 with one JSON line when either is missing or broken."""
    global torch, transformers
    _keep_bytecode()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    for name in ("torch", "transformers"):
        try:
            mod = __import__(name)
        except Exception as e:  # noqa: BLE001 - ImportError, or a broken install (OSError, ...)
            missing = isinstance(e, ImportError)
            why = "is not installed" if isinstance(e, ModuleNotFoundError) else "cannot be imported"
            _claim_stdout()
            send({"error": "the Python package %s %s for %s (%s: %s)"
                  % (name, why, sys.executable, type(e).__name__, str(e).splitlines()[0][:300] if str(e) else ""),
                  "kind": "missing_python_package", "package": name, "python": sys.executable,
                  "import_error": missing})
            log("llm-oom: the Python package %s %s for %s" % (name, why, sys.executable))
            sys.exit(4)
        if name == "torch":
            torch = mod
        else:
            transformers = mod
    try:
        transformers.logging.set_verbosity_error()
    except Exception:  # noqa: BLE001
        pass
    _skip_sklearn()


def _skip_sklearn():
    """transformers' generation module imports scikit-learn, when it is installed, for assisted
    decoding's ROC curve, which the probe never runs: 2.6 s of the H200 machine's start
    (measured with `python3 -X importtime`). Its availability check is answered "no" before that
    import; nothing the probe measures touches it."""
    try:
        import transformers.utils as tu
        import transformers.utils.import_utils as iu
        if "transformers.generation.candidate_generator" in sys.modules:
            return  # already imported: nothing to save
        for mod in (tu, iu):
            if hasattr(mod, "is_sklearn_available"):
                mod.is_sklearn_available = lambda: False
    except Exception:  # noqa: BLE001 - another transformers layout: import as it comes
        pass


# ---------------------------------------------------------------------------------------------
# Small readers
# ---------------------------------------------------------------------------------------------
def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _meminfo():
    out = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


_UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "KB": 1000, "MB": 1000 ** 2, "GB": 1000 ** 3, "TB": 1000 ** 4}


def parse_requested(message):
    """Bytes of the failed allocation from PyTorch's messages (binary units as c10 prints them)."""
    m = re.search(r"[Tt]ried to allocate ([0-9]+(?:\.[0-9]+)?) ?(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b", message)
    if m:
        return int(round(float(m.group(1)) * _UNITS[m.group(2)]))
    return None


def parse_oom_device(message):
    """The GPU PyTorch's out-of-memory message names ("GPU 1 has a total capacity of ..."), as
    "cuda:1"; None when it names none."""
    m = re.search(r"\bGPU (\d+) has a total capacity", message)
    return "cuda:%d" % int(m.group(1)) if m else None


# An allocation failure in disguise: the library that asked for memory reports its own error.
_DISGUISED = ("out of memory", "mha_graph", "is_good()", "CUBLAS_STATUS_ALLOC_FAILED",
              "CUBLAS_STATUS_NOT_INITIALIZED", "CUDNN_STATUS_ALLOC_FAILED",
              "CUDNN_STATUS_NOT_INITIALIZED", "CUDA_ERROR_OUT_OF_MEMORY",
              "cudaErrorMemoryAllocation", "can't allocate memory")


def is_oom(e):
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)) if t)
    if oom_types and isinstance(e, oom_types):
        return True
    if isinstance(e, MemoryError):
        return True
    if isinstance(e, RuntimeError):
        s = str(e)
        return any(k in s for k in _DISGUISED)
    return False


def part_from_traceback(tb, phase):
    """What was being allocated: the failing frame's file names it."""
    frames = traceback.extract_tb(tb) if tb is not None else []
    for fr in reversed(frames):
        fn = fr.filename.replace("\\", "/")
        if fn.endswith("cache_utils.py"):
            return "kv_cache"
        if "/transformers/" in fn or "/torch/nn/" in fn:
            break
    if phase == "load":
        return "weights"
    if phase == "kv_cache":
        return "kv_cache"
    if phase in ("fragmentation", "other"):
        return "other"
    return "activations"


def first_line(e, limit=400):
    s = str(e).strip()
    line = s.splitlines()[0] if s else type(e).__name__
    return line[:limit]


# ---------------------------------------------------------------------------------------------
# NVML through ctypes (this process's bytes on the GPU)
# ---------------------------------------------------------------------------------------------
class _ProcInfo(ctypes.Structure):
    # nvmlProcessInfo_t == nvmlProcessInfo_v2_t, what nvmlDeviceGetComputeRunningProcesses_v3 fills
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Nvml:
    NOT_AVAILABLE = (1 << 64) - 1

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit_v2 failed")
        n = ctypes.c_uint(0)
        if self.lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) != 0:
            raise OSError("nvmlDeviceGetCount_v2 failed")
        self.handles = []
        for i in range(n.value):
            h = ctypes.c_void_p()
            if self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(h)) == 0:
                self.handles.append(h)

    def used_sum(self):
        """Bytes used on all GPUs (device level)."""
        total = 0
        for h in self.handles:
            m = _Memory()
            if self.lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m)) == 0:
                total += m.used
        return total

    def pid_bytes(self, pid):
        """Bytes NVML lists for `pid`, summed over the GPUs; None when the pid is not listed (another
        PID namespace, or no per-process accounting)."""
        found, total = False, 0
        for h in self.handles:
            count = ctypes.c_uint(0)
            rc = self.lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(count), None)
            if rc not in (0, 7):  # 7: NVML_ERROR_INSUFFICIENT_SIZE
                continue
            cap = count.value + 16
            arr = (_ProcInfo * cap)()
            count = ctypes.c_uint(cap)
            if self.lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(count), arr) != 0:
                continue
            for i in range(count.value):
                if arr[i].pid == pid and arr[i].usedGpuMemory != self.NOT_AVAILABLE:
                    found = True
                    total += arr[i].usedGpuMemory
        return total if found else None


class _NvmlOneDevice:
    """NVML's figures for one GPU, found by the UUID torch reports for it (CUDA and NVML number
    GPUs differently under CUDA_VISIBLE_DEVICES)."""

    @staticmethod
    def handle_for(nvml, index):
        if nvml is None:
            return None
        want = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
        want = want.lower().replace("gpu-", "")
        if not want:
            return None
        nvml.lib.nvmlDeviceGetUUID.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint]
        for h in nvml.handles:
            buf = ctypes.create_string_buffer(96)
            if nvml.lib.nvmlDeviceGetUUID(h, buf, ctypes.c_uint(96)) == 0:
                if buf.value.decode("ascii", "replace").lower().replace("gpu-", "") == want:
                    return h
        return None

    @staticmethod
    def used(nvml, h):
        m = _Memory()
        if nvml.lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m)) == 0:
            return int(m.used)
        return None

    @staticmethod
    def pid_bytes(nvml, h, pid):
        count = ctypes.c_uint(0)
        rc = nvml.lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(count), None)
        if rc not in (0, 7):
            return None
        cap = count.value + 16
        arr = (_ProcInfo * cap)()
        count = ctypes.c_uint(cap)
        if nvml.lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(count), arr) != 0:
            return None
        for i in range(count.value):
            if arr[i].pid == pid and arr[i].usedGpuMemory != Nvml.NOT_AVAILABLE:
                return int(arr[i].usedGpuMemory)
        return None


def try_nvml():
    try:
        return Nvml()
    except Exception:  # noqa: BLE001 - no driver library, no permission...
        return None


# ---------------------------------------------------------------------------------------------
# The ballast: device memory held OUTSIDE PyTorch's caching allocator, in torch's own context
# ---------------------------------------------------------------------------------------------
def _loaded_library(stem):
    """Path of an already mapped shared library whose file name starts with `stem` (the very copy
    torch uses: dlopen of the same path returns the same handle)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and os.path.basename(parts[-1]).startswith(stem):
                    return parts[-1]
    except OSError:
        pass
    return None


class Ballast:
    """Bytes held with cudaMalloc (libcudart, the copy torch loaded) or, failing that, with the
    driver's cuMemAlloc_v2 in the current (torch's primary) context. Neither PyTorch's counters nor
    its pool see them; cudaMemGetInfo / torch.cuda.mem_get_info / NVML do, so the card looks smaller
    to PyTorch exactly as a smaller card would."""

    def __init__(self, index):
        self.index = index
        self.ptrs = []
        self.bytes = 0
        self.api = None
        self._rt = None
        self._drv = None

    def _open(self):
        if self._rt or self._drv:
            return
        path = _loaded_library("libcudart.so") or ctypes.util.find_library("cudart")
        if path:
            try:
                rt = ctypes.CDLL(path)
                rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
                rt.cudaMalloc.restype = ctypes.c_int
                rt.cudaFree.argtypes = [ctypes.c_void_p]
                rt.cudaFree.restype = ctypes.c_int
                rt.cudaSetDevice.argtypes = [ctypes.c_int]
                rt.cudaGetLastError.restype = ctypes.c_int
                self._rt, self.api = rt, "cudaMalloc (%s)" % os.path.basename(path)
                return
            except (OSError, AttributeError):
                self._rt = None
        drv = ctypes.CDLL(_loaded_library("libcuda.so") or "libcuda.so.1")
        drv.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        drv.cuMemAlloc_v2.restype = ctypes.c_int
        drv.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        drv.cuMemFree_v2.restype = ctypes.c_int
        ctx = ctypes.c_void_p()
        if drv.cuCtxGetCurrent(ctypes.byref(ctx)) != 0 or not ctx.value:
            raise OSError("no current CUDA context for cuMemAlloc_v2")
        self._drv, self.api = drv, "cuMemAlloc_v2 (libcuda)"

    def _alloc(self, size):
        if self._rt is not None:
            self._rt.cudaSetDevice(self.index)
            p = ctypes.c_void_p()
            if self._rt.cudaMalloc(ctypes.byref(p), size) == 0 and p.value:
                return p.value
            # A failed cudaMalloc leaves the runtime's last error set; PyTorch's next kernel-launch
            # check (cudaGetLastError) would report it as its own failure. Clear it.
            self._rt.cudaGetLastError()
            return None
        p = ctypes.c_uint64()
        if self._drv.cuMemAlloc_v2(ctypes.byref(p), size) == 0 and p.value:
            return p.value
        return None

    def hold(self, nbytes):
        """Hold `nbytes` more (rounded down to 2 MiB), in chunks of at most 4 GiB that halve on
        failure; returns the bytes actually added."""
        nbytes = (max(0, int(nbytes)) // BLOCK_STEP) * BLOCK_STEP
        if nbytes == 0:
            return 0
        self._open()
        added, chunk = 0, 4 * GIB
        while nbytes - added >= BLOCK_STEP:
            size = min(chunk, nbytes - added)
            ptr = self._alloc(size)
            if ptr is None:
                if chunk <= BLOCK_STEP:
                    break
                chunk = max(BLOCK_STEP, (chunk // 2 // BLOCK_STEP) * BLOCK_STEP)
                continue
            self.ptrs.append(ptr)
            added += size
        self.bytes += added
        return added

    def free(self):
        for p in self.ptrs:
            try:
                if self._rt is not None:
                    self._rt.cudaFree(ctypes.c_void_p(p))
                elif self._drv is not None:
                    self._drv.cuMemFree_v2(ctypes.c_uint64(p))
            except Exception:  # noqa: BLE001
                pass
        self.ptrs, self.bytes = [], 0


# ---------------------------------------------------------------------------------------------
# Meters
# ---------------------------------------------------------------------------------------------
class CudaMeter:
    """Device bytes of this process on CUDA. `own()` is what the process holds on the GPU, by the
    best source there is:
      nvml-pid    NVML's per-process bytes for this pid (exact; context, pool and ballast);
      nvml-delta  NVML's device-level used bytes (all GPUs) now, less what they were before this
                  process created its context (when NVML lists other pids: a PID namespace);
      mem-get-info  total - free of this device (no NVML: counts other processes too).
    base = own - torch reserved - ballast, measured after the context exists (torch.zeros(1) then
    freed), i.e. context + torch's libraries; it only grows (refresh_base)."""

    name = "torch-cuda"

    def __init__(self, device, index, nvml, used_before):
        self.device = device
        self.index = index
        self.nvml = nvml
        self.used_before = used_before
        self.ballast = Ballast(index)
        self.base = 0
        self.method = "mem-get-info"
        self.pool_cap = None
        if nvml is not None:
            self.method = "nvml-pid" if nvml.pid_bytes(os.getpid()) else (
                "nvml-delta" if used_before is not None else "mem-get-info")

    def mem(self):
        free, total = torch.cuda.mem_get_info(self.index)
        return int(free), int(total)

    def own(self):
        if self.method == "nvml-pid":
            b = self.nvml.pid_bytes(os.getpid())
            if b is not None:
                return int(b)
        if self.method == "nvml-delta":
            return max(0, int(self.nvml.used_sum() - self.used_before))
        free, total = self.mem()
        return total - free

    def reserved(self):
        return int(torch.cuda.memory_reserved(self.index))

    def allocated(self):
        return int(torch.cuda.memory_allocated(self.index))

    def measure_base(self):
        self.base = max(0, self.own() - self.reserved() - self.ballast.bytes)
        return self.base

    def refresh_base(self):
        self.base = max(self.base, self.own() - self.reserved() - self.ballast.bytes)

    def settle(self):
        gc.collect()
        torch.cuda.synchronize(self.index)
        torch.cuda.empty_cache()

    def reset_peak(self):
        torch.cuda.synchronize(self.index)
        torch.cuda.reset_peak_memory_stats(self.index)

    def held(self):
        return self.base + self.reserved()

    def held_used(self):
        return self.base + self.allocated()

    def peak(self):
        return self.base + int(torch.cuda.max_memory_reserved(self.index))

    def peak_used(self):
        return self.base + int(torch.cuda.max_memory_allocated(self.index))

    def sync(self):
        torch.cuda.synchronize(self.index)


class DeviceMeter(CudaMeter):
    """One GPU of several: like CudaMeter, but `own()` counts this GPU only (NVML's bytes for this
    pid on it, found by UUID; else its device-level used bytes less what they were before the
    context; else total - free)."""

    def __init__(self, device, index, nvml, used_before):
        super().__init__(device, index, nvml, None)
        self.handle = _NvmlOneDevice.handle_for(nvml, index)
        self.used_before_dev = used_before
        if self.handle is None:
            self.method = "mem-get-info"
        elif _NvmlOneDevice.pid_bytes(nvml, self.handle, os.getpid()):
            self.method = "nvml-pid"
        else:
            self.method = "nvml-delta" if used_before is not None else "mem-get-info"

    def own(self):
        if self.method == "nvml-pid":
            b = _NvmlOneDevice.pid_bytes(self.nvml, self.handle, os.getpid())
            if b is not None:
                return b
        if self.method == "nvml-delta":
            used = _NvmlOneDevice.used(self.nvml, self.handle)
            if used is not None:
                return max(0, used - self.used_before_dev)
        free, total = self.mem()
        return total - free

    def nvml_bytes(self):
        if self.handle is None:
            return None
        return _NvmlOneDevice.pid_bytes(self.nvml, self.handle, os.getpid())


class _Ballasts:
    """The ballasts of several GPUs, as one for the Child."""

    def __init__(self, meters):
        self.meters = meters

    @property
    def bytes(self):
        return sum(m.ballast.bytes for m in self.meters)

    @property
    def api(self):
        return self.meters[0].ballast.api

    def free(self):
        for m in self.meters:
            m.ballast.free()


class MultiMeter(CudaMeter):
    """Several GPUs as one meter for the Child: every figure is the sum over the GPUs (a summed
    peak is an upper bound: the GPUs peak one after another under device_map). Each GPU's own
    figures through a task are kept for the TaskResult's `per_device`."""

    def __init__(self, meters):  # noqa: super().__init__ is CudaMeter's one-GPU set-up
        self.meters = meters
        first = meters[0]
        self.device, self.index, self.nvml = first.device, first.index, first.nvml
        self.ballast = _Ballasts(meters)
        self.method = first.method
        self.pool_cap = None
        self.weights = [0] * len(meters)
        self.begin_task()

    @property
    def base(self):
        return sum(m.base for m in self.meters)

    def mem(self):
        pairs = [m.mem() for m in self.meters]
        return sum(f for f, _ in pairs), sum(t for _, t in pairs)

    def own(self):
        return sum(m.own() for m in self.meters)

    def reserved(self):
        return sum(m.reserved() for m in self.meters)

    def allocated(self):
        return sum(m.allocated() for m in self.meters)

    def measure_base(self):
        return sum(m.measure_base() for m in self.meters)

    def refresh_base(self):
        for m in self.meters:
            m.refresh_base()

    def settle(self):
        gc.collect()
        for m in self.meters:
            torch.cuda.synchronize(m.index)
        torch.cuda.empty_cache()

    def _fold(self):
        for i, m in enumerate(self.meters):
            self.acc[i] = max(self.acc[i], m.peak())
            self.acc_used[i] = max(self.acc_used[i], m.peak_used())

    def reset_peak(self):
        self._fold()
        for m in self.meters:
            m.reset_peak()

    def held(self):
        return sum(m.held() for m in self.meters)

    def held_used(self):
        return sum(m.held_used() for m in self.meters)

    def peak(self):
        return sum(m.peak() for m in self.meters)

    def peak_used(self):
        return sum(m.peak_used() for m in self.meters)

    def sync(self):
        for m in self.meters:
            m.sync()

    def begin_task(self):
        self.before = [m.held() for m in self.meters]
        self.acc = list(self.before)
        self.acc_used = [m.held_used() for m in self.meters]

    def end_task(self, capacities):
        """Each GPU's figures through the task (`protocol.rs` DeviceMemory)."""
        self._fold()
        out = []
        for i, m in enumerate(self.meters):
            out.append({"device": "cuda:%d" % m.index, "before": int(self.before[i]),
                        "peak": int(max(self.acc[i], self.before[i])), "after": int(m.held()),
                        "used_peak": int(self.acc_used[i]), "capacity_bytes": int(capacities[i]),
                        "weights_bytes": int(self.weights[i]), "nvml_bytes": m.nvml_bytes()})
        return out


class PlacementOom(Exception):
    """device_map="auto" over the GPUs given puts part of the model on the CPU or the disk: the
    weights do not fit them (reported as an out-of-memory at load)."""


def device_map_for(model, max_memory):
    """transformers' own `device_map="auto"` for a (meta) model over `max_memory` ({gpu: bytes}):
    `_get_device_map`, balancing included, as from_pretrained computes it."""
    from transformers.integrations.accelerate import _get_device_map
    return dict(_get_device_map(model, "auto", dict(max_memory), None))


def offloaded(device_map):
    """The modules a device map puts off the GPUs."""
    return [k for k, v in device_map.items() if str(v) in ("cpu", "disk", "meta")]


def materialize(model, device_map, device_of=None):
    """A meta model's random weights drawn on the devices of `device_map` (module -> GPU index):
    each placed module made empty on its device, tied weights re-tied, then transformers'
    `init_weights` (which also recomputes the rotary tables); `device_of` turns a map value into a
    torch device (tests pass the CPU). Returns the dispatched model."""
    from accelerate import dispatch_model
    device_of = device_of or (lambda v: torch.device("cuda", int(v)))
    for name, where in device_map.items():
        sub = model.get_submodule(name) if name else model
        sub.to_empty(device=device_of(where))
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
    if left:
        raise RuntimeError("device_map left %s on the meta device" % ", ".join(left[:4]))
    with torch.no_grad():
        model.init_weights()
    return dispatch_model(model, device_map={k: device_of(v) for k, v in device_map.items()})


class CpuMeter:
    """The process's resident set (see the module docstring)."""

    name = "torch-cpu"

    def __init__(self, limit):
        self.limit = limit
        self.base = _status_kib("VmRSS")
        self.can_reset = True
        self.seen = 0
        self._libc = None
        try:
            self._libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        except OSError:
            pass
        self.reset_peak()

    def measure_base(self):
        self.base = _status_kib("VmRSS")
        return self.base

    def refresh_base(self):
        pass

    def settle(self):
        gc.collect()
        if self._libc is not None and hasattr(self._libc, "malloc_trim"):
            self._libc.malloc_trim(0)

    def reset_peak(self):
        self.seen = 0
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            self.can_reset = False

    def held(self):
        return _status_kib("VmRSS")

    held_used = held

    def peak(self):
        # The kernel folds its per-thread RSS counters into VmHWM lazily: VmRSS can be above it for
        # a moment. The peak is the highest of both ever read since the reset.
        self.seen = max(self.seen, _status_kib("VmHWM"), self.held())
        return self.seen

    peak_used = peak

    def sync(self):
        pass


class EmulatedOom(Exception):
    def __init__(self, held, limit, part):
        super().__init__("emulated out of memory: the process's peak resident set %d bytes crosses the %d-byte limit"
                         % (held, limit))
        self.held = held
        self.part = part


# ---------------------------------------------------------------------------------------------
# The child
# ---------------------------------------------------------------------------------------------
DTYPES = {"f32": "float32", "float32": "float32", "fp32": "float32", "f16": "float16", "float16": "float16",
          "fp16": "float16", "bf16": "bfloat16", "bfloat16": "bfloat16"}


def new_result(label):
    return {"label": label, "outcome": "ok", "seconds": 0.0, "before": 0, "peak": 0, "after": 0,
            "reserved_peak": None, "weights_bytes": 0, "kv_bytes": 0, "kv_bytes_measured": None,
            "prefill_peak": None, "decode_peak": None, "prefill_seconds": None,
            "decode_tokens_per_second": None,
            "used": {"before": 0, "peak": 0, "prefill_peak": None, "decode_peak": None},
            "oom": None, "error": None, "fragmentation": None}


def cache_tensors(cache):
    """The cache's key/value tensors: transformers 5 `cache.layers[i].keys/values`, older
    `key_cache/value_cache` lists, or a legacy tuple of (k, v) pairs."""
    if cache is None:
        return []
    out = []
    layers = getattr(cache, "layers", None)
    if layers is not None:
        for layer in layers:
            for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                if torch.is_tensor(t):
                    out.append(t)
        return out
    kc, vc = getattr(cache, "key_cache", None), getattr(cache, "value_cache", None)
    if kc is not None and vc is not None:
        return [t for t in list(kc) + list(vc) if torch.is_tensor(t)]
    if isinstance(cache, (tuple, list)):
        for pair in cache:
            out.extend(t for t in pair if torch.is_tensor(t))
    return out


def cache_bytes(cache):
    """(tensor bytes, distinct storage bytes): a sliding layer keeps a view of a longer tensor."""
    ts = cache_tensors(cache)
    tensor_bytes = sum(t.numel() * t.element_size() for t in ts)
    seen, storage = set(), 0
    for t in ts:
        s = t.untyped_storage()
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            storage += s.nbytes()
    return int(tensor_bytes), int(storage)


def cache_len(cache):
    try:
        return int(cache.get_seq_length())
    except Exception:  # noqa: BLE001
        ts = cache_tensors(cache)
        return int(ts[0].shape[-2]) if ts else 0


class Child:
    def __init__(self, setup):
        self.setup = setup
        self.notes = []
        self.model = None
        self.weights_bytes = 0
        self.phase = "other"
        self.peak_acc = 0
        self.peak_used_acc = 0
        self.last_oom = None  # (segment bytes, device free) from PyTorch's OOM observer
        self.last_oom_gpu = None  # the GPU index the observer saw fail (several GPUs)
        self.limit = setup.get("vram_limit")
        self._check_setup()

    # -- setup ---------------------------------------------------------------------------------
    def _check_setup(self):
        s = self.setup
        for k in ("model", "device", "dtype"):
            if not isinstance(s.get(k), str) or not s.get(k):
                raise Fatal("the setup has no %s" % k, 2)
        if s["dtype"].lower() not in DTYPES:
            raise Fatal("unknown dtype %r (f32, f16, bf16)" % s["dtype"], 2)
        if not os.path.isfile(os.path.join(s["model"], "config.json")):
            raise Fatal("no config.json in %s" % s["model"], 2)
        dev = s["device"].strip().lower()
        if dev in ("cuda", "gpu"):
            dev = "cuda:0"
        if not (dev == "cpu" or re.fullmatch(r"cuda:\d+", dev)):
            raise Fatal("unknown device %r (cpu, cuda, cuda:N)" % s["device"], 2)
        self.device_name = dev  # as request.rs's Device prints it
        self.devices = []
        devs = s.get("devices") or []
        if devs:
            if not isinstance(devs, list) or len(devs) < 2:
                raise Fatal("devices must list two or more GPUs (cuda:N)", 2)
            for d in devs:
                d = str(d).strip().lower()
                d = "cuda:0" if d in ("cuda", "gpu") else d
                if not re.fullmatch(r"cuda:\d+", d):
                    raise Fatal("devices are GPUs only (cuda:N), not %r" % d, 2)
                self.devices.append(d)
            if len(set(self.devices)) != len(self.devices):
                raise Fatal("a GPU is listed twice in devices", 2)
        if self.limit is not None:
            if isinstance(self.limit, bool) or not isinstance(self.limit, (int, float)) or self.limit <= 0:
                raise Fatal("vram_limit must be a positive number of bytes", 2)
            self.limit = int(self.limit)
        ff = s.get("fast_forward", "update")
        if ff not in ("update", "forward", "none"):
            raise Fatal("fast_forward must be update, forward or none", 2)
        self.fast_forward = ff

    def attn_for(self, eager):
        if eager:
            return "eager"
        impl = self.setup.get("attn_implementation")
        if impl and impl != "eager":
            return impl
        return "sdpa"

    def open(self):
        s = self.setup
        self.dtype = getattr(torch, DTYPES[s["dtype"].lower()])
        impl = s.get("attn_implementation")
        self.attn = impl if impl else ("eager" if s.get("eager") else "sdpa")
        torch.manual_seed(int(s.get("seed") or 0))
        if s.get("quantize"):
            self.notes.append("quantize=%s is not supported by the transformers probe: ignored" % s["quantize"])
        if s.get("hf_quantization"):
            self.notes.append("hf_quantization is ignored by the transformers probe")
        dev = self.device_name
        hello = {"pid": os.getpid(), "device": dev, "engine": "transformers"}
        if self.devices:
            self._open_multi(hello)
        elif dev == "cpu":
            self.device = torch.device("cpu")
            self.meter = CpuMeter(self.limit)
            base = self.meter.measure_base()
            if self.limit is not None:
                capacity = int(self.limit)
                self.notes.append("CPU: the limit is emulated on the process's resident set (base included); "
                                  "a peak past it is reported as an emulated out-of-memory")
                # Checked after every module's forward (at most every 2 ms): VmHWM is a high-water
                # mark, so a check that comes late still sees the crossing.
                self._last_check = 0.0
                torch.nn.modules.module.register_module_forward_hook(self._cpu_limit_hook)
            else:
                capacity = _meminfo().get("MemAvailable", 0) + base
            if not self.meter.can_reset:
                self.notes.append("/proc/self/clear_refs is not writable: peaks are the process's lifetime highs")
            hello.update(meter=self.meter.name, base_bytes=int(base), ballast_bytes=0,
                         capacity_bytes=int(capacity), device_total=None, device_free=None)
        else:
            index = int(dev.split(":")[1])
            nvml = try_nvml()
            # Before this process touches CUDA: what all GPUs use (nvml-delta's reference).
            used_before = nvml.used_sum() if nvml is not None else None
            if not torch.cuda.is_available():
                raise Fatal("CUDA is not available to torch %s (built for CUDA %s) in %s: pass --device cpu, "
                            "or --python an interpreter whose torch sees the GPU"
                            % (torch.__version__, torch.version.cuda, sys.executable), 2)
            if index >= torch.cuda.device_count():
                raise Fatal("there is no %s (torch sees %d GPU(s))" % (s["device"], torch.cuda.device_count()), 2)
            self.device = torch.device("cuda", index)
            torch.cuda.set_device(index)
            torch.zeros(1, device=self.device)  # creates the context and initialises torch's pool
            torch.cuda.synchronize(index)
            torch.cuda.empty_cache()
            self.meter = m = CudaMeter(self.device, index, nvml, used_before)
            base = m.measure_base()
            free, total = m.mem()
            own = m.own()
            if self.limit is not None:
                mine = own - m.ballast.bytes
                if self.limit > mine + free:
                    self.notes.append("the limit %d is more than this GPU has for the probe (%d); probing with what there is"
                                      % (self.limit, mine + free))
                    capacity = mine + free
                else:
                    capacity = int(self.limit)
                    # ballast = free_now - (vram_limit - this_process_now), then top up (the
                    # driver may round; a second pass lands within 2 MiB).
                    for _ in range(3):
                        free, _t = m.mem()
                        mine = m.own() - m.ballast.bytes
                        need = free - max(0, self.limit - mine)
                        if need < BLOCK_STEP:
                            break
                        if m.ballast.hold(need) == 0:
                            break
                    free, _t = m.mem()
                    short = free - max(0, self.limit - (m.own() - m.ballast.bytes))
                    if self.limit <= mine:
                        self.notes.append("the limit %d is below what this process holds before any tensor (%d)"
                                          % (self.limit, mine))
                    elif short > 64 * MIB:
                        raise Fatal("could not hold the ballast for vram_limit=%d: %d bytes still free above the limit"
                                    % (self.limit, short), 1)
                    self.notes.append("ballast %d bytes through %s" % (m.ballast.bytes, m.ballast.api))
            else:
                capacity = own + free
                margin = s.get("shared_gpu_margin")
                if margin:
                    cap = max(0, free - int(margin))
                    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / float(total)), index)
                    m.pool_cap = cap
                    capacity = own + min(cap, free)
                    self.notes.append("other processes use this GPU: PyTorch's pool was capped at %d bytes "
                                      "(free %d less a %d margin)" % (cap, free, int(margin)))
            try:
                torch._C._cuda_attach_out_of_memory_observer(self._oom_observer)
            except Exception:  # noqa: BLE001 - a private hook; the message is parsed anyway
                pass
            self.notes.append("base measured by %s" % m.method)
            free, total = m.mem()
            hello.update(meter=m.name, base_bytes=int(base), ballast_bytes=int(m.ballast.bytes),
                         capacity_bytes=int(capacity), device_total=total, device_free=free)
            conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")
            if conf:
                self.notes.append("PYTORCH_CUDA_ALLOC_CONF=%s" % conf)
        if _BYTECODE_CACHE:
            self.notes.append("PYTHONDONTWRITEBYTECODE is set: the probe keeps torch's and transformers' "
                              "compiled bytecode in %s, so a new probe process need not compile them again"
                              % _BYTECODE_CACHE)
            if _COMPILED_AHEAD:
                self.notes.append("this first start compiled %d Python sources there in %d processes side by "
                                  "side in %.1f s" % _COMPILED_AHEAD)
        self.notes = ["torch %s" % torch.__version__, "transformers %s" % transformers.__version__,
                      "attn_implementation %s" % self.attn, "fast_forward %s" % self.fast_forward] + self.notes
        hello["notes"] = self.notes
        return hello

    def close(self):
        m = getattr(self, "meter", None)
        if isinstance(m, CudaMeter):
            m.ballast.free()

    def _oom_observer(self, device, alloc, device_allocated, device_free):
        self.last_oom = (int(alloc), int(device_free))
        self.last_oom_gpu = int(device)

    def _open_multi(self, hello):
        """Several GPUs: a context and a DeviceMeter on each (the limit, when given, held as a
        ballast on each); the hello's figures are their sums and `devices` each one's."""
        nvml = try_nvml()
        used = []
        if not torch.cuda.is_available():
            raise Fatal("CUDA is not available to torch %s in %s: pass --python an interpreter whose torch "
                        "sees the GPUs" % (torch.__version__, sys.executable), 2)
        n = torch.cuda.device_count()
        indices = [int(d.split(":")[1]) for d in self.devices]
        for d, index in zip(self.devices, indices):
            if index >= n:
                raise Fatal("there is no %s (torch sees %d GPU(s))" % (d, n), 2)
            h = _NvmlOneDevice.handle_for(nvml, index) if nvml is not None else None
            used.append(_NvmlOneDevice.used(nvml, h) if h is not None else None)
        meters = []
        for index, before in zip(indices, used):
            torch.cuda.set_device(index)
            dev = torch.device("cuda", index)
            torch.zeros(1, device=dev)  # this GPU's context and pool
            torch.cuda.synchronize(index)
            torch.cuda.empty_cache()
            meters.append(DeviceMeter(dev, index, nvml, before))
        torch.cuda.set_device(indices[0])
        self.device = meters[0].device
        each = []
        for m in meters:
            m.measure_base()
            free, total = m.mem()
            own = m.own()
            capacity = own + free
            if self.limit is not None and self.limit < own + free:
                need = free - max(0, self.limit - (own - m.ballast.bytes))
                if need >= BLOCK_STEP:
                    torch.cuda.set_device(m.index)
                    m.ballast.hold(need)
                capacity = int(self.limit)
            free, total = m.mem()
            each.append({"device": "cuda:%d" % m.index, "base_bytes": int(m.base),
                         "ballast_bytes": int(m.ballast.bytes), "capacity_bytes": int(capacity),
                         "device_total": int(total), "device_free": int(free)})
        torch.cuda.set_device(indices[0])
        self.meter = MultiMeter(meters)
        self.capacities = [e["capacity_bytes"] for e in each]
        try:
            torch._C._cuda_attach_out_of_memory_observer(self._oom_observer)
        except Exception:  # noqa: BLE001
            pass
        self.notes.append("device_map=\"auto\" over %s; base measured by %s"
                          % (" + ".join(self.devices), ", ".join(m.method for m in meters)))
        if self.limit is not None:
            self.notes.append("each GPU held to %d bytes by a ballast" % self.limit)
        hello.update(meter=CudaMeter.name, base_bytes=int(sum(e["base_bytes"] for e in each)),
                     ballast_bytes=int(sum(e["ballast_bytes"] for e in each)),
                     capacity_bytes=int(sum(self.capacities)),
                     device_total=int(sum(e["device_total"] for e in each)),
                     device_free=int(sum(e["device_free"] for e in each)), devices=each)

    def _cpu_limit_hook(self, module, args, output):
        now = time.perf_counter()
        if now - self._last_check < 0.002:
            return None
        self._last_check = now
        self.limit_check()
        return None

    def limit_check(self):
        if isinstance(self.meter, CpuMeter) and self.limit is not None:
            held = self.meter.peak()
            if held > self.limit:
                raise EmulatedOom(held, self.limit, "weights" if self.phase == "load" else
                                  ("kv_cache" if self.phase == "kv_cache" else "activations"))

    # -- phases ----------------------------------------------------------------------------------
    def mark(self):
        """Fold the current phase's peaks into the task's."""
        self.peak_acc = max(self.peak_acc, self.meter.peak())
        self.peak_used_acc = max(self.peak_used_acc, self.meter.peak_used())

    def new_phase(self):
        self.mark()
        self.meter.reset_peak()

    # -- tasks -----------------------------------------------------------------------------------
    def run(self, task):
        kind = task.get("task") if isinstance(task, dict) else None
        label = {"load": "load", "warmup": "warmup", "fragmentation": "fragmentation"}.get(kind)
        if label is None:
            label = str(task.get("label") or kind or "?") if isinstance(task, dict) else "?"
        r = new_result(label)
        self.last_oom = None
        self.meter.settle()
        self.meter.refresh_base()
        self.meter.reset_peak()
        self.peak_acc = self.peak_used_acc = 0
        multi = isinstance(self.meter, MultiMeter)
        if multi:
            self.meter.begin_task()
            self.last_oom_gpu = None
        t0 = time.perf_counter()
        r["before"] = self.meter.held()
        r["used"]["before"] = self.meter.held_used()
        self.phase = "other"
        failure = None
        # A task that stalls leaves its stacks on stderr every STALL_S seconds: the parent quotes
        # them when it stops a child that did not answer within --stage-timeout.
        faulthandler.dump_traceback_later(STALL_S, repeat=True, file=sys.stderr)
        try:
            if kind == "load":
                self.load(r)
            elif kind == "warmup":
                self.warmup(r, int(task.get("prompt_tokens") or 16))
            elif kind == "generate":
                self.generate(task, r)
            elif kind == "fragmentation":
                self.fragmentation(r)
            else:
                raise ValueError("unknown task %r" % (task,))
        except EmulatedOom as e:
            failure = {"requested": None, "held": int(e.held), "part": e.part, "message": str(e)[:400],
                       "free": None, "largest_block": None, "cached": None, "emulated": True}
        except PlacementOom as e:
            failure = {"requested": None, "held": int(self.meter.held()), "part": "weights",
                       "message": str(e)[:400], "free": None, "largest_block": None, "cached": None,
                       "emulated": False}
        except Exception as e:  # noqa: BLE001 - an out-of-memory is an outcome; so is any failure
            if is_oom(e):
                failure = self.oom_facts(e)
            else:
                failure = "%s: %s" % (type(e).__name__, first_line(e, 1000))
                traceback.print_exc(file=sys.stderr)
            traceback.clear_frames(e.__traceback__)
            e.__traceback__ = None
            del e
        faulthandler.cancel_dump_traceback_later()
        if isinstance(failure, dict):
            r["outcome"], r["oom"] = "oom", failure
            if multi:
                named = parse_oom_device(failure.get("message") or "")
                if named is None and self.last_oom_gpu is not None:
                    named = "cuda:%d" % self.last_oom_gpu
                r["oom_device"] = named
        elif failure is not None:
            r["outcome"], r["error"] = "error", failure
        self.phase = "other"
        try:
            self.meter.sync()
        except Exception:  # noqa: BLE001 - a broken context shows in the next task
            pass
        self.mark()
        r["peak"] = max(self.peak_acc, r["before"])
        r["used"]["peak"] = max(self.peak_used_acc, r["used"]["before"])
        if isinstance(self.meter, CudaMeter):
            r["reserved_peak"] = r["peak"]
        try:
            self.meter.settle()  # frees what the task made (its frames are gone by now)
        except Exception:  # noqa: BLE001
            gc.collect()
        r["after"] = self.meter.held()
        if multi:
            r["per_device"] = self.meter.end_task(self.capacities)
        r["weights_bytes"] = int(self.weights_bytes)
        r["seconds"] = round(time.perf_counter() - t0, 6)
        return r

    def oom_facts(self, e):
        """Read in the except block, while the failed step's tensors are still referenced by the
        traceback: held = base + reserved, cached = reserved - allocated, free right after."""
        msg = first_line(e)
        requested = parse_requested(str(e))
        part = part_from_traceback(e.__traceback__, self.phase)
        if isinstance(self.meter, CudaMeter):
            m = self.meter
            reserved, allocated = m.reserved(), m.allocated()
            try:
                free = m.mem()[0]
            except Exception:  # noqa: BLE001
                free = None
            facts = {"requested": requested, "held": int(m.base + reserved), "part": part, "message": msg,
                     "free": free, "largest_block": None, "cached": int(max(0, reserved - allocated)),
                     "emulated": False}
            if self.last_oom is not None:
                facts["requested_segment"] = self.last_oom[0]
        else:
            facts = {"requested": requested, "held": int(self.meter.held()), "part": part, "message": msg,
                     "free": None, "largest_block": None, "cached": None, "emulated": False}
        return facts

    def load(self, r):
        self.model = None
        gc.unfreeze()  # a model loaded before may be garbage now
        self.weights_bytes = 0
        self.meter.settle()
        self.meter.reset_peak()
        r["before"] = self.meter.held()
        r["used"]["before"] = self.meter.held_used()
        before_alloc = self.meter.allocated() if isinstance(self.meter, CudaMeter) else 0
        if isinstance(self.meter, MultiMeter):
            self.before_each = [m.allocated() for m in self.meter.meters]
        self.phase = "load"
        s = self.setup
        from transformers import AutoConfig, AutoModelForCausalLM
        trust = bool(s.get("trust_remote_code"))
        folder = s["model"]
        if self.devices:
            model = self._load_multi(folder, trust, AutoConfig, AutoModelForCausalLM)
        elif s.get("random_weights"):
            cfg = AutoConfig.from_pretrained(folder, trust_remote_code=trust)
            # Drawn on the device, in the target dtype: no float32 copy, no host round trip.
            with torch.device(self.device):
                model = AutoModelForCausalLM.from_config(cfg, dtype=self.dtype, attn_implementation=self.attn,
                                                         trust_remote_code=trust)
        else:
            try:
                model = AutoModelForCausalLM.from_pretrained(folder, dtype=self.dtype, device_map=str(self.device),
                                                             attn_implementation=self.attn, trust_remote_code=trust)
            except (ImportError, ValueError) as e:
                if "accelerate" not in str(e):
                    raise
                with torch.device(self.device):
                    model = AutoModelForCausalLM.from_pretrained(folder, dtype=self.dtype, attn_implementation=self.attn,
                                                                 trust_remote_code=trust)
        model.eval()
        self.meter.sync()
        self.limit_check()
        self.model = model
        self.cur_attn = self.attn
        if isinstance(self.meter, MultiMeter):
            self.meter.weights = [max(0, m.allocated() - b) for m, b in zip(self.meter.meters, self.before_each)]
        if isinstance(self.meter, CudaMeter):
            self.weights_bytes = max(0, self.meter.allocated() - before_alloc)
        else:
            seen, total = set(), 0
            for t in list(model.parameters()) + list(model.buffers()):
                if t.data_ptr() not in seen:
                    seen.add(t.data_ptr())
                    total += t.numel() * t.element_size()
            self.weights_bytes = total
        text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.vocab = int(text.vocab_size)
        self.settled_load()

    @staticmethod
    def settled_load():
        """Collect what the load left in cycles, then freeze the survivors (the model, its modules
        and configs, live to the end): later collections skip them."""
        gc.collect()
        gc.freeze()

    def _max_memory(self):
        """{gpu: bytes} over the GPUs given: what each has free now (the ballast already holds the
        limit), as transformers' default reads mem_get_info; no CPU, so nothing is offloaded."""
        return {m.index: int(m.mem()[0]) for m in self.meter.meters}

    def _load_multi(self, folder, trust, AutoConfig, AutoModelForCausalLM):
        mm = self._max_memory()
        if self.setup.get("random_weights"):
            cfg = AutoConfig.from_pretrained(folder, trust_remote_code=trust)
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(cfg, dtype=self.dtype, attn_implementation=self.attn,
                                                         trust_remote_code=trust)
            dm = device_map_for(model, mm)
            off = offloaded(dm)
            if off:
                raise PlacementOom("device_map=\"auto\" over %s puts %s off the GPUs: the weights do not fit them"
                                   % (" + ".join(self.devices), ", ".join(off[:4])))
            model = materialize(model, dm)
        else:
            try:
                model = AutoModelForCausalLM.from_pretrained(folder, dtype=self.dtype, device_map="auto",
                                                             max_memory=mm, attn_implementation=self.attn,
                                                             trust_remote_code=trust)
            except ValueError as e:
                if "offload" not in str(e) and "disk" not in str(e):
                    raise
                raise PlacementOom("device_map=\"auto\" over %s needs the disk: the weights do not fit the GPUs (%s)"
                                   % (" + ".join(self.devices), first_line(e, 200)))
            off = offloaded(getattr(model, "hf_device_map", {}) or {})
            if off:
                raise PlacementOom("device_map=\"auto\" over %s put %s off the GPUs: the weights do not fit them"
                                   % (" + ".join(self.devices), ", ".join(off[:4])))
        # inputs go where the embeddings are
        self.device = model.get_input_embeddings().weight.device
        return model

    def set_attention(self, eager):
        want = self.attn_for(eager) if eager is not None else self.attn
        if want != self.cur_attn:
            if hasattr(self.model, "set_attn_implementation"):
                self.model.set_attn_implementation(want)
            else:
                self.model.config._attn_implementation = want
            self.cur_attn = want
        return want

    def warmup(self, r, prompt_tokens):
        # The first pays kernel compilation, cuBLAS/cuDNN handles and workspaces, through both ways
        # a generate task runs (fast-forward, then full); the second is the clean one reported.
        # A decode step's kernels are the same at every step, so two steps warm them: each further
        # step costs a whole forward pass (about 25 ms for a 7B) and warms nothing new.
        first = {"label": "warmup", "prompt_tokens": min(max(prompt_tokens, 16), WARMUP_CAP),
                 "new_tokens": 4, "batch": 1, "decode_steps": 2}
        self.generate(first, r)
        self.meter.settle()
        self.meter.reset_peak()
        self.peak_acc = self.peak_used_acc = 0
        r["before"] = self.meter.held()
        r["used"]["before"] = self.meter.held_used()
        # 16 + 3 tokens: the cache ends at 18, the total the diagnose fit reads this prefill at.
        self.generate({"label": "warmup", "prompt_tokens": 16, "new_tokens": 3, "batch": 1, "decode_steps": 3}, r)
        r["note"] = "the first warm-up generation (%d + 4 tokens) is not reported" % first["prompt_tokens"]

    def _gen_kwargs(self, n):
        return dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0,
                    return_dict_in_generate=True, use_cache=True)

    def generate(self, g, r):
        if self.model is None:
            raise ValueError("no weights: the load did not succeed")
        from transformers import LogitsProcessor, LogitsProcessorList
        model = self.model
        p = max(1, int(g.get("prompt_tokens") or 1))
        n = max(1, int(g.get("new_tokens") or 1))
        b = max(1, int(g.get("batch") or 1))
        steps = min(max(0, int(g.get("decode_steps") or 0)), n - 1)
        r["attn_implementation"] = self.set_attention(g.get("eager"))
        self.phase = "activations"
        gen = torch.Generator().manual_seed(int(self.setup.get("seed") or 0) + p * 7 + n * 13 + b)
        hi = max(4, self.vocab - 1)
        ids = torch.randint(3, hi, (b, p), generator=gen).to(self.device)
        mask = torch.ones_like(ids)
        meter = self
        out = cache = None

        if n - 1 <= steps or self.fast_forward == "none":
            # One real generate(), as users run it. A logits processor marks the end of the prefill
            # (it is called after every forward; the first call follows the prefill's): its time is
            # the time to first token, and the peaks are split there.
            class Mark(LogitsProcessor):
                def __init__(self):
                    self.t = None

                def __call__(self, input_ids, scores):
                    if self.t is None:
                        meter.meter.sync()
                        self.t = time.perf_counter()
                        self.prefill = (meter.meter.peak(), meter.meter.peak_used())
                        meter.new_phase()
                    return scores

            mark = Mark()
            self.new_phase()
            t0 = time.perf_counter()
            with torch.no_grad():
                out = model.generate(ids, attention_mask=mask, logits_processor=LogitsProcessorList([mark]),
                                     **self._gen_kwargs(n))
            self.meter.sync()
            t1 = time.perf_counter()
            self.limit_check()
            r["path"] = "full"
            r["prefill_seconds"] = round(mark.t - t0, 6)
            r["prefill_peak"], r["used"]["prefill_peak"] = mark.prefill
            if n > 1:
                r["decode_peak"], r["used"]["decode_peak"] = self.meter.peak(), self.meter.peak_used()
                r["decode_tokens_per_second"] = round((n - 1) * b / max(t1 - mark.t, 1e-9), 3)
            generated = out.sequences.shape[1] - p
        else:
            # Only the last `steps` decode passes matter for memory: prefill with a real generate()
            # of one token, grow the cache to prompt + new - 1 - steps tokens, then a real
            # generate() of `steps` tokens continues from that cache. A generate() of n tokens runs
            # n - 1 decode passes and ends with prompt + n - 1 tokens in its cache; so does this.
            # Checked on the CPU (transformers 5.17, tiny-llama and a tiny gemma2 with sliding
            # layers): a full generate() of 48 + 64 tokens leaves 111 tokens in its DynamicCache and
            # this path leaves 111 with the same kv bytes, in every fast_forward mode;
            # scripts/test-transformers-probe.sh checks it on every run.
            self.new_phase()
            t0 = time.perf_counter()
            with torch.no_grad():
                out = model.generate(ids, attention_mask=mask, **self._gen_kwargs(1))
            self.meter.sync()
            r["prefill_seconds"] = round(time.perf_counter() - t0, 6)
            self.limit_check()
            r["prefill_peak"], r["used"]["prefill_peak"] = self.meter.peak(), self.meter.peak_used()
            cache, seq = out.past_key_values, out.sequences
            out = None
            del ids, mask
            m = n - 1 - steps  # tokens to add to the cache
            extra = torch.randint(3, hi, (b, m), generator=gen).to(self.device)
            seq = torch.cat([seq, extra], dim=1)  # p + 1 + m = p + n - steps tokens
            del extra
            self.new_phase()
            self.phase = "kv_cache"
            with torch.no_grad():
                if self.fast_forward == "update":
                    self._grow_by_update(cache, m)
                else:
                    self._grow_by_forward(cache, seq, p, m)
            self.meter.sync()
            self.limit_check()
            if cache_len(cache) != p + m:
                raise RuntimeError("fast-forward left %d tokens in the cache, not %d" % (cache_len(cache), p + m))
            self.phase = "activations"
            r["path"] = "fast_forward:" + self.fast_forward
            generated = 1 + m
            if steps > 0:
                self.new_phase()
                t1 = time.perf_counter()
                with torch.no_grad():
                    out = model.generate(seq, attention_mask=torch.ones_like(seq), past_key_values=cache,
                                         **self._gen_kwargs(steps))
                self.meter.sync()
                dt = time.perf_counter() - t1
                self.limit_check()
                r["decode_peak"], r["used"]["decode_peak"] = self.meter.peak(), self.meter.peak_used()
                r["decode_tokens_per_second"] = round(steps * b / max(dt, 1e-9), 3)
                cache = out.past_key_values
                generated = out.sequences.shape[1] - p
            del seq
        if out is not None:
            cache = out.past_key_values
        kv, kv_storage = cache_bytes(cache)
        r["kv_bytes"], r["kv_bytes_measured"] = kv, kv_storage
        r["cache_tokens"] = cache_len(cache)
        r["generated_tokens"] = int(generated)
        if generated != n:
            r["note"] = "generate() stopped after %d of %d tokens" % (generated, n)
        del out, cache

    def _grow_by_update(self, cache, m):
        """Append m tokens to every layer through the public `Cache.update(keys, values, layer)`:
        the same cat (or, for a sliding layer, the same crop) the model's attention does each
        step, one layer at a time, so the transient is one layer's old + new tensors - no more than
        a real decode step's. Zeros: the values do not change memory."""
        layers = getattr(cache, "layers", None)
        if layers is not None:
            pairs = [(getattr(l, "keys", None), getattr(l, "values", None)) for l in layers]
        else:
            pairs = list(zip(cache.key_cache, cache.value_cache))
        for i, (k, v) in enumerate(pairs):
            if not (torch.is_tensor(k) and torch.is_tensor(v)) or k.dim() != 4:
                continue
            nk = k.new_zeros((k.shape[0], k.shape[1], m, k.shape[3]))
            nv = v.new_zeros((v.shape[0], v.shape[1], m, v.shape[3]))
            del k, v
            res = cache.update(nk, nv, i)  # a layer keeps its own position (cumulative_length)
            del nk, nv, res
        del pairs

    def _grow_by_forward(self, cache, seq, p, m):
        """Feed seq[:, p : p+m] through model(...) with the cache, in chunks c with c <= p and
        c x keys <= max(p^2, final keys): each chunk's scores and activations stay below the
        prefill's or the last decode step's. NB: a chunk with a cache needs an explicit mask, and
        then transformers' SDPA repeats K/V to all heads (use_gqa_in_sdpa needs mask=None): a
        transient real decode steps do not have; `update` has none of it."""
        final = p + m + 1
        budget = max(p * p, final)
        cur, fed = p, 0
        while fed < m:
            c = min(m - fed, p)
            while c > 1 and c * (cur + c) > budget:
                c = max(1, budget // (cur + c))
            chunk = seq[:, p + fed:p + fed + c]
            att = torch.ones((seq.shape[0], cur + c), dtype=torch.long, device=seq.device)
            try:
                res = self.model(input_ids=chunk, attention_mask=att, past_key_values=cache, use_cache=True,
                                 logits_to_keep=1)
            except TypeError:
                res = self.model(input_ids=chunk, attention_mask=att, past_key_values=cache, use_cache=True)
            del res, chunk, att
            fed += c
            cur += c

    def fragmentation(self, r):
        self.phase = "fragmentation"
        if isinstance(self.meter, MultiMeter):
            # each GPU searched in turn; the one with the smallest largest block is reported
            found = []
            for m in self.meter.meters:
                single = Child.__new__(Child)
                single.meter, single.device, single.phase = m, m.device, "fragmentation"
                single.last_oom = None
                torch.cuda.set_device(m.index)
                Child.fragmentation(single, r)
                found.append(("cuda:%d" % m.index, r["fragmentation"]))
            torch.cuda.set_device(self.meter.index)
            name, worst = min(found, key=lambda f: f[1]["largest_block"])
            r["fragmentation"] = worst
            r["note"] = "fragmentation of %s, the GPU with the smallest largest block (%s)" % (
                name, ", ".join("%s %d" % (n, f["largest_block"]) for n, f in found))
            return
        if not isinstance(self.meter, CudaMeter):
            r["fragmentation"] = None
            r["note"] = "fragmentation is not measured on the CPU (no device pool)"
            return
        m = self.meter
        m.settle()
        free = m.mem()[0]
        reserved, in_use = m.reserved(), m.allocated()
        cap = min(SEARCH_CAP, free)
        if m.pool_cap is not None:
            cap = min(cap, max(0, m.pool_cap - reserved))

        def fits(blocks):
            ok = False
            try:
                t = torch.empty(blocks * BLOCK_STEP, dtype=torch.uint8, device=self.device)
                del t
                ok = True
            except Exception as e:  # noqa: BLE001
                if not is_oom(e):
                    raise
                del e
            torch.cuda.empty_cache()
            return ok

        lo, hi = 0, cap // BLOCK_STEP  # lo blocks are known to fit
        # The common case first: the whole range searched is one block (one try instead of the
        # bisection's ~13, each a cudaMalloc and cudaFree of gigabytes); the answer is the same.
        if hi > 0 and fits(hi):
            lo = hi
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        self.last_oom = None
        r["fragmentation"] = {"free": int(free), "largest_block": int(lo * BLOCK_STEP), "searched_up_to": int(cap),
                              "reserved": int(reserved), "in_use": int(in_use)}


# ---------------------------------------------------------------------------------------------
# Process life
# ---------------------------------------------------------------------------------------------
def _pdeathsig(sig=signal.SIGTERM):
    """PR_SET_PDEATHSIG: `sig` when the parent dies."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, sig, 0, 0, 0)
    except Exception:  # noqa: BLE001
        pass


def die_with_parent():
    """Exit when the parent dies: PR_SET_PDEATHSIG (SIGTERM: the handler frees the ballast), and a
    daemon thread that sees the parent pid change and leaves at once (the driver frees what a dead
    process held)."""
    ppid = os.getppid()
    _pdeathsig()
    if ppid == 1:
        return  # started by init: nothing to watch

    def watch():
        while True:
            time.sleep(0.5)
            if os.getppid() != ppid:
                os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _on_signal(signum, frame):
    raise SystemExit(128 + signum)


def _profile_start():
    """LLM_OOM_PROBE_PROFILE=DIR: the child runs under cProfile and writes DIR/probe-<pid>.prof
    when it ends (a tool for finding where a diagnose's seconds go; scripts/gpu/warmup-h200.sh)."""
    where = os.environ.get("LLM_OOM_PROBE_PROFILE")
    if not where:
        return None
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
    return (prof, where)


def _profile_stop(started):
    if started is None:
        return
    prof, where = started
    prof.disable()
    try:
        prof.dump_stats(os.path.join(where, "probe-%d.prof" % os.getpid()))
    except OSError as e:
        log("llm-oom: the profile was not written (%s)" % e)


def main(argv):
    profile = _profile_start()
    try:
        return _main(argv)
    finally:
        _profile_stop(profile)


def _main(argv):
    _claim_stdout()
    die_with_parent()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)
    setup = None
    if "--setup" in argv:
        i = argv.index("--setup")
        if i + 1 < len(argv):
            try:
                setup = json.loads(argv[i + 1])
            except ValueError as e:
                log("llm-oom: the setup is not JSON (%s)" % e)
                return 2
    if not isinstance(setup, dict):
        log("llm-oom: usage: transformers_probe.py --setup '<json>'")
        return 2
    child = None
    try:
        child = Child(setup)  # checks the setup (exit 2) before the slow imports
        import_libs()
        # torch's and transformers' ~330k objects live as long as the process: out of the cycle
        # collector's way, every settle's gc.collect() scans only what the tasks made (0.17 s a
        # collection on this laptop-class CPU before, ~0 after; see Child.settled_load).
        gc.freeze()
        hello = child.open()
        if _FORKED_FROM is not None:
            hello.setdefault("notes", []).append(
                "forked from llm-oom's warm transformers process (pid %d): torch and transformers were "
                "imported there once, without CUDA" % _FORKED_FROM)
        send(hello)
        while True:
            line = sys.stdin.buffer.readline()
            if not line:
                return 0  # the parent closed our input: done
            line = line.strip()
            if not line:
                continue
            try:
                task = json.loads(line)
                if not isinstance(task, dict):
                    raise ValueError("not an object")
            except ValueError as e:
                r = new_result("?")
                r["outcome"], r["error"] = "error", "a task the child cannot read (%s): %s" % (e, line[:200].decode("utf-8", "replace"))
                send(r)
                continue
            send(child.run(task))
    except Fatal as e:
        log("llm-oom: %s" % e)
        return e.code
    except BrokenPipeError:
        return 0
    except Exception as e:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        log("llm-oom: %s: %s" % (type(e).__name__, first_line(e)))
        return 1
    finally:
        if child is not None:
            child.close()


# ---------------------------------------------------------------------------------------------
# The warm process (zygote): torch and transformers imported once, children forked from it
# ---------------------------------------------------------------------------------------------
# A fresh probe child spends 10-15 s importing torch and transformers before it touches the GPU
# (measured on the H200: scripts/gpu/time-to-verdict.sh, scripts/gpu/fork-warm-h200.sh). So, for a
# probe on one CUDA device, this script first acts as a relay: it asks a warm process of the same
# interpreter, script and import environment to fork the child, hands it its own
# stdin/stdout/stderr (SCM_RIGHTS) with its argv, environment and
# working directory, and then only waits, forwarding signals, and exits as the child did. The warm
# process never starts CUDA (it refuses to fork once the driver is initialised), holds no GPU memory, kills
# a child whose relay went away (a SIGKILL of the relay does not orphan it), and exits after
# LLM_OOM_ZYGOTE_IDLE_S (default 600) seconds without a child. The first relay starts it and waits
# for its imports (a cold run, as before). Anything that goes wrong before the fork falls back to
# running the probe in this process, as without the warm process.
#   LLM_OOM_ZYGOTE=0    never; unset or 1: for CUDA devices; cpu: for the CPU as well (tests).

ZYGOTE_ENV_PREFIXES = ("PYTHON", "VIRTUAL_ENV", "CONDA", "LD_", "HF_", "TRANSFORMERS_", "TORCH",
                       "PYTORCH_", "CUDA_", "NCCL_", "NVIDIA_", "OMP_", "MKL_", "TOKENIZERS_",
                       "LLM_OOM_", "HOME", "XDG_CACHE_HOME")
ZYGOTE_START_S = 120.0  # leaves an in-process import time within session.rs's HELLO_TIMEOUT (180 s)
_FORKED_FROM = None  # the warm process's pid, in a child it forked


def _zygote_wanted(argv):
    mode = os.environ.get("LLM_OOM_ZYGOTE", "1").strip().lower()
    if mode in ("0", "off", "no", "false"):
        return False
    try:
        setup = json.loads(argv[argv.index("--setup") + 1])
    except (ValueError, IndexError):
        return False
    if not isinstance(setup, dict) or setup.get("devices") or setup.get("tensor_parallel"):
        return False
    dev = str(setup.get("device", "")).strip().lower()
    return dev.startswith("cuda") or dev == "gpu" or (mode == "cpu" and dev == "cpu")


def _zygote_dir():
    base = os.environ.get("XDG_RUNTIME_DIR")
    if not base or not os.path.isdir(base):
        base = "/tmp"
    return _private_dir(os.path.join(base, "llm-oom-%d" % os.getuid()))


def _zygote_key(script):
    import hashlib
    h = hashlib.sha256()
    h.update(os.path.realpath(sys.executable).encode())
    h.update(b"\0")
    h.update(script)
    # The interpreter's flags (-I, -S) and import path decide what an import finds.
    h.update(repr((tuple(sys.flags), sys.path[1:])).encode())
    # A child runs in the warm process's cgroup (memory limits, a Slurm or systemd scope).
    try:
        with open("/proc/self/cgroup", "rb") as f:
            h.update(f.read())
    except OSError:
        pass
    for k in sorted(os.environ):
        if k.startswith(ZYGOTE_ENV_PREFIXES):
            h.update(b"\0%s=%s" % (k.encode(), os.environ[k].encode("utf-8", "surrogateescape")))
    return h.hexdigest()[:20]


def _send_msg(sock, obj):
    sock.sendall((json.dumps(obj) + "\n").encode())


def _read_msg(f):
    line = f.readline()
    return json.loads(line) if line else None


def relay(argv):
    """Run this probe in a child forked by the warm process. Returns the child's wait status, or
    None when it could not (the caller then runs the probe in this process)."""
    import socket
    if not _zygote_wanted(argv):
        return None
    try:
        with open(os.path.abspath(__file__), "rb") as f:
            script = f.read()
        d = _zygote_dir()
        key = _zygote_key(script)
        path = os.path.join(d, "zygote-%s.sock" % key)
        if os.path.exists(path + ".declined"):
            return None  # this interpreter's imports start CUDA: it cannot serve forks
        sock = _zygote_connect(path) or _zygote_start(d, key, path, script)
        if sock is None:
            return None
        sock.settimeout(None)
        request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
        body = json.dumps(request).encode()
        socket.send_fds(sock, [b"%d\n" % len(body) + body], [0, 1, 2])
        replies = sock.makefile("rb")
        first = _read_msg(replies)
    except (OSError, ValueError) as e:
        log("llm-oom: the warm transformers process was not used (%s); starting torch here" % e)
        return None
    if not first or "pid" not in first:
        if first and first.get("refused"):
            log("llm-oom: the warm transformers process declined (%s); starting torch here" % first["refused"])
        return None
    pid = int(first["pid"])

    def forward(signum, frame):
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, forward)
    die_with_parent()  # the parent's death ends this relay, whose socket's end ends the child
    try:
        last = _read_msg(replies)
    except (OSError, ValueError):
        last = None
    if not last or "status" not in last:
        # The warm process died: its child sees its parent go and leaves; make sure it has
        # before answering, so the next child does not start beside its memory.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.05)
        else:
            forward(signal.SIGKILL, None)
        return 3 << 8
    return int(last["status"])


def _zygote_connect(path):
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(5)
        s.connect(path)
        return s
    except OSError:
        s.close()
        return None


def _zygote_start(d, key, path, script):
    """Start the warm process (one at a time: a lock) and wait until it listens."""
    import fcntl
    import subprocess
    with open(os.path.join(d, "zygote-%s.lock" % key), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sock = _zygote_connect(path)  # another relay may have started it meanwhile
        if sock is not None:
            return sock
        copy = os.path.join(d, "probe-%s.py" % key)
        with open(copy + ".tmp", "wb") as f:
            f.write(script)
        os.replace(copy + ".tmp", copy)
        with open(os.path.join(d, "zygote-%s.log" % key), "wb") as logf:
            flags = subprocess._args_from_interpreter_flags()  # -I, -S, -X …: as this interpreter
            z = subprocess.Popen([sys.executable] + flags + [copy, "--zygote", path], stdin=subprocess.DEVNULL,
                                 stdout=logf, stderr=logf, close_fds=True, start_new_session=True)
        deadline = time.monotonic() + ZYGOTE_START_S
        while time.monotonic() < deadline:
            sock = _zygote_connect(path)
            if sock is not None:
                return sock
            if z.poll() is not None:
                return None  # it could not import (the in-process run will say why)
            time.sleep(0.05)
        return None


def _zygote_preimport():
    """What every probe child imports before its first task, so a fork needs none of it."""
    import_libs()
    from transformers import AutoConfig, AutoModelForCausalLM  # noqa: F401
    for name in ("torch._dynamo", "torch.distributed.tensor", "transformers.generation",
                 "transformers.integrations.accelerate", "accelerate"):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - optional: the child imports it itself if it can
            pass


def _zygote_warm_model(argv):
    """Import the modeling module of the model this child will load (not remote code)."""
    try:
        setup = json.loads(argv[argv.index("--setup") + 1])
        if setup.get("trust_remote_code"):
            return
        with open(os.path.join(setup["model"], "config.json")) as f:
            model_type = json.load(f).get("model_type")
        from transformers.models.auto import modeling_auto
        name = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
        if name:
            getattr(transformers, name)
    except Exception:  # noqa: BLE001 - the child loads it as it would anyway
        pass


def _cuda_started():
    """Whether the CUDA driver was initialised in this process (then a fork's child could not use
    it). torch's and triton's imports map libcuda without initialising it (H200 machine, session
    16); before cuInit, cuCtxGetCurrent answers CUDA_ERROR_NOT_INITIALIZED (3) and starts nothing."""
    if torch.cuda.is_initialized():
        return True
    try:
        with open("/proc/self/maps") as f:
            if not any("libcuda.so" in line for line in f):
                return False
        ctx = ctypes.c_void_p()
        return ctypes.CDLL("libcuda.so.1").cuCtxGetCurrent(ctypes.byref(ctx)) != 3
    except (OSError, AttributeError):
        return True


def _install_stamp():
    stamp = []
    for mod in (torch, transformers):
        try:
            st = os.stat(os.path.dirname(mod.__file__))
            stamp.append((mod.__version__, st.st_mtime_ns, st.st_ino))
        except Exception:  # noqa: BLE001
            stamp.append(None)
    return stamp


def zygote_main(argv):
    import selectors
    import socket
    import struct
    if len(argv) != 1:
        return 2
    path = argv[0]
    idle_s = float(os.environ.get("LLM_OOM_ZYGOTE_IDLE_S", "600"))
    t0 = time.monotonic()
    _zygote_preimport()
    if _cuda_started():
        log("the imports started the CUDA driver: a forked child could not use it; not serving")
        with open(path + ".declined", "w") as f:
            f.write("the imports started CUDA\n")
        return 1
    stamp = _install_stamp()
    log("imports done in %.2f s (torch %s, transformers %s)" % (time.monotonic() - t0, torch.__version__,
                                                                transformers.__version__))
    if _zygote_connect(path) is not None:
        return 0  # another warm process serves this key (a relay gave up waiting on this one)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(16)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    by_pid = {}  # child pid -> its relay's connection (None once the relay is gone)
    last = time.monotonic()
    serving = True

    def stop_serving():
        nonlocal serving
        if serving:
            serving = False
            sel.unregister(listener)
            listener.close()
            try:
                os.unlink(path)
            except OSError:
                pass

    def drop_relay(conn, pid):
        """The relay behind `conn` is gone: no one waits for child `pid` (still reaped below)."""
        try:
            sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()
        by_pid[pid] = None
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass

    def refuse(conn, fds, why, stop=False):
        """Say no to a relay (it then runs the probe itself); `stop`: serve no one after it."""
        for fd in fds:
            os.close(fd)
        _send_msg(conn, {"refused": why})
        conn.close()
        if stop:
            stop_serving()

    def serve(conn):
        conn.settimeout(10)
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        if struct.unpack("3i", creds)[1] != os.getuid():
            conn.close()
            return
        data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
        try:
            head, _, body = data.partition(b"\n")
            need = int(head)
            while len(body) < need:
                more = conn.recv(need - len(body))
                if not more:
                    raise ValueError("the request was cut short")
                body += more
            req = json.loads(body)
            if not (isinstance(req, dict) and isinstance(req.get("argv"), list)
                    and isinstance(req.get("env"), dict) and isinstance(req.get("cwd"), str)):
                raise ValueError("not a request")
            if len(fds) != 3:
                raise ValueError("expected 3 descriptors, got %d" % len(fds))
        except (ValueError, OSError) as e:
            return refuse(conn, fds, "a bad request (%s)" % e)
        if _install_stamp() != stamp:
            return refuse(conn, fds, "torch or transformers changed on disk since it started", stop=True)
        _zygote_warm_model(req["argv"])
        if _cuda_started():
            return refuse(conn, fds, "CUDA was started in the warm process", stop=True)
        sys.stdout.flush()
        sys.stderr.flush()
        me = os.getpid()
        pid = os.fork()
        if pid == 0:
            rc = 1
            try:
                _pdeathsig()
                if os.getppid() != me:
                    os._exit(3)  # the warm process died before this child could watch it
                signal.set_wakeup_fd(-1)
                for sig in (signal.SIGCHLD, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_DFL)
                sel.close()
                for fd in (wake_r, wake_w):
                    os.close(fd)
                if serving:
                    listener.close()
                for c in by_pid.values():
                    if c is not None:
                        c.close()
                conn.close()
                for i, fd in enumerate(fds):
                    os.dup2(fd, i)
                    os.close(fd)
                os.environ.clear()
                os.environ.update(req["env"])
                try:
                    os.chdir(req["cwd"])
                except OSError:
                    pass
                global _FORKED_FROM
                _FORKED_FROM = me
                sys.argv = [os.path.abspath(__file__)] + list(req["argv"])
                rc = main(list(req["argv"]))
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 1
            except BaseException:  # noqa: BLE001 - say it on the relay's stderr, then leave
                traceback.print_exc()
            _leave(rc)
        for fd in fds:
            os.close(fd)
        by_pid[pid] = conn
        try:
            sel.register(conn, selectors.EVENT_READ, pid)
            _send_msg(conn, {"pid": pid})
        except Exception:  # noqa: BLE001 - the relay left before its pid
            drop_relay(conn, pid)

    while True:
        if not by_pid and (not serving or time.monotonic() - last > idle_s):
            stop_serving()
            return 0
        for k, _ in sel.select(timeout=1.0):
            if k.data == "accept":
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                try:
                    serve(conn)
                except Exception as e:  # noqa: BLE001 - one bad request must not end the warm process
                    log("a request failed: %s: %s" % (type(e).__name__, e))
                    conn.close()
            elif k.data == "wake":
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
            else:  # a relay's connection: it says nothing more, so this is its end
                try:
                    gone = not k.fileobj.recv(1)
                except OSError:
                    gone = True
                if gone:
                    drop_relay(k.fileobj, k.data)
        while by_pid:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = by_pid.pop(pid, None)
            last = time.monotonic()
            if conn is not None:
                try:
                    _send_msg(conn, {"status": status})
                except OSError:
                    pass
                sel.unregister(conn)
                conn.close()


def _mirror(status):
    """Leave as the forked child did: its exit code, or its signal."""
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        _flush_all()
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL, SIGSTOP: not catchable, so already the default
        os.kill(os.getpid(), -code)
        time.sleep(1)
        code = 128 - code
    os._exit(code)


def _leave(rc):
    """Exit without the interpreter's teardown: with torch and a CUDA context loaded, finalising
    the modules took 3-10 s after the last answer (measured on the H200), time the parent
    waited for nothing. Every answer is already flushed; the ballast was freed by `close()`; the
    driver frees the rest of the process's memory at exit."""
    _flush_all()
    os._exit(rc if isinstance(rc, int) else 1)


def _flush_all():
    for f in (sys.stdout, sys.stderr, _OUT):
        try:
            if f is not None:
                f.flush()
        except Exception:  # noqa: BLE001 - a closed pipe: nothing left to say
            pass


if __name__ == "__main__":
    if sys.argv[1:2] == ["--zygote"]:
        _leave(zygote_main(sys.argv[2:]))
    _status = relay(sys.argv[1:])
    if _status is not None:
        _mirror(_status)
    _leave(main(sys.argv[1:]))
