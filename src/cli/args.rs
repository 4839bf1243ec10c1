//! Flags as the user types them (clap). `cli::run` turns them into validated requests.

use clap::{Args, Parser, Subcommand, ValueEnum};
use clap_complete::Shell;

const PLAN_EXAMPLES: &str = "\
Examples:
  llm-oom plan --model mistralai/Mistral-7B-Instruct-v0.2 --vram 24GiB --prompt-tokens 8000 --max-new-tokens 1000 --batch 4
  llm-oom plan --model model.Q4_K_M.gguf --engine llama.cpp --vram 8GiB
  llm-oom plan --model meta-llama/Llama-3.3-70B-Instruct --dtype nf4 --vram 2x24GiB --markdown

More: docs/plan.md; the models it knows offline: llm-oom plan --list-presets";

const EXPLAIN_EXAMPLES: &str = "\
Examples:
  llm-oom explain oom.log
  pbpaste | llm-oom explain -
  llm-oom explain oom.log --model mistralai/Mistral-7B-Instruct-v0.2 --prompt-tokens 12000 --batch 4

More: docs/explain.md";

const WATCH_EXAMPLES: &str = "\
Examples:
  llm-oom watch -- python app.py
  llm-oom watch --markdown -o report.md --svg mem.svg -- python serve.py --port 8000
  llm-oom watch --fail-on-oom --json -o oom.json -- pytest tests/

The program's input, output and exit code pass through; the report goes to standard error, or to -o.
More: docs/watch.md";

const DIAGNOSE_EXAMPLES: &str = "\
Examples:
  llm-oom diagnose
  llm-oom diagnose --model mistralai/Mistral-7B-Instruct-v0.2 --prompt-tokens 8000 --vram-limit 24GiB
  llm-oom diagnose --model ./my-model --engine candle --device cuda --find-limits

More: docs/diagnose.md; the engines: docs/engines.md";

const ENV_EXAMPLES: &str = "\
Examples:
  llm-oom env
  llm-oom env --markdown
  llm-oom env --python .venv/bin/python";

/// `--version`: the version and what this binary can run.
#[cfg(all(feature = "cuda", not(feature = "nccl")))]
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (features: cuda; diagnose --engine candle runs on the GPU)"
);
#[cfg(feature = "nccl")]
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (features: cuda, nccl; diagnose --engine candle runs on the GPU, tensor-parallel over several)"
);
#[cfg(not(feature = "cuda"))]
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (features: no cuda; diagnose --engine candle runs on the CPU, --engine transformers uses your torch)"
);

#[derive(Debug, Parser)]
#[command(
    name = "llm-oom",
    version,
    long_version = LONG_VERSION,
    about = "Find out why a local LLM runs out of GPU memory, and what to change.",
    long_about = "Find out why a local LLM runs out of GPU memory, and what to change.\n\n\
        Weights, KV cache, activations, concurrency, fragmentation or another process: llm-oom names \
        the cause with numbers and prices every remedy in bytes.\n\n\
        Commands, in the order you usually need them: plan (no GPU needed), explain (paste a log), \
        diagnose (on the GPU, in your engine), watch (your own program).\n\n\
        Exit codes: 0 fits / no OOM, 1 would OOM / OOM found, 2 bad input or usage, 3 llm-oom or its \
        probe failed; watch passes the program's own exit code through."
)]
pub struct Cli {
    /// More logging on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Colour in the terminal output.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, global = true)]
    pub color: ColorChoice,
    /// Print the report as JSON (the stable contract for CI).
    #[arg(long, global = true, conflicts_with = "markdown")]
    pub json: bool,
    /// Print the report as Markdown, for pasting into an issue.
    #[arg(long, global = true)]
    pub markdown: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TorchChoice {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SnapshotChoice {
    Oom,
    Always,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FreshRunArg {
    Edge,
    Always,
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Predict from config.json alone, with no GPU, whether a workload fits, and the largest one that does.
    #[command(after_help = PLAN_EXAMPLES)]
    Plan(Box<PlanArgs>),
    /// Read a pasted OOM log (PyTorch, vLLM, llama.cpp, candle, TGI, dmesg…) and say what it means.
    #[command(after_help = EXPLAIN_EXAMPLES, mut_arg("model", |a| a.help(model_help(
        "none: the log alone is read"
    ))))]
    Explain(ExplainArgs),
    /// Measure, stage by stage, where memory goes on this machine's GPU in your engine, and name the cause.
    #[command(after_help = DIAGNOSE_EXAMPLES, mut_arg("model", |a| a.help(model_help(
        &format!("{} (embedded, runs in seconds on a CPU)", llm_oom::model::presets::DIAGNOSE_DEFAULT_MODEL)
    ))))]
    Diagnose(DiagnoseArgs),
    /// Run your own program, watch the memory of its process tree, and explain how it ended.
    #[command(after_help = WATCH_EXAMPLES)]
    Watch(WatchArgs),
    /// Run a model with the runtime the probe uses and print timings and memory (for developers).
    #[command(hide = true)]
    Run(RunArgs),
    #[command(hide = true, name = "__probe")]
    Probe(ProbeArgs),
    /// watch's guardian (internal): kills the watched tree if watch dies before it ends.
    #[command(hide = true, name = "__watch-guard")]
    WatchGuard,
    /// The probe's helper (internal): loads candle's named kernel modules on a GPU so the driver
    /// compiles and keeps them, side by side with the other helpers.
    #[command(hide = true, name = "__compile-kernels")]
    CompileKernels {
        #[arg(long)]
        gpu: u32,
        modules: Vec<String>,
    },
    /// What matters for GPU memory on this machine (GPUs, driver, host RAM, this build, the Python
    /// packages, the allocator's settings), to paste beside a report.
    #[command(after_help = ENV_EXAMPLES)]
    Env {
        /// The Python whose packages are listed [default: $LLM_OOM_PYTHON, else python3]
        #[arg(long)]
        python: Option<std::path::PathBuf>,
    },
    /// Print the man page (roff), for packagers.
    #[command(hide = true)]
    Man,
    /// Print a shell completion script.
    Completions {
        /// bash, zsh, fish, elvish or powershell
        shell: Shell,
    },
}

/// `--model`'s help with the default of the command it is in.
fn model_help(default: &str) -> String {
    format!(
        "A Hugging Face id, a local checkpoint folder or config.json, a .gguf file, or a preset (see `plan --list-presets`) [default: {default}]"
    )
}

/// The workload flags shared by plan, diagnose and explain.
#[derive(Debug, Clone, Args)]
pub struct WorkloadArgs {
    /// A Hugging Face id, a local checkpoint folder or config.json, a .gguf file, or a preset
    /// (see `plan --list-presets`) [default: Qwen/Qwen2.5-0.5B-Instruct]
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Weight dtype: f32, f16, bf16, int8, nf4, fp4, fp8, mxfp4, nvfp4, q8_0, q6_k, q5_k_m, q4_k_m,
    /// q4_0 [default: the checkpoint's]
    #[arg(long)]
    pub dtype: Option<String>,
    /// KV-cache dtype: f32, f16, bf16, fp8, q8_0, q4_0 [default: the compute dtype]
    #[arg(long)]
    pub kv_dtype: Option<String>,
    /// Prompt length in tokens [default: 2048; diagnose without --model on the CPU: 512]
    #[arg(
        long,
        short = 'p',
        allow_negative_numbers = true,
        conflicts_with = "prompt_file"
    )]
    pub prompt_tokens: Option<i64>,
    /// Your real prompt: its length is counted with the model's tokenizer.json.
    #[arg(long)]
    pub prompt_file: Option<std::path::PathBuf>,
    /// Tokens to generate per sequence.
    #[arg(
        long,
        short = 'n',
        default_value = "256",
        allow_negative_numbers = true
    )]
    pub max_new_tokens: i64,
    /// Sequences at once: batch size, concurrent requests or llama-server's slots (`-np`)
    /// [default: 1; diagnose without --model: 2]
    #[arg(
        long,
        short = 'b',
        visible_aliases = ["concurrency", "parallel"],
        allow_negative_numbers = true
    )]
    pub batch: Option<i64>,
    /// The card to plan for (24GiB, 80GB, rtx4090…); plan takes several GPUs too (24GiB,12GiB,
    /// 2x24GiB, 2xrtx4090) and places the model like device_map="auto" [default: the detected
    /// GPU's free memory]
    #[arg(long, allow_hyphen_values = true)]
    pub vram: Option<String>,
    /// Which engine's memory behaviour: transformers, transformers-eager, vllm, sglang, llama.cpp,
    /// candle
    /// [default: transformers; llama.cpp for a .gguf file]
    #[arg(long)]
    pub engine: Option<String>,
    /// Which GPU to read when --vram is not given.
    #[arg(long, default_value_t = 0)]
    pub gpu: u32,
    /// llama.cpp: the context of all slots together (`-c`); 0 is llama-server's own choice, the
    /// model's trained context lowered by --fit [default: (prompt + new) × batch]
    #[arg(
        long,
        short = 'c',
        help_heading = "llama.cpp",
        allow_negative_numbers = true
    )]
    pub ctx_size: Option<i64>,
    /// llama.cpp: tokens per forward pass (`-ub`) [default: 512]
    #[arg(long, help_heading = "llama.cpp", allow_negative_numbers = true)]
    pub ubatch_size: Option<i64>,
    /// llama.cpp: the logical batch (`-b`), which caps -ub and the logits [default: 2048]
    #[arg(long, help_heading = "llama.cpp", allow_negative_numbers = true)]
    pub batch_size: Option<i64>,
    /// llama.cpp: flash attention, on, off or auto (`-fa`) [default: auto, on for CUDA]
    #[arg(long, help_heading = "llama.cpp", value_parser = ["on", "off", "auto"])]
    pub flash_attn: Option<String>,
    /// ollama: the context of one request (`num_ctx`, OLLAMA_CONTEXT_LENGTH) [default: ollama's,
    /// by the card: 4,096 under 23 GiB, 32,768 under 47 GiB, else 262,144]
    #[arg(long, help_heading = "ollama", allow_negative_numbers = true)]
    pub num_ctx: Option<i64>,
    /// ollama: the layers it offloads to the GPU (`num_gpu`; passed as llama-server's -ngl, 0 is
    /// the CPU alone) [default: none passed, llama-server keeps on the GPU the layers that fit]
    #[arg(long, help_heading = "ollama", allow_negative_numbers = true)]
    pub num_gpu: Option<i64>,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// List the embedded model presets and exit.
    #[arg(long)]
    pub list_presets: bool,
    /// transformers: replay its allocation sequence through a model of PyTorch's caching
    /// allocator instead of the calibrated profile (the llama family in 16 bits; seconds, not
    /// milliseconds). The card is then the memory free for the process.
    #[arg(long)]
    pub exact: bool,
    /// Size parameters and cache with this Python's transformers: the model is built from its
    /// config.json on the meta device (no weights, seconds), so an architecture llm-oom has no
    /// family for is planned too, and a family's counts are checked against it. Only when given
    /// ($LLM_OOM_PYTHON alone does not turn it on); without it plan reads config.json itself.
    #[arg(long)]
    pub python: Option<std::path::PathBuf>,
    /// Host RAM offered for offloaded layers (64GiB…) [default: this machine's MemAvailable]
    #[arg(long, allow_hyphen_values = true)]
    pub host_ram: Option<String>,
    /// vLLM and SGLang: tensor-parallel ranks (GPUs per model replica stage; SGLang on one node)
    /// [default: 1; with several GPUs in --vram, all of them; with --nodes, --gpus-per-node]
    #[arg(
        long = "tensor-parallel-size",
        visible_alias = "tp",
        allow_negative_numbers = true
    )]
    pub tensor_parallel_size: Option<i64>,
    /// vLLM: pipeline stages [default: 1; with --nodes, one per node]
    #[arg(
        long = "pipeline-parallel-size",
        visible_alias = "pp",
        allow_negative_numbers = true
    )]
    pub pipeline_parallel_size: Option<i64>,
    /// vLLM across nodes (Ray): how many nodes, each of --gpus-per-node GPUs of --vram
    #[arg(long, requires = "gpus_per_node", allow_negative_numbers = true)]
    pub nodes: Option<i64>,
    /// vLLM across nodes: GPUs in each node
    #[arg(long, requires = "nodes", allow_negative_numbers = true)]
    pub gpus_per_node: Option<i64>,
    /// vLLM: share of the card vLLM may take, above 0 and at most 1 [default: 0.9]
    #[arg(long, allow_negative_numbers = true)]
    pub gpu_memory_utilization: Option<f64>,
    /// vLLM: the longest request (prompt + new tokens) it starts for [default: the model's context]
    #[arg(long, allow_negative_numbers = true)]
    pub max_model_len: Option<i64>,
    /// vLLM: sequences scheduled at once [default: 256; 1024 on cards of 70 GiB or more]
    #[arg(long, allow_negative_numbers = true)]
    pub max_num_seqs: Option<i64>,
    /// vLLM: tokens in one forward pass; sizes its profiling run [default: 2048; 8192 on cards
    /// of 70 GiB or more (vllm serve)]
    #[arg(long, allow_negative_numbers = true)]
    pub max_num_batched_tokens: Option<i64>,
    /// vLLM: the KV cache's dtype, auto (the model's), fp8, fp8_e4m3 or fp8_e5m2 (one byte an
    /// element) [default: auto]
    #[arg(long)]
    pub kv_cache_dtype: Option<String>,
    /// vLLM: run eager, no CUDA graphs captured (their memory goes to the KV cache; decoding is
    /// slower)
    #[arg(long)]
    pub enforce_eager: bool,
    /// vLLM: GiB of the weights kept in CPU memory, per GPU (read over PCIe at every step)
    /// [default: 0]
    #[arg(long, allow_negative_numbers = true)]
    pub cpu_offload_gb: Option<f64>,
    /// vLLM: which engine's start-up, v1 or v0 (vLLM 0.6.x: chunked prefill only above 32,768
    /// tokens, else a profiling run of the whole max_model_len) [default: v1]
    #[arg(long)]
    pub vllm_version: Option<String>,
    /// vLLM V0: chunked prefill on (a profiling run of 512 tokens, or --max-num-batched-tokens)
    /// [default: on only above a max_model_len of 32,768]
    #[arg(long, conflicts_with = "no_enable_chunked_prefill")]
    pub enable_chunked_prefill: bool,
    /// vLLM V0: chunked prefill off (V0's --enable-chunked-prefill=False): the profiling run
    /// prefills max_num_batched_tokens, at least max_model_len
    #[arg(long)]
    pub no_enable_chunked_prefill: bool,
    /// SGLang: share of the free memory for the weights and the token pool, above 0 and below 1
    /// [default: SGLang's by card, 0.847 on a 24 GB card]
    #[arg(long, allow_negative_numbers = true)]
    pub mem_fraction_static: Option<f64>,
    /// SGLang: the model's context length it serves [default: the model's context]
    #[arg(long, allow_negative_numbers = true)]
    pub context_length: Option<i64>,
    /// SGLang: requests run at once [default: from the pool, 2,048 to 4,096]
    #[arg(long, allow_negative_numbers = true)]
    pub max_running_requests: Option<i64>,
    /// SGLang: tokens of one prefill chunk; sets its default --mem-fraction-static [default: by
    /// card, 2,048 under 35 GiB]
    #[arg(long, allow_negative_numbers = true)]
    pub chunked_prefill_size: Option<i64>,
    /// Images in each request's prompt (vision-language models, transformers, vLLM and
    /// llama.cpp): their tokens join the prompt and the vision encoder's memory is priced
    #[arg(long, allow_negative_numbers = true)]
    pub images: Option<i64>,
    /// vLLM: the most images one prompt may carry (vLLM's --limit-mm-per-prompt '{"image": N}');
    /// its start-up profiles the vision encoder for them, with or without --images; 0 turns that
    /// off [default: 999]
    #[arg(long, allow_negative_numbers = true)]
    pub limit_mm_per_prompt: Option<i64>,
    /// The images' size, width x height in pixels (1024x768) [default: the model's native size;
    /// Qwen-VL: the largest its processor keeps]
    #[arg(long, requires = "images")]
    pub image_size: Option<String>,
    /// llama.cpp: the multimodal projector GGUF (`--mmproj`, `-mm`): its vision tower's weights
    /// and the CLIP compute buffer its warm-up reserves are counted, with or without --images,
    /// and --images is priced by its projector type (a GGUF --model has no vision tower of its own)
    #[arg(long, help_heading = "llama.cpp")]
    pub mmproj: Option<std::path::PathBuf>,
    /// LoRA adapters of this rank beside the model (vLLM: --max-lora-rank); training's optimizer
    /// state is not priced
    #[arg(long, allow_negative_numbers = true)]
    pub lora_rank: Option<i64>,
    /// The Linears the adapters target, of q,k,v,o,gate,up,down [default: q,v, PEFT's default
    /// for Llama, Mistral and Qwen2; vLLM preallocates all of them whatever is given]
    #[arg(long, requires = "lora_rank")]
    pub lora_targets: Option<String>,
    /// Adapters held at once: vLLM's preallocated slots (--max-loras), adapters loaded side by
    /// side elsewhere [default: 1]
    #[arg(long, requires = "lora_rank", allow_negative_numbers = true)]
    pub max_loras: Option<i64>,
    /// llama-server: fit unset arguments to the card (`--fit`, `-fit`): lower an automatic
    /// context (`-c 0`) and move layers to the CPU until --fit-target is left free [default: on
    /// in llama-server; plan models it when this or `-c 0` is given]
    #[arg(long, help_heading = "llama.cpp", value_parser = ["on", "off"])]
    pub fit: Option<String>,
    /// llama-server: MiB --fit leaves free on the card (`--fit-target`, `-fitt`) [default: 1024]
    #[arg(long, help_heading = "llama.cpp", allow_negative_numbers = true)]
    pub fit_target: Option<i64>,
    /// llama-server: the smallest context --fit sets (`--fit-ctx`, `-fitc`) [default: 4096]
    #[arg(long, help_heading = "llama.cpp", allow_negative_numbers = true)]
    pub fit_ctx: Option<i64>,
    /// llama-server: one cache shared by every slot (`--kv-unified`, `-kvu`) [default: on when
    /// -np is not given (4 slots), else off]
    #[arg(long, help_heading = "llama.cpp")]
    pub kv_unified: bool,
    /// A draft model for speculative decoding, named as --model is (a Hugging Face id, a local
    /// folder or config.json, a .gguf file, a preset)
    #[arg(long)]
    pub draft_model: Option<String>,
    /// Tokens the draft proposes per step [default: transformers 20 (num_assistant_tokens),
    /// vLLM 5, llama.cpp 16 (--draft-max); with --mtp, the model's MTP layers (vLLM's n_predict)]
    #[arg(long, allow_negative_numbers = true)]
    pub num_speculative_tokens: Option<i64>,
    /// Speculative decoding with the model's own multi-token-prediction layers as the draft
    /// (vLLM --speculative-config '{"method": "mtp"}', SGLang --speculative-algorithm NEXTN):
    /// their weights and KV cache priced beside the model's
    #[arg(long, conflicts_with = "draft_model")]
    pub mtp: bool,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The log file, or - for standard input.
    #[arg(default_value = "-")]
    pub input: String,
    /// With --model (and the workload flags), remedies carry plan's exact bytes.
    #[command(flatten)]
    pub workload: WorkloadArgs,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Sampling interval (20ms, 0.1s…).
    #[arg(long, default_value = "20ms")]
    pub interval: String,
    /// Exit with 1 when an out-of-memory error was seen, even if the program survived it.
    #[arg(long)]
    pub fail_on_oom: bool,
    /// Which GPU to read.
    #[arg(long, default_value_t = 0)]
    pub gpu: u32,
    /// Whose knobs the remedies name: transformers, transformers-eager, vllm, sglang, llama.cpp
    #[arg(long, default_value = "transformers")]
    pub engine: String,
    /// Write the report here instead of standard error (the program's own output keeps stdout).
    #[arg(long, short = 'o')]
    pub output: Option<std::path::PathBuf>,
    /// Also draw the memory timeline, phases and OOM point as an SVG file.
    #[arg(long)]
    pub svg: Option<std::path::PathBuf>,
    /// PyTorch's own record for a Python program: a sitecustomize that turns on the allocator's
    /// history once CUDA starts and dumps its snapshot at the first OOM (+25–40 % decode time
    /// while on, docs/watch-torch.md). `off` leaves the program untouched.
    #[arg(long, value_enum, default_value_t = TorchChoice::On)]
    pub torch: TorchChoice,
    /// When the hook writes the snapshot: at the first OOM, or also at exit.
    #[arg(long, value_enum, default_value_t = SnapshotChoice::Oom)]
    pub snapshot: SnapshotChoice,
    /// The program and its arguments, after --.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[arg(long, short = 'm', default_value = llm_oom::model::presets::DEFAULT_MODEL)]
    pub model: String,
    /// cpu, cuda, cuda:N
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// f32, f16 or bf16
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    #[arg(long, default_value_t = 512)]
    pub prompt_tokens: usize,
    #[arg(long, default_value_t = 32)]
    pub max_new_tokens: usize,
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Query slice of chunked attention; 0 = eager (full score matrix).
    #[arg(long, default_value_t = 512)]
    pub attention_chunk: usize,
    /// Prefill the prompt in slices of this many tokens.
    #[arg(long)]
    pub prefill_chunk: Option<usize>,
    /// Grow the KV cache by concatenation instead of preallocating it.
    #[arg(long)]
    pub concat_cache: bool,
    /// Random weights of the model's shapes even when its safetensors are there.
    #[arg(long)]
    pub random_weights: bool,
    /// Quantize the linear layers at load: q8_0 or q4k (candle's QMatMul).
    #[arg(long)]
    pub quantize: Option<String>,
}

#[derive(Debug, Args)]
pub struct DiagnoseArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// cpu, cuda, cuda:N, or several GPUs (cuda:0,cuda:1: transformers' device_map="auto" over
    /// them, measured per GPU) [default: GPU 0 when NVML sees one (with --engine candle: and this
    /// binary was built with CUDA), else cpu]
    #[arg(long)]
    pub device: Option<String>,
    /// --engine candle: tensor-parallel ranks, one probe process per GPU of --device (all of them
    /// by default with several), all-reducing over NCCL (the `nccl` build); with --device cpu, N
    /// ranks on the CPU over the loopback
    #[arg(
        long = "tensor-parallel-size",
        visible_alias = "tp",
        allow_negative_numbers = true
    )]
    pub tensor_parallel_size: Option<i64>,
    /// Emulate a smaller card (24GiB…): a ballast allocation on CUDA, the allocator's limit on
    /// the CPU. `--vram` means the same here.
    #[arg(long, allow_hyphen_values = true)]
    pub vram_limit: Option<String>,
    /// Also find the largest prompt (batch 1) and batch that really run, by trial.
    #[arg(long)]
    pub find_limits: bool,
    /// Re-run the failing workload with the top remedy the probe can apply, and say if it fits.
    #[arg(long)]
    pub verify: bool,
    /// Probe a prompt + new tokens longer than the model's trained context (refused otherwise:
    /// past it the model's quality, not its memory, is the question).
    #[arg(long)]
    pub allow_past_context: bool,
    /// Random weights of the model's shapes even when its safetensors are there (memory is the same).
    #[arg(long)]
    pub random_weights: bool,
    /// Quantize the linear layers at load, q8_0 or q4k, to run the quantization remedy rather
    /// than predict it.
    #[arg(long)]
    pub quantize: Option<String>,
    /// Give up on a stage that takes longer than this many seconds; when given, it also bounds
    /// the probe's start (imports, CUDA context) to this or 30 s, whichever is longer (otherwise
    /// the start gets at least 180 s) [default: 300]
    #[arg(long)]
    pub stage_timeout: Option<u64>,
    /// transformers: when the whole workload runs once more in a fresh process, as your program
    /// runs it, to decide the verdict: at the edge of the card (default), always, or never.
    #[arg(long, value_enum, default_value_t = FreshRunArg::Edge)]
    pub fresh_run: FreshRunArg,
    /// The Python whose torch and transformers run the stages for `--engine transformers`
    /// (default: $LLM_OOM_PYTHON, else python3). Without them the answer is predicted.
    #[arg(long, value_name = "PATH")]
    pub python: Option<std::path::PathBuf>,
    /// Also draw memory by stage as an SVG file.
    #[arg(long)]
    pub svg: Option<std::path::PathBuf>,
}

/// The probe's child process (internal): runs stages for `diagnose` and answers in JSON lines.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    #[arg(long)]
    pub setup: String,
}
