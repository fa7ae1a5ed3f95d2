//! Unary element-wise math (`exp`, `sqrt`, `abs`, …).

use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::Result;
use nuvec_cpu::unary::{unary_exact, unary_float, unary_float_in_place, UnaryOp};
use nuvec_cpu::{parallel, with_dtype, with_float_dtype, Buffer};
use std::sync::Arc;

/// `out = op(x)`; input and output share dtype and shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Unary(pub(crate) UnaryOp);

impl Primitive for Unary {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let op = self.0;
        let spec = &outputs[0];
        let input = &mut inputs[0];
        if let Some(mut owned) = input.take_owned(spec.bytes()) {
            with_float_dtype!(
                spec.dtype,
                T,
                unary_float_in_place(op, owned.as_mut_slice::<T>()),
                with_dtype!(
                    spec.dtype,
                    T,
                    parallel::map_in_place(owned.as_mut_slice::<T>(), |x| op.apply_exact(x))
                )
            );
            return Ok(vec![Arc::new(owned)]);
        }
        with_float_dtype!(
            spec.dtype,
            T,
            output::<T>(spec, |out| unary_float(op, input.slice::<T>(), out)),
            with_dtype!(
                spec.dtype,
                T,
                output::<T>(spec, |out| unary_exact(op, input.slice::<T>(), out))
            )
        )
    }

    same_as!();
}
