//! The MPI backend: nuvec's collectives over Open MPI, loaded at run time.
//!
//! # Design
//! The library is opened on first use (`available`, `world`); nothing about MPI is needed
//! to build nuvec. `MPI_Init_thread` runs once per process at the `SERIALIZED` level, and
//! every MPI call is made under one process-wide lock, so collectives may be evaluated on any
//! thread. Communicators return errors (`MPI_ERRORS_RETURN`) instead of aborting the process;
//! a failed call leaves the communicator unusable (MPI makes no promise about its state), and
//! later calls repeat the first error. `MPI_Finalize` runs when the process exits, unless a
//! collective failed or a thread panicked (a finalize would then wait for ranks that will
//! never arrive).
//!
//! # What MPI cannot tell us
//! MPI has no timeouts: a rank that stops calling collectives blocks its peers, as in any MPI
//! program. A rank that dies is noticed by `mpirun`/`srun`, which end the whole job; the
//! survivors do not get an error to handle. See [`docs/mpi.md`](https://github.com/nuvec/nuvec/blob/main/docs/mpi.md).

#[cfg(test)]
mod abi_tests;
mod chunks;
mod ffi;
mod half;
mod message;
mod types;

use chunks::{max_count, pack, ranges, unpack};
use ffi::{BcastBuffer, Handle, Mpi};
use message::{Header, MAX_HEADER};
use nuvec_core::distributed::{Communicator, ReduceOp};
use nuvec_core::{DType, Error, Result};
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use types::{datatype, reduction, HalfOps};

/// Tags of the two messages of a `send`: the header, then the data.
const HEADER_TAG: c_int = 0x4e56;
const DATA_TAG: c_int = 0x4e57;

/// The loaded library, or why it could not be loaded.
fn library() -> &'static std::result::Result<Mpi, String> {
    static LIBRARY: OnceLock<std::result::Result<Mpi, String>> = OnceLock::new();
    LIBRARY.get_or_init(Mpi::load)
}

/// Whether Open MPI can be loaded on this machine.
pub(crate) fn available() -> bool {
    library().is_ok()
}

/// Held around every MPI call (the library was initialised for serialised calls).
static CALLS: Mutex<()> = Mutex::new(());

/// Set when a collective failed or a thread panicked: finalize would then wait forever.
static SKIP_FINALIZE: AtomicBool = AtomicBool::new(false);

/// The process's MPI state after `MPI_Init`: the library and nuvec's user operations.
struct Runtime {
    mpi: &'static Mpi,
    half: HalfOps,
}

/// Initialises MPI once per process and returns it.
fn runtime() -> std::result::Result<&'static Runtime, String> {
    static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let mpi = library().as_ref().map_err(Clone::clone)?;
            let _serial = lock();
            let (initialized, finalized) = mpi.state();
            if finalized {
                return Err("MPI was already finalized in this process".into());
            }
            if !initialized {
                let provided = mpi.init();
                if provided < 0 {
                    return Err("MPI_Init_thread failed".into());
                }
                if provided < ffi::THREAD_SERIALIZED {
                    return Err(format!(
                        "MPI provides thread level {provided}; nuvec needs MPI_THREAD_SERIALIZED (2)"
                    ));
                }
                ffi::at_exit(finalize_at_exit);
                let previous = std::panic::take_hook();
                std::panic::set_hook(Box::new(move |info| {
                    SKIP_FINALIZE.store(true, Ordering::SeqCst);
                    previous(info);
                }));
            }
            mpi.return_errors(mpi.world)
                .map_err(|code| mpi.error_string(code))?;
            let half = HalfOps::create(mpi).map_err(|code| mpi.error_string(code))?;
            Ok(Runtime { mpi, half })
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    CALLS.lock().unwrap_or_else(|p| p.into_inner())
}

extern "C" fn finalize_at_exit() {
    if SKIP_FINALIZE.load(Ordering::SeqCst) {
        return;
    }
    if let Ok(mpi) = library() {
        // A thread still inside MPI would make finalize unsafe: then leave it to mpirun.
        if let Ok(_serial) = CALLS.try_lock() {
            let (initialized, finalized) = mpi.state();
            if initialized && !finalized {
                mpi.finalize();
            }
        }
    }
}

/// The world communicator of a process started by `mpirun` or `srun` (initialising MPI).
pub(crate) fn world() -> std::result::Result<MpiCommunicator, String> {
    let runtime = runtime()?;
    let _serial = lock();
    let (rank, size) = runtime
        .mpi
        .rank_and_size(runtime.mpi.world)
        .map_err(|code| runtime.mpi.error_string(code))?;
    Ok(MpiCommunicator::new(
        runtime,
        runtime.mpi.world,
        rank,
        size,
        false,
    ))
}

/// A communicator of the MPI backend: `MPI_COMM_WORLD` or one made by [`Communicator::split`].
pub struct MpiCommunicator {
    runtime: &'static Runtime,
    comm: Handle,
    rank: usize,
    size: usize,
    /// Whether `close` frees the communicator (split ones; never the world).
    owned: bool,
    state: Mutex<State>,
}

/// Whether a communicator can still be used.
enum State {
    Open,
    /// A call failed: later calls repeat this error.
    Failed(Error),
    /// `close` ran.
    Closed,
}

impl std::fmt::Debug for MpiCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiCommunicator")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish()
    }
}

impl MpiCommunicator {
    fn new(runtime: &'static Runtime, comm: Handle, rank: usize, size: usize, owned: bool) -> Self {
        MpiCommunicator {
            runtime,
            comm,
            rank,
            size,
            owned,
            state: Mutex::new(State::Open),
        }
    }

    fn error(&self, op: &str, reason: String) -> Error {
        Error::Distributed {
            op: op.into(),
            rank: None,
            reason: format!("rank {} of {} (mpi): {reason}", self.rank, self.size),
        }
    }

    /// `MPI_Bcast` of `data` (elements of `dtype`) from `root`, in pieces of at most the
    /// int count.
    fn bcast_in_pieces(&self, mut data: BcastBuffer<'_>, dtype: DType, root: usize) -> Result<()> {
        let width = dtype.size();
        let count = match &data {
            BcastBuffer::Into(data) => data.len(),
            BcastBuffer::FromRoot(data) => data.len(),
        } / width;
        self.run("broadcast", |mpi| {
            let kind = datatype(mpi, dtype);
            for range in ranges(count, max_count()) {
                let bytes = range.start * width..range.end * width;
                let piece = match &mut data {
                    BcastBuffer::Into(data) => BcastBuffer::Into(&mut data[bytes]),
                    BcastBuffer::FromRoot(data) => BcastBuffer::FromRoot(&data[bytes]),
                };
                mpi.bcast(piece, range.len(), kind, root, self.comm)
                    .map_err(named("MPI_Bcast"))?;
            }
            Ok(())
        })
    }

    /// Runs `body` under the MPI lock unless the group failed or was closed; an MPI error
    /// becomes the group's failure. `body` gets the library and names the failed function.
    fn run<T>(
        &self,
        op: &str,
        body: impl FnOnce(&Mpi) -> std::result::Result<T, (&'static str, c_int)>,
    ) -> Result<T> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &*state {
            State::Open => {}
            State::Failed(failure) => {
                return Err(self.error(op, format!("the group failed earlier: {failure}")))
            }
            State::Closed => return Err(self.error(op, "the group was closed".into())),
        }
        let _serial = lock();
        body(self.runtime.mpi).map_err(|(function, code)| {
            let error = self.error(
                op,
                format!("{function} failed: {}", self.runtime.mpi.error_string(code)),
            );
            SKIP_FINALIZE.store(true, Ordering::SeqCst);
            *state = State::Failed(error.clone());
            error
        })
    }
}

/// Tags an MPI error code with the function that returned it.
fn named(function: &'static str) -> impl Fn(c_int) -> (&'static str, c_int) {
    move |code| (function, code)
}

impl Communicator for MpiCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn backend(&self) -> &'static str {
        "mpi"
    }

    fn all_reduce(&self, data: &mut [u8], dtype: DType, op: ReduceOp) -> Result<()> {
        let width = dtype.size();
        self.run(op.collective_name(), |mpi| {
            let (kind, reduce) = (
                datatype(mpi, dtype),
                reduction(mpi, &self.runtime.half, dtype, op),
            );
            for range in ranges(data.len() / width, max_count()) {
                let bytes = &mut data[range.start * width..range.end * width];
                mpi.allreduce(None, bytes, range.len(), kind, reduce, self.comm)
                    .map_err(named("MPI_Allreduce"))?;
            }
            Ok(())
        })
    }

    fn all_gather(&self, input: &[u8], output: &mut [u8], dtype: DType) -> Result<()> {
        let (width, count) = (dtype.size(), input.len() / dtype.size());
        self.run("all_gather", |mpi| {
            let kind = datatype(mpi, dtype);
            let max = max_count();
            if count <= max {
                return mpi
                    .allgather(input, output, count, kind, self.comm)
                    .map_err(named("MPI_Allgather"));
            }
            let mut gathered = Vec::new();
            for range in ranges(count, max) {
                gathered.resize(range.len() * width * self.size, 0);
                let piece = &input[range.start * width..range.end * width];
                mpi.allgather(piece, &mut gathered, range.len(), kind, self.comm)
                    .map_err(named("MPI_Allgather"))?;
                unpack(&gathered, count, &range, width, output);
            }
            Ok(())
        })
    }

    /// Open MPI's `MPI_Bcast`. Ranks that name different roots are MPI's undefined
    /// behaviour, as mismatched calls of the other collectives are.
    fn broadcast(&self, data: &mut [u8], dtype: DType, root: usize) -> Result<()> {
        if root >= self.size {
            let reason = format!(
                "root rank {root} is not a rank of the group (0..{})",
                self.size
            );
            return Err(self.error("broadcast", reason));
        }
        self.bcast_in_pieces(BcastBuffer::Into(data), dtype, root)
    }

    /// `MPI_Bcast` from this rank, the root, without a copy of `data`.
    fn broadcast_unchanged(&self, data: &[u8], dtype: DType) -> Result<bool> {
        self.bcast_in_pieces(BcastBuffer::FromRoot(data), dtype, self.rank)?;
        Ok(true)
    }

    /// Open MPI's `MPI_Alltoall`, in chunks of at most the int count per rank.
    fn all_to_all(&self, input: &[u8], output: &mut [u8], dtype: DType) -> Result<()> {
        let width = dtype.size();
        let block = input.len() / width / self.size;
        self.run("all_to_all", |mpi| {
            let kind = datatype(mpi, dtype);
            let max = max_count();
            if block <= max {
                return mpi
                    .alltoall(input, output, block, kind, self.comm)
                    .map_err(named("MPI_Alltoall"));
            }
            let (mut packed, mut received) = (Vec::new(), Vec::new());
            for range in ranges(block, max) {
                pack(input, block, &range, width, &mut packed);
                received.resize(packed.len(), 0);
                mpi.alltoall(&packed, &mut received, range.len(), kind, self.comm)
                    .map_err(named("MPI_Alltoall"))?;
                unpack(&received, block, &range, width, output);
            }
            Ok(())
        })
    }

    /// Open MPI's `MPI_Alltoallv`, after the counts are checked to agree (one small
    /// all-gather, as the default does); counts or offsets past the int range take the
    /// default's path.
    fn all_to_all_v(
        &self,
        input: &[u8],
        output: &mut [u8],
        (send, recv, row_bytes): (&[usize], &[usize], usize),
        dtype: DType,
    ) -> Result<()> {
        let width = dtype.size();
        let row = row_bytes / width;
        // Elements and offsets of each rank's rows, as ints (within the count limit).
        let limit = max_count();
        let int = |n: usize| (n <= limit).then(|| c_int::try_from(n).ok()).flatten();
        let layout = |counts: &[usize]| -> Option<(Vec<c_int>, Vec<c_int>)> {
            let (mut sizes, mut offsets, mut at) = (Vec::new(), Vec::new(), 0usize);
            for &count in counts {
                let elements = count.checked_mul(row)?;
                sizes.push(int(elements)?);
                offsets.push(int(at)?);
                at = at.checked_add(elements)?;
            }
            int(at)?;
            Some((sizes, offsets))
        };
        let (Some(sending), Some(receiving)) = (layout(send), layout(recv)) else {
            let counts = (send, recv, row_bytes);
            return nuvec_core::distributed::all_to_all_v_by_gathering(
                self,
                (input, output),
                counts,
                dtype,
            );
        };
        // Every region within its buffer: what the FFI call relies on.
        let elements = |bytes: &[u8]| bytes.len() / width;
        let total =
            |layout: &(Vec<c_int>, Vec<c_int>)| layout.0.iter().map(|&c| c as usize).sum::<usize>();
        if send.len() != self.size
            || recv.len() != self.size
            || total(&sending) != elements(input)
            || total(&receiving) != elements(output)
        {
            return Err(self.error(
                "all_to_all_v",
                format!(
                    "counts for {} and {} ranks do not match a group of {} and buffers of {} and {} elements",
                    send.len(),
                    recv.len(),
                    self.size,
                    elements(input),
                    elements(output)
                ),
            ));
        }
        nuvec_core::distributed::check_all_to_all_counts(self, (send, recv))?;
        self.run("all_to_all_v", |mpi| {
            let kind = datatype(mpi, dtype);
            let counts = (&sending.0[..], &receiving.0[..]);
            let offsets = (&sending.1[..], &receiving.1[..]);
            mpi.alltoallv((input, output), counts, offsets, kind, self.comm)
                .map_err(named("MPI_Alltoallv"))
        })
    }

    /// Open MPI's `MPI_Barrier`.
    fn barrier(&self) -> Result<()> {
        self.run("barrier", |mpi| {
            mpi.barrier(self.comm).map_err(named("MPI_Barrier"))
        })
    }

    fn reduce_scatter(
        &self,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let (width, count) = (dtype.size(), output.len() / dtype.size());
        self.run("sum_scatter", |mpi| {
            let (kind, reduce) = (
                datatype(mpi, dtype),
                reduction(mpi, &self.runtime.half, dtype, op),
            );
            let max = max_count();
            if count <= max {
                return mpi
                    .reduce_scatter_block(input, output, count, kind, reduce, self.comm)
                    .map_err(named("MPI_Reduce_scatter_block"));
            }
            let mut packed = Vec::new();
            for range in ranges(count, max) {
                pack(input, count, &range, width, &mut packed);
                let mine = &mut output[range.start * width..range.end * width];
                mpi.reduce_scatter_block(&packed, mine, range.len(), kind, reduce, self.comm)
                    .map_err(named("MPI_Reduce_scatter_block"))?;
            }
            Ok(())
        })
    }

    fn send(&self, data: &[u8], dtype: DType, shape: &[i32], dst: usize) -> Result<()> {
        self.check_peer("send", dst)?;
        let header = Header {
            dtype,
            shape: shape.to_vec(),
            bytes: data.len() as u64,
        };
        self.run("send", |mpi| {
            mpi.send(&header.encode(), dst, HEADER_TAG, self.comm)
                .map_err(named("MPI_Send"))?;
            for range in ranges(data.len(), max_count()) {
                mpi.send(&data[range], dst, DATA_TAG, self.comm)
                    .map_err(named("MPI_Send"))?;
            }
            Ok(())
        })
    }

    fn recv(&self, data: &mut [u8], dtype: DType, shape: &[i32], src: usize) -> Result<()> {
        self.check_peer("recv", src)?;
        let outcome = self.run("recv", |mpi| {
            let mut raw = [0u8; MAX_HEADER];
            let length = mpi
                .recv(&mut raw, src, HEADER_TAG, self.comm)
                .map_err(named("MPI_Recv"))?;
            let header = match Header::decode(&raw[..length]) {
                Ok(header) => header,
                Err(reason) => return Ok(Err((reason, true))),
            };
            if header.dtype == dtype && header.shape == shape {
                for range in ranges(data.len(), max_count()) {
                    mpi.recv(&mut data[range], src, DATA_TAG, self.comm)
                        .map_err(named("MPI_Recv"))?;
                }
                return Ok(Ok(()));
            }
            // Take the data off the wire so the next message from this peer is read right.
            let mut discard = vec![0u8; (header.bytes as usize).min(max_count())];
            for range in ranges(header.bytes as usize, max_count()) {
                mpi.recv(&mut discard[..range.len()], src, DATA_TAG, self.comm)
                    .map_err(named("MPI_Recv"))?;
            }
            Ok(Err((
                format!(
                    "rank {src} sent {} {:?}, rank {} expected {dtype} {shape:?}",
                    header.dtype, header.shape, self.rank
                ),
                false,
            )))
        })?;
        outcome.map_err(|(reason, unreadable)| {
            let error = Error::Distributed {
                op: "recv".into(),
                rank: Some(src),
                reason,
            };
            // A header that cannot be read leaves its data message unread: later receives
            // from this peer would take it for theirs, so the group stops here.
            if unreadable {
                *self.state.lock().unwrap_or_else(|p| p.into_inner()) =
                    State::Failed(error.clone());
            }
            error
        })
    }

    fn split(&self, color: i32, key: i32) -> Result<Arc<dyn Communicator>> {
        if color < 0 {
            return Err(self.error("split", format!("the color must be 0 or more, got {color}")));
        }
        let key = if key < 0 { self.rank as i32 } else { key };
        let comm = self.run("split", |mpi| {
            mpi.split(self.comm, color, key)
                .map_err(named("MPI_Comm_split"))
        })?;
        let runtime = self.runtime;
        let (rank, size) = self.run("split", |mpi| {
            mpi.return_errors(comm)
                .map_err(named("MPI_Comm_set_errhandler"))?;
            mpi.rank_and_size(comm).map_err(named("MPI_Comm_rank"))
        })?;
        Ok(Arc::new(MpiCommunicator::new(
            runtime, comm, rank, size, true,
        )))
    }

    fn health(&self) -> Result<()> {
        self.run("health", |_| Ok(()))
    }

    fn close(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*state, State::Closed) {
            return;
        }
        *state = State::Closed;
        if self.owned {
            let _serial = lock();
            self.runtime.mpi.free(self.comm);
        }
    }
}

impl MpiCommunicator {
    fn check_peer(&self, op: &str, peer: usize) -> Result<()> {
        if peer >= self.size || peer == self.rank {
            return Err(self.error(
                op,
                format!(
                    "the peer must be another rank of the group (0..{}), got {peer}",
                    self.size
                ),
            ));
        }
        Ok(())
    }
}

/// The variables in which `mpirun` (Open MPI's, then PMI's) or `srun` (a job step's) tell a
/// process how many were started.
pub(crate) const LAUNCH_SIZE_VARIABLES: [&str; 3] =
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"];

/// The number of ranks `mpirun` or `srun` started ([`LAUNCH_SIZE_VARIABLES`]), when more than
/// one.
pub(crate) fn launched_size() -> Option<usize> {
    LAUNCH_SIZE_VARIABLES
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
        .filter(|&size: &usize| size > 1)
}
