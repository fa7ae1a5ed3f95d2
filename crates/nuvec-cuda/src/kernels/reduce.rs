//! Reductions along the last axis of a contiguous `[rows, cols]` view (the caller moves the
//! reduced axes last): sum, product, max, min, argmax, argmin and logsumexp, and softmax. One
//! block of [`BLOCK`] threads per row: each thread folds a strided share of the row, then the
//! block folds the threads' values by warp shuffles and one pass through shared memory,
//! always in the same order, so a rerun gives the same bits. Half precision accumulates in `float`, as the CPU does; the order of
//! the additions differs from the CPU's, so float sums agree within rounding, not bitwise.

use super::types::{compute, is_float, load, storage, store, tag, PRELUDE};
use super::Source;
use nuvec_cpu::DType;

/// Threads per block (one block per row).
pub const BLOCK: u32 = 256;
/// Warps per block.
const WARPS: u32 = BLOCK / 32;

/// Folds each thread's `acc` (of type `t`) over a block of [`BLOCK`] threads: see
/// [`fold_warps`].
fn fold_block(t: &str, combine: &str, name: &str) -> String {
    fold_warps(t, combine, name, WARPS)
}

/// Folds each thread's `acc` (of type `t`) over a block of `warps` warps in a fixed order, so
/// a rerun gives the same bits: within each warp by shuffles (lane `l` takes lane
/// `l + offset`'s value), then the warps' values within the first warp, through the shared
/// array `name`. `combine` is a statement updating `acc` with `v`. Thread 0 ends with the
/// block's value. Every thread of the block must run it.
pub(crate) fn fold_warps(t: &str, combine: &str, name: &str, warps: u32) -> String {
    format!(
        r#"
    __shared__ {t} {name}[{warps}];
    for (int offset = 16; offset > 0; offset /= 2) {{
        {t} v = ({t})__shfl_down_sync(0xffffffffu, acc, offset);
        {combine}
    }}
    if ((threadIdx.x & 31u) == 0u) {name}[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32u) {{
        acc = {name}[threadIdx.x < {warps}u ? threadIdx.x : 0u];
        for (int offset = {warps} / 2; offset > 0; offset /= 2) {{
            {t} v = ({t})__shfl_down_sync(0xffffffffu, acc, offset);
            {combine}
        }}
    }}
"#
    )
}

/// A loop running `body` with `v` (of compute type `t`) bound to each element of the row
/// `x[base..base + cols]` of `input` that this thread folds. Where the row is aligned to
/// whole packs, the thread reads pack `p = threadIdx.x, threadIdx.x + blockDim.x, …` in one
/// access each, several in flight; otherwise element `j` likewise. The order is fixed by the
/// row's shape and alignment, so a rerun gives the same bits.
fn row_loop(input: DType, t: &str, body: &str) -> String {
    let ts = storage(input);
    format!(
        r#"
    if (cols % 4 == 0 && nv_packed(x + base)) {{
        const nv_pack<{ts}>* packs = (const nv_pack<{ts}>*)(x + base);
        #pragma unroll 4
        for (nv_u64 p = threadIdx.x; p < cols / 4; p += blockDim.x) {{
            nv_pack<{ts}> q = packs[p];
            #pragma unroll
            for (int e = 0; e < 4; e++) {{ {t} v = ({t})({loaded}); {body} }}
        }}
    }} else {{
        for (nv_u64 j = threadIdx.x; j < cols; j += blockDim.x) {{ {t} v = ({t})({element}); {body} }}
    }}
"#,
        loaded = load(input, "q.e[e]"),
        element = load(input, "x[base + j]"),
    )
}

/// A reduction along the last axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// The sum.
    Sum,
    /// The product.
    Prod,
    /// The largest value (NaN wins).
    Max,
    /// The smallest value (NaN wins).
    Min,
    /// The index (`uint32`) of the first largest value.
    ArgMax,
    /// The index (`uint32`) of the first smallest value.
    ArgMin,
    /// `log(sum(exp(x)))`, computed after subtracting the row's maximum.
    LogSumExp,
}

impl Reduction {
    /// The reduction's name in kernel names.
    pub fn name(self) -> &'static str {
        match self {
            Reduction::Sum => "sum",
            Reduction::Prod => "prod",
            Reduction::Max => "max",
            Reduction::Min => "min",
            Reduction::ArgMax => "argmax",
            Reduction::ArgMin => "argmin",
            Reduction::LogSumExp => "logsumexp",
        }
    }

    /// Every reduction.
    pub const ALL: [Reduction; 7] = [
        Reduction::Sum,
        Reduction::Prod,
        Reduction::Max,
        Reduction::Min,
        Reduction::ArgMax,
        Reduction::ArgMin,
        Reduction::LogSumExp,
    ];
}

/// The identity and the fold of a value reduction in type `t` (`None` for the others).
fn fold(reduction: Reduction, dtype: DType) -> Option<(String, &'static str)> {
    let t = compute(dtype);
    let float = is_float(dtype);
    let (lowest, highest) = if float {
        ("-INFINITY".to_string(), "INFINITY".to_string())
    } else {
        (
            format!("nv_lowest_{}()", tag(dtype)),
            format!("nv_highest_{}()", tag(dtype)),
        )
    };
    Some(match reduction {
        Reduction::Sum => (format!("({t})0"), "acc + v"),
        Reduction::Prod => (format!("({t})1"), "acc * v"),
        Reduction::Max if float => (lowest, "((acc != acc) || acc > v ? acc : v)"),
        Reduction::Max => (lowest, "(acc > v ? acc : v)"),
        Reduction::Min if float => (highest, "((acc != acc) || acc < v ? acc : v)"),
        Reduction::Min => (highest, "(acc < v ? acc : v)"),
        _ => return None,
    })
}

/// The extremes of an integer type, for max and min.
pub(crate) fn limits(dtype: DType) -> String {
    if is_float(dtype) {
        return String::new();
    }
    let (t, tg) = (compute(dtype), tag(dtype));
    let (low, high) = match dtype {
        DType::Bool => ("0", "1"),
        DType::U8 => ("0", "255"),
        DType::U16 => ("0", "65535"),
        DType::U32 => ("0", "4294967295u"),
        DType::U64 => ("0", "18446744073709551615ull"),
        DType::I8 => ("-128", "127"),
        DType::I16 => ("-32768", "32767"),
        DType::I32 => ("(-2147483647 - 1)", "2147483647"),
        _ => ("(-9223372036854775807ll - 1)", "9223372036854775807ll"),
    };
    format!(
        "__device__ __forceinline__ {t} nv_lowest_{tg}() {{ return ({t}){low}; }}\n\
         __device__ __forceinline__ {t} nv_highest_{tg}() {{ return ({t}){high}; }}\n"
    )
}

/// The kernel of `reduction` over rows of `input`, writing one `output` per row (`uint32`
/// for the arg reductions), or `None` where it has no meaning (logsumexp of integers).
pub fn row_reduction(reduction: Reduction, input: DType, output: DType) -> Option<Source> {
    let name = format!("reduce_{}_{}_{}", reduction.name(), tag(input), tag(output));
    let (ti, to) = (storage(input), storage(output));
    let loaded = load(input, "x[base + j]");
    let body = match reduction {
        Reduction::ArgMax | Reduction::ArgMin => {
            let t = compute(input);
            let better = match (reduction, is_float(input)) {
                (Reduction::ArgMax, true) => "(v != v && best == best) || v > best",
                (Reduction::ArgMax, false) => "v > best",
                (_, true) => "(v != v && best == best) || v < best",
                (_, false) => "v < best",
            };
            // Each thread keeps its first best; the fold keeps the lower index on ties.
            format!(
                r#"
    {t} best = {first};
    unsigned int at = 0xffffffffu;
    for (nv_u64 j = threadIdx.x; j < cols; j += blockDim.x) {{
        {t} v = {loaded};
        if (at == 0xffffffffu || {better}) {{ best = v; at = (unsigned int)j; }}
    }}
    /* Folded as values are, the lower index kept on ties. */
    __shared__ {t} warp_values[{WARPS}];
    __shared__ unsigned int warp_indices[{WARPS}];
    for (int offset = 16; offset > 0; offset /= 2) {{
        {t} v = ({t})__shfl_down_sync(0xffffffffu, best, offset);
        unsigned int j = __shfl_down_sync(0xffffffffu, at, offset);
        {take}
    }}
    if ((threadIdx.x & 31u) == 0u) {{
        warp_values[threadIdx.x >> 5] = best;
        warp_indices[threadIdx.x >> 5] = at;
    }}
    __syncthreads();
    if (threadIdx.x < 32u) {{
        best = warp_values[threadIdx.x < {WARPS}u ? threadIdx.x : 0u];
        at = warp_indices[threadIdx.x < {WARPS}u ? threadIdx.x : 0u];
        for (int offset = {WARPS} / 2; offset > 0; offset /= 2) {{
            {t} v = ({t})__shfl_down_sync(0xffffffffu, best, offset);
            unsigned int j = __shfl_down_sync(0xffffffffu, at, offset);
            {take}
        }}
    }}
    if (threadIdx.x == 0) y[row] = ({to})at;
"#,
                first = load(input, "x[base]"),
                take = format!(
                    "if (j != 0xffffffffu && (at == 0xffffffffu || ({better}) || (v == best && j < at))) {{ best = v; at = j; }}"
                ),
            )
        }
        Reduction::LogSumExp => {
            if !is_float(input) {
                return None;
            }
            let s = if input == DType::F64 { "" } else { "f" };
            let t = compute(input);
            format!(
                "{}    if (threadIdx.x == 0) y[row] = {stored};\n",
                max_and_exp_sum(t, s, &|body| row_loop(input, t, body)),
                stored = store(output, &format!("(isinf(top) ? top : top + log{s}(total))")),
            )
        }
        _ => {
            let t = compute(output);
            let (identity, step) = fold(reduction, output)?;
            format!(
                r#"
    {t} acc = {identity};
{each}{fold}    if (threadIdx.x == 0) y[row] = {stored};
"#,
                each = row_loop(input, t, &format!("acc = {step};")),
                fold = fold_block(t, &format!("acc = {step};"), "warps"),
                stored = store(output, "acc"),
            )
        }
    };
    let helpers = if input == output {
        limits(output)
    } else {
        limits(output) + &limits(input)
    };
    let text = format!(
        r#"{PRELUDE}{helpers}
extern "C" __global__ void {name}(const {ti}* __restrict__ x, {to}* __restrict__ y, nv_u64 rows, nv_u64 cols) {{
    nv_u64 row = blockIdx.x;
    if (row >= rows) return;
    nv_u64 base = row * cols;
{body}
}}
"#
    );
    Some(Source { name, text })
}

/// The code, for the block of a row, that leaves the row's largest value in `top` and the sum
/// of `exp(x - top)` in `total` (0 for a row whose largest value is infinite): `t` is the
/// compute type, `s` its math functions' suffix, `each` a loop running its body with `v`
/// bound to each of the thread's elements ([`row_loop`], or the registers of softmax).
fn max_and_exp_sum(t: &str, s: &str, each: &dyn Fn(&str) -> String) -> String {
    format!(
        r#"
    __shared__ {t} row_values[2];
    {t} acc = -INFINITY;
{largest_each}{largest}    if (threadIdx.x == 0) row_values[0] = acc;
    __syncthreads();
    {t} top = row_values[0];
    acc = 0;
    if (!isinf(top)) {{
{sum_each}    }}
{sum}    if (threadIdx.x == 0) row_values[1] = acc;
    __syncthreads();
    {t} total = row_values[1];
"#,
        largest_each = each("acc = (acc != acc) || acc > v ? acc : v;"),
        largest = fold_block(
            t,
            "acc = (acc != acc) || acc > v ? acc : v;",
            "warp_largest"
        ),
        sum_each = each(&format!("acc += exp{s}(v - top);")),
        sum = fold_block(t, "acc = acc + v;", "warp_sums"),
    )
}

/// Packs of a row each thread of softmax keeps in registers: rows of up to
/// `4 × KEPT × BLOCK` elements (8192) are read once, others three times.
const KEPT: u32 = 8;

/// Softmax along the last axis of rows of a float `dtype`: `exp(x - max) / sum`, accumulated
/// in `float` for half precision (MLX's precise softmax). A row of whole packs that fits the
/// block's registers is read from memory once; the sums run in the same order either way.
pub fn softmax(dtype: DType) -> Option<Source> {
    if !is_float(dtype) {
        return None;
    }
    let name = format!("softmax_{}", tag(dtype));
    let (ts, t) = (storage(dtype), compute(dtype));
    let s = if dtype == DType::F64 { "" } else { "f" };
    let stored = store(dtype, &format!("exp{s}(v - top) / total"));
    let kept_value = load(dtype, "q[r].e[e]");
    let kept = |body: &str| {
        format!(
            r#"    #pragma unroll
    for (int r = 0; r < {KEPT}; r++) {{
        nv_u64 p = threadIdx.x + (nv_u64)r * blockDim.x;
        if (p < cols / 4) {{
            #pragma unroll
            for (int e = 0; e < 4; e++) {{ {t} v = {kept_value}; {body} }}
        }}
    }}
"#
        )
    };
    let in_registers = max_and_exp_sum(t, s, &kept);
    let streamed = max_and_exp_sum(t, s, &|body| row_loop(dtype, t, body));
    let loaded = load(dtype, "x[base + j]");
    let most = 4 * KEPT * BLOCK;
    let text = format!(
        r#"{PRELUDE}
extern "C" __global__ void {name}(const {ts}* __restrict__ x, {ts}* __restrict__ y, nv_u64 rows, nv_u64 cols) {{
    nv_u64 row = blockIdx.x;
    if (row >= rows) return;
    nv_u64 base = row * cols;
    if (cols % 4 == 0 && cols <= {most} && nv_packed(x + base) && nv_packed(y + base)) {{
        const nv_pack<{ts}>* packs = (const nv_pack<{ts}>*)(x + base);
        nv_pack<{ts}>* outs = (nv_pack<{ts}>*)(y + base);
        nv_pack<{ts}> q[{KEPT}];
        #pragma unroll
        for (int r = 0; r < {KEPT}; r++) {{
            nv_u64 p = threadIdx.x + (nv_u64)r * blockDim.x;
            if (p < cols / 4) q[r] = packs[p];
        }}
{in_registers}        #pragma unroll
        for (int r = 0; r < {KEPT}; r++) {{
            nv_u64 p = threadIdx.x + (nv_u64)r * blockDim.x;
            if (p < cols / 4) {{
                nv_pack<{ts}> o;
                #pragma unroll
                for (int e = 0; e < 4; e++) {{ {t} v = {kept_value}; o.e[e] = {stored}; }}
                outs[p] = o;
            }}
        }}
        return;
    }}
{streamed}    for (nv_u64 j = threadIdx.x; j < cols; j += blockDim.x) {{ {t} v = {loaded}; y[base + j] = {stored}; }}
}}
"#
    );
    Some(Source { name, text })
}
