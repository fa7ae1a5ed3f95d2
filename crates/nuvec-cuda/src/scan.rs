//! Cumulative reductions on a device (`kernels/scan.rs`).

use crate::device::Gpu;
use crate::error::Result;
use crate::kernels::scan::scan as scan_kernel;
use crate::memory::DeviceBuffer;
use crate::ops::{grid, launched, unsupported};
use cudarc::driver::PushKernelArg;
use nuvec_cpu::binary::BinaryOp;
use nuvec_cpu::DType;

/// Which way a scan runs and whether each element counts itself.
#[derive(Clone, Copy, Debug)]
pub struct Direction {
    /// From the end of the axis.
    pub reverse: bool,
    /// Each output includes its own element (MLX's default); otherwise the scan is shifted by
    /// one and starts from the identity.
    pub inclusive: bool,
}

/// The running `op` (add, multiply, maximum or minimum) of `x` along the middle axis of its
/// contiguous `[outer, len, inner]` view, into a new array of the same shape and dtype.
pub fn scan(
    gpu: &Gpu,
    op: BinaryOp,
    (x, dtype): (&DeviceBuffer, DType),
    (outer, len, inner): (u64, u64, u64),
    direction: Direction,
) -> Result<DeviceBuffer> {
    let source = scan_kernel(op, dtype).ok_or_else(|| unsupported(gpu, "scan", dtype))?;
    let n = outer * len * inner;
    let mut out = gpu.alloc(n as usize * dtype.size())?;
    if n == 0 {
        return Ok(out);
    }
    let function = gpu.function(&source, &source.name)?;
    let (reverse, inclusive) = (i32::from(direction.reverse), i32::from(direction.inclusive));
    let mut launch = gpu.stream.launch_builder(&function);
    launch
        .arg(x.block())
        .arg(out.block_mut())
        .arg(&outer)
        .arg(&len)
        .arg(&inner)
        .arg(&reverse)
        .arg(&inclusive);
    // SAFETY: each lane reads and writes its `len` elements of the `outer × len × inner` view
    // of `x` and `out`, which both hold; the arguments match the kernel's parameters.
    let outcome = unsafe { launch.launch(grid(outer * inner)) }.map(drop);
    launched(gpu, &source, outcome)?;
    Ok(out)
}
