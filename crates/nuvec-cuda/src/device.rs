//! A CUDA device: its context and stream, the kernels compiled for it, and its memory pool.
//! [`gpu`] opens device `i` once per process; [`device_count`] and [`available`] ask the
//! driver without panicking when there is none (cudarc would, were the driver missing: the
//! library is looked for first, `library.rs`).

use crate::error::{CudaError, Result};
use crate::kernels::Source;
use crate::library::{require, Library};
use crate::memory::{DeviceBuffer, Pool};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// An open CUDA device.
pub struct Gpu {
    index: usize,
    name: String,
    /// The architecture kernels are compiled for (`compute_90` on Hopper).
    arch: String,
    total_memory: usize,
    pub(crate) context: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    functions: Mutex<HashMap<String, CudaFunction>>,
    pub(crate) pool: Pool,
    /// cuBLAS's handle on the stream, made at the first product.
    blas: Mutex<Option<Arc<cudarc::cublas::CudaBlas>>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "gpu:{} ({}, {})", self.index, self.name, self.arch)
    }
}

/// The number of CUDA devices the driver shows (0 without a driver or a device).
pub fn device_count() -> Result<usize> {
    require(Library::Driver)?;
    let count = CudaContext::device_count().map_err(|e| CudaError::Call {
        op: "counting devices".into(),
        device: 0,
        reason: e.to_string(),
    })?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// Whether a CUDA device can be used here; when not, [`unavailable_reason`] says why.
pub fn available() -> bool {
    matches!(device_count(), Ok(n) if n > 0)
}

/// Why no CUDA device can be used here, or `None` when one can.
pub fn unavailable_reason() -> Option<String> {
    match device_count() {
        Ok(0) => Some("the CUDA driver loads but shows no device".into()),
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

/// Device `index`, opened on first use and shared afterwards.
pub fn gpu(index: usize) -> Result<Arc<Gpu>> {
    static OPEN: OnceLock<Mutex<HashMap<usize, Arc<Gpu>>>> = OnceLock::new();
    let mut open = OPEN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(gpu) = open.get(&index) {
        return Ok(gpu.clone());
    }
    let count = device_count()?;
    if index >= count {
        return Err(CudaError::NoDevice {
            index,
            reason: format!("the driver shows {count} device(s)"),
        });
    }
    let gpu = Arc::new(Gpu::open(index)?);
    open.insert(index, gpu.clone());
    Ok(gpu)
}

impl Gpu {
    fn open(index: usize) -> Result<Gpu> {
        let call = |op: &str, e: cudarc::driver::DriverError| CudaError::Call {
            op: op.into(),
            device: index,
            reason: e.to_string(),
        };
        let context = CudaContext::new(index).map_err(|e| call("opening the device", e))?;
        let (major, minor) = context
            .compute_capability()
            .map_err(|e| call("reading the compute capability", e))?;
        let name = context.name().map_err(|e| call("reading the name", e))?;
        let total_memory = context
            .total_mem()
            .map_err(|e| call("reading the memory size", e))?;
        let stream = context
            .new_stream()
            .map_err(|e| call("creating a stream", e))?;
        Ok(Gpu {
            index,
            name,
            arch: format!("compute_{major}{minor}"),
            total_memory,
            context,
            stream: stream.clone(),
            functions: Mutex::default(),
            pool: Pool::new(stream),
            blas: Mutex::default(),
        })
    }

    /// The device's index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The device's name (`NVIDIA H200`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The architecture kernels are compiled for.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The device's memory in bytes.
    pub fn total_memory(&self) -> usize {
        self.total_memory
    }

    /// An error of `op` on this device.
    pub(crate) fn error(&self, op: &str, reason: impl std::fmt::Display) -> CudaError {
        CudaError::Call {
            op: op.into(),
            device: self.index,
            reason: reason.to_string(),
        }
    }

    /// The entry point `entry` of `source`, compiled and loaded on first use.
    pub fn function(&self, source: &Source, entry: &str) -> Result<CudaFunction> {
        let mut functions = self
            .functions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(function) = functions.get(entry) {
            return Ok(function.clone());
        }
        let ptx = crate::compile::compile(source, &self.arch)?;
        let module = self
            .context
            .load_module(ptx)
            .map_err(|e| self.error(&format!("loading the kernel {}", source.name), e))?;
        let function = module
            .load_function(entry)
            .map_err(|e| self.error(&format!("finding the kernel {entry}"), e))?;
        functions.insert(entry.to_string(), function.clone());
        Ok(function)
    }

    /// cuBLAS on this device's stream, started once.
    pub(crate) fn blas(&self) -> Result<Arc<cudarc::cublas::CudaBlas>> {
        let mut blas = self
            .blas
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(handle) = &*blas {
            return Ok(handle.clone());
        }
        let handle = Arc::new(
            cudarc::cublas::CudaBlas::new(self.stream.clone())
                .map_err(|e| self.error("starting cuBLAS", e))?,
        );
        *blas = Some(handle.clone());
        Ok(handle)
    }

    /// `bytes` bytes of device memory (contents unspecified), from the pool.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        self.pool
            .take(bytes)
            .map_err(|e| self.error("allocating", e))
    }

    /// A copy of `bytes` on the device.
    pub fn upload(&self, bytes: &[u8]) -> Result<DeviceBuffer> {
        let mut buffer = self.alloc(bytes.len())?;
        if !bytes.is_empty() {
            let mut whole = buffer.slice_mut();
            let mut view = whole.slice_mut(..bytes.len());
            self.stream
                .memcpy_htod(bytes, &mut view)
                .map_err(|e| self.error("copying to the device", e))?;
        }
        Ok(buffer)
    }

    /// The first `len` bytes of `buffer`, copied back to the host (waits for the stream).
    pub fn download(&self, buffer: &DeviceBuffer, len: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        if len > 0 {
            let whole = buffer.slice();
            let view = whole.slice(..len);
            self.stream
                .memcpy_dtoh(&view, &mut out)
                .map_err(|e| self.error("copying to the host", e))?;
        }
        self.synchronize()?;
        Ok(out)
    }

    /// A point in this device's stream: the device time between two marks is what CUDA
    /// events measure (as PyTorch's benchmarks time), without the host's wait for the device.
    pub fn mark(&self) -> Result<Mark> {
        self.stream
            .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map(|event| Mark {
                event,
                device: self.index(),
            })
            .map_err(|e| self.error("recording an event", e))
    }

    /// Waits until the device has done everything asked of it.
    pub fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| self.error("waiting for the device", e))
    }
}

/// A point in a device's stream ([`Gpu::mark`]).
pub struct Mark {
    event: cudarc::driver::CudaEvent,
    device: usize,
}

impl std::fmt::Debug for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mark(gpu:{})", self.device)
    }
}

impl Mark {
    /// The device time from `start` to this mark (waits for the device to reach it).
    pub fn since(&self, start: &Mark) -> Result<std::time::Duration> {
        let milliseconds = start
            .event
            .elapsed_ms(&self.event)
            .map_err(|e| CudaError::Call {
                op: "timing between events".into(),
                device: self.device,
                reason: e.to_string(),
            })?;
        Ok(std::time::Duration::from_secs_f64(
            f64::from(milliseconds.max(0.0)) / 1e3,
        ))
    }
}
