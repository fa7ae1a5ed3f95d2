//! Unary element-wise math (`exp`, `sqrt`, `abs`, …).

use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::unary::{unary_exact, unary_float, unary_float_in_place, UnaryOp};
use nuvec_cpu::{parallel, with_dtype, with_float_dtype, Buffer};
use std::sync::Arc;

/// `out = op(x)`; input and output share dtype and shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Unary(pub(crate) UnaryOp);

impl Primitive for Unary {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let (x, spec) = (&inputs[0], &outputs[0]);
        let n = spec.size();
        let dims = crate::gpu::flat(n)?;
        let out = nuvec_cuda::ops::unary(
            gpu,
            self.0,
            (x.buffer(), x.dtype),
            (n as u64, &dims),
            spec.dtype,
        );
        crate::gpu::one(gpu, self.name(), out)
    }

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

    fn vjp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let (x, out, c) = (&inputs[0], &outputs[0], &cotangents[0]);
        Ok(vec![match self.0 {
            // MLX's vjp reads the output back (`c · (out + 1)`) where its jvp recomputes
            // `exp(x)`: in half precision `out + 1` rounds to 0 where `exp(x)` does not.
            UnaryOp::Expm1 => crate::ops::multiply(c, crate::ops::add(out, 1.0)),
            _ => self.times_derivative(x, out, c),
        }])
    }

    fn jvp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        tangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let x = &inputs[0];
        // Where the derivative is written with the function's value, MLX's jvp computes the
        // function again rather than reading the output: a node of its own, whose cotangents
        // a vjp after the jvp sums apart from the output's (in another order, which rounding
        // tells apart).
        let again;
        let out = match self.0 {
            UnaryOp::Exp | UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Sigmoid | UnaryOp::ErfInv => {
                again = Array::build1(
                    Arc::new(self.clone()),
                    vec![x.clone()],
                    x.shape().to_vec(),
                    outputs[0].dtype(),
                );
                &again
            }
            _ => &outputs[0],
        };
        Ok(vec![self.times_derivative(x, out, &tangents[0])])
    }

    super::batching::vmap_elementwise!();

    fn is_elementwise(&self) -> bool {
        true
    }

    same_as!();
}

impl Unary {
    /// `c · f'(x)` element-wise (`out` is `f(x)`): the jvp of a tangent `c`, and the vjp of a
    /// cotangent `c` too (the Jacobian is diagonal) except where MLX writes the two apart. Each is MLX's expression, in its
    /// order, so that roundings, infinities and NaN come out as there (and so do the
    /// derivatives of these derivatives).
    fn times_derivative(&self, x: &Array, out: &Array, c: &Array) -> Array {
        use crate::ops::*;
        match self.0 {
            UnaryOp::Abs => multiply(c, sign(x)),
            UnaryOp::Negative => negative(c),
            UnaryOp::Sign | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => zeros_like(x),
            UnaryOp::Square => multiply(x, multiply(c, 2.0)),
            UnaryOp::Sqrt => divide(multiply(c, 0.5), out),
            UnaryOp::Rsqrt => multiply(multiply(c, -0.5), divide(out, x)),
            // MLX's reciprocal is 1 / x: the divisor's rule, -c / x².
            UnaryOp::Reciprocal => negative(&divide(c, square(x))),
            UnaryOp::Exp => multiply(c, out),
            UnaryOp::Expm1 => multiply(c, exp(x)),
            UnaryOp::Log => divide(c, x),
            UnaryOp::Log1p => divide(c, add(x, 1.0)),
            // MLX scales by 1 / ln 2 computed in float32.
            UnaryOp::Log2 => multiply(divide(c, x), f64::from(1.0 / 2f32.ln())),
            UnaryOp::Log10 => multiply(divide(c, x), f64::from(1.0 / 10f32.ln())),
            UnaryOp::Sin => multiply(c, cos(x)),
            UnaryOp::Cos => negative(&multiply(c, sin(x))),
            UnaryOp::Tan => divide(c, square(&cos(x))),
            UnaryOp::Tanh => divide(c, square(&cosh(x))),
            UnaryOp::Sinh => multiply(c, cosh(x)),
            UnaryOp::Cosh => multiply(c, sinh(x)),
            UnaryOp::ArcSin => multiply(c, rsqrt(&subtract(1.0, square(x)))),
            UnaryOp::ArcCos => multiply(c, negative(&rsqrt(&subtract(1.0, square(x))))),
            UnaryOp::ArcTan => divide(c, add(1.0, square(x))),
            UnaryOp::ArcSinh => multiply(c, rsqrt(&add(square(x), 1.0))),
            UnaryOp::ArcCosh => multiply(c, rsqrt(&subtract(square(x), 1.0))),
            UnaryOp::ArcTanh => divide(c, subtract(1.0, square(x))),
            UnaryOp::Sigmoid => multiply(c, multiply(out, subtract(1.0, out))),
            UnaryOp::Erf => multiply(
                multiply(c, std::f64::consts::FRAC_2_SQRT_PI),
                exp(&negative(&square(x))),
            ),
            UnaryOp::ErfInv => multiply(
                multiply(c, 1.0 / std::f64::consts::FRAC_2_SQRT_PI),
                exp(&square(out)),
            ),
        }
    }
}
