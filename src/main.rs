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
    let args = cli::args::Cli::parse_from(cli::llama_short_flags(std::env::args_os()));
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
            eprintln!("llm-oom: {}", without_backtrace(&err.to_string()));
            match err.downcast_ref::<llm_oom::Error>() {
                Some(e) => ExitStatus::from(e),
                None if err.downcast_ref::<llm_oom::InputError>().is_some() => ExitStatus::BadInput,
                None => ExitStatus::Failure,
            }
        }
    };
    ExitCode::from(status.code())
}

/// An error's message without a backtrace a library appended to it (candle does when
/// `RUST_BACKTRACE` is set): the lines before the first numbered frame or `stack backtrace:`.
fn without_backtrace(message: &str) -> String {
    let frame = |l: &str| {
        let t = l.trim_start();
        t.starts_with("stack backtrace:")
            || t.split_once(": ").is_some_and(|(n, _)| {
                !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && l.starts_with(' ')
            })
    };
    message
        .lines()
        .take_while(|l| !frame(l))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_backtrace_is_cut_from_a_message() {
        let m = "x.gguf is not a readable GGUF file (gguf: unsupported magic/version Gguf/9\n   0: candle_core::error::Error::bt\n             at src/error.rs:260:25\n)";
        assert_eq!(
            super::without_backtrace(m),
            "x.gguf is not a readable GGUF file (gguf: unsupported magic/version Gguf/9"
        );
        assert_eq!(super::without_backtrace("one\ntwo: 3"), "one\ntwo: 3");
    }
}
