//! Arguments of binary ops: arrays or Rust scalars. Scalars are "weak" as in MLX: they take
//! the array's type when they can (`f16_array * 2.0` stays f16, `u8_array + 3` stays u8).

use crate::{Array, DType};

/// A binary op's argument before promotion.
#[derive(Debug, Clone)]
pub enum Operand {
    /// An array, whose dtype takes part in promotion.
    Array(Array),
    /// A Rust float: float32 next to non-float arrays.
    Float(f64),
    /// A Rust integer: the array's type next to numeric arrays, int32 next to bool.
    Int(i64),
    /// A Rust bool.
    Bool(bool),
}

/// Anything an op accepts as an argument: `&Array`, `Array`, or a Rust scalar.
pub trait IntoOperand {
    /// Converts to an [`Operand`].
    fn into_operand(self) -> Operand;
}

impl IntoOperand for Array {
    fn into_operand(self) -> Operand {
        Operand::Array(self)
    }
}
impl IntoOperand for &Array {
    fn into_operand(self) -> Operand {
        Operand::Array(self.clone())
    }
}
impl IntoOperand for &&Array {
    fn into_operand(self) -> Operand {
        Operand::Array((*self).clone())
    }
}
impl IntoOperand for f32 {
    fn into_operand(self) -> Operand {
        Operand::Float(f64::from(self))
    }
}
impl IntoOperand for f64 {
    fn into_operand(self) -> Operand {
        Operand::Float(self)
    }
}
impl IntoOperand for i32 {
    fn into_operand(self) -> Operand {
        Operand::Int(i64::from(self))
    }
}
impl IntoOperand for i64 {
    fn into_operand(self) -> Operand {
        Operand::Int(self)
    }
}
impl IntoOperand for bool {
    fn into_operand(self) -> Operand {
        Operand::Bool(self)
    }
}

impl Operand {
    fn dtype(&self) -> Option<DType> {
        match self {
            Operand::Array(a) => Some(a.dtype()),
            _ => None,
        }
    }

    /// The dtype this operand takes next to an array of `other` dtype.
    fn weak_dtype(&self, other: Option<DType>) -> DType {
        match (self, other) {
            (Operand::Array(a), _) => a.dtype(),
            (Operand::Float(_), Some(d)) if d.is_float() => d,
            (Operand::Float(_), _) => DType::F32,
            (Operand::Int(_), Some(DType::Bool) | None) => DType::I32,
            (Operand::Int(_), Some(d)) => d,
            (Operand::Bool(_), Some(d)) => d,
            (Operand::Bool(_), None) => DType::Bool,
        }
    }

    /// Materialises the operand as an array of `dtype`.
    #[track_caller]
    pub(crate) fn to_array(&self, dtype: DType) -> Array {
        match self {
            Operand::Array(a) => a.astype(dtype),
            Operand::Float(v) => crate::ops::creation::scalar_of(*v, dtype),
            Operand::Int(v) => {
                let fits = match dtype {
                    DType::U8 => u8::try_from(*v).is_ok(),
                    DType::U16 => u16::try_from(*v).is_ok(),
                    DType::U32 => u32::try_from(*v).is_ok(),
                    DType::U64 => *v >= 0,
                    DType::I8 => i8::try_from(*v).is_ok(),
                    DType::I16 => i16::try_from(*v).is_ok(),
                    DType::I32 => i32::try_from(*v).is_ok(),
                    _ => true,
                };
                if fits {
                    crate::ops::creation::scalar_of_int(*v, dtype)
                } else {
                    Array::invalid("array", format!("converting {v} to {dtype} would overflow"))
                }
            }
            Operand::Bool(v) => crate::ops::creation::scalar_of(f64::from(u8::from(*v)), dtype),
        }
    }
}

/// The common dtype of two operands, MLX's way (weak scalars adapt to the array).
pub(crate) fn promote_pair(a: &Operand, b: &Operand) -> DType {
    match (a.dtype(), b.dtype()) {
        (Some(x), Some(y)) => DType::promote(x, y),
        (Some(x), None) => DType::promote(x, b.weak_dtype(Some(x))),
        (None, Some(y)) => DType::promote(a.weak_dtype(Some(y)), y),
        (None, None) => DType::promote(a.weak_dtype(None), b.weak_dtype(None)),
    }
}
