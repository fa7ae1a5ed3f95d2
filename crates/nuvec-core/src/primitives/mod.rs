//! The primitives of the graph: each file holds one family's shape rules and CPU evaluation
//! (and, as transforms land, its vjp, jvp and vmap rules).

pub(crate) mod astype;
pub(crate) mod binary;
pub(crate) mod index;
pub(crate) mod layout;
pub(crate) mod matmul;
pub(crate) mod random_bits;
pub(crate) mod reduce;
pub(crate) mod scan;
pub(crate) mod select;
pub(crate) mod sort;
pub(crate) mod unary;

use crate::primitive::OutputSpec;
use crate::Result;
use nuvec_cpu::{Buffer, Element};
use std::sync::Arc;

/// Allocates the buffer of `spec` and fills it through `fill` as a slice of `T`.
pub(crate) fn output<T: Element>(
    spec: &OutputSpec,
    fill: impl FnOnce(&mut [T]),
) -> Result<Vec<Arc<Buffer>>> {
    let mut buffer = spec.alloc();
    fill(&mut buffer.as_mut_slice::<T>()[..spec.size()]);
    Ok(vec![Arc::new(buffer)])
}

/// Implements `is_equivalent` by comparing with another primitive of the same type.
macro_rules! same_as {
    () => {
        fn is_equivalent(&self, other: &dyn $crate::primitive::Primitive) -> bool {
            (other as &dyn std::any::Any).downcast_ref::<Self>() == Some(self)
        }
    };
}
pub(crate) use same_as;
