//! Cumulative sums, products, maxima and minima along the middle axis of a contiguous
//! `[outer, len, inner]` view (`cumsum`, `cumprod`, `cummax`, `cummin`, either direction,
//! inclusive or not). One thread per `(outer, inner)` lane walks its `len` elements in order,
//! keeping the running value in the element type as the CPU does (MLX rounds each step), so
//! the results are the CPU's bit for bit. A lane is sequential: a single long row runs on
//! one thread.

use super::elementwise::{binary_expression, binary_helpers};
use super::reduce::limits;
use super::types::{compute, is_float, load, storage, store, tag, PRELUDE};
use super::Source;
use nuvec_cpu::binary::BinaryOp;
use nuvec_cpu::DType;

/// The ops a scan runs: add, multiply, maximum and minimum.
pub const SCAN_OPS: [BinaryOp; 4] = [
    BinaryOp::Add,
    BinaryOp::Multiply,
    BinaryOp::Maximum,
    BinaryOp::Minimum,
];

/// The scan of `op` over `dtype`: `(x, y, outer, len, inner, reverse, inclusive)`, or `None`
/// for another op or one without meaning for the dtype.
pub fn scan(op: BinaryOp, dtype: DType) -> Option<Source> {
    if !SCAN_OPS.contains(&op) {
        return None;
    }
    let expression = binary_expression(op, dtype)?;
    let (s, t) = (storage(dtype), compute(dtype));
    let identity = match (op, is_float(dtype)) {
        (BinaryOp::Add, _) => format!("({t})0"),
        (BinaryOp::Multiply, _) => format!("({t})1"),
        (BinaryOp::Maximum, true) => "-INFINITY".to_string(),
        (BinaryOp::Minimum, true) => "INFINITY".to_string(),
        (BinaryOp::Maximum, false) => format!("nv_lowest_{}()", tag(dtype)),
        _ => format!("nv_highest_{}()", tag(dtype)),
    };
    let name = format!("scan_{}_{}", op.name(), tag(dtype));
    let start = store(dtype, "a0");
    let step = store(dtype, &expression);
    let (la, lb) = (load(dtype, "acc"), load(dtype, "v"));
    let text = format!(
        r#"{PRELUDE}{}{}
extern "C" __global__ void {name}(const {s}* __restrict__ x, {s}* __restrict__ y, nv_u64 outer,
        nv_u64 len, nv_u64 inner, int reverse, int inclusive) {{
    {t} a0 = {identity};
    {s} none = {start};
    for (nv_u64 lane = blockIdx.x * (nv_u64)blockDim.x + threadIdx.x; lane < outer * inner;
         lane += (nv_u64)gridDim.x * blockDim.x) {{
        nv_u64 o = lane / inner, i = lane % inner;
        {s} acc = none;
        for (nv_u64 k = 0; k < len; k++) {{
            nv_u64 at = (o * len + (reverse ? len - 1 - k : k)) * inner + i;
            {s} v = x[at];
            if (!inclusive) y[at] = acc;
            if (k == 0 && inclusive) {{
                acc = v;
            }} else {{
                {t} a = {la};
                {t} b = {lb};
                acc = {step};
            }}
            if (inclusive) y[at] = acc;
        }}
    }}
}}
"#,
        binary_helpers(dtype),
        limits(dtype),
    );
    Some(Source { name, text })
}
