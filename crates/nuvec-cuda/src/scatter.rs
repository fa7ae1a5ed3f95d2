//! Scatter-add on a device (`kernels/scatter.rs`).

use crate::device::Gpu;
use crate::error::Result;
use crate::kernels::scatter::scatter_add as scatter_kernel;
use crate::memory::DeviceBuffer;
use crate::ops::{grid, launched, unsupported};
use cudarc::driver::PushKernelArg;
use nuvec_cpu::DType;

/// The shape of a scatter-add: updates and indices `[outer, taken, inner]`, the output
/// `[outer, len, inner]`.
#[derive(Clone, Copy, Debug)]
pub struct Scatter {
    /// Extent of the axes before the scattered one.
    pub outer: u64,
    /// Updates along the scattered axis.
    pub taken: u64,
    /// The output's extent along the scattered axis.
    pub len: u64,
    /// Extent of the axes after the scattered one.
    pub inner: u64,
}

/// Zeros of the output's shape with `updates` (of `dtype`) added at the `int32` `indices`
/// along the axis, in the CPU's order; an index out of range (after counting negative ones
/// from the end) is an error naming the axis's extent.
pub fn scatter_add(
    gpu: &Gpu,
    (updates, dtype): (&DeviceBuffer, DType),
    indices: &DeviceBuffer,
    shape: Scatter,
) -> Result<DeviceBuffer> {
    let source = scatter_kernel(dtype).ok_or_else(|| unsupported(gpu, "scatter_add", dtype))?;
    let Scatter {
        outer,
        taken,
        len,
        inner,
    } = shape;
    let mut out = gpu.alloc((outer * len * inner) as usize * dtype.size())?;
    if outer * len * inner == 0 {
        return Ok(out);
    }
    let mut flag = gpu.upload(&[0u8; 4])?;
    let function = gpu.function(&source, &source.name)?;
    let mut launch = gpu.stream.launch_builder(&function);
    launch
        .arg(updates.block())
        .arg(indices.block())
        .arg(out.block_mut())
        .arg(&outer)
        .arg(&taken)
        .arg(&len)
        .arg(&inner)
        .arg(flag.block_mut());
    // SAFETY: lane `(p, q)` reads its `taken` updates and indices (`outer × taken × inner`
    // each) and writes its column of `out` (`outer × len × inner`, indices checked against
    // `len`) and the flag's one word; the arguments match the kernel's parameters.
    let outcome = unsafe { launch.launch(grid(outer * inner)) }.map(drop);
    launched(gpu, &source, outcome)?;
    if gpu.download(&flag, 4)? != [0; 4] {
        return Err(gpu.error(
            "scatter_add",
            format!("an index is out of range for an axis of extent {len}"),
        ));
    }
    Ok(out)
}
