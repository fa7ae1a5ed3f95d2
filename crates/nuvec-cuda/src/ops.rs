//! Running the kernels: each function checks its operands, takes the kernel for the op and
//! dtype (compiled on first use), allocates the output from the device's pool and launches
//! on the device's stream. Nothing here waits for the device; reading a result back does.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::kernels::elementwise::{self, MAX_DIMS};
use crate::kernels::reduce::{self, Reduction, BLOCK};
use crate::kernels::{layout, random, Source};
use crate::memory::DeviceBuffer;
use cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};
use nuvec_cpu::binary::BinaryOp;
use nuvec_cpu::unary::UnaryOp;
use nuvec_cpu::DType;

/// Threads per block of the element-wise kernels.
const THREADS: u32 = 256;
/// The most blocks an element-wise launch uses (each thread then loops).
const MOST_BLOCKS: u64 = 65_535;

/// The strided kernels' layout parameter: the output's shape and each operand's strides (in
/// elements; operand 2 is the output), as `elementwise::DIMS_STRUCT` declares it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Dims {
    ndim: i32,
    shape: [i64; MAX_DIMS],
    strides: [[i64; MAX_DIMS]; 3],
}

// SAFETY: `Dims` is `repr(C)` plain data laid out as the kernels' `nv_dims`: an int, padding
// to 8 bytes, then arrays of 64-bit integers.
unsafe impl DeviceRepr for Dims {}

impl Dims {
    /// The layout of an output of `shape` with the inputs' `strides` (up to two, in elements;
    /// 0 along a broadcast axis); the output is contiguous. Dimensions contiguous in every
    /// operand are merged first; more than [`MAX_DIMS`] remaining is an error.
    pub fn new(shape: &[i64], strides: &[&[i64]]) -> Result<Dims> {
        let mut out_strides = vec![0i64; shape.len()];
        let mut step = 1;
        for k in (0..shape.len()).rev() {
            out_strides[k] = step;
            step *= shape[k];
        }
        let operands: Vec<&[i64]> = strides.iter().copied().chain([&out_strides[..]]).collect();
        // Merge axis k into k + 1 where every operand steps over k as over k + 1's extent.
        let mut merged_shape: Vec<i64> = Vec::new();
        let mut merged: Vec<Vec<i64>> = vec![Vec::new(); operands.len()];
        for k in 0..shape.len() {
            let joins = !merged_shape.is_empty()
                && operands
                    .iter()
                    .enumerate()
                    .all(|(o, s)| merged[o].last().copied() == Some(s[k] * shape[k]));
            if joins {
                *merged_shape.last_mut().expect("not empty") *= shape[k];
                for (o, s) in operands.iter().enumerate() {
                    *merged[o].last_mut().expect("not empty") = s[k];
                }
            } else {
                merged_shape.push(shape[k]);
                for (o, s) in operands.iter().enumerate() {
                    merged[o].push(s[k]);
                }
            }
        }
        if merged_shape.len() > MAX_DIMS {
            return Err(CudaError::Unsupported {
                op: format!(
                    "a strided element-wise kernel over {} dimensions (at most {MAX_DIMS})",
                    merged_shape.len()
                ),
                dtype: "any dtype".into(),
                device: 0,
            });
        }
        let mut dims = Dims {
            ndim: merged_shape.len() as i32,
            ..Dims::default()
        };
        dims.shape[..merged_shape.len()].copy_from_slice(&merged_shape);
        let slot = |o: usize| if o + 1 == operands.len() { 2 } else { o };
        for (o, s) in merged.iter().enumerate() {
            dims.strides[slot(o)][..s.len()].copy_from_slice(s);
        }
        Ok(dims)
    }

    /// The layout of a copy over `shape` reading through the element strides `from` and
    /// writing through `to` (a part of a larger output, as a concatenation writes it).
    pub fn copy(shape: &[i64], from: &[i64], to: &[i64]) -> Result<Dims> {
        let mut dims = Dims::new(shape, &[from, to])?;
        dims.strides[2] = dims.strides[1];
        dims.strides[1] = [0; MAX_DIMS];
        Ok(dims)
    }

    /// Whether the output is contiguous and each of the first `inputs` operands contiguous or
    /// a scalar (the `_c` kernel serves).
    pub fn contiguous(&self, inputs: usize) -> bool {
        self.ndim == 0
            || (self.ndim == 1
                && (self.shape[0] <= 1
                    || (self.strides[2][0] == 1
                        && (0..inputs).all(|o| matches!(self.strides[o][0], 0 | 1)))))
    }

    /// The `_c` kernel's stride parameter for input `operand`: 0 for a scalar, 1 otherwise.
    fn unit_stride(&self, operand: usize) -> u64 {
        u64::from(self.ndim == 0 || self.strides[operand][0] != 0)
    }

    /// Whether a copy with this layout (from [`Dims::copy`]) reads and writes contiguously, as
    /// the copy kernel's packed path does (`nv_flat_copy`).
    fn flat_copy(&self) -> bool {
        self.ndim == 0 || (self.ndim == 1 && self.strides[0][0] == 1 && self.strides[2][0] == 1)
    }
}

pub(crate) fn grid(n: u64) -> LaunchConfig {
    let blocks = n.div_ceil(u64::from(THREADS)).clamp(1, MOST_BLOCKS) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

pub(crate) fn unsupported(gpu: &Gpu, op: &str, dtype: DType) -> CudaError {
    CudaError::Unsupported {
        op: op.into(),
        dtype: dtype.to_string(),
        device: gpu.index(),
    }
}

pub(crate) fn launched(
    gpu: &Gpu,
    source: &Source,
    outcome: std::result::Result<(), cudarc::driver::DriverError>,
) -> Result<()> {
    outcome.map_err(|e| gpu.error(&format!("running {}", source.name), e))
}

/// One element-wise kernel over `inputs` (their layout in `dims`) into a new output of `n`
/// elements of `output`.
fn elementwise(
    gpu: &Gpu,
    source: &Source,
    inputs: &[&DeviceBuffer],
    (n, dims): (u64, &Dims),
    output: DType,
) -> Result<DeviceBuffer> {
    let mut out = gpu.alloc(n as usize * output.size())?;
    if n == 0 {
        return Ok(out);
    }
    let contiguous = dims.contiguous(inputs.len());
    let entry = format!("{}_{}", source.name, if contiguous { "c" } else { "s" });
    let function = gpu.function(source, &entry)?;
    let strides: Vec<u64> = (0..inputs.len()).map(|k| dims.unit_stride(k)).collect();
    let mut launch = gpu.stream.launch_builder(&function);
    for input in inputs {
        launch.arg(input.block());
    }
    launch.arg(out.block_mut());
    launch.arg(&n);
    if contiguous {
        for stride in &strides {
            launch.arg(stride);
        }
    } else {
        launch.arg(dims);
    }
    let threads = if contiguous {
        n.div_ceil(u64::from(elementwise::PER_THREAD))
    } else {
        n
    };
    // SAFETY: the kernel reads `n` elements of each input at the offsets `dims` gives (the
    // caller's layout, within the inputs; a scalar's element 0 for a stride of 0) and writes
    // `n` contiguous elements of `out`, which holds them; the arguments match the kernel's
    // parameters in order and type.
    let outcome = unsafe { launch.launch(grid(threads)) }.map(drop);
    launched(gpu, source, outcome)?;
    Ok(out)
}

/// `op` applied to `x` (`n` elements laid out as `dims` says) into a new array of `output`.
pub fn unary(
    gpu: &Gpu,
    op: UnaryOp,
    (x, input): (&DeviceBuffer, DType),
    (n, dims): (u64, &Dims),
    output: DType,
) -> Result<DeviceBuffer> {
    let source =
        elementwise::unary(op, input, output).ok_or_else(|| unsupported(gpu, op.name(), input))?;
    elementwise(gpu, &source, &[x], (n, dims), output)
}

/// `op` applied to `a` and `b` (both `input`, laid out as `dims` says) into a new array.
pub fn binary(
    gpu: &Gpu,
    op: BinaryOp,
    (a, b, input): (&DeviceBuffer, &DeviceBuffer, DType),
    (n, dims): (u64, &Dims),
) -> Result<DeviceBuffer> {
    let output = crate::kernels::binary_output(op, input);
    let source =
        elementwise::binary(op, input, output).ok_or_else(|| unsupported(gpu, op.name(), input))?;
    elementwise(gpu, &source, &[a, b], (n, dims), output)
}

/// `x` converted from `input` to `output`.
pub fn convert(
    gpu: &Gpu,
    (x, input): (&DeviceBuffer, DType),
    (n, dims): (u64, &Dims),
    output: DType,
) -> Result<DeviceBuffer> {
    let source = elementwise::convert(input, output);
    elementwise(gpu, &source, &[x], (n, dims), output)
}

/// `reduction` of each of `rows` contiguous rows of `cols` elements of `x`.
pub fn reduce_rows(
    gpu: &Gpu,
    reduction: Reduction,
    (x, input): (&DeviceBuffer, DType),
    (rows, cols): (u64, u64),
    output: DType,
) -> Result<DeviceBuffer> {
    let source = reduce::row_reduction(reduction, input, output)
        .ok_or_else(|| unsupported(gpu, reduction.name(), input))?;
    rowwise(gpu, &source, x, (rows, cols), rows as usize * output.size())
}

/// Softmax of each of `rows` contiguous rows of `cols` elements of `x`.
pub fn softmax_rows(
    gpu: &Gpu,
    (x, dtype): (&DeviceBuffer, DType),
    (rows, cols): (u64, u64),
) -> Result<DeviceBuffer> {
    let source = reduce::softmax(dtype).ok_or_else(|| unsupported(gpu, "softmax", dtype))?;
    rowwise(
        gpu,
        &source,
        x,
        (rows, cols),
        (rows * cols) as usize * dtype.size(),
    )
}

fn rowwise(
    gpu: &Gpu,
    source: &Source,
    x: &DeviceBuffer,
    (rows, cols): (u64, u64),
    out_bytes: usize,
) -> Result<DeviceBuffer> {
    let mut out = gpu.alloc(out_bytes)?;
    if rows == 0 || cols == 0 {
        return Ok(out);
    }
    let rows_u32 = u32::try_from(rows).map_err(|_| {
        gpu.error(
            &source.name,
            format!("{rows} rows (at most {} per launch)", u32::MAX),
        )
    })?;
    let function = gpu.function(source, &source.name)?;
    let mut launch = gpu.stream.launch_builder(&function);
    launch
        .arg(x.block())
        .arg(out.block_mut())
        .arg(&rows)
        .arg(&cols);
    let config = LaunchConfig {
        grid_dim: (rows_u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: one block per row reads `cols` elements of row `blockIdx.x` of `x` (which holds
    // `rows × cols`) and writes that row's output, which `out` holds.
    let outcome = unsafe { launch.launch(config) }.map(drop);
    launched(gpu, source, outcome)?;
    Ok(out)
}

/// A copy of `x` (elements of `bytes` bytes) in the layout `dims` gives operand 0, into a new
/// contiguous array of `n` elements.
pub fn copy_strided(
    gpu: &Gpu,
    x: &DeviceBuffer,
    bytes: usize,
    (n, dims): (u64, &Dims),
) -> Result<DeviceBuffer> {
    let source = layout::strided_copy(bytes)
        .ok_or_else(|| gpu.error("copy", format!("elements of {bytes} bytes")))?;
    let mut out = gpu.alloc(n as usize * bytes)?;
    if n == 0 {
        return Ok(out);
    }
    let function = gpu.function(&source, &source.name)?;
    let mut launch = gpu.stream.launch_builder(&function);
    launch.arg(x.block()).arg(out.block_mut()).arg(&n).arg(dims);
    // SAFETY: the kernel reads `x` at the offsets `dims` gives (within `x`, by the caller's
    // layout) and writes `n` elements at the output's offsets, which `out` holds.
    let outcome = unsafe { launch.launch(grid(copy_threads(n, dims))) }.map(drop);
    launched(gpu, &source, outcome)?;
    Ok(out)
}

/// Copies `n` elements of `bytes` bytes from `x`, starting at element `from`, into `y`,
/// starting at element `to`, each side laid out as [`Dims::copy`] says (`y` is written in
/// place: a part of a concatenation, or the result of a view with an offset).
pub fn copy_into(
    gpu: &Gpu,
    (x, from): (&DeviceBuffer, usize),
    (y, to): (&mut DeviceBuffer, usize),
    bytes: usize,
    (n, dims): (u64, &Dims),
) -> Result<()> {
    let source = layout::strided_copy(bytes)
        .ok_or_else(|| gpu.error("copy", format!("elements of {bytes} bytes")))?;
    if n == 0 {
        return Ok(());
    }
    let (x_start, y_start) = (from * bytes, to * bytes);
    if x_start > x.len() || y_start > y.len() {
        return Err(gpu.error(
            "copy",
            format!(
                "an offset past its buffer (element {from} of {} bytes, element {to} of {})",
                x.len(),
                y.len()
            ),
        ));
    }
    let function = gpu.function(&source, &source.name)?;
    let x_view = x.block().slice(x_start..);
    let mut y_view = y.block_mut().slice_mut(y_start..);
    let mut launch = gpu.stream.launch_builder(&function);
    launch.arg(&x_view).arg(&mut y_view).arg(&n).arg(dims);
    // SAFETY: the kernel reads `x` from element `from` at the offsets `dims` gives and writes
    // `y` from element `to` likewise; the caller's layout keeps both within their buffers.
    let outcome = unsafe { launch.launch(grid(copy_threads(n, dims))) }.map(drop);
    launched(gpu, &source, outcome)
}

/// The threads a copy of `n` elements laid out as `dims` launches: a contiguous one takes
/// [`PER_THREAD`](elementwise::PER_THREAD) elements per thread, a strided one one.
fn copy_threads(n: u64, dims: &Dims) -> u64 {
    if dims.flat_copy() {
        n.div_ceil(u64::from(elementwise::PER_THREAD))
    } else {
        n
    }
}

/// A fused chain (`kernels::fused::chain`'s `source`) over `inputs` of `dtype`, each of `n`
/// elements (`true`) or a scalar (`false`), into a new array of `n` elements.
pub fn fused(
    gpu: &Gpu,
    source: &Source,
    inputs: &[(&DeviceBuffer, bool)],
    n: u64,
    dtype: DType,
) -> Result<DeviceBuffer> {
    let mut out = gpu.alloc(n as usize * dtype.size())?;
    if n == 0 {
        return Ok(out);
    }
    let function = gpu.function(source, &source.name)?;
    let strides: Vec<u64> = inputs.iter().map(|&(_, full)| u64::from(full)).collect();
    let mut launch = gpu.stream.launch_builder(&function);
    for ((x, _), stride) in inputs.iter().zip(&strides) {
        launch.arg(x.block()).arg(stride);
    }
    launch.arg(out.block_mut()).arg(&n);
    let threads = n.div_ceil(u64::from(elementwise::PER_THREAD));
    // SAFETY: the kernel reads element `i` of each full input (which holds `n`) or element 0
    // of each scalar, and writes `n` elements of `out`, which holds them.
    let outcome = unsafe { launch.launch(grid(threads)) }.map(drop);
    launched(gpu, source, outcome)?;
    Ok(out)
}

/// `where(c, a, b)` over `n` elements of `bytes` bytes: each operand of `n` elements (`true`)
/// or a scalar (`false`); the condition is `bool`.
pub fn select(
    gpu: &Gpu,
    [c, a, b]: [(&DeviceBuffer, bool); 3],
    bytes: usize,
    n: u64,
) -> Result<DeviceBuffer> {
    let source = layout::select(bytes)
        .ok_or_else(|| gpu.error("where", format!("elements of {bytes} bytes")))?;
    let mut out = gpu.alloc(n as usize * bytes)?;
    if n == 0 {
        return Ok(out);
    }
    let function = gpu.function(&source, &source.name)?;
    let strides = [c.1, a.1, b.1].map(u64::from);
    let mut launch = gpu.stream.launch_builder(&function);
    launch
        .arg(c.0.block())
        .arg(&strides[0])
        .arg(a.0.block())
        .arg(&strides[1])
        .arg(b.0.block())
        .arg(&strides[2])
        .arg(out.block_mut())
        .arg(&n);
    // SAFETY: the kernel reads element `i` of each full operand (`n` of them) or element 0 of
    // a scalar, and writes `n` elements of `out`, which holds them.
    let outcome = unsafe { launch.launch(grid(n)) }.map(drop);
    launched(gpu, &source, outcome)?;
    Ok(out)
}

/// The shape of a gather: the source viewed as `[outer, axis, inner]`, `taken` indices along
/// the axis, one per output element (`take_along_axis`) or one per position (`take`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gather {
    /// The product of the dimensions before the axis.
    pub outer: u64,
    /// The axis's extent.
    pub axis: u64,
    /// Positions taken along the axis.
    pub taken: u64,
    /// The product of the dimensions after the axis.
    pub inner: u64,
    /// Whether there is an index per output element (else one per position).
    pub per_element: bool,
}

/// Elements of `x` (of `bytes` bytes each) at the `int32` `indices` along an axis, as `shape`
/// says; an index out of the axis's range (after counting negative ones from its end) is an
/// error naming the axis's extent.
pub fn gather(
    gpu: &Gpu,
    (x, bytes): (&DeviceBuffer, usize),
    indices: &DeviceBuffer,
    shape: Gather,
) -> Result<DeviceBuffer> {
    let source = layout::gather(bytes)
        .ok_or_else(|| gpu.error("gather", format!("elements of {bytes} bytes")))?;
    let n = shape.outer * shape.taken * shape.inner;
    let mut out = gpu.alloc(n as usize * bytes)?;
    if n == 0 {
        return Ok(out);
    }
    if shape.axis == 0 {
        return Err(gpu.error("gather", "indices into an axis of extent 0"));
    }
    let mut flag = gpu.upload(&[0u8; 4])?;
    let function = gpu.function(&source, &source.name)?;
    let per_element = i32::from(shape.per_element);
    let mut launch = gpu.stream.launch_builder(&function);
    launch
        .arg(x.block())
        .arg(indices.block())
        .arg(out.block_mut())
        .arg(&shape.outer)
        .arg(&shape.axis)
        .arg(&shape.taken)
        .arg(&shape.inner)
        .arg(&per_element)
        .arg(flag.block_mut());
    // SAFETY: the kernel reads `outer × axis × inner` elements of `x` (indices clamped into
    // the axis) and one index per output element or position, and writes `n` elements of
    // `out` and the flag's one word, all within the buffers by the caller's shape.
    let outcome = unsafe { launch.launch(grid(n)) }.map(drop);
    launched(gpu, &source, outcome)?;
    if gpu.download(&flag, 4)? != [0; 4] {
        return Err(gpu.error(
            "gather",
            format!(
                "an index is out of range for an axis of extent {}",
                shape.axis
            ),
        ));
    }
    Ok(out)
}

/// MLX's random bits for `key`: `bytes` bytes, the same as the CPU's for the key.
pub fn random_bits(gpu: &Gpu, key: [u32; 2], bytes: u64) -> Result<DeviceBuffer> {
    let source = random::bits();
    let mut out = gpu.alloc(bytes as usize)?;
    let words = bytes.div_ceil(4);
    let pairs = words - words / 2;
    if pairs == 0 {
        return Ok(out);
    }
    let function = gpu.function(&source, &source.name)?;
    let mut launch = gpu.stream.launch_builder(&function);
    launch
        .arg(&key[0])
        .arg(&key[1])
        .arg(out.block_mut())
        .arg(&bytes);
    // SAFETY: each thread writes the bytes of its two words below `bytes`, which `out` holds.
    let outcome = unsafe { launch.launch(grid(pairs)) }.map(drop);
    launched(gpu, &source, outcome)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_merge_contiguous_axes_and_keep_broadcasts() {
        let contiguous = Dims::new(&[2, 3, 4], &[&[12, 4, 1]]).unwrap();
        assert!(contiguous.contiguous(1));
        assert_eq!((contiguous.ndim, contiguous.shape[0]), (1, 24));
        // A row broadcast over 2 × 3: the column axis merges with nothing.
        let broadcast = Dims::new(&[2, 3], &[&[0, 1], &[3, 1]]).unwrap();
        assert!(!broadcast.contiguous(2));
        assert_eq!(broadcast.ndim, 2);
        assert_eq!(broadcast.strides[0][..2], [0, 1]);
        assert_eq!(broadcast.strides[2][..2], [3, 1]);
        let transposed = Dims::new(&[3, 2], &[&[1, 3]]).unwrap();
        assert_eq!(
            (transposed.ndim, transposed.strides[0][..2].to_vec()),
            (2, vec![1, 3])
        );
        let deep = vec![2i64; 20];
        let strides: Vec<i64> = (0..20)
            .map(|k| if k % 2 == 0 { 0 } else { 1 << k })
            .collect();
        assert!(Dims::new(&deep, &[&strides]).is_err());
    }
}
