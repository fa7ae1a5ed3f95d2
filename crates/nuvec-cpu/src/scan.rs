//! Cumulative reductions (`cumsum`, `cumprod`, `cummax`, `cummin`) along the middle axis of an
//! `[outer, len, inner]` view.

use crate::reduce::{Layout3, ReduceOp};
use crate::Element;

/// Writes the running `op` of `input` along the middle axis into `out`. `reverse` scans from
/// the end; `inclusive = false` shifts by one and starts from the identity, as MLX.
pub fn scan<T: Element>(
    op: ReduceOp,
    reverse: bool,
    inclusive: bool,
    input: &[T],
    layout: Layout3,
    out: &mut [T],
) {
    let Layout3 { outer, len, inner } = layout;
    // Accumulates in the element type, as MLX does, so results match it bit for bit.
    let float_sum = false;
    for o in 0..outer {
        for i in 0..inner {
            let mut acc_float = if op == ReduceOp::Prod { 1.0f64 } else { 0.0 };
            let mut acc: Option<T> = None;
            for step in 0..len {
                let k = if reverse { len - 1 - step } else { step };
                let index = (o * len + k) * inner + i;
                let v = input[index];
                if !inclusive {
                    out[index] = if float_sum {
                        T::from_f64(acc_float)
                    } else {
                        acc.unwrap_or_else(|| identity(op))
                    };
                }
                if float_sum {
                    if op == ReduceOp::Sum {
                        acc_float += v.to_f64();
                    } else {
                        acc_float *= v.to_f64();
                    }
                } else {
                    // MLX's inclusive scan starts from the first value; its exclusive one from
                    // the identity (so an exclusive cumsum of -0 gives +0 + -0 = +0).
                    acc = Some(match acc {
                        None if inclusive => v,
                        None => combine(op, identity(op), v),
                        Some(a) => combine(op, a, v),
                    });
                }
                if inclusive {
                    out[index] = if float_sum {
                        T::from_f64(acc_float)
                    } else {
                        acc.unwrap_or(v)
                    };
                }
            }
        }
    }
}

fn combine<T: Element>(op: ReduceOp, a: T, v: T) -> T {
    match op {
        ReduceOp::Sum => a.add(v),
        ReduceOp::Prod => a.mul(v),
        ReduceOp::Max => a.maximum(v),
        _ => a.minimum(v),
    }
}

fn identity<T: Element>(op: ReduceOp) -> T {
    match op {
        ReduceOp::Prod => T::one(),
        ReduceOp::Max => T::lowest(),
        ReduceOp::Min => T::highest(),
        _ => T::zero(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exclusive_cumsum_starts_from_positive_zero_as_in_mlx() {
        let mut out = [1.0f32; 2];
        let layout = Layout3 {
            outer: 1,
            len: 2,
            inner: 1,
        };
        scan(
            ReduceOp::Sum,
            false,
            false,
            &[-0.0f32, 4.0],
            layout,
            &mut out,
        );
        assert_eq!(out.map(f32::to_bits), [0, 0]);
        scan(
            ReduceOp::Sum,
            false,
            true,
            &[-0.0f32, 4.0],
            layout,
            &mut out,
        );
        assert_eq!(out[0].to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn exclusive_reverse_cumsum_matches_hand_computation() {
        let mut out = [0; 4];
        scan(
            ReduceOp::Sum,
            true,
            false,
            &[1, 2, 3, 4],
            Layout3 {
                outer: 1,
                len: 4,
                inner: 1,
            },
            &mut out,
        );
        assert_eq!(out, [9, 7, 4, 0]);
    }
}
