//! The contract every graph node's operation fulfils.
//!
//! # Design
//! The trait is open: `nuvec-core` implements it for every op, and later crates (collectives,
//! quantized layers) add their own primitives that evaluation and transforms treat alike.
//! A primitive receives its inputs already evaluated, as contiguous row-major buffers, and
//! returns one buffer per output. Shapes and dtypes were fixed when the node was built.
//!
//! # Threading
//! `eval_cpu` may run on any thread (the caller's, the `async_eval` worker, a group's
//! communication worker); a primitive holds no thread-affine state.

use crate::{Array, DType, Error, Result};
pub use nuvec_cpu::Buffer;
use nuvec_cpu::Element;
use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

/// An evaluated input handed to [`Primitive::eval_cpu`].
#[derive(Debug)]
pub struct Input {
    /// The input's shape (MLX's dims as `usize`).
    pub shape: Vec<usize>,
    /// The input's dtype.
    pub dtype: DType,
    buffer: Arc<Buffer>,
}

impl Input {
    pub(crate) fn new(shape: Vec<usize>, dtype: DType, buffer: Arc<Buffer>) -> Input {
        Input {
            shape,
            dtype,
            buffer,
        }
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// The elements as `T` (the caller dispatched on [`Input::dtype`]).
    pub fn slice<T: Element>(&self) -> &[T] {
        &self.buffer.as_slice::<T>()[..self.size()]
    }

    /// The shared buffer, for outputs that are views of this input (reshape).
    pub fn buffer(&self) -> &Arc<Buffer> {
        &self.buffer
    }

    /// This input's buffer, owned, when nothing else holds it and it has `bytes` bytes: the
    /// result can then be computed in place (donation).
    pub fn take_owned(&mut self, bytes: usize) -> Option<Buffer> {
        if self.buffer.len_bytes() != bytes
            || Arc::strong_count(&self.buffer) != 1
            || !self.buffer.is_writable()
        {
            return None;
        }
        let shared = std::mem::replace(&mut self.buffer, Arc::new(Buffer::zeroed(0)));
        match Arc::try_unwrap(shared) {
            Ok(owned) => Some(owned),
            Err(shared) => {
                self.buffer = shared;
                None
            }
        }
    }
}

/// The shape and dtype of one output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputSpec {
    /// Shape as `usize` dims.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
}

impl OutputSpec {
    /// Number of elements.
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }
    /// Bytes the output needs.
    pub fn bytes(&self) -> usize {
        self.size() * self.dtype.size()
    }
    /// A buffer for this output, which the kernel must write in full (its initial contents
    /// are unspecified: recycled memory or zeros).
    pub fn alloc(&self) -> Buffer {
        Buffer::for_output(self.bytes())
    }
}

/// An operation of the lazy graph.
pub trait Primitive: Send + Sync + Debug + Any {
    /// MLX's name of the primitive (used in errors and graph dumps).
    fn name(&self) -> &str;

    /// Computes the outputs from evaluated inputs on the CPU.
    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>>;

    /// Vector-Jacobian product: the cotangents of the inputs in `argnums`, given the primal
    /// `inputs`, the `outputs` and their `cotangents`.
    fn vjp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let _ = (inputs, outputs, cotangents, argnums);
        Err(Error::Transform {
            transform: "vjp",
            reason: format!("primitive {} has no vjp rule", self.name()),
        })
    }

    /// Jacobian-vector product: one tangent per output, given the primal `inputs`, the
    /// `outputs` and the `tangents` of the inputs in `argnums` (the other inputs' tangents
    /// are zero).
    fn jvp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        tangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let _ = (inputs, outputs, tangents, argnums);
        Err(Error::Transform {
            transform: "jvp",
            reason: format!("primitive {} has no jvp rule", self.name()),
        })
    }

    /// Batching rule: the outputs of the primitive over inputs batched along `axes` (`None`:
    /// not batched; at least one is), and each output's batch axis. `outputs` are the
    /// unbatched outputs, for their shapes and dtypes.
    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let _ = (inputs, outputs, axes);
        Err(Error::Transform {
            transform: "vmap",
            reason: format!("primitive {} has no vmap rule", self.name()),
        })
    }

    /// Whether `other` computes the same function (compile's common-subexpression elimination).
    fn is_equivalent(&self, other: &dyn Primitive) -> bool {
        let _ = other;
        false
    }

    /// Whether the primitive always runs on the host whatever the default device (a
    /// collective over sockets or shared memory): its GPU inputs are copied to the host.
    fn host_only(&self) -> bool {
        false
    }

    /// Computes the outputs from evaluated inputs on `gpu` (contiguous, row-major, in its
    /// memory). A primitive without GPU kernels keeps this default, an error naming it and
    /// the device.
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<nuvec_cuda::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> Result<Vec<Arc<crate::gpu::GpuBuffer>>> {
        let _ = (inputs, outputs);
        Err(crate::gpu::no_kernel(self.name(), gpu))
    }

    /// Whether the primitive is element-wise: one output whose shape is the broadcast of the
    /// inputs' shapes, whatever they are (compile's shapeless mode replays such programs for
    /// new shapes, and fuses chains of them).
    fn is_elementwise(&self) -> bool {
        false
    }

    /// Whether derivatives flow through input `input`: reverse mode sends it a cotangent and
    /// forward mode takes its tangent only if so. False for `stop_gradient` and for inputs
    /// that only carry values along (a custom function's outputs, whose own graph the
    /// function's rule replaces): even a zero sent there could meet an infinite derivative
    /// and turn a sum into NaN.
    fn differentiates_input(&self, _input: usize) -> bool {
        true
    }

    /// The output shapes for inputs of `inputs` shapes, where the primitive was traced with
    /// outputs of `traced` shapes (same ranks): compile's shapeless mode replays a program
    /// for new shapes only when every step answers. `None`: the primitive's parameters depend
    /// on the exact shapes (reshape, slices, padding…). Element-wise primitives broadcast.
    fn output_shapes(&self, inputs: &[&[i32]], traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        let _ = traced;
        if !self.is_elementwise() {
            return None;
        }
        let mut shape: Vec<i32> = Vec::new();
        for input in inputs {
            shape = crate::ops::broadcast_shapes(&shape, input).ok()?;
        }
        Some(vec![shape])
    }

    /// The group whose connections the primitive uses, if it communicates: evaluation runs
    /// it on that group's communication worker, in order with the group's other collectives.
    fn communication_group(&self) -> Option<crate::distributed::Group> {
        None
    }

    /// Whether the primitive has an effect (random draws, communication): never merged or
    /// constant-folded by compile.
    fn is_effect(&self) -> bool {
        false
    }
}
