//! `+ - * /` and unary `-` for arrays (owned or borrowed) and Rust scalars.

use crate::Array;
use std::ops::{Add, Div, Mul, Neg, Sub};

macro_rules! operator {
    ($trait:ident, $method:ident, $op:path) => {
        impl<R: crate::ops::IntoOperand> $trait<R> for Array {
            type Output = Array;
            #[track_caller]
            fn $method(self, rhs: R) -> Array {
                $op(&self, rhs)
            }
        }
        impl<R: crate::ops::IntoOperand> $trait<R> for &Array {
            type Output = Array;
            #[track_caller]
            fn $method(self, rhs: R) -> Array {
                $op(self, rhs)
            }
        }
        operator!(@scalar $trait, $method, $op, f32, f64, i32, i64);
    };
    (@scalar $trait:ident, $method:ident, $op:path, $($t:ty),*) => {$(
        impl $trait<Array> for $t {
            type Output = Array;
            #[track_caller]
            fn $method(self, rhs: Array) -> Array {
                $op(self, &rhs)
            }
        }
        impl $trait<&Array> for $t {
            type Output = Array;
            #[track_caller]
            fn $method(self, rhs: &Array) -> Array {
                $op(self, rhs)
            }
        }
    )*};
}

operator!(Add, add, crate::ops::add);
operator!(Sub, sub, crate::ops::subtract);
operator!(Mul, mul, crate::ops::multiply);
operator!(Div, div, crate::ops::divide);

impl Neg for Array {
    type Output = Array;
    #[track_caller]
    fn neg(self) -> Array {
        crate::ops::negative(&self)
    }
}

impl Neg for &Array {
    type Output = Array;
    #[track_caller]
    fn neg(self) -> Array {
        crate::ops::negative(self)
    }
}
