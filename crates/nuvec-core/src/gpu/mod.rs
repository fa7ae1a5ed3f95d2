//! Arrays on CUDA devices (the `cuda` feature): an op built while a GPU is the default device
//! runs there. Its inputs are copied to the GPU first where they are not already on it (a host
//! array's copy is kept for its next use), its primitive's `eval_gpu` launches kernels from
//! `nuvec-cuda`, and the result stays on the GPU until read. A primitive without GPU kernels
//! is an error naming it and the device, never a silent fallback.

use crate::array::{lock, Op, State};
use crate::primitive::OutputSpec;
use crate::{Array, DType, Device, Error, Result};
use nuvec_cpu::Buffer;
pub use nuvec_cuda::Gpu;
use nuvec_cuda::{CudaError, DeviceBuffer};
use std::sync::Arc;

/// An array's data in a GPU's memory.
pub struct GpuBuffer {
    gpu: Arc<Gpu>,
    buffer: DeviceBuffer,
}

impl std::fmt::Debug for GpuBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes on gpu:{}", self.buffer.len(), self.gpu.index())
    }
}

impl GpuBuffer {
    /// `buffer`, held on `gpu`.
    pub fn new(gpu: &Arc<Gpu>, buffer: DeviceBuffer) -> Arc<GpuBuffer> {
        Arc::new(GpuBuffer {
            gpu: gpu.clone(),
            buffer,
        })
    }

    /// The device memory.
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.buffer
    }

    /// The device memory, to write in place (a donated input).
    pub(crate) fn buffer_mut(&mut self) -> &mut DeviceBuffer {
        &mut self.buffer
    }

    /// The GPU holding it.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The device holding it.
    pub fn device(&self) -> Device {
        Device::Gpu(self.gpu.index())
    }

    /// A host copy (waits for the work that writes it).
    pub(crate) fn to_host(&self) -> Result<Arc<Buffer>> {
        let bytes = self
            .gpu
            .download(&self.buffer, self.buffer.len())
            .map_err(|e| cuda("reading an array back from the GPU", e))?;
        Ok(Arc::new(Buffer::from_slice(&bytes)))
    }
}

/// An evaluated input handed to [`crate::primitive::Primitive::eval_gpu`].
#[derive(Debug)]
pub struct GpuInput {
    /// The input's shape.
    pub shape: Vec<usize>,
    /// The input's dtype.
    pub dtype: DType,
    /// The input's data, contiguous and row-major.
    pub data: Arc<GpuBuffer>,
}

impl GpuInput {
    /// Number of elements.
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// The device memory.
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.data.buffer
    }
}

/// The error of a GPU call made for `op`.
pub fn cuda(op: &str, error: CudaError) -> Error {
    Error::eval(op, error.to_string())
}

/// The error of a primitive with no GPU kernel.
pub(crate) fn no_kernel(op: &str, gpu: &Gpu) -> Error {
    Error::eval(
        op,
        format!(
            "{op} has no GPU kernel (gpu:{}); build it on the CPU, e.g. inside \
             `with_default_device(Device::Cpu, ..)`",
            gpu.index()
        ),
    )
}

/// Runs `op` on GPU `index` over `inputs`, giving its outputs' states.
pub(crate) fn execute(
    op: &Op,
    index: usize,
    inputs: Vec<Array>,
    specs: &[OutputSpec],
) -> Result<Vec<State>> {
    let name = op.primitive.name();
    let gpu = nuvec_cuda::gpu(index).map_err(|e| cuda(name, e))?;
    let mut collected = Vec::with_capacity(inputs.len());
    for input in &inputs {
        collected.push(GpuInput {
            shape: input.dims(),
            dtype: input.dtype(),
            data: on_gpu(input, &gpu)?,
        });
    }
    drop(inputs);
    let buffers = crate::eval::guarded(name, specs.len(), || {
        op.primitive.eval_gpu(&gpu, &mut collected, specs)
    })?;
    Ok(buffers.into_iter().map(State::OnGpu).collect())
}

/// `input`'s data on `gpu`, copied there when it lives elsewhere.
fn on_gpu(input: &Array, gpu: &Arc<Gpu>) -> Result<Arc<GpuBuffer>> {
    // An input nothing else refers to gives its memory up: the op may write it in place.
    let sole_owner = Arc::strong_count(&input.node) == 1;
    let mut state = lock(&input.node.state);
    if let State::OnGpu(data) = &*state {
        if sole_owner && data.gpu.index() == gpu.index() {
            let data = data.clone();
            *state = State::Failed(Error::eval("eval", "buffer donated to a consumer"));
            return Ok(data);
        }
    }
    let host = match &*state {
        State::OnGpu(data) if data.gpu.index() == gpu.index() => return Ok(data.clone()),
        State::OnGpu(data) => data.to_host()?,
        State::Ready(buffer) => {
            if let Some(copy) = input.node.uploaded.get() {
                if copy.gpu.index() == gpu.index() {
                    return Ok(copy.clone());
                }
            }
            buffer.clone()
        }
        State::Failed(error) => return Err(error.clone()),
        State::Pending { op } => {
            return Err(Error::eval(
                op.primitive.name(),
                "input not evaluated before its consumer",
            ))
        }
    };
    drop(state);
    let bytes = host.as_bytes().get(..input.nbytes()).ok_or_else(|| {
        Error::eval(
            "copying an array to the GPU",
            format!(
                "its buffer holds {} bytes, its shape needs {}",
                host.len_bytes(),
                input.nbytes()
            ),
        )
    })?;
    let copy = GpuBuffer::new(
        gpu,
        gpu.upload(bytes)
            .map_err(|e| cuda("copying an array to the GPU", e))?,
    );
    let _ = input.node.uploaded.set(copy.clone());
    Ok(copy)
}

/// Shapes and strides as the kernels take them.
pub(crate) fn i64s(values: &[usize]) -> Vec<i64> {
    values.iter().map(|&v| v as i64).collect()
}

/// The layout of a contiguous element-wise op over `n` elements.
pub(crate) fn flat(n: usize) -> Result<nuvec_cuda::ops::Dims> {
    nuvec_cuda::ops::Dims::new(&[n as i64], &[&[1], &[1]]).map_err(|e| cuda("layout", e))
}

/// What [`crate::primitive::Primitive::eval_gpu`] returns.
pub type GpuOutputs = Result<Vec<Arc<GpuBuffer>>>;

/// One output from a kernel's `result`, its error named for `op`.
pub(crate) fn one(
    gpu: &Arc<Gpu>,
    op: &str,
    result: nuvec_cuda::Result<DeviceBuffer>,
) -> GpuOutputs {
    Ok(vec![GpuBuffer::new(gpu, result.map_err(|e| cuda(op, e))?)])
}

/// The indices of `idx` as the `int32` the GPU's gathers and scatters read: its own buffer,
/// or `converted` (which the result borrows) holding a converted copy.
pub(crate) fn int32_indices<'a>(
    gpu: &Gpu,
    op: &str,
    idx: &'a GpuInput,
    converted: &'a mut Option<DeviceBuffer>,
) -> Result<&'a DeviceBuffer> {
    if idx.dtype == DType::I32 {
        return Ok(idx.buffer());
    }
    let n = idx.size();
    let copy = nuvec_cuda::ops::convert(
        gpu,
        (idx.buffer(), idx.dtype),
        (n as u64, &flat(n)?),
        DType::I32,
    )
    .map_err(|e| cuda(op, e))?;
    Ok(converted.insert(copy))
}

/// The row-major strides of `shape`, in elements.
pub(crate) fn contiguous(shape: &[usize]) -> Vec<i64> {
    let mut strides = vec![0i64; shape.len()];
    let mut step = 1i64;
    for k in (0..shape.len()).rev() {
        strides[k] = step;
        step *= shape[k] as i64;
    }
    strides
}

/// A contiguous copy of `x` with its axes in the order `perm` (output axis `i` is input axis
/// `perm[i]`).
pub(crate) fn permuted(gpu: &Gpu, op: &str, x: &GpuInput, perm: &[usize]) -> Result<DeviceBuffer> {
    let own = contiguous(&x.shape);
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let from: Vec<i64> = perm.iter().map(|&p| own[p]).collect();
    strided(gpu, op, (x.buffer(), 0), x.dtype, &shape, &from)
}

/// A new contiguous array of `shape` read from `x` through element strides `from`, starting
/// at element `offset`.
pub(crate) fn strided(
    gpu: &Gpu,
    op: &str,
    (x, offset): (&DeviceBuffer, usize),
    dtype: DType,
    shape: &[usize],
    from: &[i64],
) -> Result<DeviceBuffer> {
    let n: usize = shape.iter().product();
    let mut out = gpu.alloc(n * dtype.size()).map_err(|e| cuda(op, e))?;
    let dims = nuvec_cuda::ops::Dims::copy(&i64s(shape), from, &contiguous(shape))
        .map_err(|e| cuda(op, e))?;
    nuvec_cuda::ops::copy_into(
        gpu,
        (x, offset),
        (&mut out, 0),
        dtype.size(),
        (n as u64, &dims),
    )
    .map_err(|e| cuda(op, e))?;
    Ok(out)
}

/// The operands of a flat element-wise kernel over `shape`: each input read at `i` (one of the
/// output's size, `true`) or once (a scalar, `false`). An input broadcast along some axes only
/// is made whole first, into `made` (which the operands borrow).
pub(crate) fn flat_operands<'a>(
    gpu: &Gpu,
    op: &str,
    inputs: &'a [GpuInput],
    shape: &[usize],
    made: &'a mut Vec<Option<DeviceBuffer>>,
) -> Result<Vec<(&'a DeviceBuffer, bool)>> {
    let n: usize = shape.iter().product();
    made.clear();
    for input in inputs {
        made.push(if input.size() == n || input.size() == 1 {
            None
        } else {
            let from: Vec<i64> = crate::ops::broadcast_strides(&input.shape, shape)
                .iter()
                .map(|&s| s as i64)
                .collect();
            Some(strided(
                gpu,
                op,
                (input.buffer(), 0),
                input.dtype,
                shape,
                &from,
            )?)
        });
    }
    Ok(inputs
        .iter()
        .zip(made.iter())
        .map(|(input, made)| match made {
            Some(buffer) => (buffer, true),
            None => (input.buffer(), input.size() == n && n != 1),
        })
        .collect())
}
