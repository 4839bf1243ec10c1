//! The binary's side: flags → validated requests → library → rendered report → exit code.

pub mod args;
mod diagnose;

use std::io::{IsTerminal, Write};

use anyhow::Result;
use clap::CommandFactory;

use args::{Cli, ColorChoice, Command, PlanArgs, WorkloadArgs};
use llm_oom::commands::explain::{explain, ExplainRequest};
use llm_oom::commands::plan::{plan, PlanRequest};
use llm_oom::commands::watch::{watch, WatchRequest};
use llm_oom::error::InputError;
use llm_oom::estimate::Engine;
use llm_oom::model::presets::PRESETS;
use llm_oom::report::{self, render, Format, Render};
use llm_oom::ExitStatus;

/// llama.cpp's short flags of several letters (`-np 4`, `-ub 1024`, `-fa on`, `-fit off`,
/// `-fitt 512`, `-fitc 8192`, `-kvu`, `-mm FILE`), so that part of a llama-server command line can be pasted:
/// each is given its long name before clap reads it (clap's short flags are one letter). What
/// follows `--` (the program `watch` runs) is left as it is.
pub fn llama_short_flags(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    const LONG: [(&str, &str); 8] = [
        ("-np", "--parallel"),
        ("-mm", "--mmproj"),
        ("-ub", "--ubatch-size"),
        ("-fa", "--flash-attn"),
        ("-fit", "--fit"),
        ("-fitt", "--fit-target"),
        ("-fitc", "--fit-ctx"),
        ("-kvu", "--kv-unified"),
    ];
    let mut passed = false;
    args.into_iter()
        .map(|a| {
            if passed {
                return a;
            }
            if a == "--" {
                passed = true;
                return a;
            }
            match LONG.iter().find(|(short, _)| a == *short) {
                Some((_, long)) => std::ffi::OsString::from(long),
                None => a,
            }
        })
        .collect()
}

pub fn run(cli: Cli) -> Result<ExitStatus> {
    let format = format(&cli);
    match &cli.command {
        Command::Plan(args) => {
            if args.list_presets {
                print(&list_presets(format)?)?;
                return Ok(ExitStatus::Fits);
            }
            let mut req = plan_request(&args.workload)?;
            req.host_ram = args
                .host_ram
                .as_deref()
                .map(|s| {
                    llm_oom::units::parse_size("--host-ram", s)
                        .and_then(|b| llm_oom::limits::flag("--host-ram", b))
                })
                .transpose()?;
            let count =
                |what: &'static str, v: Option<i64>| v.map(|v| positive(what, v)).transpose();
            req.parallel = llm_oom::request::ParallelRequest {
                tensor: count("--tensor-parallel-size", args.tensor_parallel_size)?,
                pipeline: count("--pipeline-parallel-size", args.pipeline_parallel_size)?,
                nodes: count("--nodes", args.nodes)?,
                gpus_per_node: count("--gpus-per-node", args.gpus_per_node)?,
            };
            req.exact = args.exact;
            if let Some(python) = &args.python {
                llm_oom::probe::launcher::check_python(python)?;
                req.python = Some(python.clone());
            }
            req.vllm = llm_oom::estimate::VllmArgs {
                gpu_memory_utilization: args.gpu_memory_utilization,
                max_model_len: count("--max-model-len", args.max_model_len)?,
                max_num_seqs: count("--max-num-seqs", args.max_num_seqs)?,
                max_num_batched_tokens: count(
                    "--max-num-batched-tokens",
                    args.max_num_batched_tokens,
                )?,
                kv_cache_dtype: args.kv_cache_dtype.as_deref().map(str::parse).transpose()?,
                enforce_eager: args.enforce_eager,
                cpu_offload_gb: args.cpu_offload_gb,
                version: args.vllm_version.as_deref().map(str::parse).transpose()?,
                enable_chunked_prefill: match (
                    args.enable_chunked_prefill,
                    args.no_enable_chunked_prefill,
                ) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                },
            };
            req.sglang = llm_oom::estimate::SglangArgs {
                mem_fraction_static: args.mem_fraction_static,
                context_length: count("--context-length", args.context_length)?,
                max_running_requests: count("--max-running-requests", args.max_running_requests)?,
                chunked_prefill_size: count("--chunked-prefill-size", args.chunked_prefill_size)?,
            };
            req.deployment = deployment(args)?;
            req.llama_server = llama_server(args, req.llama_server)?;
            let r = plan(&req)?;
            print(&report_text(&r, format)?)?;
            Ok(ExitStatus::of(&r.verdict))
        }
        Command::Diagnose(args) => diagnose::run(args, format),
        Command::Probe(args) => {
            let setup: llm_oom::probe::Setup = serde_json::from_str(&args.setup)
                .map_err(|e| InputError::Usage(format!("__probe --setup: {e}")))?;
            let stdin = std::io::stdin().lock();
            llm_oom::probe::child::serve(&setup, stdin, std::io::stdout().lock())?;
            Ok(ExitStatus::Fits)
        }
        Command::Explain(args) => {
            // PyTorch's allocator snapshot (a pickle) is a record, not a log.
            let path = std::path::Path::new(&args.input);
            if args.input != "-" && llm_oom::commands::snapshot::is_snapshot(path) {
                let plan = match &args.workload.model {
                    Some(_) => Some(plan_request(&args.workload)?),
                    None => None,
                };
                let r = llm_oom::commands::snapshot::explain_snapshot(
                    &llm_oom::commands::snapshot::SnapshotRequest {
                        path: path.into(),
                        plan,
                    },
                )?;
                print(&report_text(&r, format)?)?;
                return Ok(r.exit_status());
            }
            let raw = read_input(&args.input)?;
            let plan = match &args.workload.model {
                Some(_) => Some(plan_request(&args.workload)?),
                None => None,
            };
            let req = ExplainRequest {
                plan,
                engine: engine_for(&args.workload)?,
            };
            let r = explain(&raw, &req)?;
            print(&report_text(&r, format)?)?;
            Ok(ExitStatus::of(&r.verdict))
        }
        Command::Watch(args) => watch_command(args, format, cli.color),
        Command::CompileKernels { gpu, modules } => {
            let took = llm_oom::runtime::jit::compile_modules(*gpu, modules)
                .map_err(anyhow::Error::msg)?;
            for (module, seconds) in took {
                println!("{}", llm_oom::runtime::jit::report_line(&module, seconds));
            }
            Ok(ExitStatus::Fits)
        }
        Command::WatchGuard => {
            llm_oom::commands::watch::guard::serve(std::io::stdin().lock());
            Ok(ExitStatus::Fits)
        }
        Command::Run(args) => {
            let r = llm_oom::commands::run::run(&llm_oom::commands::run::RunRequest {
                model: args.model.clone(),
                device: args.device.parse()?,
                dtype: args.dtype.parse()?,
                prompt_tokens: args.prompt_tokens,
                new_tokens: args.max_new_tokens,
                batch: args.batch,
                attention_chunk: args.attention_chunk,
                prefill_chunk: args.prefill_chunk,
                concat_cache: args.concat_cache,
                random_weights: args.random_weights,
                quantize: args.quantize.as_deref().map(str::parse).transpose()?,
            })?;
            print(&report::json(&r)?)?;
            Ok(ExitStatus::Fits)
        }
        Command::Env { python } => {
            let r = llm_oom::commands::env::env(&llm_oom::commands::env::EnvRequest {
                python: python
                    .clone()
                    .unwrap_or_else(llm_oom::probe::launcher::default_python),
            });
            print(&render(&r, format)?)?;
            Ok(ExitStatus::Fits)
        }
        Command::Man => {
            let mut roff = Vec::new();
            clap_mangen::Man::new(Cli::command())
                .render(&mut roff)
                .map_err(|e| {
                    llm_oom::Error::Internal(format!("cannot render the man page: {e}"))
                })?;
            print(&String::from_utf8_lossy(&roff))?;
            Ok(ExitStatus::Fits)
        }
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(*shell, &mut cmd, "llm-oom", &mut std::io::stdout());
            Ok(ExitStatus::Fits)
        }
    }
}

/// `watch`: the output paths checked before the program starts (exit 2, nothing run); the
/// report written at the end, or on stderr when that fails, with the program's exit code kept.
fn watch_command(args: &args::WatchArgs, format: Format, color: ColorChoice) -> Result<ExitStatus> {
    for path in [&args.output, &args.svg].into_iter().flatten() {
        check_writable(path)?;
    }
    let req = WatchRequest {
        command: args.command.clone(),
        interval: parse_interval(&args.interval)?,
        gpu_index: args.gpu,
        engine: args.engine.parse()?,
        guard_exe: std::env::current_exe().ok(),
        torch: match (args.torch, args.snapshot) {
            (args::TorchChoice::Off, _) => None,
            (_, args::SnapshotChoice::Oom) => Some(llm_oom::snapshot::hook::SnapshotMode::Oom),
            (_, args::SnapshotChoice::Always) => {
                Some(llm_oom::snapshot::hook::SnapshotMode::Always)
            }
        },
    };
    let r = watch(&req)?;
    // The report goes to stderr (the program's own output has stdout): colour follows it.
    let format = match format {
        Format::Text { .. } => Format::Text {
            color: matches!(color, ColorChoice::Always)
                || (matches!(color, ColorChoice::Auto)
                    && args.output.is_none()
                    && std::io::stderr().is_terminal()),
        },
        other => other,
    };
    let text = render(&r, format)?;
    // Writes to stderr never panic: a closed stderr must not lose the exit code.
    let say = |s: &str| {
        let _ = std::io::stderr().lock().write_all(s.as_bytes());
    };
    if let (Some(path), Some(svg)) = (&args.svg, r.svg()) {
        if let Err(e) = std::fs::write(path, &svg) {
            say(&format!(
                "llm-oom: cannot write {}: {e}; the timeline drawing is lost, the report is not\n",
                path.display()
            ));
        }
    }
    match &args.output {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &text) {
                say(&format!(
                    "llm-oom: cannot write the report to {}: {e}; it follows on standard error\n\n{text}",
                    path.display()
                ));
            }
        }
        None => say(&format!("\n{text}")),
    }
    Ok(r.exit_status(args.fail_on_oom))
}

/// A report path watch can write: opened for writing (created if missing, not truncated) before
/// the program runs, so a typo costs nothing.
fn check_writable(path: &std::path::Path) -> Result<(), InputError> {
    check_output(path).map_err(|source| {
        InputError::Usage(format!(
            "cannot write the report to {} ({source}); nothing was run — fix the path and run again",
            path.display()
        ))
    })
}

/// An output path checked before any work: its folder exists and the file can be opened for
/// writing (created if missing and removed again, never truncated).
pub(crate) fn check_output(path: &std::path::Path) -> std::io::Result<()> {
    if path.as_os_str().is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "an empty path",
        ));
    }
    if path.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "it is a folder",
        ));
    }
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

fn format(cli: &Cli) -> Format {
    if cli.json {
        Format::Json
    } else if cli.markdown {
        Format::Markdown
    } else {
        let color = match cli.color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
            }
        };
        Format::Text { color }
    }
}

/// A count flag: at least 1 and within its ceiling (`llm_oom::limits`).
/// `--lora-rank`, `--lora-targets`, `--max-loras`, `--draft-model`, `--num-speculative-tokens`.
fn deployment(a: &args::PlanArgs) -> Result<llm_oom::request::DeploymentRequest, InputError> {
    use llm_oom::estimate::deployment::{Lora, Target, Targets};
    let within = |what: &'static str, v: i64, most: u64| {
        let n = positive(what, v)?;
        if n > most {
            return Err(InputError::Usage(format!(
                "{what} {n}: write at most {most}"
            )));
        }
        Ok(n)
    };
    let lora = match a.lora_rank {
        None => None,
        Some(r) => {
            let targets = match a.lora_targets.as_deref() {
                None => Targets::of(&Target::PEFT_DEFAULT),
                Some(list) => {
                    let mut got = Vec::new();
                    for t in list.split(',') {
                        got.push(Target::parse(t).ok_or_else(|| {
                            InputError::Usage(format!(
                                "--lora-targets: `{}` is not a Linear LoRA can target; write \
                                 some of q,k,v,o,gate,up,down",
                                t.trim()
                            ))
                        })?);
                    }
                    Targets::of(&got)
                }
            };
            Some(Lora {
                rank: within("--lora-rank", r, 65_536)?,
                targets,
                max_loras: a
                    .max_loras
                    .map(|n| within("--max-loras", n, 4096))
                    .transpose()?
                    .unwrap_or(1),
            })
        }
    };
    if a.num_speculative_tokens.is_some() && a.draft_model.is_none() && !a.mtp {
        return Err(InputError::Usage(
            "--num-speculative-tokens needs a draft; add --draft-model or --mtp".to_string(),
        ));
    }
    Ok(llm_oom::request::DeploymentRequest {
        mtp: a.mtp,
        lora,
        draft_model: a.draft_model.clone(),
        speculative_tokens: a
            .num_speculative_tokens
            .map(|k| within("--num-speculative-tokens", k, 1024))
            .transpose()?,
        images: a
            .images
            .map(|n| within("--images", n, llm_oom::model::images::MAX_IMAGES))
            .transpose()?
            .unwrap_or(0),
        image_size: a
            .image_size
            .as_deref()
            .map(llm_oom::model::images::parse_size)
            .transpose()
            .map_err(InputError::Usage)?,
        mmproj: a.mmproj.clone(),
        limit_mm_per_prompt: a
            .limit_mm_per_prompt
            // 0 is vLLM's own way to take no images (and skip the encoder's profile)
            .map(|n| match n {
                0 => Ok(0),
                n => within("--limit-mm-per-prompt", n, 4096),
            })
            .transpose()?,
    })
}

pub(crate) fn positive(what: &'static str, v: i64) -> Result<u64, InputError> {
    if v < 1 {
        return Err(InputError::NotPositive { what, value: v });
    }
    llm_oom::limits::flag(what, v as u64)
}

/// `20ms`, `0.5s`, `2` (milliseconds).
fn parse_interval(s: &str) -> Result<std::time::Duration, InputError> {
    let t = s.trim();
    let bad = || {
        InputError::Usage(format!(
            "`{s}` is not an interval; write it like 20ms or 0.5s"
        ))
    };
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1e-3)
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    if !(v.is_finite() && v * mult >= 0.001 && v * mult <= 60.0) {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs_f64(v * mult))
}

/// The log's bytes from a file or stdin, read in bounded memory (the first and last 4 MiB,
/// the out-of-memory lines between, at most 1 GiB read: `/dev/zero` and `yes |` end); a missing
/// file is bad input. On a terminal it says that it waits for a pasted log.
fn read_input(input: &str) -> Result<Vec<u8>, InputError> {
    use llm_oom::logparse::bounded::read_bounded;
    use std::io::IsTerminal;
    let read = if input == "-" {
        let stdin = std::io::stdin();
        if stdin.is_terminal() {
            eprintln!("llm-oom: reading the log from standard input (paste it, then Ctrl-D)");
        }
        read_bounded(stdin.lock()).map_err(|source| InputError::Io {
            path: "<stdin>".into(),
            source,
        })?
    } else {
        let file = std::fs::File::open(input).map_err(|source| InputError::Io {
            path: input.into(),
            source,
        })?;
        read_bounded(file).map_err(|source| InputError::Io {
            path: input.into(),
            source,
        })?
    };
    if let Some(binary) = read.binary {
        let name = if input == "-" {
            "standard input"
        } else {
            input
        };
        return Err(InputError::Usage(format!(
            "{name} is not a text log ({binary}); paste the program's output"
        )));
    }
    Ok(read.bytes)
}

/// `--prompt-file`: the prompt's length with the model's tokenizer, said on stderr.
pub(crate) fn prompt_from_file(
    model: &str,
    a: &WorkloadArgs,
) -> Result<Option<i64>, anyhow::Error> {
    let Some(path) = &a.prompt_file else {
        return Ok(None);
    };
    let resolved = llm_oom::model::resolve(model)?;
    let c = llm_oom::model::tokenizer::count_prompt_tokens(&resolved, path)?;
    if c.stopped_at_ceiling {
        return Err(InputError::TooLarge {
            what: format!(
                "--prompt-file {} (counting stopped after its first {} bytes, the rest was not read)",
                path.display(),
                llm_oom::units::group(c.bytes_read)
            ),
            value: format!("at least {} tokens", llm_oom::units::group(c.tokens)),
            max: format!(
                "{} tokens or {} bytes",
                llm_oom::units::group(llm_oom::limits::MAX_TOKENS),
                llm_oom::units::group(llm_oom::model::tokenizer::MAX_PROMPT_BYTES)
            ),
        }
        .into());
    }
    eprintln!(
        "llm-oom: {} is {} tokens with {}",
        path.display(),
        c.tokens,
        c.tokenizer.display()
    );
    Ok(Some(i64::try_from(c.tokens).unwrap_or(i64::MAX)))
}

/// `--engine` as given; without it llama.cpp for a `.gguf` model, else transformers.
pub(crate) fn engine_for(a: &WorkloadArgs) -> Result<Engine, InputError> {
    match &a.engine {
        Some(e) => e.parse(),
        None if a.model.as_deref().is_some_and(is_gguf) || is_ollama(a) => Ok(Engine::LlamaCpp),
        None => Ok(Engine::Transformers),
    }
}

/// `--engine ollama`, or no engine and an ollama library tag as the model (`llama3.1:8b`).
fn is_ollama(a: &WorkloadArgs) -> bool {
    match &a.engine {
        Some(e) => e.trim().eq_ignore_ascii_case("ollama"),
        None => a.model.as_deref().is_some_and(|m| {
            !std::path::Path::new(m).exists() && llm_oom::model::ollama_tags::find(m).is_some()
        }),
    }
}

/// ollama's knobs, refused for another engine; with ollama, its environment (OLLAMA_NUM_PARALLEL,
/// OLLAMA_KV_CACHE_TYPE, OLLAMA_FLASH_ATTENTION, OLLAMA_CONTEXT_LENGTH) where no flag says.
fn ollama_for(
    a: &WorkloadArgs,
) -> Result<Option<llm_oom::estimate::ollama::OllamaArgs>, InputError> {
    let num_ctx = a.num_ctx.map(|v| positive("--num-ctx", v)).transpose()?;
    let num_gpu = a
        .num_gpu
        .map(|v| {
            u64::try_from(v).map_err(|_| {
                InputError::Usage(format!(
                    "--num-gpu {v}: give the layers to offload, 0 or more (leave it out for ollama's own fitting)"
                ))
            })
        })
        .transpose()?;
    if !is_ollama(a) {
        if num_ctx.is_some() {
            return Err(InputError::Usage(
                "--num-ctx is ollama's context; add --engine ollama (for llama.cpp it is --ctx-size)"
                    .into(),
            ));
        }
        if num_gpu.is_some() {
            return Err(InputError::Usage(
                "--num-gpu is ollama's num_gpu (llama-server's -ngl); add --engine ollama".into(),
            ));
        }
        return Ok(None);
    }
    if a.ctx_size.is_some() {
        return Err(InputError::Usage(
            "ollama sets llama-server's -c itself (num_ctx × OLLAMA_NUM_PARALLEL); give --num-ctx instead of --ctx-size".into(),
        ));
    }
    let env = llm_oom::estimate::ollama::Env::read(|k| std::env::var(k).ok())?;
    // A flag wins over the environment; `from_env` keeps what the environment gave.
    let from_env = llm_oom::estimate::ollama::Env {
        num_parallel: env.num_parallel.filter(|_| a.batch.is_none()),
        kv_cache_type: env.kv_cache_type.filter(|_| a.kv_dtype.is_none()),
        flash_attention: env.flash_attention.filter(|_| a.flash_attn.is_none()),
        context_length: env.context_length.filter(|_| num_ctx.is_none()),
    };
    Ok(Some(llm_oom::estimate::ollama::OllamaArgs {
        num_ctx: num_ctx.or(from_env.context_length),
        num_gpu,
        from_env,
    }))
}

fn is_gguf(model: &str) -> bool {
    std::path::Path::new(model)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

pub fn plan_request(a: &WorkloadArgs) -> Result<PlanRequest, anyhow::Error> {
    let model = a
        .model
        .clone()
        .unwrap_or_else(|| llm_oom::model::presets::DEFAULT_MODEL.to_string());
    let prompt = prompt_from_file(&model, a)?
        .or(a.prompt_tokens)
        .unwrap_or(2048);
    let devices = a
        .vram
        .as_deref()
        .map(llm_oom::cards::parse_devices)
        .transpose()?
        .unwrap_or_default();
    for d in &devices {
        llm_oom::limits::flag("--vram", d.bytes)?;
    }
    let gpus = match devices.len() {
        0 | 1 => Vec::new(),
        _ => devices.iter().map(|v| v.bytes).collect(),
    };
    let vram = devices.into_iter().next();
    let ollama = ollama_for(a)?;
    let env = ollama.map(|o| o.from_env).unwrap_or_default();
    Ok(PlanRequest {
        model,
        dtype: a.dtype.as_deref().map(str::parse).transpose()?,
        kv_dtype: match a.kv_dtype.as_deref() {
            Some(k) => Some(k.parse()?),
            None => env.kv_cache_type,
        },
        prompt_tokens: positive("--prompt-tokens", prompt)?,
        max_new_tokens: positive("--max-new-tokens", a.max_new_tokens)?,
        batch: match a.batch {
            Some(b) => positive("--batch", b)?,
            None => env.num_parallel.unwrap_or(1),
        },
        engine: engine_for(a)?,
        vram_read: vram
            .as_ref()
            .filter(|v| v.card)
            .map(|v| format!("--vram {}", v.resolved)),
        vram_card: vram.as_ref().and_then(|v| v.named.clone()),
        vram: vram.map(|v| v.bytes),
        gpu_index: a.gpu,
        gpus,
        host_ram: None,
        exact: false,
        vllm: Default::default(),
        sglang: Default::default(),
        ollama,
        python: None,
        deployment: Default::default(),
        parallel: Default::default(),
        llama_server: (a.ctx_size == Some(0)).then(|| {
            llm_oom::estimate::llamacpp_fit::ServerArgs {
                ctx_auto: true,
                slots: a.batch.and_then(|b| u64::try_from(b).ok()),
                ..Default::default()
            }
        }),
        llama: llm_oom::estimate::LlamaCppArgs {
            // -c 0 is llama-server's own context (`llama_server`), not a size
            ctx_size: a
                .ctx_size
                .filter(|&v| v != 0)
                .map(|v| positive("--ctx-size", v))
                .transpose()?,
            ubatch: a
                .ubatch_size
                .map(|v| positive("--ubatch-size", v))
                .transpose()?,
            batch: a
                .batch_size
                .map(|v| positive("--batch-size", v))
                .transpose()?,
            flash_attn: a
                .flash_attn
                .as_deref()
                .and_then(flash_attn_flag)
                .or(env.flash_attention),
            unified: false,
        },
    })
}

/// llama-server's start-up knobs (`--fit`, `--fit-target`, `--fit-ctx`, `--kv-unified`) on top
/// of `-c 0`: `Some` when any asks for llama-server's own choice.
fn llama_server(
    args: &PlanArgs,
    from_ctx: Option<llm_oom::estimate::llamacpp_fit::ServerArgs>,
) -> Result<Option<llm_oom::estimate::llamacpp_fit::ServerArgs>, InputError> {
    let target = args
        .fit_target
        .map(|v| {
            u64::try_from(v)
                .ok()
                .and_then(|m| m.checked_mul(1 << 20))
                .ok_or_else(|| {
                    InputError::Usage(format!(
                        "--fit-target {v}: MiB to leave free, 0 or more (llama-server's default is 1024)"
                    ))
                })
                .and_then(|b| llm_oom::limits::flag("--fit-target", b))
        })
        .transpose()?;
    let min_ctx = args.fit_ctx.map(|v| positive("--fit-ctx", v)).transpose()?;
    let mut s = from_ctx.unwrap_or_else(|| llm_oom::estimate::llamacpp_fit::ServerArgs {
        slots: args.workload.batch.and_then(|b| u64::try_from(b).ok()),
        ..Default::default()
    });
    s.fit = args.fit.as_deref().map(|f| f == "on");
    s.target = target;
    s.min_ctx = min_ctx;
    s.unified = args.kv_unified;
    if !s.is_asked() {
        if args.kv_unified {
            return Err(InputError::Usage(
                "--kv-unified is llama-server's cache layout: give it with -c 0 or --fit on".into(),
            ));
        }
        return Ok(None);
    }
    Ok(Some(s))
}

/// `--flash-attn on|off|auto` (clap admits only these); `auto` is unset: on for CUDA.
fn flash_attn_flag(s: &str) -> Option<bool> {
    match s {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

fn list_presets(format: Format) -> Result<String> {
    let rows: Vec<(String, llm_oom::model::Spec)> = PRESETS
        .iter()
        .map(|(id, json)| llm_oom::model::presets::load(id, json).map(|s| (id.to_string(), s)))
        .collect::<Result<_, _>>()?;
    Ok(match format {
        Format::Json => {
            let v: Vec<_> = rows
                .iter()
                .map(|(id, s)| serde_json::json!({"id": id, "architecture": s.architecture, "parameters": s.parameters()}))
                .collect();
            report::json(&v)?
        }
        _ => {
            let mut t = report::text::table(&["preset", "architecture", "parameters"], 2);
            for (id, s) in &rows {
                t.add_row(vec![
                    id.clone(),
                    s.architecture.clone(),
                    llm_oom::units::group(s.parameters()),
                ]);
            }
            format!("{t}\n")
        }
    })
}

/// A command's report in the format asked; a Markdown report (pasted into an issue) ends with the
/// short form of `llm-oom env`.
pub(crate) fn report_text<R: llm_oom::report::Render>(r: &R, format: Format) -> Result<String> {
    let mut text = render(r, format)?;
    if matches!(format, Format::Markdown) {
        text.push_str(&format!(
            "\n<sub>{}</sub>\n",
            llm_oom::commands::env::short_line()
        ));
    }
    Ok(text)
}

/// Print, treating a closed pipe (`llm-oom plan | head`) as a normal end.
pub(crate) fn print(s: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
