use super::*;

#[test]
fn a_log_read_only_in_part_says_so() {
    use crate::logparse::bounded::{read_bounded_with, Limits};
    let limits = Limits {
        head: 4 << 10,
        tail: 4 << 10,
        stop_after: 1 << 20,
        lines: 1000,
    };
    let input = b"y\n".repeat(1 << 20);
    let read = read_bounded_with(&input[..], limits).unwrap();
    let r = read_log(&read.bytes, Engine::Transformers).unwrap();
    assert_eq!(r.verdict.cause, Cause::None);
    assert_eq!(r.read_only_bytes, Some(1 << 20));
    assert!(
        r.verdict.summary.contains("read the first 1.00 MiB only"),
        "{}",
        r.verdict.summary
    );
    let whole = read_log(b"step 1\nstep 2\n", Engine::Transformers).unwrap();
    assert_eq!(whole.read_only_bytes, None);
    assert!(!whole.verdict.summary.contains("read the first"));
}

#[test]
fn a_parameter_count_after_a_multibyte_character_is_read() {
    // Found by cargo-fuzz: a byte index inside '�' before "7b".
    assert_eq!(params_from("模型\u{fffd}7b"), Some(7e9));
    assert_eq!(params_from("qwen-\u{fffd}0.5b"), Some(0.5e9));
}

#[test]
fn model_names_give_a_weight_size() {
    let g = |n: &str| weights_from_name(n).map(|b| b / 1_000_000_000);
    assert_eq!(g("mistralai/Mistral-7B-v0.1"), Some(14));
    assert_eq!(g("TheBloke/Llama-2-13B-AWQ"), Some(7));
    assert_eq!(g("Qwen/Qwen2.5-0.5B-Instruct"), Some(1));
    assert_eq!(g("mistralai/Mixtral-8x7B-v0.1"), Some(112));
    assert_eq!(g("gpt2"), None);
}

fn cause_of(log: &str) -> Cause {
    read_log(log.as_bytes(), Engine::Transformers)
        .map(|r| r.verdict.cause)
        .unwrap_or(Cause::None)
}

#[test]
fn an_oom_without_figures_names_its_part_or_is_decided_by_its_phase() {
    // E23: the message's own words (freetoken-2, trtllm-694, llamacpp-eullm-302).
    assert_eq!(
        cause_of("AssertionError: Not enough memory for KV cache, try reducing --num-pages\n"),
        Cause::KvCache
    );
    assert_eq!(
        cause_of("Failed to create context: null reference from llama.cpp\n"),
        Cause::KvCache
    );
    // E24: the phase the log shows (sophgo-llmtpu-8), over when the log says it loaded.
    let loading = "[BMRT][load_bmodel:1573] INFO:Loading bmodel from [x.bmodel].\n[bmlib_memory][error] bm_alloc_gmem failed, dev_id = 0, size = 0xc0fb4000\n";
    assert_eq!(cause_of(loading), Cause::Weights);
    let loaded = "Loading model.safetensors...\nLoaded 1324 weights from 1 file(s)\n[METAL] Command buffer execution failed: Insufficient Memory\n";
    assert_eq!(cause_of(loaded), Cause::Unknown);
    // Two parts named: the phase does not pick one (exllamav2-383).
    let both = "cache = ExLlamaV2Cache(model, lazy = True)\nRuntimeError: Insufficient VRAM for model and cache\n";
    assert_eq!(cause_of(both), Cause::Unknown);
    // A newest-first log: the phase before the error is below it (vllm-worker-vllm-40).
    let reversed = "2024-02-02 21:44:09.001\nINFO 02-03 03:44:09 worker.py:90] Loading model on the restarted worker\n2024-02-02 21:44:03.976\nError initializing vLLM engine: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a total capacty of 44.35 GiB of which 53.38 MiB is free. Process 3663367 has 44.28 GiB memory in use. Of the allocated memory 37.38 GiB is allocated by PyTorch, and 275.68 MiB is reserved by PyTorch but unallocated.\n2024-02-02 21:43:49.554\nINFO 02-03 03:43:49 model_runner.py:625] Capturing the model for CUDA graphs.\n2024-02-02 21:43:48.339\nINFO 02-03 03:43:48 llm_engine.py:316] # GPU blocks: 7754, # CPU blocks: 2048\n";
    assert_eq!(cause_of(reversed), Cause::Activations);
    // Read top-down, the restart's loading line above the error would be its phase.
    let untimed: String = reversed
        .lines()
        .filter(|l| !l.starts_with("2024"))
        .map(|l| format!("{}\n", l.replace("INFO 02-03 ", "INFO ")))
        .collect();
    assert_eq!(cause_of(&untimed), Cause::Weights, "{untimed}");
}

#[test]
fn a_phase_below_an_error_with_its_traceback_above_is_the_next_run() {
    // comfyui-4880: SDPA's frame above; the next prompt's "Loading model" below.
    let log = "  File \"/x/math.py\", line 9, in attention\n    x = torch.nn.functional.scaled_dot_product_attention(q, k, v)\ntorch.OutOfMemoryError: Allocation on device\n\nINFO - got prompt\nINFO - Loading model flux\n";
    assert_eq!(cause_of(log), Cause::Activations);
    // Without a traceback above, the engine's lines after its message are its own.
    let bare = "torch.OutOfMemoryError: Allocation on device\nINFO - Loading model flux\n";
    assert_eq!(cause_of(bare), Cause::Weights);
}

#[test]
fn a_request_that_fits_only_without_its_segment_is_no_contradiction() {
    // P1: 2 MiB asked with 2.69 MiB free needs a 20 MiB segment (pytorch-gpt-sovits-1516).
    assert_eq!(segment(2 << 20), 20 << 20);
    assert_eq!(segment(1 << 19), 2 << 20);
    assert_eq!(segment(81 << 20), 82 << 20);
    let tight = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 23.68 GiB of which 2.69 MiB is free.";
    let r = read_log(tight.as_bytes(), Engine::Transformers).unwrap();
    assert!(
        !r.verdict.summary.contains("figures say it fits"),
        "{}",
        r.verdict.summary
    );
    let roomy = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 4.00 GiB of which 2.35 GiB is free.";
    let r = read_log(roomy.as_bytes(), Engine::Transformers).unwrap();
    assert!(
        r.verdict.summary.contains("figures say it fits"),
        "{}",
        r.verdict.summary
    );
}

#[test]
fn a_loader_frame_quoted_below_the_error_is_loading() {
    // rocm-flux-webui-25: the user quotes the frame after the message.
    let log = "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 80.00 MiB. GPU 0 has a total capacity of 15.98 GiB of which 84.00 MiB is free. Of the allocated memory 15.44 GiB is allocated by PyTorch, and 267.59 MiB is reserved by PyTorch but unallocated.\n\nIt seems to happen around here:\n  File \"/x/app.py\", line 72, in infer\n    pipe.to(device)\n";
    assert_eq!(cause_of(log), Cause::Weights);
    // A traceback above the error is the one that counts.
    let above = format!("  File \"/x/m.py\", line 9, in forward\n    x = self.mlp(x)\n{log}");
    assert_ne!(cause_of(&above), Cause::Weights);
}

#[test]
fn an_oom_without_figures_is_decided_by_its_innermost_frame() {
    let attention = "  File \"/x/models/llama.py\", line 1320, in native_sdp\n    attn_weights = torch.matmul(query, key.transpose(2, 3))\nRuntimeError: Allocation is out of device memory on current platform.\n";
    assert_eq!(cause_of(attention), Cause::Activations);
    let loading = "  File \"/x/modeling_utils.py\", line 4000, in from_pretrained\n    model = cls(config)\nRuntimeError: Allocation is out of device memory on current platform.\n";
    assert_eq!(cause_of(loading), Cause::Weights);
    // With no frame it stays unknown, never none.
    assert_eq!(
        cause_of("RuntimeError: Allocation is out of device memory on current platform.\n"),
        Cause::Unknown
    );
}

#[test]
fn a_constructor_innermost_is_the_model_being_built() {
    // faster-whisper-buzz-439: CTranslate2's wording under WhisperModel's constructor.
    let log = "  File \"buzz\\transcriber.py\", line 500, in transcribe_faster_whisper\n  File \"faster_whisper\\transcribe.py\", line 101, in __init__\nRuntimeError: CUDA failed with error out of memory\n";
    assert_eq!(cause_of(log), Cause::Weights);
    // The same error under a forward pass is not the constructor's.
    let forward = log.replace("in __init__", "in forward");
    assert_ne!(cause_of(&forward), Cause::Weights);
    // A constructor further out, with the forward pass innermost, does not decide.
    let outer = "  File \"app.py\", line 3, in __init__\n    self.warmup()\n  File \"app.py\", line 9, in warmup\n  File \"m.py\", line 1, in forward\nRuntimeError: CUDA failed with error out of memory\n";
    assert_ne!(cause_of(outer), Cause::Weights);
    // PyTorch before 1.0 is an out-of-memory too.
    assert_ne!(
        cause_of("RuntimeError: cuda runtime error (2) : out of memory at /py/THCStorage.cu:66\n"),
        Cause::None
    );
}

#[test]
fn an_optimizers_constructor_is_its_master_copy_of_the_weights() {
    // ColossalAI-3512: ZeRO's fp32 copy of the flattened fp16 parameters, 25.10 GiB at once.
    let log = "  File \"/x/coati/trainer/strategies/colossalai.py\", line 148, in setup_optimizer\n  File \"/x/colossalai/zero/sharded_optim/low_level_optim.py\", line 175, in __init__\n    fp32_flat_current_rank = fp16_flat_current_rank.float()\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 25.10 GiB (GPU 0;\n";
    assert_eq!(cause_of(log), Cause::Weights);
}

#[test]
fn the_second_session_12_rules_read_their_logs() {
    // infinity-483: rich's log column wraps the message after "GPU 0".
    let wrapped = "ERROR    2024-11-28 13:24:44,248 infinity_emb ERROR: CUDA   batch_handler.py:574\n         out of memory. Tried to allocate 3.88 GiB. GPU 0      \n         has a total capacity of 44.42 GiB of which 920.81      \n         MiB is free. Process 247326 has 5.95 GiB memory in     \n         use. Process 248104 has 37.55 GiB memory in use.       \n         Of the allocated memory 5.44 GiB is allocated by       \n         PyTorch, and 6.72 MiB is reserved by PyTorch but       \n         unallocated.\n";
    assert_eq!(cause_of(wrapped), Cause::OtherProcess);
    // LlamaFactory-2097: bash's job line cut after "Killed".
    assert_eq!(
        cause_of("cli_demo.sh: line 5: 12989 Killed\n"),
        Cause::HostMemory
    );
    // Fooocus-1341: the patcher names the weight it was moving.
    let weight = "ERROR diffusion_model.output_blocks.2.0.out_layers.3.weight MPS backend out of memory (MPS allocated: 8.79 GB, other allocations: 257.96 MB, max allowed: 9.07 GB). Tried to allocate 56.25 MB on private pool.\n";
    assert_eq!(cause_of(weight), Cause::Weights);
    // vllm-45086: the CPU backend's KV cache in host RAM.
    let cpu = "ValueError: Available memory on node 0 (149.11/692.65 GiB) on kv cache allocation is less than requested memory for kv (206.54/207.8 GiB). Reduce CPU memory used by other processes.\n";
    assert_eq!(cause_of(cpu), Cause::KvCache);
    // sglang-4330: the pool under the static fraction, with no weights' figure.
    let sglang = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n";
    assert_eq!(cause_of(sglang), Cause::KvCache);
    // lmstudio-1038: an estimate that is not a number is the estimator's bug.
    let nan = "Error: Model loading was stopped due to insufficient system resources. Under the current settings, this model requires approximately NaN undefined of memory, and continuing to load it would likely overload your system.\n";
    assert_eq!(cause_of(nan), Cause::None);
    // mlx-lm-1332, torch-xpu's UR: limits on buffers and resources are out-of-memories.
    for line in [
        "RuntimeError: [metal::malloc] Resource limit (499000) exceeded\n",
        "RuntimeError: UR backend failed. UR backend returns:40 (UR_RESULT_ERROR_OUT_OF_RESOURCES)\n",
    ] {
        assert_ne!(cause_of(line), Cause::None, "{line}");
    }
    // inseq-240: 15 GiB in one request is no weight tensor, whatever was loaded above.
    let huge = "model = inseq.load_model(model, \"attention\")\nout = model.attribute(LONG_ARTICLE)\nCUDA out of memory. Tried to allocate 15.02 GiB (GPU 0; 47.54 GiB total capacity; 32.75 GiB already allocated; 13.67 GiB free; 32.87 GiB reserved in total by PyTorch)\n";
    assert_eq!(cause_of(huge), Cause::Activations);
    // accelerate-1864: a 12 GiB softmax backward, with 12.19 GiB cached, is the buffer.
    let big = "            result = torch.softmax(self, dim, dtype)\n                grad_self = torch._softmax_backward_data(grad_output, result, dim, self.dtype)\nRuntimeError: CUDA out of memory. Tried to allocate 12.00 GiB (GPU 2; 79.15 GiB total capacity; 56.66 GiB already allocated; 9.54 GiB free; 68.85 GiB reserved in total by PyTorch)\n";
    assert_eq!(cause_of(big), Cause::Activations);
}

#[test]
fn memory_taken_before_the_program_allocated_is_another_process() {
    // tensorflow-8170: 190 MiB of 7.92 GiB free when TensorFlow found the card.
    let found = "I gpu_device.cc:885] Found device 0 with properties: \nname: GeForce GTX 1080\nTotal memory: 7.92GiB\nFree memory: 190.31MiB\nE cuda_driver.cc:1002] failed to allocate 190.31M (199557120 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY\n";
    assert_eq!(cause_of(found), Cause::OtherProcess);
    // Most of the card free at discovery says nothing of others.
    let free = found.replace("Free memory: 190.31MiB", "Free memory: 7.80GiB");
    assert_ne!(cause_of(&free), Cause::OtherProcess);
    // A host's memory figures, with no device found above them, are not the card's.
    let host = found.replace("Found device 0 with properties: ", "System info");
    assert_ne!(cause_of(&host), Cause::OtherProcess);
    // OSPREY3-67: the context itself could not be created.
    let context = "jcuda.CudaException: CUDA_ERROR_OUT_OF_MEMORY\n    at jcuda.driver.JCudaDriver.checkResult(JCudaDriver.java:337)\n    at jcuda.driver.JCudaDriver.cuCtxCreate(JCudaDriver.java:1514)\n";
    assert_eq!(cause_of(context), Cause::OtherProcess);
}

#[test]
fn a_remainder_the_size_of_a_cuda_context_is_not_another_process() {
    // transformers-pytorch-55004: 0.7 GiB of a 2 GiB card left after this process is its
    // own context; from_pretrained(...).to() is the weights moving to the card.
    let small = "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 2.00 GiB total capacity; 1.28 GiB already allocated; 4.55 MiB free; 1.28 GiB reserved in total by PyTorch)\n  model = PegasusForConditionalGeneration.from_pretrained(model_name).to(torch_device)\n";
    assert_eq!(cause_of(small), Cause::Weights);
    // accelerate-idmvton-11: 68 GiB of 79 is another process's.
    let big = "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.14 GiB total capacity; 10.43 GiB already allocated; 5.00 MiB free; 10.80 GiB reserved in total by PyTorch)\n";
    assert_eq!(cause_of(big), Cause::OtherProcess);
}

#[test]
fn moving_a_module_to_the_card_is_the_weights() {
    // diffusers-lorafast-1: Module._apply(convert) → t.to(...) is model.to(device).
    let log = "  File \"torch/nn/modules/module.py\", line 942, in _apply\n    param_applied = fn(param)\n  File \"torch/nn/modules/module.py\", line 1341, in convert\n    return t.to(\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 90.00 MiB. GPU 0 has a total capacity of 23.55 GiB of which 45.75 MiB is free. Including non-PyTorch memory, this process has 23.48 GiB memory in use. Of the allocated memory 22.72 GiB is allocated by PyTorch, and 257.71 MiB is reserved by PyTorch but unallocated.\n";
    assert_eq!(cause_of(log), Cause::Weights);
}

#[test]
fn a_driver_oom_under_a_rust_weight_loader_is_the_weights() {
    // candle-2631: the backtrace below the error goes through safetensors and VarBuilder.
    let log = "Error: DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")\n   0: candle_core::error::Error::bt\n   5: candle_core::safetensors::MmapedSafetensors::load\n   7: candle_nn::var_builder::VarBuilderArgs<B>::get_with_hints_dtype\n";
    assert_eq!(cause_of(log), Cause::Weights);
    // Without the loader frames the bare driver error does not decide.
    assert_eq!(
        cause_of("Error: DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")\n"),
        Cause::Unknown
    );
}

#[test]
fn a_sigkill_kubernetes_did_not_call_oomkilled_is_none_and_says_so() {
    let r = read_log(
        b"    Last State: Terminated\n      Reason: Error\n      Exit Code: 137\n",
        Engine::Transformers,
    )
    .unwrap();
    assert_eq!(r.verdict.cause, Cause::None);
    assert!(r.verdict.evidence[0].text.contains("SIGKILL"));
}

#[test]
fn a_model_buffer_in_host_ram_is_host_memory_a_kv_buffer_the_kv_cache() {
    // ollama-12634: mmap = false, the CPU buffer of the weights does not fit the RAM.
    let weights = "load_tensors: loading model tensors, this can take a while... (mmap = false)\nggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 437944320\nalloc_tensor_range: failed to allocate CPU buffer of size 437944320\nllama_model_load: error loading model: unable to allocate CPU buffer\n";
    assert_eq!(cause_of(weights), Cause::HostMemory);
    // llamacpp-8101: the CPU buffer is a 128 GiB KV cache — the context is the cause.
    let kv = "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 137438953504\nllama_kv_cache_init: failed to allocate buffer for kv cache\n";
    assert_eq!(cause_of(kv), Cause::KvCache);
    // The same failure on a device buffer is the weights.
    let cuda = "load_tensors: loading model tensors\nggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000.00 MiB on device 0: cudaMalloc failed: out of memory\n";
    assert_eq!(cause_of(cuda), Cause::Weights);
}

#[test]
fn ggmls_cuda_pool_is_activations() {
    let log = "CUDA error: out of memory\n  current device: 0, in function alloc at ggml/src/ggml-cuda/ggml-cuda.cu:457\n  cuMemSetAccess(...)\n";
    assert_eq!(cause_of(log), Cause::Activations);
}

#[test]
fn an_oom_in_the_optimizers_step_is_the_weights_it_trains() {
    // deepspeed-llamafactory-7532: Adam creates exp_avg_sq on the first step.
    let log = "  File \"deepspeed/runtime/engine.py\", line 2075, in _take_model_step\n    state[\"exp_avg_sq\"] = torch.zeros_like(\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.39 GiB. GPU 5 has a total capacity of 79.32 GiB of which 2.39 GiB is\n";
    assert_eq!(cause_of(log), Cause::Weights);
    // An MLP frame after the optimizer's (a later forward pass) is that buffer's.
    let later = "    state[\"exp_avg\"] = torch.zeros_like(p)\n    return self.down_proj(self.act_fn(self.gate_proj(x)))\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.32 GiB of which 0.39 GiB is free.\n";
    assert_eq!(cause_of(later), Cause::Activations);
}

#[test]
fn a_driver_oom_with_a_rust_backtrace_reads_its_innermost_frame() {
    // candle-xinfer-357: an MoE activation pool under a layer's forward.
    let act = "ERROR xinfer::runner: Runner prefill error: Err(DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")\n   0: candle_core::error::Error::bt\n   3: attention_rs::workspace::cuda::get_moe_activation_pool\n   6: xinfer::models::layers::moe::FusedMoeNvfp4::forward_with_routing\n";
    assert_eq!(cause_of(act), Cause::Activations);
    let kv = "Error: DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")\n   0: candle_core::error::Error::bt\n   2: candle_nn::kv_cache::KvCache::append\n   4: model::Attention::forward\n";
    assert_eq!(cause_of(kv), Cause::KvCache);
    // mistralrs-834: the panic in the pipeline's in-situ quantization is the weights.
    let isq = "[00:00:08] [###>---] 126/560 (22s) thread '<unnamed>' panicked at mistralrs-core/src/pipeline/isq.rs:265:38:\ncalled `Result::unwrap()` on an `Err` value: Cuda(Cuda(DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")))\n";
    assert_eq!(cause_of(isq), Cause::Weights);
}

#[test]
fn memory_in_cuda_graph_pools_means_a_step_after_start_up() {
    // sglang-4547: nothing but the figures, with 34.50 MiB in private pools.
    let m = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.93 GiB. GPU 0 has a total capacity of 79.14 GiB of which 3.79 GiB is free. Process 13118 has 75.33 GiB memory in use. Of the allocated memory 73.96 GiB is allocated by PyTorch, with 34.50 MiB allocated in private pools (e.g., CUDA Graphs), and 639.99 MiB is reserved by PyTorch but unallocated.\n";
    assert_eq!(cause_of(m), Cause::Activations);
    // A 4.93 GiB buffer is one forward pass's by P4 alone; at 3.93 GiB the pools decide,
    // and without them the same figures do not.
    let small = m.replace("4.93 GiB", "3.93 GiB");
    assert_eq!(cause_of(&small), Cause::Activations);
    let none = small.replace(
        "with 34.50 MiB allocated in private pools (e.g., CUDA Graphs), ",
        "",
    );
    assert_eq!(cause_of(&none), Cause::Unknown);
}

#[test]
fn one_request_of_a_quarter_of_the_card_is_a_forward_pass_buffer() {
    // vllm-7721: 16 GiB of 44.5, the same at every gpu_memory_utilization.
    let m = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 GiB. GPU 0 has a total capacity of 44.53 GiB of which 187.94 MiB is free. Process 3909982 has 44.34 GiB memory in use. Of the allocated memory 43.67 GiB is allocated by PyTorch, and 335.07 MiB is reserved by PyTorch but unallocated.\n";
    assert_eq!(cause_of(m), Cause::Activations);
    // pytorch-mgfn-35: a request the cache could hold is the fragmentation rule's.
    let cached = "RuntimeError: CUDA out of memory. Tried to allocate 1.70 GiB (GPU 0; 6.00 GiB total capacity; 2.94 GiB already allocated; 0 bytes free; 5.24 GiB reserved in total by PyTorch)\n";
    assert_eq!(cause_of(cached), Cause::Fragmentation);
}

#[test]
fn a_later_event_decides_when_the_first_cannot() {
    // tgi-1356: an undecided prefill OOM, then TGI's KV block pool runs dry.
    let log = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.00 MiB. GPU 0 has a total capacty of 79.11 GiB of which 14.62 MiB is free. Process 124797 has 79.08 GiB memory in use. Of the allocated memory 78.11 GiB is allocated by PyTorch, and 131.85 MiB is reserved by PyTorch but unallocated.\nERROR prefill: Server error: Out of available cache blocks: asked 107, only 4 free blocks\n";
    let r = read_log(log.as_bytes(), Engine::Transformers).unwrap();
    assert_eq!(r.verdict.cause, Cause::KvCache);
    assert!(r.verdict.confidence <= 0.7);
    assert!(r.verdict.evidence.iter().any(|e| e.line == Some(1)));
    // A later host-side kill does not decide what filled the GPU.
    let killed = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.00 MiB. GPU 0 has a total capacty of 79.11 GiB of which 14.62 MiB is free. Process 124797 has 79.08 GiB memory in use. Of the allocated memory 78.11 GiB is allocated by PyTorch, and 131.85 MiB is reserved by PyTorch but unallocated.\nKilled\n";
    assert_eq!(cause_of(killed), Cause::Unknown);
}

#[test]
fn host_side_wordings_and_the_batch_finder_are_never_none() {
    for (log, cause) in [
        ("OSError: The paging file is too small for this operation to complete. (os error 1455)\n", Cause::HostMemory),
        ("[ 1.2] [  16502]  1000 16502   136163   131902   131411      491         0  1134592        0             0 cudafe++\n[ 1.2] [  16504]  1000 16504   124175   119910   119407      503         0  1040384        0             0 cudafe++\n[ 1.2] [  16506]  1000 16506   114279   110001   109510      491         0   962560        0             0 cudafe++\n", Cause::HostMemory),
        ("RuntimeError: No executable batch size found, reached zero\n", Cause::Unknown),
    ] {
        assert_eq!(cause_of(log), cause, "{log}");
    }
}

#[test]
fn a_capped_process_is_short_of_its_cap_not_of_the_card() {
    let log = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 62.60 GiB is free. Including non-PyTorch memory, this process has 16.00 GiB memory in use. 16.00 GiB allowed; Of the allocated memory 15.20 GiB is allocated by PyTorch, and 310.00 MiB is reserved by PyTorch but unallocated.\n";
    let r = read_log(log.as_bytes(), Engine::Transformers).unwrap();
    let s = &r.verdict.summary;
    assert!(s.contains("0 B free under the cap"), "{s}");
    assert!(s.contains("capped at 16.0 GiB"), "{s}");
    assert!(r.remedies[0]
        .how
        .contains("set_per_process_memory_fraction"));
}

#[test]
fn cached_blocks_at_the_tail_of_a_filled_cap_are_not_fragmentation() {
    let msg = |alloc: &str, unalloc: &str| {
        format!("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.62 GiB. GPU 0 has a total capacity of 79.19 GiB of which 59.20 GiB is free. Including non-PyTorch memory, this process has 19.91 GiB memory in use. 20.00 GiB allowed; Of the allocated memory {alloc} is allocated by PyTorch, and {unalloc} is reserved by PyTorch but unallocated.\n")
    };
    assert_ne!(
        cause_of(&msg("16.63 GiB", "2.78 GiB")),
        Cause::Fragmentation
    );
    // Live tensors well inside the cap, the cache in pieces: fragmentation.
    assert_eq!(
        cause_of(&msg("12.00 GiB", "7.40 GiB")),
        Cause::Fragmentation
    );
}

#[test]
fn bands_cover_every_confidence() {
    for c in [0.0, 0.3, 0.59, 0.6, 0.79, 0.8, 1.0] {
        assert!(!confidence_band(c).band.is_empty());
    }
}

#[test]
fn a_dgx_spark_start_up_check_names_the_page_cache() {
    // vllm-project/vllm#48140's shape: the same check on a GB10, whose CUDA free is MemFree.
    let spark = b"ValueError: Free memory on device cuda:0 (52.31/121.69 GiB) on startup is less than desired GPU memory utilization (0.85, 103.44 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.\n";
    let r = read_log(spark, Engine::Vllm).unwrap();
    assert_eq!(r.verdict.cause, Cause::OtherProcess);
    assert!(
        r.verdict.summary.contains("page cache"),
        "{}",
        r.verdict.summary
    );
    assert!(
        r.remedies[0].how.contains("drop_caches"),
        "{}",
        r.remedies[0].how
    );
    // The same check on a discrete card keeps the other-process reading.
    let card = b"ValueError: Free memory on device cuda:0 (1.53/22.05 GiB) on startup is less than desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.\n";
    let r = read_log(card, Engine::Vllm).unwrap();
    assert_eq!(r.verdict.cause, Cause::OtherProcess);
    assert!(!r.verdict.summary.contains("page cache"));
}

#[test]
fn an_oom_in_the_vision_encoder_or_the_draft_model_says_so() {
    // transformers' Qwen2.5-VL: the traceback's frames run through get_image_features and the
    // vision attention's float32 rotary.
    let vision = b"Traceback (most recent call last):
  File \"/app/run.py\", line 40, in <module>
    out = model.generate(**inputs, max_new_tokens=128)
  File \"/usr/lib/python3/site-packages/transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py\", line 1229, in get_image_features
    image_embeds = self.visual(pixel_values, grid_thw=image_grid_thw)
  File \"/usr/lib/python3/site-packages/transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py\", line 219, in apply_rotary_pos_emb_vision
    q, k = q.float(), k.float()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.17 GiB. GPU 0 has a total capacity of 23.55 GiB of which 912.00 MiB is free. Including non-PyTorch memory, this process has 22.64 GiB memory in use. Of the allocated memory 21.80 GiB is allocated by PyTorch, and 420.15 MiB is reserved by PyTorch but unallocated.
";
    let r = read_log(vision, Engine::Transformers).unwrap();
    assert!(
        r.verdict
            .evidence
            .iter()
            .any(|e| e.text.starts_with("in the vision encoder")),
        "{:?}",
        r.verdict.evidence
    );
    // vLLM's EAGLE drafter loading beside the target.
    let draft = b"ERROR 03-02 engine.py:412] EngineCore failed to start.
  File \"/usr/local/lib/python3.12/site-packages/vllm/v1/spec_decode/eagle.py\", line 601, in load_model
    self.model = get_model(vllm_config=self.vllm_config, model_config=draft_model_config)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.16 GiB memory in use. Of the allocated memory 77.20 GiB is allocated by PyTorch, and 312.00 MiB is reserved by PyTorch but unallocated.
";
    let r = read_log(draft, Engine::Vllm).unwrap();
    assert!(
        r.verdict
            .evidence
            .iter()
            .any(|e| e.text.contains("draft model")),
        "{:?}",
        r.verdict.evidence
    );
    // A text-only traceback names neither.
    let plain = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.17 GiB. GPU 0 has a total capacity of 23.55 GiB of which 912.00 MiB is free. Including non-PyTorch memory, this process has 22.64 GiB memory in use. Of the allocated memory 21.80 GiB is allocated by PyTorch, and 420.15 MiB is reserved by PyTorch but unallocated.\n";
    let r = read_log(plain, Engine::Transformers).unwrap();
    assert!(!r
        .verdict
        .evidence
        .iter()
        .any(|e| e.text.contains("vision encoder") || e.text.contains("draft model")));
}

#[test]
fn a_cuda_driver_message_in_a_tensorflow_log_is_tensorflows() {
    // tensorflow-cortex-853 (tests/fixtures/logs/real-2026-12g): the CUDA driver's message is
    // read first; the log's lines are TensorFlow's, and so are its record and its remedies.
    let log = "2020-03-13 01:30:28.309411: I tensorflow/stream_executor/cuda/cuda_driver.cc:801] \
               failed to allocate 4.00G (4294967296 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: \
               out of memory\n";
    let r = read_log(log.as_bytes(), Engine::Transformers).unwrap();
    let rec = r.verdict.record.as_ref().expect("a record");
    assert_eq!(rec.engine.as_deref(), Some("tensorflow"));
    assert!(
        r.remedies
            .iter()
            .all(|m| !m.how.contains("PYTORCH_CUDA_ALLOC_CONF")),
        "{:?}",
        r.remedies
    );
    assert!(r
        .remedies
        .iter()
        .any(|m| m.how.contains("TF_FORCE_GPU_ALLOW_GROWTH")));
}

#[test]
fn a_stated_request_of_4_gib_outside_loading_is_one_forward_buffer() {
    // jax-alphafold-85: XLA names only the size it asked for, in model_runner.predict.
    let predict = "  File \"/content/alphafold/model/model.py\", line 171, in predict\n    result = self.apply(self.params, jax.random.PRNGKey(random_seed), feat)\nRuntimeError: Resource exhausted: Out of memory while trying to allocate 13816236064 bytes.\n";
    assert_eq!(cause_of(predict), Cause::Activations);
    // Below 4 GiB the size says nothing: it stays unknown.
    let small = "RuntimeError: Resource exhausted: Out of memory while trying to allocate 1073741824 bytes.\n";
    assert_eq!(cause_of(small), Cause::Unknown);
    // Under a loading phase a loader may allocate the weights in one piece: the size decides
    // nothing there.
    let loading = "Loading checkpoint shards:  50%\nRuntimeError: Resource exhausted: Out of memory while trying to allocate 13816236064 bytes.\n";
    assert_ne!(cause_of(loading), Cause::Activations);
}
