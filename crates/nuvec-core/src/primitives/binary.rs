//! Binary element-wise ops, broadcasting their inputs by strides (no copies).

use super::{output, same_as};
use crate::ops::broadcast_strides;
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{DType, Result};
use nuvec_cpu::binary::{broadcast2, BinaryOp, Operand};
use nuvec_cpu::{with_dtype, Buffer};
use std::sync::Arc;

/// `out = op(a, b)` for inputs of one dtype whose shapes broadcast to the output's.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Binary(pub(crate) BinaryOp);

impl Primitive for Binary {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let op = self.0;
        let spec = &outputs[0];
        let (a, b) = (&inputs[0], &inputs[1]);
        let sa = broadcast_strides(&a.shape, &spec.shape);
        let sb = broadcast_strides(&b.shape, &spec.shape);
        if spec.dtype == DType::Bool && a.dtype != DType::Bool || op.is_predicate() {
            return with_dtype!(a.dtype, T, {
                let (x, y) = (a.slice::<T>(), b.slice::<T>());
                output::<bool>(spec, |out| {
                    broadcast2(
                        Operand {
                            data: x,
                            strides: &sa,
                            offset: 0,
                        },
                        Operand {
                            data: y,
                            strides: &sb,
                            offset: 0,
                        },
                        &spec.shape,
                        out,
                        |p, q| op.test(p, q),
                    )
                })
            });
        }
        with_dtype!(a.dtype, T, {
            let (x, y) = (a.slice::<T>(), b.slice::<T>());
            output::<T>(spec, |out| {
                let (xa, ya) = (
                    Operand {
                        data: x,
                        strides: &sa,
                        offset: 0,
                    },
                    Operand {
                        data: y,
                        strides: &sb,
                        offset: 0,
                    },
                );
                // Separate closures per common op keep the inner loops free of the op `match`,
                // so they vectorize.
                match op {
                    BinaryOp::Add => broadcast2(xa, ya, &spec.shape, out, |p: T, q: T| {
                        nuvec_cpu::Element::add(p, q)
                    }),
                    BinaryOp::Subtract => broadcast2(xa, ya, &spec.shape, out, |p: T, q: T| {
                        nuvec_cpu::Element::sub(p, q)
                    }),
                    BinaryOp::Multiply => broadcast2(xa, ya, &spec.shape, out, |p: T, q: T| {
                        nuvec_cpu::Element::mul(p, q)
                    }),
                    BinaryOp::Divide => broadcast2(xa, ya, &spec.shape, out, |p: T, q: T| {
                        nuvec_cpu::Element::div(p, q)
                    }),
                    _ => broadcast2(xa, ya, &spec.shape, out, |p, q| op.apply(p, q)),
                }
            })
        })
    }

    same_as!();
}
