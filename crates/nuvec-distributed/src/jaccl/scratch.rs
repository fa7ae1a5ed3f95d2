//! The scratch memory of a JACCL group: one chunk per rank (mesh) or per lane (ring), kept
//! between operations, and the rank-order reduction over it.

use crate::kernels::kernel_op;
use nuvec_core::distributed::ReduceOp;
use nuvec_core::DType;
use nuvec_cpu::bytes::reduce_bytes;

/// Bytes of one scratch chunk: what a reduction receives from one peer before reducing it.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// Reusable chunk buffers.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    buffers: Vec<Vec<u8>>,
}

impl Scratch {
    /// `count` buffers of [`CHUNK_BYTES`], allocated the first time they are asked for.
    pub(crate) fn buffers(&mut self, count: usize) -> &mut [Vec<u8>] {
        while self.buffers.len() < count {
            self.buffers.push(vec![0; CHUNK_BYTES]);
        }
        &mut self.buffers[..count]
    }
}

/// `out = pieces[0] ∘ pieces[1] ∘ …`, left to right, over `out.len()` bytes of each piece:
/// the same bits on every rank that folds the same pieces.
pub(crate) fn fold_in_rank_order(out: &mut [u8], pieces: &[Vec<u8>], dtype: DType, op: ReduceOp) {
    let len = out.len();
    out.copy_from_slice(&pieces[0][..len]);
    for piece in &pieces[1..] {
        reduce_bytes(out, &piece[..len], dtype, kernel_op(op));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_adds_in_rank_order() {
        // (1e8 + -1e8) + 1 = 1, while 1e8 + (-1e8 + 1) = 0 in f32.
        let pieces: Vec<Vec<u8>> = [1e8f32, -1e8, 1.0]
            .iter()
            .map(|v| v.to_le_bytes().to_vec())
            .collect();
        let mut out = [0u8; 4];
        fold_in_rank_order(&mut out, &pieces, DType::F32, ReduceOp::Sum);
        assert_eq!(f32::from_le_bytes(out), 1.0);
    }
}
