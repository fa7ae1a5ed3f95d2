//! Arrays made from values: `zeros`, `ones`, `full`, `arange`, `linspace`, `eye`, `*_like`.
//! These are computed at once (they have no inputs to wait for).

use crate::array::checked_size;
use crate::{Array, DType};
use nuvec_cpu::{with_dtype, Buffer, Element};
use std::sync::Arc;

/// An evaluated array of `shape` whose elements are `f(flat_index)`.
pub(crate) fn from_fn<T: Element>(shape: &[i32], f: impl Fn(usize) -> T) -> Array {
    let size = checked_size(shape).unwrap_or(0);
    let mut buffer = Buffer::for_output(size * size_of::<T>());
    for (i, slot) in buffer.as_mut_slice::<T>().iter_mut().enumerate() {
        *slot = f(i);
    }
    Array::ready(shape.to_vec(), T::DTYPE, Arc::new(buffer))
}

/// A 0-d array of `dtype` holding `value` (cast as C++ would).
pub(crate) fn scalar_of(value: f64, dtype: DType) -> Array {
    with_dtype!(dtype, T, from_fn::<T>(&[], |_| T::from_f64(value)))
}

/// A 0-d array of `dtype` holding the integer `value` exactly (wrapping to the type's width).
pub(crate) fn scalar_of_int(value: i64, dtype: DType) -> Array {
    with_dtype!(
        dtype,
        T,
        from_fn::<T>(&[], |_| T::from_i128(i128::from(value)))
    )
}

#[track_caller]
fn checked_shape(op: &str, shape: &[i32]) -> Result<(), Array> {
    match checked_size(shape) {
        Some(_) => Ok(()),
        None => Err(Array::invalid(
            op,
            format!("invalid shape {shape:?}: dims must be >= 0"),
        )),
    }
}

/// An array of `shape` filled with `value` as `dtype`.
///
/// ```
/// use nuvec_core::{ops::full, DType};
/// assert_eq!(full(&[2], 7.0, DType::I32).to_vec::<i32>()?, [7, 7]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn full(shape: &[i32], value: f64, dtype: DType) -> Array {
    if let Err(failed) = checked_shape("full", shape) {
        return failed;
    }
    if dtype.is_integer() && !fits_integer(value, dtype) {
        return Array::invalid(
            "full",
            format!("converting {value} to {dtype} would overflow"),
        );
    }
    with_dtype!(dtype, T, {
        let v = T::from_f64(value);
        from_fn::<T>(shape, |_| v)
    })
}

/// Whether `value` truncated toward zero lies in `dtype`'s range.
fn fits_integer(value: f64, dtype: DType) -> bool {
    let (low, high) = with_dtype!(dtype, T, (T::lowest().to_f64(), T::highest().to_f64()));
    value.is_finite() && value.trunc() >= low && value.trunc() <= high
}

/// An array of `shape` filled with 0.
#[track_caller]
pub fn zeros(shape: &[i32], dtype: DType) -> Array {
    full(shape, 0.0, dtype)
}

/// An array of `shape` filled with 1.
#[track_caller]
pub fn ones(shape: &[i32], dtype: DType) -> Array {
    full(shape, 1.0, dtype)
}

/// `full` with `a`'s shape.
#[track_caller]
pub fn full_like(a: &Array, value: f64, dtype: DType) -> Array {
    if let Some(error) = a.known_error() {
        return Array::failed(error);
    }
    full(a.shape(), value, dtype)
}

/// Zeros with `a`'s shape and dtype.
#[track_caller]
pub fn zeros_like(a: &Array) -> Array {
    full_like(a, 0.0, a.dtype())
}

/// Ones with `a`'s shape and dtype.
#[track_caller]
pub fn ones_like(a: &Array) -> Array {
    full_like(a, 1.0, a.dtype())
}

/// Values from `start` up to (not including) `stop` by `step`, as MLX's `arange`.
///
/// ```
/// use nuvec_core::{ops::arange, DType};
/// assert_eq!(arange(0.0, 5.0, 2.0, DType::I32).to_vec::<i32>()?, [0, 2, 4]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn arange(start: f64, stop: f64, step: f64, dtype: DType) -> Array {
    if step == 0.0 || !step.is_finite() || !start.is_finite() || !stop.is_finite() {
        return Array::invalid(
            "arange",
            format!(
                "needs finite start/stop and a nonzero finite step, got {start}, {stop}, {step}"
            ),
        );
    }
    if dtype == DType::Bool {
        return Array::invalid("arange", "cannot make a range of bool");
    }
    let count = ((stop - start) / step).ceil().max(0.0);
    if count > i32::MAX as f64 {
        return Array::invalid(
            "arange",
            format!("{count} elements exceed the maximum array size"),
        );
    }
    // MLX computes each element as start + i * step in the output type's arithmetic.
    with_dtype!(dtype, T, {
        let (s, d) = (T::from_f64(start), T::from_f64(step));
        if dtype.is_float() {
            from_fn::<T>(&[count as i32], |i| T::from_f64(start + i as f64 * step))
        } else {
            from_fn::<T>(&[count as i32], |i| s.add(T::from_i128(i as i128).mul(d)))
        }
    })
}

/// `num` evenly spaced values from `start` to `stop` inclusive.
#[track_caller]
pub fn linspace(start: f64, stop: f64, num: i32, dtype: DType) -> Array {
    if num < 0 {
        return Array::invalid("linspace", format!("num must be >= 0, got {num}"));
    }
    // (1 - t) * start + t * stop with t = i / (num - 1) in float32, as MLX computes it.
    let t = crate::ops::divide(
        arange(0.0, f64::from(num), 1.0, DType::F32),
        f64::from((num - 1).max(1)),
    );
    let t_bar = crate::ops::subtract(1.0, &t);
    let spaced = crate::ops::add(
        crate::ops::multiply(&t_bar, start),
        crate::ops::multiply(&t, stop),
    );
    spaced.astype(dtype)
}

/// An `n x m` matrix with ones on diagonal `k` (0: main, >0: above, <0: below).
#[track_caller]
pub fn eye(n: i32, m: Option<i32>, k: i32, dtype: DType) -> Array {
    let m = m.unwrap_or(n);
    if n < 0 || m < 0 {
        return Array::invalid("eye", format!("dims must be >= 0, got {n} x {m}"));
    }
    with_dtype!(
        dtype,
        T,
        from_fn::<T>(&[n, m], |i| {
            let (row, col) = ((i / m as usize) as i64, (i % m as usize) as i64);
            if col - row == i64::from(k) {
                T::one()
            } else {
                T::zero()
            }
        })
    )
}

/// The `n x n` identity matrix.
#[track_caller]
pub fn identity(n: i32, dtype: DType) -> Array {
    eye(n, None, 0, dtype)
}

/// An `n x m` matrix of ones on and below diagonal `k`.
#[track_caller]
pub fn tri(n: i32, m: Option<i32>, k: i32, dtype: DType) -> Array {
    let m = m.unwrap_or(n);
    if n < 0 || m < 0 {
        return Array::invalid("tri", format!("dims must be >= 0, got {n} x {m}"));
    }
    with_dtype!(
        dtype,
        T,
        from_fn::<T>(&[n, m], |i| {
            let (row, col) = ((i / m as usize) as i64, (i % m as usize) as i64);
            if col - row <= i64::from(k) {
                T::one()
            } else {
                T::zero()
            }
        })
    )
}
