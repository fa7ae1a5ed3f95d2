//! Sorting each row of a contiguous `[rows, len]` array in place, ascending in NumPy's order
//! (NaN after every number), optionally carrying each element's index (`argsort`). One block
//! of [`SORT_THREADS`] per row runs a bitonic network over the row in device memory, the
//! length padded to a power of two with elements that sort after everything: every comparator
//! puts the smaller element first, so a padded element never moves into the row and the
//! comparators that would touch one are skipped. With indices, ties are broken by index, so
//! the order is the stable one the CPU gives.

use super::types::{compute, is_float, load, storage, tag, PRELUDE};
use super::Source;
use nuvec_cpu::DType;

/// Threads per block (one block per row).
pub const SORT_THREADS: u32 = 512;

/// The sort of rows of `dtype`: `(vals, idx, len, with_indices)`, `vals` sorted in place and,
/// `with_indices` nonzero, `idx` filled with the indices that sort each row.
pub fn sort_rows(dtype: DType) -> Source {
    let (s, t) = (storage(dtype), compute(dtype));
    let name = format!("sort_{}", tag(dtype));
    let va = load(dtype, "v[a]");
    let vb = load(dtype, "v[b]");
    let nan = if is_float(dtype) {
        // NaN after every number; two NaNs tie.
        r#"
    bool an = a != a, bn = b != b;
    if (an || bn) return (an && bn) ? (with_indices && ia > ib) : an;"#
    } else {
        ""
    };
    let threads = SORT_THREADS;
    let text = format!(
        r#"{PRELUDE}
/* Whether (a, ia) sorts after (b, ib). */
__device__ __forceinline__ bool nv_after({t} a, unsigned int ia, {t} b, unsigned int ib, int with_indices) {{{nan}
    if (a != b) return a > b;
    return with_indices && ia > ib;
}}
extern "C" __global__ void {name}({s}* __restrict__ vals, unsigned int* __restrict__ idx,
        nv_u64 len, int with_indices) {{
    {s}* v = vals + blockIdx.x * len;
    unsigned int* x = with_indices ? idx + blockIdx.x * len : idx;
    if (with_indices) {{
        for (nv_u64 i = threadIdx.x; i < len; i += {threads}) x[i] = (unsigned int)i;
    }}
    __syncthreads();
    nv_u64 padded = 1;
    while (padded < len) padded <<= 1;
    for (nv_u64 size = 2; size <= padded; size <<= 1) {{
        for (nv_u64 half = size / 2; half > 0; half >>= 1) {{
            for (nv_u64 i = threadIdx.x; i < padded / 2; i += {threads}) {{
                nv_u64 a, b;
                if (half == size / 2) {{
                    /* The first step of a merge compares mirror images: both halves ascend. */
                    nv_u64 block = i / half, offset = i % half;
                    a = block * size + offset;
                    b = block * size + size - 1 - offset;
                }} else {{
                    a = (i / half) * half * 2 + (i % half);
                    b = a + half;
                }}
                if (b < len) {{
                    unsigned int ia = with_indices ? x[a] : 0u, ib = with_indices ? x[b] : 0u;
                    if (nv_after({va}, ia, {vb}, ib, with_indices)) {{
                        {s} kept = v[a];
                        v[a] = v[b];
                        v[b] = kept;
                        if (with_indices) {{
                            x[a] = ib;
                            x[b] = ia;
                        }}
                    }}
                }}
            }}
            __syncthreads();
        }}
    }}
}}
"#
    );
    Source { name, text }
}
