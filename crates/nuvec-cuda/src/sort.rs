//! Sorting rows on a device (`kernels/sort.rs`): the values, and the indices that sort them.

use crate::device::Gpu;
use crate::error::Result;
use crate::kernels::sort::{sort_rows, SORT_THREADS};
use crate::memory::DeviceBuffer;
use crate::ops::{copy_into, launched, Dims};
use cudarc::driver::{LaunchConfig, PushKernelArg};
use nuvec_cpu::DType;

/// Each of the `rows` contiguous rows of `len` elements of `x`, sorted ascending (NaN last):
/// the sorted values and, `with_indices`, the `uint32` indices that sort each row (stable).
pub fn sort(
    gpu: &Gpu,
    (x, dtype): (&DeviceBuffer, DType),
    (rows, len): (u64, u64),
    with_indices: bool,
) -> Result<(DeviceBuffer, Option<DeviceBuffer>)> {
    let n = rows * len;
    let mut values = gpu.alloc(n as usize * dtype.size())?;
    let mut indices = gpu.alloc(if with_indices { n as usize * 4 } else { 4 })?;
    if n == 0 {
        return Ok((values, with_indices.then_some(indices)));
    }
    if len > u64::from(u32::MAX) {
        return Err(gpu.error(
            "sort",
            format!("rows of {len} elements (indices are uint32)"),
        ));
    }
    let blocks = u32::try_from(rows)
        .ok()
        .filter(|&b| b <= i32::MAX as u32)
        .ok_or_else(|| {
            gpu.error(
                "sort",
                format!("{rows} rows (at most {} per launch)", i32::MAX),
            )
        })?;
    let flat = Dims::copy(&[n as i64], &[1], &[1])?;
    copy_into(gpu, (x, 0), (&mut values, 0), dtype.size(), (n, &flat))?;
    let source = sort_rows(dtype);
    let function = gpu.function(&source, &source.name)?;
    let flag = i32::from(with_indices);
    let mut launch = gpu.stream.launch_builder(&function);
    launch
        .arg(values.block_mut())
        .arg(indices.block_mut())
        .arg(&len)
        .arg(&flag);
    let config = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (SORT_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: block `r` reads and writes the `len` values of row `r` of `values` (which holds
    // `rows × len`) and, with indices, the same of `indices`; without them it touches none of
    // `indices`. The arguments match the kernel's parameters in order and type.
    let outcome = unsafe { launch.launch(config) }.map(drop);
    launched(gpu, &source, outcome)?;
    Ok((values, with_indices.then_some(indices)))
}
