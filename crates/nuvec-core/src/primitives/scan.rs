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
        use crate::ops::{cumsum, divide, multiply};
        let (x, out, c) = (&inputs[0], &outputs[0], &cotangents[0]);
        let axis = Some(self.axis as i32);
        // Each input feeds every later running value: cotangents summed the other way.
        let grad = match self.op {
            ReduceOp::Sum => cumsum(c, axis, !self.reverse, self.inclusive),
            ReduceOp::Prod => divide(
                cumsum(&multiply(c, out), axis, !self.reverse, self.inclusive),
                x,
            ),
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
        use crate::ops::{cumsum, divide, multiply, take_along_axis};
        let (x, out) = (&inputs[0], &outputs[0]);
        let t = tangents[0].astype(x.dtype());
        let axis = Some(self.axis as i32);
        Ok(vec![match self.op {
            ReduceOp::Sum => return super::linear_jvp(self, inputs, outputs, tangents, argnums),
            ReduceOp::Prod => multiply(
                out,
                cumsum(&divide(&t, x), axis, self.reverse, self.inclusive),
            ),
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
    fn extreme_source(&self, x: &Array, out: &Array) -> (Array, Array) {
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
