//! The driver's compilation of candle's kernels, done at once and in parallel.
//!
//! candle ships its CUDA kernels as PTX, and the driver compiles a module for the card the first
//! time it is loaded, then keeps the result in its compute cache (`~/.nv/ComputeCache`). candle
//! loads each module when a kernel of it is first called, one after another, and holds its module
//! table's lock while the driver compiles: on a fresh H100 machine that was 12–22 s of the first
//! `diagnose --engine candle` (docs/accuracy.md), against 0.3 s once the cache held them.
//!
//! `prewarm` loads every module a decoder calls, each on its own thread, before the model loads.
//! The driver compiles them side by side and caches them; candle's own loads then read the cache.
//! With the cache off (`CUDA_CACHE_DISABLE=1`) nothing would be kept, so nothing is done.

use std::time::Duration;

use candle_core::Device;

/// What `prewarm` did: how many modules it loaded and how long the slowest path took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prewarmed {
    pub modules: usize,
    pub elapsed: Duration,
}

/// Whether the driver keeps what it compiles (`CUDA_CACHE_DISABLE=1` turns its cache off).
pub fn cache_on(disable: Option<&std::ffi::OsStr>) -> bool {
    disable.is_none_or(|v| v.to_str().map(str::trim) != Some("1"))
}

/// Load candle's modules a decoder calls (with `quantized`, the quantized matmuls' too) and the
/// runtime's own, in parallel, so the driver compiles and caches them now. `None` on the CPU, with
/// the driver's cache off, or without the `cuda` feature. A module that fails to load here is left
/// to candle, which loads it again when called and reports the error there.
pub fn prewarm(device: &Device, quantized: bool) -> Option<Prewarmed> {
    if !cache_on(std::env::var_os("CUDA_CACHE_DISABLE").as_deref()) {
        return None;
    }
    imp::prewarm(device, quantized)
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use std::time::Instant;

    use candle_core::cuda_backend::cudarc::nvrtc::Ptx;
    use candle_core::cuda_backend::kernels;

    pub fn prewarm(device: &Device, quantized: bool) -> Option<Prewarmed> {
        let Device::Cuda(d) = device else {
            return None;
        };
        let context = d.cuda_stream().context().clone();
        let mut ptx: Vec<&'static str> = [
            &kernels::AFFINE,
            &kernels::BINARY,
            &kernels::CAST,
            &kernels::FILL,
            &kernels::INDEXING,
            &kernels::REDUCE,
            &kernels::SORT,
            &kernels::TERNARY,
            &kernels::UNARY,
        ]
        .iter()
        .map(|m| m.ptx())
        .collect();
        if quantized {
            ptx.push(kernels::QUANTIZED.ptx());
        }
        ptx.push(crate::runtime::masked_softmax::PTX);
        let started = Instant::now();
        let loaded = std::thread::scope(|s| {
            let threads: Vec<_> = ptx
                .iter()
                .map(|p| {
                    let context = context.clone();
                    s.spawn(move || context.load_module(Ptx::from_src(*p)).is_ok())
                })
                .collect();
            threads
                .into_iter()
                .map(|t| matches!(t.join(), Ok(true)))
                .filter(|loaded| *loaded)
                .count()
        });
        Some(Prewarmed {
            modules: loaded,
            elapsed: started.elapsed(),
        })
    }
}

#[cfg(not(feature = "cuda"))]
mod imp {
    use super::*;

    pub fn prewarm(_device: &Device, _quantized: bool) -> Option<Prewarmed> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn only_cuda_cache_disable_1_turns_the_cache_off() {
        assert!(cache_on(None));
        assert!(cache_on(Some(OsStr::new("0"))));
        assert!(cache_on(Some(OsStr::new(""))));
        assert!(!cache_on(Some(OsStr::new("1"))));
        assert!(!cache_on(Some(OsStr::new(" 1"))));
    }

    #[test]
    fn the_cpu_has_nothing_to_compile() {
        assert_eq!(prewarm(&Device::Cpu, true), None);
    }
}
