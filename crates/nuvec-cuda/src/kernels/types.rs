//! How each dtype looks inside a generated kernel: its storage type, how a value is loaded
//! into the type arithmetic runs in, and how a result is stored back.
//!
//! The kernels include no CUDA header (and compile as host C++ too, for the tests that run
//! them on the CPU): `float16` converts through the PTX `cvt` instructions
//! and `bfloat16` through bit operations (rounding to nearest even, a NaN kept quiet), the
//! rounding the CPU's `half` crate does, so a value stored from the same `float` has the same
//! bits on both devices. Half-precision arithmetic runs in `float`, as on the CPU.

use nuvec_cpu::DType;

/// The C type that holds one element of `dtype` in memory.
pub fn storage(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool | DType::U8 => "unsigned char",
        DType::U16 | DType::F16 | DType::BF16 => "unsigned short",
        DType::U32 => "unsigned int",
        DType::U64 => "unsigned long long",
        DType::I8 => "signed char",
        DType::I16 => "short",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::F32 => "float",
        DType::F64 => "double",
    }
}

/// The C type values of `dtype` are computed in: `float` for the half-precision types, the
/// storage type otherwise.
pub fn compute(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 | DType::BF16 => "float",
        other => storage(other),
    }
}

/// An expression loading `place` (an lvalue of `dtype`'s storage type) into its compute type.
pub fn load(dtype: DType, place: &str) -> String {
    match dtype {
        DType::F16 => format!("nv_f16_to_f32({place})"),
        DType::BF16 => format!("nv_bf16_to_f32({place})"),
        _ => place.to_string(),
    }
}

/// An expression turning `value` (of the compute type of `dtype`) into its storage type.
pub fn store(dtype: DType, value: &str) -> String {
    match dtype {
        DType::F16 => format!("nv_f32_to_f16({value})"),
        DType::BF16 => format!("nv_f32_to_bf16({value})"),
        DType::Bool => format!("(unsigned char)(({value}) != 0)"),
        other => format!("({})({value})", storage(other)),
    }
}

/// What every kernel source starts with: the vector of four elements the contiguous kernels
/// move in one access, and the conversions.
pub const PRELUDE: &str = r#"
typedef unsigned long long nv_u64;
/* Four adjacent elements, aligned so that one access moves them all (16 bytes of float). */
template <class T> struct alignas(4 * sizeof(T)) nv_pack { T e[4]; };
template <class T> __device__ __forceinline__ bool nv_packed(const T* p) {
    return ((nv_u64)p % sizeof(nv_pack<T>)) == 0;
}
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifdef __CUDACC_RTC__
__device__ __forceinline__ float nv_f16_to_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short nv_f32_to_f16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#else
/* Compiled as C++ on the host by the tests that run kernels on the CPU (no PTX there). */
inline float nv_f16_to_f32(unsigned short h) {
    _Float16 v;
    __builtin_memcpy(&v, &h, 2);
    return (float)v;
}
inline unsigned short nv_f32_to_f16(float f) {
    _Float16 v = (_Float16)f;
    unsigned short h;
    __builtin_memcpy(&h, &v, 2);
    return h;
}
#endif
__device__ __forceinline__ float nv_bf16_to_f32(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}
__device__ __forceinline__ unsigned short nv_f32_to_bf16(float f) {
    unsigned int x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((x >> 16) | 0x0040u);
    }
    unsigned int rounding = 0x7fffu + ((x >> 16) & 1u);
    return (unsigned short)((x + rounding) >> 16);
}
"#;

/// The C name of a dtype in generated kernel names.
pub fn tag(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "b8",
        DType::U8 => "u8",
        DType::U16 => "u16",
        DType::U32 => "u32",
        DType::U64 => "u64",
        DType::I8 => "i8",
        DType::I16 => "i16",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F32 => "f32",
        DType::F64 => "f64",
    }
}

/// Whether `dtype` is a floating-point type.
pub fn is_float(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
}
