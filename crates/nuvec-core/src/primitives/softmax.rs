//! Softmax and logsumexp along the last axis as single primitives, as MLX's `Softmax` and
//! `LogSumExp`: one pass per row with MLX's roundings (half-precision softmax computed in the
//! input's own type, the sum accumulated in it, the exponentials scaled by the rounded
//! reciprocal of the sum; a precise softmax and logsumexp in float32, rounded once) and MLX's
//! derivative rules: `s·v − s·Σ(s·v)` for softmax, and for logsumexp a precise softmax
//! (`c·softmax(x)` and `Σ t·softmax(x)`), whose half-precision roundings its higher
//! derivatives inherit.

use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::unary::exp_f32;
use nuvec_cpu::{parallel, with_float_dtype, Buffer, DType, Float};
use std::sync::Arc;

/// Softmax over the last axis of a float array. `precise` computes a half-precision row in
/// float32 and rounds once, as MLX's `softmax(..., precise=True)` (what the derivatives of
/// its logsumexp use); float32 and float64 rows are computed alike either way.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Softmax {
    pub(crate) precise: bool,
}

/// A precise softmax over the last axis of `x` (a float array), as MLX's logsumexp derivatives
/// compute it.
fn precise_softmax(x: &Array) -> Array {
    Array::build1(
        Arc::new(Softmax { precise: true }),
        vec![x.clone()],
        x.shape().to_vec(),
        x.dtype(),
    )
}

/// `Σ term(v)` over `values` in float32, in eight lanes (an ulp apart at most from a sum in
/// order), so that the loop vectorizes.
#[inline(always)]
fn lane_sum<T: Float>(values: &[T], term: impl Fn(T) -> f32) -> f32 {
    let mut lanes = [0.0f32; 8];
    let mut blocks = values.chunks_exact(8);
    for block in &mut blocks {
        for (lane, &v) in lanes.iter_mut().zip(block) {
            *lane += term(v);
        }
    }
    let tail: f32 = blocks.remainder().iter().map(|&v| term(v)).sum();
    lanes.iter().sum::<f32>() + tail
}

/// One row: `out = exp(x - max) · (1 / Σ exp(x - max))`, each step rounded to `T` as MLX's
/// CPU kernel rounds it (float64 in float64, everything else through float32; a precise
/// half-precision row in float32, rounded once at the end). Half-precision sums that are not
/// precise run in order, rounded at each step, as MLX's; float32 sums in eight lanes.
#[inline(always)]
fn row<T: Float>(x: &[T], out: &mut [T], precise: bool) {
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
    let peak = x.iter().fold(f32::NEG_INFINITY, |m, v| m.max(v.to_f32()));
    if precise && T::DTYPE != DType::F32 {
        // MLX's kernel with a float32 accumulator: the exponentials are computed again for
        // the output rather than kept rounded.
        let scale = 1.0 / lane_sum(x, |v| exp_f32(v.to_f32() - peak));
        for (o, v) in out.iter_mut().zip(x) {
            *o = T::from_f32(exp_f32(v.to_f32() - peak) * scale);
        }
        return;
    }
    let round = |v: f32| T::from_f32(v).to_f32();
    for (o, v) in out.iter_mut().zip(x) {
        *o = T::from_f32(exp_f32(round(v.to_f32() - peak)));
    }
    let total = if T::DTYPE == DType::F32 {
        lane_sum(out, |e| e.to_f32())
    } else {
        out.iter()
            .fold(0.0f32, |total, e| round(total + e.to_f32()))
    };
    let scale = round(1.0 / total);
    out.iter_mut()
        .for_each(|o| *o = T::from_f32(o.to_f32() * scale));
}

impl Primitive for Softmax {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let (x, spec) = (&inputs[0], &outputs[0]);
        let cols = spec.shape.last().copied().unwrap_or(1);
        let rows = spec.size().checked_div(cols).unwrap_or(0);
        let out =
            nuvec_cuda::ops::softmax_rows(gpu, (x.buffer(), x.dtype), (rows as u64, cols as u64));
        crate::gpu::one(gpu, "softmax", out)
    }

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
                        || row(&x[r * width..(r + 1) * width], o, self.precise),
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

    /// MLX's: the rule of the vjp with the softmax computed again, a node of its own rather
    /// than the output (so a vjp after the jvp sums its cotangents apart from the output's).
    fn jvp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        tangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let x = &inputs[0];
        let again = Array::build1(
            Arc::new(self.clone()),
            vec![x.clone()],
            x.shape().to_vec(),
            outputs[0].dtype(),
        );
        Ok(vec![through(&again, &tangents[0].astype(x.dtype()))])
    }

    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        // The batch axis in front leaves the last axis last.
        super::batching::batch_first(self.clone(), inputs, outputs, axes)
    }

    fn output_shapes(&self, inputs: &[&[i32]], _traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        Some(vec![inputs[0].to_vec()])
    }

    same_as!();
}

/// `s·v − s·Σ(s·v)` over the last axis: the vjp of a cotangent `v` and the jvp of a tangent
/// `v` alike (the Jacobian is symmetric), in MLX's order, the sum broadcast to `s`'s shape
/// before the product as MLX's `multiply` broadcasts it (the derivatives of this derivative
/// add the broadcast sum's cotangents at full shape before summing them, as MLX's).
fn through(s: &Array, v: &Array) -> Array {
    use crate::ops::{broadcast_to, multiply, subtract, sum};
    let sv = multiply(s, v);
    let total = sum(&sv, -1, true);
    subtract(&sv, multiply(s, broadcast_to(&total, s.shape())))
}

/// One row's `log Σ exp(x)`: `max + log Σ exp(x - max)` computed in float32 (float64 for
/// float64) and rounded once, an infinite maximum itself, a NaN propagated, as MLX's kernel.
#[inline(always)]
fn logsumexp_row<T: Float>(x: &[T]) -> T {
    if T::DTYPE == DType::F64 {
        let peak = x.iter().fold(f64::NEG_INFINITY, |m, v| {
            let v = v.to_f64();
            if v > m || v.is_nan() {
                v
            } else {
                m
            }
        });
        if peak.is_infinite() {
            return T::from_f64(peak);
        }
        let total: f64 = x.iter().map(|v| (v.to_f64() - peak).exp()).sum();
        return T::from_f64(total.ln() + peak);
    }
    let peak = x.iter().fold(f32::NEG_INFINITY, |m, v| {
        let v = v.to_f32();
        if v > m || v.is_nan() {
            v
        } else {
            m
        }
    });
    if peak.is_infinite() {
        return T::from_f32(peak);
    }
    T::from_f32(lane_sum(x, |v| exp_f32(v.to_f32() - peak)).ln() + peak)
}

/// `log Σ exp(x)` over the last axis of a float array, kept as an axis of length 1, as MLX's
/// `LogSumExp` (what `logsumexp` over the last axis builds).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LogSumExp;

impl Primitive for LogSumExp {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let (x, spec) = (&inputs[0], &outputs[0]);
        let cols = x.shape.last().copied().unwrap_or(1);
        let out = nuvec_cuda::ops::reduce_rows(
            gpu,
            nuvec_cuda::kernels::reduce::Reduction::LogSumExp,
            (x.buffer(), x.dtype),
            (spec.size() as u64, cols as u64),
            spec.dtype,
        );
        crate::gpu::one(gpu, "logsumexp", out)
    }

    fn name(&self) -> &str {
        "logsumexp"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let input = &inputs[0];
        let width = input.shape.last().copied().unwrap_or(1);
        with_float_dtype!(
            spec.dtype,
            T,
            output::<T>(spec, |out| {
                let x = input.slice::<T>();
                parallel::for_each_row(out, 1, |r, o| {
                    o[0] = nuvec_cpu::with_wide_vectors(
                        #[inline(always)]
                        || logsumexp_row(&x[r * width..(r + 1) * width]),
                    )
                });
            }),
            Err(crate::Error::eval(
                "logsumexp",
                format!("logsumexp is computed in a float type, got {}", spec.dtype)
            ))
        )
    }

    /// MLX's: the cotangent times a precise softmax of the input.
    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        // MLX's `multiply` broadcasts the cotangent (an axis of 1 last) first.
        let x = &inputs[0];
        Ok(vec![crate::ops::multiply(
            crate::ops::broadcast_to(&cotangents[0], x.shape()),
            precise_softmax(x),
        )])
    }

    /// MLX's: the sum over the last axis of the tangent times a precise softmax of the input.
    fn jvp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        tangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let weighted = crate::ops::multiply(
            tangents[0].astype(inputs[0].dtype()),
            precise_softmax(&inputs[0]),
        );
        Ok(vec![crate::ops::sum(&weighted, -1, true)])
    }

    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        // The batch axis in front leaves the last axis last.
        super::batching::batch_first(LogSumExp, inputs, outputs, axes)
    }

    fn output_shapes(&self, inputs: &[&[i32]], _traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        let mut shape = inputs[0].to_vec();
        *shape.last_mut()? = 1;
        Some(vec![shape])
    }

    same_as!();
}
