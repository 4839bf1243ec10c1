//! A bounded copy of the watched program's output: its first bytes and its last bytes (an OOM is
//! near the end, or it is a worker's early death the head keeps), plus when an OOM first showed.

const HEAD: usize = 1 << 20;
const TAIL: usize = 6 << 20;
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
}

impl Capture {
    pub fn add(&mut self, chunk: &[u8], t_ms: u64) {
        self.total += chunk.len() as u64;
        if self.oom_at_ms.is_none() {
            let text = String::from_utf8_lossy(chunk);
            if MARKERS.iter().any(|m| text.contains(m)) {
                self.oom_at_ms = Some(t_ms);
            }
        }
        let room = HEAD.saturating_sub(self.head.len());
        let (h, rest) = chunk.split_at(room.min(chunk.len()));
        self.head.extend_from_slice(h);
        self.tail.extend(rest.iter().copied());
        while self.tail.len() > TAIL {
            let excess = self.tail.len() - TAIL;
            self.tail.drain(..excess);
        }
    }

    /// The kept text, with a marker line where bytes were dropped.
    pub fn text(&self) -> Vec<u8> {
        let kept = self.head.len() + self.tail.len();
        let mut out = self.head.clone();
        if (kept as u64) < self.total {
            out.extend_from_slice(
                format!(
                    "\n[llm-oom: {} bytes of output not kept]\n",
                    self.total - kept as u64
                )
                .as_bytes(),
            );
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
}
