//! Layout kernels: a strided copy (transposes, slices, broadcasts made real, and each part of
//! a concatenation written at its offset), and gathers along an axis (`take`,
//! `take_along_axis`) with MLX's negative indices. Element sizes only matter, so one kernel
//! per element width serves every dtype.

use super::elementwise::{contiguous, Operand, DIMS_STRUCT, PER_THREAD};
use super::types::PRELUDE;
use super::Source;

/// The C type moving elements of `bytes` bytes.
fn word(bytes: usize) -> Option<&'static str> {
    Some(match bytes {
        1 => "unsigned char",
        2 => "unsigned short",
        4 => "unsigned int",
        8 => "unsigned long long",
        _ => return None,
    })
}

/// `y[offset_y(i)] = x[offset_x(i)]` over the output's shape, for elements of `bytes` bytes:
/// operand 0 of the layout is the source, operand 2 the destination.
pub fn strided_copy(bytes: usize) -> Option<Source> {
    let w = word(bytes)?;
    let name = format!("copy_{}", 8 * bytes);
    let operand = |pointer| Operand {
        pointer,
        ty: w,
        stride: None,
    };
    let text = format!(
        r#"{PRELUDE}{DIMS_STRUCT}
extern "C" __global__ void {name}(const {w}* __restrict__ x, {w}* __restrict__ y, nv_u64 n, nv_dims d) {{
    // Both sides contiguous (merged into one dimension of stride 1): no index arithmetic, and
    // {PER_THREAD} elements per thread and step, in packs, all loaded before any is stored.
    if (nv_flat_copy(d)) {{
{loops}        return;
    }}
    for (nv_u64 i = blockIdx.x * (nv_u64)blockDim.x + threadIdx.x; i < n;
         i += (nv_u64)gridDim.x * blockDim.x) {{
        y[nv_offset(d, 2, i)] = x[nv_offset(d, 0, i)];
    }}
}}
"#,
        loops = contiguous(&[operand("x")], &operand("y"), "out = l0;")
    );
    Some(Source { name, text })
}

/// A gather along one axis of a contiguous source viewed as `[outer, axis, inner]`: output
/// element `(o, k, i)` is source `(o, index[o, k, i] or index[k], i)`, with `per_element`
/// choosing `take_along_axis`'s indices (one per output element) over `take`'s (one per `k`).
/// Indices are `int32`; a negative one counts from the end; one out of range sets the flag
/// the caller reads back and turns into an error naming it.
pub fn gather(bytes: usize) -> Option<Source> {
    let w = word(bytes)?;
    let name = format!("gather_{}", 8 * bytes);
    let text = format!(
        r#"{PRELUDE}
extern "C" __global__ void {name}(const {w}* __restrict__ x, const int* __restrict__ index,
        {w}* __restrict__ y, nv_u64 outer, nv_u64 axis, nv_u64 taken, nv_u64 inner,
        int per_element, int* __restrict__ out_of_range) {{
    nv_u64 n = outer * taken * inner;
    for (nv_u64 i = blockIdx.x * (nv_u64)blockDim.x + threadIdx.x; i < n;
         i += (nv_u64)gridDim.x * blockDim.x) {{
        nv_u64 in = i % inner;
        nv_u64 k = (i / inner) % taken;
        nv_u64 o = i / (inner * taken);
        long long at = per_element ? index[i] : index[k];
        if (at < 0) at += (long long)axis;
        if (at < 0 || at >= (long long)axis) {{
            atomicExch(out_of_range, 1);
            at = 0;
        }}
        y[i] = x[(o * axis + (nv_u64)at) * inner + in];
    }}
}}
"#
    );
    Some(Source { name, text })
}

/// `where`: `y[i] = c[i * sc] ? a[i * sa] : b[i * sb]` for elements of `bytes` bytes, each
/// stride 1 for an operand of the output's size or 0 for a scalar (the condition is `bool`).
pub fn select(bytes: usize) -> Option<Source> {
    let w = word(bytes)?;
    let name = format!("select_{}", 8 * bytes);
    let text = format!(
        r#"{PRELUDE}
extern "C" __global__ void {name}(const unsigned char* __restrict__ c, nv_u64 sc,
        const {w}* __restrict__ a, nv_u64 sa, const {w}* __restrict__ b, nv_u64 sb,
        {w}* __restrict__ y, nv_u64 n) {{
    for (nv_u64 i = blockIdx.x * (nv_u64)blockDim.x + threadIdx.x; i < n;
         i += (nv_u64)gridDim.x * blockDim.x) {{
        y[i] = c[i * sc] ? a[i * sa] : b[i * sb];
    }}
}}
"#
    );
    Some(Source { name, text })
}

/// Every width the layout kernels move.
pub const WIDTHS: [usize; 4] = [1, 2, 4, 8];
