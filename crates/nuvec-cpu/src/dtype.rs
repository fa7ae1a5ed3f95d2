//! Element types with MLX's names and MLX's promotion table.

use std::fmt;

/// The type of an array's elements, named as MLX names them.
/// Not `#[non_exhaustive]`: kernels match on it exhaustively, so a new dtype must be handled
/// everywhere before it compiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// `bool`: one byte, 0 or 1.
    Bool,
    /// `uint8`.
    U8,
    /// `uint16`.
    U16,
    /// `uint32`.
    U32,
    /// `uint64`.
    U64,
    /// `int8`.
    I8,
    /// `int16`.
    I16,
    /// `int32`.
    I32,
    /// `int64`.
    I64,
    /// `float16` (IEEE half).
    F16,
    /// `bfloat16`.
    BF16,
    /// `float32`.
    F32,
    /// `float64`.
    F64,
}

/// The kind of a dtype, which decides promotion and which ops apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// `bool`.
    Bool,
    /// Unsigned integers.
    Unsigned,
    /// Signed integers.
    Signed,
    /// Floating point.
    Float,
}

impl DType {
    /// Every dtype, in MLX's order.
    pub const ALL: [DType; 13] = [
        DType::Bool,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    /// MLX's (and NumPy's) name: `"float32"`, `"bfloat16"`, `"bool"`.
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    /// The dtype called `name` by MLX, if any.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Whether this is a bool, unsigned, signed or float type.
    pub const fn category(self) -> Category {
        match self {
            DType::Bool => Category::Bool,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => Category::Unsigned,
            DType::I8 | DType::I16 | DType::I32 | DType::I64 => Category::Signed,
            DType::F16 | DType::BF16 | DType::F32 | DType::F64 => Category::Float,
        }
    }

    /// Whether the elements are floating point.
    pub const fn is_float(self) -> bool {
        matches!(self.category(), Category::Float)
    }

    /// Whether the elements are integers (signed or unsigned, not bool).
    pub const fn is_integer(self) -> bool {
        matches!(self.category(), Category::Signed | Category::Unsigned)
    }

    /// The type two operands are converted to before a binary op, as MLX's `promote_types`.
    ///
    /// ```
    /// use nuvec_cpu::DType;
    /// assert_eq!(DType::promote(DType::I32, DType::F16), DType::F16);
    /// assert_eq!(DType::promote(DType::U8, DType::I8), DType::I16);
    /// assert_eq!(DType::promote(DType::F16, DType::BF16), DType::F32);
    /// assert_eq!(DType::promote(DType::U64, DType::I64), DType::F32);
    /// ```
    pub const fn promote(a: DType, b: DType) -> DType {
        PROMOTION[a as usize][b as usize]
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod table {
    use super::DType;
    use super::DType::{
        Bool as B, BF16 as BF, F16 as H, F32 as F, F64 as D, I16, I32, I64, I8, U16, U32, U64, U8,
    };

    /// MLX's promotion table (rows and columns in [`DType::ALL`] order); note that mixing 64-bit
    /// signed and unsigned integers gives float32 and float16 with bfloat16 gives float32, as MLX.
    pub(super) const PROMOTION: [[DType; 13]; 13] = [
        //      b    u8   u16  u32  u64  i8   i16  i32  i64  f16 bf16  f32  f64
        /* b */
        [B, U8, U16, U32, U64, I8, I16, I32, I64, H, BF, F, D],
        /* u8 */ [U8, U8, U16, U32, U64, I16, I16, I32, I64, H, BF, F, D],
        /* u16 */ [U16, U16, U16, U32, U64, I32, I32, I32, I64, H, BF, F, D],
        /* u32 */ [U32, U32, U32, U32, U64, I64, I64, I64, I64, H, BF, F, D],
        /* u64 */ [U64, U64, U64, U64, U64, F, F, F, F, H, BF, F, D],
        /* i8 */ [I8, I16, I32, I64, F, I8, I16, I32, I64, H, BF, F, D],
        /* i16 */ [I16, I16, I32, I64, F, I16, I16, I32, I64, H, BF, F, D],
        /* i32 */ [I32, I32, I32, I64, F, I32, I32, I32, I64, H, BF, F, D],
        /* i64 */ [I64, I64, I64, I64, F, I64, I64, I64, I64, H, BF, F, D],
        /* f16 */ [H, H, H, H, H, H, H, H, H, H, F, F, D],
        /* bf16 */ [BF, BF, BF, BF, BF, BF, BF, BF, BF, F, BF, F, D],
        /* f32 */ [F, F, F, F, F, F, F, F, F, F, F, F, D],
        /* f64 */ [D, D, D, D, D, D, D, D, D, D, D, D, D],
    ];
}
use table::PROMOTION;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_is_symmetric() {
        for a in DType::ALL {
            for b in DType::ALL {
                assert_eq!(DType::promote(a, b), DType::promote(b, a), "{a} {b}");
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
    }
}
