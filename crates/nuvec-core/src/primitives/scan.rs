//! Cumulative reductions along one axis (`cumsum`, `cumprod`, `cummax`, `cummin`).

use super::reduce::axis_layout;
use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Error, Result};
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
        _inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        if self.op != ReduceOp::Sum {
            return Err(Error::Transform {
                transform: "vjp",
                reason: format!("{} has no vjp rule yet", self.name()),
            });
        }
        // Each input feeds every later running sum: the cotangents summed the other way.
        Ok(vec![crate::ops::cumsum(
            &cotangents[0],
            Some(self.axis as i32),
            !self.reverse,
            self.inclusive,
        )])
    }

    fn jvp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        tangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        if self.op != ReduceOp::Sum {
            return Err(Error::Transform {
                transform: "jvp",
                reason: format!("{} has no jvp rule yet", self.name()),
            });
        }
        super::linear_jvp(self, inputs, outputs, tangents, argnums)
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

    same_as!();
}
