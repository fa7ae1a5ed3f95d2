//! Softmax along the last axis as one primitive, as MLX's `Softmax`: one pass per row with
//! MLX's roundings (half precision computed in the input's own type, the sum accumulated in
//! it, the exponentials scaled by the rounded reciprocal of the sum) and MLX's derivative
//! rules, `s·v − s·Σ(s·v)`.

use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::unary::exp_f32;
use nuvec_cpu::{parallel, with_float_dtype, Buffer, DType, Float};
use std::sync::Arc;

/// Softmax over the last axis of a float array.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Softmax;

/// One row: `out = exp(x - max) · (1 / Σ exp(x - max))`, each step rounded to `T` as MLX's
/// CPU kernel rounds it (float64 in float64, everything else through float32). Half-precision
/// sums run in order, rounded at each step, as MLX's; float32 sums in eight lanes (an ulp
/// apart at most from a sum in order), so that every loop vectorizes.
#[inline(always)]
fn row<T: Float>(x: &[T], out: &mut [T]) {
    if T::DTYPE == DType::F64 {
        let peak = x.iter().fold(f64::NEG_INFINITY, |m, v| m.max(v.to_f64()));
        let mut total = 0.0;
        for (o, v) in out.iter_mut().zip(x) {
            let e = (v.to_f64() - peak).exp();
            *o = T::from_f64(e);
            total += e;
        }
        let scale = 1.0 / total;
        out.iter_mut()
            .for_each(|o| *o = T::from_f64(o.to_f64() * scale));
        return;
    }
    let round = |v: f32| T::from_f32(v).to_f32();
    let peak = x.iter().fold(f32::NEG_INFINITY, |m, v| m.max(v.to_f32()));
    for (o, v) in out.iter_mut().zip(x) {
        *o = T::from_f32(exp_f32(round(v.to_f32() - peak)));
    }
    let total = if T::DTYPE == DType::F32 {
        let mut lanes = [0.0f32; 8];
        let mut blocks = out.chunks_exact(8);
        for block in &mut blocks {
            for (lane, v) in lanes.iter_mut().zip(block) {
                *lane += v.to_f32();
            }
        }
        let tail: f32 = blocks.remainder().iter().map(|v| v.to_f32()).sum();
        lanes.iter().sum::<f32>() + tail
    } else {
        out.iter()
            .fold(0.0f32, |total, e| round(total + e.to_f32()))
    };
    let scale = round(1.0 / total);
    out.iter_mut()
        .for_each(|o| *o = T::from_f32(o.to_f32() * scale));
}

impl Primitive for Softmax {
    fn name(&self) -> &str {
        "softmax"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let input = &inputs[0];
        let width = spec.shape.last().copied().unwrap_or(1);
        with_float_dtype!(
            spec.dtype,
            T,
            output::<T>(spec, |out| {
                let x = input.slice::<T>();
                parallel::for_each_row(out, width, |r, o| {
                    nuvec_cpu::with_wide_vectors(
                        #[inline(always)]
                        || row(&x[r * width..(r + 1) * width], o),
                    )
                });
            }),
            Err(crate::Error::eval(
                "softmax",
                format!("softmax is computed in a float type, got {}", spec.dtype)
            ))
        )
    }

    fn vjp(
        &self,
        _inputs: &[Array],
        outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Ok(vec![through(&outputs[0], &cotangents[0])])
    }

    fn jvp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        tangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Ok(vec![through(
            &outputs[0],
            &tangents[0].astype(inputs[0].dtype()),
        )])
    }

    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        // The batch axis in front leaves the last axis last.
        super::batching::batch_first(Softmax, inputs, outputs, axes)
    }

    fn output_shapes(&self, inputs: &[&[i32]], _traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        Some(vec![inputs[0].to_vec()])
    }

    same_as!();
}

/// `s·v − s·Σ(s·v)` over the last axis: the vjp of a cotangent `v` and the jvp of a tangent
/// `v` alike (the Jacobian is symmetric), in MLX's order.
fn through(s: &Array, v: &Array) -> Array {
    use crate::ops::{multiply, subtract, sum};
    let sv = multiply(s, v);
    let total = sum(&sv, -1, true);
    subtract(&sv, multiply(s, total))
}
