//! Reductions over the middle axis of an `[outer, len, inner]` view of contiguous data.
//!
//! The array layer arranges any set of reduced axes into that form (moving them together when
//! they are not adjacent), so one loop shape serves every reduction.

use crate::{parallel, DType, Element};
use rayon::prelude::*;

/// How values are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
/// Exhaustive on purpose: every rule that matches on it must handle a new variant.
pub enum ReduceOp {
    /// Sum (integers wrap, exactly as their type; floats accumulate in wider precision).
    Sum,
    /// Product.
    Prod,
    /// Largest; NaN wins.
    Max,
    /// Smallest; NaN wins.
    Min,
    /// Whether all are nonzero.
    All,
    /// Whether any is nonzero.
    Any,
}

impl ReduceOp {
    /// MLX's name of the op.
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::All => "all",
            ReduceOp::Any => "any",
        }
    }
}

/// The `[outer, len, inner]` layout of a reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout3 {
    /// Product of the axes before the reduced ones.
    pub outer: usize,
    /// Product of the reduced axes.
    pub len: usize,
    /// Product of the axes after the reduced ones.
    pub inner: usize,
}

/// Reduces `input` (`outer * len * inner` elements) into `out` (`outer * inner`), keeping the
/// element type. `All`/`Any` give 0 or 1 in `T`.
pub fn reduce<T: Element>(op: ReduceOp, input: &[T], layout: Layout3, out: &mut [T]) {
    let Layout3 { len, inner, .. } = layout;
    if out.is_empty() {
        return; // An empty result (another axis has length 0): nothing to compute.
    }
    if len == 0 {
        out.fill(identity::<T>(op));
        return;
    }
    if inner == 1 {
        let threads = rayon::current_num_threads();
        if out.len() < threads && len >= parallel::MIN_PARALLEL_ELEMENTS {
            // Few long rows: split each row across the cores and combine the partial results.
            for (row_index, slot) in out.iter_mut().enumerate() {
                *slot =
                    reduce_long_row(op, &input[row_index * len..(row_index + 1) * len], threads);
            }
            return;
        }
        parallel::map_rows(out, |row_index| {
            reduce_row(op, &input[row_index * len..(row_index + 1) * len])
        });
        return;
    }
    // Column reductions: accumulate whole rows so the inner loop runs over contiguous memory.
    out.par_chunks_mut(inner)
        .enumerate()
        .for_each(|(o, acc_row)| {
            let block = &input[o * len * inner..(o + 1) * len * inner];
            reduce_columns(op, block, len, inner, acc_row);
        });
}

fn identity<T: Element>(op: ReduceOp) -> T {
    match op {
        ReduceOp::Sum | ReduceOp::Any => T::zero(),
        ReduceOp::Prod | ReduceOp::All => T::one(),
        ReduceOp::Max => T::lowest(),
        ReduceOp::Min => T::highest(),
    }
}

fn reduce_long_row<T: Element>(op: ReduceOp, row: &[T], threads: usize) -> T {
    let piece = row.len().div_ceil(threads * 4);
    if op == ReduceOp::Sum && T::DTYPE.is_float() {
        let total: f64 = row.par_chunks(piece).map(sum_float).sum();
        return T::from_f64(total);
    }
    let partials: Vec<T> = row
        .par_chunks(piece)
        .map(|part| reduce_row(op, part))
        .collect();
    reduce_row(op, &partials)
}

fn reduce_row<T: Element>(op: ReduceOp, row: &[T]) -> T {
    match op {
        ReduceOp::Sum if T::DTYPE.is_float() => T::from_f64(sum_float(row)),
        ReduceOp::Prod if T::DTYPE.is_float() => {
            T::from_f64(row.iter().fold(1.0, |acc, v| acc * v.to_f64()))
        }
        ReduceOp::All => T::from_f64(f64::from(u8::from(row.iter().all(|v| v.truthy())))),
        ReduceOp::Any => T::from_f64(f64::from(u8::from(row.iter().any(|v| v.truthy())))),
        _ => {
            let mut acc = identity::<T>(op);
            for &v in row {
                acc = combine(op, acc, v);
            }
            acc
        }
    }
}

#[inline(always)]
fn combine<T: Element>(op: ReduceOp, acc: T, v: T) -> T {
    match op {
        ReduceOp::Sum => acc.add(v),
        ReduceOp::Prod => acc.mul(v),
        ReduceOp::Max => acc.maximum(v),
        ReduceOp::Min => acc.minimum(v),
        ReduceOp::All => T::from_f64(f64::from(u8::from(acc.truthy() && v.truthy()))),
        ReduceOp::Any => T::from_f64(f64::from(u8::from(acc.truthy() || v.truthy()))),
    }
}

/// A float sum in blocks: 16 independent f32 lanes per block (vectorized), blocks added in f64,
/// so the error does not grow with the length of the row.
fn sum_float<T: Element>(row: &[T]) -> f64 {
    const BLOCK: usize = 2048;
    if T::DTYPE == DType::F64 {
        return row.iter().map(|v| v.to_f64()).sum();
    }
    let mut total = 0.0f64;
    for block in row.chunks(BLOCK) {
        let mut lanes = [0.0f32; 16];
        let mut chunks = block.chunks_exact(16);
        for chunk in &mut chunks {
            for (lane, v) in lanes.iter_mut().zip(chunk) {
                *lane += v.to_f64() as f32;
            }
        }
        let mut partial: f64 = lanes.iter().map(|v| f64::from(*v)).sum();
        partial += chunks.remainder().iter().map(|v| v.to_f64()).sum::<f64>();
        total += partial;
    }
    total
}

fn reduce_columns<T: Element>(op: ReduceOp, block: &[T], len: usize, inner: usize, out: &mut [T]) {
    if T::DTYPE.is_float() && matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
        let mut acc = vec![if op == ReduceOp::Sum { 0.0f64 } else { 1.0 }; inner];
        for row in block.chunks_exact(inner).take(len) {
            for (a, v) in acc.iter_mut().zip(row) {
                if op == ReduceOp::Sum {
                    *a += v.to_f64();
                } else {
                    *a *= v.to_f64();
                }
            }
        }
        for (o, a) in out.iter_mut().zip(acc) {
            *o = T::from_f64(a);
        }
        return;
    }
    out.copy_from_slice(&block[..inner]);
    for row in block.chunks_exact(inner).skip(1).take(len - 1) {
        for (o, v) in out.iter_mut().zip(row) {
            *o = combine(op, *o, *v);
        }
    }
    if matches!(op, ReduceOp::All | ReduceOp::Any) {
        for o in out.iter_mut() {
            *o = T::from_f64(f64::from(u8::from(o.truthy())));
        }
    }
}

/// Index of the largest (`largest`) or smallest value along the middle axis; the first one
/// wins ties, and a NaN counts as the extreme value.
pub fn arg_reduce<T: Element>(largest: bool, input: &[T], layout: Layout3, out: &mut [u32]) {
    let Layout3 { len, inner, .. } = layout;
    out.par_chunks_mut(inner.max(1))
        .enumerate()
        .for_each(|(o, out_row)| {
            for (i, slot) in out_row.iter_mut().enumerate() {
                let mut best = 0usize;
                let mut best_value = input[o * len * inner + i];
                for k in 1..len {
                    let v = input[(o * len + k) * inner + i];
                    if best_value.is_nan() {
                        break;
                    }
                    let better = if largest {
                        v > best_value
                    } else {
                        v < best_value
                    };
                    if better || v.is_nan() {
                        best = k;
                        best_value = v;
                    }
                }
                *slot = best as u32;
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_integer_columns_sum_exactly() {
        let rows = 8192;
        let input: Vec<i32> = (0..rows * 3).map(|k| (k % 5) as i32).collect();
        let mut out = vec![0i32; 3];
        reduce(
            ReduceOp::Sum,
            &input,
            Layout3 {
                outer: 1,
                len: rows,
                inner: 3,
            },
            &mut out,
        );
        let expected: Vec<i32> = (0..3)
            .map(|j| (0..rows).map(|i| ((i * 3 + j) % 5) as i32).sum())
            .collect();
        assert_eq!(out, expected);
    }

    #[test]
    fn float_sum_of_many_small_values_stays_accurate() {
        let input = vec![0.1f32; 1 << 22];
        let mut out = [0.0f32];
        reduce(
            ReduceOp::Sum,
            &input,
            Layout3 {
                outer: 1,
                len: input.len(),
                inner: 1,
            },
            &mut out,
        );
        let expected = f64::from(0.1f32) * input.len() as f64;
        assert!((f64::from(out[0]) - expected).abs() / expected < 1e-6);
    }

    #[test]
    fn argmax_takes_the_first_of_equal_values() {
        let mut out = [9u32];
        arg_reduce(
            true,
            &[1, 3, 3, 2],
            Layout3 {
                outer: 1,
                len: 4,
                inner: 1,
            },
            &mut out,
        );
        assert_eq!(out, [1]);
    }
}
