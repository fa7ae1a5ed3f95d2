//! Sorting along the last axis (ops move other axes there): sort, argsort, top-k.

use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::sort::{argsort_rows, sort_rows, topk_rows};
use nuvec_cpu::{with_dtype, Buffer};
use std::sync::Arc;

/// What a [`SortLast`] computes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SortKind {
    /// The sorted values.
    Sort,
    /// The (uint32) indices that sort each row, stable.
    ArgSort,
    /// The `k` largest values of each row, ascending.
    TopK(usize),
}

/// Sorting rows of the last axis.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SortLast(pub(crate) SortKind);

impl Primitive for SortLast {
    fn name(&self) -> &str {
        match self.0 {
            SortKind::Sort => "sort",
            SortKind::ArgSort => "argsort",
            SortKind::TopK(_) => "topk",
        }
    }

    /// A bitonic network per row (`nuvec_cuda::sort`); top-k keeps the last `k` of each
    /// sorted row.
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        _outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        use crate::gpu::{cuda, strided, GpuBuffer};
        let input = &inputs[0];
        let len = input.shape.last().copied().unwrap_or(1);
        let rows = input.size().checked_div(len).unwrap_or(0);
        let indices = self.0 == SortKind::ArgSort;
        let (values, order) = nuvec_cuda::sort::sort(
            gpu,
            (input.buffer(), input.dtype),
            (rows as u64, len as u64),
            indices,
        )
        .map_err(|e| cuda(self.name(), e))?;
        let result = match (self.0, order) {
            (SortKind::ArgSort, Some(order)) => order,
            (SortKind::TopK(k), _) => strided(
                gpu,
                "topk",
                (&values, len - k),
                input.dtype,
                &[rows, k],
                &[len as i64, 1],
            )?,
            _ => values,
        };
        Ok(vec![GpuBuffer::new(gpu, result)])
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let input = &inputs[0];
        let spec = &outputs[0];
        let row = input.shape.last().copied().unwrap_or(1);
        with_dtype!(
            input.dtype,
            T,
            match self.0 {
                SortKind::Sort => output::<T>(spec, |out| {
                    out.copy_from_slice(input.slice::<T>());
                    sort_rows(out, row);
                }),
                SortKind::ArgSort =>
                    output::<u32>(spec, |out| argsort_rows(input.slice::<T>(), row, out)),
                SortKind::TopK(k) =>
                    output::<T>(spec, |out| topk_rows(input.slice::<T>(), row, k, out)),
            }
        )
    }

    /// Values follow their elements: the tangent reordered as the input was.
    fn jvp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        tangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let Some(chosen) = self.chosen(&inputs[0]) else {
            return super::zero_jvp(outputs);
        };
        let tangent = tangents[0].astype(inputs[0].dtype());
        Ok(vec![crate::ops::take_along_axis(
            &tangent,
            &chosen,
            Some(-1),
        )])
    }

    /// The cotangent goes back to the places its values came from.
    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let x = &inputs[0];
        let Some(chosen) = self.chosen(x) else {
            return Ok(vec![crate::ops::zeros_like(x)]);
        };
        let last = x.ndim().saturating_sub(1);
        Ok(vec![super::scatter::scatter_add(
            &cotangents[0],
            &chosen,
            last,
            x.shape(),
        )])
    }

    /// Rows stay rows: the batch axis goes in front, the sorted axis stays last.
    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        if inputs[0].ndim() == 1 && axes[0] == Some(0) && outputs[0].ndim() == 0 {
            return Err(super::batching::unsupported("sort", "a 0-d input"));
        }
        super::batching::batch_first(self.clone(), inputs, outputs, axes)
    }

    fn output_shapes(&self, inputs: &[&[i32]], _traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        let mut shape = inputs[0].to_vec();
        if let (SortKind::TopK(k), Some(last)) = (self.0, shape.last_mut()) {
            *last = k as i32;
        }
        Some(vec![shape])
    }

    same_as!();
}

impl SortLast {
    /// Where each output value came from along the last axis (`None` for argsort, whose
    /// output does not vary smoothly). The permutation is locally constant in `x`, so, as in
    /// MLX, nothing is differentiated through it: a derivative of these derivatives gives the
    /// permutation no tangent (a zero one would meet an infinite or NaN factor and make NaN).
    fn chosen(&self, x: &Array) -> Option<Array> {
        use crate::ops::{argsort, slice, stop_gradient};
        let order = stop_gradient(&argsort(x, Some(-1)));
        match self.0 {
            SortKind::Sort => Some(order),
            SortKind::ArgSort => None,
            SortKind::TopK(k) => {
                // The k largest in ascending order are the last k of the ascending order.
                let n = *x.shape().last().unwrap_or(&0);
                let mut start = vec![0; x.ndim()];
                let mut stop = x.shape().to_vec();
                let last = x.ndim() - 1;
                start[last] = n - k as i32;
                stop[last] = n;
                Some(slice(&order, &start, &stop, &vec![1; x.ndim()]))
            }
        }
    }
}
