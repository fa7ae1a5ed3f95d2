//! nuvec on NVIDIA GPUs: the kernels and memory of the CUDA device, below `nuvec-core` as
//! `nuvec-cpu` is.
//!
//! Nothing of CUDA is linked: the driver, NVRTC and cuBLAS are loaded at run time
//! ([`library`]), so this crate builds and its callers run everywhere, and a machine without
//! a GPU gets an error saying what is missing, never a panic. Kernels are CUDA C generated per
//! op and dtype ([`kernels`]) and compiled by NVRTC at first use for the GPU at hand
//! ([`compile`]); memory comes from plain device allocations through a caching pool
//! ([`memory`]); [`ops`], [`matmul`], [`quantized`], [`scan`], [`scatter`] and [`sort`] run
//! them on a device's stream.
//!
//! ```
//! // Without a GPU (or its driver) this is an error, not a panic.
//! match nuvec_cuda::device::device_count() {
//!     Ok(n) => println!("{n} CUDA device(s)"),
//!     Err(e) => assert!(e.to_string().contains("not available") || e.to_string().contains("failed")),
//! }
//! ```

pub mod compile;
pub mod device;
pub mod error;
pub mod kernels;
pub mod library;
pub mod matmul;
pub mod memory;
pub mod nccl;
pub mod ops;
pub mod quantized;
pub mod scan;
pub mod scatter;
pub mod sort;

pub use device::{available, device_count, gpu, unavailable_reason, Gpu, Mark};
pub use error::{CudaError, Result};
pub use memory::DeviceBuffer;
