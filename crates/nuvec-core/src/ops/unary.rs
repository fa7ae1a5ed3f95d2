//! Unary math ops and predicates.

use crate::primitives::astype::AsType;
use crate::primitives::unary::Unary;
use crate::{Array, DType};
use nuvec_cpu::unary::UnaryOp;
use std::sync::Arc;

/// Builds a unary op; integer and bool inputs become float32 for ops that need floats.
#[track_caller]
fn unary(op: UnaryOp, a: &Array) -> Array {
    if op == UnaryOp::Negative && a.dtype() == DType::Bool {
        return Array::invalid(
            "negative",
            "not supported for bool, use logical_not instead",
        );
    }
    let dtype = if a.dtype().is_float() || op.keeps_integers() {
        a.dtype()
    } else {
        DType::F32
    };
    if op.keeps_integers()
        && !a.dtype().is_float()
        && matches!(op, UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round)
    {
        return a.clone();
    }
    let input = a.astype(dtype);
    Array::build1(Arc::new(Unary(op)), vec![input], a.shape().to_vec(), dtype)
}

macro_rules! unary_ops {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(a: &Array) -> Array {
            unary(UnaryOp::$op, a)
        }
    )*};
}

unary_ops! {
    /// `|a|`, element-wise.
    abs => Abs;
    /// `-a`.
    negative => Negative;
    /// -1, 0 or 1 by the sign of each element.
    sign => Sign;
    /// `a * a`.
    square => Square;
    /// Square root (integers become float32).
    sqrt => Sqrt;
    /// `1 / sqrt(a)`.
    rsqrt => Rsqrt;
    /// `1 / a`.
    reciprocal => Reciprocal;
    /// `e^a`.
    ///
    /// ```
    /// use nuvec_core::{array, ops::exp};
    /// assert_eq!(exp(&array![0.0]).to_vec::<f32>()?, [1.0]);
    /// # Ok::<(), nuvec_core::Error>(())
    /// ```
    exp => Exp;
    /// `e^a - 1`, accurate for small `a`.
    expm1 => Expm1;
    /// Natural logarithm.
    log => Log;
    /// `log(1 + a)`, accurate for small `a`.
    log1p => Log1p;
    /// Base-2 logarithm.
    log2 => Log2;
    /// Base-10 logarithm.
    log10 => Log10;
    /// Sine.
    sin => Sin;
    /// Cosine.
    cos => Cos;
    /// Tangent.
    tan => Tan;
    /// Hyperbolic tangent.
    tanh => Tanh;
    /// Hyperbolic sine.
    sinh => Sinh;
    /// Hyperbolic cosine.
    cosh => Cosh;
    /// Inverse sine (NaN outside [-1, 1]).
    arcsin => ArcSin;
    /// Inverse cosine (NaN outside [-1, 1]).
    arccos => ArcCos;
    /// Inverse tangent.
    arctan => ArcTan;
    /// Inverse hyperbolic sine.
    arcsinh => ArcSinh;
    /// Inverse hyperbolic cosine (NaN below 1).
    arccosh => ArcCosh;
    /// Inverse hyperbolic tangent (NaN outside [-1, 1]).
    arctanh => ArcTanh;
    /// The logistic function `1 / (1 + e^-a)`.
    sigmoid => Sigmoid;
    /// The error function.
    erf => Erf;
    /// The inverse error function.
    erfinv => ErfInv;
    /// Rounds toward negative infinity (integers unchanged).
    floor => Floor;
    /// Rounds toward positive infinity (integers unchanged).
    ceil => Ceil;
}

/// Rounds to `decimals` decimal places, halves to even (MLX's `round`).
#[track_caller]
pub fn round(a: &Array, decimals: i32) -> Array {
    if decimals == 0 || !a.dtype().is_float() {
        return unary(UnaryOp::Round, a);
    }
    let scale = 10f64.powi(decimals);
    crate::ops::divide(
        unary(UnaryOp::Round, &crate::ops::multiply(a, scale)),
        scale,
    )
}

/// Converts to `dtype` as a C++ cast: floats truncate toward zero into integers, nonzero is true.
#[track_caller]
pub fn astype(a: &Array, dtype: DType) -> Array {
    if a.dtype() == dtype {
        return a.clone();
    }
    Array::build1(
        Arc::new(AsType(dtype)),
        vec![a.clone()],
        a.shape().to_vec(),
        dtype,
    )
}

/// The same values, cut off from gradients (evaluation is the identity).
#[track_caller]
pub fn stop_gradient(a: &Array) -> Array {
    Array::build1(
        Arc::new(crate::primitives::layout::StopGradient),
        vec![a.clone()],
        a.shape().to_vec(),
        a.dtype(),
    )
}

/// Whether each element is NaN.
#[track_caller]
pub fn isnan(a: &Array) -> Array {
    if !a.dtype().is_float() {
        return crate::ops::creation::full_like(a, 0.0, DType::Bool);
    }
    crate::ops::not_equal(a, a)
}

/// Whether each element is +inf or -inf.
#[track_caller]
pub fn isinf(a: &Array) -> Array {
    if !a.dtype().is_float() {
        return crate::ops::creation::full_like(a, 0.0, DType::Bool);
    }
    crate::ops::equal(abs(a), f64::INFINITY)
}

/// Whether each element is +inf.
#[track_caller]
pub fn isposinf(a: &Array) -> Array {
    crate::ops::logical_and(isinf(a), crate::ops::greater(a, 0))
}

/// Whether each element is -inf.
#[track_caller]
pub fn isneginf(a: &Array) -> Array {
    crate::ops::logical_and(isinf(a), crate::ops::less(a, 0))
}

/// Logical not: true where the element is zero.
#[track_caller]
pub fn logical_not(a: &Array) -> Array {
    crate::ops::equal(a.astype(DType::Bool), false)
}

impl Array {
    /// See [`astype`].
    #[track_caller]
    pub fn astype(&self, dtype: DType) -> Array {
        astype(self, dtype)
    }
}
