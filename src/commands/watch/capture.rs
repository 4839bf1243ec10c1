//! A bounded copy of the watched program's output: its first bytes and its last bytes (an OOM is
//! near the end, or it is a worker's early death the head keeps), the lines around every
//! out-of-memory marker wherever they were (so megabytes of output after an OOM do not push it
//! out), plus when an OOM first showed.

const HEAD: usize = 1 << 20;
const TAIL: usize = 6 << 20;
/// Bytes kept before a marker line (the traceback that leads to it) and after it.
const BEFORE: usize = 8 << 10;
const AFTER: usize = 2 << 10;
/// At most this many bytes of excerpts around markers.
const EXCERPTS: usize = 1 << 20;
const MARKERS: &[&str] = &[
    "out of memory",
    "OutOfMemoryError",
    "OOMKilled",
    "Killed process",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "ALLOC_FAILED",
];

#[derive(Debug, Default)]
pub struct Capture {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    pub total: u64,
    /// Milliseconds into the run when output first looked like an out-of-memory error.
    pub oom_at_ms: Option<u64>,
    /// The last `BEFORE` bytes of output, for the context of a marker at a chunk's start.
    recent: Vec<u8>,
    /// (offset in the output, text) of the lines around each marker line.
    excerpts: Vec<(u64, Vec<u8>)>,
    excerpt_bytes: usize,
}

impl Capture {
    pub fn add(&mut self, chunk: &[u8], t_ms: u64) {
        let offset = self.total;
        self.total += chunk.len() as u64;
        let text = String::from_utf8_lossy(chunk);
        if MARKERS.iter().any(|m| text.contains(m)) {
            self.oom_at_ms.get_or_insert(t_ms);
            self.keep_excerpts(chunk, offset);
        }
        self.recent
            .extend_from_slice(&chunk[chunk.len().saturating_sub(BEFORE)..]);
        let excess = self.recent.len().saturating_sub(BEFORE);
        self.recent.drain(..excess);
        let room = HEAD.saturating_sub(self.head.len());
        let (h, rest) = chunk.split_at(room.min(chunk.len()));
        self.head.extend_from_slice(h);
        self.tail.extend(rest.iter().copied());
        while self.tail.len() > TAIL {
            let excess = self.tail.len() - TAIL;
            self.tail.drain(..excess);
        }
    }

    /// The lines around each marker line of `chunk` (which starts at `offset` in the output).
    fn keep_excerpts(&mut self, chunk: &[u8], offset: u64) {
        let mut start = 0;
        for line in chunk.split_inclusive(|&b| b == b'\n') {
            let end = start + line.len();
            let marked = MARKERS
                .iter()
                .any(|m| String::from_utf8_lossy(line).contains(m));
            if marked && self.excerpt_bytes < EXCERPTS {
                let mut before: Vec<u8> = if start < BEFORE {
                    let from_recent = BEFORE - start;
                    let r = &self.recent[self.recent.len().saturating_sub(from_recent)..];
                    [r, &chunk[..start]].concat()
                } else {
                    chunk[start - BEFORE..start].to_vec()
                };
                // start the context at a whole line
                if let Some(nl) = before.iter().position(|&b| b == b'\n') {
                    before.drain(..=nl);
                }
                let after = &chunk[end..chunk.len().min(end + AFTER)];
                let cut = after.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                let text = [&before[..], line, &after[..cut]].concat();
                let at = (offset + start as u64).saturating_sub(before.len() as u64);
                self.excerpt_bytes += text.len();
                self.excerpts.push((at, text));
            }
            start = end;
        }
    }

    /// The kept text, with a marker line where bytes were dropped, and the lines around any
    /// out-of-memory marker that fell between the head and the tail.
    pub fn text(&self) -> Vec<u8> {
        let kept = self.head.len() + self.tail.len();
        let mut out = self.head.clone();
        if (kept as u64) < self.total {
            let tail_start = self.total - self.tail.len() as u64;
            out.extend_from_slice(
                format!(
                    "\n[llm-oom: {} bytes of output not kept]\n",
                    self.total - kept as u64
                )
                .as_bytes(),
            );
            let dropped = self
                .excerpts
                .iter()
                .filter(|(at, _)| *at >= self.head.len() as u64 && *at < tail_start);
            for (_, text) in dropped {
                out.extend_from_slice(text);
                out.extend_from_slice(b"[llm-oom: output not kept]\n");
            }
        }
        out.extend(self.tail.iter().copied());
        out
    }

    pub fn kept(&self) -> u64 {
        (self.head.len() + self.tail.len()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_head_and_tail_within_bounds() {
        let mut c = Capture::default();
        for i in 0..20_000 {
            c.add(format!("line {i} {}\n", "x".repeat(500)).as_bytes(), i);
        }
        c.add(b"torch.OutOfMemoryError: CUDA out of memory.\n", 99_999);
        assert!(c.kept() <= (HEAD + TAIL) as u64);
        let t = String::from_utf8_lossy(&c.text()).into_owned();
        assert!(
            t.starts_with("line 0 ")
                && t.contains("not kept")
                && t.ends_with("CUDA out of memory.\n")
        );
        assert_eq!(c.oom_at_ms, Some(99_999));
    }

    #[test]
    fn an_oom_followed_by_megabytes_of_output_is_kept() {
        let mut c = Capture::default();
        for i in 0..2_000 {
            c.add(format!("loading {i} {}\n", "x".repeat(999)).as_bytes(), 0);
        }
        c.add(
            b"Traceback (most recent call last):\n  File \"x.py\"\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n",
            5,
        );
        for i in 0..10_000 {
            c.add(
                format!("after {i} {}\n", "y".repeat(999)).as_bytes(),
                10 + i,
            );
        }
        let t = String::from_utf8_lossy(&c.text()).into_owned();
        assert!(c.total > 9 << 20 && t.len() < 8 << 20);
        assert!(
            t.contains(
                "Traceback (most recent call last):\n  File \"x.py\"\ntorch.OutOfMemoryError"
            ),
            "{}",
            &t[..2000]
        );
        assert_eq!(c.oom_at_ms, Some(5));
    }
}
