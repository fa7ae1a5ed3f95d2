//! Scatter-add along an axis (the adjoint of `take` and `take_along_axis`): over the
//! contiguous `[outer, taken, inner]` updates and their `int32` indices, `out[p, index, q] +=
//! update[p, j, q]` into zeros of `[outer, len, inner]`. One thread per `(p, q)` lane zeroes
//! its column of the output and adds its updates in order of `j`, rounding each sum to the
//! element type: the CPU's order and bits, and no atomics. A negative index counts from the
//! end; one out of range sets the flag the caller turns into an error.

use super::elementwise::{binary_expression, binary_helpers};
use super::types::{compute, load, storage, store, tag, PRELUDE};
use super::Source;
use nuvec_cpu::binary::BinaryOp;
use nuvec_cpu::DType;

/// The scatter-add of `dtype`: `(updates, index, out, outer, taken, len, inner, flag)`, or
/// `None` where addition has no meaning for the dtype.
pub fn scatter_add(dtype: DType) -> Option<Source> {
    let sum = binary_expression(BinaryOp::Add, dtype)?;
    let (s, t) = (storage(dtype), compute(dtype));
    let name = format!("scatter_add_{}", tag(dtype));
    let zero = store(dtype, &format!("({t})0"));
    let (la, lb) = (load(dtype, "out[to]"), load(dtype, "u[from]"));
    let result = store(dtype, &sum);
    let text = format!(
        r#"{PRELUDE}{}
extern "C" __global__ void {name}(const {s}* __restrict__ u, const int* __restrict__ index,
        {s}* __restrict__ out, nv_u64 outer, nv_u64 taken, nv_u64 len, nv_u64 inner,
        int* __restrict__ out_of_range) {{
    for (nv_u64 lane = blockIdx.x * (nv_u64)blockDim.x + threadIdx.x; lane < outer * inner;
         lane += (nv_u64)gridDim.x * blockDim.x) {{
        nv_u64 p = lane / inner, q = lane % inner;
        for (nv_u64 k = 0; k < len; k++) out[(p * len + k) * inner + q] = {zero};
        for (nv_u64 j = 0; j < taken; j++) {{
            nv_u64 from = (p * taken + j) * inner + q;
            long long at = index[from];
            if (at < 0) at += (long long)len;
            if (at < 0 || at >= (long long)len) {{
                atomicExch(out_of_range, 1);
                continue;
            }}
            nv_u64 to = (p * len + (nv_u64)at) * inner + q;
            {t} a = {la};
            {t} b = {lb};
            out[to] = {result};
        }}
    }}
}}
"#,
        binary_helpers(dtype)
    );
    Some(Source { name, text })
}
