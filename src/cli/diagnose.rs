//! `llm-oom diagnose`: flags → request (with the embedded default when no model is named) →
//! the staged probe, with a spinner on a terminal → report → exit code.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};

use super::args::{DiagnoseArgs, FreshRunArg};
use super::{positive, print};
use llm_oom::commands::diagnose::{diagnose, DiagnoseRequest, FreshRun};
use llm_oom::error::InputError;
use llm_oom::model::presets::DIAGNOSE_DEFAULT_MODEL;
use llm_oom::report::{Format, Render};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use llm_oom::estimate::Engine;
use llm_oom::request::Device;
use llm_oom::units::Bytes;
use llm_oom::ExitStatus;

pub fn run(args: &DiagnoseArgs, format: Format) -> Result<ExitStatus> {
    let w = &args.workload;
    let engine: Engine = w.engine.as_deref().unwrap_or("transformers").parse()?;
    // Only llm-oom's own runtime needs this binary's CUDA build; transformers' child uses the
    // user's torch, which finds the GPU itself.
    let candle = engine == Engine::Candle;
    let listed = args
        .device
        .as_deref()
        .map(llm_oom::request::parse_device_list)
        .transpose()?;
    let tp = args
        .tensor_parallel_size
        .map(|n| positive("--tensor-parallel-size", n))
        .transpose()?;
    let (device, devices, ranks) = match listed {
        Some(all) if all.len() > 1 && candle => {
            if tp.is_some_and(|n| n != all.len() as u64) {
                return Err(InputError::Usage(format!(
                    "--tensor-parallel-size {} with {} GPUs in --device: one rank per GPU; list as many GPUs as ranks",
                    tp.unwrap_or(0),
                    all.len()
                ))
                .into());
            }
            (all[0], Vec::new(), all)
        }
        Some(all) if all.len() > 1 => {
            if !engine.is_transformers() || tp.is_some() {
                return Err(InputError::Usage(format!(
                    "--device with several GPUs runs transformers' device_map=\"auto\" over them, \
                     or with --engine candle its tensor-parallel probe; {engine}{} is not probed \
                     across GPUs (for vLLM's tensor parallelism, `llm-oom plan --engine vllm --tp N` \
                     prices every rank)",
                    if tp.is_some() { " with --tensor-parallel-size" } else { "" }
                ))
                .into());
            }
            (all[0], all, Vec::new())
        }
        listed => {
            let device = match listed {
                Some(all) => all.first().copied().unwrap_or(Device::Cpu),
                None => best_device(candle),
            };
            (device, Vec::new(), cpu_ranks(device, tp, candle)?)
        }
    };
    if candle {
        llm_oom::runtime::check_device(device).map_err(|e| InputError::Usage(e.to_string()))?;
    }
    // Everything that can be checked before the probe runs is checked here, so bad input costs
    // nothing: the GPUs named, the Python, the output path.
    let card_given = args.vram_limit.is_some() || w.vram.is_some();
    if args.device.is_some() {
        let named: Vec<Device> = if devices.is_empty() && ranks.is_empty() {
            vec![device]
        } else {
            devices.iter().chain(&ranks).copied().collect()
        };
        check_gpus(
            args.device.as_deref().unwrap_or_default(),
            &named,
            card_given,
        )?;
    }
    if let Some(python) = &args.python {
        llm_oom::probe::launcher::check_python(python)?;
    }
    if let Some(path) = &args.svg {
        super::check_output(path).map_err(|e| {
            InputError::Usage(format!(
                "cannot write the drawing to {} ({e}); nothing was run — fix --svg and run again",
                path.display()
            ))
        })?;
    }
    let embedded = w.model.is_none();
    let on_cpu = device == Device::Cpu;
    let model = w
        .model
        .clone()
        .unwrap_or_else(|| DIAGNOSE_DEFAULT_MODEL.to_string());
    let prompt_given = super::prompt_from_file(&model, w)?.or(w.prompt_tokens);
    let prompt = prompt_given.unwrap_or(if embedded && on_cpu { 512 } else { 2048 });
    let batch = w.batch.unwrap_or(if embedded { 2 } else { 1 });
    let size = |flag: &str, s: &Option<String>| {
        s.as_deref()
            .map(|v| llm_oom::cards::parse_card(flag, v).map(|c| c.bytes))
            .transpose()
    };
    let vram_limit = size("--vram-limit", &args.vram_limit)?.or(size("--vram", &w.vram)?);
    if w.kv_dtype.is_some() {
        return Err(InputError::Usage(
            "the probe keeps the KV cache in the weights' dtype; price --kv-dtype with `llm-oom plan`"
                .into(),
        )
        .into());
    }
    let exe = std::env::current_exe().map_err(|e| {
        llm_oom::Error::Internal(format!(
            "cannot find the llm-oom binary to run the probe: {e}"
        ))
    })?;
    let req = DiagnoseRequest {
        model,
        dtype: w.dtype.as_deref().map(str::parse).transpose()?,
        prompt_tokens: positive("--prompt-tokens", prompt)?,
        prompt_is_default: prompt_given.is_none(),
        max_new_tokens: positive("--max-new-tokens", w.max_new_tokens)?,
        batch: positive("--batch", batch)?,
        engine,
        device,
        devices: devices.clone(),
        ranks: ranks.clone(),
        vram_limit,
        find_limits: args.find_limits,
        verify: args.verify,
        random_weights: args.random_weights,
        quantize: args.quantize.as_deref().map(str::parse).transpose()?,
        exe,
        python: args
            .python
            .clone()
            .unwrap_or_else(llm_oom::probe::launcher::default_python),
        stage_timeout: Duration::from_secs(args.stage_timeout.unwrap_or(300).max(1)),
        greet_timeout: args.stage_timeout.map(|s| Duration::from_secs(s.max(1))),
        allow_past_context: args.allow_past_context,
        fresh_run: match args.fresh_run {
            FreshRunArg::Edge => FreshRun::Edge,
            FreshRunArg::Always => FreshRun::Always,
            FreshRunArg::Never => FreshRun::Never,
        },
        interrupt: Some(interrupt_flag()),
    };
    let interactive = !matches!(format, Format::Json) && std::io::stderr().is_terminal();
    // Said once the request is known to be good (the first stage), so bad input stays one line.
    let mut announce = (!matches!(format, Format::Json)).then(|| {
        format!(
            "llm-oom: probing {} on {}{}",
            req.model,
            if devices.is_empty() && ranks.is_empty() {
                device.to_string()
            } else {
                devices
                    .iter()
                    .chain(&ranks)
                    .map(Device::to_string)
                    .collect::<Vec<_>>()
                    .join(" + ")
            },
            vram_limit.map_or(String::new(), |l| format!(" as a {} card", Bytes(l)))
        )
    });
    let spinner = interactive.then(|| {
        let pb = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed:>3} {msg}") {
            pb.set_style(style);
        }
        pb.enable_steady_tick(Duration::from_millis(100));
        pb
    });
    let mut progress = |what: &str| {
        if let Some(line) = announce.take() {
            match &spinner {
                Some(pb) => pb.println(line),
                None => eprintln!("{line}"),
            }
        }
        if let Some(pb) = &spinner {
            pb.set_message(what.to_string());
        }
    };
    let result = diagnose(&req, &mut progress);
    if let Some(pb) = spinner {
        pb.finish_and_clear();
    }
    let r = result?;
    print(&super::report_text(&r, format)?)?;
    // The path was checked before the probe; if writing fails now the report above still stands.
    if let (Some(path), Some(svg)) = (&args.svg, r.svg()) {
        if let Err(e) = std::fs::write(path, &svg) {
            eprintln!(
                "llm-oom: cannot write the drawing to {} ({e}); the report is on standard output",
                path.display()
            );
        }
    }
    Ok(r.exit_status())
}

/// `--tensor-parallel-size N` on one device: N ranks on the CPU (over the loopback); a GPU world
/// lists its GPUs.
fn cpu_ranks(device: Device, tp: Option<u64>, candle: bool) -> Result<Vec<Device>> {
    let Some(n) = tp.filter(|&n| n > 1) else {
        return Ok(Vec::new());
    };
    if !candle {
        return Err(InputError::Usage(
            "--tensor-parallel-size runs llm-oom's own tensor-parallel probe: add --engine candle (transformers' device_map=\"auto\" over several GPUs is layer-wise: --device cuda:0,cuda:1)".into(),
        )
        .into());
    }
    if device != Device::Cpu || n > 64 {
        return Err(InputError::Usage(format!(
            "--tensor-parallel-size {n}: list one GPU per rank in --device (cuda:0,cuda:1,…), or use --device cpu for ranks on the CPU (at most 64)"
        ))
        .into());
    }
    Ok(vec![Device::Cpu; n as usize])
}

/// Each GPU named in `--device` is one NVML sees. With none at all, a card size (`--vram`,
/// `--vram-limit`) still lets the answer be predicted for that card; without one the card would be
/// this machine's RAM, so it is refused.
fn check_gpus(typed: &str, named: &[Device], card_given: bool) -> Result<(), InputError> {
    let Some(highest) = named.iter().filter_map(|d| d.gpu()).max() else {
        return Ok(());
    };
    match llm_oom::meter::gpu::count() {
        Ok(0) | Err(_) if card_given => Ok(()),
        Err(why) => Err(InputError::Usage(format!(
            "--device {typed}: no CUDA GPU found ({why}); run on the GPU machine, or drop --device and predict for a card with `llm-oom plan --vram 24GiB`"
        ))),
        Ok(0) => Err(InputError::Usage(format!(
            "--device {typed}: no CUDA GPU found (NVML sees 0 GPUs); run on the GPU machine, or drop --device and predict for a card with `llm-oom plan --vram 24GiB`"
        ))),
        Ok(n) if highest >= n => Err(InputError::Usage(format!(
            "--device cuda:{highest}: this machine has {n} GPU{} (cuda:0{}); name one of those",
            if n == 1 { "" } else { "s" },
            if n == 1 { String::new() } else { format!(" to cuda:{}", n - 1) }
        ))),
        Ok(_) => Ok(()),
    }
}

/// GPU 0 when NVML sees one (for candle, also only when this binary was built with CUDA); else
/// the CPU. (No CUDA context is created here: the probe's child does that.)
fn best_device(candle: bool) -> Device {
    if (cfg!(feature = "cuda") || !candle) && llm_oom::meter::gpu::read_gpu(0).is_ok() {
        Device::Cuda(0)
    } else {
        Device::Cpu
    }
}

/// Ctrl-C (SIGINT) and SIGTERM set this flag instead of killing llm-oom: the probe's child gets the
/// same SIGINT from the terminal and stops, the stages left are skipped, and the report of what was
/// measured so far is printed (exit 130). If the handler cannot be installed the defaults stay.
fn interrupt_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, Arc::clone(&flag));
    }
    flag
}
