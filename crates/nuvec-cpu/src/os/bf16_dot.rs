//! 4-bit packed weights, or bfloat16 weights, times bfloat16 activations with AVX-512's
//! bfloat16 dot products.
//!
//! A bfloat16 activation times a 4-bit level (0–15, exact in bfloat16) is exact in f32, and
//! `vdpbf16ps` adds such products into f32 lanes: the same sums as widening both sides to
//! f32, in another order, with 32 products per instruction instead of 8. The levels become
//! bfloat16 through a 16-entry table (`vpermw`), so a 64-value step of a weight row costs
//! seven instructions.
//!
//! Layout: a step is 32 packed bytes; byte `j` holds values `2j` (low nibble) and `2j + 1`
//! (high nibble). Widened to 16-bit words, the low nibbles pair with the activations
//! `x[2j]` and the high ones with `x[2j + 1]`, so the activations come with each 64-value run of
//! `x` stored as its 32 even values, then its 32 odd ones.

use crate::quantized::bfloat16::{Operands, STEP};
use std::arch::x86_64::{
    __m512, __m512bh, __m512i, _mm256_loadu_si256, _mm512_and_si512, _mm512_cvtepu8_epi16,
    _mm512_dpbf16_ps, _mm512_fmadd_ps, _mm512_loadu_si512, _mm512_permutexvar_epi16,
    _mm512_reduce_add_ps, _mm512_set1_epi16, _mm512_set1_ps, _mm512_setzero_ps, _mm512_srli_epi16,
    _mm_prefetch, _MM_HINT_T0,
};
use std::array::from_fn;
use std::mem::transmute;

/// Whether this CPU runs [`part`]: AVX-512 with byte/word operations and bfloat16 products.
pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512bf16")
}

/// Fills `part` (`[m, rows]`) with `y[i][first_row + r] = Σ_k x[i][k]·W[first_row + r][k]`.
///
/// # Panics
/// If [`available`] is false, or the slices are shorter than the operands say.
pub(super) fn part(operands: &Operands<'_>, first_row: usize, part: &mut [f32]) {
    assert!(available(), "bf16_dot::part: the CPU lacks AVX-512 BF16");
    let Operands { m, k, .. } = *operands;
    let rows = part.len() / m;
    let groups = k / operands.group_size;
    assert!(
        operands.group_size.is_multiple_of(STEP)
            && k.is_multiple_of(operands.group_size)
            && operands.bytes.len() >= (first_row + rows) * k / 2
            && operands.scales.len() >= (first_row + rows) * groups
            && operands.biases.len() >= (first_row + rows) * groups
            && operands.x.len() >= m * k
            && operands.group_sums.len() >= m * groups,
        "bf16_dot::part: operands shorter than their shape"
    );
    // SAFETY: the CPU has the features `rows_avx512` is compiled for (checked just above), and
    // every slice holds what the shape says (asserted above), which is all `tile` reads.
    unsafe { rows_avx512(operands, first_row, part) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
fn rows_avx512(operands: &Operands<'_>, first_row: usize, part: &mut [f32]) {
    let m = operands.m;
    let rows = part.len() / m;
    if m == 1 {
        let whole = rows - rows % 4;
        for row in (0..whole).step_by(4) {
            let y = tile::<1, 4>(operands, first_row + row, 0);
            part[row..row + 4].copy_from_slice(&y[0]);
        }
        for (row, value) in part.iter_mut().enumerate().skip(whole) {
            *value = tile::<1, 1>(operands, first_row + row, 0)[0][0];
        }
        return;
    }
    for row in 0..rows {
        let whole = m - m % 4;
        for x_row in (0..whole).step_by(4) {
            let y = tile::<4, 1>(operands, first_row + row, x_row);
            for (i, value) in y.iter().enumerate() {
                part[(x_row + i) * rows + row] = value[0];
            }
        }
        for x_row in whole..m {
            part[x_row * rows + row] = tile::<1, 1>(operands, first_row + row, x_row)[0][0];
        }
    }
}

/// `y[i][r]` for the `XR` activation rows from `x_row` and the `WR` weight rows from `w_row`.
/// Each result is summed in the same order whatever the tile.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // Tiles of registers read best by index.
fn tile<const XR: usize, const WR: usize>(
    operands: &Operands<'_>,
    w_row: usize,
    x_row: usize,
) -> [[f32; WR]; XR] {
    let Operands {
        k,
        group_size,
        m: _,
        ..
    } = *operands;
    let groups = k / group_size;
    let row_bytes = k / 2;
    // The rows of a part lie end to end: reading each `ahead` bytes before it is needed
    // (whole tiles ahead, at least 4 KiB) keeps several lines in flight per row.
    let tile_bytes = WR * row_bytes;
    let ahead = tile_bytes * 4096usize.div_ceil(tile_bytes);
    // SAFETY: this runs inside `rows_avx512`, compiled for AVX-512 F, BW
    // and BF16; `part` checked that the bytes of rows `w_row..w_row + WR` (each `k/2` long),
    // the activations of rows `x_row..x_row + XR` and their scales, biases and group sums are
    // in the slices, and every load below is within them.
    unsafe {
        // The bfloat16 bits of 0..15.
        let table: __m512i = transmute::<[u16; 32], __m512i>(from_fn(|q| {
            ((q % 16) as f32).to_bits().wrapping_shr(16) as u16
        }));
        let low_nibble = _mm512_set1_epi16(0x0f);
        let mut total: [[__m512; WR]; XR] = [[_mm512_setzero_ps(); WR]; XR];
        let mut bias_total = [[0.0f32; WR]; XR];
        for group in 0..groups {
            let mut dot: [[__m512; WR]; XR] = [[_mm512_setzero_ps(); WR]; XR];
            for step in group * group_size / STEP..(group + 1) * group_size / STEP {
                let xs: [[__m512bh; 2]; XR] = from_fn(|i| {
                    let at = operands.x.as_ptr().add((x_row + i) * k + step * STEP);
                    [
                        transmute::<__m512i, __m512bh>(_mm512_loadu_si512(at.cast())),
                        transmute::<__m512i, __m512bh>(_mm512_loadu_si512(at.add(32).cast())),
                    ]
                });
                for r in 0..WR {
                    let at = operands
                        .bytes
                        .as_ptr()
                        .add((w_row + r) * row_bytes + step * STEP / 2);
                    // A hint: no fault even past the end of the weights.
                    _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(ahead).cast());
                    let words = _mm512_cvtepu8_epi16(_mm256_loadu_si256(at.cast()));
                    let low = _mm512_permutexvar_epi16(_mm512_and_si512(words, low_nibble), table);
                    let high = _mm512_permutexvar_epi16(_mm512_srli_epi16::<4>(words), table);
                    let low = transmute::<__m512i, __m512bh>(low);
                    let high = transmute::<__m512i, __m512bh>(high);
                    for i in 0..XR {
                        dot[i][r] = _mm512_dpbf16_ps(dot[i][r], low, xs[i][0]);
                        dot[i][r] = _mm512_dpbf16_ps(dot[i][r], high, xs[i][1]);
                    }
                }
            }
            for r in 0..WR {
                let at = (w_row + r) * groups + group;
                let scale = bf16_to_f32(*operands.scales.get_unchecked(at));
                let bias = bf16_to_f32(*operands.biases.get_unchecked(at));
                let scale_vector = _mm512_set1_ps(scale);
                for i in 0..XR {
                    total[i][r] = _mm512_fmadd_ps(scale_vector, dot[i][r], total[i][r]);
                    let sum = *operands
                        .group_sums
                        .get_unchecked((x_row + i) * groups + group);
                    bias_total[i][r] += bias * sum;
                }
            }
        }
        from_fn(|i| from_fn(|r| _mm512_reduce_add_ps(total[i][r]) + bias_total[i][r]))
    }
}

#[inline(always)]
fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// `out[r·m + i] = Σ_k w[first_row + r][k] · x[i][k]` for the weight rows of a part (`out` is
/// `[rows, m]`), all of `w` and `x` bfloat16 bits with rows of `k`: two bfloat16 values make
/// an exact f32 product, so these are the sums of the widened values, 32 products per
/// instruction.
///
/// # Panics
/// If [`available`] is false or the slices are shorter than the shape says.
pub(super) fn rows_bf16(
    w: &[u16],
    x: &[u16],
    (m, k): (usize, usize),
    first_row: usize,
    out: &mut [f32],
) {
    assert!(
        available(),
        "bf16_dot::rows_bf16: the CPU lacks AVX-512 BF16"
    );
    let rows = out.len() / m.max(1);
    assert!(
        w.len() >= (first_row + rows) * k && x.len() >= m * k,
        "bf16_dot::rows_bf16: operands shorter than their shape"
    );
    // SAFETY: the CPU has the features `dense_avx512` is compiled for (checked just above)
    // and the slices hold what the shape says (asserted above), which is all it reads.
    unsafe { dense_avx512(w, x, (m, k), first_row, out) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
fn dense_avx512(w: &[u16], x: &[u16], (m, k): (usize, usize), first_row: usize, out: &mut [f32]) {
    let rows = out.len() / m.max(1);
    let whole = rows - rows % 4;
    for row in (0..whole).step_by(4) {
        for i in 0..m {
            let y = dense_tile::<4>(w, x, k, first_row + row, i);
            for (r, value) in y.iter().enumerate() {
                out[(row + r) * m + i] = *value;
            }
        }
    }
    for row in whole..rows {
        for i in 0..m {
            out[row * m + i] = dense_tile::<1>(w, x, k, first_row + row, i)[0];
        }
    }
}

/// The dot products of weight rows `w_row..w_row + WR` with row `i` of `x`.
#[inline(always)]
fn dense_tile<const WR: usize>(
    w: &[u16],
    x: &[u16],
    k: usize,
    w_row: usize,
    i: usize,
) -> [f32; WR] {
    const VALUES: usize = 32;
    let body = k - k % VALUES;
    // Rows lie end to end: reading a few KiB ahead keeps lines in flight.
    let ahead = 4096 / size_of::<u16>();
    let x_row = &x[i * k..(i + 1) * k];
    // SAFETY: this runs inside `dense_avx512`, compiled for AVX-512 F, BW and BF16; every
    // load reads 32 values at `c < body <= k` of a row `rows_bf16` checked lies in `w` or `x`;
    // the prefetch is a hint that never faults.
    let sums: [__m512; WR] = unsafe {
        let mut sums = [_mm512_setzero_ps(); WR];
        for c in (0..body).step_by(VALUES) {
            let xs =
                transmute::<__m512i, __m512bh>(_mm512_loadu_si512(x_row.as_ptr().add(c).cast()));
            for (r, sum) in sums.iter_mut().enumerate() {
                let at = w.as_ptr().add((w_row + r) * k + c);
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(ahead).cast());
                let ws = transmute::<__m512i, __m512bh>(_mm512_loadu_si512(at.cast()));
                *sum = _mm512_dpbf16_ps(*sum, ws, xs);
            }
        }
        sums
    };
    from_fn(|r| {
        let row = &w[(w_row + r) * k..(w_row + r + 1) * k];
        let tail: f32 = row[body..]
            .iter()
            .zip(&x_row[body..])
            .map(|(&a, &b)| bf16_to_f32(a) * bf16_to_f32(b))
            .sum();
        // SAFETY: as above; a reduction of a register.
        unsafe { _mm512_reduce_add_ps(sums[r]) + tail }
    })
}
