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
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        use crate::gpu::i64s;
        let (a, b, spec) = (&inputs[0], &inputs[1], &outputs[0]);
        let made = nuvec_cuda::kernels::binary_output(self.0, a.dtype);
        if made != spec.dtype {
            return Err(crate::Error::eval(
                self.name(),
                format!(
                    "the GPU kernel gives {made} for {} inputs, the graph expects {}",
                    a.dtype, spec.dtype
                ),
            ));
        }
        // A float op with a scalar operand (`x * 2.0`) reads it once per thread, through the
        // fused kernels' contiguous loop, rather than the strided kernel's index arithmetic.
        let n = spec.size();
        let whole = |x: &crate::gpu::GpuInput| x.size() == n && n != 1;
        let scalar_or_whole = |x: &crate::gpu::GpuInput| x.size() == n || x.size() == 1;
        if a.dtype == spec.dtype
            && scalar_or_whole(a)
            && scalar_or_whole(b)
            && !(whole(a) && whole(b))
        {
            use nuvec_cuda::kernels::fused;
            if let Some(source) = fused::chain(&[fused::Step::Binary(self.0, 0, 1)], 2, a.dtype) {
                let operands = [(a.buffer(), whole(a)), (b.buffer(), whole(b))];
                let out = nuvec_cuda::ops::fused(gpu, &source, &operands, n as u64, spec.dtype);
                return crate::gpu::one(gpu, self.name(), out);
            }
        }
        let strides = |shape: &[usize]| -> Vec<i64> {
            broadcast_strides(shape, &spec.shape)
                .iter()
                .map(|&s| s as i64)
                .collect()
        };
        let (sa, sb) = (strides(&a.shape), strides(&b.shape));
        let dims = nuvec_cuda::ops::Dims::new(&i64s(&spec.shape), &[&sa, &sb])
            .map_err(|e| crate::gpu::cuda(self.name(), e))?;
        let out = nuvec_cuda::ops::binary(
            gpu,
            self.0,
            (a.buffer(), b.buffer(), a.dtype),
            (spec.size() as u64, &dims),
        );
        crate::gpu::one(gpu, self.name(), out)
    }

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
        Ok(argnums
            .iter()
            .map(|&i| {
                let full = self.partial(i, inputs, &outputs[0], &cotangents[0]);
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
        let out = &outputs[0];
        // MLX's jvp of power computes the power again rather than reading the output: a node
        // of its own, whose cotangents a vjp after the jvp sums apart from the output's.
        let again = (self.0 == BinaryOp::Power).then(|| {
            Array::build1(
                Arc::new(self.clone()),
                inputs.to_vec(),
                out.shape().to_vec(),
                out.dtype(),
            )
        });
        let value = again.as_ref().unwrap_or(out);
        let terms = argnums
            .iter()
            .zip(tangents)
            .map(|(&i, t)| self.partial(i, inputs, value, &t.astype(inputs[i].dtype())));
        Ok(vec![super::sum_of_terms(terms, out)])
    }

    super::batching::vmap_elementwise!();

    fn is_elementwise(&self) -> bool {
        true
    }

    same_as!();
}

impl Binary {
    /// `v · ∂out/∂input_i` element-wise, for `v` broadcastable to the output: the vjp term of
    /// a cotangent and the jvp term of a tangent alike (the Jacobian of each input is
    /// diagonal once broadcast).
    fn partial(&self, i: usize, inputs: &[Array], out: &Array, v: &Array) -> Array {
        use crate::ops::*;
        let (a, b) = (&inputs[0], &inputs[1]);
        match (self.0, i) {
            (BinaryOp::Add, _) => v.clone(),
            (BinaryOp::Subtract, 0) => v.clone(),
            (BinaryOp::Subtract, _) => negative(v),
            (BinaryOp::Multiply, 0) => multiply(v, b),
            (BinaryOp::Multiply, _) => multiply(v, a),
            (BinaryOp::Divide, 0) => divide(v, b),
            (BinaryOp::Divide, _) => negative(&divide(multiply(v, a), square(b))),
            (BinaryOp::Power, 0) => multiply(v, multiply(b, power(a, subtract(b, 1.0)))),
            // As MLX: log(a)·out where out ≠ 0 (0·log 0 → 0), NaN for a negative base.
            (BinaryOp::Power, _) => {
                multiply(v, where_(not_equal(out, 0.0), multiply(log(a), out), 0.0))
            }
            (BinaryOp::Remainder, 0) => v.clone(),
            (BinaryOp::Remainder, _) => negative(&multiply(floor(&divide(a, b)), v)),
            // As MLX: a tie sends the derivative to `b`, and the mask multiplies it (so an
            // infinite cotangent on the other side gives NaN, as there).
            // (NaN on either side sends it to neither, as there.)
            (BinaryOp::Maximum | BinaryOp::Minimum, _) => {
                let mask = match (self.0 == BinaryOp::Maximum, i == 0) {
                    (true, true) => greater(a, b),
                    (true, false) => less_equal(a, b),
                    (false, true) => less(a, b),
                    (false, false) => greater_equal(a, b),
                };
                multiply(v, astype(&mask, v.dtype()))
            }
            (BinaryOp::LogAddExp, 0) => multiply(v, sigmoid(&subtract(a, b))),
            (BinaryOp::LogAddExp, _) => multiply(v, subtract(1.0, sigmoid(&subtract(a, b)))),
            (BinaryOp::ArcTan2, 0) => multiply(b, divide(v, add(square(a), square(b)))),
            (BinaryOp::ArcTan2, _) => multiply(negative(a), divide(v, add(square(a), square(b)))),
            _ => zeros_like(&inputs[i]),
        }
    }
}
