//! Reading an input of any length in bounded memory: the first and the last 4 MiB (at most
//! 100,000 lines each) are kept whole (an OOM is near the end, the setup near the start), and
//! from the middle only the lines with out-of-memory words; the rest is counted and a marker line
//! says how much was skipped. `/dev/zero` or `yes |` end after a fixed amount read, and say so.
//! The line caps bound what the lines cost once split (`yes` has 2-byte lines).

use std::io::{self, Read};
use std::sync::OnceLock;

use regex::bytes::Regex;

use super::hints::{RESUMED_MARKER, SKIPPED_MARKER};

/// Kept whole from the start of the input.
pub const HEAD: usize = 4 << 20;
/// Kept whole from the end of the input.
pub const TAIL: usize = 4 << 20;
/// Lines kept whole from the start and from the end, at most each.
pub const WINDOW_LINES: usize = 100_000;
/// Lines with out-of-memory words kept from the middle, at most.
const MIDDLE: usize = 1 << 20;
/// No input is read past this: an endless stream still ends.
pub const STOP_AFTER: u64 = 1 << 30;
/// A middle line longer than this is not a message.
const LONGEST_LINE: usize = 64 << 10;

/// How much of the start is looked at to tell a log from binary data.
pub const LOOK: usize = 64 << 10;

/// What was read: the bytes to explain, and how many in the middle were left out.
pub struct Bounded {
    pub bytes: Vec<u8>,
    pub skipped: u64,
    pub stopped: bool,
    /// The input is not text: reading stopped after its first `LOOK` bytes.
    pub binary: Option<Binary>,
}

/// Why the start of an input is not a log: its NUL bytes and other control or non-UTF-8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binary {
    pub nul: usize,
    pub other: usize,
    pub looked: usize,
}

impl std::fmt::Display for Binary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let within = if self.looked >= LOOK {
            format!("the first {} KiB", LOOK >> 10)
        } else {
            format!("its {} bytes", self.looked)
        };
        match (self.nul, self.other) {
            (n, 0) => write!(f, "binary data: {n} NUL bytes in {within}"),
            (0, o) => write!(f, "binary data: {o} control or non-UTF-8 bytes in {within}"),
            (n, o) => write!(
                f,
                "binary data: {n} NUL and {o} other control or non-UTF-8 bytes in {within}"
            ),
        }
    }
}

/// The start of an input is binary data when it is almost all NUL bytes (`/dev/zero`, a
/// pre-allocated file never written), or when over a tenth of what is not NUL is control bytes
/// (other than tab, line ends, form feed and ESC) or bytes that are not UTF-8 (random bytes, an
/// executable, a compressed file). Text with NULs between its characters (UTF-16, a writer that
/// padded it) is text: its NULs are dropped when it is read; a few Latin-1 accents stay text.
pub fn binary_start(start: &[u8]) -> Option<Binary> {
    if start.is_empty() || super::clean::is_utf16(start) {
        return None;
    }
    let nul = start.iter().filter(|&&b| b == 0).count();
    let other = start
        .iter()
        .filter(|&&b| {
            b != 0 && b < b' ' && !matches!(b, b'\t' | b'\n' | b'\r' | 0x1b | 0x0c | 0x0b)
        })
        .count()
        .saturating_add(not_utf8(start));
    let text = start.len().saturating_sub(nul);
    let binary = text.saturating_mul(100) < start.len() || other.saturating_mul(10) > text;
    binary.then_some(Binary {
        nul,
        other,
        looked: start.len(),
    })
}

/// How many bytes of `b` are not part of a valid UTF-8 sequence (a sequence cut at the end counts).
fn not_utf8(mut b: &[u8]) -> usize {
    let mut n = 0usize;
    loop {
        match std::str::from_utf8(b) {
            Ok(_) => return n,
            Err(e) => {
                let bad = e
                    .error_len()
                    .unwrap_or_else(|| b.len().saturating_sub(e.valid_up_to()));
                n = n.saturating_add(bad);
                b = b
                    .get(e.valid_up_to().saturating_add(bad)..)
                    .unwrap_or_default();
            }
        }
    }
}

/// How much is kept and when reading stops.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub head: usize,
    pub tail: usize,
    pub stop_after: u64,
    /// Lines kept in the head and in the tail, at most each.
    pub lines: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            head: HEAD,
            tail: TAIL,
            stop_after: STOP_AFTER,
            lines: WINDOW_LINES,
        }
    }
}

/// Read `r` to its end (or `STOP_AFTER`) keeping a bounded window.
pub fn read_bounded(r: impl Read) -> io::Result<Bounded> {
    read_bounded_with(r, Limits::default())
}

/// `read_bounded` with other limits (the tests use small ones).
pub fn read_bounded_with(mut r: impl Read, limits: Limits) -> io::Result<Bounded> {
    // The first look decides whether this is text at all: `/dev/zero` ends here.
    let mut head = Vec::new();
    let look = LOOK.min(limits.head);
    (&mut r).take(look as u64).read_to_end(&mut head)?;
    if let Some(binary) = binary_start(&head) {
        return Ok(Bounded {
            bytes: Vec::new(),
            skipped: 0,
            stopped: true,
            binary: Some(binary),
        });
    }
    // An end already met is not read again (a terminal's Ctrl-D ends one read, not the input).
    let mut ended = head.len() < look;
    if !ended {
        (&mut r)
            .take(limits.head.saturating_sub(head.len()) as u64)
            .read_to_end(&mut head)?;
        ended = head.len() < limits.head;
    }
    let mut state = Window {
        keep: limits.tail,
        ..Window::default()
    };
    // A head of more lines than the cap gives the rest to the window, as if read after it.
    if let Some(cut) = nth_line_end(&head, limits.lines) {
        let rest = head.split_off(cut);
        state.push(&rest);
    }
    let mut chunk = vec![0u8; 1 << 20];
    let mut total = head.len() as u64;
    while !ended && total < limits.stop_after {
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
    state.cap_tail_lines(limits.lines);
    state.align_tail();
    Ok(state.finish(head, stopped, &limits))
}

/// The offset just past the `n`-th line end, when `bytes` has more than `n` lines.
fn nth_line_end(bytes: &[u8], n: usize) -> Option<usize> {
    let at = memchr_nth(bytes, n)?;
    (at + 1 < bytes.len()).then_some(at + 1)
}

fn memchr_nth(bytes: &[u8], n: usize) -> Option<usize> {
    if n == 0 {
        return None;
    }
    bytes
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .nth(n - 1)
        .map(|(i, _)| i)
}

#[derive(Default)]
struct Window {
    /// Bytes of the end kept whole.
    keep: usize,
    tail: Vec<u8>,
    middle: Vec<u8>,
    skipped: u64,
    /// Line ends in everything that left the window (kept middle lines included), so the tail's
    /// lines keep their numbers in the input.
    lines_out: u64,
    /// The last byte that left the window: the tail starts mid-line unless it is a line end.
    last_out: Option<u8>,
}

impl Window {
    /// Keep only the last `n` lines of the tail; the lines before go the middle's way.
    fn cap_tail_lines(&mut self, n: usize) {
        let ends = self.tail.iter().filter(|&&b| b == b'\n').count();
        if ends <= n {
            return;
        }
        if let Some(at) = memchr_nth(&self.tail, ends - n) {
            let dropped: Vec<u8> = self.tail.drain(..=at).collect();
            self.keep_oom_lines(&dropped);
        }
    }

    /// A tail that starts mid-line gives that partial line the middle's way, so the kept end
    /// starts on a line of its own.
    fn align_tail(&mut self) {
        if matches!(self.last_out, None | Some(b'\n')) {
            return;
        }
        if let Some(at) = self.tail.iter().position(|&b| b == b'\n') {
            let dropped: Vec<u8> = self.tail.drain(..=at).collect();
            self.keep_oom_lines(&dropped);
        }
    }

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
        let ends = dropped.iter().filter(|&&b| b == b'\n').count() as u64;
        if let Some(&b) = dropped.last() {
            self.last_out = Some(b);
        }
        self.lines_out = self.lines_out.saturating_add(ends);
        static WORDS: OnceLock<Regex> = OnceLock::new();
        let words = WORDS.get_or_init(|| {
            // The families of words::says_oom and the engines' own wordings without them.
            Regex::new(r"(?i:out[ _-]?of[ _-]?(?:(?:device|gpu|host|video|system)[ _-]?)?(?:memory|vram)|failed to allocate|(?:cannot|can't|could not|couldn't|unable to) allocate|could not be allocated|insufficient (?:\w+ ){0,2}(?:memory|vram)|not enough (?:\w+ ){0,2}(?:memory|vram)|_ALLOC_FAILED|[A-Za-z_]*alloc[A-Za-z_]* failed|allocation (?:of [^ ]+ (?:[A-Za-z]+ )?)?failed|bad_alloc|MemoryError|oomkilled|killed process|exit code:? +137|memory usage threshold|larger than buffer maximum|greater than the maximum allowed buffer|profiled value -|no available memory|stored in kv cache|available kv cache memory|leave no gpu memory|exceed allowed memory|free memory on device|memory pressure)|OOM")
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
                kept += line.len() + 1;
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
                binary: None,
            };
        }
        let note = format!(
            "\n{SKIPPED_MARKER}{} bytes of input (kept the first {} KiB, the last {} KiB — at most {} lines each — and the lines with out-of-memory words between{})\n",
            self.skipped,
            limits.head >> 10,
            limits.tail >> 10,
            limits.lines,
            if stopped {
                format!("; stopped reading after {} MiB", limits.stop_after >> 20)
            } else {
                String::new()
            }
        );
        let head_lines = head.iter().filter(|&&b| b == b'\n').count() as u64;
        let resumed = head_lines.saturating_add(self.lines_out).saturating_add(1);
        head.extend_from_slice(note.as_bytes());
        head.extend_from_slice(&self.middle);
        head.extend_from_slice(format!("{RESUMED_MARKER}{resumed}\n").as_bytes());
        head.extend_from_slice(&self.tail);
        Bounded {
            bytes: head,
            skipped: self.skipped,
            stopped,
            binary: None,
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
        lines: 1000,
    };

    #[test]
    fn short_lines_are_capped_by_count_and_the_oom_between_kept() {
        // `yes |`: 2-byte lines; the head and tail keep 1000 lines each, not 4 KiB.
        let mut input = b"y\n".repeat(1500);
        input.extend_from_slice(b"RuntimeError: CUDA error: out of memory\n");
        input.extend_from_slice(&b"y\n".repeat(1500));
        let b = read_bounded_with(&input[..], SMALL).unwrap();
        let text = String::from_utf8_lossy(&b.bytes);
        let lines = text.lines().count();
        assert!(lines <= 2 * 1000 + 4, "{lines}");
        assert!(text.contains("CUDA error: out of memory"));
        assert!(text.ends_with("y\n"));
        assert_eq!(b.skipped, 2 * 1000);
    }

    #[test]
    fn the_kept_end_keeps_its_line_numbers() {
        let mut input = Vec::new();
        for i in 1..=5000 {
            input.extend_from_slice(format!("line {i}\n").as_bytes());
        }
        let b = read_bounded_with(&input[..], SMALL).unwrap();
        let lines: Vec<String> = String::from_utf8_lossy(&b.bytes)
            .lines()
            .map(str::to_string)
            .collect();
        let (_, ctx) = super::super::parse::scan(&lines);
        let (at, first) = ctx.resumed.unwrap();
        // The line after the resume marker is the input's line `first`.
        assert_eq!(lines[at], format!("line {first}"));
        assert_eq!(lines.last().unwrap(), "line 5000");
        assert_eq!(first + (lines.len() - at - 1), 5000);
    }

    #[test]
    fn every_oom_family_survives_the_middle() {
        for line in [
            "Error: DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")",
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
            "ggml_metal_add_buffer: buffer 'data' size 18300780544 is larger than buffer maximum of 17179869184",
            "vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
        ] {
            let mut input = b"x\n".repeat(16 << 10);
            input.extend_from_slice(line.as_bytes());
            input.push(b'\n');
            input.extend_from_slice(&b"x\n".repeat(16 << 10));
            let b = read_bounded_with(&input[..], SMALL).unwrap();
            assert!(String::from_utf8_lossy(&b.bytes).contains(line), "{line}");
        }
    }

    #[test]
    fn a_short_input_is_whole_and_an_endless_one_ends() {
        let b = read_bounded(&b"hello\nworld\n"[..]).unwrap();
        assert_eq!(b.bytes, b"hello\nworld\n");
        assert_eq!(b.skipped, 0);
        let endless = read_bounded_with(io::repeat(b'y'), SMALL).unwrap();
        assert!(endless.stopped && endless.binary.is_none());
        assert!(endless.bytes.len() < SMALL.head + 2 * SMALL.tail + 1024);
        assert!(endless.skipped > 0);
    }

    /// Counts the bytes handed out, so a test sees how far a reader went.
    struct Counted<R>(R, u64);
    impl<R: Read> Read for Counted<R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.read(buf)?;
            self.1 += n as u64;
            Ok(n)
        }
    }

    #[test]
    fn random_bytes_are_binary_and_latin1_accents_are_text() {
        // A fixed pseudo-random stream (xorshift): about a tenth control bytes, half not UTF-8.
        let mut x: u32 = 2463534242;
        let random: Vec<u8> = (0..3072)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x >> 24) as u8
            })
            .collect();
        assert!(binary_start(&random).is_some());
        let latin1 =
            b"Loading mod\xe8le... CUDA out of memory. Tried to allocate 2.00 GiB\n".repeat(40);
        assert!(binary_start(&latin1).is_none());
        assert_eq!(not_utf8(b"ok \xff\xfe ok \xc3"), 3);
    }

    #[test]
    fn binary_data_is_refused_after_the_first_look() {
        let mut zero = Counted(io::repeat(0), 0);
        let b = read_bounded(&mut zero).unwrap();
        assert_eq!(
            b.binary,
            Some(Binary {
                nul: LOOK,
                other: 0,
                looked: LOOK
            })
        );
        assert!(zero.1 <= LOOK as u64, "read {} bytes", zero.1);
        assert_eq!(
            b.binary.unwrap().to_string(),
            "binary data: 65536 NUL bytes in the first 64 KiB"
        );
        // A log with a few NULs (a crashed writer), UTF-16 and an ANSI-coloured log are text.
        let mut few = b"loading\n".repeat(100);
        few.extend_from_slice(&[0u8; 40]);
        few.extend_from_slice(b"CUDA out of memory\n");
        assert!(read_bounded(&few[..]).unwrap().binary.is_none());
        let utf16: Vec<u8> = "CUDA out of memory\n"
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        assert!(read_bounded(&utf16[..]).unwrap().binary.is_none());
        let padded: Vec<u8> = b"CUDA out of memory\n"
            .iter()
            .flat_map(|&b| [b, 0, 0])
            .collect();
        assert!(read_bounded(&padded[..]).unwrap().binary.is_none());
        assert!(read_bounded(&b"\x1b[31mERROR\x1b[0m out of memory\n"[..])
            .unwrap()
            .binary
            .is_none());
        // A short binary file says how much of it was looked at.
        let b = read_bounded(&b"\x7fELF\x02\x01\x01\x00\x00\x00\x00"[..]).unwrap();
        assert_eq!(
            b.binary.unwrap().to_string(),
            "binary data: 4 NUL and 3 other control or non-UTF-8 bytes in its 11 bytes"
        );
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
