//! Products with MLX's affine-quantized matrices, read in their packed form.
//!
//! Row `n` of a matrix `W` is stored as `bits`-bit integers `q` laid end to end in 32-bit
//! words (least significant bits first), with a scale `s` and a bias `b` per group of
//! `group_size` values: `W[n][k] = s·q + b`. [`quantized_matmul_t`] computes `y = x · Wᵀ`
//! without writing `W` out, through `Σ_k x_k (s·q_k + b) = s·Σ_k x_k q_k + b·Σ_k x_k` per
//! group: the sums of `x` over each group are taken once per row of `x`, so the loop over the
//! packed bytes only widens integers and multiplies them by `x`.
//!
//! Few rows of `x` (decoding a token at a time) make the product bound by reading the weights:
//! each pass over a few weight rows serves a tile of rows of `x`. From [`MIN_GEMM_ROWS`] rows
//! of `x` on it is bound by arithmetic instead, and blocks of weight rows are dequantized
//! into a small scratch and multiplied by `gemm`. Sums are in f32 whatever the dtype.

use crate::matmul::{matmul_transposed_f32, MatmulDims};
use crate::{parallel, with_wide_vectors, Float};
use std::array::from_fn;
use std::borrow::Cow;

/// Values widened per vector: one AVX2 register of f32.
const LANES: usize = 8;

/// From this many rows of `x` on, dequantizing blocks of weights for `gemm` beats reading the
/// packed weights once per tile of rows.
pub const MIN_GEMM_ROWS: usize = 16;

/// The most weight rows dequantized for one `gemm` block: `gemm` packs `x` again for every
/// block, so blocks must be large.
const MAX_GEMM_ROWS: usize = 256;

/// The most columns of the weights dequantized at a time: the scratch of a block stays at
/// most `MAX_GEMM_ROWS × GEMM_DEPTH` floats (2 MiB), whatever `k`.
const GEMM_DEPTH: usize = 2048;

/// Weight rows per tile for one row of `x`: four independent sums hide the latency of adds.
const W_ROWS: usize = 4;

/// Rows of `x` per tile when there are several: each widened weight serves all of them.
const X_ROWS: usize = 4;

/// The shape of `y = x · Wᵀ`: `x` is `[m, k]`, `W` is `[n, k]` in groups of `group_size`
/// values of `bits` bits, `y` is `[m, n]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantizedDims {
    /// Rows of `x` and of `y`.
    pub m: usize,
    /// Rows of `W`: columns of `y`.
    pub n: usize,
    /// The contracted dimension.
    pub k: usize,
    /// Values sharing one scale and one bias.
    pub group_size: usize,
    /// Bits per value.
    pub bits: u32,
}

impl QuantizedDims {
    /// Whether [`quantized_matmul_t`] computes this product: 2, 3, 4, 5, 6 or 8 bits, groups
    /// of a multiple of 32 values (so that every group starts a word), `k` whole groups.
    pub fn is_supported(&self) -> bool {
        [2, 3, 4, 5, 6, 8].contains(&self.bits)
            && self.group_size > 0
            && self.group_size.is_multiple_of(32)
            && self.k.is_multiple_of(self.group_size)
    }

    fn groups(&self) -> usize {
        self.k / self.group_size
    }

    /// Bytes of one packed row.
    fn row_bytes(&self) -> usize {
        self.k * self.bits as usize / 8
    }
}

/// `out = x · Wᵀ` for row-major `x: [m, k]` and `W` packed as `bytes` (the bytes of MLX's
/// words `[n, k·bits/32]` as they lie in memory, little-endian), `scales` and
/// `biases: [n, k/group_size]`; `out` is `[m, n]`. Sums are in f32 and rounded once to `T`;
/// the dequantized `W` is never written out.
///
/// # Panics
/// If `dims` is not supported ([`QuantizedDims::is_supported`]) or a slice is shorter than
/// `dims` says.
pub fn quantized_matmul_t<T: Float>(
    x: &[T],
    bytes: &[u8],
    scales: &[T],
    biases: &[T],
    dims: QuantizedDims,
    out: &mut [T],
) {
    assert!(
        dims.is_supported(),
        "quantized_matmul_t: unsupported {dims:?}"
    );
    let QuantizedDims { m, n, k, .. } = dims;
    let groups = dims.groups();
    assert!(
        x.len() >= m * k
            && bytes.len() >= n * dims.row_bytes()
            && scales.len() >= n * groups
            && biases.len() >= n * groups
            && out.len() >= m * n,
        "quantized_matmul_t: slices shorter than {dims:?}"
    );
    if m == 0 || n == 0 {
        return;
    }
    if bfloat16::try_product(x, bytes, scales, biases, dims, out) {
        return;
    }
    let weights = Packed {
        bytes,
        scales,
        biases,
        dims,
    };
    let use_gemm = m >= MIN_GEMM_ROWS;
    let interleave = if use_gemm {
        1
    } else {
        vectors_per_step(dims.bits)
    };
    let x = Activations::new(&x[..m * k], dims, interleave);
    let rows_per_part = if use_gemm {
        gemm_block_rows(n)
    } else {
        // Several parts per thread even out their finishing times.
        let parts = rayon::current_num_threads().max(1) * 4;
        n.div_ceil(parts).next_multiple_of(W_ROWS)
    };
    let mut columns = vec![0.0f32; m * n];
    match dims.bits {
        2 => product::<T, 2>(&weights, &x, use_gemm, rows_per_part, &mut columns),
        3 => product::<T, 3>(&weights, &x, use_gemm, rows_per_part, &mut columns),
        4 => product::<T, 4>(&weights, &x, use_gemm, rows_per_part, &mut columns),
        5 => product::<T, 5>(&weights, &x, use_gemm, rows_per_part, &mut columns),
        6 => product::<T, 6>(&weights, &x, use_gemm, rows_per_part, &mut columns),
        _ => product::<T, 8>(&weights, &x, use_gemm, rows_per_part, &mut columns),
    }
    gather_columns(&columns, n, rows_per_part, &mut out[..m * n]);
}

/// The packed matrix `W`.
struct Packed<'a, T> {
    bytes: &'a [u8],
    scales: &'a [T],
    biases: &'a [T],
    dims: QuantizedDims,
}

impl<T: Float> Packed<'_, T> {
    #[inline(always)]
    fn row(&self, row: usize) -> &[u8] {
        let len = self.dims.row_bytes();
        &self.bytes[row * len..(row + 1) * len]
    }

    #[inline(always)]
    fn scale(&self, row: usize, group: usize) -> f32 {
        self.scales[row * self.dims.groups() + group].to_f32()
    }

    #[inline(always)]
    fn bias(&self, row: usize, group: usize) -> f32 {
        self.biases[row * self.dims.groups() + group].to_f32()
    }
}

/// The rows of `x` in f32, with their sums over each group.
struct Activations<'a> {
    /// In the order [`decode_step`] produces values in (`interleave` vectors per step).
    values: Cow<'a, [f32]>,
    group_sums: Vec<f32>,
    dims: QuantizedDims,
}

impl<'a> Activations<'a> {
    /// `x` widened, and with `interleave > 1` each run of `8·interleave` values reordered so
    /// that vector `p` holds the values `p, p + interleave, p + 2·interleave, …`.
    fn new<T: Float>(x: &'a [T], dims: QuantizedDims, interleave: usize) -> Activations<'a> {
        let mut values = match crate::matmul::same_type::<T, f32>(x) {
            Some(values) => Cow::Borrowed(values),
            None => Cow::Owned(x.iter().map(|v| v.to_f32()).collect()),
        };
        let group_sums = values
            .chunks_exact(dims.group_size)
            .map(|group| group.iter().sum())
            .collect();
        if interleave > 1 {
            let step = LANES * interleave;
            let mut reordered = vec![0.0f32; values.len()];
            for (to, from) in reordered
                .chunks_exact_mut(step)
                .zip(values.chunks_exact(step))
            {
                for (p, vector) in to.chunks_exact_mut(LANES).enumerate() {
                    for (i, value) in vector.iter_mut().enumerate() {
                        *value = from[i * interleave + p];
                    }
                }
            }
            values = Cow::Owned(reordered);
        }
        Activations {
            values,
            group_sums,
            dims,
        }
    }

    #[inline(always)]
    fn row(&self, row: usize) -> &[f32] {
        &self.values[row * self.dims.k..(row + 1) * self.dims.k]
    }

    #[inline(always)]
    fn group_sum(&self, row: usize, group: usize) -> f32 {
        self.group_sums[row * self.dims.groups() + group]
    }
}

/// Fills `columns`: consecutive parts, each the columns `y[.., first..first + rows]` for
/// `rows_per_part` weight rows (fewer in the last part), row-major `[m, rows]`; across threads
/// when the product is large.
fn product<T: Float, const BITS: u32>(
    weights: &Packed<'_, T>,
    x: &Activations<'_>,
    use_gemm: bool,
    rows_per_part: usize,
    columns: &mut [f32],
) {
    let QuantizedDims { m, n, k, .. } = weights.dims;
    parallel::for_each_part(columns, rows_per_part * m, m * n * k, |start, part| {
        let first_row = start / m;
        if use_gemm {
            dequantize_and_multiply::<T, BITS>(weights, x, first_row, part);
        } else {
            // The closure must be inlined to be compiled for wide vectors.
            with_wide_vectors(
                #[inline(always)]
                || tiles::<T, BITS>(weights, x, first_row, part),
            );
        }
    });
}

/// Fills one part (`[m, rows]`, from weight row `first_row`) tile by tile.
#[inline(always)]
fn tiles<T: Float, const BITS: u32>(
    weights: &Packed<'_, T>,
    x: &Activations<'_>,
    first_row: usize,
    part: &mut [f32],
) {
    if weights.dims.m == 1 {
        weight_tiles::<T, BITS, 1, W_ROWS>(weights, x, first_row, part);
    } else {
        weight_tiles::<T, BITS, X_ROWS, 1>(weights, x, first_row, part);
    }
}

/// Tiles of `WR` weight rows (the remainder one by one) over all rows of `x`.
#[inline(always)]
fn weight_tiles<T: Float, const BITS: u32, const XR: usize, const WR: usize>(
    weights: &Packed<'_, T>,
    x: &Activations<'_>,
    first_row: usize,
    part: &mut [f32],
) {
    let rows = part.len() / weights.dims.m;
    let whole = rows - rows % WR;
    for row in (0..whole).step_by(WR) {
        x_tiles::<T, BITS, XR, WR>(weights, x, (first_row, row), part);
    }
    for row in whole..rows {
        x_tiles::<T, BITS, XR, 1>(weights, x, (first_row, row), part);
    }
}

/// Tiles of `XR` rows of `x` (the remainder one by one) for the `WR` weight rows from
/// `first_row + row`, written to column `row..` of `part`.
#[inline(always)]
fn x_tiles<T: Float, const BITS: u32, const XR: usize, const WR: usize>(
    weights: &Packed<'_, T>,
    x: &Activations<'_>,
    (first_row, row): (usize, usize),
    part: &mut [f32],
) {
    let m = weights.dims.m;
    let rows = part.len() / m;
    let whole = m - m % XR;
    for x_row in (0..whole).step_by(XR) {
        let y = tile::<T, BITS, XR, WR>(weights, x, first_row + row, x_row);
        for (i, values) in y.iter().enumerate() {
            part[(x_row + i) * rows + row..][..WR].copy_from_slice(values);
        }
    }
    for x_row in whole..m {
        let y = tile::<T, BITS, 1, WR>(weights, x, first_row + row, x_row);
        part[x_row * rows + row..][..WR].copy_from_slice(&y[0]);
    }
}

/// `y[i][r]` for the `XR` rows of `x` from `x_row` and the `WR` weight rows from `w_row`.
/// Each result is summed in the same order whatever the tile, so a row's result does not
/// depend on which rows it was computed with.
#[inline(always)]
fn tile<T: Float, const BITS: u32, const XR: usize, const WR: usize>(
    weights: &Packed<'_, T>,
    x: &Activations<'_>,
    w_row: usize,
    x_row: usize,
) -> [[f32; WR]; XR] {
    let dims = weights.dims;
    let vectors = vectors_per_step(BITS);
    let step_len = LANES * vectors;
    let steps_per_group = dims.group_size / step_len;
    let w_rows: [&[u8]; WR] = from_fn(|r| weights.row(w_row + r));
    let x_rows: [&[f32]; XR] = from_fn(|i| x.row(x_row + i));
    let mut total = [[[0.0f32; LANES]; WR]; XR];
    for group in 0..dims.groups() {
        let mut dot = [[[0.0f32; LANES]; WR]; XR];
        for step in group * steps_per_group..(group + 1) * steps_per_group {
            let xs: [&[f32]; XR] = from_fn(|i| &x_rows[i][step * step_len..][..step_len]);
            for r in 0..WR {
                let q = decode_step::<BITS>(w_rows[r], step);
                for (p, levels) in q.iter().enumerate().take(vectors) {
                    for i in 0..XR {
                        for j in 0..LANES {
                            dot[i][r][j] += xs[i][p * LANES + j] * levels[j];
                        }
                    }
                }
            }
        }
        for r in 0..WR {
            let scale = weights.scale(w_row + r, group);
            for i in 0..XR {
                for j in 0..LANES {
                    total[i][r][j] += scale * dot[i][r][j];
                }
            }
        }
    }
    from_fn(|i| {
        from_fn(|r| {
            let bias: f32 = (0..dims.groups())
                .map(|g| weights.bias(w_row + r, g) * x.group_sum(x_row + i, g))
                .sum();
            horizontal_sum(total[i][r]) + bias
        })
    })
}

/// The sum of the lanes, pairwise as a vector reduction does it.
#[inline(always)]
fn horizontal_sum(lanes: [f32; LANES]) -> f32 {
    let half: [f32; 4] = from_fn(|j| lanes[j] + lanes[j + 4]);
    let quarter = [half[0] + half[2], half[1] + half[3]];
    quarter[0] + quarter[1]
}

/// Vectors of [`LANES`] values that [`decode_step`] produces for `bits`-bit values.
const fn vectors_per_step(bits: u32) -> usize {
    match bits {
        2 | 4 | 8 => 8 / bits as usize,
        _ => 1,
    }
}

/// Step `step` of a packed row as [`vectors_per_step`] vectors (the others are unused). For
/// 2, 4 and 8 bits a step is 8 bytes and vector `p` holds the `p`-th value of each byte: the
/// CPU widens the bytes at once. Otherwise a step is 8 values in order.
#[inline(always)]
fn decode_step<const BITS: u32>(row: &[u8], step: usize) -> [[f32; LANES]; 4] {
    match BITS {
        2 | 4 | 8 => {
            let mask = (1u32 << BITS) - 1;
            let bytes: &[u8; 8] = row[8 * step..][..8].try_into().expect("8 bytes");
            from_fn(|p| {
                from_fn(|i| ((u32::from(bytes[i]) >> (BITS as usize * p)) & mask) as i32 as f32)
            })
        }
        _ => {
            let mut vectors = [[0.0; LANES]; 4];
            vectors[0] = decode_in_order::<BITS>(row, step);
            vectors
        }
    }
}

/// The values `8·block..8·block + 8` of a packed row, in order, as floats.
#[inline(always)]
fn decode_in_order<const BITS: u32>(row: &[u8], block: usize) -> [f32; LANES] {
    // Eight values are `BITS` whole bytes; eight bytes from there hold them (fewer at the
    // end of the row).
    let start = block * BITS as usize;
    let bits = match row.get(start..start + 8) {
        Some(bytes) => u64::from_le_bytes(bytes.try_into().expect("8 bytes")),
        None => {
            let mut bytes = [0u8; 8];
            let tail = &row[start..];
            bytes[..tail.len()].copy_from_slice(tail);
            u64::from_le_bytes(bytes)
        }
    };
    // Four values are at most 24 bits: each half is one 32-bit lane, shifted per value.
    let halves = [bits as u32, (bits >> (4 * BITS)) as u32];
    let mask = (1u32 << BITS) - 1;
    // The values are below 2⁸: converting them as i32 is one instruction, as u32 is several.
    from_fn(|j| ((halves[j / 4] >> (BITS as usize * (j % 4))) & mask) as i32 as f32)
}

/// Weight rows per `gemm` block: at most [`MAX_GEMM_ROWS`], and the same number of blocks
/// for every thread.
fn gemm_block_rows(n: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let blocks_per_thread = n.div_ceil(threads * MAX_GEMM_ROWS).max(1);
    n.div_ceil(threads * blocks_per_thread).max(1)
}

/// Fills one part (`[m, rows]`, from weight row `first_row`): dequantize the weight rows, at
/// most [`GEMM_DEPTH`] columns at a time, into a scratch and multiply `x` by them with
/// `gemm`, on this thread (the parts run in parallel).
fn dequantize_and_multiply<T: Float, const BITS: u32>(
    weights: &Packed<'_, T>,
    x: &Activations<'_>,
    first_row: usize,
    part: &mut [f32],
) {
    let QuantizedDims {
        m, k, group_size, ..
    } = weights.dims;
    let rows = part.len() / m;
    let groups = weights.dims.groups();
    // Equal runs of whole groups, each at most GEMM_DEPTH columns.
    let runs = groups.div_ceil((GEMM_DEPTH / group_size).max(1)).max(1);
    let depth = groups.div_ceil(runs) * group_size;
    let mut scratch = vec![0.0f32; rows * depth.min(k)];
    for first_col in (0..k).step_by(depth.max(1)) {
        let cols = depth.min(k - first_col);
        let dense = &mut scratch[..rows * cols];
        with_wide_vectors(
            #[inline(always)]
            || dequantize_rows::<T, BITS>(weights, (first_row, first_col), cols, dense),
        );
        let dims = MatmulDims {
            m,
            n: rows,
            k: cols,
        };
        let x_cols = (&x.values[first_col..], k);
        matmul_transposed_f32(x_cols, (dense, cols), dims, first_col > 0, part);
    }
    if k == 0 {
        part.fill(0.0);
    }
}

/// Writes `cols` columns (whole groups) of the weights from row `first_row` and column
/// `first_col` as floats `s·q + b` into the rows of `dense`.
#[inline(always)]
fn dequantize_rows<T: Float, const BITS: u32>(
    weights: &Packed<'_, T>,
    (first_row, first_col): (usize, usize),
    cols: usize,
    dense: &mut [f32],
) {
    let group_size = weights.dims.group_size;
    for (r, values) in dense.chunks_exact_mut(cols).enumerate() {
        let row = first_row + r;
        let packed = weights.row(row);
        for (index, group_values) in values.chunks_exact_mut(group_size).enumerate() {
            let group = first_col / group_size + index;
            let (scale, bias) = (weights.scale(row, group), weights.bias(row, group));
            let first_block = group * group_size / LANES;
            for (block, lanes) in group_values.chunks_exact_mut(LANES).enumerate() {
                let q = decode_in_order::<BITS>(packed, first_block + block);
                for (value, level) in lanes.iter_mut().zip(q) {
                    *value = scale * level + bias;
                }
            }
        }
    }
}

/// `out` (`[m, n]`) from the parts of `columns` (see [`product`]), rounded to `T`.
fn gather_columns<T: Float>(columns: &[f32], n: usize, rows_per_part: usize, out: &mut [T]) {
    let m = out.len() / n;
    parallel::for_each_row(out, n, |i, out_row| {
        for (index, values) in out_row.chunks_mut(rows_per_part).enumerate() {
            let start = index * rows_per_part * m;
            let rows = values.len();
            let part_row = &columns[start + i * rows..][..rows];
            for (value, &sum) in values.iter_mut().zip(part_row) {
                *value = T::from_f32(sum);
            }
        }
    });
}

pub mod affine;
pub(crate) mod bfloat16;
#[cfg(test)]
mod tests;
