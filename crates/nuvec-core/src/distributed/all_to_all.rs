//! `all_to_all`: each rank splits its array's first axis into one block per rank and sends
//! block `j` to rank `j` (mixture-of-experts token dispatch), as a lazy primitive with its
//! derivative and batching rules; `all_to_all_v`, its form with a count of rows per rank
//! (and `all_to_all_counts`, which tells each rank how many rows it will get). A backend
//! without its own gets them built on its all-gather ([`all_to_all_by_gathering`],
//! [`all_to_all_v_by_gathering`]).

use super::shared::{along_first_axis, as_op, group_or_default, into_new_output};
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
    /// Collectives run on the host (the ring's sockets and shared memory, JACCL, MPI).
    fn host_only(&self) -> bool {
        true
    }

    fn name(&self) -> &str {
        "all_to_all"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let (input, dtype) = (&inputs[0], outputs[0].dtype);
        let call = (&self.group, "all_to_all", self.at);
        into_new_output(call, input, &outputs[0], |c, input, out| {
            c.all_to_all(input, out, dtype)
        })
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
pub fn all_to_all_by_gathering<C: Communicator + ?Sized>(
    communicator: &C,
    input: &[u8],
    output: &mut [u8],
    dtype: DType,
) -> Result<()> {
    let (rank, size) = (communicator.rank(), communicator.size());
    let block = input.len() / size;
    // Still gathered when empty: every rank meets, and a size that differs is caught.
    // Scratch from nuvec's recycled output memory: a fresh allocation of this size would
    // fault in every page on every call.
    let mut all = Buffer::for_output(input.len() * size);
    let all = &mut all.as_mut_bytes()[..input.len() * size];
    communicator
        .all_gather(input, all, dtype)
        .map_err(|error| as_op(error, "all_gather", "all_to_all"))?;
    if block == 0 {
        return Ok(());
    }
    for (from, theirs) in all.chunks_exact(input.len()).enumerate() {
        output[from * block..(from + 1) * block]
            .copy_from_slice(&theirs[rank * block..(rank + 1) * block]);
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq)]
struct AllToAllV {
    group: Group,
    send: Vec<usize>,
    recv: Vec<usize>,
    at: &'static std::panic::Location<'static>,
}

impl Primitive for AllToAllV {
    /// Collectives run on the host (the ring's sockets and shared memory, JACCL, MPI).
    fn host_only(&self) -> bool {
        true
    }

    fn name(&self) -> &str {
        "all_to_all_v"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let (input, dtype) = (&inputs[0], outputs[0].dtype);
        let row_bytes = input.shape[1..].iter().product::<usize>() * dtype.size();
        let call = (&self.group, "all_to_all_v", self.at);
        into_new_output(call, input, &outputs[0], |c, input, out| {
            let counts = (&self.send[..], &self.recv[..], row_bytes);
            c.all_to_all_v(input, out, counts, dtype)
        })
    }

    /// The rows go back the way they came: the same exchange with the counts swapped.
    fn vjp(
        &self,
        _inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let back = all_to_all_v(&cotangents[0], &self.recv, &self.send, Some(&self.group));
        Ok(vec![back])
    }

    // Linear: the same exchange of the tangent.
    crate::primitives::jvp_linear!();

    /// The batch axis goes second, so the rows stay along the first axis.
    fn vmap(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        Ok(along_first_axis(&inputs[0], axes[0], |x| {
            all_to_all_v(x, &self.send, &self.recv, Some(&self.group))
        }))
    }

    fn output_shapes(&self, inputs: &[&[i32]], _traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        let mut shape = inputs[0].to_vec();
        *shape.first_mut()? = self.recv.iter().sum::<usize>() as i32;
        Some(vec![shape])
    }

    fn is_effect(&self) -> bool {
        true
    }

    fn communication_group(&self) -> Option<Group> {
        Some(self.group)
    }
}

/// The variable-size [`all_to_all`]: this rank sends `send[j]` rows of `x` (in order along the
/// first axis, which holds `Σ send` rows) to rank `j`, and gets `recv[j]` rows from rank `j`,
/// concatenated in rank order. `recv[j]` must equal what rank `j` sends this rank: a rank
/// whose counts disagree gets an error naming the other side. [`all_to_all_counts`] computes
/// `recv` from `send`.
///
/// Differentiable: the cotangent goes back with the counts swapped.
///
/// ```
/// use nuvec_core::{array, distributed};
/// let rows = distributed::all_to_all_v(&array![1.0, 2.0, 3.0], &[3], &[3], None);
/// assert_eq!(rows.to_vec::<f32>()?, [1.0, 2.0, 3.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn all_to_all_v(x: &Array, send: &[usize], recv: &[usize], group: Option<&Group>) -> Array {
    if let Some(error) = x.known_error() {
        return Array::failed(error);
    }
    let group = group_or_default(group);
    let size = group.size();
    let rows = x.shape().first().copied();
    let sent: usize = send.iter().sum();
    if send.len() != size || recv.len() != size || rows != Some(sent as i32) {
        return Array::invalid(
            "all_to_all_v",
            format!(
                "give one send and one receive count per rank of the group of size {size} \
                 (got {} and {}), the send counts summing to the first axis of shape {:?} \
                 (they sum to {sent})",
                send.len(),
                recv.len(),
                x.shape()
            ),
        );
    }
    if size == 1 {
        return match send == recv {
            true => x.clone(),
            false => Array::invalid(
                "all_to_all_v",
                format!("a group of one receives what it sends: {send:?} against {recv:?}"),
            ),
        };
    }
    let mut shape = x.shape().to_vec();
    shape[0] = recv.iter().sum::<usize>() as i32;
    Array::from_primitive(
        Arc::new(AllToAllV {
            group,
            send: send.to_vec(),
            recv: recv.to_vec(),
            at: std::panic::Location::caller(),
        }),
        vec![x.clone()],
        shape,
        x.dtype(),
    )
}

/// How many rows each rank will send this one in an [`all_to_all_v`] where this rank sends
/// `send[j]` to rank `j`: one small exchange, evaluated now.
///
/// ```
/// use nuvec_core::distributed;
/// assert_eq!(distributed::all_to_all_counts(&[4], None)?, [4]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn all_to_all_counts(send: &[usize], group: Option<&Group>) -> Result<Vec<usize>> {
    let group = group_or_default(group);
    if send.len() != group.size() {
        return Err(Error::Distributed {
            op: "all_to_all_counts".into(),
            rank: None,
            reason: format!(
                "give one count per rank of the group of size {} (got {})",
                group.size(),
                send.len()
            ),
        });
    }
    let counts: Vec<u64> = send.iter().map(|&c| c as u64).collect();
    let counts = Array::from_slice(&counts, &[send.len() as i32]);
    let received = all_to_all(&counts, Some(&group)).to_vec::<u64>()?;
    Ok(received.into_iter().map(|c| c as usize).collect())
}

/// Checks that every rank's send counts agree with the receive counts of the rank they send
/// to, with one small all-gather on `communicator`: every rank finds a disagreement (and
/// none goes on to the exchange without the others), and the error names the pair. Returns
/// the table `count(from, to)` of rows each rank sends each rank. For backends with an
/// `all_to_all_v` of their own.
pub fn check_all_to_all_counts<C: Communicator + ?Sized>(
    communicator: &C,
    (send, recv): (&[usize], &[usize]),
) -> Result<Vec<Vec<usize>>> {
    let (rank, size) = (communicator.rank(), communicator.size());
    let renamed = |error: Error| as_op(error, "all_gather", "all_to_all_v");
    let mine: Vec<u8> = send
        .iter()
        .chain(recv)
        .flat_map(|&c| (c as u64).to_le_bytes())
        .collect();
    let mut table = vec![0u8; mine.len() * size];
    communicator
        .all_gather(&mine, &mut table, DType::U64)
        .map_err(renamed)?;
    let entry = |of: usize, at: usize| {
        let at = (of * 2 * size + at) * 8;
        u64::from_le_bytes(table[at..at + 8].try_into().expect("8 bytes")) as usize
    };
    // Rows `from` sends `to`, and rows `to` expects from `from`.
    let count = |from: usize, to: usize| entry(from, to);
    let expects = |to: usize, from: usize| entry(to, size + from);
    let who = |r: usize| match r == rank {
        true => format!("this rank (rank {r})"),
        false => format!("rank {r}"),
    };
    for to in 0..size {
        for from in 0..size {
            if count(from, to) != expects(to, from) {
                return Err(Error::Distributed {
                    op: "all_to_all_v".into(),
                    rank: Some(if from == rank { to } else { from }),
                    reason: format!(
                        "{} sends rank {to} {} rows, {} expects {}",
                        who(from),
                        count(from, to),
                        who(to),
                        expects(to, from)
                    ),
                });
            }
        }
    }
    Ok((0..size)
        .map(|from| (0..size).map(|to| count(from, to)).collect())
        .collect())
}

/// The variable-size all-to-all built on `communicator`'s all-gather: the ranks gather every
/// rank's send counts (and check them against this rank's receive counts), then every rank's
/// input padded to the longest, and keep the rows sent to them.
pub fn all_to_all_v_by_gathering<C: Communicator + ?Sized>(
    communicator: &C,
    (input, output): (&[u8], &mut [u8]),
    (send, recv, row_bytes): (&[usize], &[usize], usize),
    dtype: DType,
) -> Result<()> {
    let (rank, size) = (communicator.rank(), communicator.size());
    let renamed = |error: Error| as_op(error, "all_gather", "all_to_all_v");
    let table = check_all_to_all_counts(communicator, (send, recv))?;
    let count = |from: usize, to: usize| table[from][to];
    let longest = (0..size)
        .map(|from| (0..size).map(|to| count(from, to)).sum::<usize>())
        .max()
        .unwrap_or(0)
        * row_bytes;
    let mut padded = Buffer::for_output(longest);
    let padded = &mut padded.as_mut_bytes()[..longest];
    padded[..input.len()].copy_from_slice(input);
    padded[input.len()..].fill(0);
    let mut all = Buffer::for_output(longest * size);
    let all = &mut all.as_mut_bytes()[..longest * size];
    communicator
        .all_gather(padded, all, dtype)
        .map_err(renamed)?;
    let mut at = 0;
    for from in 0..size {
        let skip: usize = (0..rank).map(|to| count(from, to)).sum::<usize>() * row_bytes;
        let bytes = count(from, rank) * row_bytes;
        let start = from * longest + skip;
        output[at..at + bytes].copy_from_slice(&all[start..start + bytes]);
        at += bytes;
    }
    Ok(())
}
