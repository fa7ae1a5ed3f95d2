//! The reductions MPI lacks: sums, maxima and minima of float16 and bfloat16, which nuvec
//! registers with MPI as user operations (`ffi::half_op` calls [`reduce_half`]).

use crate::kernels::kernel_op;
use nuvec_core::distributed::ReduceOp;
use nuvec_core::DType;
use nuvec_cpu::bytes::reduce_bytes;

/// The operations, by their index in a user operation's type parameter.
pub(crate) const OPS: [ReduceOp; 3] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min];

/// `dst = src op dst` over 16-bit floats (every op here is commutative, so the operands'
/// order does not matter).
pub(crate) fn reduce_half(bf16: bool, op: usize, src: &[u8], dst: &mut [u8]) {
    let dtype = if bf16 { DType::BF16 } else { DType::F16 };
    reduce_bytes(dst, src, dtype, kernel_op(OPS[op]));
}
