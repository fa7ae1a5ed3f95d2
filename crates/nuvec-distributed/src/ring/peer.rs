//! One TCP connection to a peer. Writes go straight to the socket from the calling thread
//! while it has room (a non-blocking send, no copy, no thread hand-off); what does not fit is
//! queued for the connection's writer thread, so this rank keeps receiving while a large send
//! drains (no thread per step, no spinning). The thread starts with the first write that has
//! to wait and lasts as long as the connection; one this rank only reads never starts it. A
//! point-to-point send instead writes its whole frame from the calling thread, waiting for room
//! ([`Peer::write_through`]). Reads poll briefly as [`Poll`] says, then block with a timeout.
//! Failures become errors naming the peer's rank.

use super::frame::HEADER_BYTES;
use crate::platform::recv_now;
use nuvec_core::Error;
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long `health` waits for a sign of a closed connection; an open, quiet one times out.
const HEALTH_PROBE: Duration = Duration::from_millis(1);
/// How a read waits for data before it sleeps in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Poll {
    /// Sleep at once.
    Off,
    /// Poll on the CPU for this long after the last arrival: for machines with a core for
    /// each local rank, where polling takes no peer's core.
    Spin(Duration),
    /// Poll for this long from the start of a read (after the last arrival, for a read longer
    /// than a ring chunk), yielding the core between polls: for more local ranks than cores.
    /// A runnable peer gets the core at once, and a reply that comes meanwhile is taken
    /// without a sleep and a wake-up (which cost more than the wait on a busy machine).
    Yield(Duration),
}

/// Polling on machines with a core per local rank.
pub(crate) const SPIN: Poll = Poll::Spin(Duration::from_micros(30));
/// Polling of a point-to-point receive on machines with a core per local rank. Its message
/// usually starts only after the sender has finished something of its own (received the
/// last message, say), well past [`SPIN`]'s window, and a sleep and a wake-up cost more on a
/// virtual machine than the poll: a 1 MB ping-pong on 2 ranks, about 1020 → 815 µs. Only
/// collectives keep the short window, because while they wait this rank's writer threads
/// may need the core.
pub(crate) const MESSAGE_SPIN: Poll = Poll::Spin(Duration::from_micros(300));
/// Polling on machines with more local ranks than cores.
pub(crate) const YIELD: Poll = Poll::Yield(Duration::from_micros(200));
impl Poll {
    /// How a point-to-point receive polls where collectives poll as `self` does.
    pub(crate) fn for_messages(self) -> Poll {
        match self {
            Poll::Spin(_) => MESSAGE_SPIN,
            other => other,
        }
    }
}

/// Reads longer than this (more than a ring chunk: a point-to-point message) keep yielding
/// polls alive while data keeps arriving.
const STREAMING_READ: usize = super::CHUNK_BYTES;
/// How many written buffers a connection keeps for reuse, and the largest it keeps.
const SPARES: usize = 8;
const SPARE_BYTES: usize = 1 << 20;
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

/// How long a frame is, from its header.
pub(crate) type FrameBytes<'a> = dyn Fn(&[u8; HEADER_BYTES]) -> usize + 'a;

/// A connection to rank `rank`.
#[derive(Debug)]
pub(crate) struct Peer {
    pub(crate) rank: usize,
    /// How a read waits before sleeping.
    poll: Poll,
    reader: Mutex<Incoming>,
    control: TcpStream,
    outgoing: Arc<Outgoing>,
    writer: Mutex<Writer>,
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

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write_loop(outgoing: Arc<Outgoing>, jobs: Receiver<Job>) {
    for job in jobs {
        // The job finishes (and `pending` drops) under the stream's lock, so a direct send
        // that sees nothing pending cannot overtake it.
        let mut stream = lock(&outgoing.stream);
        match job {
            Job::Write(bytes) => {
                if lock(&outgoing.failure).is_none() {
                    if let Err(e) = stream.write_all(&bytes) {
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

/// Fills `slices` with the parts of `parts` after the first `sent` bytes, without allocating;
/// returns how many it filled. Frames have at most a few parts; any beyond the slots go in a
/// later round of the caller's loop.
fn unsent<'a>(parts: &[&'a [u8]], sent: usize, slices: &mut [IoSlice<'a>]) -> usize {
    let mut count = 0;
    let mut skip = sent;
    for part in parts {
        if skip >= part.len() {
            skip -= part.len();
        } else if count < slices.len() {
            slices[count] = IoSlice::new(&part[skip..]);
            skip = 0;
            count += 1;
        }
    }
    count
}

impl Peer {
    /// Wraps a connected, handshaken stream to rank `rank`; reads wait as `poll` says.
    pub(crate) fn new(rank: usize, stream: TcpStream, poll: Poll) -> std::io::Result<Peer> {
        stream.set_nodelay(true)?;
        crate::platform::enable_keepalive(&stream)?;
        let outgoing = Arc::new(Outgoing {
            stream: Mutex::new(stream.try_clone()?),
            pending: AtomicUsize::new(0),
            failure: Mutex::new(None),
            spares: Mutex::new(Vec::new()),
        });
        let control = stream.try_clone()?;
        Ok(Peer {
            rank,
            poll,
            reader: Mutex::new(Incoming {
                stream,
                timeout: None,
            }),
            control,
            outgoing,
            writer: Mutex::new(Writer::NotStarted),
        })
    }

    fn error(&self, op: &str, reason: String) -> Error {
        Error::Distributed {
            op: op.to_string(),
            rank: Some(self.rank),
            reason,
        }
    }

    /// Whether the writer thread has been started (and not yet stopped).
    #[cfg(test)]
    pub(super) fn has_writer_thread(&self) -> bool {
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
                "timed out after {:.1} s sending (the peer stopped reading)",
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
    /// [`Peer::flush`] (as the writer thread's are): until then this rank goes on reading, so
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
                let count = unsent(parts, sent, &mut slices);
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

    /// Sends `parts` (one frame) from this thread after everything sent before, waiting for
    /// room as the peer reads: no copy and no hand-off, for a point-to-point send, which
    /// returns only once its bytes are with the kernel anyway. Each wait for room lasts at
    /// most `timeout`.
    pub(crate) fn write_through(
        &self,
        op: &str,
        parts: &[&[u8]],
        timeout: Duration,
    ) -> Result<(), Error> {
        // Frames queued earlier leave first.
        self.flush(op, timeout)?;
        let stream = lock(&self.outgoing.stream);
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut sent = 0;
        while sent < total {
            let mut slices = [IoSlice::new(&[]); 4];
            let count = unsent(parts, sent, &mut slices);
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

    /// Reads exactly `buf.len()` bytes, waiting at most `timeout` for each part to arrive.
    pub(crate) fn read_exact(
        &self,
        op: &str,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<(), Error> {
        self.read_polling(op, buf, timeout, self.poll, None)
            .map(|_| ())
    }

    /// [`Peer::read_exact`] for a point-to-point message, polling as [`Poll::for_messages`]
    /// says.
    pub(crate) fn read_message(
        &self,
        op: &str,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<(), Error> {
        self.read_polling(op, buf, timeout, self.poll.for_messages(), None)
            .map(|_| ())
    }

    /// Reads one frame, header and payload in one go, into `buf`, which has room for the frame
    /// this rank expects. Once the header is in, `frame_bytes` says how long the frame really
    /// is (an abort notice is shorter, say) and reading stops there or at the end of `buf`,
    /// whichever comes first. Returns how many bytes were read. A read that took the header
    /// may have taken more, up to the end of `buf`, so a frame shorter than expected can come
    /// back with bytes from beyond it: the start of an abort notice's reason (which nothing
    /// follows), or of the next frame after a frame of the wrong size (which fails the call).
    pub(crate) fn read_frame(
        &self,
        op: &str,
        buf: &mut [u8],
        timeout: Duration,
        frame_bytes: &FrameBytes<'_>,
    ) -> Result<usize, Error> {
        self.read_polling(op, buf, timeout, self.poll, Some(frame_bytes))
    }

    /// Reads into `buf` until it is full, or, with `frame_bytes`, until the frame its header
    /// announces is in; returns the bytes read.
    fn read_polling(
        &self,
        op: &str,
        buf: &mut [u8],
        timeout: Duration,
        poll: Poll,
        frame_bytes: Option<&FrameBytes<'_>>,
    ) -> Result<usize, Error> {
        let mut incoming = lock(&self.reader);
        // Where reading stops: the end of `buf`, or of the frame once its header is in.
        let mut end = buf.len();
        let mut header_seen = frame_bytes.is_none();
        let mut arrived = |buf: &[u8], filled: usize, end: &mut usize| {
            if let (false, Some(frame_bytes), Some(raw)) =
                (header_seen, frame_bytes, buf.first_chunk::<HEADER_BYTES>())
            {
                if filled >= HEADER_BYTES {
                    header_seen = true;
                    *end = frame_bytes(raw).clamp(HEADER_BYTES, buf.len()).max(filled);
                }
            }
        };
        // Poll briefly before sleeping in the kernel: a reply that is a few microseconds away
        // is then taken without a wake-up, which costs more than the wait on a busy machine.
        // When spinning, each arrival restarts the poll, so a large message streaming in is
        // read as it comes. Yielding polls count from the start of a collective's chunk: on a
        // crowded machine the ranks then sleep between arrivals rather than churn while their
        // peers need the cores. A longer read is one point-to-point message streaming from a
        // single sender, which arrivals keep restarting, since a sleep and a wake-up between
        // each pair of them cost that sender its pace (a 1 MB ping-pong on 4 ranks and
        // 2 cores: about 805 → 640 µs).
        let (window, yielding) = match poll {
            Poll::Off => (Duration::ZERO, false),
            Poll::Spin(window) => (window, false),
            Poll::Yield(window) => (window, true),
        };
        let restarts = !yielding || buf.len() > STREAMING_READ;
        let mut filled = 0;
        let mut spin_until = Instant::now() + window;
        while filled < end && !window.is_zero() {
            match recv_now(&incoming.stream, &mut buf[filled..end]) {
                Ok(0) => return Err(self.closed(op)),
                Ok(n) => {
                    filled += n;
                    arrived(buf, filled, &mut end);
                    if restarts {
                        spin_until = Instant::now() + window;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if Instant::now() >= spin_until {
                        break;
                    }
                    if yielding {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
                // Anything else: let the blocking read below report it.
                Err(_) => break,
            }
        }
        if filled >= end {
            return Ok(filled);
        }
        incoming
            .set_timeout(timeout)
            .map_err(|e| self.error(op, format!("cannot set a timeout: {e}")))?;
        while filled < end {
            match incoming.stream.read(&mut buf[filled..end]) {
                Ok(0) => return Err(self.closed(op)),
                Ok(n) => {
                    filled += n;
                    arrived(buf, filled, &mut end);
                }
                Err(e) => match e.kind() {
                    ErrorKind::Interrupted => {}
                    ErrorKind::UnexpectedEof
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted => return Err(self.closed(op)),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut => return Err(self.error(
                        op,
                        format!(
                            "timed out after {:.1} s waiting for data (NUVEC_DISTRIBUTED_TIMEOUT); the peer is stalled or did not call {op}",
                            timeout.as_secs_f64()
                        ),
                    )),
                    _ => return Err(self.error(op, format!("reading failed: {e}"))),
                },
            }
        }
        Ok(filled)
    }

    fn closed(&self, op: &str) -> Error {
        self.error(
            op,
            "the peer closed its connection (its process ended or the group was closed)".into(),
        )
    }

    /// Whether the peer's end is still open, without sending or consuming data; returns the
    /// first bytes waiting to be read when a whole frame header is there.
    pub(crate) fn check(&self) -> Result<Option<[u8; HEADER_BYTES]>, Error> {
        let mut incoming = lock(&self.reader);
        let mut probe = [0u8; HEADER_BYTES];
        // A short read timeout, not non-blocking mode: O_NONBLOCK would be shared with the
        // writer thread's clone of the socket and could fail its writes mid-message.
        incoming
            .set_timeout(HEALTH_PROBE)
            .map_err(|e| self.error("health", e.to_string()))?;
        let result = incoming.stream.peek(&mut probe);
        match result {
            Ok(0) => Err(self.error(
                "health",
                "the peer closed its connection (its process ended)".into(),
            )),
            Ok(HEADER_BYTES) => Ok(Some(probe)),
            Ok(_) => Ok(None),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(None),
            Err(e) => Err(self.error("health", format!("the connection failed: {e}"))),
        }
        .and_then(|waiting| match &*lock(&self.outgoing.failure) {
            Some(reason) => Err(self.error("health", format!("sending failed earlier: {reason}"))),
            None => Ok(waiting),
        })
    }

    /// The frame header waiting to be read, if a whole one has arrived (never waits; a peer
    /// that closed after its last frame is not an error here).
    pub(crate) fn waiting_header(&self) -> Option<[u8; HEADER_BYTES]> {
        let incoming = lock(&self.reader);
        let mut raw = [0u8; HEADER_BYTES];
        match crate::platform::peek_now(&incoming.stream, &mut raw) {
            Ok(HEADER_BYTES) => Some(raw),
            _ => None,
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

impl Drop for Peer {
    fn drop(&mut self) {
        self.close();
    }
}
