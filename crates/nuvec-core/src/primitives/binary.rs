//! Binary element-wise ops, broadcasting their inputs by strides (no copies).

use super::{output, same_as};
use crate::ops::broadcast_strides;
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, DType, Result};
use nuvec_cpu::binary::{broadcast2, broadcast_assign, BinaryOp, Operand};
use nuvec_cpu::{with_dtype, Buffer, Element};
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
        if a.shape == spec.shape && a.dtype == spec.dtype {
            // The first operand's buffer, when nothing else holds it, receives the result.
            let (first, rest) = inputs.split_at_mut(1);
            if let Some(mut owned) = first[0].take_owned(spec.bytes()) {
                let b = &rest[0];
                with_dtype!(spec.dtype, T, {
                    let y = Operand {
                        data: b.slice::<T>(),
                        strides: &sb,
                        offset: 0,
                    };
                    let out = &mut owned.as_mut_slice::<T>()[..spec.size()];
                    match op {
                        BinaryOp::Add => {
                            broadcast_assign(out, y, &spec.shape, |p: T, q: T| Element::add(p, q))
                        }
                        BinaryOp::Subtract => {
                            broadcast_assign(out, y, &spec.shape, |p: T, q: T| Element::sub(p, q))
                        }
                        BinaryOp::Multiply => {
                            broadcast_assign(out, y, &spec.shape, |p: T, q: T| Element::mul(p, q))
                        }
                        _ => broadcast_assign(out, y, &spec.shape, |p, q| op.apply(p, q)),
                    }
                });
                return Ok(vec![Arc::new(owned)]);
            }
        }
        let (a, b) = (&inputs[0], &inputs[1]);
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
                    BinaryOp::Add => {
                        broadcast2(xa, ya, &spec.shape, out, |p: T, q: T| Element::add(p, q))
                    }
                    BinaryOp::Subtract => {
                        broadcast2(xa, ya, &spec.shape, out, |p: T, q: T| Element::sub(p, q))
                    }
                    BinaryOp::Multiply => {
                        broadcast2(xa, ya, &spec.shape, out, |p: T, q: T| Element::mul(p, q))
                    }
                    BinaryOp::Divide => {
                        broadcast2(xa, ya, &spec.shape, out, |p: T, q: T| Element::div(p, q))
                    }
                    _ => broadcast2(xa, ya, &spec.shape, out, |p, q| op.apply(p, q)),
                }
            })
        })
    }

    fn vjp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        use crate::ops::*;
        let (a, b, out, c) = (&inputs[0], &inputs[1], &outputs[0], &cotangents[0]);
        let (da, db) = match self.0 {
            BinaryOp::Add => (c.clone(), c.clone()),
            BinaryOp::Subtract => (c.clone(), negative(c)),
            BinaryOp::Multiply => (multiply(c, b), multiply(c, a)),
            BinaryOp::Divide => (divide(c, b), negative(&divide(multiply(c, out), b))),
            BinaryOp::Power => (
                multiply(c, multiply(b, power(a, subtract(b, 1.0)))),
                multiply(c, multiply(out, log(&where_(greater(a, 0.0), a, 1.0)))),
            ),
            BinaryOp::Remainder => (c.clone(), negative(&multiply(c, floor_divide(a, b)))),
            BinaryOp::Maximum | BinaryOp::Minimum => {
                let pick_a = if self.0 == BinaryOp::Maximum {
                    greater_equal(a, b)
                } else {
                    less_equal(a, b)
                };
                (where_(&pick_a, c, 0.0), where_(&pick_a, 0.0, c))
            }
            BinaryOp::LogAddExp => (
                multiply(c, sigmoid(&subtract(a, b))),
                multiply(c, sigmoid(&subtract(b, a))),
            ),
            BinaryOp::ArcTan2 => {
                let norm = add(square(a), square(b));
                (
                    multiply(c, divide(b, &norm)),
                    negative(&multiply(c, divide(a, &norm))),
                )
            }
            _ => (zeros_like(a), zeros_like(b)),
        };
        let grads = [da, db];
        Ok(argnums
            .iter()
            .map(|&i| crate::transforms::sum_to_shape(&grads[i], inputs[i].shape()))
            .collect())
    }

    same_as!();
}
