//! Element-wise kernels: unary and binary ops over any dtype, generated as CUDA C for NVRTC.
//!
//! Each source defines two entry points: `<name>_c` over contiguous operands of `n` elements,
//! and `<name>_s` over strided ones (broadcast inputs have stride 0), addressed through a
//! [`Dims`](crate::ops::Dims)-shaped parameter of up to [`MAX_DIMS`] dimensions. Values are computed as the CPU
//! computes them (`nuvec_cpu::UnaryOp::apply_f32` and friends): half precision in `float`
//! with the result rounded to the type at the same steps, `float64` in `double`, integers
//! with wrapping arithmetic and MLX's rules for division and remainder by zero.

use super::types::{compute, is_float, load, storage, store, tag, PRELUDE};
use super::Source;
use nuvec_cpu::binary::BinaryOp;
use nuvec_cpu::unary::UnaryOp;
use nuvec_cpu::DType;

/// The most dimensions a strided element-wise kernel addresses (after merging dimensions that
/// are contiguous in every operand).
pub const MAX_DIMS: usize = 8;

/// The strided kernels' layout parameter, as the kernels declare it: the output's shape and,
/// per operand (output last), its strides in elements.
pub(crate) const DIMS_STRUCT: &str = r#"
struct nv_dims {
    int ndim;
    long long shape[8];
    long long strides[3][8];
};
__device__ __forceinline__ long long nv_offset(const nv_dims& d, int operand, nv_u64 index) {
    long long offset = 0;
    for (int k = d.ndim - 1; k >= 0; --k) {
        long long extent = d.shape[k];
        offset += (long long)(index % (nv_u64)extent) * d.strides[operand][k];
        index /= (nv_u64)extent;
    }
    return offset;
}
__device__ __forceinline__ bool nv_flat_copy(const nv_dims& d) {
    return d.ndim == 0 || (d.ndim == 1 && d.strides[0][0] == 1 && d.strides[2][0] == 1);
}
"#;

/// The suffix of `float` math functions for a compute type (`expf` against `exp`).
fn suffix(dtype: DType) -> &'static str {
    if dtype == DType::F64 {
        ""
    } else {
        "f"
    }
}

/// `value` rounded to `dtype` and back (the CPU rounds half-precision results at each step).
pub(crate) fn rounded(dtype: DType, value: &str) -> String {
    match dtype {
        DType::F16 | DType::BF16 => load(dtype, &store(dtype, value)),
        _ => value.to_string(),
    }
}

fn is_unsigned(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::Bool | DType::U8 | DType::U16 | DType::U32 | DType::U64
    )
}

/// The expression of `op` applied to `v` (of `dtype`'s compute type), or `None` where the op
/// has no meaning for the dtype.
pub fn unary_expression(op: UnaryOp, dtype: DType) -> Option<String> {
    let t = compute(dtype);
    if !is_float(dtype) {
        return match op {
            UnaryOp::Abs if is_unsigned(dtype) => Some("v".into()),
            UnaryOp::Abs => Some(format!("(v < 0 ? ({t})(0 - v) : v)")),
            UnaryOp::Negative => Some(format!("({t})(0 - v)")),
            UnaryOp::Sign if is_unsigned(dtype) => Some(format!("({t})(v != 0)")),
            UnaryOp::Sign => Some(format!("({t})((v > 0) - (v < 0))")),
            UnaryOp::Square => Some(format!("({t})(v * v)")),
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => Some("v".into()),
            _ => None,
        };
    }
    let s = suffix(dtype);
    let call = |name: &str| format!("{name}{s}(v)");
    Some(match op {
        UnaryOp::Abs => call("fabs"),
        UnaryOp::Negative => "-v".into(),
        UnaryOp::Sign => format!("(v > 0 ? ({t})1 : (v < 0 ? ({t})-1 : v))"),
        UnaryOp::Square => "v * v".into(),
        UnaryOp::Sqrt => call("sqrt"),
        UnaryOp::Rsqrt => format!("({t})1 / sqrt{s}(v)"),
        UnaryOp::Reciprocal => format!("({t})1 / v"),
        UnaryOp::Exp => call("exp"),
        UnaryOp::Expm1 => call("expm1"),
        UnaryOp::Log => call("log"),
        UnaryOp::Log1p => call("log1p"),
        UnaryOp::Log2 => call("log2"),
        UnaryOp::Log10 => call("log10"),
        UnaryOp::Sin => call("sin"),
        UnaryOp::Cos => call("cos"),
        UnaryOp::Tan => call("tan"),
        UnaryOp::Tanh => call("tanh"),
        UnaryOp::Sinh => call("sinh"),
        UnaryOp::Cosh => call("cosh"),
        UnaryOp::ArcSin => call("asin"),
        UnaryOp::ArcCos => call("acos"),
        UnaryOp::ArcTan => call("atan"),
        UnaryOp::ArcSinh => call("asinh"),
        UnaryOp::ArcCosh => call("acosh"),
        UnaryOp::ArcTanh => call("atanh"),
        // As the CPU: 1 / (1 + e^|v|) on the negative side, one minus it on the other, so
        // neither end overflows.
        UnaryOp::Sigmoid => format!(
            "(v < 0 ? ({t})1 / (({t})1 + exp{s}(fabs{s}(v))) : ({t})1 - ({t})1 / (({t})1 + exp{s}(fabs{s}(v))))"
        ),
        UnaryOp::Erf => call("erf"),
        UnaryOp::ErfInv => call("erfinv"),
        UnaryOp::Floor => call("floor"),
        UnaryOp::Ceil => call("ceil"),
        UnaryOp::Round => call("rint"),
    })
}

/// The expression of `op` applied to `a` and `b` (of `dtype`'s compute type), producing the
/// compute type of the output (`bool` results as 0 or 1), or `None` where it has no meaning.
pub fn binary_expression(op: BinaryOp, dtype: DType) -> Option<String> {
    let t = compute(dtype);
    let float = is_float(dtype);
    let s = suffix(dtype);
    let r = |v: &str| rounded(dtype, v);
    Some(match op {
        BinaryOp::Add => format!("({t})(a + b)"),
        BinaryOp::Subtract => format!("({t})(a - b)"),
        BinaryOp::Multiply => format!("({t})(a * b)"),
        BinaryOp::Divide if float => "a / b".into(),
        BinaryOp::Divide => format!("(b == 0 ? ({t})0 : ({t})(a / b))"),
        BinaryOp::Power if float => format!("pow{s}(a, b)"),
        BinaryOp::Power => format!("nv_ipow_{}(a, b)", tag(dtype)),
        BinaryOp::Remainder if float => {
            format!("nv_fmod_py{s}(a, b)")
        }
        BinaryOp::Remainder => format!("nv_irem_{}(a, b)", tag(dtype)),
        BinaryOp::FloorDivide if float => format!("floor{s}({})", r("a / b")),
        BinaryOp::FloorDivide => format!("nv_ifloordiv_{}(a, b)", tag(dtype)),
        BinaryOp::Maximum if float => "((a != a) || a > b ? a : b)".into(),
        BinaryOp::Maximum => "(a > b ? a : b)".into(),
        BinaryOp::Minimum if float => "((a != a) || a < b ? a : b)".into(),
        BinaryOp::Minimum => "(a < b ? a : b)".into(),
        BinaryOp::LogAddExp if float => format!("nv_logaddexp{s}(a, b)"),
        BinaryOp::ArcTan2 if float => format!("atan2{s}(a, b)"),
        BinaryOp::LogAddExp | BinaryOp::ArcTan2 => return None,
        BinaryOp::Equal => "(a == b)".into(),
        BinaryOp::NotEqual => "(a != b)".into(),
        BinaryOp::Less => "(a < b)".into(),
        BinaryOp::LessEqual => "(a <= b)".into(),
        BinaryOp::Greater => "(a > b)".into(),
        BinaryOp::GreaterEqual => "(a >= b)".into(),
        BinaryOp::LogicalAnd => "(a != 0 && b != 0)".into(),
        BinaryOp::LogicalOr => "(a != 0 || b != 0)".into(),
    })
}

/// Helpers a binary op's expression may call, for `dtype`.
pub(crate) fn binary_helpers(dtype: DType) -> String {
    let (t, tg) = (compute(dtype), tag(dtype));
    if is_float(dtype) {
        let s = suffix(dtype);
        // Python's remainder (the divisor's sign) and logaddexp as the CPU computes them.
        return format!(
            r#"
__device__ __forceinline__ {t} nv_fmod_py{s}({t} a, {t} b) {{
    {t} r = fmod{s}(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}}
__device__ __forceinline__ {t} nv_logaddexp{s}({t} a, {t} b) {{
    if (a != a || b != b) return a + b;
    {t} hi = a > b ? a : b;
    if (isinf(hi)) return hi;
    {t} lo = a > b ? b : a;
    return hi + log1p{s}(exp{s}(lo - hi));
}}
"#
        );
    }
    let unsigned = is_unsigned(dtype);
    let negative_exponent = if unsigned { "" } else { "if (b < 0) return 0;" };
    format!(
        r#"
__device__ __forceinline__ {t} nv_ipow_{tg}({t} a, {t} b) {{
    {negative_exponent}
    {t} acc = 1;
    while (b != 0) {{
        if (b & 1) acc = ({t})(acc * a);
        a = ({t})(a * a);
        b >>= 1;
    }}
    return acc;
}}
__device__ __forceinline__ {t} nv_irem_{tg}({t} a, {t} b) {{
    if (b == 0) return a;
    {t} r = ({t})(a % b);
    return (r != 0 && ((r < 0) != (b < 0))) ? ({t})(r + b) : r;
}}
__device__ __forceinline__ {t} nv_ifloordiv_{tg}({t} a, {t} b) {{
    if (b == 0) return 0;
    {t} q = ({t})(a / b);
    {t} r = ({t})(a % b);
    return (r != 0 && ((r < 0) != (b < 0))) ? ({t})(q - 1) : q;
}}
"#
    )
}

/// Adjacent elements a contiguous kernel moves as one [`nv_pack`](super::types::PRELUDE):
/// one 16-byte access for 4-byte elements, where every operand is aligned to it.
pub const VECTOR: u32 = 4;
/// Packs each thread of a contiguous kernel takes per step, a block apart (so each access is
/// still coalesced): all are loaded before any is computed and stored, so a thread has that
/// many loads in flight per input (the kernels are bound by memory).
pub const UNROLL: u32 = 2;
/// Elements a thread of a contiguous kernel takes per step: launches size their grid by it.
pub const PER_THREAD: u32 = VECTOR * UNROLL;

/// One operand of a contiguous kernel: its pointer's name, its storage type and, for an
/// input that may be a scalar, the name of its stride parameter (0: element 0 serves every
/// element; 1: contiguous).
pub(crate) struct Operand<'a> {
    pub(crate) pointer: &'a str,
    pub(crate) ty: &'a str,
    pub(crate) stride: Option<&'a str>,
}

/// The loops of a contiguous kernel over `n` elements of its `inputs` into `output`. Each
/// thread loads [`UNROLL`] packs of [`VECTOR`] elements of every input (one access per pack
/// where every operand is aligned to its pack, element by element otherwise and in the last,
/// partial pack), then runs `body` once per element, with input `k`'s stored value in `l<k>`,
/// and stores what it leaves in `out` (the output's storage type) a pack at a time.
pub(crate) fn contiguous(inputs: &[Operand<'_>], output: &Operand<'_>, body: &str) -> String {
    let aligned = |o: &Operand<'_>| match o.stride {
        Some(s) => format!("({s} == 0 || nv_packed({}))", o.pointer),
        None => format!("nv_packed({})", o.pointer),
    };
    let packed = inputs
        .iter()
        .chain([output])
        .map(aligned)
        .collect::<Vec<_>>()
        .join(" && ");
    let mut registers = String::new();
    let mut loads = String::new();
    let mut values = String::new();
    for (k, o) in inputs.iter().enumerate() {
        let (p, t) = (o.pointer, o.ty);
        registers += &format!("nv_pack<{t}> p{k}[{UNROLL}]; ");
        let full = format!(
            "if (whole) p{k}[u] = *(const nv_pack<{t}>*)({p} + i); \
             else for (int e = 0; e < {VECTOR}; e++) p{k}[u].e[e] = {p}[i + e < n ? i + e : i];"
        );
        loads += &match o.stride {
            Some(s) => format!(
                "if ({s} == 0) {{ for (int e = 0; e < {VECTOR}; e++) p{k}[u].e[e] = {p}[0]; }} else {{ {full} }}\n                "
            ),
            None => format!("{full}\n                "),
        };
        values += &format!("{t} l{k} = p{k}[u].e[e]; ");
    }
    let (y, to) = (output.pointer, output.ty);
    format!(
        r#"    bool packed = {packed};
    nv_u64 packs = (n + {VECTOR} - 1) / {VECTOR};
    nv_u64 stride = (nv_u64)gridDim.x * blockDim.x * {UNROLL};
    for (nv_u64 base = blockIdx.x * (nv_u64)blockDim.x * {UNROLL} + threadIdx.x; base < packs;
         base += stride) {{
        {registers}
        #pragma unroll
        for (int u = 0; u < {UNROLL}; u++) {{
            nv_u64 i = (base + (nv_u64)u * blockDim.x) * {VECTOR};
            bool whole = packed && i + {VECTOR} <= n;
            if (i < n) {{
                {loads}}}
        }}
        #pragma unroll
        for (int u = 0; u < {UNROLL}; u++) {{
            nv_u64 i = (base + (nv_u64)u * blockDim.x) * {VECTOR};
            if (i < n) {{
                nv_pack<{to}> q;
                #pragma unroll
                for (int e = 0; e < {VECTOR}; e++) {{
                    {values}{to} out;
                    {body}
                    q.e[e] = out;
                }}
                if (packed && i + {VECTOR} <= n) *(nv_pack<{to}>*)({y} + i) = q;
                else for (int e = 0; e < {VECTOR} && i + e < n; e++) {y}[i + e] = q.e[e];
            }}
        }}
    }}
"#
    )
}

/// The two entry points of an element-wise kernel over `inputs` inputs of storage type `ti`
/// into `y` of `to`: `_c` over contiguous operands (inputs may be scalars, by their stride
/// parameters), where `body` computes `out` from the stored values `l0`, `l1`; `_s` over
/// strided ones, where `strided` reads the inputs at offsets `o0`, `o1` and writes `y[oy]`.
fn entry_points(
    name: &str,
    (ti, to): (&str, &str),
    inputs: usize,
    body: &str,
    strided: &str,
) -> String {
    let pointers = ["a_", "b_"];
    let strides = ["s0", "s1"];
    let params: String = pointers[..inputs]
        .iter()
        .map(|p| format!("const {ti}* __restrict__ {p}, "))
        .collect::<String>()
        + &format!("{to}* __restrict__ y");
    let operands: Vec<Operand<'_>> = (0..inputs)
        .map(|k| Operand {
            pointer: pointers[k],
            ty: ti,
            stride: Some(strides[k]),
        })
        .collect();
    let output = Operand {
        pointer: "y",
        ty: to,
        stride: None,
    };
    let stride_params: String = strides[..inputs]
        .iter()
        .map(|s| format!(", nv_u64 {s}"))
        .collect();
    let offsets: String = (0..inputs)
        .map(|k| format!("long long o{k} = nv_offset(d, {k}, i); "))
        .collect::<String>()
        + "long long oy = nv_offset(d, 2, i);";
    format!(
        r#"
extern "C" __global__ void {name}_c({params}, nv_u64 n{stride_params}) {{
{loops}}}
extern "C" __global__ void {name}_s({params}, nv_u64 n, nv_dims d) {{
    for (nv_u64 i = blockIdx.x * (nv_u64)blockDim.x + threadIdx.x; i < n;
         i += (nv_u64)gridDim.x * blockDim.x) {{
        {offsets}
        {strided}
    }}
}}
"#,
        loops = contiguous(&operands, &output, body)
    )
}

/// The kernel of `op` from `input` to `output` (the same dtype, or `float32` for an op that
/// makes integers float), or `None` where the op has no meaning for the dtype.
pub fn unary(op: UnaryOp, input: DType, output: DType) -> Option<Source> {
    let expression = unary_expression(op, output)?;
    let name = format!("unary_{}_{}_{}", op.name(), tag(input), tag(output));
    let (ti, to, tc) = (storage(input), storage(output), compute(output));
    let result = store(output, &expression);
    let body = format!("{tc} v = ({tc})({}); out = {result};", load(input, "l0"));
    let strided = format!(
        "{tc} v = ({tc})({}); y[oy] = {result};",
        load(input, "a_[o0]")
    );
    let text = format!(
        "{PRELUDE}{DIMS_STRUCT}{}",
        entry_points(&name, (ti, to), 1, &body, &strided)
    );
    Some(Source { name, text })
}

/// The kernel of `op` over two inputs of `input` giving `output` (`bool` for comparisons and
/// logical ops, `input` otherwise), or `None` where the op has no meaning for the dtype.
pub fn binary(op: BinaryOp, input: DType, output: DType) -> Option<Source> {
    let expression = binary_expression(op, input)?;
    let name = format!("binary_{}_{}_{}", op.name(), tag(input), tag(output));
    let (ti, to, tc) = (storage(input), storage(output), compute(input));
    let result = store(output, &expression);
    let operands =
        |a: &str, b: &str| format!("{tc} a = {}; {tc} b = {}; ", load(input, a), load(input, b));
    let body = format!("{}out = {result};", operands("l0", "l1"));
    let strided = format!("{}y[oy] = {result};", operands("a_[o0]", "b_[o1]"));
    let text = format!(
        "{PRELUDE}{DIMS_STRUCT}{}{}",
        binary_helpers(input),
        entry_points(&name, (ti, to), 2, &body, &strided)
    );
    Some(Source { name, text })
}

/// `astype`: converts `input` to `output`, element by element (floats to integers truncate
/// toward zero, as C and the CPU do).
pub fn convert(input: DType, output: DType) -> Source {
    let name = format!("convert_{}_{}", tag(input), tag(output));
    let (ti, to, tc) = (storage(input), storage(output), compute(output));
    let result = store(output, "v");
    let body = format!("{tc} v = ({tc})({}); out = {result};", load(input, "l0"));
    let strided = format!(
        "{tc} v = ({tc})({}); y[oy] = {result};",
        load(input, "a_[o0]")
    );
    let text = format!(
        "{PRELUDE}{DIMS_STRUCT}{}",
        entry_points(&name, (ti, to), 1, &body, &strided)
    );
    Source { name, text }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_ops_without_meaning_have_no_kernel() {
        assert!(unary(UnaryOp::Exp, DType::I32, DType::I32).is_none());
        assert!(binary(BinaryOp::ArcTan2, DType::I32, DType::I32).is_none());
        let abs = unary(UnaryOp::Abs, DType::U8, DType::U8).unwrap();
        assert!(abs.text.contains("unary_abs_u8_u8_c"), "{}", abs.name);
    }

    #[test]
    fn half_precision_computes_in_float_and_rounds_where_the_cpu_does() {
        let add = binary(BinaryOp::Add, DType::BF16, DType::BF16).unwrap();
        assert!(
            add.text.contains("float a = nv_bf16_to_f32(l0)"),
            "{}",
            add.text
        );
        let floor_divide = binary_expression(BinaryOp::FloorDivide, DType::F16).unwrap();
        assert_eq!(floor_divide, "floorf(nv_f16_to_f32(nv_f32_to_f16(a / b)))");
        let less = binary(BinaryOp::Less, DType::F32, DType::Bool).unwrap();
        assert!(less.text.contains("out = (unsigned char)(((a < b)) != 0);"));
    }
}
