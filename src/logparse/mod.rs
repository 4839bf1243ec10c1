//! Reading pasted logs: decode and clean the text, and find every out-of-memory event with its
//! numbers and line, and the context around it (stage, workload, model). Deciding the cause from
//! them is the verdict wing's (`verdict::read`).

pub mod bounded;
pub mod catalogue;
pub mod clean;
pub mod engines;
pub mod hints;
pub mod parse;
pub mod torch;
pub mod words;

pub use clean::clean_lines;
pub use parse::{scan, Context, Event, Finding, Source};

/// Every file of the explain corpus (tests/fixtures/logs, all folders), with its bytes: what the
/// tests that hold a fast path to the slow one read.
#[cfg(test)]
pub(crate) fn corpus_logs() -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut dirs =
        vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs")];
    let mut out = Vec::new();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for path in entries.flatten().map(|e| e.path()) {
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(raw) = std::fs::read(&path) {
                out.push((path, raw));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::Engine;
    use crate::verdict::read::classify;

    /// No input makes the parser panic: fragments of real messages spliced with random bytes.
    #[test]
    fn no_panic_on_mangled_input() {
        let pieces: &[&[u8]] = &[
            b"CUDA out of memory. Tried to allocate ",
            b"2.00 GiB",
            b". GPU 0 has a total capacity of ",
            b"99999999999999999999999 TiB",
            b" of which ",
            b"is free",
            b"Process 1 has ",
            b"\x1b[",
            b"\r",
            b"\n",
            b"\xff\xfe",
            b"\0",
            b"batch= ",
            b"seq= ",
            b"max seq len (",
            b"Out of memory: Killed process 1 (",
            b"allocating 1.5 MiB on device 0: cudaMalloc failed",
            b"failed to allocate CUDA0 buffer of size 99999999999999999999",
            b"MPS backend out of memory (MPS allocated: 1 GB, other allocations: ",
            b"Not enough space to allocate 1 B DRAM buffer across 99999999999 banks, where each bank needs to store 1 B, but bank size is 18446744073709551615 B (allocated: 1 B, free: 1 B",
            b"Reason: Error\n Exit Code: 137",
            b"Exception in thread",
            b"cache_utils.py",
            b"0",
            b"-1",
            b"1e309",
            b"..",
            b",,,",
            b")",
            b"(",
        ];
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..3000 {
            let mut raw = Vec::new();
            for _ in 0..(state % 24) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                raw.extend_from_slice(pieces[(state % pieces.len() as u64) as usize]);
            }
            let lines = clean_lines(&raw);
            let (findings, ctx) = scan(&lines);
            if let Some(first) = findings.first() {
                let r = classify(first, &findings, &ctx, Engine::Transformers);
                assert!((0.0..=1.0).contains(&r.verdict.confidence));
            }
        }
    }
}
