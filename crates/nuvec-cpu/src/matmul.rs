//! Matrix products through the `gemm` crate (f32, f64, f16 natively; bf16 through f32).

use crate::{DType, Element, Float};
use gemm::Parallelism;

/// The shape of one batched product: `batch` products of `[m, k] x [k, n]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulDims {
    /// Rows of the left operand and of the result.
    pub m: usize,
    /// Columns of the right operand and of the result.
    pub n: usize,
    /// The contracted dimension.
    pub k: usize,
}

/// `out[b] = alpha * a[a_offsets[b]..] x b[b_offsets[b]..] + beta * out[b]` for each batch
/// entry; the operands are row-major `[m, k]` and `[k, n]` blocks at the given element offsets.
/// `beta == 0` ignores what `out` held.
#[allow(clippy::too_many_arguments)]
pub fn matmul<T: Float>(
    a: &[T],
    a_offsets: &[usize],
    b: &[T],
    b_offsets: &[usize],
    dims: MatmulDims,
    alpha: f32,
    beta: f32,
    out: &mut [T],
) {
    match T::DTYPE {
        DType::F32 | DType::F64 | DType::F16 => native(
            a,
            a_offsets,
            b,
            b_offsets,
            dims,
            T::from_f32(alpha),
            T::from_f32(beta),
            beta != 0.0,
            out,
        ),
        _ => {
            // bf16 has no native kernel: widen to f32 and round the result once.
            let wide_a: Vec<f32> = a.iter().map(|v| v.to_f32()).collect();
            let wide_b: Vec<f32> = b.iter().map(|v| v.to_f32()).collect();
            let mut wide_out: Vec<f32> = out.iter().map(|v| v.to_f32()).collect();
            native(
                &wide_a,
                a_offsets,
                &wide_b,
                b_offsets,
                dims,
                alpha,
                beta,
                beta != 0.0,
                &mut wide_out,
            );
            for (o, v) in out.iter_mut().zip(wide_out) {
                *o = T::from_f32(v);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn native<T: Element>(
    a: &[T],
    a_offsets: &[usize],
    b: &[T],
    b_offsets: &[usize],
    dims: MatmulDims,
    alpha: T,
    beta: T,
    read_out: bool,
    out: &mut [T],
) {
    let MatmulDims { m, n, k } = dims;
    let threads = rayon::current_num_threads();
    // Small products are faster on one thread than split across the pool.
    let parallelism = if m * n * k >= 64 * 64 * 64 && threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    for (batch, (&ao, &bo)) in a_offsets.iter().zip(b_offsets).enumerate() {
        let dst = &mut out[batch * m * n..(batch + 1) * m * n];
        if k == 0 {
            for v in dst.iter_mut() {
                *v = if read_out { v.mul(beta) } else { T::zero() };
            }
            continue;
        }
        let lhs = &a[ao..ao + m * k];
        let rhs = &b[bo..bo + k * n];
        if !read_out
            && m * n * k >= crate::blas::MIN_BLAS_FLOPS
            && try_blas(m, n, k, lhs, rhs, dst, alpha)
        {
            positive_zeros(dst, alpha);
            continue;
        }
        // SAFETY: `dst`, `lhs` and `rhs` are live slices of exactly m*n, m*k and k*n
        // elements, and the strides below describe row-major matrices of those shapes, so
        // every element gemm touches lies inside them; `dst` does not alias the inputs.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                read_out,
                lhs.as_ptr(),
                1,
                k as isize,
                rhs.as_ptr(),
                1,
                n as isize,
                beta,
                alpha,
                false,
                false,
                false,
                parallelism,
            );
        }
        if !read_out {
            positive_zeros(dst, alpha);
        }
    }
}

/// MLX's products sum from +0, so a sum of -0 terms (a product with an inner dimension of 1,
/// `-1.5 · 0`) is +0; the kernels keep -0. Adding +0 makes it +0 and leaves every other
/// value as it is. Only for `alpha` 1: otherwise the sign comes from `alpha` after the sum.
fn positive_zeros<T: Element>(dst: &mut [T], alpha: T) {
    if alpha == T::one() {
        for v in dst.iter_mut() {
            *v = v.add(T::zero());
        }
    }
}

/// `out = a · bᵀ`, or `out += a · bᵀ` with `accumulate`, for f32 `a: [m, k]`, `b: [n, k]`
/// and `out: [m, n]`, row-major, the rows of `a` and `b` starting the given strides apart;
/// on the calling thread (for the blocks of a kernel that splits its work itself).
///
/// # Panics
/// If a slice is shorter than `dims` and its stride say, or a stride is below `k`.
pub fn matmul_transposed_f32(
    (a, a_stride): (&[f32], usize),
    (b, b_stride): (&[f32], usize),
    dims: MatmulDims,
    accumulate: bool,
    out: &mut [f32],
) {
    let MatmulDims { m, n, k } = dims;
    assert!(
        a_stride >= k && b_stride >= k,
        "matmul_transposed_f32: rows overlap"
    );
    // The last row of a matrix of `rows` rows ends at (rows - 1)·stride + k.
    let extent = |rows: usize, stride: usize| {
        if rows == 0 {
            0
        } else {
            (rows - 1) * stride + k
        }
    };
    let (a, b, out) = (
        &a[..extent(m, a_stride)],
        &b[..extent(n, b_stride)],
        &mut out[..m * n],
    );
    if k == 0 || m == 0 || n == 0 {
        if !accumulate {
            out.fill(0.0);
        }
        return;
    }
    // SAFETY: `out` is a live slice of exactly m*n elements, row-major [m, n]; `a` and `b` end
    // exactly where their last row does, and read with column stride 1 and row strides
    // `a_stride` and `b_stride` (bᵀ: column stride `b_stride`, row stride 1) they are [m, k]
    // and [k, n], so every element gemm touches lies inside them; `out` aliases neither.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.as_ptr(),
            1,
            a_stride as isize,
            b.as_ptr(),
            b_stride as isize,
            1,
            1.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}

/// Reads `T` slices as `U` slices when they are the same type (checked through the dtype).
pub(crate) fn same_type<T: Element, U: Element>(values: &[T]) -> Option<&[U]> {
    // SAFETY: T and U have the same dtype, and each dtype has exactly one Rust type, so this
    // is a cast from a type to itself.
    (T::DTYPE == U::DTYPE)
        .then(|| unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<U>(), values.len()) })
}

/// [`same_type`] for a mutable slice.
fn same_type_mut<T: Element, U: Element>(values: &mut [T]) -> Option<&mut [U]> {
    // SAFETY: as in `same_type`; the borrow of `values` is moved into the result.
    (T::DTYPE == U::DTYPE).then(|| unsafe {
        std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<U>(), values.len())
    })
}

/// Runs an f32/f64 product through the system BLAS when one is loaded; false otherwise.
fn try_blas<T: Element>(
    m: usize,
    n: usize,
    k: usize,
    lhs: &[T],
    rhs: &[T],
    dst: &mut [T],
    alpha: T,
) -> bool {
    let Some(blas) = crate::blas::blas() else {
        return false;
    };
    if alpha != T::one() {
        return false;
    }
    match T::DTYPE {
        DType::F32 => match (
            same_type::<T, f32>(lhs),
            same_type::<T, f32>(rhs),
            same_type_mut::<T, f32>(dst),
        ) {
            (Some(a), Some(b), Some(out)) => blas.sgemm(m, n, k, a, b, out),
            _ => false,
        },
        DType::F64 => match (
            same_type::<T, f64>(lhs),
            same_type::<T, f64>(rhs),
            same_type_mut::<T, f64>(dst),
        ) {
            (Some(a), Some(b), Some(out)) => blas.dgemm(m, n, k, a, b, out),
            _ => false,
        },
        _ => false,
    }
}

/// Whether `gemm` can run a product of this dtype.
pub fn supports(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bf16;

    #[test]
    fn a_sum_of_negative_zeros_is_positive_zero_as_in_mlx() {
        // [-1.5] · [0]: MLX's product is +0 (its sums start from +0).
        let mut out = [1.0f32; 2];
        matmul(
            &[-1.5f32, 0.0],
            &[0, 1],
            &[0.0f32],
            &[0, 0],
            MatmulDims { m: 1, n: 1, k: 1 },
            1.0,
            0.0,
            &mut out,
        );
        assert_eq!(out.map(f32::to_bits), [0, 0]);
    }

    #[test]
    fn small_product_matches_hand_computation() {
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]; // [2,3]
        let b = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0]; // [3,2]
        let mut out = [0.0f32; 4];
        matmul(
            &a,
            &[0],
            &b,
            &[0],
            MatmulDims { m: 2, n: 2, k: 3 },
            1.0,
            0.0,
            &mut out,
        );
        assert_eq!(out, [4.0, 5.0, 10.0, 11.0]);
    }

    #[test]
    fn system_blas_and_gemm_agree_on_a_large_product() {
        let Some(blas) = crate::blas::blas() else {
            assert!(
                std::env::var_os("NUVEC_REQUIRE_BLAS").is_none(),
                "NUVEC_REQUIRE_BLAS is set but no BLAS loads"
            );
            eprintln!(
                "skipped: no system BLAS could be loaded (install libopenblas0 or set NUVEC_BLAS)"
            );
            return;
        };
        let (m, n, k) = (130, 70, 300);
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 11) as f32 - 5.0).collect();
        let mut with_blas = vec![0.0f32; m * n];
        assert!(
            blas.sgemm(m, n, k, &a, &b, &mut with_blas),
            "{} refused the product",
            blas.name
        );
        let mut with_gemm = vec![0.0f32; m * n];
        native(
            &a,
            &[0],
            &b,
            &[0],
            MatmulDims { m, n, k },
            1.0,
            0.0,
            false,
            &mut with_gemm,
        );
        assert_eq!(
            with_blas, with_gemm,
            "integer-valued products are exact in both"
        );
    }

    #[test]
    fn bf16_product_rounds_once() {
        let a = [bf16::from_f32(1.5); 4];
        let mut out = [bf16::ZERO; 4];
        matmul(
            &a,
            &[0],
            &a,
            &[0],
            MatmulDims { m: 2, n: 2, k: 2 },
            1.0,
            0.0,
            &mut out,
        );
        assert_eq!(out[0].to_f32(), 4.5);
    }
}
