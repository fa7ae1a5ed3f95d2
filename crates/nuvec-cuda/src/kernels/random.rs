//! MLX's random bits on the GPU: Threefry-2x32 (20 rounds) over the counter layout
//! `nuvec_cpu::threefry::fill_random_bytes` uses, so a key gives the same bits on both
//! devices. Each thread hashes one counter pair `(j, j + ceil(W / 2))` and writes words `j`
//! and `j + ceil(W / 2)`; with `W` odd, the middle word takes the first half of the hash of
//! `(W / 2, 0)`. Words are written as bytes, the last one cut to the bytes that remain.

use super::types::PRELUDE;
use super::Source;

/// The kernel filling `bytes` bytes from one key.
pub fn bits() -> Source {
    let name = "random_bits".to_string();
    let text = format!(
        r#"{PRELUDE}
__device__ __forceinline__ unsigned int nv_rotl(unsigned int x, unsigned int r) {{
    return (x << r) | (x >> (32u - r));
}}
__device__ void nv_threefry(unsigned int k0, unsigned int k1, unsigned int c0, unsigned int c1,
        unsigned int* out0, unsigned int* out1) {{
    const unsigned int rotations[2][4] = {{{{13, 15, 26, 6}}, {{17, 29, 16, 24}}}};
    unsigned int ks[3] = {{k0, k1, k0 ^ k1 ^ 0x1BD11BDAu}};
    unsigned int x0 = c0 + ks[0];
    unsigned int x1 = c1 + ks[1];
    for (unsigned int i = 0; i < 5; ++i) {{
        for (int r = 0; r < 4; ++r) {{
            x0 += x1;
            x1 = nv_rotl(x1, rotations[i % 2][r]);
            x1 ^= x0;
        }}
        x0 += ks[(i + 1) % 3];
        x1 += ks[(i + 2) % 3] + i + 1;
    }}
    *out0 = x0;
    *out1 = x1;
}}
__device__ __forceinline__ void nv_put(unsigned char* out, nv_u64 bytes, nv_u64 word, unsigned int value) {{
    for (int b = 0; b < 4; ++b) {{
        nv_u64 at = 4 * word + b;
        if (at < bytes) out[at] = (unsigned char)(value >> (8 * b));
    }}
}}
extern "C" __global__ void {name}(unsigned int k0, unsigned int k1, unsigned char* out, nv_u64 bytes) {{
    nv_u64 words = (bytes + 3) / 4;
    nv_u64 half = words / 2;
    nv_u64 offset = words - half;
    for (nv_u64 j = blockIdx.x * (nv_u64)blockDim.x + threadIdx.x; j < offset;
         j += (nv_u64)gridDim.x * blockDim.x) {{
        unsigned int a, b;
        if (j < half) {{
            nv_threefry(k0, k1, (unsigned int)j, (unsigned int)(j + offset), &a, &b);
            nv_put(out, bytes, j, a);
            nv_put(out, bytes, j + offset, b);
        }} else {{
            nv_threefry(k0, k1, (unsigned int)half, 0u, &a, &b);
            nv_put(out, bytes, half, a);
        }}
    }}
}}
"#
    );
    Source { name, text }
}
