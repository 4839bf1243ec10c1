//! PyTorch's out-of-memory messages: the current format (2.1+, CUDA, HIP and XPU alike, with the
//! 2.1 `capacty` misspelling), the old `(GPU 0; T total capacity; A already allocated; …)`
//! format, MPS's, and the memory summary table it prints on request.

use std::sync::OnceLock;

use regex::Regex;

use super::parse::{
    cap_size, cap_u64, contains_caseless, re, re_built, Event, Scan, TorchOom, SIZE,
};

/// Read a PyTorch message at line `i`; true when the line was one.
pub fn read(lines: &[String], i: usize, st: &mut Scan) -> bool {
    static HEAD: OnceLock<Regex> = OnceLock::new();
    let line = &lines[i];
    // The figures alone count too: a paste that starts at `Tried to allocate X (GPU 0; …` or
    // `Tried to allocate X. GPU 0 has a total capacity` lost only the head (fastmri-238), also
    // when a narrow column wrapped it after `GPU 0` (infinity-483: "CUDA" left on the line above
    // beside the logger's `batch_handler.py:574`).
    let head = re_built(&HEAD, || {
        format!(
            r"(?:CUDA|HIP|XPU|MPS backend) out of memory|OutOfMemoryError|(?i:cuda out of memory)|Tried to allocate {SIZE}(?: \(GPU \d+;|\. GPU \d+(?: has a total capac|\s*$))|^\s*\(GPU \d+; {SIZE} total capacity; {SIZE} already allocated;"
        )
    });
    // Other libraries name their own OutOfMemoryError (Ray's is the host's): not PyTorch's.
    let foreign = line.contains("ray.exceptions.OutOfMemoryError");
    // Each of the head's alternatives holds one of these words: a line with none is not it,
    // and the cheap look spares the regex most lines.
    let may_be_head = line.contains("Tried to allocate")
        || line.contains("OutOfMemoryError")
        || line.contains("total capacity")
        || contains_caseless(line, "out of memory");
    if may_be_head && head.is_match(line) && !line.contains("warming up sampler") && !foreign {
        // IPython / Jupyter head a traceback with the exception's name; the message itself
        // comes at its end (unsloth-465): the head is not a second error.
        if ipython_head(line) {
            // A paste cut before the message still names the exception (inseq-286): an OOM
            // without figures, counted only when no message follows.
            st.add_fallback(i + 1, line, Event::TorchOom(TorchOom::default()));
            return true;
        }
        message(lines, i, st);
        return true;
    }
    summary(lines, i, st)
}

/// `OutOfMemoryError                          Traceback (most recent call last)`: the first line
/// of a traceback as IPython prints it, the exception's name without its message.
fn ipython_head(line: &str) -> bool {
    line.trim_end()
        .ends_with("Traceback (most recent call last)")
        && !line.contains("allocate")
}

/// The message can be wrapped when pasted: read it with the next lines.
fn message(lines: &[String], i: usize, st: &mut Scan) {
    let n = i + 1;
    // Eight lines: a logger that wraps the message into a narrow column (rich's, infinity-483)
    // spreads it over as many.
    let end = lines.len().min(i + 8);
    let window_lines = &lines[i..end];
    // A message seen before (a log of many runs, a message repeated by each worker) has the
    // same figures: they are a pure function of its eight lines' text, remembered by it.
    let key = super::parse::lines_hash(window_lines);
    let known = match st.memo.torch_messages.get(&key) {
        Some((j, len, t))
            if *len == window_lines.len()
                && lines.get(*j..j.saturating_add(*len)) == Some(window_lines) =>
        {
            Some(t.clone())
        }
        _ => None,
    };
    let t = match known {
        Some(t) => t,
        None => {
            let window = one_message(window_lines);
            let exceeds = window.contains("would exceed allowed memory");
            match exceeds.then(|| super::engines::allowed_memory_figures(lines, i, None)) {
                // Figures read from the lines around: not a function of the window alone.
                Some(Some(t)) => t,
                _ => {
                    let t = if window.contains("MPS backend out of memory") {
                        mps(&window)
                    } else {
                        current_or_old(&window)
                    };
                    // Bounded memory: at most 4,096 messages are kept.
                    if !exceeds && st.memo.torch_messages.len() < 4096 {
                        st.memo
                            .torch_messages
                            .entry(key)
                            .or_insert_with(|| (i, window_lines.len(), t.clone()));
                    }
                    t
                }
            }
        }
    };
    // The exception line and its repetition in a traceback summary are one event.
    let repeat = st.last_torch_line.is_some_and(|l| n - l <= 3)
        || st.findings.last().is_some_and(
            |f| matches!(&f.event, Event::TorchOom(prev) if *prev == t && n - f.line <= 40),
        );
    if !repeat {
        st.add(n, &lines[i], Event::TorchOom(t));
    }
    st.last_torch_line = Some(n);
}

/// The message's lines joined, cut before a second `Tried to allocate`: a log that repeats the
/// message (TGI's router echoes it; a retry prints it again) must not lend the first one the
/// second's process list (tgi-1356 counted its own 79 GiB twice, vllm-7721 another run's pid).
fn one_message(lines: &[String]) -> String {
    const ASK: &str = "Tried to allocate";
    // A wrap leaves the line's trailing space beside the joining one ("total capacity; \n23.14
    // GiB already allocated": transformers-starcoder-46): runs of spaces are one.
    let mut joined = String::with_capacity(lines.iter().map(String::len).sum());
    for word in lines.iter().flat_map(|l| l.split_whitespace()) {
        if !joined.is_empty() {
            joined.push(' ');
        }
        joined.push_str(word);
    }
    let second = joined.find(ASK).and_then(|first| {
        joined[first + ASK.len()..]
            .find(ASK)
            .map(|k| first + ASK.len() + k)
    });
    if let Some(cut) = second {
        joined.truncate(cut);
    }
    joined
}

fn backend(window: &str) -> Option<&'static str> {
    if window.contains("HIP out of memory") {
        Some("hip")
    } else if window.contains("XPU out of memory") {
        Some("xpu")
    } else {
        None
    }
}

/// The request; a size too large for a byte count is kept as written.
fn request(window: &str, t: &mut TorchOom) {
    static ALLOC: OnceLock<Regex> = OnceLock::new();
    let alloc = re_built(&ALLOC, || format!(r"Tried to allocate {SIZE}"));
    if let Some(c) = alloc.captures(window) {
        t.requested = cap_size(&c, 1);
        if t.requested.is_none() {
            t.requested_as_written = c
                .get(0)
                .map(|m| m.as_str().trim_start_matches("Tried to allocate ").into());
        }
    }
}

fn current_or_old(window: &str) -> TorchOom {
    static TOTAL_NEW: OnceLock<Regex> = OnceLock::new();
    static TOTAL_OLD: OnceLock<Regex> = OnceLock::new();
    static TOTAL_CACHED: OnceLock<Regex> = OnceLock::new();
    let total_new = re_built(&TOTAL_NEW, || {
        format!(r"GPU (\d+) has a total capac(?:i)?ty of {SIZE} of which {SIZE} is free")
    });
    let total_old = re_built(&TOTAL_OLD, || {
        format!(
            r"\(GPU (\d+); {SIZE} total capacity; {SIZE} already allocated; {SIZE} free;(?: {SIZE} allowed;)? {SIZE} reserved in total by PyTorch\)"
        )
    });
    // PyTorch ≤ 1.3: `(GPU 0; 3.95 GiB total capacity; 1.62 GiB already allocated; 23.00 MiB
    // free; 9.10 MiB cached)` — "cached" is the reserve beyond what is allocated (yolov3-4).
    let total_cached = re_built(&TOTAL_CACHED, || {
        format!(
            r"\(GPU (\d+); {SIZE} total capacity; {SIZE} already allocated; {SIZE} free; {SIZE} cached\)"
        )
    });
    let mut t = TorchOom {
        backend: backend(window),
        ..Default::default()
    };
    request(window, &mut t);
    if let Some(c) = total_new.captures(window) {
        t.gpu = cap_u64(&c, 1).map(|g| g as u32);
        t.total = cap_size(&c, 2);
        t.free = cap_size(&c, 4);
    } else if let Some(c) = total_old.captures(window) {
        t.gpu = cap_u64(&c, 1).map(|g| g as u32);
        t.total = cap_size(&c, 2);
        t.allocated_by_pytorch = cap_size(&c, 4);
        t.free = cap_size(&c, 6);
        t.allowed = cap_size(&c, 8);
        t.reserved_total = cap_size(&c, 10);
        if let (Some(r), Some(a)) = (t.reserved_total, t.allocated_by_pytorch) {
            t.reserved_unallocated = Some(r.saturating_sub(a));
        }
    } else if let Some(c) = total_cached.captures(window) {
        t.gpu = cap_u64(&c, 1).map(|g| g as u32);
        t.total = cap_size(&c, 2);
        t.allocated_by_pytorch = cap_size(&c, 4);
        t.free = cap_size(&c, 6);
        t.reserved_unallocated = cap_size(&c, 8);
        if let (Some(a), Some(u)) = (t.allocated_by_pytorch, t.reserved_unallocated) {
            t.reserved_total = Some(a.saturating_add(u));
        }
    }
    details(window, &mut t);
    t
}

/// The figures after the capacity: processes, this process, the cap, PyTorch's own split.
fn details(window: &str, t: &mut TorchOom) {
    static PROCESS: OnceLock<Regex> = OnceLock::new();
    static THIS: OnceLock<Regex> = OnceLock::new();
    static ALLOWED: OnceLock<Regex> = OnceLock::new();
    static BY_TORCH: OnceLock<Regex> = OnceLock::new();
    static POOLS: OnceLock<Regex> = OnceLock::new();
    static UNALLOC: OnceLock<Regex> = OnceLock::new();
    let process = re_built(&PROCESS, || {
        format!(r"Process (\d+) has {SIZE} memory in use")
    });
    let this = re_built(&THIS, || format!(r"this process has {SIZE} memory in use"));
    let allowed = re_built(&ALLOWED, || format!(r"{SIZE} allowed;"));
    let by_torch = re_built(&BY_TORCH, || {
        format!(r"Of the allocated memory {SIZE} is allocated by PyTorch")
    });
    let pools = re_built(&POOLS, || {
        format!(r"with {SIZE} allocated in private pools")
    });
    let unalloc = re_built(&UNALLOC, || {
        format!(r"{SIZE} is reserved by PyTorch but unallocated")
    });
    for c in process.captures_iter(window) {
        let (Some(pid), Some(bytes)) = (cap_u64(&c, 1), cap_size(&c, 2)) else {
            continue;
        };
        let pid = u32::try_from(pid).unwrap_or(u32::MAX);
        if !t.processes.iter().any(|p| p.0 == pid) {
            t.processes.push((pid, bytes));
        }
    }
    t.this_process = this.captures(window).and_then(|c| cap_size(&c, 1));
    if t.allowed.is_none() {
        t.allowed = allowed.captures(window).and_then(|c| cap_size(&c, 1));
    }
    if t.allocated_by_pytorch.is_none() {
        t.allocated_by_pytorch = by_torch.captures(window).and_then(|c| cap_size(&c, 1));
    }
    t.private_pools = pools.captures(window).and_then(|c| cap_size(&c, 1));
    if t.reserved_unallocated.is_none() {
        t.reserved_unallocated = unalloc.captures(window).and_then(|c| cap_size(&c, 1));
    }
    // "this process has 0 bytes memory in use" beside tensors PyTorch holds is a figure the
    // driver could not give (WSL, Windows, some containers), not zero: read it as not printed
    // (diffusers-regional-prompting-flux-13: 0 bytes "in use" with 23.03 GiB allocated).
    if t.this_process == Some(0) && t.allocated_by_pytorch.is_some_and(|a| a > 0) {
        t.this_process = None;
    }
}

/// A size as PyTorch's MPS allocator prints it: `format_size` divides by 1024, 1024² and 1024³
/// and labels them KB, MB and GB, so `1.00 GB` is 1 GiB.
fn mps_size(c: &regex::Captures, i: usize) -> Option<u64> {
    let unit = match c.get(i + 1)?.as_str() {
        "KB" => "KiB",
        "MB" => "MiB",
        "GB" => "GiB",
        "TB" => "TiB",
        u => u,
    };
    super::parse::size(c.get(i)?.as_str(), unit)
}

/// `MPS backend out of memory (MPS allocated: A, other allocations: O, max allowed: M). Tried to
/// allocate R on private pool.` — the limit is the card; both allocations are this process's.
/// Its sizes are binary under decimal labels (`mps_size`).
fn mps(window: &str) -> TorchOom {
    static MPS: OnceLock<Regex> = OnceLock::new();
    let m = re_built(&MPS, || {
        format!(r"MPS allocated: {SIZE}, other allocations: {SIZE}, max allowed: {SIZE}")
    });
    let mut t = TorchOom {
        backend: Some("mps"),
        ..Default::default()
    };
    request(window, &mut t);
    static ALLOC: OnceLock<Regex> = OnceLock::new();
    let alloc = re_built(&ALLOC, || format!(r"Tried to allocate {SIZE}"));
    if let Some(r) = alloc.captures(window).and_then(|c| mps_size(&c, 1)) {
        t.requested = Some(r);
    }
    if let Some(c) = m.captures(window) {
        let (a, o, max) = (mps_size(&c, 1), mps_size(&c, 3), mps_size(&c, 5));
        t.allocated_by_pytorch = a;
        t.total = max;
        t.this_process = a.zip(o).map(|(a, o)| a.saturating_add(o));
        t.free = max.zip(t.this_process).map(|(m, u)| m.saturating_sub(u));
    }
    t
}

/// `torch.cuda.memory_summary()` after an OOM: the `CUDA OOMs: N` row starts it; allocated and
/// reserved are read from the rows below.
fn summary(lines: &[String], i: usize, st: &mut Scan) -> bool {
    static OOMS: OnceLock<Regex> = OnceLock::new();
    static ROW: OnceLock<Regex> = OnceLock::new();
    // The regex's own literal first: most lines have none, and a capture search costs more.
    if !lines[i].contains("CUDA OOMs:") {
        return false;
    }
    let ooms = re(&OOMS, r"CUDA OOMs:\s*(\d+)");
    let Some(c) = ooms.captures(&lines[i]) else {
        return false;
    };
    let count = cap_u64(&c, 1);
    if count == Some(0) {
        return true;
    }
    let row = re_built(&ROW, || {
        format!(r"^\|\s*(Allocated memory|GPU reserved memory)\s*\|\s*{SIZE}")
    });
    let (mut allocated, mut reserved) = (None, None);
    for l in &lines[i..lines.len().min(i + 30)] {
        if let Some(r) = row.captures(l) {
            let v = cap_size(&r, 2);
            match r.get(1).map(|m| m.as_str()) {
                Some("Allocated memory") => allocated = allocated.or(v),
                _ => reserved = reserved.or(v),
            }
        }
    }
    st.add(
        i + 1,
        &lines[i],
        Event::TorchMemorySummary {
            ooms: count,
            allocated,
            reserved,
        },
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mps_sizes_are_binary_under_decimal_labels() {
        let t = mps("RuntimeError: MPS backend out of memory (MPS allocated: 1.00 GB, other allocations: 512.00 MB, max allowed: 9.07 GB). Tried to allocate 56.25 MB on private pool.");
        const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
        assert_eq!(t.allocated_by_pytorch, Some(1 << 30));
        assert_eq!(t.this_process, Some((1 << 30) + (512 << 20)));
        assert_eq!(t.total, Some((9.07 * GIB) as u64));
        assert_eq!(t.requested, Some((56.25 * 1024.0 * 1024.0) as u64));
    }
}
