//! Element-wise functions of two arguments, with NumPy broadcasting given as strides.

use crate::strided::{collapse, RowOffsets};
use crate::{parallel, DType, Element};

/// A binary element-wise function, as MLX names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
/// Exhaustive on purpose: every rule that matches on it must handle a new variant.
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Subtract,
    /// `a * b`.
    Multiply,
    /// `a / b`.
    Divide,
    /// `a ** b`.
    Power,
    /// Python's `a % b`.
    Remainder,
    /// Python's `a // b`.
    FloorDivide,
    /// The larger (NaN wins).
    Maximum,
    /// The smaller (NaN wins).
    Minimum,
    /// `log(e^a + e^b)`, stable.
    LogAddExp,
    /// `atan2(a, b)`.
    ArcTan2,
    /// `a == b` (bool result).
    Equal,
    /// `a != b`.
    NotEqual,
    /// `a < b`.
    Less,
    /// `a <= b`.
    LessEqual,
    /// `a > b`.
    Greater,
    /// `a >= b`.
    GreaterEqual,
    /// Both nonzero.
    LogicalAnd,
    /// Either nonzero.
    LogicalOr,
}

impl BinaryOp {
    /// MLX's name of the op.
    pub const fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Subtract => "subtract",
            BinaryOp::Multiply => "multiply",
            BinaryOp::Divide => "divide",
            BinaryOp::Power => "power",
            BinaryOp::Remainder => "remainder",
            BinaryOp::FloorDivide => "floor_divide",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::LogAddExp => "logaddexp",
            BinaryOp::ArcTan2 => "arctan2",
            BinaryOp::Equal => "equal",
            BinaryOp::NotEqual => "not_equal",
            BinaryOp::Less => "less",
            BinaryOp::LessEqual => "less_equal",
            BinaryOp::Greater => "greater",
            BinaryOp::GreaterEqual => "greater_equal",
            BinaryOp::LogicalAnd => "logical_and",
            BinaryOp::LogicalOr => "logical_or",
        }
    }

    /// Whether the result is bool whatever the operands.
    pub const fn is_predicate(self) -> bool {
        matches!(
            self,
            BinaryOp::Equal
                | BinaryOp::NotEqual
                | BinaryOp::Less
                | BinaryOp::LessEqual
                | BinaryOp::Greater
                | BinaryOp::GreaterEqual
                | BinaryOp::LogicalAnd
                | BinaryOp::LogicalOr
        )
    }

    /// Applies an arithmetic op to one pair.
    #[inline(always)]
    pub fn apply<T: Element>(self, a: T, b: T) -> T {
        match self {
            BinaryOp::Add => a.add(b),
            BinaryOp::Subtract => a.sub(b),
            BinaryOp::Multiply => a.mul(b),
            BinaryOp::Divide => a.div(b),
            BinaryOp::Power => a.pow(b),
            BinaryOp::Remainder => a.rem(b),
            BinaryOp::FloorDivide => a.floor_div(b),
            BinaryOp::Maximum => a.maximum(b),
            BinaryOp::Minimum => a.minimum(b),
            BinaryOp::LogAddExp => {
                let (x, y) = (a.to_f64(), b.to_f64());
                if x.is_nan() || y.is_nan() {
                    return T::from_f64(f64::NAN);
                }
                let hi = x.max(y);
                if hi.is_infinite() {
                    return T::from_f64(hi);
                }
                if matches!(T::DTYPE, DType::F16 | DType::BF16) {
                    // As MLX: max + log1p(exp(min − max)), each step rounded to the type.
                    let round = |v: f64| T::from_f64(v).to_f64();
                    let gap = round(x.min(y) - hi);
                    return T::from_f64(hi + round(round(gap.exp()).ln_1p()));
                }
                T::from_f64(hi + (-(x - y).abs()).exp().ln_1p())
            }
            BinaryOp::ArcTan2 => T::from_f64(a.to_f64().atan2(b.to_f64())),
            _ => T::from_f64(f64::from(u8::from(self.test(a, b)))),
        }
    }

    /// Applies a predicate op to one pair.
    #[inline(always)]
    pub fn test<T: Element>(self, a: T, b: T) -> bool {
        match self {
            BinaryOp::Equal => a == b,
            BinaryOp::NotEqual => a != b,
            BinaryOp::Less => a < b,
            BinaryOp::LessEqual => a <= b,
            BinaryOp::Greater => a > b,
            BinaryOp::GreaterEqual => a >= b,
            BinaryOp::LogicalAnd => a.truthy() && b.truthy(),
            BinaryOp::LogicalOr => a.truthy() || b.truthy(),
            _ => self.apply(a, b).truthy(),
        }
    }
}

/// One operand of a broadcast loop: its elements and element strides over the output shape
/// (0 on broadcast axes), starting at element `offset`.
#[derive(Debug, Clone, Copy)]
pub struct Operand<'a, T> {
    /// The operand's elements.
    pub data: &'a [T],
    /// Element strides over the output's shape.
    pub strides: &'a [isize],
    /// Offset of the first element.
    pub offset: isize,
}

/// `out[i] = f(a[i], b[i])` over `shape`, with fast paths for contiguous operands and scalars.
pub fn broadcast2<T: Copy + Sync, U: Copy + Send>(
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    shape: &[usize],
    out: &mut [U],
    f: impl Fn(T, T) -> U + Sync,
) {
    if out.is_empty() {
        return;
    }
    let (shape, strides) = collapse(shape, &[a.strides, b.strides]);
    let (sa, sb) = (&strides[0], &strides[1]);
    let n = shape.len();
    let inner = shape[n - 1];
    let (ia, ib) = (sa[n - 1], sb[n - 1]);
    let body = |start: usize, part: &mut [U]| {
        let mut rows_a = RowOffsets::new(&shape[..n - 1], &sa[..n - 1], a.offset, start / inner);
        let mut rows_b = RowOffsets::new(&shape[..n - 1], &sb[..n - 1], b.offset, start / inner);
        for row in part.chunks_mut(inner) {
            let (oa, ob) = (
                rows_a.next().unwrap_or(0) as usize,
                rows_b.next().unwrap_or(0) as usize,
            );
            match (ia, ib) {
                (1, 1) => {
                    for ((o, x), y) in row
                        .iter_mut()
                        .zip(&a.data[oa..oa + inner])
                        .zip(&b.data[ob..ob + inner])
                    {
                        *o = f(*x, *y);
                    }
                }
                (0, 1) => {
                    let x = a.data[oa];
                    for (o, y) in row.iter_mut().zip(&b.data[ob..ob + inner]) {
                        *o = f(x, *y);
                    }
                }
                (1, 0) => {
                    let y = b.data[ob];
                    for (o, x) in row.iter_mut().zip(&a.data[oa..oa + inner]) {
                        *o = f(*x, y);
                    }
                }
                _ => {
                    for (i, o) in row.iter_mut().enumerate() {
                        let x = a.data[(oa as isize + i as isize * ia) as usize];
                        let y = b.data[(ob as isize + i as isize * ib) as usize];
                        *o = f(x, y);
                    }
                }
            }
        }
    };
    if out.len() >= parallel::MIN_PARALLEL_ELEMENTS && inner > 0 {
        use rayon::prelude::*;
        let rows_per_chunk = (out.len() / inner)
            .div_ceil(rayon::current_num_threads() * 4)
            .max(1);
        let chunk = rows_per_chunk * inner;
        out.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(k, part)| body(k * chunk, part));
    } else {
        body(0, out);
    }
}

/// `out[i] = f(c[i], a[i], b[i])` over `shape`: the loop behind `where`.
pub fn broadcast3<C: Copy + Sync, T: Copy + Sync + Send>(
    c: Operand<'_, C>,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    shape: &[usize],
    out: &mut [T],
    f: impl Fn(C, T, T) -> T + Sync,
) {
    if out.is_empty() {
        return;
    }
    let (shape, strides) = collapse(shape, &[c.strides, a.strides, b.strides]);
    let n = shape.len();
    let inner = shape[n - 1];
    let outer = &shape[..n - 1];
    let rows_c = RowOffsets::new(outer, &strides[0][..n - 1], c.offset, 0);
    let rows_a = RowOffsets::new(outer, &strides[1][..n - 1], a.offset, 0);
    let rows_b = RowOffsets::new(outer, &strides[2][..n - 1], b.offset, 0);
    let (ic, ia, ib) = (strides[0][n - 1], strides[1][n - 1], strides[2][n - 1]);
    for (((row, oc), oa), ob) in out.chunks_mut(inner).zip(rows_c).zip(rows_a).zip(rows_b) {
        for (i, o) in row.iter_mut().enumerate() {
            let i = i as isize;
            *o = f(
                c.data[(oc + i * ic) as usize],
                a.data[(oa + i * ia) as usize],
                b.data[(ob + i * ib) as usize],
            );
        }
    }
}

/// `out[i] = f(out[i], b[i])` over `shape`: a binary op computed in place in its first
/// operand's buffer (donation), with `b` broadcast by strides.
pub fn broadcast_assign<T: Copy + Sync + Send>(
    out: &mut [T],
    b: Operand<'_, T>,
    shape: &[usize],
    f: impl Fn(T, T) -> T + Sync,
) {
    if out.is_empty() {
        return;
    }
    let own = crate::strided::contiguous_strides(shape);
    let (shape, strides) = collapse(shape, &[&own, b.strides]);
    let sb = &strides[1];
    let n = shape.len();
    let inner = shape[n - 1];
    let ib = sb[n - 1];
    let body = |start: usize, part: &mut [T]| {
        let mut rows_b = RowOffsets::new(&shape[..n - 1], &sb[..n - 1], b.offset, start / inner);
        for row in part.chunks_mut(inner) {
            let ob = rows_b.next().unwrap_or(0);
            if ib == 1 {
                let ob = ob as usize;
                for (o, y) in row.iter_mut().zip(&b.data[ob..ob + inner]) {
                    *o = f(*o, *y);
                }
            } else {
                for (i, o) in row.iter_mut().enumerate() {
                    *o = f(*o, b.data[(ob + i as isize * ib) as usize]);
                }
            }
        }
    };
    if out.len() >= parallel::MIN_PARALLEL_ELEMENTS {
        use rayon::prelude::*;
        let rows_per_chunk = (out.len() / inner)
            .div_ceil(rayon::current_num_threads() * 4)
            .max(1);
        let chunk = rows_per_chunk * inner;
        out.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(k, part)| body(k * chunk, part));
    } else {
        body(0, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_adds_a_row_to_every_row() {
        let a = [1, 2, 3, 4, 5, 6];
        let b = [10, 20, 30];
        let mut out = [0; 6];
        broadcast2(
            Operand {
                data: &a,
                strides: &[3, 1],
                offset: 0,
            },
            Operand {
                data: &b,
                strides: &[0, 1],
                offset: 0,
            },
            &[2, 3],
            &mut out,
            |x, y| BinaryOp::Add.apply(x, y),
        );
        assert_eq!(out, [11, 22, 33, 14, 25, 36]);
    }
}
