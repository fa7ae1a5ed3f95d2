//! Point-to-point messages between ranks that share no connection: on a cabled ring
//! (`crate::tcp::pairs`) only ring neighbours are sure to reach each other, so a message to
//! any other rank goes round the ring the shorter way, each rank on the way passing it on.
//!
//! A group that is not a full mesh keeps two more connections with each ring neighbour, one
//! each way, for these messages alone (a collective's frames never share them). Each rank
//! runs a thread per incoming relay connection: it reads whole messages, keeps those addressed
//! to this rank in a mailbox for `recv`, and writes the others on to the next rank in the same
//! direction. The cost: a message takes min(d, n − d) hops for ranks d apart on a ring of n,
//! and each rank on the way holds it whole while passing it on.
//!
//! A relay frame is a 24-byte header (magic, source rank, destination rank, a reserved word,
//! payload bytes) and the payload, which is the message as a direct connection carries it.

use crate::sync::lock;
use nuvec_core::{Error, Result};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Marks a relay frame ("NVRL").
const MAGIC: [u8; 4] = *b"NVRL";
/// A relay frame's header: magic, source, destination, reserved, payload bytes.
const HEADER_BYTES: usize = 24;
/// How often a `recv` waiting for a relayed message checks that the group is still there.
const CHECK_EVERY: Duration = Duration::from_millis(50);

/// The two directions round the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    /// Towards higher ranks (to the right).
    Clockwise = 0,
    /// Towards lower ranks (to the left).
    CounterClockwise = 1,
}

/// A relay's four connections: to and from the right neighbour, from and to the left one.
pub(crate) struct RelayStreams {
    pub(crate) to_right: TcpStream,
    pub(crate) from_right: TcpStream,
    pub(crate) from_left: TcpStream,
    pub(crate) to_left: TcpStream,
}

/// Messages that arrived for this rank, by source rank, and why the relay stopped, if it did.
#[derive(Debug, Default)]
struct Mail {
    queues: Vec<VecDeque<Vec<u8>>>,
    /// The neighbour whose relay connection failed, and how.
    broken: Option<(usize, String)>,
    closed: bool,
}

#[derive(Debug, Default)]
struct Mailbox {
    mail: Mutex<Mail>,
    arrived: Condvar,
}

/// One rank's relay: the connections it writes on and the mailbox its threads fill.
#[derive(Debug)]
pub(crate) struct Relay {
    rank: usize,
    size: usize,
    /// The connection to the right neighbour, then the one to the left.
    out: Arc<[Mutex<TcpStream>; 2]>,
    /// The connections read by the threads, kept to shut them down on close.
    incoming: [TcpStream; 2],
    mailbox: Arc<Mailbox>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Relay {
    /// Starts rank `rank`'s relay on `streams`.
    pub(crate) fn start(rank: usize, size: usize, streams: RelayStreams) -> Result<Relay> {
        let failed = |e: std::io::Error| Error::Distributed {
            op: "init".into(),
            rank: None,
            reason: format!(
                "starting the relay for messages between ranks with no connection: {e}"
            ),
        };
        let RelayStreams {
            to_right,
            from_right,
            from_left,
            to_left,
        } = streams;
        for stream in [&to_right, &from_right, &from_left, &to_left] {
            stream.set_nodelay(true).map_err(failed)?;
        }
        let out = Arc::new([Mutex::new(to_right), Mutex::new(to_left)]);
        let mailbox = Arc::new(Mailbox {
            mail: Mutex::new(Mail {
                queues: vec![VecDeque::new(); size],
                ..Mail::default()
            }),
            arrived: Condvar::new(),
        });
        let incoming = [
            from_left.try_clone().map_err(failed)?,
            from_right.try_clone().map_err(failed)?,
        ];
        let left = (rank + size - 1) % size;
        let right = (rank + 1) % size;
        let mut threads = Vec::new();
        for (stream, direction, neighbour) in [
            (from_left, Direction::Clockwise, left),
            (from_right, Direction::CounterClockwise, right),
        ] {
            let passing = Passing {
                rank,
                size,
                neighbour,
                direction,
                out: out.clone(),
                mailbox: mailbox.clone(),
            };
            let thread = std::thread::Builder::new()
                .name("nuvec-ring-relay".into())
                .spawn(move || passing.run(stream))
                .map_err(failed)?;
            threads.push(thread);
        }
        Ok(Relay {
            rank,
            size,
            out,
            incoming,
            mailbox,
            threads: Mutex::new(threads),
        })
    }

    /// Sends `payload` (a whole message, as a direct connection carries it) to rank `dst`
    /// the shorter way round the ring.
    pub(crate) fn send(&self, dst: usize, payload: &[&[u8]]) -> Result<()> {
        let clockwise = (dst + self.size - self.rank) % self.size;
        let direction = match clockwise <= self.size - clockwise {
            true => Direction::Clockwise,
            false => Direction::CounterClockwise,
        };
        let bytes: usize = payload.iter().map(|p| p.len()).sum();
        let header = encode(self.rank, dst, bytes as u64);
        let mut parts = vec![&header[..]];
        parts.extend_from_slice(payload);
        write_parts(&self.out[direction as usize], &parts).map_err(|e| Error::Distributed {
            op: "send".into(),
            rank: Some(self.neighbour(direction)),
            reason: format!(
                "passing a message for rank {dst} to ring neighbour rank {} failed: {e}",
                self.neighbour(direction)
            ),
        })
    }

    /// The next message from rank `src`, waiting at most `timeout`; `alive` is asked every
    /// few milliseconds whether the group can still deliver it (an abort notice, say).
    pub(crate) fn recv(
        &self,
        src: usize,
        timeout: Duration,
        alive: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut mail = lock(&self.mailbox.mail);
        loop {
            if let Some(message) = mail.queues[src].pop_front() {
                return Ok(message);
            }
            if let Some((neighbour, reason)) = &mail.broken {
                return Err(Error::Distributed {
                    op: "recv".into(),
                    rank: Some(*neighbour),
                    reason: format!(
                        "waiting for a message from rank {src}, which comes round the ring: {reason}"
                    ),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Distributed {
                    op: "recv".into(),
                    rank: Some(src),
                    reason: format!(
                        "timed out after {timeout:?} waiting for a message from rank {src} (it comes round the ring: rank {src} shares no connection with this rank)"
                    ),
                });
            }
            drop(mail);
            alive()?;
            mail = lock(&self.mailbox.mail);
            if mail.queues[src].is_empty() && mail.broken.is_none() {
                let wait = (deadline - now).min(CHECK_EVERY);
                mail = self
                    .mailbox
                    .arrived
                    .wait_timeout(mail, wait)
                    .map(|(guard, _)| guard)
                    .unwrap_or_else(|poisoned| poisoned.into_inner().0);
            }
        }
    }

    fn neighbour(&self, direction: Direction) -> usize {
        match direction {
            Direction::Clockwise => (self.rank + 1) % self.size,
            Direction::CounterClockwise => (self.rank + self.size - 1) % self.size,
        }
    }

    /// Closes the relay's connections and waits for its threads.
    pub(crate) fn close(&self) {
        lock(&self.mailbox.mail).closed = true;
        for stream in &self.incoming {
            let _ = stream.shutdown(Shutdown::Both);
        }
        for out in self.out.iter() {
            let _ = lock(out).shutdown(Shutdown::Both);
        }
        for thread in lock(&self.threads).drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.close();
    }
}

/// One relay thread: reads the messages coming in one direction.
struct Passing {
    rank: usize,
    size: usize,
    /// The neighbour they come from.
    neighbour: usize,
    direction: Direction,
    out: Arc<[Mutex<TcpStream>; 2]>,
    mailbox: Arc<Mailbox>,
}

impl Passing {
    fn run(self, mut stream: TcpStream) {
        if let Err(reason) = self.pass(&mut stream) {
            let mut mail = lock(&self.mailbox.mail);
            if !mail.closed && mail.broken.is_none() {
                mail.broken = Some((self.neighbour, reason));
            }
            self.mailbox.arrived.notify_all();
        }
    }

    fn pass(&self, stream: &mut TcpStream) -> std::result::Result<(), String> {
        let from = self.neighbour;
        loop {
            let mut header = [0u8; HEADER_BYTES];
            stream.read_exact(&mut header).map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    format!("ring neighbour rank {from} closed its relay connection")
                }
                _ => format!("reading from ring neighbour rank {from} failed: {e}"),
            })?;
            let (src, dst, bytes) = decode(&header, self.size)
                .map_err(|reason| format!("ring neighbour rank {from} sent {reason}"))?;
            let mut payload = Vec::new();
            let read = stream
                .take(bytes)
                .read_to_end(&mut payload)
                .map_err(|e| format!("reading from ring neighbour rank {from} failed: {e}"))?;
            if read as u64 != bytes {
                return Err(format!(
                    "ring neighbour rank {from} closed its relay connection in the middle of a message"
                ));
            }
            if dst == self.rank {
                lock(&self.mailbox.mail).queues[src].push_back(payload);
                self.mailbox.arrived.notify_all();
            } else {
                let next = match self.direction {
                    Direction::Clockwise => (self.rank + 1) % self.size,
                    Direction::CounterClockwise => (self.rank + self.size - 1) % self.size,
                };
                write_parts(&self.out[self.direction as usize], &[&header, &payload]).map_err(
                    |e| format!("passing a message from rank {src} for rank {dst} on to rank {next} failed: {e}"),
                )?;
            }
        }
    }
}

/// Writes `parts` whole, with no other message between them.
fn write_parts(out: &Mutex<TcpStream>, parts: &[&[u8]]) -> std::io::Result<()> {
    let mut stream = lock(out);
    for part in parts {
        stream.write_all(part)?;
    }
    Ok(())
}

fn encode(src: usize, dst: usize, bytes: u64) -> [u8; HEADER_BYTES] {
    let mut header = [0u8; HEADER_BYTES];
    header[0..4].copy_from_slice(&MAGIC);
    header[4..8].copy_from_slice(&(src as u32).to_le_bytes());
    header[8..12].copy_from_slice(&(dst as u32).to_le_bytes());
    header[16..24].copy_from_slice(&bytes.to_le_bytes());
    header
}

/// (source, destination, payload bytes) of a relay header, checked against a group of
/// `size`.
fn decode(
    header: &[u8; HEADER_BYTES],
    size: usize,
) -> std::result::Result<(usize, usize, u64), String> {
    let word = |at: usize| {
        u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]) as usize
    };
    if header[0..4] != MAGIC || header[12..16] != [0; 4] {
        return Err("bytes that are not a relayed message".into());
    }
    let (src, dst) = (word(4), word(8));
    if src >= size || dst >= size || src == dst {
        return Err(format!(
            "a relayed message from rank {src} to rank {dst}, which a group of {size} does not have"
        ));
    }
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&header[16..24]);
    Ok((src, dst, u64::from_le_bytes(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Four relays joined as a ring over loopback.
    fn ring(size: usize) -> Vec<Relay> {
        let listeners: Vec<TcpListener> = (0..size)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        // Rank r opens both connections to rank r + 1.
        let mut opened = Vec::new();
        let mut accepted = Vec::new();
        for (r, _) in listeners.iter().enumerate() {
            let right = &listeners[(r + 1) % size];
            let address = right.local_addr().unwrap();
            let to = TcpStream::connect(address).unwrap();
            let (to_accepted, _) = right.accept().unwrap();
            let from = TcpStream::connect(address).unwrap();
            let (from_accepted, _) = right.accept().unwrap();
            opened.push((to, from));
            accepted.push((to_accepted, from_accepted));
        }
        let mut accepted: Vec<Option<(TcpStream, TcpStream)>> =
            accepted.into_iter().map(Some).collect();
        opened
            .into_iter()
            .enumerate()
            .map(|(r, (to_right, from_right))| {
                let left = (r + size - 1) % size;
                let (from_left, to_left) = accepted[left].take().unwrap();
                let streams = RelayStreams {
                    to_right,
                    from_right,
                    from_left,
                    to_left,
                };
                Relay::start(r, size, streams).unwrap()
            })
            .collect()
    }

    #[test]
    fn messages_reach_every_rank_the_shorter_way_and_keep_their_order() {
        let relays = ring(5);
        for (src, relay) in relays.iter().enumerate() {
            for dst in (0..5).filter(|&d| d != src) {
                for n in 0..3u8 {
                    relay.send(dst, &[&[src as u8, dst as u8], &[n]]).unwrap();
                }
            }
        }
        for (dst, relay) in relays.iter().enumerate() {
            for src in (0..5).filter(|&s| s != dst) {
                for n in 0..3u8 {
                    let got = relay
                        .recv(src, Duration::from_secs(5), &mut || Ok(()))
                        .unwrap();
                    assert_eq!(got, vec![src as u8, dst as u8, n]);
                }
            }
        }
    }

    #[test]
    fn a_recv_names_the_neighbour_whose_relay_closed_and_the_source_it_waited_for() {
        let relays = ring(4);
        relays[3].close();
        let error = relays[0]
            .recv(2, Duration::from_secs(5), &mut || Ok(()))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("rank 3") && error.contains("rank 2"),
            "{error}"
        );
    }

    #[test]
    fn a_recv_with_nothing_coming_times_out_naming_the_source() {
        let relays = ring(4);
        let error = relays[0]
            .recv(2, Duration::from_millis(200), &mut || Ok(()))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("timed out") && error.contains("rank 2"),
            "{error}"
        );
    }
}
