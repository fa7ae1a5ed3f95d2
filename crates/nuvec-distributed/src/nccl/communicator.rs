//! `Backend::Nccl`'s communicator: NCCL on this rank's GPU. Collectives built while the GPU is
//! the default device hand NCCL the arrays' device memory (`DeviceCollectives`); those built on
//! the CPU reach it as host bytes, copied to the GPU, combined there and copied back. The
//! failure promises come from `nuvec_cuda::nccl::Comm` (every wait ends at the timeout, which
//! aborts the communicator).

use super::{share_unique_id, Launch};
use crate::Options;
use nuvec_core::distributed::{Communicator, DeviceCollectives, ReduceOp};
use nuvec_core::{DType, Error, Result};
use nuvec_cuda::nccl::{Comm, Reduction};
use nuvec_cuda::{CudaError, DeviceBuffer};
use std::sync::Arc;

/// A group of GPUs, one per rank, through NCCL.
#[derive(Debug)]
pub struct NcclCommunicator {
    comm: Comm,
}

fn failed(op: &str, rank: usize, error: CudaError) -> Error {
    Error::Distributed {
        op: op.into(),
        rank: Some(rank),
        reason: error.to_string(),
    }
}

impl NcclCommunicator {
    /// Joins the group `launch` describes on GPU `device` (rank 0 makes the unique id and
    /// hands it to the others through the authenticated star of `share_unique_id`).
    pub fn connect(launch: &Launch, device: usize, options: &Options) -> Result<NcclCommunicator> {
        let rank = launch.rank;
        let gpu = nuvec_cuda::gpu(device).map_err(|e| failed("nccl init", rank, e))?;
        let id = if rank == 0 {
            Some(nuvec_cuda::nccl::unique_id().map_err(|e| failed("nccl init", rank, e))?)
        } else {
            None
        };
        let id = share_unique_id(launch, id, options)?;
        let comm = Comm::init(gpu, id, (rank, launch.size), options.timeout)
            .map_err(|e| failed("nccl init", rank, e))?;
        Ok(NcclCommunicator { comm })
    }

    fn rank_error(&self, op: &str) -> impl Fn(CudaError) -> Error + '_ {
        let op = op.to_string();
        move |e| failed(&op, self.comm.rank(), e)
    }

    fn upload(&self, op: &str, bytes: &[u8]) -> Result<DeviceBuffer> {
        self.comm.gpu().upload(bytes).map_err(self.rank_error(op))
    }

    fn download(&self, op: &str, buffer: &DeviceBuffer, into: &mut [u8]) -> Result<()> {
        let bytes = self
            .comm
            .gpu()
            .download(buffer, into.len())
            .map_err(self.rank_error(op))?;
        into.copy_from_slice(&bytes);
        Ok(())
    }

    fn alloc(&self, op: &str, bytes: usize) -> Result<DeviceBuffer> {
        self.comm.gpu().alloc(bytes).map_err(self.rank_error(op))
    }
}

fn reduction(op: ReduceOp) -> Reduction {
    match op {
        ReduceOp::Sum => Reduction::Sum,
        ReduceOp::Max => Reduction::Max,
        ReduceOp::Min => Reduction::Min,
    }
}

impl Communicator for NcclCommunicator {
    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn size(&self) -> usize {
        self.comm.size()
    }

    fn backend(&self) -> &'static str {
        "nccl"
    }

    fn all_reduce(&self, data: &mut [u8], dtype: DType, op: ReduceOp) -> Result<()> {
        let name = op.collective_name();
        let input = self.upload(name, data)?;
        let mut output = self.alloc(name, data.len())?;
        let count = data.len() / dtype.size();
        self.comm
            .all_reduce((&input, &mut output), count, dtype, reduction(op))
            .map_err(self.rank_error(name))?;
        self.download(name, &output, data)
    }

    fn all_gather(&self, input: &[u8], output: &mut [u8], _dtype: DType) -> Result<()> {
        let sent = self.upload("all_gather", input)?;
        let mut gathered = self.alloc("all_gather", output.len())?;
        self.comm
            .all_gather((&sent, &mut gathered), input.len())
            .map_err(self.rank_error("all_gather"))?;
        self.download("all_gather", &gathered, output)
    }

    fn reduce_scatter(
        &self,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let sent = self.upload("sum_scatter", input)?;
        let mut kept = self.alloc("sum_scatter", output.len())?;
        self.comm
            .reduce_scatter(
                (&sent, &mut kept),
                output.len() / dtype.size(),
                dtype,
                reduction(op),
            )
            .map_err(self.rank_error("sum_scatter"))?;
        self.download("sum_scatter", &kept, output)
    }

    fn send(&self, data: &[u8], _dtype: DType, _shape: &[i32], dst: usize) -> Result<()> {
        let sent = self.upload("send", data)?;
        self.comm
            .send(&sent, data.len(), dst)
            .map_err(self.rank_error("send"))
    }

    fn recv(&self, data: &mut [u8], _dtype: DType, _shape: &[i32], src: usize) -> Result<()> {
        let mut received = self.alloc("recv", data.len())?;
        self.comm
            .recv(&mut received, data.len(), src)
            .map_err(self.rank_error("recv"))?;
        self.download("recv", &received, data)
    }

    fn broadcast(&self, data: &mut [u8], _dtype: DType, root: usize) -> Result<()> {
        let mut buffer = self.upload("broadcast", data)?;
        self.comm
            .broadcast(&mut buffer, data.len(), root)
            .map_err(self.rank_error("broadcast"))?;
        self.download("broadcast", &buffer, data)
    }

    fn on_device(&self) -> Option<&dyn DeviceCollectives> {
        Some(self)
    }

    fn health(&self) -> Result<()> {
        self.comm.health().map_err(self.rank_error("health"))
    }

    fn close(&self) {
        self.comm.abort();
    }
}

impl DeviceCollectives for NcclCommunicator {
    fn all_reduce(
        &self,
        buffers: (&DeviceBuffer, &mut DeviceBuffer),
        count: usize,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        self.comm
            .all_reduce(buffers, count, dtype, reduction(op))
            .map_err(self.rank_error(op.collective_name()))
    }

    fn all_gather(&self, buffers: (&DeviceBuffer, &mut DeviceBuffer), bytes: usize) -> Result<()> {
        self.comm
            .all_gather(buffers, bytes)
            .map_err(self.rank_error("all_gather"))
    }

    fn reduce_scatter(
        &self,
        buffers: (&DeviceBuffer, &mut DeviceBuffer),
        count: usize,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        self.comm
            .reduce_scatter(buffers, count, dtype, reduction(op))
            .map_err(self.rank_error("sum_scatter"))
    }
}

/// The group's communicator, shared.
pub(crate) fn connect(launch: &Launch, options: &Options) -> Result<Arc<dyn Communicator>> {
    // `CUDA_VISIBLE_DEVICES` (set per rank by the launcher) leaves this rank one GPU: 0.
    Ok(Arc::new(NcclCommunicator::connect(launch, 0, options)?))
}
