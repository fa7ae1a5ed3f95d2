//! Batched matrix products, with batch dims broadcast by strides.

use super::{output, same_as};
use crate::ops::broadcast_strides;
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::matmul::{matmul, MatmulDims};
use nuvec_cpu::strided::RowOffsets;
use nuvec_cpu::{with_float_dtype, Buffer};
use std::sync::Arc;

/// `a @ b` for `a: [..., m, k]`, `b: [..., k, n]`, float dtypes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Matmul;

/// Element offsets of each batch entry's matrix in an operand of `shape`, whose batch dims
/// broadcast to `batch`.
fn batch_offsets(shape: &[usize], batch: &[usize]) -> Vec<usize> {
    let n = shape.len();
    let matrix: usize = shape[n - 2..].iter().product();
    let batch_shape: Vec<usize> = shape[..n - 2].to_vec();
    let own: Vec<isize> = broadcast_strides(&batch_shape, batch)
        .iter()
        .map(|s| s * matrix as isize)
        .collect();
    let count: usize = batch.iter().product();
    if batch.is_empty() {
        return vec![0; count.max(1)];
    }
    // Each batch entry is one "row" of the batch shape; the iterator yields its offset.
    RowOffsets::new(batch, &own, 0, 0)
        .map(|o| o as usize)
        .take(count)
        .collect()
}

impl Primitive for Matmul {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        use crate::gpu::{cuda, strided, GpuBuffer};
        let spec = &outputs[0];
        let (a, b) = (&inputs[0], &inputs[1]);
        let n_out = spec.shape.len();
        let batch_shape = &spec.shape[..n_out - 2];
        let batch: usize = batch_shape.iter().product();
        let (m, n, k) = (
            spec.shape[n_out - 2],
            spec.shape[n_out - 1],
            a.shape[a.shape.len() - 1],
        );
        let whole = |x: &crate::gpu::GpuInput| {
            x.shape[..x.shape.len() - 2].iter().product::<usize>() == batch
        };
        let single =
            |x: &crate::gpu::GpuInput| x.shape[..x.shape.len() - 2].iter().product::<usize>() == 1;
        let product = |batch, m| nuvec_cuda::matmul::Product {
            batch,
            m,
            n,
            k,
            transpose_a: false,
            transpose_b: false,
        };
        // `[..., m, k] @ [k, n]`: the batch folds into the rows, one product.
        if single(b) && whole(a) {
            let out = nuvec_cuda::matmul::matmul(
                gpu,
                (a.buffer(), b.buffer()),
                product(1, batch * m),
                spec.dtype,
            );
            return crate::gpu::one(gpu, "matmul", out);
        }
        // Otherwise each side is made whole by copying along its broadcast batch axes.
        let full = |x: &crate::gpu::GpuInput,
                    rows: usize,
                    cols: usize|
         -> Result<Option<nuvec_cuda::DeviceBuffer>> {
            if whole(x) {
                return Ok(None);
            }
            let own = &x.shape[..x.shape.len() - 2];
            let mut from: Vec<i64> = broadcast_strides(own, batch_shape)
                .iter()
                .map(|&s| s as i64 * (rows * cols) as i64)
                .collect();
            from.extend([cols as i64, 1]);
            let shape: Vec<usize> = batch_shape.iter().copied().chain([rows, cols]).collect();
            strided(gpu, "matmul", (x.buffer(), 0), x.dtype, &shape, &from).map(Some)
        };
        let (fa, fb) = (full(a, m, k)?, full(b, k, n)?);
        let out = nuvec_cuda::matmul::matmul(
            gpu,
            (
                fa.as_ref().unwrap_or_else(|| a.buffer()),
                fb.as_ref().unwrap_or_else(|| b.buffer()),
            ),
            product(batch, m),
            spec.dtype,
        );
        Ok(vec![GpuBuffer::new(
            gpu,
            out.map_err(|e| cuda("matmul", e))?,
        )])
    }

    fn name(&self) -> &str {
        "matmul"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let (a, b) = (&inputs[0], &inputs[1]);
        let n_out = spec.shape.len();
        let batch = &spec.shape[..n_out - 2];
        let dims = MatmulDims {
            m: spec.shape[n_out - 2],
            n: spec.shape[n_out - 1],
            k: a.shape[a.shape.len() - 1],
        };
        let a_offsets = batch_offsets(&a.shape, batch);
        let b_offsets = batch_offsets(&b.shape, batch);
        with_float_dtype!(
            spec.dtype,
            T,
            output::<T>(spec, |out| matmul(
                a.slice::<T>(),
                &a_offsets,
                b.slice::<T>(),
                &b_offsets,
                dims,
                1.0,
                0.0,
                out
            )),
            Err(crate::Error::eval(
                "matmul",
                format!("unsupported dtype {}", spec.dtype)
            ))
        )
    }

    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        use crate::ops::{matmul, swapaxes};
        let (a, b, c) = (&inputs[0], &inputs[1], &cotangents[0]);
        Ok(argnums
            .iter()
            .map(|&i| {
                let full = if i == 0 {
                    matmul(c, &swapaxes(b, -1, -2))
                } else {
                    matmul(&swapaxes(a, -1, -2), c)
                };
                crate::transforms::sum_to_shape(&full, inputs[i].shape())
            })
            .collect())
    }

    fn jvp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        tangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        // (a + ta)(b + tb) to first order: ta·b + a·tb.
        let terms = argnums.iter().zip(tangents).map(|(&i, t)| {
            if i == 0 {
                crate::ops::matmul(t, &inputs[1])
            } else {
                crate::ops::matmul(&inputs[0], t)
            }
        });
        Ok(vec![super::sum_of_terms(terms, &outputs[0])])
    }

    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        use super::batching::{align, to_front};
        use crate::ops::{expand_dims, matmul, squeeze};
        let (a, b) = (&inputs[0], &inputs[1]);
        // Unbatched ranks; vectors become matrices so the batch axis is not taken for rows.
        let rank_a = a.ndim() - usize::from(axes[0].is_some());
        let rank_b = b.ndim() - usize::from(axes[1].is_some());
        let batch_rank = outputs[0].ndim().max(2);
        let prepare = |x: &Array, axis: Option<usize>, rank: usize, vector_axis: i32| {
            let Some(_) = axis else {
                return if rank == 1 {
                    expand_dims(x, &[vector_axis])
                } else {
                    x.clone()
                };
            };
            let front = to_front(x, axis);
            let front = if rank == 1 {
                expand_dims(&front, &[vector_axis])
            } else {
                front
            };
            align(&front, batch_rank.max(2))
        };
        let left = prepare(a, axes[0], rank_a, -2);
        let right = prepare(b, axes[1], rank_b, -1);
        let mut product = matmul(&left, &right);
        if rank_b == 1 {
            product = squeeze(&product, Some(&[-1]));
        }
        if rank_a == 1 {
            product = squeeze(&product, Some(&[-2 + i32::from(rank_b == 1)]));
        }
        Ok((vec![product], vec![Some(0)]))
    }

    fn output_shapes(&self, inputs: &[&[i32]], _traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        let (a, b) = (inputs[0], inputs[1]);
        if a.len() < 2 || b.len() < 2 {
            return None; // Vectors: the traced shapes decide; trace again.
        }
        let batch = crate::ops::broadcast_shapes(&a[..a.len() - 2], &b[..b.len() - 2]).ok()?;
        let mut shape = batch;
        shape.extend([a[a.len() - 2], b[b.len() - 1]]);
        Some(vec![shape])
    }

    same_as!();
}
