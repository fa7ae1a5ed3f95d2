//! `all_to_all`: each rank splits its array's first axis into one block per rank and sends
//! block `j` to rank `j` (mixture-of-experts token dispatch), as a lazy primitive with its
//! derivative and batching rules. A backend without one of its own gets one built on its
//! all-gather ([`all_to_all_by_gathering`]).

use super::collectives::{along_first_axis, bytes_of, dims, group_or_default};
use super::{Communicator, Group};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, DType, Error, Result};
use nuvec_cpu::Buffer;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
struct AllToAll {
    group: Group,
    at: &'static std::panic::Location<'static>,
}

impl Primitive for AllToAll {
    fn name(&self) -> &str {
        "all_to_all"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let mut out = outputs[0].alloc();
        let (input, dtype) = (&inputs[0], outputs[0].dtype);
        let what = (dtype, &dims(&input.shape)[..], None);
        self.group.communicate("all_to_all", what, self.at, |c| {
            c.all_to_all(bytes_of(input), out.as_mut_bytes(), dtype)
        })?;
        Ok(vec![Arc::new(out)])
    }

    /// `all_to_all` is its own inverse (block `j` of rank `r` comes back from block `r` of
    /// rank `j`), and its transpose: the cotangent goes back the way the values came.
    fn vjp(
        &self,
        _inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Ok(vec![all_to_all(&cotangents[0], Some(&self.group))])
    }

    // Linear: the same exchange of the tangent.
    crate::primitives::jvp_linear!();

    /// The batch axis goes second, so the blocks stay along the first axis.
    fn vmap(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        Ok(along_first_axis(&inputs[0], axes[0], |x| {
            all_to_all(x, Some(&self.group))
        }))
    }

    fn output_shapes(&self, inputs: &[&[i32]], _traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        let first = *inputs[0].first()?;
        (first % self.group.size() as i32 == 0).then(|| vec![inputs[0].to_vec()])
    }

    fn is_effect(&self) -> bool {
        true
    }

    fn communication_group(&self) -> Option<Group> {
        Some(self.group)
    }
}

/// Splits the first axis of `x` into one block per rank of `group` (`None`: the default
/// group) and sends block `j` to rank `j`; the result holds, in rank order, the block each
/// rank sent this one, in `x`'s shape. The first axis must divide by the group's size, and
/// every rank passes the same shape and type. On a group of one it is `x` itself.
///
/// Differentiable: the cotangent goes back by the same exchange.
///
/// ```
/// use nuvec_core::{array, distributed};
/// let tokens = distributed::all_to_all(&array![1.0, 2.0], None);
/// assert_eq!(tokens.to_vec::<f32>()?, [1.0, 2.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn all_to_all(x: &Array, group: Option<&Group>) -> Array {
    if let Some(error) = x.known_error() {
        return Array::failed(error);
    }
    let group = group_or_default(group);
    let size = group.size() as i32;
    if x.ndim() == 0 || x.shape()[0] % size != 0 {
        return Array::invalid(
            "all_to_all",
            format!(
                "the first axis of shape {:?} must be divisible by the group size {size}",
                x.shape()
            ),
        );
    }
    if size == 1 {
        return x.clone();
    }
    Array::from_primitive(
        Arc::new(AllToAll {
            group,
            at: std::panic::Location::caller(),
        }),
        vec![x.clone()],
        x.shape().to_vec(),
        x.dtype(),
    )
}

/// An all-to-all built on `communicator`'s all-gather: every rank gathers every input and
/// keeps its block of each. Moves `size` times the data needed; backends replace it with
/// an exchange of their own where they have one.
pub(crate) fn all_to_all_by_gathering<C: Communicator + ?Sized>(
    communicator: &C,
    input: &[u8],
    output: &mut [u8],
    dtype: DType,
) -> Result<()> {
    let (rank, size) = (communicator.rank(), communicator.size());
    let block = input.len() / size;
    // Still gathered when empty: every rank meets, and a size that differs is caught.
    let mut all = vec![0u8; input.len() * size];
    communicator
        .all_gather(input, &mut all, dtype)
        .map_err(|error| match error {
            Error::Distributed {
                op,
                rank: peer,
                reason,
            } if op == "all_gather" => Error::Distributed {
                op: "all_to_all".into(),
                rank: peer,
                reason,
            },
            other => other,
        })?;
    if block == 0 {
        return Ok(());
    }
    for (from, theirs) in all.chunks_exact(input.len()).enumerate() {
        output[from * block..(from + 1) * block]
            .copy_from_slice(&theirs[rank * block..(rank + 1) * block]);
    }
    Ok(())
}
