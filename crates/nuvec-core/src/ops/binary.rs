//! Binary arithmetic, comparisons, logic and `where`, with MLX's promotion and NumPy
//! broadcasting. Arguments are arrays or Rust scalars ([`IntoOperand`]).

use super::broadcast_shapes;
use super::operand::{promote_pair, IntoOperand, Operand};
use crate::primitives::binary::Binary;
use crate::primitives::select::Select;
use crate::{Array, DType};
use nuvec_cpu::binary::BinaryOp;
use std::sync::Arc;

/// The shape of an operand (scalars are 0-d).
fn shape_of(operand: &Operand) -> Vec<i32> {
    match operand {
        Operand::Array(a) => a.shape().to_vec(),
        _ => Vec::new(),
    }
}

#[track_caller]
fn binary(op: BinaryOp, a: Operand, b: Operand) -> Array {
    for operand in [&a, &b] {
        if let Operand::Array(array) = operand {
            if let Some(error) = array.known_error() {
                return Array::failed(error);
            }
        }
    }
    let shape = match broadcast_shapes(&shape_of(&a), &shape_of(&b)) {
        Ok(shape) => shape,
        Err(reason) => return Array::invalid(op.name(), reason),
    };
    let mut dtype = promote_pair(&a, &b);
    // True division and the transcendental ops give floats for integer inputs, as MLX.
    if matches!(
        op,
        BinaryOp::Divide | BinaryOp::LogAddExp | BinaryOp::ArcTan2
    ) && !dtype.is_float()
    {
        dtype = DType::F32;
    }
    let out_dtype = if op.is_predicate() {
        DType::Bool
    } else {
        dtype
    };
    let inputs = vec![a.to_array(dtype), b.to_array(dtype)];
    Array::build1(Arc::new(Binary(op)), inputs, shape, out_dtype)
}

macro_rules! binary_ops {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(a: impl IntoOperand, b: impl IntoOperand) -> Array {
            binary(BinaryOp::$op, a.into_operand(), b.into_operand())
        }
    )*};
}

binary_ops! {
    /// `a + b`, element-wise with broadcasting.
    ///
    /// ```
    /// use nuvec_core::{array, ops::add};
    /// let sum = add(&array![[1, 2], [3, 4]], &array![10, 20]);
    /// assert_eq!(sum.to_vec::<i32>()?, [11, 22, 13, 24]);
    /// # Ok::<(), nuvec_core::Error>(())
    /// ```
    add => Add;
    /// `a - b`.
    subtract => Subtract;
    /// `a * b`.
    multiply => Multiply;
    /// `a / b`; integers divide as floats (float32), as MLX.
    divide => Divide;
    /// `a ** b`.
    power => Power;
    /// Python's `a % b` (the result has the divisor's sign).
    remainder => Remainder;
    /// Python's `a // b` (rounds toward negative infinity).
    floor_divide => FloorDivide;
    /// The larger of `a` and `b`; NaN propagates.
    maximum => Maximum;
    /// The smaller of `a` and `b`; NaN propagates.
    minimum => Minimum;
    /// `log(e^a + e^b)`, computed stably.
    logaddexp => LogAddExp;
    /// `atan2(a, b)`.
    arctan2 => ArcTan2;
    /// `a == b` (bool).
    equal => Equal;
    /// `a != b` (bool).
    not_equal => NotEqual;
    /// `a < b` (bool).
    less => Less;
    /// `a <= b` (bool).
    less_equal => LessEqual;
    /// `a > b` (bool).
    greater => Greater;
    /// `a >= b` (bool).
    greater_equal => GreaterEqual;
    /// Both nonzero (bool).
    logical_and => LogicalAnd;
    /// Either nonzero (bool).
    logical_or => LogicalOr;
}

/// `x` where `condition` is true, else `y`, with broadcasting of all three.
///
/// ```
/// use nuvec_core::{array, ops::where_};
/// let picked = where_(&array![true, false], &array![1, 2], 0);
/// assert_eq!(picked.to_vec::<i32>()?, [1, 0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn where_(condition: impl IntoOperand, x: impl IntoOperand, y: impl IntoOperand) -> Array {
    let (c, x, y) = (condition.into_operand(), x.into_operand(), y.into_operand());
    for operand in [&c, &x, &y] {
        if let Operand::Array(array) = operand {
            if let Some(error) = array.known_error() {
                return Array::failed(error);
            }
        }
    }
    let shape = match broadcast_shapes(&shape_of(&c), &shape_of(&x))
        .and_then(|s| broadcast_shapes(&s, &shape_of(&y)))
    {
        Ok(shape) => shape,
        Err(reason) => return Array::invalid("where", reason),
    };
    let dtype = promote_pair(&x, &y);
    let inputs = vec![
        c.to_array(DType::Bool),
        x.to_array(dtype),
        y.to_array(dtype),
    ];
    Array::build1(Arc::new(Select), inputs, shape, dtype)
}

/// Limits values to `[a_min, a_max]`; either bound may be `None`.
#[track_caller]
pub fn clip(a: &Array, a_min: Option<f64>, a_max: Option<f64>) -> Array {
    if a_min.is_none() && a_max.is_none() {
        return Array::invalid("clip", "at least one of a_min and a_max must be given");
    }
    // Integral bounds on integer arrays keep the array's dtype (MLX with Python ints); one
    // bound with a fraction makes both floats.
    let integral = [a_min, a_max]
        .iter()
        .flatten()
        .all(|v| v.fract() == 0.0 && v.abs() < 9.0e15);
    let bound = |v: f64| {
        if !a.dtype().is_float() && integral {
            Operand::Int(v as i64)
        } else {
            Operand::Float(v)
        }
    };
    let mut out = a.clone();
    if let Some(low) = a_min {
        out = binary(BinaryOp::Maximum, Operand::Array(out), bound(low));
    }
    if let Some(high) = a_max {
        out = binary(BinaryOp::Minimum, Operand::Array(out), bound(high));
    }
    out
}

/// [`clip`] with array bounds.
#[track_caller]
pub fn clip_arrays(a: &Array, a_min: &Array, a_max: &Array) -> Array {
    minimum(maximum(a, a_min), a_max)
}
