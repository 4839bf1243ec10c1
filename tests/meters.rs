//! The host meters, measured in a test binary of their own: the counting allocator is global, so
//! these checks run one after the other in a single test while nothing else allocates.

use std::time::Duration;

use candle_core::{DType, Device, Tensor};
use llm_oom::meter::device::{Ballast, DeviceMeter};
use llm_oom::meter::host::{self, Part};
use llm_oom::meter::sampler::{Sampler, MAX_SAMPLES};

#[global_allocator]
static ALLOC: host::CountingAlloc = host::CountingAlloc;

const MIB: u64 = 1 << 20;

#[test]
fn the_host_meters() {
    the_meter_is_exact_on_known_allocations();
    crossing_the_limit_is_recorded_with_its_size_and_part();
    the_cpu_device_meter_reads_the_counting_allocator();
    the_sampler_sees_a_transient_stops_and_stays_bounded();
}

/// Equal but for what the test harness's own threads may allocate meanwhile (seen once: 900 B).
fn near(a: u64, b: u64) -> bool {
    a.abs_diff(b) < 4096
}

fn the_meter_is_exact_on_known_allocations() {
    assert!(host::installed());
    let before = host::current();
    host::reset_peak();
    let block = vec![7u8; 64 << 20];
    let during = host::current();
    assert!(near(during - before, 64 * MIB), "{}", during - before);
    assert!(near(host::peak(), during));
    drop(block);
    assert!(near(host::current(), before));
    assert!(near(host::peak(), during), "the peak stays until reset");
    host::reset_peak();
    assert!(near(host::peak(), before));
}

fn crossing_the_limit_is_recorded_with_its_size_and_part() {
    host::set_limit(Some(host::current() + 32 * MIB));
    host::set_part(Part::KvCache);
    let small = vec![1u8; 1 << 20];
    assert_eq!(host::crossing(), None);
    let held = host::current();
    let big = vec![1u8; 48 << 20];
    let c = host::crossing().expect("48 MiB crosses a 32 MiB headroom");
    assert_eq!(
        (c.requested, c.held, c.part),
        (48 * MIB, held, Part::KvCache)
    );
    drop((small, big));
    host::set_limit(None);
    host::set_part(Part::Other);
    assert_eq!(host::crossing(), None);
    assert!(host::rss_bytes().is_some_and(|r| r > 0));
    assert!(host::host_memory().is_some_and(|(t, a)| t >= a && a > 0));
}

fn the_cpu_device_meter_reads_the_counting_allocator() {
    let m = DeviceMeter::for_device(&Device::Cpu).expect("installed in this binary");
    assert_eq!(m.source().as_str(), "host-allocator");
    m.reset_peak();
    let before = m.read();
    let t = Tensor::zeros((1024, 1024), DType::F32, &Device::Cpu).expect("4 MiB");
    let r = m.read();
    assert!(r.in_use >= before.in_use + 4 * MIB && r.in_use < before.in_use + 4 * MIB + 4096);
    drop(t);
    assert_eq!(m.read().in_use, before.in_use);
    assert_eq!(m.largest_block(MIB, 1 << 30), None);
    assert_eq!(Ballast::hold(&m, 1 << 30).map(|b| b.bytes), Ok(0));
}

fn the_sampler_sees_a_transient_stops_and_stays_bounded() {
    let s = Sampler::start(Duration::from_millis(2), None);
    std::thread::sleep(Duration::from_millis(20));
    let block = vec![1u8; 96 << 20];
    std::thread::sleep(Duration::from_millis(30));
    drop(block);
    std::thread::sleep(Duration::from_millis(20));
    let t = s.finish();
    assert!(t.len() >= 5, "{}", t.len());
    let low = t.first().map_or(0, |x| x.host_heap_bytes);
    let high = t.iter().map(|x| x.host_heap_bytes).max().unwrap_or(0);
    assert!(
        high >= low + 96 * MIB,
        "the 96 MiB block was seen: {low} → {high}"
    );
    assert!(
        t.last().is_some_and(|x| x.host_heap_bytes < high),
        "and its release"
    );
    assert!(t.windows(2).all(|w| w[0].t_ms <= w[1].t_ms));
    // A long run keeps at most MAX_SAMPLES, and the thread is gone after finish.
    let s = Sampler::start(Duration::from_micros(10), None);
    std::thread::sleep(Duration::from_millis(200));
    assert!(s.finish().len() <= MAX_SAMPLES + 1);
}
