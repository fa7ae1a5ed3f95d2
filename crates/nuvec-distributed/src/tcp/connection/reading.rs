//! The reading half of a connection: how a read polls before it sleeps ([`Poll`]), and the
//! reads themselves (whole buffers, point-to-point messages, frames sized by their header),
//! with the checks for a closed connection or a waiting abort notice.

use super::WATCH_AFTER;
use super::{Connection, HEALTH_PROBE};
use crate::platform::recv_now;
use crate::sync::lock;
use crate::tcp::frame::HEADER_BYTES;
use nuvec_core::Error;
use std::io::{ErrorKind, Read};
use std::time::{Duration, Instant};

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
/// virtual machine than the poll (measured on 1 MB ping-pongs: `docs/performance.md`,
/// "Tuning measurements"). Only collectives keep the short window, because while they wait
/// this rank's writer threads may need the core.
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

/// Reads longer than this (more than the ring's largest chunk, 512 KiB: a point-to-point
/// message) keep yielding polls alive while data keeps arriving.
const STREAMING_READ: usize = 512 * 1024;

/// How long a frame is, from its header.
pub(crate) type FrameBytes<'a> = dyn Fn(&[u8; HEADER_BYTES]) -> usize + 'a;

impl Connection {
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

    /// [`Connection::read_exact`] for a point-to-point message, polling as [`Poll::for_messages`]
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

    /// [`Connection::read_exact`] without polling: the read sleeps in the kernel until data comes.
    pub(crate) fn read_sleeping(
        &self,
        op: &str,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<(), Error> {
        self.read_polling(op, buf, timeout, Poll::Off, None)
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

    /// [`Connection::read_frame`] for the start of a point-to-point message, polling as
    /// [`Poll::for_messages`] says.
    pub(crate) fn read_message_frame(
        &self,
        op: &str,
        buf: &mut [u8],
        timeout: Duration,
        frame_bytes: &FrameBytes<'_>,
    ) -> Result<usize, Error> {
        self.read_polling(
            op,
            buf,
            timeout,
            self.poll.for_messages(),
            Some(frame_bytes),
        )
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
        // each pair of them cost that sender its pace (measured on 4 ranks and 2 cores:
        // `docs/performance.md`, "Tuning measurements").
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
        // Block in slices of `WATCH_AFTER`, asking the group's watch between them (as a wait on
        // a shared-memory channel does), which fails the read when another connection shows
        // that a rank gave up or called something else. Each part may take `timeout` to arrive.
        incoming
            .set_timeout(timeout.min(WATCH_AFTER))
            .map_err(|e| self.error(op, format!("cannot set a timeout: {e}")))?;
        let mut last_arrival = Instant::now();
        while filled < end {
            match incoming.stream.read(&mut buf[filled..end]) {
                Ok(0) => return Err(self.closed(op)),
                Ok(n) => {
                    filled += n;
                    last_arrival = Instant::now();
                    arrived(buf, filled, &mut end);
                }
                Err(e) => match e.kind() {
                    ErrorKind::Interrupted => {}
                    ErrorKind::UnexpectedEof
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted => return Err(self.closed(op)),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut => {
                        if last_arrival.elapsed() >= timeout {
                            return Err(self.error(
                                op,
                                format!(
                                    "timed out after {:.1} s waiting for data (NUVEC_DISTRIBUTED_TIMEOUT); the peer is stalled or did not call {op}",
                                    timeout.as_secs_f64()
                                ),
                            ));
                        }
                        if let Some(watch) = self.watch.get() {
                            watch.check(op)?;
                        }
                    }
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

    /// [`Connection::waiting_header`], or `None` at once when another thread is reading this
    /// connection.
    pub(crate) fn try_waiting_header(&self) -> Option<[u8; HEADER_BYTES]> {
        peek_header(&self.reader.try_lock().ok()?.stream)
    }

    /// The frame header waiting to be read, if a whole one has arrived (never waits; a peer
    /// that closed after its last frame is not an error here).
    pub(crate) fn waiting_header(&self) -> Option<[u8; HEADER_BYTES]> {
        peek_header(&lock(&self.reader).stream)
    }
}

/// The frame header waiting on `stream`, if a whole one has arrived (never waits).
fn peek_header(stream: &std::net::TcpStream) -> Option<[u8; HEADER_BYTES]> {
    let mut raw = [0u8; HEADER_BYTES];
    match crate::platform::peek_now(stream, &mut raw) {
        Ok(HEADER_BYTES) => Some(raw),
        _ => None,
    }
}
