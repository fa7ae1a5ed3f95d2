//! Function transforms over lazy graphs: reverse mode ([`vjp`], [`grad`], [`value_and_grad`])
//! forward mode ([`jvp`]), vectorisation ([`vmap`]) and compilation ([`compile`]); see [how tracing works](https://github.com/nuvec/nuvec/blob/main/crates/nuvec-core/src/transforms/README.md).

mod compile;
mod custom;
mod fuse;
mod jvp;
pub(crate) mod trace;
pub mod tree;
mod vjp;
mod vmap;

pub use compile::{compile, compile_shapeless, compile_step, Compiled};
pub use custom::{checkpoint, custom_function, CustomFunction};
pub use jvp::jvp;
pub use tree::{tree_flatten, tree_flatten_named, tree_unflatten, ModuleState, Tree};
pub use vjp::{grad, value_and_grad, vjp};
pub use vmap::vmap;

/// Sums `cotangent` down to `shape` over the axes that broadcasting added or stretched: the
/// adjoint of NumPy broadcasting, used by every element-wise vjp rule.
pub(crate) fn sum_to_shape(cotangent: &crate::Array, shape: &[i32]) -> crate::Array {
    if cotangent.shape() == shape {
        return cotangent.clone();
    }
    let extra = cotangent.ndim() - shape.len();
    let mut axes: Vec<i32> = (0..extra as i32).collect();
    for (i, &dim) in shape.iter().enumerate() {
        if dim == 1 && cotangent.shape()[extra + i] != 1 {
            axes.push((extra + i) as i32);
        }
    }
    let summed = crate::ops::sum(cotangent, axes, true);
    crate::ops::reshape(&summed, shape)
}
