//! What a backend provides: byte-level collectives over a fixed set of ranks.
//!
//! # Design
//! Buffers are raw bytes plus the dtype, so one implementation serves every element type;
//! reductions dispatch on the dtype inside the backend. Every method blocks until its part of
//! the collective is done on this rank, or fails with an error naming the peer at fault.
//!
//! # Threading
//! A communicator is shared (`Arc`) and may be called from any thread; a backend serialises
//! collectives of one group so that every rank sees them in program order.

use crate::{DType, Result};

/// How `all_reduce` and `reduce_scatter` combine values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Element-wise sum.
    Sum,
    /// Element-wise maximum.
    Max,
    /// Element-wise minimum.
    Min,
}

impl ReduceOp {
    /// The collective's name as MLX spells it.
    pub const fn collective_name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "all_sum",
            ReduceOp::Max => "all_max",
            ReduceOp::Min => "all_min",
        }
    }
}

/// The bytes one of a rank's links (a cable, a connection) has carried since its group
/// formed: a way to check that traffic spreads over every cable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkTraffic {
    /// The rank at the link's other end.
    pub peer: usize,
    /// The link's name (for JACCL, the RDMA device of the cable).
    pub link: String,
    /// Payload bytes sent on the link.
    pub sent: u64,
    /// Payload bytes received on the link.
    pub received: u64,
}

/// Collectives over device memory, for a backend whose ranks each own a GPU (NCCL): a
/// group's `all_sum`/`all_max`/`all_min`, `all_gather` and `sum_scatter` built while a GPU is
/// the default device then run there, without copies through the host.
#[cfg(feature = "cuda")]
pub trait DeviceCollectives: Send + Sync {
    /// Reduces `count` elements of `dtype` of every rank's `input` into `output`.
    fn all_reduce(
        &self,
        buffers: (&nuvec_cuda::DeviceBuffer, &mut nuvec_cuda::DeviceBuffer),
        count: usize,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()>;
    /// Every rank's `bytes` of `input`, in rank order, into `output`.
    fn all_gather(
        &self,
        buffers: (&nuvec_cuda::DeviceBuffer, &mut nuvec_cuda::DeviceBuffer),
        bytes: usize,
    ) -> Result<()>;
    /// This rank's `count` elements of the reduction of every rank's `input`.
    fn reduce_scatter(
        &self,
        buffers: (&nuvec_cuda::DeviceBuffer, &mut nuvec_cuda::DeviceBuffer),
        count: usize,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()>;
}

/// A connected group of processes, as a backend sees it.
pub trait Communicator: Send + Sync + std::fmt::Debug {
    /// This process's rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// The backend's name (`"ring"`, …).
    fn backend(&self) -> &'static str;
    /// Reduces `data` (elements of `dtype`) across ranks in place; every rank gets the same bits.
    fn all_reduce(&self, data: &mut [u8], dtype: DType, op: ReduceOp) -> Result<()>;
    /// Reduces `input` across ranks into `output` (as long, its old contents ignored), for an
    /// input that must stay as it is. The default copies, then reduces in place; a backend can
    /// read the input where it first needs it and skip that pass over the buffer.
    fn all_reduce_into(
        &self,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        output.copy_from_slice(input);
        self.all_reduce(output, dtype, op)
    }
    /// Concatenates every rank's `input` (in rank order) into `output` (`size` times as long).
    fn all_gather(&self, input: &[u8], output: &mut [u8], dtype: DType) -> Result<()>;
    /// Reduces `input` across ranks and keeps this rank's `1/size` slice in `output`.
    fn reduce_scatter(
        &self,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()>;
    /// Sends `data` (an array of `dtype` and `shape`) to rank `dst`.
    fn send(&self, data: &[u8], dtype: DType, shape: &[i32], dst: usize) -> Result<()>;
    /// Receives an array of `dtype` and `shape` from rank `src` into `data`.
    fn recv(&self, data: &mut [u8], dtype: DType, shape: &[i32], src: usize) -> Result<()>;
    /// Replaces `data` (elements of `dtype`) on every rank with rank `root`'s. The default
    /// gathers every rank's data and keeps the root's (checking every rank named the same
    /// root and type); a backend can send the root's alone.
    fn broadcast(&self, data: &mut [u8], dtype: DType, root: usize) -> Result<()> {
        super::broadcast::broadcast_by_gathering(self, data, dtype, root)
    }
    /// The root's side of [`Communicator::broadcast`] (this rank is the root) where it only
    /// reads `data`, so that the root's output can be its input, uncopied: `Ok(false)`,
    /// having done nothing, where the backend has no such path (the default), and the
    /// caller then broadcasts a copy.
    fn broadcast_unchanged(&self, _data: &[u8], _dtype: DType) -> Result<bool> {
        Ok(false)
    }
    /// Sends block `j` of `input` (`size` equal blocks) to rank `j`, and puts the block rank
    /// `j` sent this one at block `j` of `output` (as long as `input`). The default gathers
    /// every rank's input and keeps this rank's blocks.
    fn all_to_all(&self, input: &[u8], output: &mut [u8], dtype: DType) -> Result<()> {
        super::all_to_all::all_to_all_by_gathering(self, input, output, dtype)
    }
    /// Sends `send[j]` rows (of `row_bytes` each, in order) of `input` to rank `j` and puts
    /// the `recv[j]` rows from rank `j` into `output`, in rank order. The default gathers the
    /// counts, checks them, then every rank's input padded to the longest.
    fn all_to_all_v(
        &self,
        input: &[u8],
        output: &mut [u8],
        (send, recv, row_bytes): (&[usize], &[usize], usize),
        dtype: DType,
    ) -> Result<()> {
        let counts = (send, recv, row_bytes);
        super::all_to_all::all_to_all_v_by_gathering(self, (input, output), counts, dtype)
    }
    /// Waits until every rank has called it. The default is one small all-reduce.
    fn barrier(&self) -> Result<()> {
        super::broadcast::barrier_by_reducing(self)
    }
    /// Splits the group: ranks that pass the same `color` form a new group, ordered by `key`
    /// (a negative key keeps this rank's order). Every rank must call it. Backends that cannot
    /// split keep this default, an error saying so (every backend of nuvec's splits).
    fn split(&self, color: i32, key: i32) -> Result<std::sync::Arc<dyn Communicator>> {
        Err(crate::Error::Distributed {
            op: "split".into(),
            rank: None,
            reason: format!(
                "the {} backend cannot split groups (color {color}, key {key}); the ring, jaccl and mpi backends can",
                self.backend()
            ),
        })
    }
    /// Hands the backend its group's flight recorder, once, as the group is registered: a
    /// backend that can tell its peers where this rank is when the group fails (the ring
    /// does) keeps it. The default ignores it.
    fn attach_trace(&self, trace: std::sync::Arc<super::Trace>) {
        let _ = trace;
    }
    /// The collectives over device memory, for a backend that has them (NCCL); `None` (the
    /// default) keeps collectives on the host.
    #[cfg(feature = "cuda")]
    fn on_device(&self) -> Option<&dyn DeviceCollectives> {
        None
    }
    /// Checks every connection without running a collective.
    fn health(&self) -> Result<()>;
    /// The bytes each of this rank's links has carried; empty for a backend that does not
    /// count (the default).
    fn traffic(&self) -> Vec<LinkTraffic> {
        Vec::new()
    }
    /// Releases the connections; later operations fail saying the group was closed.
    fn close(&self);
}
