//! The engines' own out-of-memory messages, read from their source code: one table row per
//! message, with the part of memory the code path says ran out. A row is taken only where the
//! message's words name that part (host RAM, the KV cache's blocks or pages, the model not
//! fitting, other processes, a compute buffer); a bare allocator failure stays with the readers
//! that weigh its figures and the log around it.
//!
//! The rows come from the catalogue in `tests/fixtures/messages/*.jsonl` (what each engine's
//! source prints, read from the source); `tests/explain_messages.rs` runs
//! every catalogued message through `explain`. Each row names its engine and source file.

use std::sync::OnceLock;

use aho_corasick::AhoCorasick;
use regex::{Captures, Regex, RegexSet};
use regex_syntax::hir::literal::{ExtractKind, Extractor};
use serde::Serialize;

use super::parse::{size, Event, Scan, Source};

/// What the message says ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RanOut {
    Weights,
    KvCache,
    Activations,
    /// Slots or states for concurrent requests.
    Concurrency,
    OtherProcess,
    Host,
    /// An out-of-memory whose part the message does not name.
    Unknown,
}

/// When the engine prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// While loading the model or sizing its cache at start-up.
    Load,
    /// While serving a request (a prefill, a decode step, admitting a sequence).
    Request,
    /// The message does not say; the log around it may.
    Any,
}

/// One catalogued message, as read from a log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Catalogued {
    /// The row's name (stable: tests and docs cite it).
    pub id: &'static str,
    pub ran_out: RanOut,
    /// One sentence: what ran out, in the engine's terms.
    pub what: &'static str,
    /// The engine's repository and the file that prints it.
    pub from: &'static str,
    /// What the message says was needed, and what was there, when it gives figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available: Option<u64>,
    #[serde(skip)]
    pub source: Source,
    #[serde(skip)]
    pub when: When,
    /// How sure the row is of its part: below 0.7 where the words point to it but the code path
    /// has other causes too (a SIGKILL is usually, not always, the OOM killer).
    #[serde(skip)]
    pub confidence: f64,
}

/// A row of the table. `pattern` may name the groups `need`/`need_u` and `have`/`have_u` (a
/// size and its unit) or `need_b`/`have_b` (a byte count).
pub struct Row {
    pub id: &'static str,
    pub source: Source,
    pub ran_out: RanOut,
    pub when: When,
    pub confidence: f64,
    pub pattern: &'static str,
    pub what: &'static str,
    pub from: &'static str,
    /// The message as the engine prints it (the table's own test reads each).
    pub example: &'static str,
}

macro_rules! row {
    ($id:literal, $source:ident, $ran:ident, $when:ident, $conf:literal, $pat:expr, $what:literal, $from:literal, $ex:literal) => {
        Row {
            id: $id,
            source: Source::$source,
            ran_out: RanOut::$ran,
            when: When::$when,
            confidence: $conf,
            pattern: $pat,
            what: $what,
            from: $from,
            example: $ex,
        }
    };
}

/// A size with named groups, for the rows' figures.
macro_rules! need {
    () => {
        r"(?P<need>[\d.,]+)\s?(?P<need_u>bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|K|M|G)\b"
    };
}
macro_rules! have {
    () => {
        r"(?P<have>[\d.,]+)\s?(?P<have_u>bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|K|M|G)\b"
    };
}

pub static ROWS: &[Row] = &[
    // ── host RAM: batch schedulers, the kernel, userspace killers, containers ──
    row!("slurm-oom-kill-event", Slurm, Host, Any, 0.9,
        r"Detected \d+ oom[_-]kill events? in",
        "Slurm's cgroup saw the kernel's OOM killer end a task of the job: the job's host RAM",
        "SchedMD/slurm src/plugins/task/cgroup/task_cgroup_memory.c",
        "slurmstepd: error: Detected 1 oom_kill event in StepId=123456.batch. Some of the step tasks have been OOM Killed."),
    row!("slurm-task-out-of-memory", Slurm, Host, Any, 0.9,
        r"srun: error: .*task \d+(?:-\d+)?: Out Of Memory",
        "srun reports a task of the job ended by the OOM killer: the node's host RAM",
        "SchedMD/slurm src/srun/srun_job.c",
        "srun: error: gpu-node-07: task 0: Out Of Memory"),
    row!("slurm-exceeded-limit", Slurm, Host, Any, 0.85,
        r"Exceeded (?:job|step) memory limit",
        "the job went past the memory it asked Slurm for (--mem): host RAM",
        "SchedMD/slurm src/slurmd/slurmstepd/slurmstepd_job.c",
        "srun: Exceeded job memory limit"),
    row!("slurm-sacct-out-of-memory", Slurm, Host, Any, 0.85,
        r"\bOUT_OF_ME(?:MORY|\+)\s+\d+:\d+",
        "sacct lists the job's state as OUT_OF_MEMORY: host RAM",
        "SchedMD/slurm src/common/slurm_protocol_defs.c",
        "123456       train   gpu  OUT_OF_MEMORY  0:125"),
    row!("kernel-oom-kill-allocating", Kernel, Host, Any, 0.95,
        r"Out of memory \(oom_kill_allocating_task\)",
        "the kernel's OOM killer ended the task that asked for memory: host RAM",
        "torvalds/linux mm/oom_kill.c",
        "[123456.790321] Out of memory (oom_kill_allocating_task): Killed process 4242 (python3) total-vm:98765432kB, anon-rss:61234567kB"),
    row!("kernel-no-killable", Kernel, Host, Any, 0.95,
        r"Out of memory and no killable processes",
        "the host ran out of RAM and the kernel found nothing to kill",
        "torvalds/linux mm/oom_kill.c",
        "[123456.790500] Out of memory and no killable processes..."),
    row!("kernel-panic-on-oom", Kernel, Host, Any, 0.95,
        r"Kernel panic - not syncing: (?:Out of memory|System is deadlocked on memory)",
        "the host ran out of RAM and the kernel panicked (panic_on_oom)",
        "torvalds/linux mm/oom_kill.c",
        "[123456.790600] Kernel panic - not syncing: Out of memory: system-wide panic_on_oom is enabled"),
    row!("kernel-oom-reaper", Kernel, Host, Any, 0.9,
        r"oom_reaper: reaped process \d+",
        "the kernel reclaimed the memory of a process its OOM killer ended: host RAM",
        "torvalds/linux mm/oom_kill.c",
        "[123456.812345] oom_reaper: reaped process 4242 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:8192kB"),
    row!("kernel-memcg-at-limit", Kernel, Host, Any, 0.8,
        r"\bmemory: usage \d+kB, limit \d+kB, failcnt \d+",
        "a cgroup (a container or a job) reached its memory limit; the kernel prints this as it picks a task to kill",
        "torvalds/linux mm/memcontrol.c",
        "[123456.790100] memory: usage 33554432kB, limit 33554432kB, failcnt 1842"),
    row!("kernel-oom-group", Kernel, Host, Any, 0.9,
        r"are going to be killed due to memory\.oom\.group",
        "the kernel's OOM killer ends a whole cgroup (memory.oom.group): host RAM",
        "torvalds/linux mm/oom_kill.c",
        "[123456.790700] Tasks in /kubepods.slice/pod1234.slice/cri-containerd-abcd.scope are going to be killed due to memory.oom.group set"),
    row!("earlyoom-low-memory", Earlyoom, Host, Any, 0.8,
        r"low memory! at or below SIG(?:TERM|KILL) limits",
        "earlyoom found host RAM and swap below its limits and kills the largest process",
        "rfjakob/earlyoom main.c",
        "earlyoom[601]: low memory! at or below SIGKILL limits: mem  5.00%, swap  5.00%"),
    row!("earlyoom-escalating", Earlyoom, Host, Any, 0.8,
        r"earlyoom.*escalating to SIGKILL",
        "earlyoom escalates its kill for low host RAM to SIGKILL",
        "rfjakob/earlyoom kill.c",
        "earlyoom[601]: escalating to SIGKILL after 0.500 seconds"),
    row!("earlyoom-killing", Earlyoom, Host, Any, 0.85,
        r"Low memory! Killing process \d+",
        "a userspace OOM daemon (earlyoom) kills a process for low host RAM",
        "rfjakob/earlyoom kill.c",
        "Low memory! Killing process 4242 python3"),
    row!("earlyoom-kernel-oom", Earlyoom, Host, Any, 0.85,
        r"trigger_kernel_oom: successfully triggered",
        "earlyoom asked the kernel's OOM killer to end a process for low host RAM",
        "rfjakob/earlyoom kill.c",
        "earlyoom[601]: trigger_kernel_oom: successfully triggered kernel OOM killer"),
    row!("systemd-oomd-killed", Systemd, Host, Any, 0.9,
        r"systemd-oomd(?:\[\d+\])?: Killed \S+ due to (?:memory|swap) ",
        "systemd-oomd ended the unit for host memory (or swap) pressure",
        "systemd/systemd src/oom/oomd-manager.c",
        "systemd-oomd[812]: Killed /user.slice/user-1000.slice/app.slice/app-tmux.scope due to memory used (32212254720) / total (33554432000) and swap used (7730941132) / total (8589930496) being more than 90.00%"),
    row!("systemd-oomd-unit", Systemd, Host, Any, 0.9,
        r"systemd-oomd killed \d+ process",
        "systemd-oomd ended the unit's processes for host memory pressure",
        "systemd/systemd src/core/unit.c",
        "systemd[1]: session-3.scope: systemd-oomd killed 23 process(es) in this unit."),
    row!("systemd-result-oom-kill", Systemd, Host, Any, 0.9,
        r"Failed with result 'oom-kill'",
        "systemd says the service died by the kernel's OOM killer: host RAM",
        "systemd/systemd src/core/service.c",
        "systemd[1]: vllm.service: Failed with result 'oom-kill'."),
    row!("docker-container-oom", Docker, Host, Any, 0.85,
        r"\bcontainer oom\b",
        "docker's event stream reports the container hit its memory limit: host RAM",
        "moby/moby daemon/monitor.go",
        "2026-08-22T10:11:12.345678901Z container oom 3f2a9c1b7d4e (image=vllm/vllm-openai:latest, name=vllm)"),
    row!("docker-exited-137", Docker, Host, Any, 0.6,
        r"\bExited \(137\)",
        "the container ended by SIGKILL (exit 137), what the OOM killer sends; `docker inspect` shows OOMKilled",
        "moby/moby daemon/cluster/executor/container/controller.go",
        "Exited (137) 2 minutes ago"),
    row!("k8s-evicted-memory-pressure", Kubernetes, Host, Any, 0.8,
        r"The node had condition: \[MemoryPressure\]",
        "the kubelet evicted the pod because the node ran low on RAM",
        "kubernetes/kubernetes pkg/kubelet/eviction/helpers.go",
        "Message: The node had condition: [MemoryPressure]."),
    row!("k8s-eviction-threshold", Kubernetes, Host, Any, 0.75,
        r"EvictionThresholdMet\s.*reclaim memory",
        "the kubelet reclaims the node's RAM by evicting pods",
        "kubernetes/kubernetes pkg/kubelet/eviction/eviction_manager.go",
        "Warning  EvictionThresholdMet  node/gpu-node-1  Attempting to reclaim memory"),
    row!("k8s-insufficient-memory", Kubernetes, Host, Any, 0.7,
        r"KubeletHasInsufficientMemory",
        "the node reports memory pressure: its RAM is nearly gone",
        "kubernetes/kubernetes pkg/kubelet/nodestatus/setters.go",
        "  MemoryPressure   True    KubeletHasInsufficientMemory   kubelet has insufficient memory available"),
    row!("tensorflow-cpu-allocator", Tensorflow, Host, Any, 0.85,
        r"OOM when allocating tensor .*device:CPU:\d+ by allocator cpu",
        "TensorFlow's CPU allocator could not place a tensor: host RAM",
        "tensorflow/tensorflow tensorflow/core/framework/op_kernel.cc",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[22436962,512] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu"),
    row!("xla-host-memory", Xla, Host, Any, 0.9,
        concat!(r"Out of host memory while trying to allocate ", need!()),
        "XLA could not allocate pinned host memory (XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB)",
        "openxla/xla xla/pjrt/gpu/se_gpu_pjrt_client.cc",
        "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of host memory while trying to allocate 80.00GiB."),
    row!("cuda-malloc-host", Cuda, Host, Any, 0.75,
        r"cudaMallocHost\(.*\)(?: failed: out of memory|; ?$)|cudaMallocHost\S* failed: out of memory",
        "pinned host memory (cudaMallocHost) could not be allocated: host RAM",
        "ml-explore/mlx mlx/backend/cuda/allocator.cpp; microsoft/onnxruntime onnxruntime/core/providers/cuda/cuda_allocator.cc",
        "RuntimeError: cudaMallocHost(&data, size) failed: out of memory"),
    row!("ggml-aligned-malloc", LlamaCpp, Host, Any, 0.85,
        concat!(r"ggml_aligned_malloc: insufficient memory \(attempted to allocate ", need!()),
        "ggml could not allocate a buffer in host RAM",
        "ggml-org/llama.cpp ggml/src/ggml.c",
        "ggml_aligned_malloc: insufficient memory (attempted to allocate 8192.00 MB)"),
    row!("ggml-malloc", LlamaCpp, Host, Any, 0.85,
        concat!(r"ggml_malloc: failed to allocate\s+", need!()),
        "ggml could not allocate host RAM",
        "ggml-org/llama.cpp ggml/src/ggml.c",
        "ggml_malloc: failed to allocate  512.00 MB"),
    row!("ggml-sycl-host-bytes", LlamaCpp, Host, Any, 0.85,
        r"can't allocate (?P<need_b>\d+) Bytes of memory on host",
        "ggml's SYCL backend could not allocate host RAM",
        "ggml-org/llama.cpp ggml/src/ggml-sycl/ggml-sycl.cpp",
        "ggml_backend_sycl_buffer_type_alloc_buffer: can't allocate 4294967296 Bytes of memory on host"),
    row!("vulkan-out-of-host-memory", LlamaCpp, Host, Any, 0.8,
        r"ErrorOutOfHostMemory",
        "the Vulkan driver ran out of host memory",
        "ggml-org/llama.cpp ggml/src/ggml-vulkan/ggml-vulkan.cpp",
        "ggml_vulkan: Device memory allocation of size 1073741824 failed. (vk::Device::allocateMemory: ErrorOutOfHostMemory)"),
    row!("metal-vm-allocate", LlamaCpp, Host, Any, 0.8,
        r"ggml_metal_host_malloc: error: vm_allocate failed",
        "ggml on Metal could not reserve host memory for a buffer",
        "ggml-org/llama.cpp ggml/src/ggml-metal/ggml-metal.m",
        "ggml_metal_host_malloc: error: vm_allocate failed"),
    row!("llama-posix-memalign", LlamaCpp, Host, Load, 0.85,
        r"posix_memalign failed with error 12\b",
        "loading the model could not allocate host RAM (ENOMEM)",
        "ggml-org/llama.cpp src/llama-mmap.cpp",
        "llama_model_load: error loading model: posix_memalign failed with error 12"),
    row!("llama-mmap-enomem", LlamaCpp, Host, Load, 0.8,
        r"mmap failed: Cannot allocate memory",
        "mapping the model file failed for lack of host memory (or address space)",
        "ggml-org/llama.cpp src/llama-mmap.cpp",
        "llama_model_load: error loading model: mmap failed: Cannot allocate memory"),
    row!("llama-server-prompt-cache", LlamaCpp, Host, Request, 0.8,
        r"failed to allocate memory for prompt cache state",
        "llama-server's prompt cache (kept in host RAM) could not grow",
        "ggml-org/llama.cpp tools/server/server-task.cpp",
        "alloc: failed to allocate memory for prompt cache state: std::bad_alloc"),
    row!("ctranslate2-host-alloc", Ctranslate2, Host, Any, 0.85,
        r"(?:aligned_alloc|mkl_malloc): failed to allocate memory",
        "CTranslate2's CPU allocator could not get host RAM",
        "OpenNMT/CTranslate2 src/cpu/allocator.cc",
        "RuntimeError: aligned_alloc: failed to allocate memory"),
    row!("rust-alloc-failed", Candle, Host, Any, 0.85,
        r"^memory allocation of (?P<need_b>\d+) bytes failed",
        "a Rust program (candle, mistral.rs) could not allocate host RAM and aborted",
        "rust-lang/rust library/std/src/alloc.rs",
        "memory allocation of 34359738368 bytes failed"),
    row!("ray-node-memory", Ray, Host, Any, 0.9,
        r"RayOutOfMemoryError: More than \d+% of the memory on node",
        "Ray's memory monitor found the node's RAM nearly full",
        "ray-project/ray python/ray/_private/memory_monitor.py",
        "ray._private.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node ip-10-0-0-5 is used (60.81 / 62.0 GB)."),
    row!("ray-oom-docs", Ray, Host, Any, 0.8,
        r"address the out of memory issue: https://docs\.ray\.io",
        "Ray's memory monitor killed a worker for the node's RAM",
        "ray-project/ray src/ray/raylet/node_manager.cc",
        "Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/en/latest/ray-observability/user-guides/debug-apps/debug-memory.html."),
    row!("ray-object-store-full", Ray, Host, Any, 0.7,
        r"ObjectStoreFullError: Failed to put object",
        "Ray's object store (shared host memory) is full",
        "ray-project/ray python/ray/exceptions.py",
        "ray.exceptions.ObjectStoreFullError: Failed to put object 00ffff in object store because it is full. Object size is 4294967296 bytes."),
    row!("sglang-host-memory", Sglang, Host, Any, 0.85,
        r"Not enough host memory",
        "SGLang's hierarchical cache in host RAM has no room",
        "sgl-project/sglang python/sglang/srt/mem_cache/memory_pool_host.py",
        "ValueError: Not enough host memory available. Requesting 400.00 GB but only have 180.50 GB free."),
    row!("triton-system-memory", Triton, Host, Any, 0.8,
        r"failed to allocate non-pinned system memory|CPU memory allocation failed|failed to allocate \S+(?: \S+){0,3} in CPU memory",
        "Triton could not allocate host (system) memory",
        "triton-inference-server/core src/memory.cc",
        "Internal: failed to allocate non-pinned system memory"),
    row!("vllm-cpu-kv-node", Vllm, KvCache, Load, 0.85,
        r"Available memory on node \d+ \(.*\) on kv cache allocation is less than requested memory for kv",
        "vLLM's CPU backend pre-allocates its KV cache in host RAM, and the node has less free than the cache asks",
        "vllm-project/vllm vllm/v1/worker/cpu_worker.py",
        "ValueError: Available memory on node 0 (12.40/125.80 GiB) on kv cache allocation is less than requested memory for kv (40.00 GiB)."),
    row!("vllm-cpu-worker-reserved", Vllm, KvCache, Load, 0.85,
        r"of CPU memory reserved for it on node \d+, leaving none for the KV cache",
        "vLLM's CPU backend: the weights already use all the host RAM it reserved, leaving none for the KV cache",
        "vllm-project/vllm vllm/v1/worker/cpu_worker.py",
        "ValueError: The worker already uses 60.20 GiB (model weights and runtime), more than the 56.61 GiB of CPU memory reserved for it on node 0, leaving none for the KV cache."),
    row!("dataloader-shm", Pytorch, Host, Any, 0.75,
        r"DataLoader worker \(pid \d+\) is killed by signal: Bus error.*shared memory",
        "the data loader's workers ran out of shared memory (/dev/shm)",
        "pytorch/pytorch torch/csrc/DataLoader.cpp",
        "RuntimeError: DataLoader worker (pid 48213) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory."),
    row!("dataloader-killed", Pytorch, Host, Any, 0.7,
        r"DataLoader worker \(pid\(?s?\)? ?\d+\)? is killed by signal: Killed",
        "a data-loader worker was killed by SIGKILL: usually the OOM killer, for host RAM",
        "pytorch/pytorch torch/csrc/DataLoader.cpp",
        "RuntimeError: DataLoader worker (pid 48213) is killed by signal: Killed."),
    row!("torch-mmap-enomem", Pytorch, Host, Load, 0.8,
        r"unable to mmap (?P<need_b>\d+) bytes from file .*Cannot allocate memory \(12\)",
        "mapping a checkpoint into memory failed for lack of host memory (or address space)",
        "pytorch/pytorch aten/src/ATen/MapAllocator.cpp",
        "RuntimeError: unable to mmap 16060617592 bytes from file <Meta-Llama-3-8B/original/consolidated.00.pth>: Cannot allocate memory (12)"),
    row!("deepspeed-mlock", Deepspeed, Host, Any, 0.7,
        r"mlock failed to allocate \d+ bytes with error no 12",
        "DeepSpeed could not pin host memory for its offload buffers",
        "deepspeedai/DeepSpeed csrc/aio/common/deepspeed_aio_utils.cpp",
        "mlock failed to allocate 1073741824 bytes with error no 12 msg Cannot allocate memory"),
    // A SIGKILL is what the OOM killer sends, but not only it.
    row!("vllm-worker-sigkill", Vllm, Host, Any, 0.6,
        r"died unexpectedly \(exit code: -9\)",
        "a vLLM worker was killed by SIGKILL, what the kernel's OOM killer sends (dmesg would confirm)",
        "vllm-project/vllm vllm/v1/executor/multiproc_executor.py",
        "ERROR 05-12 10:11:12 [multiproc_executor.py:404] Worker proc VllmWorker-0 died unexpectedly (exit code: -9), shutting down executor."),
    row!("sglang-sigkill", Sglang, Host, Load, 0.6,
        r"died during initialization \(exit code: -9\)",
        "an SGLang scheduler was killed by SIGKILL while starting, what the kernel's OOM killer sends",
        "sgl-project/sglang python/sglang/srt/entrypoints/engine.py",
        "RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common cause is the OS OOM killer."),
    row!("tgi-shard-sigkill", Tgi, Host, Any, 0.6,
        r"Shard (?:process )?was signaled to shutdown with signal 9\b",
        "a TGI shard was killed by SIGKILL, what the kernel's OOM killer sends",
        "huggingface/text-generation-inference launcher/src/main.rs",
        "ERROR shard-manager: text_generation_launcher: Shard process was signaled to shutdown with signal 9 rank=0"),
    row!("torchrun-sigkill", Pytorch, Host, Any, 0.6,
        r"exitcode\s*: -9 \(pid: \d+\)|Signal 9 \(SIGKILL\) received by PID",
        "a torchrun worker was killed by SIGKILL, what the kernel's OOM killer sends",
        "pytorch/pytorch torch/distributed/elastic/multiprocessing/errors/__init__.py",
        "  exitcode  : -9 (pid: 48213)"),
    // ── the KV cache: blocks, pages and pools that cannot hold the context ──
    row!("mistralrs-no-gpu-blocks", MistralRs, KvCache, Load, 0.85,
        r"Num GPU blocks is 0\. This means there is not enough memory",
        "mistral.rs found no memory left for PagedAttention's KV blocks after the weights",
        "EricLBuehler/mistral.rs mistralrs-core/src/paged_attention/mod.rs",
        "Error: Num GPU blocks is 0. This means there is not enough memory. Either reduce the memory amount/utilization/context size or disable PagedAttention."),
    row!("mistralrs-paged-kv-short", MistralRs, KvCache, Load, 0.85,
        concat!(r"PagedAttention KV cache requires ", need!(), r" but only ", have!(), r" is safely available"),
        "mistral.rs's PagedAttention KV cache does not fit in what the weights left",
        "EricLBuehler/mistral.rs mistralrs-core/src/paged_attention/mod.rs",
        "Error: PagedAttention KV cache requires 8192 MB but only 3120 MB is safely available after model loading."),
    row!("mistralrs-paged-kv-minimum", MistralRs, KvCache, Load, 0.85,
        concat!(r"PagedAttention KV cache has ", have!(), r" available, below the required best-effort minimum of ", need!()),
        "mistral.rs's PagedAttention KV cache has less room than its minimum",
        "EricLBuehler/mistral.rs mistralrs-core/src/paged_attention/mod.rs",
        "Error: PagedAttention KV cache has 512 MB available, below the required best-effort minimum of 2048 MB."),
    row!("mistralrs-sequence-exceeds-kv", MistralRs, KvCache, Request, 0.8,
        r"Sequence \d+ with \d+ tokens exceeds the total KV cache capacity",
        "a sequence is longer than mistral.rs's whole KV cache",
        "EricLBuehler/mistral.rs mistralrs-core/src/paged_attention/scheduler.rs",
        "WARN mistralrs_core::paged_attention::scheduler: Sequence 3 with 40000 tokens exceeds the total KV cache capacity of 16384 tokens."),
    row!("mistralrs-kv-exhausted", MistralRs, KvCache, Request, 0.8,
        r"KV cache exhausted even after preempting",
        "mistral.rs's KV cache is full even with every other sequence preempted",
        "EricLBuehler/mistral.rs mistralrs-core/src/paged_attention/scheduler.rs",
        "WARN mistralrs_core::paged_attention::scheduler: Sequence 7 with 12000 tokens cannot be scheduled: KV cache exhausted even after preempting all running sequences."),
    row!("mistralrs-kv-capacity-error", MistralRs, KvCache, Request, 0.6,
        r"Failed to deliver KV cache capacity error",
        "mistral.rs refused a sequence for its KV cache's capacity",
        "EricLBuehler/mistral.rs mistralrs-core/src/paged_attention/scheduler.rs",
        "WARN mistralrs_core::paged_attention::scheduler: Failed to deliver KV cache capacity error for sequence 7"),
    row!("exllama-job-pages", Exllamav2, KvCache, Request, 0.8,
        r"Job requires \d+ pages \(only \d+ available\)",
        "exllama's paged cache has fewer pages than the job's context needs",
        "turboderp-org/exllamav2 exllamav2/generator/dynamic.py",
        "AssertionError: Job requires 140 pages (only 128 available) and cannot be enqueued. Total cache allocated is 128 * 256 = 32768 tokens"),
    row!("exllama-sequence-exceeds-cache", Exllamav2, KvCache, Request, 0.75,
        r"Total sequence length exceeds cache size",
        "the sequence is longer than exllama's cache",
        "turboderp-org/exllamav2 exllamav2/model.py",
        "AssertionError: Total sequence length exceeds cache size in model.forward"),
    row!("exllama3-cache-too-small", Exllamav3, KvCache, Request, 0.75,
        r"Not enough space in cache for single state|Cache too small for batch shape|cache too small for slot-partitioned fallback",
        "exllamav3's cache is too small for the state or batch asked",
        "turboderp-org/exllamav3 exllamav3/cache/cache.py",
        "AssertionError: Not enough space in cache for single state"),
    row!("lmdeploy-no-kv-memory", Lmdeploy, KvCache, Load, 0.85,
        r"No enough gpu memory for (?:kv|state) cache",
        "LMDeploy found no GPU memory left for its cache after the weights",
        "InternLM/lmdeploy lmdeploy/pytorch/engine/cache_engine.py",
        "RuntimeError: No enough gpu memory for kv cache."),
    row!("lmdeploy-sequence-blocks", Lmdeploy, KvCache, Request, 0.8,
        r"Sequence requires more blocks than total gpu blocks",
        "a sequence needs more KV blocks than LMDeploy's whole cache has",
        "InternLM/lmdeploy lmdeploy/pytorch/paging/block_manager",
        "AssertionError: Sequence requires more blocks than total gpu blocks."),
    row!("lmdeploy-no-free-blocks", Lmdeploy, KvCache, Request, 0.8,
        r"No enough free memory blocks",
        "LMDeploy's KV block allocator has no free blocks",
        "InternLM/lmdeploy lmdeploy/pytorch/paging/block_manager",
        "MemoryError: No enough free memory blocks."),
    row!("turbomind-no-cache-bytes", Lmdeploy, KvCache, Load, 0.8,
        r"Check failed: cache_bytes > size_t\{0\}",
        "TurboMind found no bytes left for its KV cache after the weights",
        "InternLM/lmdeploy src/turbomind/turbomind.cc",
        "[TM][FATAL][0512.10:11:12.123456][turbomind.cc:303] Check failed: cache_bytes > size_t{0} (0 vs. 0)"),
    row!("turbomind-cache-admit", Lmdeploy, KvCache, Request, 0.8,
        r"cache out of memory, no request can be admitted",
        "TurboMind's KV cache cannot admit even the head-of-line request",
        "InternLM/lmdeploy src/turbomind/engine/engine.cc",
        "[TM][WARN][0512.10:11:12.123456][engine.cc:605] dp0 ID 12: cache out of memory, no request can be admitted; failing head-of-line request"),
    row!("lmdeploy-response-oom", Lmdeploy, KvCache, Request, 0.6,
        r"ResponseType\.OUT_OF_MEMORY",
        "LMDeploy ended the session for lack of KV cache",
        "InternLM/lmdeploy lmdeploy/serve/async_engine.py",
        "ERROR - async_engine.py:794 - session 12 finished, ResponseType.OUT_OF_MEMORY, reason \"error\""),
    row!("trtllm-no-free-block", TensorrtLlm, KvCache, Request, 0.7,
        r"No free block found\. This shouldn't happen",
        "TensorRT-LLM's KV cache manager has no free block",
        "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/batch_manager/evictionPolicy.cpp",
        "RuntimeError: No free block found. This shouldn't happen! (/src/tensorrt_llm/cpp/tensorrt_llm/batch_manager/evictionPolicy.cpp:113)"),
    row!("trtllm-paged-kv-too-small", TensorrtLlm, KvCache, Load, 0.85,
        r"maxTokensInPagedKvCache(?: \(\d+\))? must be large enough to process at least 1 sequence",
        "TensorRT-LLM's paged KV cache holds fewer tokens than one sequence of max_seq_len needs (raise kv_cache_free_gpu_mem_fraction, or lower max_seq_len / max_input_len)",
        "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp",
        "ERROR: Failed to create instance: unexpected error when creating modelInstanceState: maxTokensInPagedKvCache (29184) must be large enough to process at least 1 sequence to completion (i.e. must be larger than beam_width (1) * tokensPerBlock (128) * maxBlocksPerSeq (272))"),
    row!("trtllm-kv-sizing", TensorrtLlm, KvCache, Load, 0.8,
        r"KV sizing found no usable free memory",
        "TensorRT-LLM found no free memory to size its KV cache",
        "NVIDIA/TensorRT-LLM tensorrt_llm/_torch/pyexecutor/resource_manager.py",
        "ValueError: Helix CP: fraction-based KV sizing found no usable free memory; set kv_cache_config.max_tokens or max_gpu_total_bytes."),
    row!("vllm-auto-fit-none", Vllm, KvCache, Load, 0.85,
        r"Cannot auto-fit max_model_len: not enough GPU memory",
        "vLLM has no memory left for the KV cache of even one token",
        "vllm-project/vllm vllm/v1/core/kv_cache_utils.py",
        "ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token."),
    row!("vllm-block-manager-capacity", Vllm, KvCache, Request, 0.75,
        r"exceeds the capacity of block_manager",
        "the prompt is longer than vLLM's whole KV cache holds",
        "vllm-project/vllm vllm/core/scheduler.py",
        "WARNING 05-12 10:11:12 [scheduler.py:1127] Input prompt (10854 tokens) + lookahead slots (0) is too long and exceeds the capacity of block_manager"),
    row!("vllm-multimodal-decoding", Vllm, KvCache, Load, 0.7,
        concat!(r"GPU decoding reserves ", need!(), r".* but only ", have!(), r" is available for the KV cache"),
        "vLLM's multimodal decoder reserve leaves too little for the KV cache",
        "vllm-project/vllm vllm/v1/worker/gpu_model_runner.py",
        "ValueError: frontend multimodal GPU decoding reserves 6.00 GiB (4.00 GiB raw-frame budget, 2.00 GiB decoder cache budget), but only 3.20 GiB is available for the KV cache."),
    row!("sglang-token-pool", Sglang, KvCache, Request, 0.75,
        r"(?:^|\] |Error: )(?:(?:Prefill|Decode) )?[Oo]ut of memory\. Try to lower your batch size",
        "SGLang's KV token pool has no room for the batch",
        "sgl-project/sglang python/sglang/srt/mem_cache/common.py",
        "[2025-05-12 10:11:12 TP0] Prefill out of memory. Try to lower your batch size."),
    row!("sglang-state-pools", Sglang, KvCache, Load, 0.8,
        r"Not enough GPU memory for hybrid \(mamba/linear-attention\) state cache|SWA pool \(\d+ tokens\) cannot hold even one request|cannot fit ONE worst-case request|Not enough space for mamba cache",
        "SGLang's state / sliding-window pool cannot hold one request",
        "sgl-project/sglang python/sglang/srt/model_executor/model_runner.py",
        "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed max_mamba_cache_size=0"),
    row!("llama-no-memory-slot", LlamaCpp, KvCache, Request, 0.55,
        r"failed to find a memory slot for batch|llama_decode returned 1\b|Context size has been exceeded",
        "llama.cpp's KV cache (its context of n_ctx tokens) has no room for the batch",
        "ggml-org/llama.cpp src/llama-context.cpp",
        "decode: failed to find a memory slot for batch of size 512"),
    row!("vllm-cpu-swap-space", Vllm, KvCache, Request, 0.7,
        r"Aborted due to the lack of CPU swap space",
        "vLLM's CPU swap space for preempted sequences' KV blocks (--swap-space) is full",
        "vllm-project/vllm vllm/core/scheduler.py",
        "RuntimeError: Aborted due to the lack of CPU swap space. Please increase the swap space to avoid this error."),
    row!("vllm-negative-kv", Vllm, KvCache, Load, 0.75,
        r"the rest of the memory reserved for KV Cache is -[\d.]+ ?GiB|# (?:cuda|GPU) blocks: 0,",
        "vLLM's profile leaves nothing (or less than nothing) for the KV cache after the weights and activations",
        "vllm-project/vllm vllm/worker/worker.py",
        "INFO 02-26 09:54:05 worker.py:267] model weights take 5.20GiB; non_torch_memory takes 0.03GiB; PyTorch activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is -1.05GiB."),
    row!("kvcached-pool-short", Vllm, KvCache, Request, 0.7,
        r"kv_cache_manager\.py:\d+\] available_size\(\)=[\d.]+ < need_size=\d+",
        "the elastic KV pool (kvcached) has fewer free blocks than the batch needs",
        "ovg-project/kvcached kvcached/kv_cache_manager.py",
        "(EngineCore_DP0 pid=10311) [kvcached][WARNING][2025-10-25 11:17:27][kv_cache_manager.py:164] available_size()=9.0 < need_size=30"),
    row!("deepspeed-kv-blocks", Deepspeed, KvCache, Request, 0.8,
        r"Not enough free blocks in the KV-cache",
        "DeepSpeed-FastGen's KV cache has no free blocks",
        "deepspeedai/DeepSpeed deepspeed/inference/v2/ragged/kv_cache.py",
        "ValueError: Not enough free blocks in the KV-cache to allocate 16 blocks"),
    // ── the model does not fit ──
    row!("mistralrs-does-not-fit", MistralRs, Weights, Load, 0.85,
        r"model does not fit on the devices|No more devices to map to\. The model does not fit|cannot fit its fixed model components",
        "mistral.rs's device map found no room for the model's layers",
        "EricLBuehler/mistral.rs mistralrs-core/src/pipeline/loaders/auto_device_map.rs",
        "Error: No more devices to map to. The model does not fit on this system."),
    row!("ollama-unable-full-gpu", Ollama, Weights, Load, 0.75,
        r"unable to load full model on GPU",
        "ollama could not place the whole model on the GPU",
        "ollama/ollama llm/server.go",
        "Error: 500 Internal Server Error: unable to load full model on GPU"),
    row!("omlx-max-model-memory", Mlx, Weights, Load, 0.75,
        concat!(r"Model '[^']+' \(", need!(), r"\) exceeds max-model-memory \(", have!(), r"\)"),
        "the model's weights are larger than the memory limit the server was given for models",
        "jundot/omlx omlx/engine_pool.py",
        "Model 'gemma-4-31b-it-4bit' (18.00GB) exceeds max-model-memory (16.00GB)"),
    row!("ollama-model-requires", Ollama, Weights, Load, 0.7,
        concat!(r"model requires ", need!(), r" but only ", have!(), r" are available"),
        "ollama's estimate of the model's memory is more than the GPUs and RAM it can use",
        "ollama/ollama llm/server.go",
        "Error: 500 Internal Server Error: model requires 38.2 GiB but only 30.5 GiB are available (after 1.0 GiB overhead)"),
    row!("vllm-dequant-budget", Vllm, Weights, Load, 0.6,
        r"Not enough room in the gpu_memory_utilization budget to cache a dequantized",
        "a dequantized copy of a weight does not fit beside the KV cache of one request",
        "vllm-project/vllm vllm/model_executor/layers/quantization",
        "ValueError: Not enough room in the gpu_memory_utilization budget to cache a dequantized W4A16 prefill weight"),
    row!("tgi-not-enough-vram", Tgi, Weights, Load, 0.7,
        concat!(r"Not enough VRAM to run the model: Available: ", have!(), r" - Model ", need!()),
        "the model's weights are larger than the card's free memory",
        "huggingface/text-generation-inference launcher/src/main.rs",
        "WARN text_generation_launcher: Not enough VRAM to run the model: Available: 22.97GB - Model 28.80GB."),
    row!("sdcpp-params-buffer", StableDiffusionCpp, Weights, Load, 0.75,
        r"alloc (?:compute )?params backend buffer failed",
        "stable-diffusion.cpp could not allocate the model's parameters on the device",
        "leejet/stable-diffusion.cpp model_manager.cpp",
        "[ERROR] model_manager.cpp:472  - model manager alloc compute params backend buffer failed, num_tensors = 1024"),
    row!("sdcpp-split-segment", StableDiffusionCpp, Weights, Load, 0.7,
        concat!(r"segment \d+ needs ", need!(), r" on \S+.* but only ", have!(), r" is available"),
        "a segment of the model's layers does not fit on its device",
        "leejet/stable-diffusion.cpp layer_split_partition.cpp",
        "[ERROR] layer_split_partition.cpp:161  - flux graph-cut layer split: segment 3 needs 6144.0 MB on CUDA0 (NVIDIA GeForce RTX 4090), but only 4096.0 MB is available under current VRAM limits"),
    row!("llama-adapter-buffer", LlamaCpp, Weights, Load, 0.7,
        r"failed to allocate buffer for (?:lora adapter|control vector)",
        "llama.cpp could not allocate a LoRA adapter's (or control vector's) tensors beside the model",
        "ggml-org/llama.cpp src/llama-adapter.cpp",
        "llama_adapter_lora_init: failed to apply lora adapter: failed to allocate buffer for lora adapter"),
    row!("vllm-layerwise-update", Vllm, Weights, Any, 0.7,
        r"Updating weights layer by layer needs about",
        "updating the weights needs free memory the KV cache holds",
        "vllm-project/vllm vllm/v1/worker/gpu_model_runner.py",
        "RuntimeError: Updating weights layer by layer needs about 3.00 GiB of free device memory, at least 1.50 GiB for the largest layer alone, but only 0.80 GiB is free beside the extensible KV cache."),
    // ── other processes hold the card ──
    row!("vllm-startup-free-external", Vllm, OtherProcess, Load, 0.85,
        r"Free memory on device \S+ \((?P<have>[\d.]+)/[\d.]+ ?(?P<have_u>GiB)\) on startup is less than the engine's budget",
        "at start-up the card's free memory is less than vLLM's budget: other processes hold the rest",
        "vllm-project/vllm vllm/v1/worker/utils.py",
        "ValueError: Free memory on device cuda:0 (20.04/79.19 GiB) on startup is less than the engine's budget after excluding external process's weights (0.9, 41.27 GiB)."),
    row!("sglang-unbalanced", Sglang, OtherProcess, Load, 0.75,
        r"memory capacity is unbalanced\. Some GPUs may be occupied by other processes",
        "SGLang found less free memory on some GPUs than others: other processes hold them",
        "sgl-project/sglang python/sglang/srt/utils/common.py",
        "[2025-05-12 10:11:12 TP0] The memory capacity is unbalanced. Some GPUs may be occupied by other processes. pre_model_load_memory=40.1234"),
    row!("ggml-cuda-init-oom", LlamaCpp, OtherProcess, Load, 0.6,
        r"ggml_cuda_init: failed to initialize CUDA: out of memory",
        "creating the CUDA context ran out before any tensor existed: other processes hold the card",
        "ggml-org/llama.cpp ggml/src/ggml-cuda/ggml-cuda.cu",
        "ggml_cuda_init: failed to initialize CUDA: out of memory"),
    // ── compute buffers and workspaces ──
    row!("lmdeploy-runtime", Lmdeploy, Activations, Load, 0.75,
        r"No enough gpu memory for runtime",
        "LMDeploy found no GPU memory left for its runtime buffers (prefill activations)",
        "InternLM/lmdeploy lmdeploy/pytorch/engine/cache_engine.py",
        "RuntimeError: No enough gpu memory for runtime."),
    row!("mlx-unfolding-row", Mlx, Activations, Any, 0.8,
        r"A single unfolding row needs (?P<need_b>\d+) bytes, which exceeds the maximum Metal buffer size of (?P<have_b>\d+)",
        "a convolution's unfolded input is larger than Metal's largest buffer",
        "ml-explore/mlx mlx/backend/metal/conv.cpp",
        "RuntimeError: [conv] A single unfolding row needs 19327352832 bytes, which exceeds the maximum Metal buffer size of 17179869184 bytes."),
    row!("xla-rematerialization", Xla, Activations, Any, 0.5,
        r"Can't reduce memory use below .* by rematerialization",
        "XLA could not bring the program's activations under the device's memory",
        "openxla/xla xla/service/hlo_rematerialization.cc",
        "W0905 17:27:21.123456 2329 hlo_rematerialization.cc:3231] Can't reduce memory use below 57.03GiB (61237292825 bytes) by rematerialization; only reduced to 68.32GiB (73361280968 bytes)"),
    row!("xla-execution-oom", Xla, Unknown, Any, 0.5,
        r"(?i:resource[_ ]exhausted): Out of memory while trying to allocate (?P<need_b>\d+) bytes|(?i:resource[_ ]exhausted): Out of memory while trying to allocate \S+\. \[executable_name",
        "XLA could not allocate a buffer of a compiled program while running it",
        "openxla/xla xla/pjrt/gpu/se_gpu_pjrt_client.cc",
        "RuntimeError: Resource exhausted: Out of memory while trying to allocate 13497323384 bytes."),
    row!("sdcpp-compute-buffer", StableDiffusionCpp, Activations, Request, 0.75,
        r"alloc compute (?:buffer|graph) failed|VAE decode failed \(likely out of memory\)",
        "stable-diffusion.cpp could not allocate a compute buffer (the graph's activations)",
        "leejet/stable-diffusion.cpp ggml_extend.hpp",
        "[ERROR] ggml_extend.hpp:2803 - vae alloc compute buffer failed"),
    row!("ggml-sched-graph", LlamaCpp, Activations, Request, 0.65,
        r"(?:ggml_backend_sched_alloc_splits|process_ubatch): failed to allocate graph",
        "ggml could not allocate the compute graph's buffers (activations) for the batch",
        "ggml-org/llama.cpp ggml/src/ggml-backend.cpp",
        "ggml_backend_sched_alloc_splits: failed to allocate graph"),
    row!("koboldcpp-scratch", Koboldcpp, Activations, Request, 0.7,
        r"ggml_v\d_new_tensor_impl: not enough space in the (?:scratch|context's) memory pool \(needed \d+, available \d+\)",
        "an old ggml scratch pool is too small for the graph's activations",
        "LostRuins/koboldcpp otherarch/ggml_v3.c",
        "ggml_v3_new_tensor_impl: not enough space in the scratch memory pool (needed 268435456, available 134217728)"),
    row!("comfyui-vae-retry", Comfyui, Activations, Request, 0.6,
        r"Ran out of memory when regular VAE (?:de|en)coding, retrying with tiled",
        "the VAE's activations did not fit, so ComfyUI retries in tiles",
        "comfyanonymous/ComfyUI comfy/sd.py",
        "Warning: Ran out of memory when regular VAE decoding, retrying with tiled VAE decoding."),
    row!("comfyui-lower-resolution", Comfyui, Activations, Request, 0.75,
        r"Not enough memory, use lower resolution",
        "the attention's activations at this resolution do not fit",
        "comfyanonymous/ComfyUI comfy/ldm/modules/attention.py",
        "RuntimeError: Not enough memory, use lower resolution (max approx. 1536x1536). Need: 2.1GB free, Have:1.3GB free"),
    row!("comfyui-attention-retry", Comfyui, Activations, Request, 0.6,
        r"ran out of memory while running softmax|scaled_dot_product_attention OOMed|out of memory error, (?:emptying cache|increasing steps) and trying again",
        "the attention's activations did not fit, so ComfyUI retries in slices",
        "comfyanonymous/ComfyUI comfy/ldm/modules/attention.py",
        "out of memory error, emptying cache and trying again"),
    // ── concurrent requests ──
    row!("exllama3-no-slots", Exllamav3, Concurrency, Request, 0.7,
        r"Cannot create new state: no available slots|batch size too large for cache",
        "exllamav3's cache has no slot for another concurrent sequence",
        "turboderp-org/exllamav3 exllamav3/cache/cache.py",
        "AssertionError: Cannot create new state: no available slots"),
    // ── out of memory, part not named ──
    row!("xla-not-possible", Xla, Unknown, Any, 0.5,
        concat!(r"(?i:resource[_ ]exhausted): Attempting to allocate ", need!(), r"\. That was not possible\. There are ", have!(), r" free"),
        "XLA's device allocator could not place the buffer",
        "openxla/xla xla/stream_executor/integrations/tf_allocator_adapter.cc",
        "(1) Resource exhausted: Attempting to allocate 180.59M. That was not possible. There are 142.58M free.; (0x3x0_HBM1)"),
    row!("xla-execution-failed", Xla, Unknown, Any, 0.45,
        r"Execution of replica \d+ failed: (?i:resource[_ ]exhausted)",
        "XLA's execution ran out of device memory",
        "openxla/xla xla/python/local_client.cc",
        "E external/org_tensorflow/tensorflow/compiler/xla/python/local_client.cc:672] Execution of replica 0 failed: Resource exhausted: Out "),
    row!("tensorrt-builder-oom", TensorrtLlm, Weights, Load, 0.5,
        r"\[TRT\] \[E\] .*Error Code 2: OutOfMemory",
        "TensorRT's builder ran out of device memory while building the engine (it holds the engine's weights and its tactic workspace)",
        "NVIDIA/TensorRT (builder's virtualMemoryBuffer)",
        "[05/15/2024-14:03:05] [TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::155] Error Code 2: OutOfMemory (no further information)"),
    row!("openvino-cl-out-of-resources", Openvino, Unknown, Any, 0.5,
        r"reduce memory consumption .*to avoid CL_OUT_OF_RESOURCES",
        "OpenVINO's GPU plugin hit CL_OUT_OF_RESOURCES: the GPU's memory ran out, or its driver failed",
        "openvinotoolkit/openvino src/plugins/intel_gpu/src/runtime/ocl/ocl_stream.cpp",
        "\"Due to the driver bug any subsequent OpenCL API call will cause application hang, so GPU plugin can't finish correctly. Please try to update the driver or reduce memory consumption (use smaller batch size, less streams, lower precision, etc)to avoid CL_OUT_OF_RESOURCES exception\""),
    row!("cublas-status-3", Cuda, Unknown, Any, 0.5,
        r"cublasLtCreate\(.*\) failed with code: 3\b|CUBLAS ERROR: Status 3\b",
        "cuBLAS could not allocate (status 3, CUBLAS_STATUS_ALLOC_FAILED): the card was already full",
        "ml-explore/mlx mlx/backend/cuda/device.cpp; bitsandbytes-foundation/bitsandbytes csrc/ops.cu",
        "RuntimeError: cublasLtCreate(&storage.handle) failed with code: 3."),
    row!("candle-metal-resource", Candle, Unknown, Any, 0.5,
        r"Failed to create metal resource",
        "Metal could not create a buffer: usually the GPU's memory ran out",
        "huggingface/candle candle-metal-kernels/src/lib.rs",
        "Error: Metal error Failed to create metal resource: Buffer"),
    row!("llama-decode-minus-2", LlamaCpp, Unknown, Request, 0.45,
        r"llama_decode returned -2\b|llama_decode: failed to decode, ret = -2\b|LLAMA EVAL returned nonzero: -2\b|decode: Compute error\.|graph_compute failed with error -2\b",
        "llama.cpp's decode failed to allocate (-2): its compute buffer or cache did not fit",
        "ggml-org/llama.cpp src/llama-context.cpp",
        "RuntimeError: llama_decode returned -2"),
    row!("llama-decode-minus-3", LlamaCpp, Unknown, Request, 0.35,
        r"llama_decode: failed to decode, ret = -3\b|llama_decode returned -3\b",
        "llama.cpp's graph compute failed mid-request (-3, GGML_STATUS_FAILED): on Metal that is a failed command buffer, most often for memory (kIOGPUCommandBufferCallbackErrorOutOfMemory), sometimes a GPU timeout; the backend's own line above it settles which",
        "ggml-org/llama.cpp src/llama-context.cpp (GGML_STATUS_FAILED -> -3)",
        "llama_decode: failed to decode, ret = -3"),
    row!("nccl-symmetric-memory", Sglang, Unknown, Any, 0.5,
        r"NCCL symmetric memory allocation failed\. Most likely out of device memory",
        "NCCL could not allocate its buffers on the card",
        "sgl-project/sglang python/sglang/srt/distributed/device_communicators/pynccl_allocator.py",
        "ERROR: NCCL symmetric memory allocation failed. Most likely out of device memory."),
    row!("onnxruntime-arena-short", Onnxruntime, Unknown, Any, 0.6,
        r"BFCArena::AllocateRawInternal.*Available memory of (?P<have_b>\d+) is smaller than requested bytes of (?P<need_b>\d+)",
        "onnxruntime's memory arena (capped by gpu_mem_limit) has less left than the request",
        "microsoft/onnxruntime onnxruntime/core/framework/bfc_arena.cc",
        "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, onnxruntime::WaitNotificationFn) Available memory of 201326592 is smaller than requested bytes of 402653184"),
    row!("onnxruntime-arena-no-block", Onnxruntime, Unknown, Any, 0.6,
        r"Failed to find a free memory block despite calling Extend",
        "onnxruntime's memory arena could not grow to hold the request",
        "microsoft/onnxruntime onnxruntime/core/framework/bfc_arena.cc",
        "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, onnxruntime::WaitNotificationFn) Failed to find a free memory block despite calling Extend. rounded_bytes=104857600"),
    row!("deepspeed-workspace", Deepspeed, Unknown, Any, 0.5,
        r"Workspace can't be allocated, no?t? enough memory",
        "DeepSpeed inference's workspace (its KV cache and activations) does not fit",
        "deepspeedai/DeepSpeed csrc/transformer/inference/includes/inference_context.h",
        "RuntimeError: Workspace can't be allocated, no enough memory."),
    row!("tgi-not-enough-memory", Tgi, Activations, Load, 0.7,
        r"Backend\(NotEnoughMemory\((?P<tokens>\d+)\)\)",
        "TGI's warm-up could not run its prefill token budget (--max-batch-prefill-tokens)",
        "huggingface/text-generation-inference backends/v3/src/client/mod.rs",
        "Error: Backend(NotEnoughMemory(32768))"),
];

/// The rows compiled once: each pattern alone, and the literal gate that picks which to try.
struct Compiled {
    each: Vec<Regex>,
    gate: Gate,
}

/// Every match of a row's regex begins with one of the literals regex-syntax extracts from it
/// (a finite prefix sequence; see `regex_syntax::hir::literal::Extractor`): a row none of whose
/// literals is on a line cannot match it. One overlapping Aho-Corasick pass over all the rows'
/// literals names the few rows a line may hold, and only their own regexes run on it, where the
/// combined set walks every line with all the rows at once.
struct Gate {
    /// The literals of every gated row (`None`: no gate; the whole set runs on every line).
    literals: Option<AhoCorasick>,
    /// The row of each literal, by the automaton's pattern index.
    row_of: Vec<usize>,
    /// The rows without a finite sequence of non-empty literals: candidates on every line.
    open: Vec<usize>,
}

/// The prefix literals every match of `pattern` begins with; `None` when there is no finite
/// sequence of non-empty ones (any line may then match).
fn prefix_literals(pattern: &str) -> Option<Vec<Vec<u8>>> {
    let hir = regex_syntax::parse(pattern).ok()?;
    let seq = Extractor::new().kind(ExtractKind::Prefix).extract(&hir);
    let lits = seq.literals()?;
    if lits.is_empty() || lits.iter().any(|l| l.as_bytes().is_empty()) {
        return None;
    }
    Some(lits.iter().map(|l| l.as_bytes().to_vec()).collect())
}

fn gate(patterns: &[&str]) -> Gate {
    let mut literals = Vec::new();
    let mut row_of = Vec::new();
    let mut open = Vec::new();
    for (i, p) in patterns.iter().enumerate() {
        match prefix_literals(p) {
            Some(l) => {
                row_of.extend(std::iter::repeat_n(i, l.len()));
                literals.extend(l);
            }
            None => open.push(i),
        }
    }
    Gate {
        literals: AhoCorasick::new(&literals).ok(),
        row_of,
        open,
    }
}

fn compiled() -> &'static Compiled {
    static CELL: OnceLock<Compiled> = OnceLock::new();
    CELL.get_or_init(|| {
        let patterns: Vec<&str> = ROWS.iter().map(|r| r.pattern).collect();
        let each = patterns
            .iter()
            .map(|p| Regex::new(p).unwrap_or_else(|e| unreachable!("static pattern {p}: {e}")))
            .collect();
        Compiled {
            each,
            gate: gate(&patterns),
        }
    })
}

/// Rows that give way when the line says more than they read: XLA's figures with its
/// fragmentation sentence go to the reader that weighs them (`engines`, `DeviceFragmented`).
const UNLESS: &[(&str, &str)] = &[("xla-not-possible", "Due to fragmentation")];

/// Whether row `i` may take `line` (not one that gives way to another reader on it).
fn takes(i: usize, line: &str) -> bool {
    ROWS.get(i).is_some_and(|r| {
        !UNLESS
            .iter()
            .any(|(id, words)| *id == r.id && line.contains(words))
    })
}

/// The index of the first row whose pattern matches `line` and that takes it.
fn first_row(line: &str) -> Option<usize> {
    let c = compiled();
    let Some(literals) = &c.gate.literals else {
        return whole_set(line);
    };
    // The rows whose literal is on the line, and the open rows, tried in table order.
    let mut rows = c.gate.open.clone();
    for m in literals.find_overlapping_iter(line.as_bytes()) {
        if let Some(&i) = c.gate.row_of.get(m.pattern().as_usize()) {
            rows.push(i);
        }
    }
    rows.sort_unstable();
    rows.dedup();
    rows.into_iter()
        .find(|&i| c.each.get(i).is_some_and(|r| r.is_match(line)) && takes(i, line))
}

/// `first_row` by the combined set over all the rows (where the gate could not be built),
/// compiled on first use.
fn whole_set(line: &str) -> Option<usize> {
    static SET: OnceLock<RegexSet> = OnceLock::new();
    let set = SET.get_or_init(|| {
        RegexSet::new(ROWS.iter().map(|r| r.pattern))
            .unwrap_or_else(|e| unreachable!("static catalogue patterns: {e}"))
    });
    // Most lines hold no row's message: one search that stops at the first match answers them,
    // where listing every matching row walks the line with all the rows at once.
    if !set.is_match(line) {
        return None;
    }
    set.matches(line).into_iter().find(|&i| takes(i, line))
}

/// The first row whose message is on this line, with its figures.
pub fn lookup(line: &str) -> Option<Catalogued> {
    catalogued(line, first_row(line)?)
}

/// Row `i`'s reading of `line` (a line it matches).
fn catalogued(line: &str, i: usize) -> Option<Catalogued> {
    let row = ROWS.get(i)?;
    let caps = compiled().each.get(i)?.captures(line)?;
    Some(Catalogued {
        id: row.id,
        ran_out: row.ran_out,
        what: row.what,
        from: row.from,
        needed: figure(&caps, "need"),
        available: figure(&caps, "have"),
        source: row.source,
        when: row.when,
        confidence: row.confidence,
    })
}

fn figure(c: &Captures, name: &str) -> Option<u64> {
    if let Some(b) = c.name(&format!("{name}_b")) {
        return b.as_str().parse().ok();
    }
    let n = c.name(name)?;
    let u = c.name(&format!("{name}_u"))?;
    size(n.as_str(), u.as_str())
}

/// Offer one line to the catalogue; true when it held a catalogued message.
pub fn read(lines: &[String], i: usize, st: &mut Scan) -> bool {
    let Some(line) = lines.get(i) else {
        return false;
    };
    let Some(row) = st
        .memo
        .get(lines, i, |m| &mut m.catalogue_row, first_row)
        .flatten()
    else {
        return false;
    };
    match catalogued(line, row) {
        Some(mut c) => {
            if c.id == "xla-execution-oom" {
                xla_buffer_assignment(lines, i, &mut c);
            }
            st.add(i + 1, line, Event::Catalogued(c));
            true
        }
        None => false,
    }
}

/// XLA prints its buffer assignment after an execution's out-of-memory (`BufferAssignment OOM
/// Debugging`): parameters (the weights and inputs passed in), outputs, and temporaries. When
/// the program's own buffers — temporaries and outputs beyond the parameters — are most of the
/// total, the computation's activations are what did not fit (AFProfile-8: 372.76 MiB of
/// parameters, 9.64 GiB out and 4.44 GiB temporaries of 14.44 GiB); outputs that only copy the
/// parameters (gemma-54: 1000.50 MiB in, 1000.50 MiB out, no temporaries) decide nothing.
fn xla_buffer_assignment(lines: &[String], i: usize, c: &mut Catalogued) {
    static STAT: OnceLock<Regex> = OnceLock::new();
    let stat = super::parse::re_built(&STAT, || {
        format!(
            r"^\s*(parameter|maybe_live_out|preallocated temp|total) allocation:\s*{}",
            super::parse::SIZE
        )
    });
    let (mut param, mut out, mut temp, mut total) = (None, None, None, None);
    for l in lines.iter().skip(i + 1).take(12) {
        if let Some(m) = stat.captures(l) {
            let v = size(
                m.get(2).map_or("", |x| x.as_str()),
                m.get(3).map_or("", |x| x.as_str()),
            );
            match m.get(1).map(|x| x.as_str()) {
                Some("parameter") => param = v,
                Some("maybe_live_out") => out = v,
                Some("preallocated temp") => temp = v,
                _ => total = v,
            }
        }
    }
    let (Some(param), Some(out), Some(temp), Some(total)) = (param, out, temp, total) else {
        return;
    };
    let own = temp.saturating_add(out.saturating_sub(param));
    if total > 0 && own.saturating_mul(5) >= total.saturating_mul(4) {
        c.ran_out = RanOut::Activations;
        c.when = When::Request;
        c.confidence = 0.7;
        c.what = "XLA's buffer assignment shows the program's own temporaries and outputs, not its parameters, fill the allocation: activations";
        c.needed = Some(total);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gate's answer is the whole set's on every line: each row's example, and every line
    /// of every log in the corpus (cleaned as `explain` cleans it).
    #[test]
    fn the_literal_gate_answers_as_the_whole_set_would() {
        let whole = whole_set;
        let mut lines: Vec<String> = ROWS.iter().map(|r| r.example.to_string()).collect();
        for (_, raw) in crate::logparse::corpus_logs() {
            lines.extend(crate::logparse::clean_lines(&raw));
        }
        assert!(lines.len() > 1000);
        for line in &lines {
            assert_eq!(first_row(line), whole(line), "{line}");
        }
        // The gate holds most rows: few go to the set on every line.
        let gate = &compiled().gate;
        assert!(gate.literals.is_some());
        assert!(gate.open.len() * 4 < ROWS.len(), "{:?}", gate.open);
    }

    #[test]
    fn every_row_reads_its_own_example_and_no_earlier_row_takes_it() {
        for (i, row) in ROWS.iter().enumerate() {
            let got = lookup(row.example);
            assert_eq!(
                got.as_ref().map(|c| c.id),
                Some(row.id),
                "row {i} {}: {:?}",
                row.id,
                got
            );
            assert!(
                super::super::words::worth_reading(row.example),
                "row {} is never offered: its example has no anchor of words::worth_reading",
                row.id
            );
        }
    }

    #[test]
    fn row_names_are_unique_and_confidences_are_probabilities() {
        let mut ids: Vec<&str> = ROWS.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n, "duplicate row id");
        assert!(ROWS.iter().all(|r| (0.0..=1.0).contains(&r.confidence)));
    }

    #[test]
    fn figures_are_read_in_the_units_written() {
        let c = lookup("Error: PagedAttention KV cache requires 8192 MB but only 3120 MB is safely available after model loading.");
        let c = c.map(|c| (c.needed, c.available));
        assert_eq!(c, Some((Some(8_192_000_000), Some(3_120_000_000))));
        let c = lookup("memory allocation of 34359738368 bytes failed").and_then(|c| c.needed);
        assert_eq!(c, Some(34_359_738_368));
    }

    #[test]
    fn xlas_buffer_assignment_decides_activations_only_when_the_program_s_own_buffers_fill_it() {
        let lines = |s: &str| s.lines().map(str::to_string).collect::<Vec<_>>();
        let mut st = Scan::default();
        let afprofile = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4770354232 bytes.\nBufferAssignment OOM Debugging.\nBufferAssignment stats:\n             parameter allocation:  372.76MiB\n              constant allocation:    48.5KiB\n        maybe_live_out allocation:    9.64GiB\n     preallocated temp allocation:    4.44GiB\n                 total allocation:   14.44GiB";
        assert!(read(&lines(afprofile), 0, &mut st));
        let gemma = "Execution of replica 0 failed: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1049100288 bytes.\n             parameter allocation: 1000.50MiB\n              constant allocation:         0B\n        maybe_live_out allocation: 1000.50MiB\n     preallocated temp allocation:         0B\n                 total allocation:    1.95GiB";
        assert!(read(&lines(gemma), 0, &mut st));
        let parts: Vec<RanOut> = st
            .findings
            .iter()
            .filter_map(|f| match &f.event {
                Event::Catalogued(c) => Some(c.ran_out),
                _ => None,
            })
            .collect();
        assert_eq!(parts, vec![RanOut::Activations, RanOut::Unknown]);
    }

    #[test]
    fn near_misses_are_not_rows() {
        for line in [
            "llama_decode returned 0",
            "decode: failed to find free space in the KV cache, retrying with smaller batch size, off = 0, n_batch = 256, ret = 1",
            "earlyoom[601]: mem avail:  1519 of 31890 MiB ( 4.76%), swap free:    0 of 2047 MiB ( 0.00%)",
            "Exited (0) 2 minutes ago",
            "exitcode  : 1 (pid: 48213)",
        ] {
            assert_eq!(lookup(line).map(|c| c.id), None, "{line}");
        }
    }
}
