//! Reductions (`sum`, `mean`, `max`, `argmax`, `var`, `logsumexp`, `all`, …), scans
//! (`cumsum`, …) and `softmax`.

use super::normalize_axes;
use crate::primitives::reduce::{ArgReduce, Reduce};
use crate::primitives::scan::Scan;
use crate::{Array, DType};
use nuvec_cpu::reduce::ReduceOp;
use std::sync::Arc;

/// Which axes a reduction covers: `None` (all), one axis, or a list.
pub trait IntoAxes {
    /// The axes, or `None` for all of them.
    fn into_axes(self) -> Option<Vec<i32>>;
}

impl IntoAxes for Option<i32> {
    fn into_axes(self) -> Option<Vec<i32>> {
        self.map(|a| vec![a])
    }
}
/// Axes already resolved to a list (or all of them): what composite reductions pass on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Axes(pub Option<Vec<i32>>);

impl IntoAxes for Axes {
    fn into_axes(self) -> Option<Vec<i32>> {
        self.0
    }
}
impl IntoAxes for i32 {
    fn into_axes(self) -> Option<Vec<i32>> {
        Some(vec![self])
    }
}
impl IntoAxes for &[i32] {
    fn into_axes(self) -> Option<Vec<i32>> {
        Some(self.to_vec())
    }
}
impl IntoAxes for Vec<i32> {
    fn into_axes(self) -> Option<Vec<i32>> {
        Some(self)
    }
}
impl<const N: usize> IntoAxes for [i32; N] {
    fn into_axes(self) -> Option<Vec<i32>> {
        Some(self.to_vec())
    }
}
impl<const N: usize> IntoAxes for &[i32; N] {
    fn into_axes(self) -> Option<Vec<i32>> {
        Some(self.to_vec())
    }
}

/// Resolved axes and the output shape (with or without kept dims).
fn plan(
    op: &str,
    a: &Array,
    axes: Option<Vec<i32>>,
    keepdims: bool,
) -> Result<(Vec<usize>, Vec<i32>), String> {
    let mut resolved = match axes {
        None => (0..a.ndim()).collect(),
        Some(axes) => normalize_axes(&axes, a.ndim())?,
    };
    resolved.sort_unstable();
    let _ = op;
    let shape = (0..a.ndim())
        .filter_map(|i| match (resolved.contains(&i), keepdims) {
            (true, true) => Some(1),
            (true, false) => None,
            (false, _) => Some(a.shape()[i]),
        })
        .collect();
    Ok((resolved, shape))
}

/// The dtype sums and products give: MLX widens bool and 8/16-bit integers to 32 bits.
fn accumulator_dtype(dtype: DType) -> DType {
    match dtype {
        DType::Bool | DType::I8 | DType::I16 => DType::I32,
        DType::U8 | DType::U16 => DType::U32,
        other => other,
    }
}

#[track_caller]
fn reduce(op: ReduceOp, a: &Array, axes: Option<Vec<i32>>, keepdims: bool) -> Array {
    if let Some(error) = a.known_error() {
        return Array::failed(error);
    }
    let (axes, shape) = match plan(op.name(), a, axes, keepdims) {
        Ok(p) => p,
        Err(reason) => return Array::invalid(op.name(), reason),
    };
    // Nothing to reduce (a 0-d array): MLX returns the array as it is, dtype included.
    if axes.is_empty()
        && matches!(
            op,
            ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min
        )
    {
        return a.clone();
    }
    let dtype = match op {
        ReduceOp::All | ReduceOp::Any => DType::Bool,
        ReduceOp::Sum | ReduceOp::Prod => accumulator_dtype(a.dtype()),
        _ => a.dtype(),
    };
    let input = a.astype(dtype);
    // Every reduced axis has length 1: MLX reduces nothing (the values pass as they are, so a
    // NaN's derivative is 1, not a maximum's), reshaping only.
    if axes.iter().all(|&axis| a.shape()[axis] == 1) {
        return crate::ops::reshape(&input, &shape);
    }
    Array::build1(Arc::new(Reduce { op, axes }), vec![input], shape, dtype)
}

/// Sum over `axes` (bool sums to int32; integers sum exactly in their type, wrapping).
///
/// ```
/// use nuvec_core::array;
/// let a = array![[1, 2], [3, 4]];
/// assert_eq!(a.sum(0, false).to_vec::<i32>()?, [4, 6]);
/// assert_eq!(a.sum(None, false).item::<i32>()?, 10);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn sum(a: &Array, axes: impl IntoAxes, keepdims: bool) -> Array {
    reduce(ReduceOp::Sum, a, axes.into_axes(), keepdims)
}

/// Product over `axes`.
#[track_caller]
pub fn prod(a: &Array, axes: impl IntoAxes, keepdims: bool) -> Array {
    reduce(ReduceOp::Prod, a, axes.into_axes(), keepdims)
}

/// Largest value over `axes` (NaN propagates).
#[track_caller]
pub fn max(a: &Array, axes: impl IntoAxes, keepdims: bool) -> Array {
    let axes = axes.into_axes();
    if let Some(refused) = empty_axis("max", a, &axes) {
        return refused;
    }
    reduce(ReduceOp::Max, a, axes, keepdims)
}

/// The failed array of a max or min over an axis of length 0 (which has no identity), as
/// MLX refuses it; reducing other axes of an empty array gives an empty result.
#[track_caller]
fn empty_axis(op: &str, a: &Array, axes: &Option<Vec<i32>>) -> Option<Array> {
    if a.size() != 0 {
        return None;
    }
    let (resolved, _) = plan(op, a, axes.clone(), false).ok()?;
    let axis = resolved.into_iter().find(|&i| a.shape()[i] == 0)?;
    Some(Array::invalid(
        op,
        format!(
            "cannot take the {op} over axis {axis} of length 0 (array of shape {:?})",
            a.shape()
        ),
    ))
}

/// Smallest value over `axes` (NaN propagates).
#[track_caller]
pub fn min(a: &Array, axes: impl IntoAxes, keepdims: bool) -> Array {
    let axes = axes.into_axes();
    if let Some(refused) = empty_axis("min", a, &axes) {
        return refused;
    }
    reduce(ReduceOp::Min, a, axes, keepdims)
}

/// Whether every element over `axes` is nonzero.
#[track_caller]
pub fn all(a: &Array, axes: impl IntoAxes, keepdims: bool) -> Array {
    reduce(ReduceOp::All, a, axes.into_axes(), keepdims)
}

/// Whether any element over `axes` is nonzero.
#[track_caller]
pub fn any(a: &Array, axes: impl IntoAxes, keepdims: bool) -> Array {
    reduce(ReduceOp::Any, a, axes.into_axes(), keepdims)
}

/// Number of elements a reduction over `axes` combines.
fn count(a: &Array, axes: &Option<Vec<i32>>) -> f64 {
    match axes {
        None => a.size() as f64,
        Some(axes) => normalize_axes(axes, a.ndim())
            .map(|r| r.iter().map(|&i| f64::from(a.shape()[i])).product())
            .unwrap_or(1.0),
    }
}

/// Mean over `axes` (integers give float32), as MLX computes it: the sum in the sum's own
/// dtype (integers wrap as their sum does), times `1 / n` rounded to the result's dtype.
#[track_caller]
pub fn mean(a: &Array, axes: impl IntoAxes, keepdims: bool) -> Array {
    let axes = axes.into_axes();
    let dtype = if a.dtype().is_float() {
        a.dtype()
    } else {
        DType::F32
    };
    let n = count(a, &axes);
    let total = reduce(ReduceOp::Sum, a, axes, keepdims).astype(dtype);
    crate::ops::multiply(&total, 1.0 / n)
}

/// Variance over `axes`, dividing by `n - ddof` (with `ddof` 0, multiplying by `1/n`, as MLX).
#[track_caller]
pub fn var(a: &Array, axes: impl IntoAxes, keepdims: bool, ddof: i32) -> Array {
    let axes = axes.into_axes();
    let dtype = if a.dtype().is_float() {
        a.dtype()
    } else {
        DType::F32
    };
    let x = a.astype(dtype);
    let n = count(a, &axes);
    let centered = crate::ops::subtract(&x, mean(&x, Axes(axes.clone()), true));
    let squares = reduce(
        ReduceOp::Sum,
        &crate::ops::square(&centered),
        axes,
        keepdims,
    );
    // MLX's normalizers: with no ddof, a multiplication by 1/n in the result's dtype (so a
    // half-precision variance rounds as MLX's does); else a division by n - ddof.
    if ddof == 0 {
        crate::ops::multiply(&squares, 1.0 / n)
    } else {
        crate::ops::divide(&squares, (n - f64::from(ddof)).max(0.0))
    }
}

/// Standard deviation over `axes`.
#[track_caller]
pub fn std(a: &Array, axes: impl IntoAxes, keepdims: bool, ddof: i32) -> Array {
    crate::ops::sqrt(&var(a, axes, keepdims, ddof))
}

/// `log(sum(exp(a)))` over `axes`, computed without overflow: over the last axis as MLX's
/// one-pass `LogSumExp` (in float32 for half precision, with its derivatives through a precise
/// softmax), over other axes from `max`, `exp`, `sum` and `log`.
#[track_caller]
pub fn logsumexp(a: &Array, axes: impl IntoAxes, keepdims: bool) -> Array {
    let axes = axes.into_axes();
    let dtype = if a.dtype().is_float() {
        a.dtype()
    } else {
        DType::F32
    };
    let x = a.astype(dtype);
    if x.size() == 0 {
        return Array::invalid(
            "logsumexp",
            format!("received an empty array of shape {:?}", a.shape()),
        );
    }
    let out = if one_pass_over_last_axis(a, &axes) {
        let mut shape = x.shape().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = 1;
        }
        Array::build1(
            Arc::new(crate::primitives::softmax::LogSumExp),
            vec![x],
            shape,
            dtype,
        )
    } else {
        let peak = crate::ops::stop_gradient(&max(&x, Axes(axes.clone()), true));
        // An infinite peak would make x - peak NaN; shifting by 0 there gives the right inf.
        let finite_peak = crate::ops::where_(crate::ops::isinf(&peak), 0.0, &peak);
        let shifted = crate::ops::exp(&crate::ops::subtract(&x, &finite_peak));
        let total = crate::ops::log(&reduce(ReduceOp::Sum, &shifted, axes.clone(), true));
        crate::ops::add(&total, &finite_peak)
    };
    if keepdims {
        out
    } else {
        match axes {
            None => crate::ops::reshape(&out, &[]),
            Some(axes) => crate::ops::squeeze(&out, Some(&axes)),
        }
    }
}

/// `exp(a) / sum(exp(a))` over `axes`, computed stably.
#[track_caller]
pub fn softmax(a: &Array, axes: impl IntoAxes) -> Array {
    let axes = axes.into_axes();
    let dtype = if a.dtype().is_float() {
        a.dtype()
    } else {
        DType::F32
    };
    let x = a.astype(dtype);
    if x.size() == 0 {
        return x;
    }
    if one_pass_over_last_axis(a, &axes) {
        return Array::build1(
            Arc::new(crate::primitives::softmax::Softmax { precise: false }),
            vec![x],
            a.shape().to_vec(),
            dtype,
        );
    }
    // MLX's construction, whose binary ops broadcast their operands first: the sum enters the
    // division broadcast to the input's shape. Its derivatives see that: the division's jvp
    // squares the broadcast sum, and a vjp after it adds the broadcast sum's cotangents at
    // full shape before summing them over `axes`, rounding as MLX's do in half precision.
    // (The maximum's broadcast carries no derivative, so it stays implicit.)
    let peak = crate::ops::stop_gradient(&max(&x, Axes(axes.clone()), true));
    let e = crate::ops::exp(&crate::ops::subtract(&x, &peak));
    let total = reduce(ReduceOp::Sum, &e, axes, true);
    let out = crate::ops::divide(&e, crate::ops::broadcast_to(&total, x.shape()));
    if a.ndim() == 0 {
        // MLX gives a 0-d softmax (1) in the input's dtype, integer or boolean too.
        return out.astype(a.dtype());
    }
    out
}

/// Whether MLX computes this softmax or logsumexp with its one-pass kernel: over the last
/// axis, with any other axes given just before it and of length 1 (no axes given means all of
/// them).
fn one_pass_over_last_axis(a: &Array, axes: &Option<Vec<i32>>) -> bool {
    let ndim = a.ndim() as i32;
    let given: Vec<i32> = match axes {
        None => (0..ndim).collect(),
        Some(axes) => axes
            .iter()
            .map(|&x| if x < 0 { x + ndim } else { x })
            .collect(),
    };
    let Some(&last) = given.last() else {
        return false;
    };
    last == ndim - 1
        && given
            .windows(2)
            .all(|pair| pair[0] + 1 == pair[1] && a.shape()[pair[0] as usize] == 1)
}

#[track_caller]
fn arg_reduce(largest: bool, a: &Array, axis: Option<i32>, keepdims: bool) -> Array {
    let name = if largest { "argmax" } else { "argmin" };
    if let Some(error) = a.known_error() {
        return Array::failed(error);
    }
    if a.size() == 0 {
        return Array::invalid(
            name,
            format!(
                "cannot take the {name} of an empty array of shape {:?}",
                a.shape()
            ),
        );
    }
    let (source, axis) = match super::axis_or_flattened(name, a, axis) {
        Ok(resolved) => resolved,
        Err(failed) => return failed,
    };
    let mut shape = source.shape().to_vec();
    shape[axis] = 1;
    let out = Array::build1(
        Arc::new(ArgReduce { largest, axis }),
        vec![source],
        shape,
        DType::U32,
    );
    match (keepdims, a.ndim()) {
        (true, n) if n > 0 => {
            let kept = vec![1; n];
            if out.ndim() == n {
                out
            } else {
                crate::ops::reshape(&out, &kept)
            }
        }
        _ => crate::ops::squeeze(&out, Some(&[axis as i32])),
    }
}

/// Index (uint32) of the largest element along `axis` (`None`: of the flattened array).
#[track_caller]
pub fn argmax(a: &Array, axis: Option<i32>, keepdims: bool) -> Array {
    arg_reduce(true, a, axis, keepdims)
}

/// Index (uint32) of the smallest element along `axis` (`None`: of the flattened array).
#[track_caller]
pub fn argmin(a: &Array, axis: Option<i32>, keepdims: bool) -> Array {
    arg_reduce(false, a, axis, keepdims)
}

#[track_caller]
fn scan(op: ReduceOp, a: &Array, axis: Option<i32>, reverse: bool, inclusive: bool) -> Array {
    let name = match op {
        ReduceOp::Sum => "cumsum",
        ReduceOp::Prod => "cumprod",
        ReduceOp::Max => "cummax",
        _ => "cummin",
    };
    if let Some(error) = a.known_error() {
        return Array::failed(error);
    }
    let (source, axis) = match super::axis_or_flattened(name, a, axis) {
        Ok(resolved) => resolved,
        Err(failed) => return failed,
    };
    let dtype = if a.dtype() == DType::Bool && op == ReduceOp::Sum {
        DType::I32
    } else {
        a.dtype()
    };
    let input = source.astype(dtype);
    let shape = input.shape().to_vec();
    Array::build1(
        Arc::new(Scan {
            op,
            axis,
            reverse,
            inclusive,
        }),
        vec![input],
        shape,
        dtype,
    )
}

/// Running sum along `axis`; `reverse` runs from the end, `inclusive = false` shifts by one.
#[track_caller]
pub fn cumsum(a: &Array, axis: Option<i32>, reverse: bool, inclusive: bool) -> Array {
    scan(ReduceOp::Sum, a, axis, reverse, inclusive)
}

/// Running product along `axis`.
#[track_caller]
pub fn cumprod(a: &Array, axis: Option<i32>, reverse: bool, inclusive: bool) -> Array {
    scan(ReduceOp::Prod, a, axis, reverse, inclusive)
}

/// Running maximum along `axis`.
#[track_caller]
pub fn cummax(a: &Array, axis: Option<i32>, reverse: bool, inclusive: bool) -> Array {
    scan(ReduceOp::Max, a, axis, reverse, inclusive)
}

/// Running minimum along `axis`.
#[track_caller]
pub fn cummin(a: &Array, axis: Option<i32>, reverse: bool, inclusive: bool) -> Array {
    scan(ReduceOp::Min, a, axis, reverse, inclusive)
}

impl Array {
    /// See [`sum`].
    #[track_caller]
    pub fn sum(&self, axes: impl IntoAxes, keepdims: bool) -> Array {
        sum(self, axes, keepdims)
    }

    /// See [`mean`].
    #[track_caller]
    pub fn mean(&self, axes: impl IntoAxes, keepdims: bool) -> Array {
        mean(self, axes, keepdims)
    }

    /// See [`max`].
    #[track_caller]
    pub fn max(&self, axes: impl IntoAxes, keepdims: bool) -> Array {
        max(self, axes, keepdims)
    }

    /// See [`min`].
    #[track_caller]
    pub fn min(&self, axes: impl IntoAxes, keepdims: bool) -> Array {
        min(self, axes, keepdims)
    }
}
