//! nuvec: MLX's programming model in Rust.
//!
//! Lazy arrays ([`Array`]) whose ops build a graph that runs when a value is read, with MLX's
//! names, dtypes, promotion rules and random numbers.
//!
//! ```
//! use nuvec::prelude::*;
//!
//! # fn main() -> Result<()> {
//! let x = array![[1.0, 2.0], [3.0, 4.0]];
//! let y = ops::matmul(&x, &x.t()) + 1.0;
//! assert_eq!(y.to_vec::<f32>()?, [6.0, 12.0, 12.0, 26.0]);
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]
#![doc(test(attr(deny(warnings))))]
#![forbid(unsafe_code)]

pub use nuvec_core::{
    array, async_eval, bf16, default_device, default_stream, eval, f16, ops, primitive, random,
    set_default_device, with_default_device, with_dtype, with_float_dtype, Array, DType, Device,
    Element, Error, Result, Stream,
};

/// nuvec's CUDA device layer (the `cuda` feature): kernels generated for NVRTC, device memory
/// and cuBLAS, all loaded at run time. Arrays use it through `Device::Gpu` (`docs/gpu.md`).
#[cfg(feature = "cuda")]
pub use nuvec_cuda as cuda;

/// Function transforms: `grad`, `vjp`, `jvp`, `vmap`, `compile`, `custom_function`,
/// `checkpoint`, and their forms over trees of arrays (`tree`), with `#[derive(Tree)]` for
/// structs of parameters.
///
/// ```
/// use nuvec::prelude::*;
/// use nuvec::transforms::{tree, Tree};
///
/// #[derive(Tree)]
/// struct Linear {
///     weight: Array,
///     bias: Array,
///     #[tree(skip)]
///     name: String,
/// }
///
/// # fn main() -> Result<()> {
/// let layer = Linear { weight: array![[2.0], [3.0]], bias: array![1.0], name: "head".into() };
/// let x = array![[1.0, 1.0]];
/// let loss = |p: &Linear| ops::sum(&(ops::matmul(&x, &p.weight) + &p.bias), None, false);
/// let grads = tree::grad(loss)(&layer)?;
/// assert_eq!(grads.weight.to_vec::<f32>()?, [1.0, 1.0]);
/// assert_eq!(grads.bias.to_vec::<f32>()?, [1.0]);
/// assert_eq!(grads.name, "head");
/// # Ok(())
/// # }
/// ```
pub mod transforms {
    pub use nuvec_core::transforms::*;
    pub use nuvec_macros::Tree;
}

/// Running one program as many processes: groups, collectives and the backends that carry
/// them (MLX's `mx.distributed`). See [`docs/distributed.md`](https://github.com/nuvec/nuvec/blob/main/docs/distributed.md) for the environment, the
/// hostfile and the wire format.
///
/// ```
/// use nuvec::prelude::*;
/// use nuvec::distributed;
///
/// # fn main() -> Result<()> {
/// let group = distributed::init(false)?;
/// let x = array![1.0, 2.0, 3.0];
/// let total = distributed::all_sum(&x, None); // the element-wise sum over every rank
/// let all = distributed::all_gather(&x, None); // every rank's x, in rank order
/// assert_eq!(total.shape(), [3]);
/// assert_eq!(all.shape(), [3 * group.size() as i32]);
/// # Ok(())
/// # }
/// ```
pub mod distributed {
    pub use nuvec_core::distributed::{
        all_gather, all_max, all_min, all_sum, all_to_all, all_to_all_counts, all_to_all_v,
        barrier, broadcast, default_group, recv, recv_like, send, sum_gradients, sum_scatter,
        Communicator, Group, Record, ReduceOp, State, Trace,
    };
    /// MLX's JACCL backend (the `jaccl` feature): RDMA over ibverbs, or the emulated fabric.
    #[cfg(feature = "jaccl")]
    pub use nuvec_distributed::jaccl;
    pub use nuvec_distributed::{
        init, init_backend, init_with, is_available, parse_hostfile, read_hostfile, Address,
        Backend, CrossMemory, Options, Polling, SharedMemory, StreamingStores, Tuning,
    };
}

/// The names most programs need: `Array`, `array!`, `DType`, `Result`, the ops module.
pub mod prelude {
    pub use nuvec_core::ops::{self, IntoAxes};
    pub use nuvec_core::{array, eval, Array, DType, Error, Result};
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
mod readme {}

/// The distributed guide's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/distributed.md")]
mod distributed_guide {}
