//! Host memory: a counting global allocator (current and peak bytes the process holds on the heap,
//! resettable per stage) and the resident set size from /proc.
//!
//! The binary installs [`CountingAlloc`]; the probe reads it to measure CPU stages exactly, and
//! sets a *limit* to emulate a smaller card on the CPU: the first allocation that crosses the limit
//! is recorded (its size, what was held before it, and which part of the model was allocating), so
//! the stage can be reported as an emulated out-of-memory at that allocation. A hard ceiling far
//! above the limit refuses allocations outright, so an emulation never exhausts the real machine.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

static CURRENT: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);
static LIMIT: AtomicU64 = AtomicU64::new(0);
static CEILING: AtomicU64 = AtomicU64::new(0);
static CROSS_REQUESTED: AtomicU64 = AtomicU64::new(0);
static CROSS_HELD: AtomicU64 = AtomicU64::new(0);
static CROSS_PART: AtomicU8 = AtomicU8::new(0);
static PART: AtomicU8 = AtomicU8::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Which part of the workload is allocating (set by the probe around each piece).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    Other,
    Weights,
    KvCache,
    Activations,
}

impl Part {
    fn from_u8(v: u8) -> Part {
        match v {
            1 => Part::Weights,
            2 => Part::KvCache,
            3 => Part::Activations,
            _ => Part::Other,
        }
    }
    fn as_u8(self) -> u8 {
        match self {
            Part::Other => 0,
            Part::Weights => 1,
            Part::KvCache => 2,
            Part::Activations => 3,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Part::Other => "other",
            Part::Weights => "weights",
            Part::KvCache => "kv_cache",
            Part::Activations => "activations",
        }
    }
}

/// The allocator: `System`, counted. Install it with `#[global_allocator]`.
pub struct CountingAlloc;

fn grew(size: u64) -> bool {
    let now = CURRENT.fetch_add(size, Relaxed) + size;
    let ceiling = CEILING.load(Relaxed);
    if ceiling != 0 && now > ceiling {
        CURRENT.fetch_sub(size, Relaxed);
        return false;
    }
    PEAK.fetch_max(now, Relaxed);
    let limit = LIMIT.load(Relaxed);
    if limit != 0
        && now > limit
        && CROSS_REQUESTED
            .compare_exchange(0, size, Relaxed, Relaxed)
            .is_ok()
    {
        CROSS_HELD.store(now - size, Relaxed);
        CROSS_PART.store(PART.load(Relaxed), Relaxed);
    }
    true
}

// SAFETY: every call is forwarded to `System` with the caller's layout; the counters are atomics
// and never allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        INSTALLED.store(true, Relaxed);
        if !grew(layout.size() as u64) {
            return std::ptr::null_mut();
        }
        let p = System.alloc(layout);
        if p.is_null() {
            CURRENT.fetch_sub(layout.size() as u64, Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        INSTALLED.store(true, Relaxed);
        if !grew(layout.size() as u64) {
            return std::ptr::null_mut();
        }
        let p = System.alloc_zeroed(layout);
        if p.is_null() {
            CURRENT.fetch_sub(layout.size() as u64, Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        CURRENT.fetch_sub(layout.size() as u64, Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (old, new) = (layout.size() as u64, new_size as u64);
        if new > old && !grew(new - old) {
            return std::ptr::null_mut();
        }
        let p = System.realloc(ptr, layout, new_size);
        if p.is_null() {
            if new > old {
                CURRENT.fetch_sub(new - old, Relaxed);
            }
        } else if new < old {
            CURRENT.fetch_sub(old - new, Relaxed);
        }
        p
    }
}

/// Whether the counting allocator is this process's global allocator (it has seen an allocation).
pub fn installed() -> bool {
    INSTALLED.load(Relaxed)
}

/// Heap bytes held now.
pub fn current() -> u64 {
    CURRENT.load(Relaxed)
}

/// Most heap bytes held since the last [`reset_peak`].
pub fn peak() -> u64 {
    PEAK.load(Relaxed)
}

/// Start a new high-water mark at what is held now.
pub fn reset_peak() {
    PEAK.store(CURRENT.load(Relaxed), Relaxed);
}

/// Tag the allocations that follow as `part`.
pub fn set_part(part: Part) {
    PART.store(part.as_u8(), Relaxed);
}

/// The first allocation that took the heap past the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Crossing {
    /// Size of the allocation that crossed.
    pub requested: u64,
    /// Bytes held just before it.
    pub held: u64,
    pub part: Part,
}

/// Emulate a card of `limit` bytes (`None`: no limit). Clears any recorded crossing. Allocations
/// that would take the heap past twice the limit plus 256 MiB are refused (the process aborts with
/// Rust's "memory allocation of N bytes failed", which the probe's parent reads).
pub fn set_limit(limit: Option<u64>) {
    let l = limit.unwrap_or(0);
    LIMIT.store(l, Relaxed);
    CEILING.store(
        if l == 0 {
            0
        } else {
            l.saturating_mul(2).saturating_add(256 << 20)
        },
        Relaxed,
    );
    clear_crossing();
}

/// The limit set by [`set_limit`].
pub fn limit() -> Option<u64> {
    Some(LIMIT.load(Relaxed)).filter(|&l| l != 0)
}

pub fn clear_crossing() {
    CROSS_REQUESTED.store(0, Relaxed);
    CROSS_HELD.store(0, Relaxed);
}

/// The recorded crossing of the limit, if any since the last clear.
pub fn crossing() -> Option<Crossing> {
    let requested = CROSS_REQUESTED.load(Relaxed);
    (requested != 0).then(|| Crossing {
        requested,
        held: CROSS_HELD.load(Relaxed),
        part: Part::from_u8(CROSS_PART.load(Relaxed)),
    })
}

/// Resident set size of this process, from /proc/self/statm (None where there is no /proc).
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// `MemTotal` and `MemAvailable` of /proc/meminfo, in bytes.
pub fn host_memory() -> Option<(u64, u64)> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = info.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}
