//! Cumulative reductions along one axis (`cumsum`, `cumprod`, `cummax`, `cummin`).

use super::reduce::axis_layout;
use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::reduce::ReduceOp;
use nuvec_cpu::scan::scan;
use nuvec_cpu::{with_dtype, Buffer};
use std::sync::Arc;

/// The running `op` along `axis`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Scan {
    pub(crate) op: ReduceOp,
    pub(crate) axis: usize,
    pub(crate) reverse: bool,
    pub(crate) inclusive: bool,
}

impl Primitive for Scan {
    fn name(&self) -> &str {
        match self.op {
            ReduceOp::Sum => "cumsum",
            ReduceOp::Prod => "cumprod",
            ReduceOp::Max => "cummax",
            _ => "cummin",
        }
    }

    /// One GPU thread per lane of the axis, in order, rounding each step as the CPU does.
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        _outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        use nuvec_cpu::binary::BinaryOp;
        let input = &inputs[0];
        let layout = axis_layout(&input.shape, self.axis);
        let op = match self.op {
            ReduceOp::Sum => BinaryOp::Add,
            ReduceOp::Prod => BinaryOp::Multiply,
            ReduceOp::Max => BinaryOp::Maximum,
            _ => BinaryOp::Minimum,
        };
        let direction = nuvec_cuda::scan::Direction {
            reverse: self.reverse,
            inclusive: self.inclusive,
        };
        let result = nuvec_cuda::scan::scan(
            gpu,
            op,
            (input.buffer(), input.dtype),
            (layout.outer as u64, layout.len as u64, layout.inner as u64),
            direction,
        );
        crate::gpu::one(gpu, self.name(), result)
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let input = &inputs[0];
        let layout = axis_layout(&input.shape, self.axis);
        with_dtype!(
            input.dtype,
            T,
            output::<T>(&outputs[0], |out| scan(
                self.op,
                self.reverse,
                self.inclusive,
                input.slice::<T>(),
                layout,
                out
            ))
        )
    }

    fn vjp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        use crate::ops::cumsum;
        let (x, out, c) = (&inputs[0], &outputs[0], &cotangents[0]);
        let axis = Some(self.axis as i32);
        // Each input feeds every later running value: cotangents summed the other way.
        let grad = match self.op {
            ReduceOp::Sum => cumsum(c, axis, !self.reverse, self.inclusive),
            ReduceOp::Prod => self.product_vjp(x, out, c),
            _ => {
                let (source, valid) = self.extreme_source(x, out);
                let kept = crate::ops::where_(&valid, c, 0.0);
                super::scatter::scatter_add(&kept, &source, self.axis, x.shape())
            }
        };
        Ok(vec![grad])
    }

    fn jvp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        tangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        use crate::ops::take_along_axis;
        let (x, out) = (&inputs[0], &outputs[0]);
        let t = tangents[0].astype(x.dtype());
        let axis = Some(self.axis as i32);
        Ok(vec![match self.op {
            ReduceOp::Sum => return super::linear_jvp(self, inputs, outputs, tangents, argnums),
            ReduceOp::Prod => self.product_jvp(x, out, &t),
            _ => {
                let (source, valid) = self.extreme_source(x, out);
                crate::ops::where_(&valid, take_along_axis(&t, &source, axis), 0.0)
            }
        }])
    }

    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        let shifted = Scan {
            axis: self.axis + 1,
            ..self.clone()
        };
        super::batching::batch_first(shifted, inputs, outputs, axes)
    }

    fn output_shapes(&self, inputs: &[&[i32]], _traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        Some(vec![inputs[0].to_vec()])
    }

    same_as!();
}

impl Scan {
    /// For `cummax`/`cummin`: the position along the axis of the element each running value
    /// is (the latest of equal ones), and where there is one (an exclusive scan's first value
    /// is the identity, which comes from no element).
    /// Where the scan meets its first zero: (no zero at or before each position, the first
    /// zero itself, the products with that zero taken as one).
    fn first_zero(&self, x: &Array, inclusive: bool) -> (Array, Array, Array) {
        use crate::ops::{cumprod, cumsum, equal, logical_and, where_};
        let axis = Some(self.axis as i32);
        let zero = equal(x, 0.0);
        let seen = cumsum(&zero.astype(crate::DType::I32), axis, self.reverse, true);
        let before = equal(&seen, 0);
        let first = logical_and(&zero, equal(&seen, 1));
        let once = cumprod(&where_(&first, 1.0, x), axis, self.reverse, self.inclusive);
        let before = if inclusive {
            before
        } else {
            let count = cumsum(&zero.astype(crate::DType::I32), axis, self.reverse, false);
            equal(&count, 0)
        };
        (before, first, once)
    }

    /// The cumulative product's vjp without dividing by zeros (as MLX): before the first zero
    /// the usual `Σ c·out / x`; at it, the later products with it taken as one; after it, 0.
    fn product_vjp(&self, x: &Array, out: &Array, c: &Array) -> Array {
        use crate::ops::{cumsum, divide, multiply, where_};
        let axis = Some(self.axis as i32);
        let (before, first, once) = self.first_zero(x, true);
        let later =
            |values: &Array| cumsum(&multiply(c, values), axis, !self.reverse, self.inclusive);
        let usual = divide(later(out), where_(&before, x, 1.0));
        where_(&before, &usual, where_(&first, later(&once), 0.0))
    }

    /// The cumulative product's jvp without dividing by zeros: before the first zero the usual
    /// `out · Σ t / x`; from it on, the first zero's tangent times the products with it taken
    /// as one.
    fn product_jvp(&self, x: &Array, out: &Array, t: &Array) -> Array {
        use crate::ops::{cumsum, divide, multiply, sum, where_};
        let axis = Some(self.axis as i32);
        let (before, first, once) = self.first_zero(x, self.inclusive);
        let usual = multiply(
            out,
            cumsum(
                &divide(t, where_(&before, x, 1.0)),
                axis,
                self.reverse,
                self.inclusive,
            ),
        );
        let at_first = sum(&where_(&first, t, 0.0), self.axis as i32, true);
        where_(&before, &usual, multiply(&at_first, &once))
    }

    /// Where each running extreme came from along the axis, and whether there is one (an
    /// exclusive scan's first value has none).
    fn extreme_source(&self, x: &Array, out: &Array) -> (Array, Array) {
        // Locally constant in `x`: nothing is differentiated through them (as MLX's `owner`).
        let (source, valid) = self.extreme_positions(x, out);
        (
            crate::ops::stop_gradient(&source),
            crate::ops::stop_gradient(&valid),
        )
    }

    /// [`Self::extreme_source`] before its derivative is cut.
    fn extreme_positions(&self, x: &Array, out: &Array) -> (Array, Array) {
        use crate::ops::{arange, cummax, cummin, equal, pad, slice, where_};
        let n = x.shape()[self.axis];
        let mut along = vec![1; x.ndim()];
        along[self.axis] = n;
        let positions = arange(0.0, f64::from(n), 1.0, crate::DType::I32).reshape(&along);
        let axis = Some(self.axis as i32);
        // The running values including each element: the output itself when inclusive.
        let inclusive = match (self.inclusive, self.op) {
            (true, _) => out.clone(),
            (false, ReduceOp::Max) => cummax(x, axis, self.reverse, true),
            (false, _) => cummin(x, axis, self.reverse, true),
        };
        let hit = equal(x, &inclusive);
        let source = if self.reverse {
            cummin(&where_(&hit, &positions, n), axis, true, true)
        } else {
            cummax(&where_(&hit, &positions, -1), axis, false, true)
        };
        let everywhere = crate::ops::full_like(&source, 1.0, crate::DType::Bool);
        if self.inclusive {
            return (source, everywhere);
        }
        // Exclusive: each value is the inclusive one of the neighbour before it.
        let mut widths = vec![(0, 0); x.ndim()];
        widths[self.axis] = if self.reverse { (0, 1) } else { (1, 0) };
        let (mut start, stop) = (vec![0; x.ndim()], x.shape().to_vec());
        let mut stop = stop;
        if self.reverse {
            start[self.axis] = 1;
            stop[self.axis] = n + 1;
        }
        let ones = vec![1; x.ndim()];
        let shifted = slice(&pad(&source, &widths, 0.0), &start, &stop, &ones);
        let valid = slice(&pad(&everywhere, &widths, 0.0), &start, &stop, &ones);
        (shifted, valid)
    }
}
