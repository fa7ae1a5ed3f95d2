//! The Rust types behind each [`DType`], and the arithmetic every kernel needs from them.

use crate::dtype::DType;
use half::{bf16, f16};

/// A value an array can hold. Integer arithmetic wraps (as C++ and MLX); float arithmetic on
/// `f16`/`bf16` is computed in `f32` and rounded once.
pub trait Element:
    Copy + Send + Sync + PartialOrd + PartialEq + Default + std::fmt::Debug + 'static
{
    /// The dtype of this type.
    const DTYPE: DType;
    /// The value 0.
    fn zero() -> Self;
    /// The value 1.
    fn one() -> Self;
    /// Converts to `f64` (exact for every type but 64-bit integers beyond 2^53).
    fn to_f64(self) -> f64;
    /// Converts from `f64` as a C++ cast would (truncating toward zero for integers).
    fn from_f64(v: f64) -> Self;
    /// Converts to `i128` (floats truncate toward zero), for exact integer casts.
    fn to_i128(self) -> i128;
    /// Converts from `i128`, wrapping to the type's width for integers.
    fn from_i128(v: i128) -> Self;
    /// `a + b`.
    fn add(self, b: Self) -> Self;
    /// `a - b`.
    fn sub(self, b: Self) -> Self;
    /// `a * b`.
    fn mul(self, b: Self) -> Self;
    /// `a / b` (integers: truncating, zero divisor gives 0 instead of a trap).
    fn div(self, b: Self) -> Self;
    /// Python's `a % b`: the sign of the divisor.
    fn rem(self, b: Self) -> Self;
    /// Python's `a // b`: rounds toward negative infinity.
    fn floor_div(self, b: Self) -> Self;
    /// The larger of the two; NaN wins.
    fn maximum(self, b: Self) -> Self;
    /// The smaller of the two; NaN wins.
    fn minimum(self, b: Self) -> Self;
    /// `-a` (wrapping for integers, identity for bool and unsigned wraps).
    fn neg(self) -> Self;
    /// `|a|`.
    fn abs(self) -> Self;
    /// -1, 0 or 1.
    fn sign(self) -> Self;
    /// `a` raised to `b` (integers by repeated squaring).
    fn pow(self, b: Self) -> Self;
    /// Whether the value is NaN (false for non-floats).
    fn is_nan(self) -> bool;
    /// Whether the value is nonzero.
    fn truthy(self) -> bool;
    /// The lowest value (negative infinity for floats), the identity of `max`.
    fn lowest() -> Self;
    /// The highest value (infinity for floats), the identity of `min`.
    fn highest() -> Self;
    /// Reads one value from `size_of::<Self>()` little-endian bytes.
    fn read_le(bytes: &[u8]) -> Self;
    /// Writes the value as little-endian bytes.
    fn write_le(self, out: &mut [u8]);
}

/// A floating-point element: transcendental functions, computed in `f32` or `f64`.
pub trait Float: Element {
    /// Converts to the type arithmetic is done in.
    fn to_f32(self) -> f32;
    /// Rounds from `f32`.
    fn from_f32(v: f32) -> Self;
}

macro_rules! int_element {
    ($t:ty, $dt:ident, signed = $signed:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$dt;
            fn zero() -> Self {
                0
            }
            fn one() -> Self {
                1
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                // As x86 converts in MLX's C++ casts: 8-, 16- and 32-bit types through a
                // 32-bit truncation and 64-bit signed through a 64-bit one, where NaN and values
                // out of range give the "integer indefinite" (the minimum), so -1.0 as uint8
                // is 255 and -inf as int32 is i32::MIN; uint32/uint64 through i64/u64.
                let size = std::mem::size_of::<$t>();
                if size <= 2 || ($signed && size == 4) {
                    let v = if v.is_nan() || !(-2_147_483_648.0..2_147_483_648.0).contains(&v) {
                        i32::MIN
                    } else {
                        v as i32
                    };
                    v as $t
                } else if $signed {
                    let limit = 9_223_372_036_854_775_808.0;
                    let v = if v.is_nan() || !(-limit..limit).contains(&v) {
                        i64::MIN
                    } else {
                        v as i64
                    };
                    v as $t
                } else if v < 0.0 {
                    v as i64 as $t
                } else {
                    v as u64 as $t
                }
            }
            fn to_i128(self) -> i128 {
                self as i128
            }
            fn from_i128(v: i128) -> Self {
                v as $t
            }
            fn add(self, b: Self) -> Self {
                self.wrapping_add(b)
            }
            fn sub(self, b: Self) -> Self {
                self.wrapping_sub(b)
            }
            fn mul(self, b: Self) -> Self {
                self.wrapping_mul(b)
            }
            fn div(self, b: Self) -> Self {
                if b == 0 {
                    0
                } else {
                    self.wrapping_div(b)
                }
            }
            fn rem(self, b: Self) -> Self {
                if b == 0 {
                    // As MLX on CPU: the remainder by zero is the dividend.
                    return self;
                }
                let r = self.wrapping_rem(b);
                #[allow(unused_comparisons)]
                if r != 0 && ((r < 0) != (b < 0)) {
                    r.wrapping_add(b)
                } else {
                    r
                }
            }
            fn floor_div(self, b: Self) -> Self {
                if b == 0 {
                    return 0;
                }
                let q = self.wrapping_div(b);
                let r = self.wrapping_rem(b);
                #[allow(unused_comparisons)]
                if r != 0 && ((r < 0) != (b < 0)) {
                    q.wrapping_sub(1)
                } else {
                    q
                }
            }
            fn maximum(self, b: Self) -> Self {
                if self > b {
                    self
                } else {
                    b
                }
            }
            fn minimum(self, b: Self) -> Self {
                if self < b {
                    self
                } else {
                    b
                }
            }
            fn neg(self) -> Self {
                (0 as $t).wrapping_sub(self)
            }
            #[allow(unused_comparisons)]
            fn abs(self) -> Self {
                if self < 0 {
                    self.neg()
                } else {
                    self
                }
            }
            #[allow(unused_comparisons)]
            fn sign(self) -> Self {
                if self > 0 {
                    1
                } else if self < 0 {
                    (0 as $t).wrapping_sub(1)
                } else {
                    0
                }
            }
            #[allow(unused_comparisons)]
            fn pow(self, b: Self) -> Self {
                if b < 0 {
                    return 0;
                }
                let mut base = self;
                let mut exp = b;
                let mut acc: $t = 1;
                while exp != 0 {
                    if exp & 1 == 1 {
                        acc = acc.wrapping_mul(base);
                    }
                    base = base.wrapping_mul(base);
                    exp >>= 1;
                }
                acc
            }
            fn is_nan(self) -> bool {
                false
            }
            fn truthy(self) -> bool {
                self != 0
            }
            fn lowest() -> Self {
                <$t>::MIN
            }
            fn highest() -> Self {
                <$t>::MAX
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut raw = [0u8; size_of::<$t>()];
                raw.copy_from_slice(&bytes[..size_of::<$t>()]);
                <$t>::from_le_bytes(raw)
            }
            fn write_le(self, out: &mut [u8]) {
                out[..size_of::<$t>()].copy_from_slice(&self.to_le_bytes());
            }
        }
    };
}

int_element!(u8, U8, signed = false);
int_element!(u16, U16, signed = false);
int_element!(u32, U32, signed = false);
int_element!(u64, U64, signed = false);
int_element!(i8, I8, signed = true);
int_element!(i16, I16, signed = true);
int_element!(i32, I32, signed = true);
int_element!(i64, I64, signed = true);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn zero() -> Self {
        false
    }
    fn one() -> Self {
        true
    }
    fn to_f64(self) -> f64 {
        f64::from(u8::from(self))
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    fn to_i128(self) -> i128 {
        i128::from(self)
    }
    fn from_i128(v: i128) -> Self {
        v != 0
    }
    fn add(self, b: Self) -> Self {
        self | b
    }
    fn sub(self, b: Self) -> Self {
        self ^ b
    }
    fn mul(self, b: Self) -> Self {
        self & b
    }
    fn div(self, b: Self) -> Self {
        self & b
    }
    fn rem(self, b: Self) -> Self {
        // `a % true` is 0; by false (zero) the dividend, as for the other integers.
        self && !b
    }
    fn floor_div(self, b: Self) -> Self {
        self & b
    }
    fn maximum(self, b: Self) -> Self {
        self | b
    }
    fn minimum(self, b: Self) -> Self {
        self & b
    }
    fn neg(self) -> Self {
        self
    }
    fn abs(self) -> Self {
        self
    }
    fn sign(self) -> Self {
        self
    }
    fn pow(self, b: Self) -> Self {
        self | !b
    }
    fn is_nan(self) -> bool {
        false
    }
    fn truthy(self) -> bool {
        self
    }
    fn lowest() -> Self {
        false
    }
    fn highest() -> Self {
        true
    }
    fn read_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
    fn write_le(self, out: &mut [u8]) {
        out[0] = u8::from(self);
    }
}

macro_rules! float_element {
    ($t:ty, $dt:ident, $wide:ty, $to:expr, $from:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$dt;
            fn zero() -> Self {
                $from(0.0)
            }
            fn one() -> Self {
                $from(1.0)
            }
            fn to_f64(self) -> f64 {
                f64::from($to(self))
            }
            fn from_f64(v: f64) -> Self {
                $from(v as $wide)
            }
            fn to_i128(self) -> i128 {
                $to(self) as i128
            }
            fn from_i128(v: i128) -> Self {
                $from(v as $wide)
            }
            fn add(self, b: Self) -> Self {
                $from($to(self) + $to(b))
            }
            fn sub(self, b: Self) -> Self {
                $from($to(self) - $to(b))
            }
            fn mul(self, b: Self) -> Self {
                $from($to(self) * $to(b))
            }
            fn div(self, b: Self) -> Self {
                $from($to(self) / $to(b))
            }
            fn rem(self, b: Self) -> Self {
                let (x, y) = ($to(self), $to(b));
                let r = x % y;
                $from(if r != 0.0 && ((r < 0.0) != (y < 0.0)) {
                    r + y
                } else {
                    r
                })
            }
            fn floor_div(self, b: Self) -> Self {
                // MLX's floor(divide(a, b)): the quotient is rounded to the dtype first, which
                // for float16 and bfloat16 can carry it onto the next integer (80.98 → 81).
                let quotient = $from($to(self) / $to(b));
                $from($to(quotient).floor())
            }
            fn maximum(self, b: Self) -> Self {
                if self.is_nan() || self > b {
                    self
                } else {
                    b
                }
            }
            fn minimum(self, b: Self) -> Self {
                if self.is_nan() || self < b {
                    self
                } else {
                    b
                }
            }
            fn neg(self) -> Self {
                $from(-$to(self))
            }
            fn abs(self) -> Self {
                $from($to(self).abs())
            }
            fn sign(self) -> Self {
                let x = $to(self);
                $from(if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    // +0 for ±0 and NaN, as MLX (so 1 / sign(-0) is +inf there too).
                    0.0
                })
            }
            fn pow(self, b: Self) -> Self {
                $from($to(self).powf($to(b)))
            }
            fn is_nan(self) -> bool {
                $to(self).is_nan()
            }
            fn truthy(self) -> bool {
                $to(self) != 0.0
            }
            fn lowest() -> Self {
                $from(<$wide>::NEG_INFINITY)
            }
            fn highest() -> Self {
                $from(<$wide>::INFINITY)
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut raw = [0u8; size_of::<$t>()];
                raw.copy_from_slice(&bytes[..size_of::<$t>()]);
                <$t>::from_le_bytes(raw)
            }
            fn write_le(self, out: &mut [u8]) {
                out[..size_of::<$t>()].copy_from_slice(&self.to_le_bytes());
            }
        }
    };
}

fn id32(v: f32) -> f32 {
    v
}
fn id64(v: f64) -> f64 {
    v
}
float_element!(f32, F32, f32, id32, id32);
float_element!(f64, F64, f64, id64, id64);
float_element!(f16, F16, f32, f16::to_f32, f16::from_f32);
float_element!(bf16, BF16, f32, bf16::to_f32, bf16::from_f32);

impl Float for f32 {
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v
    }
}
impl Float for f64 {
    fn to_f32(self) -> f32 {
        self as f32
    }
    fn from_f32(v: f32) -> Self {
        f64::from(v)
    }
}
impl Float for f16 {
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}
impl Float for bf16 {
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

/// Runs `$body` with `$T` bound to the Rust type of the dtype `$dt`.
///
/// ```
/// use nuvec_cpu::{with_dtype, DType};
/// let size = with_dtype!(DType::BF16, T, std::mem::size_of::<T>());
/// assert_eq!(size, 2);
/// ```
#[macro_export]
macro_rules! with_dtype {
    ($dt:expr, $T:ident, $body:expr) => {
        match $dt {
            $crate::DType::Bool => {
                type $T = bool;
                $body
            }
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::DType::U16 => {
                type $T = u16;
                $body
            }
            $crate::DType::U32 => {
                type $T = u32;
                $body
            }
            $crate::DType::U64 => {
                type $T = u64;
                $body
            }
            $crate::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::DType::I16 => {
                type $T = i16;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::bf16;
                $body
            }
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
        }
    };
}

/// Runs `$body` with `$T` bound to the float type of `$dt`; `$other` for non-float dtypes.
#[macro_export]
macro_rules! with_float_dtype {
    ($dt:expr, $T:ident, $body:expr, $other:expr) => {
        match $dt {
            $crate::DType::F16 => {
                type $T = $crate::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::bf16;
                $body
            }
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            _ => $other,
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_remainder_takes_the_sign_of_the_divisor() {
        assert_eq!((-7i32).rem(3), 2);
        assert_eq!(7i32.rem(-3), -2);
        assert_eq!((-7i32).floor_div(2), -4);
        assert_eq!(7u8.floor_div(2), 3);
    }

    #[test]
    fn float_maximum_propagates_nan() {
        assert!(Element::maximum(f32::NAN, 1.0).is_nan());
        assert!(Element::maximum(1.0f32, f32::NAN).is_nan());
        assert!(Element::minimum(1.0f32, f32::NAN).is_nan());
    }

    #[test]
    fn negative_float_to_unsigned_wraps_like_cpp() {
        assert_eq!(u8::from_f64(-1.0), 255);
        assert_eq!(i32::from_f64(-2.7), -2);
    }
}
