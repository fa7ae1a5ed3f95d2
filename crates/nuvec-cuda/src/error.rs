//! [`CudaError`]: what can go wrong on the GPU path, in words a user can act on.

/// An error of the GPU path. Its text names the operation, the device and what was expected;
/// it never carries Rust's `Debug` form of a library's status.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// A library (the driver, NVRTC, cuBLAS, NCCL) could not be loaded: no GPU stack here.
    #[error("{library} is not available: {reason}")]
    Missing {
        /// The library's name (`the CUDA driver`, `NVRTC`, ...).
        library: &'static str,
        /// What was tried and why it failed.
        reason: String,
    },
    /// The driver loaded but reports no usable device of this index.
    #[error("no CUDA device {index}: {reason}")]
    NoDevice {
        /// The device asked for.
        index: usize,
        /// What the driver said.
        reason: String,
    },
    /// A generated kernel did not compile (a bug in nuvec: the log says where).
    #[error("compiling the GPU kernel {kernel} for {arch} failed: {log}")]
    Compile {
        /// The kernel's entry point.
        kernel: String,
        /// The architecture compiled for.
        arch: String,
        /// NVRTC's log.
        log: String,
    },
    /// A call into the driver or a library failed.
    #[error("{op} on gpu:{device} failed: {reason}")]
    Call {
        /// What nuvec was doing.
        op: String,
        /// The device.
        device: usize,
        /// The library's message.
        reason: String,
    },
    /// An op has no kernel for this dtype on the GPU.
    #[error("{op} has no GPU kernel for {dtype} (gpu:{device})")]
    Unsupported {
        /// The op.
        op: String,
        /// The dtype.
        dtype: String,
        /// The device.
        device: usize,
    },
}

/// A result of the GPU path.
pub type Result<T> = std::result::Result<T, CudaError>;
