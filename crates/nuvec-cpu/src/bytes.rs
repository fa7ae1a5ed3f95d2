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
    apply(InPlace { dst, src }, dtype, op);
}

/// `out[i] = op(a[i], b[i])`: [`reduce_bytes`] of a copy of `a`, with the same bits, in one
/// pass (no copy of `a` is written and read back).
///
/// # Panics
/// When `a` or `b` is shorter than `out` (a caller's bug: every element of `out` is written).
pub fn combine_bytes(out: &mut [u8], a: &[u8], b: &[u8], dtype: DType, op: ReduceOp) {
    assert!(
        a.len() >= out.len() && b.len() >= out.len(),
        "combine_bytes: operands of {} and {} bytes for an output of {}",
        a.len(),
        b.len(),
        out.len()
    );
    apply(OutOfPlace { out, a, b }, dtype, op);
}

/// Where a reduction reads and writes: the two forms share every kernel.
trait Operands: Sized {
    /// `f` over each element, as typed slices when everything is aligned for `T` and every
    /// bit pattern is a `T`, else as little-endian bytes.
    fn each<T: Element>(self, f: impl Fn(T, T) -> T);
    /// A half-precision sum or product computed in `f32`, rounded once per element.
    fn halves<T: HalfFloat>(self, f: impl Fn(f32, f32) -> f32);
}

fn apply(operands: impl Operands, dtype: DType, op: ReduceOp) {
    match (dtype, op) {
        (DType::F16, ReduceOp::Sum) => operands.halves::<f16>(|x, y| x + y),
        (DType::F16, ReduceOp::Prod) => operands.halves::<f16>(|x, y| x * y),
        (DType::BF16, ReduceOp::Sum) => operands.halves::<bf16>(|x, y| x + y),
        (DType::BF16, ReduceOp::Prod) => operands.halves::<bf16>(|x, y| x * y),
        _ => with_dtype!(dtype, T, typed_op::<T>(operands, op)),
    }
}

fn typed_op<T: Element>(operands: impl Operands, op: ReduceOp) {
    match op {
        ReduceOp::Sum => operands.each(T::add),
        ReduceOp::Prod => operands.each(T::mul),
        ReduceOp::Max => operands.each(T::maximum),
        ReduceOp::Min => operands.each(T::minimum),
        ReduceOp::All => {
            operands.each(|x: T, y: T| T::from_f64(f64::from(u8::from(x.truthy() && y.truthy()))))
        }
        ReduceOp::Any => {
            operands.each(|x: T, y: T| T::from_f64(f64::from(u8::from(x.truthy() || y.truthy()))))
        }
    }
}

struct InPlace<'a> {
    dst: &'a mut [u8],
    src: &'a [u8],
}

struct OutOfPlace<'a> {
    out: &'a mut [u8],
    a: &'a [u8],
    b: &'a [u8],
}

impl Operands for InPlace<'_> {
    #[inline(always)]
    fn each<T: Element>(self, f: impl Fn(T, T) -> T) {
        if let (Some(d), Some(s)) = (typed_mut::<T>(self.dst), typed::<T>(self.src)) {
            crate::os::with_wide_vectors(|| {
                for (x, y) in d.iter_mut().zip(s) {
                    *x = f(*x, *y);
                }
            });
            return;
        }
        let width = size_of::<T>();
        for (d, s) in self
            .dst
            .chunks_exact_mut(width)
            .zip(self.src.chunks_exact(width))
        {
            f(T::read_le(d), T::read_le(s)).write_le(d);
        }
    }

    fn halves<T: HalfFloat>(self, f: impl Fn(f32, f32) -> f32) {
        match (typed_mut::<T>(self.dst), typed::<T>(self.src)) {
            (Some(d), Some(s)) => crate::os::with_wide_vectors(|| T::combine(d, s, f)),
            _ => self.each(|x: T, y: T| T::from_f32(f(x.to_f32(), y.to_f32()))),
        }
    }
}

impl Operands for OutOfPlace<'_> {
    #[inline(always)]
    fn each<T: Element>(self, f: impl Fn(T, T) -> T) {
        let typed_all = (
            typed_mut::<T>(self.out),
            typed::<T>(self.a),
            typed::<T>(self.b),
        );
        if let (Some(o), Some(a), Some(b)) = typed_all {
            crate::os::with_wide_vectors(|| {
                for (z, (x, y)) in o.iter_mut().zip(a.iter().zip(b)) {
                    *z = f(*x, *y);
                }
            });
            return;
        }
        let width = size_of::<T>();
        let pairs = self.a.chunks_exact(width).zip(self.b.chunks_exact(width));
        for (z, (x, y)) in self.out.chunks_exact_mut(width).zip(pairs) {
            f(T::read_le(x), T::read_le(y)).write_le(z);
        }
    }

    fn halves<T: HalfFloat>(self, f: impl Fn(f32, f32) -> f32) {
        let typed_all = (
            typed_mut::<T>(self.out),
            typed::<T>(self.a),
            typed::<T>(self.b),
        );
        match typed_all {
            (Some(o), Some(a), Some(b)) => {
                crate::os::with_wide_vectors(|| T::combine_into(o, a, b, f))
            }
            _ => self.each(|x: T, y: T| T::from_f32(f(x.to_f32(), y.to_f32()))),
        }
    }
}

/// Whether bytes at `p` can be read as `T` in place: aligned, every bit pattern a `T` (not
/// bool: bytes from the network may be neither 0 nor 1), and a little-endian target.
fn viewable<T: Element>(p: *const u8) -> bool {
    T::DTYPE != DType::Bool
        && cfg!(target_endian = "little")
        && p.align_offset(align_of::<T>()) == 0
}

/// `bytes` as a slice of `T`, when [`viewable`].
fn typed<T: Element>(bytes: &[u8]) -> Option<&[T]> {
    if !viewable::<T>(bytes.as_ptr()) {
        return None;
    }
    // SAFETY: the pointer is aligned for `T` and valid for `len` elements (at most its byte
    // length); `T` is a primitive integer or float (bool was excluded), for which every bit
    // pattern is valid; the borrow is that of `bytes`.
    Some(unsafe {
        std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len() / size_of::<T>())
    })
}

/// `bytes` as a mutable slice of `T`, when [`viewable`].
fn typed_mut<T: Element>(bytes: &mut [u8]) -> Option<&mut [T]> {
    if !viewable::<T>(bytes.as_ptr()) {
        return None;
    }
    let len = bytes.len() / size_of::<T>();
    // SAFETY: as in `typed`; the borrow is the exclusive one of `bytes`.
    Some(unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<T>(), len) })
}

/// Elements converted to `f32` per block for `float16`.
const BLOCK: usize = 512;

/// The half-precision types: sums and products computed in `f32`, then rounded once per
/// element, as [`Element::add`] and [`Element::mul`] do one element at a time, in loops the
/// compiler vectorises.
trait HalfFloat: Element {
    fn to_f32(self) -> f32;
    fn from_f32(value: f32) -> Self;
    /// `d[i] = f(d[i], s[i])` computed in `f32`.
    fn combine(d: &mut [Self], s: &[Self], f: impl Fn(f32, f32) -> f32);
    /// `o[i] = f(a[i], b[i])` computed in `f32`.
    fn combine_into(o: &mut [Self], a: &[Self], b: &[Self], f: impl Fn(f32, f32) -> f32);
}

/// `float16` converts a block at a time with `half`'s slice conversions, which use the CPU's
/// conversion instructions where it has them.
impl HalfFloat for f16 {
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }

    fn from_f32(value: f32) -> Self {
        f16::from_f32(value)
    }

    fn combine(d: &mut [Self], s: &[Self], f: impl Fn(f32, f32) -> f32) {
        let (mut x, mut y) = ([0f32; BLOCK], [0f32; BLOCK]);
        for (d, s) in d.chunks_mut(BLOCK).zip(s.chunks(BLOCK)) {
            let (x, y) = (&mut x[..d.len()], &mut y[..d.len()]);
            d.convert_to_f32_slice(x);
            s.convert_to_f32_slice(y);
            x.iter_mut().zip(y.iter()).for_each(|(x, y)| *x = f(*x, *y));
            d.convert_from_f32_slice(x);
        }
    }

    fn combine_into(o: &mut [Self], a: &[Self], b: &[Self], f: impl Fn(f32, f32) -> f32) {
        let (mut x, mut y) = ([0f32; BLOCK], [0f32; BLOCK]);
        let blocks = a.chunks(BLOCK).zip(b.chunks(BLOCK));
        for (o, (a, b)) in o.chunks_mut(BLOCK).zip(blocks) {
            let (x, y) = (&mut x[..o.len()], &mut y[..o.len()]);
            a[..o.len()].convert_to_f32_slice(x);
            b[..o.len()].convert_to_f32_slice(y);
            x.iter_mut().zip(y.iter()).for_each(|(x, y)| *x = f(*x, *y));
            o.convert_from_f32_slice(x);
        }
    }
}

/// `bfloat16` is the top half of a `float32`: widening is a shift, and narrowing rounds to
/// nearest even (NaN stays NaN, made quiet), as `bf16::from_f32` does, branch-free so that
/// the loop vectorises (`half`'s conversions for `bf16` go one element at a time).
impl HalfFloat for bf16 {
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }

    fn from_f32(value: f32) -> Self {
        bf16::from_f32(value)
    }

    #[inline(always)]
    fn combine(d: &mut [Self], s: &[Self], f: impl Fn(f32, f32) -> f32) {
        for (x, y) in d.iter_mut().zip(s) {
            *x = bf16_round(f(bf16_widen(*x), bf16_widen(*y)));
        }
    }

    #[inline(always)]
    fn combine_into(o: &mut [Self], a: &[Self], b: &[Self], f: impl Fn(f32, f32) -> f32) {
        for (z, (x, y)) in o.iter_mut().zip(a.iter().zip(b)) {
            *z = bf16_round(f(bf16_widen(*x), bf16_widen(*y)));
        }
    }
}

#[inline(always)]
fn bf16_widen(x: bf16) -> f32 {
    f32::from_bits(u32::from(x.to_bits()) << 16)
}

#[inline(always)]
fn bf16_round(value: f32) -> bf16 {
    let bits = value.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    let quiet_nan = (bits >> 16) | 0x0040;
    let is_nan = bits & 0x7fff_ffff > 0x7f80_0000;
    bf16::from_bits(if is_nan { quiet_nan } else { rounded } as u16)
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
    fn in_place_and_out_of_place_aligned_blocked_and_unaligned_paths_agree_with_elementwise_arithmetic(
    ) {
        let ops = [
            ReduceOp::Sum,
            ReduceOp::Prod,
            ReduceOp::Max,
            ReduceOp::Min,
            ReduceOp::All,
            ReduceOp::Any,
        ];
        let (mut dst_store, mut src_store) = (Vec::new(), Vec::new());
        let (mut a_store, mut out_store) = (Vec::new(), Vec::new());
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
                    reduce_bytes(&mut dst_store[d.clone()], &src_store[s.clone()], dtype, op);
                    let got = &dst_store[d];
                    let same = with_dtype!(dtype, T, same_values::<T>(got, &expected));
                    assert!(same, "{dtype} {op:?} with shifts {dst_shift}/{src_shift}");
                    // Out of place, into a third buffer placed as `a` was.
                    let first = placed(&a, src_shift, &mut a_store);
                    let o = placed(&vec![0; len], dst_shift, &mut out_store);
                    let (x, y) = (&a_store[first], &src_store[s]);
                    combine_bytes(&mut out_store[o.clone()], x, y, dtype, op);
                    let got = &out_store[o];
                    let same = with_dtype!(dtype, T, same_values::<T>(got, &expected));
                    assert!(
                        same,
                        "{dtype} {op:?} out of place, shifts {dst_shift}/{src_shift}"
                    );
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "operands of 8 and 4 bytes for an output of 8")]
    fn an_output_longer_than_an_operand_is_refused() {
        let mut out = [0u8; 8];
        combine_bytes(&mut out, &[0; 8], &[0; 4], DType::F32, ReduceOp::Sum);
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
