//! Reductions over raw little-endian bytes, for data that arrives from the network (no
//! alignment is assumed, and any bit pattern is accepted).

use crate::reduce::ReduceOp;
use crate::{with_dtype, DType, Element};

/// `dst[i] = op(dst[i], src[i])` for elements of `dtype` stored as little-endian bytes.
/// Sums of bool are logical or, as everywhere in nuvec.
pub fn reduce_bytes(dst: &mut [u8], src: &[u8], dtype: DType, op: ReduceOp) {
    with_dtype!(dtype, T, reduce_typed::<T>(dst, src, op))
}

fn reduce_typed<T: Element>(dst: &mut [u8], src: &[u8], op: ReduceOp) {
    let width = size_of::<T>();
    for (d, s) in dst.chunks_exact_mut(width).zip(src.chunks_exact(width)) {
        let (x, y) = (T::read_le(d), T::read_le(s));
        let combined = match op {
            ReduceOp::Sum => x.add(y),
            ReduceOp::Prod => x.mul(y),
            ReduceOp::Max => x.maximum(y),
            ReduceOp::Min => x.minimum(y),
            ReduceOp::All => T::from_f64(f64::from(u8::from(x.truthy() && y.truthy()))),
            ReduceOp::Any => T::from_f64(f64::from(u8::from(x.truthy() || y.truthy()))),
        };
        combined.write_le(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sums_match_typed_sums_for_unaligned_data() {
        let a: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut b: Vec<u8> = vec![0];
        b.extend([0.25f32, 4.0].iter().flat_map(|v| v.to_le_bytes()));
        let mut dst = a.clone();
        reduce_bytes(&mut dst, &b[1..], DType::F32, ReduceOp::Sum);
        let values: Vec<f32> = dst
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(values, [1.75, 2.0]);
    }
}
