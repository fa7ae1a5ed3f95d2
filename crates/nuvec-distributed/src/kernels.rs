//! The reduction every backend applies to received data: the group's [`ReduceOp`] as the CPU
//! kernels name it.

use nuvec_core::distributed::ReduceOp;
use nuvec_cpu::reduce::ReduceOp as KernelOp;

/// The CPU kernel's name for `op`.
pub(crate) fn kernel_op(op: ReduceOp) -> KernelOp {
    match op {
        ReduceOp::Sum => KernelOp::Sum,
        ReduceOp::Max => KernelOp::Max,
        ReduceOp::Min => KernelOp::Min,
    }
}
