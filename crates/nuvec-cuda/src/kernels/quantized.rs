//! Kernels of MLX's affine-quantized matrices: row `n` of `W` is `bits`-bit integers `q` laid
//! end to end, least significant bits first, in the bytes of its 32-bit words, with a scale
//! `s` and a bias `b` per group of values: `W[n][j] = s·q + b`, computed in `float` as the
//! CPU does (`nuvec_cpu::quantized`).
//!
//! - [`quantize`]: float rows to packed words, scales and biases, one thread per group, with
//!   the CPU's rounding (MLX's: the end of the larger magnitude made exact);
//! - [`dequantize`]: `W` written out in the activations' dtype, one thread per value (for
//!   products of many rows, which cuBLAS then multiplies);
//! - [`matvec`]: `y = x · Wᵀ` for a few rows of `x` (decoding), reading the packed weights
//!   once: one block per row of `W`, each thread a strided share of its values for every row
//!   of `x`, the shares folded by warp shuffles in a fixed order.

use super::reduce::fold_warps;
use super::types::{compute, is_float, load, storage, store, tag, PRELUDE};
use super::Source;
use nuvec_cpu::DType;

/// Threads per block of [`matvec`].
pub const MATVEC_THREADS: u32 = 128;
/// The most rows of `x` [`matvec`] takes; more are multiplied through [`dequantize`].
pub const MATVEC_MOST_ROWS: usize = 8;
/// The bit widths the kernels read.
pub const BITS: [u32; 6] = [2, 3, 4, 5, 6, 8];

/// Value `j` of a packed row: at bit `j·bits`, within two bytes for at most 8 bits (the second
/// read only when the value crosses into it, so a row's last byte is never passed).
const UNPACK: &str = r#"
__device__ __forceinline__ float nv_unpack(const unsigned char* row, nv_u64 j, unsigned int bits) {
    nv_u64 bit = j * bits;
    const unsigned char* at = row + (bit >> 3);
    unsigned int shift = (unsigned int)(bit & 7);
    unsigned int v = at[0];
    if (shift + bits > 8) v |= ((unsigned int)at[1]) << 8;
    return (float)((v >> shift) & ((1u << bits) - 1u));
}
"#;

fn supported(bits: u32, dtype: DType) -> bool {
    BITS.contains(&bits) && is_float(dtype) && dtype != DType::F64
}

/// `out[r][j] = s·q + b` for the `n × k` values of a packed matrix (`w`: `n` rows of
/// `k·bits/8` bytes; `scales`, `biases`: `n × k/group_size` of `dtype`).
pub fn dequantize(bits: u32, dtype: DType) -> Option<Source> {
    if !supported(bits, dtype) {
        return None;
    }
    let (s, name) = (storage(dtype), format!("dequantize_{bits}_{}", tag(dtype)));
    let scale = load(dtype, "scales[g]");
    let bias = load(dtype, "biases[g]");
    let value = store(dtype, "v");
    let text = format!(
        r#"{PRELUDE}{UNPACK}
extern "C" __global__ void {name}(const unsigned char* __restrict__ w,
        const {s}* __restrict__ scales, const {s}* __restrict__ biases, {s}* __restrict__ out,
        nv_u64 n, nv_u64 k, nv_u64 group_size) {{
    nv_u64 total = n * k, row_bytes = k * {bits} / 8, groups = k / group_size;
    for (nv_u64 i = blockIdx.x * (nv_u64)blockDim.x + threadIdx.x; i < total;
         i += (nv_u64)gridDim.x * blockDim.x) {{
        nv_u64 r = i / k, j = i % k;
        nv_u64 g = r * groups + j / group_size;
        float v = {scale} * nv_unpack(w + r * row_bytes, j, {bits}) + {bias};
        out[i] = {value};
    }}
}}
"#
    );
    Some(Source { name, text })
}

/// `y[r][c] = Σ_j x[r][j] · W[c][j]` for `m ≤ MATVEC_MOST_ROWS` rows of `x` (`m × k`, of
/// `dtype`) and the packed `W` (`n × k`); `y` is `m × n`. Launched with one block of
/// [`MATVEC_THREADS`] per row of `W`. Sums are in `float`, rounded once to `dtype`.
pub fn matvec(bits: u32, dtype: DType) -> Option<Source> {
    if !supported(bits, dtype) {
        return None;
    }
    let (s, t) = (storage(dtype), compute(dtype));
    let name = format!("qmv_{bits}_{}", tag(dtype));
    let scale = load(dtype, "scales[g]");
    let bias = load(dtype, "biases[g]");
    let xv = load(dtype, "x[r * k + j]");
    let result = store(dtype, "acc");
    let fold = fold_warps("float", "acc = acc + v;", "warp_sums", MATVEC_THREADS / 32);
    let threads = MATVEC_THREADS;
    let most = MATVEC_MOST_ROWS;
    let text = format!(
        r#"{PRELUDE}{UNPACK}
extern "C" __global__ void {name}(const {s}* __restrict__ x, const unsigned char* __restrict__ w,
        const {s}* __restrict__ scales, const {s}* __restrict__ biases, {s}* __restrict__ y,
        nv_u64 m, nv_u64 n, nv_u64 k, nv_u64 group_size) {{
    nv_u64 c = blockIdx.x;
    const unsigned char* row = w + c * (k * {bits} / 8);
    nv_u64 groups = k / group_size;
    float sums[{most}];
    for (int r = 0; r < {most}; r++) sums[r] = 0.0f;
    for (nv_u64 j = threadIdx.x; j < k; j += {threads}) {{
        nv_u64 g = c * groups + j / group_size;
        float weight = {scale} * nv_unpack(row, j, {bits}) + {bias};
        #pragma unroll
        for (int r = 0; r < {most}; r++) {{
            if ((nv_u64)r < m) {{
                {t} xr = {xv};
                sums[r] += (float)xr * weight;
            }}
        }}
    }}
    #pragma unroll
    for (int r = 0; r < {most}; r++) {{
        if ((nv_u64)r >= m) break;
        float acc = sums[r];
{fold}        if (threadIdx.x == 0) y[r * n + c] = {result};
        __syncthreads();
    }}
}}
"#
    );
    Some(Source { name, text })
}

/// Groups of `group_size` floats (a multiple of 32, so each group's values fill whole words)
/// to packed words, scales and biases: `(w, words, scales, biases, groups, group_size)`.
/// Each group's scale and bias are computed in `float` as the CPU computes them
/// (`nuvec-core`'s `group_parameters`), so the words, scales and biases are the CPU's bits.
pub fn quantize(bits: u32, dtype: DType) -> Option<Source> {
    if !supported(bits, dtype) {
        return None;
    }
    let s = storage(dtype);
    let name = format!("quantize_{bits}_{}", tag(dtype));
    let value = load(dtype, "v[j]");
    let (scale, bias) = (store(dtype, "scale"), store(dtype, "bias"));
    let text = format!(
        r#"{PRELUDE}
extern "C" __global__ void {name}(const {s}* __restrict__ w, unsigned int* __restrict__ words,
        {s}* __restrict__ scales, {s}* __restrict__ biases, nv_u64 groups, nv_u64 group_size) {{
    const float n_bins = (float)((1u << {bits}) - 1u);
    nv_u64 group_words = group_size * {bits} / 32;
    for (nv_u64 g = blockIdx.x * (nv_u64)blockDim.x + threadIdx.x; g < groups;
         g += (nv_u64)gridDim.x * blockDim.x) {{
        const {s}* v = w + g * group_size;
        float lo = INFINITY, hi = -INFINITY;
        for (nv_u64 j = 0; j < group_size; j++) {{
            float x = {value};
            lo = fminf(lo, x);
            hi = fmaxf(hi, x);
        }}
        bool low_end = fabsf(lo) > fabsf(hi);
        float scale = fmaxf((hi - lo) / n_bins, 1e-7f);
        if (!low_end) scale = -scale;
        float edge = low_end ? lo : hi;
        float q0 = rintf(edge / scale);
        float bias = 0.0f;
        if (q0 != 0.0f) {{
            scale = edge / q0;
            bias = edge;
        }}
        scales[g] = {scale};
        biases[g] = {bias};
        unsigned int* out = words + g * group_words;
        for (nv_u64 k = 0; k < group_words; k++) out[k] = 0u;
        for (nv_u64 j = 0; j < group_size; j++) {{
            float x = {value};
            /* NaN becomes level 0, as the CPU's saturating cast makes it. */
            float level = fminf(fmaxf(rintf((x - bias) / scale), 0.0f), n_bins);
            unsigned int q = (unsigned int)level;
            nv_u64 bit = j * {bits};
            nv_u64 at = bit / 32;
            unsigned int offset = (unsigned int)(bit % 32);
            out[at] |= q << offset;
            if (offset + {bits} > 32) out[at + 1] |= q >> (32 - offset);
        }}
    }}
}}
"#
    );
    Some(Source { name, text })
}
