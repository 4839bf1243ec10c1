//! The memory timeline of a watched run: bounded in size however long the run, and cut into
//! phases a person recognises (load ramp, prefill spike, steady decode growth).

use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Sample {
    pub t_ms: u64,
    /// Resident host memory of the whole process tree.
    pub host_bytes: u64,
    /// GPU memory the tree holds (NVML per-process), when NVML is there.
    pub gpu_bytes: Option<u64>,
    /// The whole device's used memory, and what other processes hold.
    pub device_used: Option<u64>,
    pub others_bytes: Option<u64>,
    pub processes: u32,
}

/// Samples kept to at most `cap`: when full, neighbours merge (keeping maxima, so no peak is lost)
/// and the effective interval doubles.
#[derive(Debug, Clone)]
pub struct Timeline {
    pub samples: Vec<Sample>,
    cap: usize,
}

fn max_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn merge(a: &Sample, b: &Sample) -> Sample {
    Sample {
        t_ms: a.t_ms,
        host_bytes: a.host_bytes.max(b.host_bytes),
        gpu_bytes: max_opt(a.gpu_bytes, b.gpu_bytes),
        device_used: max_opt(a.device_used, b.device_used),
        others_bytes: max_opt(a.others_bytes, b.others_bytes),
        processes: a.processes.max(b.processes),
    }
}

/// Half as many samples: neighbours merged, maxima kept.
fn halve(v: &[Sample]) -> Vec<Sample> {
    v.chunks(2)
        .map(|c| {
            if c.len() == 2 {
                merge(&c[0], &c[1])
            } else {
                c[0]
            }
        })
        .collect()
}

impl Timeline {
    pub fn new(cap: usize) -> Timeline {
        Timeline {
            samples: Vec::new(),
            cap: cap.max(4),
        }
    }

    pub fn push(&mut self, s: Sample) {
        if self.samples.len() >= self.cap {
            self.samples = halve(&self.samples);
        }
        self.samples.push(s);
    }

    /// At most `n` samples for a report, merged the same way.
    pub fn thinned(&self, n: usize) -> Vec<Sample> {
        let mut v = self.samples.clone();
        while v.len() > n.max(2) {
            v = halve(&v);
        }
        v
    }

    pub fn peak_host(&self) -> u64 {
        self.samples.iter().map(|s| s.host_bytes).max().unwrap_or(0)
    }

    pub fn peak_gpu(&self) -> Option<u64> {
        self.samples.iter().filter_map(|s| s.gpu_bytes).max()
    }

    pub fn peak_others(&self) -> Option<u64> {
        self.samples.iter().filter_map(|s| s.others_bytes).max()
    }

    /// The series phases are read from: GPU memory of the tree when known, else host memory.
    pub fn series(&self) -> Vec<(u64, u64)> {
        let gpu = self.samples.iter().any(|s| s.gpu_bytes.unwrap_or(0) > 0);
        self.samples
            .iter()
            // Samples after the last process ended say nothing about the run.
            .filter(|s| s.processes > 0)
            .map(|s| {
                (
                    s.t_ms,
                    if gpu {
                        s.gpu_bytes.unwrap_or(0)
                    } else {
                        s.host_bytes
                    },
                )
            })
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseKind {
    /// The first climb: weights arriving.
    Load,
    /// A sudden jump after loading: a prefill's activations.
    Spike,
    /// A steady climb: the KV cache growing token by token.
    Growth,
    /// Flat.
    Steady,
}

impl PhaseKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PhaseKind::Load => "load",
            PhaseKind::Spike => "spike",
            PhaseKind::Growth => "growth",
            PhaseKind::Steady => "steady",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Phase {
    pub kind: PhaseKind,
    pub start_ms: u64,
    pub end_ms: u64,
    pub from_bytes: u64,
    pub to_bytes: u64,
}

/// Cut a series into phases. Each step is a jump (a rise of ≥ 5 % of the peak within one
/// sample), a rise (≥ 0.5 %) or flat. The load is the first climb — jumps or rises, however fast
/// the disk — up to the first plateau of three samples or more. After it, jumps are spikes, and a
/// run of rises that climbs ≥ 5 % of the peak is growth; the rest is steady.
pub fn phases(series: &[(u64, u64)]) -> Vec<Phase> {
    let Some(peak) = series.iter().map(|s| s.1).max() else {
        return Vec::new();
    };
    if series.len() < 3 || peak < (16 << 20) {
        return Vec::new();
    }
    let (jump, small) = (peak / 20, peak / 200);
    #[derive(PartialEq, Clone, Copy)]
    enum Step {
        Jump,
        Rise,
        Flat,
    }
    let step = |a: u64, b: u64| match b.checked_sub(a) {
        Some(d) if d >= jump => Step::Jump,
        Some(d) if d >= small && d > 0 => Step::Rise,
        _ => Step::Flat,
    };
    // Runs of one kind of step: (kind, first index, last index).
    let mut runs: Vec<(Step, usize, usize)> = Vec::new();
    for i in 1..series.len() {
        let k = step(series[i - 1].1, series[i].1);
        match runs.last_mut() {
            Some(r) if r.0 == k => r.2 = i,
            _ => runs.push((k, i - 1, i)),
        }
    }
    // A flat of one or two steps inside a climb is sampling noise (uneven steps), not a pause.
    for q in 1..runs.len().saturating_sub(1) {
        if runs[q].0 == Step::Flat
            && runs[q].2 - runs[q].1 <= 2
            && runs[q - 1].0 == Step::Rise
            && runs[q + 1].0 == Step::Rise
        {
            runs[q].0 = Step::Rise;
        }
    }
    let mut merged: Vec<(Step, usize, usize)> = Vec::new();
    for r in runs {
        match merged.last_mut() {
            Some(m) if m.0 == r.0 => m.2 = r.2,
            _ => merged.push(r),
        }
    }
    let mut runs = merged;
    let phase = |kind, a: usize, b: usize| Phase {
        kind,
        start_ms: series[a].0,
        end_ms: series[b].0,
        from_bytes: series[a].1,
        to_bytes: series[b].1,
    };
    let mut out: Vec<Phase> = Vec::new();
    let mut r = 0;
    let mut seen_load = false;
    while r < runs.len() {
        let (k, a, b) = runs[r];
        let climbs =
            k == Step::Jump || (k == Step::Rise && series[b].1.saturating_sub(series[a].1) >= jump);
        if !seen_load && climbs {
            // Extend the load through climbs and short pauses until a plateau.
            let mut end = b;
            let mut q = r + 1;
            while q < runs.len() && (runs[q].0 != Step::Flat || runs[q].2 - runs[q].1 < 3) {
                end = runs[q].2;
                q += 1;
            }
            // A trailing short pause belongs to the plateau, not the climb.
            while end > b && step(series[end - 1].1, series[end].1) == Step::Flat {
                end -= 1;
            }
            out.push(phase(PhaseKind::Load, a, end));
            seen_load = true;
            while r < runs.len() && runs[r].2 <= end {
                r += 1;
            }
            if r < runs.len() && runs[r].1 < end {
                runs[r].1 = end;
            }
            continue;
        }
        let kind = match k {
            Step::Jump if seen_load => PhaseKind::Spike,
            Step::Rise if seen_load && series[b].1.saturating_sub(series[a].1) >= jump => {
                PhaseKind::Growth
            }
            _ => PhaseKind::Steady,
        };
        let p = phase(kind, a, b);
        match out.last_mut() {
            Some(prev) if prev.kind == kind && kind != PhaseKind::Spike => {
                prev.end_ms = p.end_ms;
                prev.to_bytes = p.to_bytes;
            }
            _ => out.push(p),
        }
        r += 1;
    }
    // A climb with short pauses (a staircase) is one growth: merge growth, a brief flat that
    // does not fall, and growth.
    let mut k = 0;
    while k + 2 < out.len() {
        let (a, b, c) = (out[k], out[k + 1], out[k + 2]);
        let brief = b.end_ms - b.start_ms <= 2 * (a.end_ms - a.start_ms).max(c.end_ms - c.start_ms);
        if a.kind == PhaseKind::Growth
            && b.kind == PhaseKind::Steady
            && c.kind == PhaseKind::Growth
            && b.to_bytes >= b.from_bytes
            && brief
        {
            out[k].end_ms = c.end_ms;
            out[k].to_bytes = c.to_bytes;
            out.drain(k + 1..=k + 2);
        } else {
            k += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 20;

    #[test]
    fn load_spike_growth() {
        let mut s = vec![(0, 0), (20, 400 * M), (40, 800 * M), (60, 1000 * M)];
        s.extend((0..10).map(|i| (80 + i * 20, 1000 * M)));
        s.push((300, 1400 * M));
        s.extend((1..=20).map(|i| (300 + i * 20, 1400 * M + i * 10 * M)));
        let p = phases(&s);
        let kinds: Vec<PhaseKind> = p.iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            vec![
                PhaseKind::Load,
                PhaseKind::Steady,
                PhaseKind::Spike,
                PhaseKind::Growth
            ],
            "{p:?}"
        );
        assert_eq!(p[0].to_bytes, 1000 * M);
    }

    #[test]
    fn any_series_is_read_without_panicking() {
        // Noisy, falling and repeating samples (a process tree whose members come and go): the
        // phases are whatever they are, but reading them never underflows.
        let mut x: u64 = 7;
        for len in [3usize, 17, 64, 257] {
            let s: Vec<(u64, u64)> = (0..len as u64)
                .map(|i| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (i * 20, (x >> 40) % (2000 * M))
                })
                .collect();
            let _ = phases(&s);
            let falling: Vec<(u64, u64)> = (0..len as u64)
                .map(|i| (i * 20, (len as u64 - i) * 50 * M))
                .collect();
            let _ = phases(&falling);
        }
        // Rising, one sharp drop (a member of the tree exits), rising again: the drop is taken
        // as noise inside one rise that ends lower than it began (it underflowed in watch_cli).
        let mut s: Vec<(u64, u64)> = (0..3).map(|i| (i * 20, 600 * M + i * 10 * M)).collect();
        s.extend((0..3).map(|i| (60 + i * 20, 100 * M + i * 10 * M)));
        s.extend((0..5).map(|i| (120 + i * 20, 120 * M)));
        let _ = phases(&s);
    }

    #[test]
    fn a_slow_load_from_disk_is_still_the_load() {
        // 1 GiB arriving in 2 % steps (a disk at a steady rate), a pause, then decode growth.
        let mut s: Vec<(u64, u64)> = (0..=50).map(|i| (i * 20, i * 20 * M)).collect();
        s.extend((1..=10).map(|i| (1000 + i * 20, 1000 * M)));
        s.extend((1..=30).map(|i| (1200 + i * 20, 1000 * M + i * 8 * M)));
        let kinds: Vec<PhaseKind> = phases(&s).iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            vec![PhaseKind::Load, PhaseKind::Steady, PhaseKind::Growth]
        );
    }

    #[test]
    fn a_bounded_timeline_keeps_its_peak() {
        let mut t = Timeline::new(64);
        for i in 0..10_000u64 {
            t.push(Sample {
                t_ms: i,
                host_bytes: if i == 7777 { 9 << 30 } else { i },
                ..Default::default()
            });
        }
        assert!(t.samples.len() <= 64);
        assert_eq!(t.peak_host(), 9 << 30);
        assert!(t.thinned(10).len() <= 10);
    }
}
