//! The `llm-oom` binary: parse flags, run the library, print, exit with the contract's code.

mod cli;

/// Every heap byte is counted: the probe's CPU stages are measured exactly and `--vram-limit`
/// is emulated on the host (see `llm_oom::meter::host`).
#[global_allocator]
static ALLOC: llm_oom::meter::host::CountingAlloc = llm_oom::meter::host::CountingAlloc;

use std::process::ExitCode;

use clap::Parser;
use llm_oom::ExitStatus;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let args = cli::args::Cli::parse();
    let level = match args.verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .without_time()
        .init();

    let status = match cli::run(args) {
        Ok(status) => status,
        Err(err) => {
            eprintln!("llm-oom: {err}");
            match err.downcast_ref::<llm_oom::Error>() {
                Some(e) => ExitStatus::from(e),
                None if err.downcast_ref::<llm_oom::InputError>().is_some() => ExitStatus::BadInput,
                None => ExitStatus::Failure,
            }
        }
    };
    ExitCode::from(status.code())
}
