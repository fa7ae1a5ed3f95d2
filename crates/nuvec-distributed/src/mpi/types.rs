//! Which MPI datatype and reduction carry each nuvec dtype and [`ReduceOp`].
//!
//! MPI has no 16-bit floats: `float16` and `bfloat16` travel as `MPI_UINT16_T` and reduce
//! through user operations that call nuvec's own kernels (sums rounded once per pair, as on
//! the ring). Sums of `bool` are logical or, as everywhere in nuvec.

use super::ffi::{half_op, Handle, Mpi};
use nuvec_core::distributed::ReduceOp;
use nuvec_core::DType;
use std::ffi::c_int;

/// Index of each dtype's datatype in [`Mpi::datatypes`] (see `ffi::DATATYPE_SYMBOLS`).
fn datatype_index(dtype: DType) -> usize {
    match dtype {
        DType::Bool => 0,
        DType::U8 => 1,
        DType::U16 | DType::F16 | DType::BF16 => 2,
        DType::U32 => 3,
        DType::U64 => 4,
        DType::I8 => 5,
        DType::I16 => 6,
        DType::I32 => 7,
        DType::I64 => 8,
        DType::F32 => 9,
        DType::F64 => 10,
    }
}

/// The datatype that carries `dtype`.
pub(crate) fn datatype(mpi: &Mpi, dtype: DType) -> Handle {
    mpi.datatypes[datatype_index(dtype)]
}

/// The user operations for 16-bit floats: `[f16, bf16] × [sum, max, min]`.
pub(crate) struct HalfOps([[Handle; 3]; 2]);

fn op_index(op: ReduceOp) -> usize {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Max => 1,
        ReduceOp::Min => 2,
    }
}

impl HalfOps {
    /// Registers the six operations with MPI (after `MPI_Init`).
    pub(crate) fn create(mpi: &Mpi) -> Result<HalfOps, c_int> {
        Ok(HalfOps([
            [
                mpi.op_create(half_op::<false, 0>)?,
                mpi.op_create(half_op::<false, 1>)?,
                mpi.op_create(half_op::<false, 2>)?,
            ],
            [
                mpi.op_create(half_op::<true, 0>)?,
                mpi.op_create(half_op::<true, 1>)?,
                mpi.op_create(half_op::<true, 2>)?,
            ],
        ]))
    }
}

/// The reduction that computes `op` over `dtype`.
pub(crate) fn reduction(mpi: &Mpi, half: &HalfOps, dtype: DType, op: ReduceOp) -> Handle {
    // Indices into `Mpi::ops` (see `ffi::OP_SYMBOLS`).
    const SUM: usize = 0;
    const MAX: usize = 1;
    const MIN: usize = 2;
    const LOR: usize = 3;
    const LAND: usize = 4;
    match dtype {
        DType::F16 => half.0[0][op_index(op)],
        DType::BF16 => half.0[1][op_index(op)],
        DType::Bool => mpi.ops[if op == ReduceOp::Min { LAND } else { LOR }],
        _ => mpi.ops[[SUM, MAX, MIN][op_index(op)]],
    }
}
