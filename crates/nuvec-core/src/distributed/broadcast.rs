//! `broadcast` (rank `root`'s array on every rank) as a lazy primitive with its derivative
//! and batching rules, and `barrier`, which waits until every rank reaches it. A backend
//! without a broadcast of its own gets one built on its all-gather
//! ([`broadcast_by_gathering`]), which also checks that every rank named the same root and
//! passed an array of the same type and size.

use super::collectives::all_sum;
use super::shared::{as_op, group_or_default};
use super::{Communicator, Group, ReduceOp};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, DType, Error, Result};
use nuvec_cpu::Buffer;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
struct Broadcast {
    group: Group,
    root: usize,
    at: &'static std::panic::Location<'static>,
}

impl Primitive for Broadcast {
    /// Collectives run on the host (the ring's sockets and shared memory, JACCL, MPI).
    fn host_only(&self) -> bool {
        true
    }

    fn name(&self) -> &str {
        "broadcast"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let (bytes, dtype) = (outputs[0].bytes(), outputs[0].dtype);
        let what = (dtype, &outputs[0].shape[..], Some(self.root));
        let root = self.group.rank() == self.root;
        let mut data = match inputs[0].take_owned(bytes) {
            Some(data) => data,
            // Another rank's values are never read: only the root's array is copied in.
            None if !root => Buffer::for_output(bytes),
            None => {
                let input = inputs[0].buffer();
                let mut copy = None;
                self.group.communicate("broadcast", what, self.at, |c| {
                    // The root's output is its input where the backend sends it unchanged.
                    let whole = &input.as_bytes()[..bytes];
                    if input.len_bytes() == bytes && c.broadcast_unchanged(whole, dtype)? {
                        return Ok(());
                    }
                    let mut data = Buffer::for_output(bytes);
                    data.as_mut_bytes().copy_from_slice(whole);
                    c.broadcast(data.as_mut_bytes(), dtype, self.root)?;
                    copy = Some(Arc::new(data));
                    Ok(())
                })?;
                return Ok(vec![copy.unwrap_or_else(|| input.clone())]);
            }
        };
        self.group.communicate("broadcast", what, self.at, |c| {
            c.broadcast(data.as_mut_bytes(), dtype, self.root)
        })?;
        Ok(vec![Arc::new(data)])
    }

    /// The transpose of copying the root's array to every rank: the root's input gets the
    /// sum of every rank's cotangent, the other ranks' inputs nothing. Every rank joins the
    /// sum.
    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        // The same graph on every rank, so that every rank runs the sum: a `where` keeps it
        // on the root only (and keeps infinities out of the other ranks' zeros).
        let total = all_sum(&cotangents[0], Some(&self.group));
        let here = Array::scalar(self.group.rank() == self.root);
        Ok(vec![crate::ops::where_(
            &here,
            &total,
            crate::ops::zeros_like(&inputs[0]),
        )])
    }

    // Linear: the root's tangent on every rank.
    crate::primitives::jvp_linear!();

    /// Element-wise over the whole batch: every rank batches alike.
    fn vmap(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        Ok((
            vec![broadcast(&inputs[0], self.root, Some(&self.group))],
            vec![axes[0]],
        ))
    }

    fn output_shapes(&self, inputs: &[&[i32]], _traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        Some(vec![inputs[0].to_vec()])
    }

    fn is_effect(&self) -> bool {
        true
    }

    fn communication_group(&self) -> Option<Group> {
        Some(self.group)
    }
}

/// Rank `root`'s `x` on every rank of `group` (`None`: the default group). Every rank passes
/// an array of the same shape and type (the others' values are not read) and names the same
/// root; a rank that names another root or passes another size gets an error naming both.
/// On a group of one it is `x` itself.
///
/// Differentiable: the root's input gets the sum of every rank's cotangent.
///
/// ```
/// use nuvec_core::{array, distributed};
/// let weights = distributed::broadcast(&array![0.5, 1.5], 0, None);
/// assert_eq!(weights.to_vec::<f32>()?, [0.5, 1.5]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn broadcast(x: &Array, root: usize, group: Option<&Group>) -> Array {
    if let Some(error) = x.known_error() {
        return Array::failed(error);
    }
    let group = group_or_default(group);
    if root >= group.size() {
        return Array::invalid(
            "broadcast",
            format!(
                "root rank {root} is not a rank of the group of size {}",
                group.size()
            ),
        );
    }
    if group.size() == 1 {
        return x.clone();
    }
    Array::from_primitive(
        Arc::new(Broadcast {
            group,
            root,
            at: std::panic::Location::caller(),
        }),
        vec![x.clone()],
        x.shape().to_vec(),
        x.dtype(),
    )
}

/// Waits until every rank of `group` (`None`: the default group) has called `barrier`, or
/// fails as a collective does (a rank that left or stalled is named within the timeout).
///
/// ```
/// nuvec_core::distributed::barrier(None)?;
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn barrier(group: Option<&Group>) -> Result<()> {
    let group = group_or_default(group);
    if group.size() == 1 {
        return Ok(());
    }
    let at = std::panic::Location::caller();
    group.communicate("barrier", (DType::U8, &[], None), at, |c| c.barrier())
}

/// Bytes before each rank's block in [`broadcast_by_gathering`]: the root it named and its
/// dtype.
const PREFIX: usize = 8;

/// A broadcast built on `communicator`'s all-gather: every rank contributes the root it
/// named, its dtype and its data, checks the others named the same, and keeps the root's
/// data. Moves every rank's data to every rank; backends replace it with a broadcast of
/// their own where they have one.
pub(crate) fn broadcast_by_gathering<C: Communicator + ?Sized>(
    communicator: &C,
    data: &mut [u8],
    dtype: DType,
    root: usize,
) -> Result<()> {
    let (rank, size) = (communicator.rank(), communicator.size());
    let block = PREFIX + data.len();
    let code = DType::ALL.iter().position(|&d| d == dtype).unwrap_or(0) as u32;
    // Scratch from nuvec's recycled output memory: fresh allocations of this size would
    // fault in every page on every call.
    let mut mine = Buffer::for_output(block);
    let mine = &mut mine.as_mut_bytes()[..block];
    mine[..4].copy_from_slice(&(root as u32).to_le_bytes());
    mine[4..PREFIX].copy_from_slice(&code.to_le_bytes());
    mine[PREFIX..].copy_from_slice(data);
    let mut all = Buffer::for_output(block * size);
    let all = &mut all.as_mut_bytes()[..block * size];
    communicator
        .all_gather(mine, all, DType::U8)
        .map_err(|error| as_op(error, "all_gather", "broadcast"))?;
    for (peer, theirs) in all.chunks_exact(block).enumerate() {
        let word = |at: usize| u32::from_le_bytes(theirs[at..at + 4].try_into().expect("4 bytes"));
        let their_dtype = DType::ALL.get(word(4) as usize).copied();
        if word(0) as usize != root || their_dtype != Some(dtype) {
            let named =
                their_dtype.map_or_else(|| "an unknown type".to_string(), |d| d.to_string());
            return Err(Error::Distributed {
                op: "broadcast".into(),
                rank: Some(peer),
                reason: format!(
                    "rank {peer} broadcast {named} from root {}, this rank (rank {rank}) {dtype} from root {root}",
                    word(0)
                ),
            });
        }
    }
    data.copy_from_slice(&all[root * block + PREFIX..(root + 1) * block]);
    Ok(())
}

/// A barrier built on `communicator`'s all-reduce: one small sum.
pub(crate) fn barrier_by_reducing<C: Communicator + ?Sized>(communicator: &C) -> Result<()> {
    let mut one = 1u32.to_le_bytes();
    communicator
        .all_reduce(&mut one, DType::U32, ReduceOp::Sum)
        .map_err(|error| as_op(error, "all_sum", "barrier"))
}
