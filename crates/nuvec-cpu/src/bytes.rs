//! Reductions over raw little-endian bytes, for data that arrives from the network (no
//! alignment is assumed, and any bit pattern is accepted).

use crate::reduce::ReduceOp;
use crate::{with_dtype, DType, Element};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

/// `dst[i] = op(dst[i], src[i])` for elements of `dtype` stored as little-endian bytes.
/// Sums of bool are logical or, as everywhere in nuvec.
///
/// Aligned data (the usual case: scratch buffers and arrays) is combined as typed slices in
/// a loop the compiler vectorises; half-precision sums and products convert blocks to `f32`
/// and back, which rounds exactly as element-by-element arithmetic does.
pub fn reduce_bytes(dst: &mut [u8], src: &[u8], dtype: DType, op: ReduceOp) {
    match (dtype, op) {
        (DType::F16, ReduceOp::Sum | ReduceOp::Prod) => halves::<f16>(dst, src, op),
        (DType::BF16, ReduceOp::Sum | ReduceOp::Prod) => halves::<bf16>(dst, src, op),
        _ => with_dtype!(dtype, T, reduce_typed::<T>(dst, src, op)),
    }
}

fn reduce_typed<T: Element>(dst: &mut [u8], src: &[u8], op: ReduceOp) {
    match op {
        ReduceOp::Sum => combine(dst, src, T::add),
        ReduceOp::Prod => combine(dst, src, T::mul),
        ReduceOp::Max => combine(dst, src, T::maximum),
        ReduceOp::Min => combine(dst, src, T::minimum),
        ReduceOp::All => combine(dst, src, |x: T, y: T| {
            T::from_f64(f64::from(u8::from(x.truthy() && y.truthy())))
        }),
        ReduceOp::Any => combine(dst, src, |x: T, y: T| {
            T::from_f64(f64::from(u8::from(x.truthy() || y.truthy())))
        }),
    }
}

/// The elements of `dst` and `src` as typed slices, when both are aligned for `T`, every bit
/// pattern is a `T` (not bool: bytes from the network may be neither 0 nor 1) and the
/// target stores `T` little-endian.
fn typed<'a, T: Element>(dst: &'a mut [u8], src: &'a [u8]) -> Option<(&'a mut [T], &'a [T])> {
    let aligned = |p: *const u8| p.align_offset(align_of::<T>()) == 0;
    if T::DTYPE == DType::Bool
        || cfg!(target_endian = "big")
        || !aligned(dst.as_ptr())
        || !aligned(src.as_ptr())
    {
        return None;
    }
    let len = dst.len().min(src.len()) / size_of::<T>();
    // SAFETY: both pointers are aligned for `T` (checked) and valid for `len` elements (at
    // most their byte lengths); `T` is a primitive integer or float (bool was excluded), for
    // which every bit pattern is valid; the borrows are those of `dst` (exclusive) and `src`.
    unsafe {
        Some((
            std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<T>(), len),
            std::slice::from_raw_parts(src.as_ptr().cast::<T>(), len),
        ))
    }
}

#[inline(always)]
fn combine<T: Element>(dst: &mut [u8], src: &[u8], f: impl Fn(T, T) -> T) {
    if let Some((d, s)) = typed::<T>(dst, src) {
        crate::os::with_wide_vectors(|| {
            for (x, y) in d.iter_mut().zip(s) {
                *x = f(*x, *y);
            }
        });
        return;
    }
    let width = size_of::<T>();
    for (d, s) in dst.chunks_exact_mut(width).zip(src.chunks_exact(width)) {
        f(T::read_le(d), T::read_le(s)).write_le(d);
    }
}

/// Elements converted to `f32` per block for `float16`.
const BLOCK: usize = 512;

/// Sums or products of `f16`/`bf16` computed in `f32`, then rounded once per element, as
/// [`Element::add`] and [`Element::mul`] do one element at a time, in loops the compiler
/// vectorises.
fn halves<T: HalfFloat>(dst: &mut [u8], src: &[u8], op: ReduceOp) {
    let Some((d, s)) = typed::<T>(dst, src) else {
        return reduce_typed::<T>(dst, src, op);
    };
    crate::os::with_wide_vectors(|| {
        if op == ReduceOp::Prod {
            T::combine(d, s, |x, y| x * y);
        } else {
            T::combine(d, s, |x, y| x + y);
        }
    });
}

/// The half-precision types.
trait HalfFloat: Element {
    /// `d[i] = f(d[i], s[i])` computed in `f32`.
    fn combine(d: &mut [Self], s: &[Self], f: impl Fn(f32, f32) -> f32);
}

/// `float16` converts a block at a time with `half`'s slice conversions, which use the CPU's
/// conversion instructions where it has them.
impl HalfFloat for f16 {
    fn combine(d: &mut [Self], s: &[Self], f: impl Fn(f32, f32) -> f32) {
        let (mut a, mut b) = ([0f32; BLOCK], [0f32; BLOCK]);
        for (d, s) in d.chunks_mut(BLOCK).zip(s.chunks(BLOCK)) {
            let (a, b) = (&mut a[..d.len()], &mut b[..d.len()]);
            d.convert_to_f32_slice(a);
            s.convert_to_f32_slice(b);
            a.iter_mut().zip(b.iter()).for_each(|(x, y)| *x = f(*x, *y));
            d.convert_from_f32_slice(a);
        }
    }
}

/// `bfloat16` is the top half of a `float32`: widening is a shift, and narrowing rounds to
/// nearest even (NaN stays NaN, made quiet), as `bf16::from_f32` does, branch-free so that
/// the loop vectorises (`half`'s conversions for `bf16` go one element at a time).
impl HalfFloat for bf16 {
    #[inline(always)]
    fn combine(d: &mut [Self], s: &[Self], f: impl Fn(f32, f32) -> f32) {
        let widen = |x: bf16| f32::from_bits(u32::from(x.to_bits()) << 16);
        for (x, y) in d.iter_mut().zip(s) {
            let bits = f(widen(*x), widen(*y)).to_bits();
            let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
            let quiet_nan = (bits >> 16) | 0x0040;
            let is_nan = bits & 0x7fff_ffff > 0x7f80_0000;
            *x = bf16::from_bits(if is_nan { quiet_nan } else { rounded } as u16);
        }
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

    /// Deterministic bytes; bool gets only 0 and 1.
    fn pattern(len: usize, seed: u64, dtype: DType) -> Vec<u8> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let byte = (state >> 56) as u8;
                if dtype == DType::Bool {
                    byte & 1
                } else {
                    byte
                }
            })
            .collect()
    }

    /// `bytes` copied to a position aligned to 8 (`shift` = 0) or 8 + `shift`.
    fn placed(bytes: &[u8], shift: usize, store: &mut Vec<u8>) -> std::ops::Range<usize> {
        store.clear();
        store.resize(bytes.len() + 16, 0);
        let start = store.as_ptr().align_offset(8) + shift;
        store[start..start + bytes.len()].copy_from_slice(bytes);
        start..start + bytes.len()
    }

    fn one_at_a_time<T: Element>(dst: &mut [u8], src: &[u8], op: ReduceOp) {
        let width = size_of::<T>();
        for (d, s) in dst.chunks_exact_mut(width).zip(src.chunks_exact(width)) {
            let (x, y) = (T::read_le(d), T::read_le(s));
            let z = match op {
                ReduceOp::Sum => x.add(y),
                ReduceOp::Prod => x.mul(y),
                ReduceOp::Max => x.maximum(y),
                ReduceOp::Min => x.minimum(y),
                ReduceOp::All => T::from_f64(f64::from(u8::from(x.truthy() && y.truthy()))),
                ReduceOp::Any => T::from_f64(f64::from(u8::from(x.truthy() || y.truthy()))),
            };
            z.write_le(d);
        }
    }

    /// Bitwise equal, except that any NaN matches any NaN: which operand's payload a NaN
    /// result carries depends on how the compiler ordered the operands.
    fn same_values<T: Element>(got: &[u8], want: &[u8]) -> bool {
        let width = size_of::<T>();
        got.chunks_exact(width)
            .zip(want.chunks_exact(width))
            .all(|(g, w)| g == w || (T::read_le(g).is_nan() && T::read_le(w).is_nan()))
    }

    #[test]
    fn aligned_blocked_and_unaligned_paths_agree_with_elementwise_arithmetic() {
        let ops = [
            ReduceOp::Sum,
            ReduceOp::Prod,
            ReduceOp::Max,
            ReduceOp::Min,
            ReduceOp::All,
            ReduceOp::Any,
        ];
        let (mut dst_store, mut src_store) = (Vec::new(), Vec::new());
        for dtype in DType::ALL {
            // More elements than a half-precision block, and not a multiple of it.
            let len = (BLOCK * 2 + 7) * dtype.size();
            let a = pattern(len, 1, dtype);
            let b = pattern(len, 2, dtype);
            for op in ops {
                let mut expected = a.clone();
                with_dtype!(dtype, T, one_at_a_time::<T>(&mut expected, &b, op));
                for (dst_shift, src_shift) in [(0, 0), (1, 0), (0, 1), (3, 5)] {
                    let d = placed(&a, dst_shift, &mut dst_store);
                    let s = placed(&b, src_shift, &mut src_store);
                    reduce_bytes(&mut dst_store[d.clone()], &src_store[s], dtype, op);
                    let got = &dst_store[d];
                    let same = with_dtype!(dtype, T, same_values::<T>(got, &expected));
                    assert!(same, "{dtype} {op:?} with shifts {dst_shift}/{src_shift}");
                }
            }
        }
    }

    #[test]
    fn half_precision_sums_round_each_element_to_nearest_even() {
        // f16 has spacing 2 at 2048: 2048 + 1 ties to even (2048), 2050 + 1 to 2052.
        let mut dst: Vec<f16> = [2048.0, 2050.0].map(f16::from_f32).to_vec();
        let src: Vec<f16> = [1.0, 1.0].map(f16::from_f32).to_vec();
        let bytes = |v: &[f16]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let mut out = bytes(&dst);
        reduce_bytes(&mut out, &bytes(&src), DType::F16, ReduceOp::Sum);
        dst = out
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(dst, [2048.0, 2052.0].map(f16::from_f32));
        // bf16 has spacing 2 at 256: 256 + 1 ties to 256, 258 + 1 to 260.
        let mut out: Vec<u8> = [256.0f32, 258.0]
            .iter()
            .flat_map(|x| bf16::from_f32(*x).to_le_bytes())
            .collect();
        let one: Vec<u8> = [1.0f32, 1.0]
            .iter()
            .flat_map(|x| bf16::from_f32(*x).to_le_bytes())
            .collect();
        reduce_bytes(&mut out, &one, DType::BF16, ReduceOp::Sum);
        let sums: Vec<f32> = out
            .chunks_exact(2)
            .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect();
        assert_eq!(sums, [256.0, 260.0]);
    }
}
