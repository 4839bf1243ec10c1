//! The memory of the device a probe runs on, read the same way for the CPU and for CUDA:
//! bytes in use now, the high-water mark since the last stage boundary, what the allocator has
//! reserved, and what the device has free.
//!
//! - CPU: the counting global allocator ([`super::host`]).
//! - CUDA (`cuda` feature): the device's current memory pool, which candle allocates from with
//!   `cuMemAllocAsync` (used / reserved, current and high-water, reset at each stage), plus
//!   `cuMemGetInfo`; a ballast allocation outside the pool emulates a smaller card; a bounded
//!   search finds the largest block the driver can still hand out.

use candle_core::Device;
use serde::{Deserialize, Serialize};

use super::host;

/// One reading of the device's memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reading {
    /// Bytes the workload's tensors hold now (pool used / heap held).
    pub in_use: u64,
    /// Most bytes held since the last reset.
    pub peak: u64,
    /// Bytes the allocator holds from the device (≥ in_use); CUDA only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved_peak: Option<u64>,
    /// Free and total bytes of the device as its driver reports them; CUDA only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
}

pub enum DeviceMeter {
    Host,
    #[cfg(feature = "cuda")]
    Cuda(cuda::CudaMeter),
}

impl DeviceMeter {
    pub fn for_device(device: &Device) -> Result<DeviceMeter, String> {
        match device {
            Device::Cpu => {
                if host::installed() {
                    Ok(DeviceMeter::Host)
                } else {
                    Err("the counting allocator is not installed in this binary".into())
                }
            }
            #[cfg(feature = "cuda")]
            Device::Cuda(d) => cuda::CudaMeter::new(d).map(DeviceMeter::Cuda),
            #[allow(unreachable_patterns)]
            other => Err(format!("no memory meter for {other:?}")),
        }
    }

    /// What the readings come from.
    pub fn source(&self) -> super::Meter {
        match self {
            DeviceMeter::Host => super::Meter::HostAllocator,
            #[cfg(feature = "cuda")]
            DeviceMeter::Cuda(_) => super::Meter::CudaPool,
        }
    }

    pub fn read(&self) -> Reading {
        match self {
            DeviceMeter::Host => Reading {
                in_use: host::current(),
                peak: host::peak(),
                ..Reading::default()
            },
            #[cfg(feature = "cuda")]
            DeviceMeter::Cuda(m) => m.read(),
        }
    }

    /// Start a new high-water mark (a stage boundary).
    pub fn reset_peak(&self) {
        match self {
            DeviceMeter::Host => host::reset_peak(),
            #[cfg(feature = "cuda")]
            DeviceMeter::Cuda(m) => m.reset_peak(),
        }
    }

    /// Wait for the device, then return cached memory to it (the pool keeps nothing unused).
    pub fn settle(&self) {
        #[cfg(feature = "cuda")]
        if let DeviceMeter::Cuda(m) = self {
            m.trim();
        }
    }

    /// The largest single block the device can allocate now, up to `cap` bytes, searched to
    /// `granularity` with every probe allocation freed at once (`None` on the CPU, where it means
    /// nothing). Mapping a block of a whole large card takes the driver seconds: the cap keeps the
    /// question to the sizes that matter.
    pub fn largest_block(&self, granularity: u64, cap: u64) -> Option<u64> {
        match self {
            DeviceMeter::Host => {
                let _ = (granularity, cap);
                None
            }
            #[cfg(feature = "cuda")]
            DeviceMeter::Cuda(m) => Some(m.largest_block(granularity, cap)),
        }
    }
}

/// Memory held outside the workload's allocator so the device looks `keep` bytes smaller
/// (`--vram-limit` on CUDA). Freed on drop.
pub struct Ballast {
    pub bytes: u64,
    #[cfg(feature = "cuda")]
    ptr: u64,
}

impl Ballast {
    /// Hold `bytes` of device memory. The CPU needs no ballast (its limit is the allocator's).
    pub fn hold(meter: &DeviceMeter, bytes: u64) -> Result<Ballast, String> {
        match meter {
            DeviceMeter::Host => {
                let _ = bytes;
                Ok(Ballast {
                    bytes: 0,
                    #[cfg(feature = "cuda")]
                    ptr: 0,
                })
            }
            #[cfg(feature = "cuda")]
            DeviceMeter::Cuda(_) if bytes == 0 => Ok(Ballast { bytes: 0, ptr: 0 }),
            #[cfg(feature = "cuda")]
            DeviceMeter::Cuda(m) => m.alloc_raw(bytes).map(|ptr| Ballast { bytes, ptr }),
        }
    }
}

/// On a shared GPU, make the device's memory pool one that never grows past `max_bytes`, so the
/// probe's own allocations fail (as an out-of-memory it reports) before other processes are
/// squeezed. Must run before the meter is made. CUDA 12.2 or newer; elsewhere an error to note.
pub fn cap_pool(device: &Device, max_bytes: u64) -> Result<(), String> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(d) => cuda::cap_pool(d, max_bytes),
        _ => {
            let _ = max_bytes;
            Ok(())
        }
    }
}

#[cfg(feature = "cuda")]
impl Drop for Ballast {
    fn drop(&mut self) {
        if self.ptr != 0 {
            cuda::free_raw(self.ptr);
        }
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::sync::Arc;

    use candle_core::cuda_backend::cudarc::driver::{sys, CudaStream};
    use candle_core::cuda_backend::CudaDevice;

    use super::Reading;

    pub struct CudaMeter {
        stream: Arc<CudaStream>,
        pool: sys::CUmemoryPool,
    }

    fn check(r: sys::CUresult, what: &str) -> Result<(), String> {
        if r == sys::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(format!("{what}: {r:?}"))
        }
    }

    impl CudaMeter {
        pub fn new(d: &CudaDevice) -> Result<CudaMeter, String> {
            let stream = d.cuda_stream();
            let ctx = stream.context();
            ctx.bind_to_thread().map_err(|e| e.to_string())?;
            let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
            // SAFETY: a valid device handle of a bound context; `pool` is written by the driver.
            check(
                unsafe { sys::cuDeviceGetMemPool(&mut pool, ctx.cu_device()) },
                "cuDeviceGetMemPool",
            )?;
            Ok(CudaMeter { stream, pool })
        }

        fn attr(&self, a: sys::CUmemPool_attribute) -> u64 {
            let mut v: u64 = 0;
            // SAFETY: the pool lives as long as the context; these attributes are cuuint64_t.
            let r =
                unsafe { sys::cuMemPoolGetAttribute(self.pool, a, (&mut v as *mut u64).cast()) };
            if r == sys::CUresult::CUDA_SUCCESS {
                v
            } else {
                0
            }
        }

        pub fn read(&self) -> Reading {
            use sys::CUmemPool_attribute::*;
            let _ = self.stream.context().bind_to_thread();
            let (mut free, mut total) = (0usize, 0usize);
            // SAFETY: out-pointers to two usizes.
            let ok = unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) }
                == sys::CUresult::CUDA_SUCCESS;
            Reading {
                in_use: self.attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
                peak: self.attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH),
                reserved: Some(self.attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)),
                reserved_peak: Some(self.attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)),
                free: ok.then_some(free as u64),
                total: ok.then_some(total as u64),
            }
        }

        pub fn reset_peak(&self) {
            use sys::CUmemPool_attribute::*;
            let _ = self.stream.synchronize();
            for a in [
                CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
            ] {
                let mut zero: u64 = 0;
                // SAFETY: setting a high-water attribute to 0 resets it to the current value.
                let _ = unsafe {
                    sys::cuMemPoolSetAttribute(self.pool, a, (&mut zero as *mut u64).cast())
                };
            }
        }

        pub fn trim(&self) {
            let _ = self.stream.synchronize();
            // SAFETY: trimming keeps every allocation that is still in use.
            let _ = unsafe { sys::cuMemPoolTrimTo(self.pool, 0) };
        }

        pub fn alloc_raw(&self, bytes: u64) -> Result<u64, String> {
            let _ = self.stream.context().bind_to_thread();
            let mut ptr: sys::CUdeviceptr = 0;
            // SAFETY: a synchronous allocation outside the pool; freed by `free_raw`.
            check(
                unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes as usize) },
                "cuMemAlloc",
            )?;
            Ok(ptr)
        }

        pub fn largest_block(&self, granularity: u64, cap: u64) -> u64 {
            self.trim();
            let free = self.read().free.unwrap_or(0).min(cap);
            // Usually all of it is one piece (the driver maps pages where it likes): one try.
            if let Ok(p) = self.alloc_raw(free) {
                free_raw(p);
                return free;
            }
            // Else at most ~10 halvings: each try of a huge block costs the driver a mapping.
            let g = granularity.max(free / 1024).max(1);
            let (mut good, mut bad) = (0u64, free / g + 1);
            while bad - good > 1 {
                let mid = good + (bad - good) / 2;
                match self.alloc_raw(mid * g) {
                    Ok(p) => {
                        free_raw(p);
                        good = mid;
                    }
                    Err(_) => bad = mid,
                }
            }
            good * g
        }
    }

    pub fn cap_pool(d: &CudaDevice, max_bytes: u64) -> Result<(), String> {
        let stream = d.cuda_stream();
        let ctx = stream.context();
        ctx.bind_to_thread().map_err(|e| e.to_string())?;
        // CUmemPoolProps by its ABI (the header's layout changed across CUDA versions): allocType
        // (u32) = pinned, handleTypes (u32) = none, location = {device, ordinal}, a null pointer,
        // then maxSize (usize) at byte 24, the rest zero.
        let mut props = [0u64; 16];
        props[0] = 1; // allocType = CU_MEM_ALLOCATION_TYPE_PINNED; handleTypes = 0
        props[1] = 1 | ((ctx.ordinal() as u64) << 32); // location: type DEVICE, id
        props[3] = max_bytes;
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: `props` is 128 zero-padded bytes laid out as the driver reads CUmemPoolProps.
        check(
            unsafe { sys::cuMemPoolCreate(&mut pool, props.as_ptr().cast()) },
            "cuMemPoolCreate",
        )?;
        // SAFETY: a pool of this device; it stays the device's pool for the process's life.
        check(
            unsafe { sys::cuDeviceSetMemPool(ctx.cu_device(), pool) },
            "cuDeviceSetMemPool",
        )
    }

    pub fn free_raw(ptr: u64) {
        // SAFETY: `ptr` came from cuMemAlloc and is freed once.
        let _ = unsafe { sys::cuMemFree_v2(ptr) };
    }
}
