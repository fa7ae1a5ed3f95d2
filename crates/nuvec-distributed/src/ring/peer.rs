//! One TCP connection to a peer: a persistent writer thread (so this rank can send while it
//! receives, without a thread per step and without spinning) and a blocking reader with a
//! timeout. Failures become errors naming the peer's rank.

use super::frame::HEADER_BYTES;
use nuvec_core::Error;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long `health` waits for a sign of a closed connection; an open, quiet one times out.
const HEALTH_PROBE: Duration = Duration::from_millis(1);
/// How long closing waits for queued bytes to be handed to the kernel.
const DRAIN_ON_CLOSE: Duration = Duration::from_secs(1);

enum Job {
    Write(Vec<u8>),
    Flush(Sender<Result<(), String>>),
    /// Ends this side's writing once everything queued before it has been sent.
    EndWrites,
}

/// A connection to rank `rank`.
#[derive(Debug)]
pub(crate) struct Peer {
    pub(crate) rank: usize,
    reader: Mutex<TcpStream>,
    control: TcpStream,
    jobs: Mutex<Option<Sender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    write_failure: Arc<Mutex<Option<String>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write_loop(mut stream: TcpStream, jobs: Receiver<Job>, failure: Arc<Mutex<Option<String>>>) {
    for job in jobs {
        match job {
            Job::Write(bytes) => {
                if lock(&failure).is_some() {
                    continue;
                }
                if let Err(e) = stream.write_all(&bytes) {
                    *lock(&failure) = Some(e.to_string());
                }
            }
            Job::EndWrites => {
                let _ = stream.shutdown(Shutdown::Write);
            }
            Job::Flush(done) => {
                let _ = done.send(match &*lock(&failure) {
                    Some(reason) => Err(reason.clone()),
                    None => Ok(()),
                });
            }
        }
    }
}

impl Peer {
    /// Wraps a connected, handshaken stream.
    pub(crate) fn new(rank: usize, stream: TcpStream) -> std::io::Result<Peer> {
        stream.set_nodelay(true)?;
        crate::platform::enable_keepalive(&stream)?;
        let writer_stream = stream.try_clone()?;
        let control = stream.try_clone()?;
        let (sender, receiver) = channel();
        let write_failure = Arc::new(Mutex::new(None));
        let failure = write_failure.clone();
        let writer = std::thread::Builder::new()
            .name(format!("nuvec-ring-write-{rank}"))
            .spawn(move || write_loop(writer_stream, receiver, failure))?;
        Ok(Peer {
            rank,
            reader: Mutex::new(stream),
            control,
            jobs: Mutex::new(Some(sender)),
            writer: Mutex::new(Some(writer)),
            write_failure,
        })
    }

    fn error(&self, op: &str, reason: String) -> Error {
        Error::Distributed {
            op: op.to_string(),
            rank: Some(self.rank),
            reason,
        }
    }

    /// Queues `bytes` for sending; returns at once.
    pub(crate) fn write(&self, op: &str, bytes: Vec<u8>) -> Result<(), Error> {
        let jobs = lock(&self.jobs);
        let sender = jobs
            .as_ref()
            .ok_or_else(|| self.error(op, "the connection was closed".into()))?;
        sender
            .send(Job::Write(bytes))
            .map_err(|_| self.error(op, "the connection's writer stopped".into()))
    }

    /// Waits until everything queued so far has been handed to the kernel.
    pub(crate) fn flush(&self, op: &str, timeout: Duration) -> Result<(), Error> {
        let (done, wait) = channel();
        {
            let jobs = lock(&self.jobs);
            let sender = jobs
                .as_ref()
                .ok_or_else(|| self.error(op, "the connection was closed".into()))?;
            sender
                .send(Job::Flush(done))
                .map_err(|_| self.error(op, "the connection's writer stopped".into()))?;
        }
        match wait.recv_timeout(timeout) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => Err(self.error(
                op,
                format!("sending failed ({reason}): the peer is gone or unreachable"),
            )),
            Err(_) => Err(self.error(
                op,
                format!(
                    "timed out after {:.1} s sending (the peer stopped reading)",
                    timeout.as_secs_f64()
                ),
            )),
        }
    }

    /// Reads exactly `buf.len()` bytes, waiting at most `timeout` for each part to arrive.
    pub(crate) fn read_exact(
        &self,
        op: &str,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<(), Error> {
        let mut stream = lock(&self.reader);
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| self.error(op, format!("cannot set a timeout: {e}")))?;
        stream.read_exact(buf).map_err(|e| match e.kind() {
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => {
                self.error(op, "the peer closed its connection (its process ended or the group was closed)".into())
            }
            ErrorKind::WouldBlock | ErrorKind::TimedOut => self.error(
                op,
                format!(
                    "timed out after {:.1} s waiting for data (NUVEC_DISTRIBUTED_TIMEOUT); the peer is stalled or did not call {op}",
                    timeout.as_secs_f64()
                ),
            ),
            _ => self.error(op, format!("reading failed: {e}")),
        })
    }

    /// Whether the peer's end is still open, without sending or consuming data; returns the
    /// first bytes waiting to be read when a whole frame header is there.
    pub(crate) fn check(&self) -> Result<Option<[u8; HEADER_BYTES]>, Error> {
        let stream = lock(&self.reader);
        let mut probe = [0u8; HEADER_BYTES];
        // A short read timeout, not non-blocking mode: O_NONBLOCK would be shared with the
        // writer thread's clone of the socket and could fail its writes mid-message.
        stream
            .set_read_timeout(Some(HEALTH_PROBE))
            .map_err(|e| self.error("health", e.to_string()))?;
        let result = stream.peek(&mut probe);
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
        .and_then(|waiting| match &*lock(&self.write_failure) {
            Some(reason) => Err(self.error("health", format!("sending failed earlier: {reason}"))),
            None => Ok(waiting),
        })
    }

    /// Ends this side's writing after everything queued so far (the peer reads those bytes,
    /// then end-of-stream); reading continues to work.
    pub(crate) fn end_writes(&self) {
        let queued = lock(&self.jobs)
            .as_ref()
            .is_some_and(|jobs| jobs.send(Job::EndWrites).is_ok());
        if !queued {
            let _ = self.control.shutdown(Shutdown::Write);
        }
    }

    /// Closes the connection and stops the writer thread, after giving what is queued (an
    /// abort notice, say) a bounded chance to leave.
    pub(crate) fn close(&self) {
        let _ = self.flush("close", DRAIN_ON_CLOSE);
        let _ = self.control.shutdown(Shutdown::Both);
        lock(&self.jobs).take();
        if let Some(handle) = lock(&self.writer).take() {
            let _ = handle.join();
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.close();
    }
}
