//! MLX's affine-quantized matrices on a device (`kernels/quantized.rs`): quantizing and
//! dequantizing, and products: a few rows of `x` through the matrix-vector kernel, which reads
//! the packed weights once; more through the weights dequantized into the activations' dtype
//! and multiplied by cuBLAS.

use crate::device::Gpu;
use crate::error::Result;
use crate::kernels::quantized::{self, MATVEC_MOST_ROWS, MATVEC_THREADS};
use crate::matmul::{matmul, Product};
use crate::memory::DeviceBuffer;
use crate::ops::{grid, launched, unsupported};
use cudarc::driver::{LaunchConfig, PushKernelArg};
use nuvec_cpu::DType;

/// The shape of `y = x · Wᵀ`: `x` is `m × k`, `W` is `n × k` in groups of `group_size` values
/// of `bits` bits (the caller has checked `nuvec_cpu::quantized::QuantizedDims::is_supported`).
#[derive(Clone, Copy, Debug)]
pub struct Quantized {
    /// Rows of `x` and of `y`.
    pub m: u64,
    /// Rows of `W`: columns of `y`.
    pub n: u64,
    /// The contracted dimension.
    pub k: u64,
    /// Values sharing a scale and a bias.
    pub group_size: u64,
    /// Bits per value.
    pub bits: u32,
}

/// The packed matrix: its words' bytes, scales and biases (of the activations' dtype).
pub type Packed<'a> = (&'a DeviceBuffer, &'a DeviceBuffer, &'a DeviceBuffer);

/// `w` (`groups × group_size` values of `dtype`) quantized to `bits`: its words, scales and
/// biases, the CPU's bits.
pub fn quantize(
    gpu: &Gpu,
    (w, dtype): (&DeviceBuffer, DType),
    (groups, group_size): (u64, u64),
    bits: u32,
) -> Result<(DeviceBuffer, DeviceBuffer, DeviceBuffer)> {
    let source =
        quantized::quantize(bits, dtype).ok_or_else(|| unsupported(gpu, "quantize", dtype))?;
    let mut words = gpu.alloc((groups * group_size * u64::from(bits) / 8) as usize)?;
    let mut scales = gpu.alloc(groups as usize * dtype.size())?;
    let mut biases = gpu.alloc(groups as usize * dtype.size())?;
    if groups == 0 {
        return Ok((words, scales, biases));
    }
    let function = gpu.function(&source, &source.name)?;
    let mut launch = gpu.stream.launch_builder(&function);
    launch
        .arg(w.block())
        .arg(words.block_mut())
        .arg(scales.block_mut())
        .arg(biases.block_mut())
        .arg(&groups)
        .arg(&group_size);
    // SAFETY: the thread of group `g` reads its `group_size` values of `w` and writes its
    // `group_size·bits/32` words and its scale and bias, all within the buffers allocated
    // above for `groups` groups; the arguments match the kernel's parameters.
    let outcome = unsafe { launch.launch(grid(groups)) }.map(drop);
    launched(gpu, &source, outcome)?;
    Ok((words, scales, biases))
}

/// `W` written out: `n × k` values of `dtype`.
pub fn dequantize(
    gpu: &Gpu,
    (w, scales, biases): Packed<'_>,
    shape: Quantized,
    dtype: DType,
) -> Result<DeviceBuffer> {
    let source = quantized::dequantize(shape.bits, dtype)
        .ok_or_else(|| unsupported(gpu, "dequantize", dtype))?;
    let total = shape.n * shape.k;
    let mut out = gpu.alloc(total as usize * dtype.size())?;
    if total == 0 {
        return Ok(out);
    }
    let function = gpu.function(&source, &source.name)?;
    let mut launch = gpu.stream.launch_builder(&function);
    launch
        .arg(w.block())
        .arg(scales.block())
        .arg(biases.block())
        .arg(out.block_mut())
        .arg(&shape.n)
        .arg(&shape.k)
        .arg(&shape.group_size);
    // SAFETY: the kernel reads `n` packed rows of `k·bits/8` bytes and `n·k/group_size`
    // scales and biases, and writes `n·k` values of `out`, all within the buffers by the
    // caller's shapes; the arguments match the kernel's parameters in order and type.
    let outcome = unsafe { launch.launch(grid(total)) }.map(drop);
    launched(gpu, &source, outcome)?;
    Ok(out)
}

/// `y = x · Wᵀ`, `m × n` values of `dtype`.
pub fn quantized_matmul(
    gpu: &Gpu,
    x: &DeviceBuffer,
    packed: Packed<'_>,
    shape: Quantized,
    dtype: DType,
) -> Result<DeviceBuffer> {
    let Quantized { m, n, k, .. } = shape;
    if m as usize > MATVEC_MOST_ROWS {
        let dense = dequantize(gpu, packed, shape, dtype)?;
        let product = Product {
            batch: 1,
            m: m as usize,
            n: n as usize,
            k: k as usize,
            transpose_a: false,
            transpose_b: true,
        };
        return matmul(gpu, (x, &dense), product, dtype);
    }
    let source = quantized::matvec(shape.bits, dtype)
        .ok_or_else(|| unsupported(gpu, "quantized_matmul", dtype))?;
    let mut out = gpu.alloc((m * n) as usize * dtype.size())?;
    if m * n == 0 {
        return Ok(out);
    }
    let blocks = u32::try_from(n).map_err(|_| {
        gpu.error(
            "quantized_matmul",
            format!("{n} weight rows (at most {} per launch)", u32::MAX),
        )
    })?;
    let function = gpu.function(&source, &source.name)?;
    let (w, scales, biases) = packed;
    let mut launch = gpu.stream.launch_builder(&function);
    launch
        .arg(x.block())
        .arg(w.block())
        .arg(scales.block())
        .arg(biases.block())
        .arg(out.block_mut())
        .arg(&m)
        .arg(&n)
        .arg(&k)
        .arg(&shape.group_size);
    let config = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (MATVEC_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: block `c` reads the `m × k` values of `x`, packed row `c` and its scales and
    // biases, and writes column `c` of the `m × n` output, all within the buffers by the
    // caller's shapes; the arguments match the kernel's parameters in order and type.
    let outcome = unsafe { launch.launch(config) }.map(drop);
    launched(gpu, &source, outcome)?;
    Ok(out)
}
