//! The `array!` macro: nested literals up to 4-D, typed as MLX types Python literals.

use crate::Array;
use nuvec_cpu::Element;

/// A literal the `array!` macro accepts: float literals become `f32`, integers `i32`, bools
/// `bool` (as MLX does with Python literals).
pub trait Literal: Copy {
    /// The element type the literal is stored as.
    type Elem: Element;
    /// Converts the literal.
    fn lit(self) -> Self::Elem;
}

impl Literal for f64 {
    type Elem = f32;
    fn lit(self) -> f32 {
        self as f32
    }
}
impl Literal for f32 {
    type Elem = f32;
    fn lit(self) -> f32 {
        self
    }
}
impl Literal for i32 {
    type Elem = i32;
    fn lit(self) -> i32 {
        self
    }
}
impl Literal for bool {
    type Elem = bool;
    fn lit(self) -> bool {
        self
    }
}

/// Flattens nested rows, checking that they are not ragged.
#[doc(hidden)]
#[track_caller]
pub fn from_nested<T: Element>(rows: Vec<Vec<T>>, outer: &[i32]) -> Array {
    let width = rows.first().map_or(0, Vec::len);
    if rows.iter().any(|r| r.len() != width) {
        return Array::invalid(
            "array",
            "nested lists must be rectangular (rows of one length)",
        );
    }
    let mut shape = outer.to_vec();
    shape.push(width as i32);
    let flat: Vec<T> = rows.into_iter().flatten().collect();
    Array::from_vec(flat, &shape)
}

/// Builds an [`Array`] from nested literals, up to 4-D.
///
/// ```
/// use nuvec_core::{array, DType};
/// let a = array![[1.0, 2.0], [3.0, 4.0]];
/// assert_eq!(a.shape(), [2, 2]);
/// assert_eq!(a.dtype(), DType::F32);
/// assert_eq!(array![1, 2, 3].dtype(), DType::I32);
/// assert_eq!(array![[[true]]].shape(), [1, 1, 1]);
/// ```
#[macro_export]
macro_rules! array {
    ($([$([$([$($x:expr),* $(,)?]),* $(,)?]),* $(,)?]),+ $(,)?) => {{
        let blocks = vec![$(vec![$(vec![$(vec![$($crate::literal::Literal::lit($x)),*]),*]),*]),+];
        let (d0, d1, d2) = (blocks.len() as i32, blocks[0].len() as i32, blocks[0].first().map_or(0, |b| b.len()) as i32);
        let ragged = blocks.iter().any(|b| b.len() as i32 != d1 || b.iter().any(|c| c.len() as i32 != d2));
        let rows: Vec<_> = blocks.into_iter().flatten().flatten().collect();
        if ragged {
            $crate::literal::from_nested(vec![vec![0i32], vec![]], &[])
        } else {
            $crate::literal::from_nested(rows, &[d0, d1, d2])
        }
    }};
    ($([$([$($x:expr),* $(,)?]),* $(,)?]),+ $(,)?) => {{
        let blocks = vec![$(vec![$(vec![$($crate::literal::Literal::lit($x)),*]),*]),+];
        let (d0, d1) = (blocks.len() as i32, blocks[0].len() as i32);
        let ragged = blocks.iter().any(|b| b.len() as i32 != d1);
        let rows: Vec<_> = blocks.into_iter().flatten().collect();
        if ragged {
            $crate::literal::from_nested(vec![vec![0i32], vec![]], &[])
        } else {
            $crate::literal::from_nested(rows, &[d0, d1])
        }
    }};
    ($([$($x:expr),* $(,)?]),+ $(,)?) => {{
        let rows = vec![$(vec![$($crate::literal::Literal::lit($x)),*]),+];
        let d0 = rows.len() as i32;
        $crate::literal::from_nested(rows, &[d0])
    }};
    ($($x:expr),+ $(,)?) => {
        $crate::Array::from_vec(vec![$($crate::literal::Literal::lit($x)),+], &[[$(stringify!($x)),+].len() as i32])
    };
}
