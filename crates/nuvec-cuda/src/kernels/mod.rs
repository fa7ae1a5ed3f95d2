//! The CUDA C sources of nuvec's GPU kernels, generated per op and dtype and compiled by NVRTC
//! at first use for the GPU at hand (`compile.rs`).
//!
//! - `types.rs`: each dtype's storage and compute types and conversions (no CUDA header);
//! - `elementwise.rs`: unary and binary ops and `astype`, contiguous and strided;
//! - `reduce.rs`: reductions along the last axis and softmax;
//! - `layout.rs`: strided copies and gathers;
//! - `random.rs`: MLX's threefry bits;
//! - `quantized.rs`: MLX's affine-quantized matrices, dequantized and multiplied;
//! - `sort.rs`: rows sorted in place, with the indices that sort them;
//! - `scan.rs`: cumulative sums, products, maxima and minima;
//! - `scatter.rs`: scatter-add along an axis.

pub mod elementwise;
pub mod fused;
pub mod layout;
pub mod quantized;
pub mod random;
pub mod reduce;
pub mod scan;
pub mod scatter;
pub mod sort;
pub mod types;

use nuvec_cpu::binary::BinaryOp;
use nuvec_cpu::unary::UnaryOp;
use nuvec_cpu::DType;

/// One kernel's source: the name of its (first) entry point and the CUDA C text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// The entry point's name (element-wise sources add `_c` and `_s`).
    pub name: String,
    /// The CUDA C text, compiled by NVRTC as it is.
    pub text: String,
}

/// Every unary op.
pub const UNARY_OPS: [UnaryOp; 31] = [
    UnaryOp::Abs,
    UnaryOp::Negative,
    UnaryOp::Sign,
    UnaryOp::Square,
    UnaryOp::Sqrt,
    UnaryOp::Rsqrt,
    UnaryOp::Reciprocal,
    UnaryOp::Exp,
    UnaryOp::Expm1,
    UnaryOp::Log,
    UnaryOp::Log1p,
    UnaryOp::Log2,
    UnaryOp::Log10,
    UnaryOp::Sin,
    UnaryOp::Cos,
    UnaryOp::Tan,
    UnaryOp::Tanh,
    UnaryOp::Sinh,
    UnaryOp::Cosh,
    UnaryOp::ArcSin,
    UnaryOp::ArcCos,
    UnaryOp::ArcTan,
    UnaryOp::ArcSinh,
    UnaryOp::ArcCosh,
    UnaryOp::ArcTanh,
    UnaryOp::Sigmoid,
    UnaryOp::Erf,
    UnaryOp::ErfInv,
    UnaryOp::Floor,
    UnaryOp::Ceil,
    UnaryOp::Round,
];

/// Every binary op.
pub const BINARY_OPS: [BinaryOp; 19] = [
    BinaryOp::Add,
    BinaryOp::Subtract,
    BinaryOp::Multiply,
    BinaryOp::Divide,
    BinaryOp::Power,
    BinaryOp::Remainder,
    BinaryOp::FloorDivide,
    BinaryOp::Maximum,
    BinaryOp::Minimum,
    BinaryOp::LogAddExp,
    BinaryOp::ArcTan2,
    BinaryOp::Equal,
    BinaryOp::NotEqual,
    BinaryOp::Less,
    BinaryOp::LessEqual,
    BinaryOp::Greater,
    BinaryOp::GreaterEqual,
    BinaryOp::LogicalAnd,
    BinaryOp::LogicalOr,
];

/// The output dtype of a binary op on `input`: `bool` for comparisons and logical ops.
pub fn binary_output(op: BinaryOp, input: DType) -> DType {
    if op.is_predicate() {
        DType::Bool
    } else {
        input
    }
}

/// Every kernel source nuvec can generate: each unary and binary op for each dtype it has a
/// meaning for, every conversion, reduction, softmax, layout kernel and the random bits. The
/// tests compile all of them through NVRTC.
pub fn catalogue() -> Vec<Source> {
    let mut all = Vec::new();
    for &dtype in &DType::ALL {
        for &op in &UNARY_OPS {
            all.extend(elementwise::unary(op, dtype, dtype));
        }
        for &op in &BINARY_OPS {
            all.extend(elementwise::binary(op, dtype, binary_output(op, dtype)));
        }
        for &to in &DType::ALL {
            all.push(elementwise::convert(dtype, to));
        }
        for &reduction in &reduce::Reduction::ALL {
            let output = match reduction {
                reduce::Reduction::ArgMax | reduce::Reduction::ArgMin => DType::U32,
                _ => dtype,
            };
            all.extend(reduce::row_reduction(reduction, dtype, output));
        }
        all.extend(reduce::softmax(dtype));
        all.push(sort::sort_rows(dtype));
        all.extend(scatter::scatter_add(dtype));
        for op in scan::SCAN_OPS {
            all.extend(scan::scan(op, dtype));
        }
        // A fused chain using every unary and binary op that keeps the dtype.
        let mut steps = vec![fused::Step::Binary(BinaryOp::Add, 0, 1)];
        for &op in &UNARY_OPS {
            steps.push(fused::Step::Unary(op, 1 + steps.len()));
        }
        for &op in &BINARY_OPS {
            if binary_output(op, dtype) == dtype {
                steps.push(fused::Step::Binary(op, 1 + steps.len(), 0));
            }
        }
        all.extend(fused::chain(&steps, 2, dtype));
    }
    for width in layout::WIDTHS {
        all.extend(layout::strided_copy(width));
        all.extend(layout::gather(width));
        all.extend(layout::select(width));
    }
    all.push(random::bits());
    for bits in quantized::BITS {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            all.extend(quantized::quantize(bits, dtype));
            all.extend(quantized::dequantize(bits, dtype));
            all.extend(quantized::matvec(bits, dtype));
        }
    }
    all
}
