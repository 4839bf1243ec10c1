//! Reading an input of any length in bounded memory: the first and the last 4 MiB are kept
//! whole (an OOM is near the end, the setup near the start), and from the middle only the lines
//! with out-of-memory words; the rest is counted and a marker line says how much was skipped.
//! `/dev/zero` or `yes |` end after a fixed amount read, and say so.

use std::io::{self, Read};
use std::sync::OnceLock;

use regex::bytes::Regex;

use super::hints::SKIPPED_MARKER;

/// Kept whole from the start of the input.
pub const HEAD: usize = 4 << 20;
/// Kept whole from the end of the input.
pub const TAIL: usize = 4 << 20;
/// Lines with out-of-memory words kept from the middle, at most.
const MIDDLE: usize = 1 << 20;
/// No input is read past this: an endless stream still ends.
pub const STOP_AFTER: u64 = 1 << 30;
/// A middle line longer than this is not a message.
const LONGEST_LINE: usize = 64 << 10;

/// What was read: the bytes to explain, and how many in the middle were left out.
pub struct Bounded {
    pub bytes: Vec<u8>,
    pub skipped: u64,
    pub stopped: bool,
}

/// How much is kept and when reading stops.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub head: usize,
    pub tail: usize,
    pub stop_after: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            head: HEAD,
            tail: TAIL,
            stop_after: STOP_AFTER,
        }
    }
}

/// Read `r` to its end (or `STOP_AFTER`) keeping a bounded window.
pub fn read_bounded(r: impl Read) -> io::Result<Bounded> {
    read_bounded_with(r, Limits::default())
}

/// `read_bounded` with other limits (the tests use small ones).
pub fn read_bounded_with(mut r: impl Read, limits: Limits) -> io::Result<Bounded> {
    let mut head = Vec::new();
    (&mut r).take(limits.head as u64).read_to_end(&mut head)?;
    let mut state = Window {
        keep: limits.tail,
        ..Window::default()
    };
    let mut chunk = vec![0u8; 1 << 20];
    let mut total = head.len() as u64;
    while total < limits.stop_after {
        let got = match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        total = total.saturating_add(got as u64);
        state.push(&chunk[..got]);
    }
    let stopped = total >= limits.stop_after;
    Ok(state.finish(head, stopped, &limits))
}

#[derive(Default)]
struct Window {
    /// Bytes of the end kept whole.
    keep: usize,
    tail: Vec<u8>,
    middle: Vec<u8>,
    skipped: u64,
}

impl Window {
    fn push(&mut self, bytes: &[u8]) {
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * self.keep {
            let cut = self.tail.len() - self.keep;
            let dropped: Vec<u8> = self.tail.drain(..cut).collect();
            self.keep_oom_lines(&dropped);
        }
    }

    /// From bytes about to be dropped, keep the lines with out-of-memory words.
    fn keep_oom_lines(&mut self, dropped: &[u8]) {
        static WORDS: OnceLock<Regex> = OnceLock::new();
        let words = WORDS.get_or_init(|| {
            Regex::new(r"(?i:out of memory|outofmemory|failed to allocate|cannot allocate|insufficient memory|not enough memory|oomkilled|killed process)|OOM")
                .unwrap_or_else(|e| unreachable!("static regex: {e}"))
        });
        let mut kept = 0usize;
        let mut after = 0usize;
        for m in words.find_iter(dropped) {
            if m.start() < after {
                continue;
            }
            let start = dropped[..m.start()]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1);
            let end = dropped[m.end()..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(dropped.len(), |p| m.end() + p);
            after = end;
            let line = &dropped[start..end];
            if line.len() <= LONGEST_LINE && self.middle.len() + line.len() < MIDDLE {
                self.middle.extend_from_slice(line);
                self.middle.push(b'\n');
                kept += line.len();
            }
        }
        self.skipped = self
            .skipped
            .saturating_add(dropped.len().saturating_sub(kept) as u64);
    }

    fn finish(self, mut head: Vec<u8>, stopped: bool, limits: &Limits) -> Bounded {
        if self.skipped == 0 && !stopped {
            head.extend_from_slice(&self.tail);
            return Bounded {
                bytes: head,
                skipped: 0,
                stopped,
            };
        }
        let note = format!(
            "\n{SKIPPED_MARKER}{} bytes of input (kept the first {} KiB, the last {} KiB and the lines with out-of-memory words between{})\n",
            self.skipped,
            limits.head >> 10,
            limits.tail >> 10,
            if stopped {
                format!("; stopped reading after {} MiB", limits.stop_after >> 20)
            } else {
                String::new()
            }
        );
        head.extend_from_slice(note.as_bytes());
        head.extend_from_slice(&self.middle);
        head.extend_from_slice(&self.tail);
        Bounded {
            bytes: head,
            skipped: self.skipped,
            stopped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Limits = Limits {
        head: 4 << 10,
        tail: 4 << 10,
        stop_after: 1 << 20,
    };

    #[test]
    fn a_short_input_is_whole_and_an_endless_one_ends() {
        let b = read_bounded(&b"hello\nworld\n"[..]).unwrap();
        assert_eq!(b.bytes, b"hello\nworld\n");
        assert_eq!(b.skipped, 0);
        let zero = read_bounded_with(io::repeat(0), SMALL).unwrap();
        assert!(zero.stopped);
        assert!(zero.bytes.len() < SMALL.head + 2 * SMALL.tail + 1024);
        assert!(zero.skipped > 0);
    }

    #[test]
    fn the_middle_keeps_its_oom_lines() {
        let mut input = b"y\n".repeat(16 << 10);
        input.extend_from_slice(
            b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
        );
        input.extend_from_slice(&b"y\n".repeat(16 << 10));
        let b = read_bounded_with(&input[..], SMALL).unwrap();
        let text = String::from_utf8_lossy(&b.bytes);
        assert!(text.contains("CUDA out of memory"));
        assert!(text.contains(SKIPPED_MARKER));
        assert!(b.skipped > 0 && !b.stopped);
    }
}
