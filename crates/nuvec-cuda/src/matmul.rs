//! Matrix products through cuBLAS: `batch` row-major products `[m, k] · [k, n]` (either side
//! possibly transposed) in `float32`, `float16` or `bfloat16`, accumulated in `float32`.
//! cuBLAS is column-major, so the row-major `C = A·B` is computed as `Cᵀ = Bᵀ·Aᵀ`, which reads
//! the same memory with no copy.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::library::{require, Library};
use crate::memory::DeviceBuffer;
use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use half::{bf16, f16};
use nuvec_cpu::DType;

/// The shape of a batched product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Product {
    /// Products in the batch (each side's matrices follow one another).
    pub batch: usize,
    /// Rows of the result.
    pub m: usize,
    /// Columns of the result.
    pub n: usize,
    /// The shared dimension.
    pub k: usize,
    /// Whether `a` holds `[k, m]` matrices (read transposed).
    pub transpose_a: bool,
    /// Whether `b` holds `[n, k]` matrices (read transposed).
    pub transpose_b: bool,
}

fn int(gpu: &Gpu, what: &str, value: usize) -> Result<i32> {
    i32::try_from(value)
        .map_err(|_| gpu.error("matmul", format!("{what} of {value} is past cuBLAS's int")))
}

/// A product's sizes as cuBLAS takes them.
#[derive(Clone, Copy)]
struct Shape {
    m: i32,
    n: i32,
    k: i32,
    batch: i32,
    transpose_a: bool,
    transpose_b: bool,
}

fn op(transposed: bool) -> cublasOperation_t {
    if transposed {
        cublasOperation_t::CUBLAS_OP_T
    } else {
        cublasOperation_t::CUBLAS_OP_N
    }
}

impl Shape {
    /// The column-major call computing the row-major product: `B'·A'` into `C'`.
    fn config<T>(self, alpha: T, beta: T) -> StridedBatchedConfig<T> {
        let Shape {
            m,
            n,
            k,
            batch,
            transpose_a,
            transpose_b,
        } = self;
        StridedBatchedConfig {
            gemm: GemmConfig {
                transa: op(transpose_b),
                transb: op(transpose_a),
                m: n,
                n: m,
                k,
                alpha,
                lda: if transpose_b { k } else { n },
                ldb: if transpose_a { m } else { k },
                beta,
                ldc: n,
            },
            batch_size: batch,
            stride_a: i64::from(k) * i64::from(n),
            stride_b: i64::from(m) * i64::from(k),
            stride_c: i64::from(m) * i64::from(n),
        }
    }
}

/// One batched product in elements of `T`, over the buffers' bytes seen as `T`.
fn gemm<T>(
    blas: &CudaBlas,
    config: StridedBatchedConfig<T>,
    (a, b, out): (&DeviceBuffer, &DeviceBuffer, &mut DeviceBuffer),
    (len_a, len_b, len_c): (usize, usize, usize),
) -> std::result::Result<(), String>
where
    CudaBlas: Gemm<T>,
{
    let (a, b) = (a.slice(), b.slice());
    let mut c = out.slice_mut();
    // SAFETY: the views reinterpret device bytes as elements of `T`, which the buffers hold
    // (their lengths are whole elements of it, checked by `transmute`'s `Option`); cuBLAS reads
    // `batch` matrices of each side and writes `batch × m × n` elements of `c`, all within
    // the buffers by the caller's shapes.
    unsafe {
        let (Some(a), Some(b), Some(mut c)) = (
            a.transmute::<T>(len_a),
            b.transmute::<T>(len_b),
            c.transmute_mut::<T>(len_c),
        ) else {
            return Err("a buffer is shorter than its shape".into());
        };
        blas.gemm_strided_batched(config, &b, &a, &mut c)
            .map_err(|e| e.to_string())
    }
}

/// `a · b` for each product of the batch, into a new array of `batch × m × n` of `dtype`.
pub fn matmul(
    gpu: &Gpu,
    (a, b): (&DeviceBuffer, &DeviceBuffer),
    product: Product,
    dtype: DType,
) -> Result<DeviceBuffer> {
    require(Library::Cublas)?;
    let Product {
        batch,
        m,
        n,
        k,
        transpose_a,
        transpose_b,
    } = product;
    let mut out = gpu.alloc(batch * m * n * dtype.size())?;
    if batch * m * n == 0 {
        return Ok(out);
    }
    let blas = gpu.blas()?;
    // Column-major: C (n × m) = B' (n × k) · A' (k × m).
    let (mi, ni, ki) = (int(gpu, "m", m)?, int(gpu, "n", n)?, int(gpu, "k", k)?);
    let shape = Shape {
        m: mi,
        n: ni,
        k: ki,
        batch: int(gpu, "the batch", batch)?,
        transpose_a,
        transpose_b,
    };
    let elements = |buffer: &DeviceBuffer| buffer.len() / dtype.size();
    let lens = (elements(a), elements(b), batch * m * n);
    let outcome = match dtype {
        DType::F32 => gemm(&blas, shape.config(1.0f32, 0.0f32), (a, b, &mut out), lens),
        DType::F16 => gemm(
            &blas,
            shape.config(f16::ONE, f16::ZERO),
            (a, b, &mut out),
            lens,
        ),
        DType::BF16 => gemm(
            &blas,
            shape.config(bf16::ONE, bf16::ZERO),
            (a, b, &mut out),
            lens,
        ),
        other => {
            return Err(CudaError::Unsupported {
                op: "matmul".into(),
                dtype: other.to_string(),
                device: gpu.index(),
            })
        }
    };
    outcome.map_err(|e| gpu.error("matmul (cuBLAS)", e))?;
    Ok(out)
}
