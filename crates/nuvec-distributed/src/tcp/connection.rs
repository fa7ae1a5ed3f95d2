//! One TCP connection to a peer. Writes go straight to the socket from the calling thread
//! while it has room (a non-blocking send, no copy, no thread hand-off); what does not fit is
//! queued for the connection's writer thread, so this rank keeps receiving while a large send
//! drains (no thread per step, no spinning). The thread starts with the first write that has
//! to wait and lasts as long as the connection; one this rank only reads never starts it. A
//! point-to-point send instead writes its whole frame from the calling thread, waiting for room
//! ([`Connection::write_through`]). Reads poll briefly as [`Poll`] says, then block with a timeout.
//! Failures become errors naming the peer's rank.

use crate::sync::lock;
use nuvec_core::Error;
use std::io::{ErrorKind, IoSlice, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long `health` waits for a sign of a closed connection; an open, quiet one times out.
const HEALTH_PROBE: Duration = Duration::from_millis(1);
mod reading;
#[cfg(test)]
pub(crate) use reading::MESSAGE_SPIN;
pub(crate) use reading::{Poll, SPIN, YIELD};

/// How many written buffers a connection keeps for reuse, and the largest it keeps.
const SPARES: usize = 8;
const SPARE_BYTES: usize = 1 << 20;
/// The most bytes one send hands the kernel: a collective's chunk, or a large message, goes
/// in pieces of this size. Our reading of why it helps: a send of a whole 256 KiB chunk holds
/// the socket's lock for the whole copy and ends in a short segment, while pieces below one of
/// loopback's segments make one segment each and let the acknowledgements in between them
/// (pieces just past a segment are far slower, which fits). Pieces of 32 to 56 KiB did about
/// as well (measured: `docs/performance.md`, "Tuning measurements").
pub(crate) const SEND_PIECE: usize = 48 << 10;
/// How long closing waits for queued bytes to be handed to the kernel.
const DRAIN_ON_CLOSE: Duration = Duration::from_secs(1);

enum Job {
    Write(Vec<u8>),
    Flush(Sender<Result<(), String>>),
    /// Ends this side's writing once everything queued before it has been sent.
    EndWrites,
}

/// What the calling thread and the writer thread share.
#[derive(Debug)]
struct Outgoing {
    /// The writing end; its lock orders direct sends against the writer thread's.
    stream: Mutex<TcpStream>,
    /// Jobs queued and not yet finished by the writer thread.
    pending: AtomicUsize,
    /// The first failed write.
    failure: Mutex<Option<String>>,
    /// Buffers of finished writes, kept for reuse (at most `SPARES`, each at most
    /// `SPARE_BYTES`): the bounded scratch memory of a connection.
    spares: Mutex<Vec<Vec<u8>>>,
}

/// The reading end and the read timeout last set on it (setting it costs a system call).
#[derive(Debug)]
struct Incoming {
    stream: TcpStream,
    timeout: Option<Duration>,
}

impl Incoming {
    fn set_timeout(&mut self, timeout: Duration) -> std::io::Result<()> {
        if self.timeout != Some(timeout) {
            self.stream.set_read_timeout(Some(timeout))?;
            self.timeout = Some(timeout);
        }
        Ok(())
    }
}

/// What a read asks each [`WATCH_AFTER`] it blocks, as every wait of a collective does: the
/// group's watch over its incoming connections (`watch.rs`).
pub(crate) trait Watcher: std::fmt::Debug + Send + Sync {
    /// Fails when another connection shows that the call cannot succeed: an abort notice, or
    /// a frame of another call.
    fn check(&self, op: &str) -> Result<(), Error>;
}

/// How long a read blocks before it asks the group's [`Watcher`], and again between asks.
pub(crate) const WATCH_AFTER: Duration = Duration::from_millis(20);

/// A connection to rank `rank`.
#[derive(Debug)]
pub(crate) struct Connection {
    pub(crate) rank: usize,
    /// How a read waits before sleeping.
    poll: Poll,
    reader: Mutex<Incoming>,
    /// The group's watch over its incoming connections, once the group is connected.
    watch: OnceLock<Arc<dyn Watcher>>,
    control: TcpStream,
    outgoing: Arc<Outgoing>,
    writer: Mutex<Writer>,
    /// Where the peer said it was in the abort notice read from it, if one was.
    place: Mutex<Option<String>>,
}

/// The connection's writer thread, started by the first write that has to wait for room: a
/// connection this rank only reads from never starts one.
#[derive(Debug)]
enum Writer {
    NotStarted,
    Running {
        jobs: Sender<Job>,
        thread: JoinHandle<()>,
    },
    Closed,
}

fn write_loop(outgoing: Arc<Outgoing>, jobs: Receiver<Job>) {
    for job in jobs {
        // The job finishes (and `pending` drops) under the stream's lock, so a direct send
        // that sees nothing pending cannot overtake it.
        let mut stream = lock(&outgoing.stream);
        match job {
            Job::Write(bytes) => {
                if lock(&outgoing.failure).is_none() {
                    if let Err(e) = bytes
                        .chunks(SEND_PIECE)
                        .try_for_each(|piece| stream.write_all(piece))
                    {
                        *lock(&outgoing.failure) = Some(e.to_string());
                    }
                }
                let mut spares = lock(&outgoing.spares);
                if spares.len() < SPARES && bytes.capacity() <= SPARE_BYTES {
                    spares.push(bytes);
                }
            }
            Job::EndWrites => {
                let _ = stream.shutdown(Shutdown::Write);
            }
            Job::Flush(done) => {
                let _ = done.send(match &*lock(&outgoing.failure) {
                    Some(reason) => Err(reason.clone()),
                    None => Ok(()),
                });
            }
        }
        outgoing.pending.fetch_sub(1, Ordering::AcqRel);
        drop(stream);
    }
}

/// Fills `slices` with at most `most` bytes of `parts` after the first `sent`, without
/// allocating; returns how many slices it filled. Frames have at most a few parts; any
/// beyond the slots or the bytes go in a later round of the caller's loop.
fn unsent<'a>(parts: &[&'a [u8]], sent: usize, most: usize, slices: &mut [IoSlice<'a>]) -> usize {
    let mut count = 0;
    let mut skip = sent;
    let mut room = most;
    for part in parts {
        if skip >= part.len() {
            skip -= part.len();
        } else if count < slices.len() && room > 0 {
            let rest = &part[skip..];
            let taken = rest.len().min(room);
            slices[count] = IoSlice::new(&rest[..taken]);
            room -= taken;
            skip = 0;
            count += 1;
        }
    }
    count
}

impl Connection {
    /// Wraps a connected, handshaken stream to rank `rank`; reads wait as `poll` says.
    pub(crate) fn new(rank: usize, stream: TcpStream, poll: Poll) -> std::io::Result<Connection> {
        stream.set_nodelay(true)?;
        crate::platform::enable_keepalive(&stream)?;
        let outgoing = Arc::new(Outgoing {
            stream: Mutex::new(stream.try_clone()?),
            pending: AtomicUsize::new(0),
            failure: Mutex::new(None),
            spares: Mutex::new(Vec::new()),
        });
        let control = stream.try_clone()?;
        Ok(Connection {
            rank,
            poll,
            watch: OnceLock::new(),
            reader: Mutex::new(Incoming {
                stream,
                timeout: None,
            }),
            control,
            outgoing,
            writer: Mutex::new(Writer::NotStarted),
            place: Mutex::new(None),
        })
    }

    /// Keeps where the peer said it was (`in all_sum #41 (...)`), read from its abort notice.
    pub(crate) fn heard_place(&self, place: String) {
        *lock(&self.place) = Some(place);
    }

    /// Where the peer said it was in its abort notice, if one was read.
    pub(crate) fn place(&self) -> Option<String> {
        lock(&self.place).clone()
    }

    /// Joins the group's watch: a read on this connection that waits long watches the
    /// group's other connections (`watch.rs`).
    pub(crate) fn join_watch(&self, watch: Arc<dyn Watcher>) {
        let _ = self.watch.set(watch);
    }

    /// An error of `op` on this connection, naming the peer.
    pub(crate) fn error(&self, op: &str, reason: String) -> Error {
        Error::Distributed {
            op: op.to_string(),
            rank: Some(self.rank),
            reason,
        }
    }

    /// Whether the writer thread has been started (and not yet stopped).
    #[cfg(test)]
    pub(crate) fn has_writer_thread(&self) -> bool {
        matches!(*lock(&self.writer), Writer::Running { .. })
    }

    /// Hands `job` to the writer thread, starting it on first use.
    fn queue(&self, op: &str, job: Job) -> Result<(), Error> {
        let mut writer = lock(&self.writer);
        if matches!(*writer, Writer::NotStarted) {
            let (jobs, receiver) = channel();
            let shared = self.outgoing.clone();
            let thread = std::thread::Builder::new()
                .name(format!("nuvec-ring-write-{}", self.rank))
                .spawn(move || write_loop(shared, receiver))
                .map_err(|e| self.error(op, format!("cannot start a writer thread: {e}")))?;
            *writer = Writer::Running { jobs, thread };
        }
        let Writer::Running { jobs, .. } = &*writer else {
            return Err(self.error(op, "the connection was closed".into()));
        };
        self.outgoing.pending.fetch_add(1, Ordering::AcqRel);
        jobs.send(job).map_err(|_| {
            self.outgoing.pending.fetch_sub(1, Ordering::AcqRel);
            self.error(op, "the connection's writer stopped".into())
        })
    }

    fn send_timed_out(&self, op: &str, timeout: Duration) -> Error {
        self.error(
            op,
            format!(
                "timed out after {:.1} s (NUVEC_DISTRIBUTED_TIMEOUT) sending: the peer stopped reading",
                timeout.as_secs_f64()
            ),
        )
    }

    fn failed(&self, op: &str) -> Result<(), Error> {
        match &*lock(&self.outgoing.failure) {
            Some(reason) => Err(self.error(
                op,
                format!("sending failed ({reason}): the peer is gone or unreachable"),
            )),
            None => Ok(()),
        }
    }

    /// Sends `parts` (one frame) in order after everything sent before; returns without
    /// waiting for the peer to read. What the socket takes at once is sent from this thread;
    /// the rest is copied and queued for the writer thread. A failed send is reported by
    /// [`Connection::flush`] (as the writer thread's are): until then this rank goes on reading, so
    /// its error names the rank that was lost rather than a neighbour that closed early.
    pub(crate) fn write(&self, op: &str, parts: &[&[u8]]) -> Result<(), Error> {
        if lock(&self.outgoing.failure).is_some() {
            return Ok(());
        }
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut sent = 0;
        // Never wait for the writer thread here: while it is busy (the lock is taken, or jobs
        // are pending) this frame joins its queue, so this thread can go on receiving.
        let Ok(stream) = self.outgoing.stream.try_lock() else {
            let copy = self.copy_of(parts, 0);
            return self.queue(op, Job::Write(copy));
        };
        if self.outgoing.pending.load(Ordering::Acquire) == 0 {
            while sent < total {
                let mut slices = [IoSlice::new(&[]); 4];
                let count = unsent(parts, sent, SEND_PIECE, &mut slices);
                match crate::platform::send_now(&stream, &slices[..count]) {
                    Ok(0) => break,
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => {
                        *lock(&self.outgoing.failure) = Some(e.to_string());
                        return Ok(());
                    }
                }
            }
            if sent == total {
                return Ok(());
            }
        }
        // Queue the rest while still holding the lock, so nothing overtakes it.
        let copy = self.copy_of(parts, sent);
        let result = self.queue(op, Job::Write(copy));
        drop(stream);
        result
    }

    /// Sends `parts` (one frame) from this thread after everything sent before, at most
    /// `piece` bytes per send, waiting for room as the peer reads: no copy and no hand-off,
    /// for a point-to-point send, which returns only once its bytes are with the kernel
    /// anyway. Each wait for room lasts at most `timeout`.
    pub(crate) fn write_through(
        &self,
        op: &str,
        parts: &[&[u8]],
        piece: usize,
        timeout: Duration,
    ) -> Result<(), Error> {
        // Frames queued earlier leave first.
        self.flush(op, timeout)?;
        let stream = lock(&self.outgoing.stream);
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut sent = 0;
        while sent < total {
            let mut slices = [IoSlice::new(&[]); 4];
            let count = unsent(parts, sent, piece, &mut slices);
            let failure = match crate::platform::send_now(&stream, &slices[..count]) {
                Ok(n) if n > 0 => {
                    sent += n;
                    continue;
                }
                Ok(_) => "the connection took no bytes".to_string(),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    match crate::platform::wait_writable(&stream, timeout) {
                        Ok(true) => continue,
                        Ok(false) => return Err(self.send_timed_out(op, timeout)),
                        Err(e) => e.to_string(),
                    }
                }
                Err(e) => e.to_string(),
            };
            *lock(&self.outgoing.failure) = Some(failure);
            return self.failed(op);
        }
        Ok(())
    }

    /// `parts` after their first `skip` bytes, copied into a buffer from the spare pool
    /// (reused buffers do not page-fault).
    fn copy_of(&self, parts: &[&[u8]], mut skip: usize) -> Vec<u8> {
        let total = parts.iter().map(|p| p.len()).sum::<usize>() - skip;
        let mut buffer = {
            let mut spares = lock(&self.outgoing.spares);
            match spares.iter().position(|b| b.capacity() >= total) {
                Some(index) => spares.swap_remove(index),
                None => Vec::with_capacity(total),
            }
        };
        buffer.clear();
        for part in parts {
            let from = skip.min(part.len());
            skip -= from;
            buffer.extend_from_slice(&part[from..]);
        }
        buffer
    }

    /// Waits until everything sent so far has been handed to the kernel.
    pub(crate) fn flush(&self, op: &str, timeout: Duration) -> Result<(), Error> {
        if self.outgoing.pending.load(Ordering::Acquire) == 0 {
            return self.failed(op);
        }
        let (done, wait) = channel();
        self.queue(op, Job::Flush(done))?;
        match wait.recv_timeout(timeout) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => Err(self.error(
                op,
                format!("sending failed ({reason}): the peer is gone or unreachable"),
            )),
            Err(_) => Err(self.send_timed_out(op, timeout)),
        }
    }

    /// Ends this side's writing after everything queued so far (the peer reads those bytes,
    /// then end-of-stream); reading continues to work.
    pub(crate) fn end_writes(&self) {
        // With no writer thread nothing is queued, so the socket's end can close at once:
        // under the stream's lock (no direct send is under way) and then the writer's (none
        // starts meanwhile), taken in the order `write` takes them.
        if let Ok(stream) = self.outgoing.stream.try_lock() {
            if matches!(*lock(&self.writer), Writer::NotStarted) {
                let _ = stream.shutdown(Shutdown::Write);
                return;
            }
        }
        if self.queue("close", Job::EndWrites).is_err() {
            let _ = self.control.shutdown(Shutdown::Write);
        }
    }

    /// Closes the connection and stops the writer thread, after giving what is queued (an
    /// abort notice, say) a bounded chance to leave.
    pub(crate) fn close(&self) {
        let _ = self.flush("close", DRAIN_ON_CLOSE);
        let _ = self.control.shutdown(Shutdown::Both);
        let writer = std::mem::replace(&mut *lock(&self.writer), Writer::Closed);
        if let Writer::Running { jobs, thread } = writer {
            drop(jobs);
            let _ = thread.join();
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lengths(parts: &[&[u8]], sent: usize, most: usize) -> Vec<usize> {
        let mut slices = [IoSlice::new(&[]); 4];
        let count = unsent(parts, sent, most, &mut slices);
        slices[..count].iter().map(|s| s.len()).collect()
    }

    #[test]
    fn unsent_bytes_skip_what_was_sent_and_stop_at_a_piece() {
        let (header, payload) = ([1u8; 8], [2u8; 100]);
        let parts: [&[u8]; 2] = [&header, &payload];
        assert_eq!(lengths(&parts, 0, usize::MAX), [8, 100]);
        assert_eq!(lengths(&parts, 3, usize::MAX), [5, 100]);
        assert_eq!(lengths(&parts, 0, 50), [8, 42]);
        assert_eq!(lengths(&parts, 50, 50), [50]);
        assert_eq!(lengths(&parts, 100, 50), [8]);
        assert_eq!(lengths(&parts, 108, 50), Vec::<usize>::new());
    }
}
