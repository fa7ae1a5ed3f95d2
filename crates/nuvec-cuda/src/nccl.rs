//! NCCL communicators on one GPU each, with nuvec's failure promises: a communicator is made
//! without blocking (`blocking = 0`) and every call is waited for by polling, so a rank that
//! never comes or stalls ends the wait at the timeout, the communicator is aborted, and the
//! error says what was waited for. cudarc's safe `Comm` blocks in its init and panics on drop;
//! this module uses NCCL's calls directly.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::library::{require, Library};
use crate::memory::DeviceBuffer;
use cudarc::driver::DevicePtr;
use cudarc::nccl::sys;
use nuvec_cpu::DType;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The bytes of an NCCL unique id.
pub const ID_BYTES: usize = 128;

/// How a reduction combines values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// Element-wise sum.
    Sum,
    /// Element-wise maximum.
    Max,
    /// Element-wise minimum.
    Min,
}

fn error(op: &str, (rank, device): (usize, usize), reason: impl std::fmt::Display) -> CudaError {
    CudaError::Call {
        op: format!("NCCL {op} (rank {rank})"),
        device,
        reason: reason.to_string(),
    }
}

/// NCCL's words for a status.
fn describe(status: sys::ncclResult_t) -> String {
    // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any status.
    let text = unsafe { std::ffi::CStr::from_ptr(sys::ncclGetErrorString(status)) };
    text.to_string_lossy().into_owned()
}

/// A fresh unique id, made by the rank that shares it.
pub fn unique_id() -> Result<[u8; ID_BYTES]> {
    require(Library::Nccl)?;
    let id = cudarc::nccl::result::get_uniqueid()
        .map_err(|e| error("making a unique id", (0, 0), describe(e.0)))?;
    Ok(id.internal.map(|c| c as u8))
}

/// The NCCL element type of `dtype` for reductions, if NCCL has one.
fn reduced_type(dtype: DType) -> Option<sys::ncclDataType_t> {
    use sys::ncclDataType_t::*;
    Some(match dtype {
        DType::F32 => ncclFloat32,
        DType::F64 => ncclFloat64,
        DType::F16 => ncclFloat16,
        DType::BF16 => ncclBfloat16,
        DType::I8 => ncclInt8,
        DType::U8 => ncclUint8,
        DType::I32 => ncclInt32,
        DType::U32 => ncclUint32,
        DType::I64 => ncclInt64,
        DType::U64 => ncclUint64,
        _ => return None,
    })
}

/// A communicator of `size` ranks, this one `rank`, on `gpu`'s stream.
pub struct Comm {
    raw: sys::ncclComm_t,
    gpu: Arc<Gpu>,
    rank: usize,
    size: usize,
    timeout: Duration,
    aborted: AtomicBool,
    /// NCCL calls on one communicator are made one at a time.
    calls: Mutex<()>,
}

// SAFETY: the raw communicator is only used under `calls` (or once, in drop), and NCCL allows
// a communicator to be used from any thread, one call at a time.
unsafe impl Send for Comm {}
// SAFETY: as above: every use takes `calls` first.
unsafe impl Sync for Comm {}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NCCL rank {} of {} on {:?}",
            self.rank, self.size, self.gpu
        )
    }
}

impl Comm {
    /// Joins the communicator of `id` as `rank` of `size` on `gpu`. Every rank must call it;
    /// one that does not come within `timeout` makes it an error on the others (the
    /// half-made communicator is aborted).
    pub fn init(
        gpu: Arc<Gpu>,
        id: [u8; ID_BYTES],
        (rank, size): (usize, usize),
        timeout: Duration,
    ) -> Result<Comm> {
        require(Library::Nccl)?;
        let ranks = i32::try_from(size)
            .map_err(|_| error("init", (rank, gpu.index()), "too many ranks"))?;
        let mut config = sys::ncclConfig_t {
            size: size_of::<sys::ncclConfig_t>(),
            magic: 0xcafe_beef,
            // The layout of NCCL 2.19's config, which later versions read by its size.
            version: 21_900,
            blocking: 0,
            cgaClusterSize: i32::MIN,
            minCTAs: i32::MIN,
            maxCTAs: i32::MIN,
            netName: std::ptr::null(),
            splitShare: i32::MIN,
            trafficClass: i32::MIN,
        };
        let unique = sys::ncclUniqueId {
            internal: id.map(|b| b as _),
        };
        let mut raw: sys::ncclComm_t = std::ptr::null_mut();
        gpu.context
            .bind_to_thread()
            .map_err(|e| error("init", (rank, gpu.index()), e))?;
        // SAFETY: `raw` and `config` outlive the call; NCCL writes the handle into `raw`.
        let started = unsafe {
            cudarc::nccl::result::comm_init_rank_config(
                &mut raw,
                ranks,
                unique,
                rank as i32,
                &mut config,
            )
        };
        let comm = Comm {
            raw,
            gpu,
            rank,
            size,
            timeout,
            aborted: AtomicBool::new(false),
            calls: Mutex::new(()),
        };
        if let Err(e) = started {
            comm.abort();
            return Err(comm.fail("init", describe(e.0)));
        }
        comm.settle("init", &format!("the other {} rank(s) to join", size - 1))?;
        Ok(comm)
    }

    /// An error of `op` on this rank and device.
    fn fail(&self, op: &str, reason: impl std::fmt::Display) -> CudaError {
        error(op, (self.rank, self.gpu.index()), reason)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The GPU it runs on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// NCCL's asynchronous status: `Ok(true)` when done, `Ok(false)` while in progress.
    fn status(&self, op: &str) -> Result<bool> {
        if self.aborted.load(Ordering::Acquire) {
            return Err(self.fail(op, "the communicator was aborted after an earlier failure"));
        }
        let mut status = sys::ncclResult_t::ncclSuccess;
        // SAFETY: `raw` is a live communicator (not aborted) and `status` outlives the call.
        let asked = unsafe { sys::ncclCommGetAsyncError(self.raw, &mut status) };
        if asked != sys::ncclResult_t::ncclSuccess {
            return Err(self.fail(op, describe(asked)));
        }
        match status {
            sys::ncclResult_t::ncclSuccess => Ok(true),
            sys::ncclResult_t::ncclInProgress => Ok(false),
            other => Err(self.fail(op, describe(other))),
        }
    }

    /// Waits for NCCL to finish setting up (`init`), aborting at the timeout.
    fn settle(&self, op: &str, waiting_for: &str) -> Result<()> {
        let start = Instant::now();
        loop {
            match self.status(op) {
                Ok(true) => return Ok(()),
                Ok(false) if start.elapsed() < self.timeout => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Ok(false) => {
                    self.abort();
                    return Err(self.fail(
                        op,
                        format!(
                            "waited {:.1} s for {waiting_for}; the communicator was aborted",
                            self.timeout.as_secs_f64()
                        ),
                    ));
                }
                Err(e) => {
                    self.abort();
                    return Err(e);
                }
            }
        }
    }

    /// Runs `enqueue` (NCCL calls on the stream), then waits for the stream, aborting the
    /// communicator when NCCL reports an error or the timeout passes first.
    fn call(
        &self,
        op: &str,
        enqueue: impl FnOnce(sys::ncclComm_t, sys::cudaStream_t) -> sys::ncclResult_t,
    ) -> Result<()> {
        let _one = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        self.status(op)?;
        self.gpu
            .context
            .bind_to_thread()
            .map_err(|e| self.fail(op, e))?;
        let stream = self.gpu.stream.cu_stream() as sys::cudaStream_t;
        let queued = enqueue(self.raw, stream);
        if !matches!(
            queued,
            sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress
        ) {
            self.abort();
            return Err(self.fail(op, describe(queued)));
        }
        let done = self
            .gpu
            .stream
            .record_event(None)
            .map_err(|e| self.fail(op, e))?;
        let start = Instant::now();
        loop {
            if done.try_is_complete().map_err(|e| self.fail(op, e))? {
                return self.status(op).map(drop);
            }
            if let Err(e) = self.status(op) {
                self.abort();
                return Err(e);
            }
            if start.elapsed() >= self.timeout {
                self.abort();
                return Err(self.fail(
                    op,
                    format!(
                        "did not finish within {:.1} s: a rank stalled, left or called another \
                         collective; the communicator was aborted",
                        self.timeout.as_secs_f64()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Aborts the communicator (NCCL's calls in flight end); later calls are errors.
    pub fn abort(&self) {
        if self.raw.is_null() || self.aborted.swap(true, Ordering::AcqRel) {
            return;
        }
        // SAFETY: `raw` is a live communicator, aborted once (the flag above).
        let _ = unsafe { cudarc::nccl::result::comm_abort(self.raw) };
    }

    /// Whether the communicator is usable (not aborted, no asynchronous error).
    pub fn health(&self) -> Result<()> {
        let _one = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        self.status("health").map(drop)
    }

    fn typed(&self, op: &str, dtype: DType) -> Result<sys::ncclDataType_t> {
        reduced_type(dtype).ok_or_else(|| CudaError::Unsupported {
            op: format!("NCCL {op}"),
            dtype: dtype.to_string(),
            device: self.gpu.index(),
        })
    }

    /// `output = op` over every rank's `input` (`count` elements of `dtype` each).
    pub fn all_reduce(
        &self,
        (input, output): (&DeviceBuffer, &mut DeviceBuffer),
        count: usize,
        dtype: DType,
        reduction: Reduction,
    ) -> Result<()> {
        let kind = self.typed("all_reduce", dtype)?;
        let (send, recv) = (pointer(input), pointer_mut(output));
        self.call("all_reduce", |comm, stream| {
            // SAFETY: both buffers hold `count` elements on this communicator's GPU.
            unsafe { sys::ncclAllReduce(send, recv, count, kind, op_of(reduction), comm, stream) }
        })
    }

    /// Every rank's `input` (`bytes` each) in rank order into `output`.
    pub fn all_gather(
        &self,
        (input, output): (&DeviceBuffer, &mut DeviceBuffer),
        bytes: usize,
    ) -> Result<()> {
        let (send, recv) = (pointer(input), pointer_mut(output));
        self.call("all_gather", |comm, stream| {
            // SAFETY: `input` holds `bytes`, `output` `size × bytes`, both on this GPU.
            unsafe {
                sys::ncclAllGather(
                    send,
                    recv,
                    bytes,
                    sys::ncclDataType_t::ncclUint8,
                    comm,
                    stream,
                )
            }
        })
    }

    /// This rank's `count` elements of the reduction of every rank's `input` (`size × count`).
    pub fn reduce_scatter(
        &self,
        (input, output): (&DeviceBuffer, &mut DeviceBuffer),
        count: usize,
        dtype: DType,
        reduction: Reduction,
    ) -> Result<()> {
        let kind = self.typed("reduce_scatter", dtype)?;
        let (send, recv) = (pointer(input), pointer_mut(output));
        self.call("reduce_scatter", |comm, stream| {
            // SAFETY: `input` holds `size × count` elements and `output` `count`, on this GPU.
            unsafe {
                sys::ncclReduceScatter(send, recv, count, kind, op_of(reduction), comm, stream)
            }
        })
    }

    /// Rank `root`'s `bytes` of `data` into every rank's `data`.
    pub fn broadcast(&self, data: &mut DeviceBuffer, bytes: usize, root: usize) -> Result<()> {
        let buffer = pointer_mut(data);
        self.call("broadcast", |comm, stream| {
            // SAFETY: `data` holds `bytes` on this GPU; NCCL reads and writes it in place.
            unsafe {
                sys::ncclBroadcast(
                    buffer,
                    buffer,
                    bytes,
                    sys::ncclDataType_t::ncclUint8,
                    root as i32,
                    comm,
                    stream,
                )
            }
        })
    }

    /// Sends `bytes` of `data` to rank `peer`.
    pub fn send(&self, data: &DeviceBuffer, bytes: usize, peer: usize) -> Result<()> {
        let buffer = pointer(data);
        self.call("send", |comm, stream| {
            // SAFETY: `data` holds `bytes` on this GPU.
            unsafe {
                sys::ncclSend(
                    buffer,
                    bytes,
                    sys::ncclDataType_t::ncclUint8,
                    peer as i32,
                    comm,
                    stream,
                )
            }
        })
    }

    /// Receives `bytes` from rank `peer` into `data`.
    pub fn recv(&self, data: &mut DeviceBuffer, bytes: usize, peer: usize) -> Result<()> {
        let buffer = pointer_mut(data);
        self.call("recv", |comm, stream| {
            // SAFETY: `data` holds `bytes` on this GPU.
            unsafe {
                sys::ncclRecv(
                    buffer,
                    bytes,
                    sys::ncclDataType_t::ncclUint8,
                    peer as i32,
                    comm,
                    stream,
                )
            }
        })
    }
}

impl Drop for Comm {
    /// Aborting frees the communicator without waiting for ranks that may be gone.
    fn drop(&mut self) {
        self.abort();
    }
}

fn op_of(reduction: Reduction) -> sys::ncclRedOp_t {
    match reduction {
        Reduction::Sum => sys::ncclRedOp_t::ncclSum,
        Reduction::Max => sys::ncclRedOp_t::ncclMax,
        Reduction::Min => sys::ncclRedOp_t::ncclMin,
    }
}

fn pointer(buffer: &DeviceBuffer) -> *const c_void {
    let block = buffer.block();
    let (address, _sync) = block.device_ptr(block.stream());
    address as *const c_void
}

fn pointer_mut(buffer: &mut DeviceBuffer) -> *mut c_void {
    pointer(buffer) as *mut c_void
}
