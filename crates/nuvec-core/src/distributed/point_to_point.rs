//! Point-to-point messages as graph primitives: `send` (its result is its input, evaluated for
//! the send to happen) and `recv`, effects that run on the group's communicator.

use super::shared::{bytes_of, dims, group_or_default};
use super::Group;
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, DType, Result};
use nuvec_cpu::Buffer;
use std::panic::Location;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
struct Send {
    group: Group,
    dst: usize,
    at: &'static Location<'static>,
}

impl Primitive for Send {
    /// Collectives run on the host (the ring's sockets and shared memory, JACCL, MPI).
    fn host_only(&self) -> bool {
        true
    }

    fn name(&self) -> &str {
        "send"
    }

    fn eval_cpu(&self, inputs: &mut [Input], _outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let input = &inputs[0];
        let shape = dims(&input.shape);
        let what = (input.dtype, &input.shape[..], Some(self.dst));
        self.group.communicate("send", what, self.at, |c| {
            c.send(bytes_of(input), input.dtype, &shape, self.dst)
        })?;
        Ok(vec![input.buffer().clone()])
    }

    fn vjp(
        &self,
        _inputs: &[Array],
        _outputs: &[Array],
        _cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Err(point_to_point_not_differentiable("vjp", "send"))
    }

    fn jvp(
        &self,
        _inputs: &[Array],
        _outputs: &[Array],
        _tangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Err(point_to_point_not_differentiable("jvp", "send"))
    }

    /// MLX's rule: the whole batch is sent as it is laid out, and the output keeps the
    /// input's batch axis. The receiver asks for the batched shape.
    fn vmap(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let x = &inputs[0];
        let sent = Array::from_primitive(
            Arc::new(self.clone()),
            vec![x.clone()],
            x.shape().to_vec(),
            x.dtype(),
        );
        Ok((vec![sent], axes.to_vec()))
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

/// Why `transform` cannot go through `op`: a send and its receive are two arrays on two
/// ranks, with no graph edge between them to carry a derivative (MLX has no rule either).
fn point_to_point_not_differentiable(transform: &'static str, op: &str) -> crate::Error {
    crate::Error::Transform {
        transform,
        reason: format!(
            "{op} has no {transform} rule: a send and its recv are separate arrays on two \
             ranks, so no derivative flows between them; differentiate each rank's part \
             separately (and send the cotangents or tangents explicitly), or wrap the value \
             in stop_gradient"
        ),
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Recv {
    group: Group,
    src: usize,
    at: &'static Location<'static>,
}

impl Primitive for Recv {
    /// Collectives run on the host (the ring's sockets and shared memory, JACCL, MPI).
    fn host_only(&self) -> bool {
        true
    }

    fn name(&self) -> &str {
        "recv"
    }

    fn eval_cpu(&self, _inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let shape = dims(&spec.shape);
        let mut out = spec.alloc();
        let bytes = spec.bytes();
        let what = (spec.dtype, &spec.shape[..], Some(self.src));
        self.group.communicate("recv", what, self.at, |c| {
            c.recv(
                &mut out.as_mut_bytes()[..bytes],
                spec.dtype,
                &shape,
                self.src,
            )
        })?;
        Ok(vec![Arc::new(out)])
    }

    fn is_effect(&self) -> bool {
        true
    }

    fn communication_group(&self) -> Option<Group> {
        Some(self.group)
    }
}

/// Sends `x` to rank `dst`; the result is `x`, to be evaluated for the send to happen.
#[track_caller]
pub fn send(x: &Array, dst: usize, group: Option<&Group>) -> Array {
    let group = group_or_default(group);
    if dst >= group.size() || dst == group.rank() {
        return Array::invalid(
            "send",
            format!(
                "destination rank {dst} must be another rank of the group of size {}",
                group.size()
            ),
        );
    }
    Array::from_primitive(
        Arc::new(Send {
            group,
            dst,
            at: Location::caller(),
        }),
        vec![x.clone()],
        x.shape().to_vec(),
        x.dtype(),
    )
}

/// Receives an array of `shape` and `dtype` from rank `src`. A sender whose array has another
/// shape or dtype makes this fail with an error naming both.
#[track_caller]
pub fn recv(shape: &[i32], dtype: DType, src: usize, group: Option<&Group>) -> Array {
    let group = group_or_default(group);
    if src >= group.size() || src == group.rank() {
        return Array::invalid(
            "recv",
            format!(
                "source rank {src} must be another rank of the group of size {}",
                group.size()
            ),
        );
    }
    if shape.iter().any(|&d| d < 0) {
        return Array::invalid("recv", format!("invalid shape {shape:?}"));
    }
    Array::from_primitive(
        Arc::new(Recv {
            group,
            src,
            at: Location::caller(),
        }),
        vec![],
        shape.to_vec(),
        dtype,
    )
}

/// Receives an array shaped and typed like `like` from rank `src`.
#[track_caller]
pub fn recv_like(like: &Array, src: usize, group: Option<&Group>) -> Array {
    recv(like.shape(), like.dtype(), src, group)
}
