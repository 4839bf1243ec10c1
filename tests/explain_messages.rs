//! Every out-of-memory message the engines' own source can print, and their near misses, read
//! by `explain`: tests/fixtures/messages/*.jsonl (serving engines; the llama.cpp family; other
//! runtimes and the OS; PyTorch and its training stack), written from each engine's
//! source. Each entry has the source string, a rendering with its
//! placeholders filled (a rendering, not a real log), whether it is an out-of-memory, and the
//! cause the code path gives.
//!
//! What must hold: no catalogued out-of-memory is answered `none`, and no near miss is called an
//! out-of-memory, except the entries listed below with the reason (a warning the engine recovers
//! from, or a label this project does not share). The cause is the catalogue's reading of
//! the code path; `explain` adopts it only where the message's words name the part, so the cause
//! agreement has a floor, printed with every disagreement.

use std::path::PathBuf;

use llm_oom::estimate::Engine;
use llm_oom::verdict::read::read_log;
use serde_json::Value;

/// Out-of-memory entries `explain` answers `none` on purpose: (file, engine, the start of the
/// rendering, why).
const OOM_ANSWERED_NONE: &[(&str, &str, &str)] = &[
    // Warnings after which the engine goes on with a smaller setting: nothing failed yet.
    ("vllm", "(EngineCore_DP0 pid=2345) WARNING 05-12 10:11:12 [kv_cache_planning.py:1506] --max-model-len auto reduced", "vLLM lowered max_model_len to what fits and serves on"),
    ("vllm", "WARNING 05-12 10:11:12 [scheduler.py:1680] Sequence group 42 is preempted", "vLLM's preemption warning: the request is recomputed, not failed (a look-alike in the real corpus)"),
    ("sglang", "[2025-05-12 10:11:12 TP0] KV cache pool is full. Retract requests.", "SGLang retracts requests and goes on (a look-alike in the real corpus)"),
    ("sglang", "[2025-05-12 10:11:12 TP0] Failed to allocate shared memory for multimodal", "falls back to inline transport; the cause is a full /dev/shm disk"),
    ("sglang", "[2025-05-12 10:11:12 TP0] Model does not fit to the GPU mem. We apply", "a calibration notice: SGLang sets a memory limit and goes on"),
    ("tensorrt_llm", "[05/12/2025-10:11:12] [TRT-LLM] [W] maxAttentionWindow", "TensorRT-LLM shrinks the window to what fits and goes on"),
    ("tensorrt_llm", "[05/12/2025-10:11:12] [TRT-LLM] [W] maxInputLen is reduced", "TensorRT-LLM shrinks the input length to what fits and goes on"),
    ("lmdeploy", "2025-05-12 10:11:12,123 - lmdeploy - WARNING - base.py:402 - No enough memory. Update", "LMDeploy lowers max_prefill_token_num and goes on"),
    ("lmdeploy", "2025-05-12 10:11:12,123 - lmdeploy - WARNING - engine_loop.py:478", "requests wait for cache blocks; none failed"),
    ("mistral.rs", "2026-08-22T10:11:12.345678Z  WARN mistralrs_core::pipeline::loaders::auto_device_map: Device cuda[1] can fit 0 layers", "the device map puts the layers elsewhere and goes on"),
    ("llama.cpp", "0.33.120.010 W srv        decode: failed to find free space in the KV cache, retrying", "llama-server retries with a smaller batch"),
    ("earlyoom", "earlyoom[601]: mem avail:", "earlyoom's periodic status line, printed whether or not memory is low"),
    ("linux-kernel", "[123456.700000] python3: page allocation failure", "a kernel allocation warning (high order); the kernel retries or the caller copes"),
    // Failures that do not say memory ran out: the cause is in the thread, not the line.
    ("llama.cpp", "ggml_vulkan: Failed to allocate pinned memory", "ggml falls back to pageable memory when pinning fails (llama.cpp-9271's maintainer: safe to ignore)"),
    ("llama.cpp", "0.02.900.110 E llama_init_from_model: failed to initialize the context: failed to reserve initial output buffer", "no memory words; the output buffer's reserve failed"),
    ("llama.cpp", "0.15.002.005 E decode: could not reserve space for batch", "no memory words"),
    ("llama-cpp-python", "ValueError: Failed to evaluate chunk: error code 1", "a bare return code"),
    ("koboldcpp", "Processing LLaVa Embedding", "a bare failure of the image encoder"),
    ("koboldcpp", "Processing Prompt [BLAS] (512 / 4096 tokens)", "\"check your context buffer sizes\": a bare failure"),
    ("koboldcpp", "Failed to predict at 512!", "\"check your context buffer sizes\": a bare failure"),
    ("stable-diffusion.cpp", "[ERROR] model_loader.cpp:1229 - read tensor data failed: too less memory", "a conversion buffer while reading weights; too rare a wording to anchor"),
    ("stable-diffusion.cpp", "[ERROR] stable-diffusion.cpp:5381 - decode_first_stage failed", "a bare failure"),
    ("stable-diffusion.cpp", "[ERROR] stable-diffusion.cpp:2790 - diffusion model compute failed", "a bare failure"),
    ("triton", "{\"error\":\"failed to reserve", "the words say a reserve failed, not that memory ran out"),
    ("tgi", "Error: Backend(Llamacpp(\"Failed to init context\"))", "a bare failure of llama.cpp's context"),
    ("jax/xla", "E0207 22:03:02.026958 1957515 gpu_hlo_schedule.cc:815] The byte size", "XLA says its own calculation is wrong"),
    ("tensorflow", "E tensorflow/stream_executor/cuda/cuda_dnn.cc:334] Could not create cudnn handle", "a cuDNN handle failure: often memory, often a version mismatch (a look-alike in the real corpus)"),
    ("pytorch", "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED", "cuBLAS not initialised: a look-alike in the real corpus (version mismatches as often as memory)"),
    ("pytorch", "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED", "cuDNN not initialised: a look-alike in the real corpus"),
    ("pytorch", "RuntimeError: Invalid buffer size", "MPS refuses one tensor over Metal's buffer limit: a size limit (the label is unsure too)"),
    ("accelerate", "ValueError: We need an `offload_dir`", "a missing argument for offloading, not memory run out"),
    ("transformers", "ValueError: The current `device_map` had weights offloaded to the disk", "a missing argument for offloading"),
    ("transformers", "ValueError: Invalid values: max_batch_tokens", "a validation error of the paged cache's sizes"),
    ("deepspeed", "Not enough swap in buffers", "DeepSpeed's NVMe swap buffers: a configuration count, not memory"),
];

/// Near misses `explain` calls an out-of-memory, with why this project reads them so.
const LOOK_ALIKES_CALLED_OOM: &[(&str, &str, &str)] = &[
    ("llama.cpp", "ggml_vulkan: Device memory allocation of size 5368709120 failed.", "the driver answers ErrorOutOfDeviceMemory; a buffer over the device's size limit is an out-of-memory as MLX's is"),
    ("llama.cpp", "ggml_vulkan: Device memory allocation of size 1048576 failed.", "ErrorOutOfDeviceMemory: the driver's own out-of-memory"),
    ("llama-cpp-python", "llama_model_load: error loading model: unable to allocate CUDA0 buffer", "the model's buffer could not be allocated: weights (the catalogue's label is a slip)"),
    ("llama-cpp-python", "llama_adapter_lora_init: failed to apply lora adapter: failed to allocate buffer", "the adapter's buffer could not be allocated (the llama.cpp entry says OOM)"),
    ("sglang", "[2025-05-12 10:11:12 TP0] Scheduler hit an exception", "\"Not enough memory. Please try to increase --mem-fraction-static\": SGLang's KV pool"),
    ("deepspeed", "RuntimeError: zero.Init resolved a process group", "the message warns of an OOM risk in its own words"),
];

/// How many catalogued entries `explain` gives the catalogue's cause at least (of all entries).
const CAUSE_AGREES_AT_LEAST: usize = 404;

fn listed(list: &[(&str, &str, &str)], engine: &str, rendered: &str) -> Option<usize> {
    list.iter()
        .position(|(e, start, _)| *e == engine && rendered.starts_with(start))
}

#[test]
fn no_catalogued_out_of_memory_is_none_and_no_near_miss_is_one() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/messages");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|x| x == "jsonl"));
    files.sort();
    assert!(
        files.len() >= 4,
        "catalogue files missing in {}",
        dir.display()
    );
    let (mut n, mut agree) = (0usize, 0usize);
    let mut wrong_none = Vec::new();
    let mut wrong_oom = Vec::new();
    let (mut used_none, mut used_oom) = (Vec::new(), Vec::new());
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let e: Value = serde_json::from_str(line).unwrap_or(Value::Null);
            let (engine, rendered) = (
                e["engine"].as_str().unwrap_or(""),
                e["rendered"].as_str().unwrap_or(""),
            );
            let (oom, cause) = (
                e["oom"].as_bool().unwrap_or(false),
                e["cause"].as_str().unwrap_or(""),
            );
            let got = match read_log(rendered.as_bytes(), Engine::Transformers) {
                Ok(r) => r.verdict.cause.as_str().to_string(),
                Err(err) => format!("error: {err}"),
            };
            n += 1;
            let short: String = rendered.chars().take(160).collect();
            if got == cause {
                agree += 1;
            } else {
                println!("{engine}\t{cause}\t{got}\t{short}");
            }
            if oom && got == "none" {
                match listed(OOM_ANSWERED_NONE, engine, rendered) {
                    Some(i) => used_none.push(i),
                    None => wrong_none.push(format!("{engine}: {short}")),
                }
            }
            if !oom && got != "none" {
                match listed(LOOK_ALIKES_CALLED_OOM, engine, rendered) {
                    Some(i) => used_oom.push(i),
                    None => wrong_oom.push(format!("{engine} → {got}: {short}")),
                }
            }
        }
    }
    println!(
        "catalogue: {agree}/{n} causes agree with the catalogue's; {} + {} listed exceptions",
        used_none.len(),
        used_oom.len()
    );
    // A listed exception that no entry needs any more is stale: the lists hold only live ones.
    let stale: Vec<&str> = (0..OOM_ANSWERED_NONE.len())
        .filter(|i| !used_none.contains(i))
        .map(|i| OOM_ANSWERED_NONE[i].1)
        .chain(
            (0..LOOK_ALIKES_CALLED_OOM.len())
                .filter(|i| !used_oom.contains(i))
                .map(|i| LOOK_ALIKES_CALLED_OOM[i].1),
        )
        .collect();
    assert!(
        stale.is_empty(),
        "listed exceptions no entry needs: {stale:?}"
    );
    assert!(
        wrong_none.is_empty(),
        "out-of-memory messages answered none:\n{}",
        wrong_none.join("\n")
    );
    assert!(
        wrong_oom.is_empty(),
        "near misses called an out-of-memory:\n{}",
        wrong_oom.join("\n")
    );
    assert!(
        agree >= CAUSE_AGREES_AT_LEAST,
        "{agree} of {n} causes agree, floor {CAUSE_AGREES_AT_LEAST}"
    );
}
