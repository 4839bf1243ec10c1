//! Any bytes as a PyTorch allocator snapshot pickle: the bounded reader refuses them or gives a
//! `Snapshot`, and the attribution of its live bytes runs without a panic or an overflow.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llm_oom::snapshot::attribute::attribute;
use llm_oom::snapshot::parse_snapshot;

fuzz_target!(|data: &[u8]| {
    if let Ok(snap) = parse_snapshot(data) {
        let report = attribute(&snap);
        let _ = report.bytes_of(|_| true);
    }
});
