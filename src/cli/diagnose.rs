//! `llm-oom diagnose`: flags → request (with the embedded default when no model is named) →
//! the staged probe, with a spinner on a terminal → report → exit code.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};

use super::args::DiagnoseArgs;
use super::{positive, print};
use llm_oom::commands::diagnose::{diagnose, DiagnoseRequest};
use llm_oom::error::InputError;
use llm_oom::model::presets::DIAGNOSE_DEFAULT_MODEL;
use llm_oom::report::{render, Format, Render};
use llm_oom::request::Device;
use llm_oom::units::Bytes;
use llm_oom::ExitStatus;

pub fn run(args: &DiagnoseArgs, format: Format) -> Result<ExitStatus> {
    let w = &args.workload;
    let device = match &args.device {
        Some(d) => d.parse::<Device>()?,
        None => best_device(),
    };
    llm_oom::runtime::check_device(device).map_err(|e| InputError::Usage(e.to_string()))?;
    let embedded = w.model.is_none();
    let on_cpu = device == Device::Cpu;
    let model = w
        .model
        .clone()
        .unwrap_or_else(|| DIAGNOSE_DEFAULT_MODEL.to_string());
    let prompt = super::prompt_from_file(&model, w)?
        .or(w.prompt_tokens)
        .unwrap_or(if embedded && on_cpu { 512 } else { 2048 });
    let batch = w.batch.unwrap_or(if embedded { 2 } else { 1 });
    let size = |s: &Option<String>| {
        s.as_deref()
            .map(|v| llm_oom::cards::parse_vram(v).map(|c| c.bytes))
            .transpose()
    };
    let vram_limit = size(&args.vram_limit)?.or(size(&w.vram)?);
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
        max_new_tokens: positive("--max-new-tokens", w.max_new_tokens)?,
        batch: positive("--batch", batch)?,
        engine: w.engine.as_deref().unwrap_or("transformers").parse()?,
        device,
        vram_limit,
        find_limits: args.find_limits,
        verify: args.verify,
        random_weights: args.random_weights,
        quantize: args.quantize.as_deref().map(str::parse).transpose()?,
        exe,
        python: args
            .python
            .clone()
            .unwrap_or_else(llm_oom::commands::diagnose::engine::default_python),
        stage_timeout: Duration::from_secs(args.stage_timeout.max(1)),
    };
    let interactive = !matches!(format, Format::Json) && std::io::stderr().is_terminal();
    if !matches!(format, Format::Json) {
        eprintln!(
            "llm-oom: probing {} on {}{}",
            req.model,
            device,
            vram_limit.map_or(String::new(), |l| format!(" as a {} card", Bytes(l)))
        );
    }
    let spinner = interactive.then(|| {
        let pb = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed:>3} {msg}") {
            pb.set_style(style);
        }
        pb.enable_steady_tick(Duration::from_millis(100));
        pb
    });
    let mut progress = |what: &str| {
        if let Some(pb) = &spinner {
            pb.set_message(what.to_string());
        }
    };
    let result = diagnose(&req, &mut progress);
    if let Some(pb) = spinner {
        pb.finish_and_clear();
    }
    let r = result?;
    if let (Some(path), Some(svg)) = (&args.svg, r.svg()) {
        super::write_file(path, &svg)?;
    }
    print(&render(&r, format)?)?;
    Ok(r.exit_status())
}

/// CUDA when this binary was built with it and NVML sees a GPU; else the CPU. (No CUDA context is
/// created here: the probe's child does that.)
fn best_device() -> Device {
    if cfg!(feature = "cuda") && llm_oom::meter::gpu::read_gpu(0).is_ok() {
        Device::Cuda(0)
    } else {
        Device::Cpu
    }
}
