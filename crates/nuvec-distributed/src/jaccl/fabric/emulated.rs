//! An emulated RDMA fabric for machines without RDMA hardware: each queue pair is a Unix
//! datagram socket (an abstract name on Linux, so nothing is left behind) connected to its
//! peer's, in any process on this machine.
//!
//! It keeps the rules of an unreliable connected queue pair, which JACCL's algorithms must
//! live with on real cables:
//! - a message travels as packets of at most the MTU (`NUVEC_JACCL_EMULATED_MTU`, default
//!   4096 bytes), each with a packet sequence number;
//! - a packet that goes missing makes the receiver discard the message it belonged to, and the
//!   receive it was filling stays posted for the next message (nothing is retransmitted);
//! - a message that arrives when no receive is posted is dropped;
//! - a send completes when its last packet has left, not when the peer has it; sends to a
//!   peer that is gone complete too (their packets are lost), but the queue pair then knows
//!   its peer is gone, and an exchange waiting on that peer fails at once.
//!
//! `NUVEC_JACCL_EMULATED_DROP=RANK:N` makes rank `RANK` lose the `N`-th packet it sends
//! (counted from 1 over all its queue pairs), for tests of lost frames.

use super::{Completion, Fabric, QueuePair};
use crate::platform::{bind_datagram, connect_datagram};
use nuvec_core::{Error, Result};
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes before each packet's payload: sequence number, flags, message length.
const PACKET_HEADER: usize = 12;
const FIRST: u8 = 1;
const LAST: u8 = 2;
const DEFAULT_MTU: usize = 4096;

/// Queue pairs opened by this process (their socket names).
static OPENED: AtomicU64 = AtomicU64::new(0);

fn fabric_error(rank: usize, reason: String) -> Error {
    Error::Distributed {
        op: "jaccl".into(),
        rank: Some(rank),
        reason: format!("emulated fabric: {reason}"),
    }
}

/// Whether a send failed because the peer's socket is gone.
fn peer_closed(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::ConnectionRefused
            | ErrorKind::NotConnected
            | ErrorKind::BrokenPipe
            | ErrorKind::ConnectionReset
            | ErrorKind::NotFound
    )
}

/// The emulated fabric of one process.
#[derive(Debug)]
pub(crate) struct EmulatedFabric {
    rank: usize,
    mtu: usize,
    /// Packets sent by this process, and the one to lose (0: none).
    packets: Arc<AtomicU64>,
    drop_packet: u64,
}

impl EmulatedFabric {
    /// The fabric with the MTU and lost packet the environment asks for.
    pub(crate) fn from_env(rank: usize) -> Result<EmulatedFabric> {
        let mtu = match std::env::var("NUVEC_JACCL_EMULATED_MTU") {
            Ok(text) => text
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|m| (256..=65536).contains(m))
                .ok_or_else(|| {
                    fabric_error(
                        rank,
                        format!(
                            "NUVEC_JACCL_EMULATED_MTU must be 256 to 65536 bytes, got {text:?}"
                        ),
                    )
                })?,
            Err(_) => DEFAULT_MTU,
        };
        let drop_packet = match std::env::var("NUVEC_JACCL_EMULATED_DROP") {
            Ok(text) => {
                let parsed = text
                    .split_once(':')
                    .and_then(|(r, n)| {
                        Some((
                            r.trim().parse::<usize>().ok()?,
                            n.trim().parse::<u64>().ok()?,
                        ))
                    })
                    .ok_or_else(|| {
                        fabric_error(
                            rank,
                            format!("NUVEC_JACCL_EMULATED_DROP must be RANK:PACKET, got {text:?}"),
                        )
                    })?;
                if parsed.0 == rank {
                    parsed.1
                } else {
                    0
                }
            }
            Err(_) => 0,
        };
        Ok(EmulatedFabric {
            rank,
            mtu,
            packets: Arc::new(AtomicU64::new(0)),
            drop_packet,
        })
    }
}

impl Fabric for EmulatedFabric {
    fn name(&self) -> &'static str {
        "emulated"
    }

    fn open(&self, device: &str, slots: usize, slot_bytes: usize) -> Result<Box<dyn QueuePair>> {
        let name = format!(
            "nuvec-jaccl-{}-{}",
            std::process::id(),
            OPENED.fetch_add(1, Ordering::Relaxed)
        );
        let (socket, address, path) = bind_datagram(&name).map_err(|e| {
            fabric_error(
                self.rank,
                format!("opening a queue pair on {device} ({name}): {e}"),
            )
        })?;
        socket.set_nonblocking(true).map_err(|e| {
            fabric_error(self.rank, format!("opening a queue pair on {device}: {e}"))
        })?;
        Ok(Box::new(EmulatedQueuePair {
            rank: self.rank,
            device: device.to_string(),
            socket,
            address,
            path,
            mtu: self.mtu,
            send_slots: vec![vec![0; slot_bytes]; slots],
            recv_slots: vec![vec![0; slot_bytes]; slots],
            posted: VecDeque::new(),
            sending: VecDeque::new(),
            next_psn: 0,
            expected_psn: 0,
            filling: None,
            discarding: false,
            packet: vec![0; PACKET_HEADER + self.mtu],
            packets: self.packets.clone(),
            drop_packet: self.drop_packet,
            peer_gone: false,
        }))
    }
}

/// A send in progress: its slot, length and bytes already out.
#[derive(Debug)]
struct Sending {
    slot: usize,
    len: usize,
    sent: usize,
}

/// One emulated queue pair.
#[derive(Debug)]
struct EmulatedQueuePair {
    rank: usize,
    device: String,
    socket: UnixDatagram,
    /// What a peer connects to, and the socket's file where it has one.
    address: Vec<u8>,
    path: Option<PathBuf>,
    mtu: usize,
    send_slots: Vec<Vec<u8>>,
    recv_slots: Vec<Vec<u8>>,
    /// Posted receives, filled in order.
    posted: VecDeque<usize>,
    sending: VecDeque<Sending>,
    next_psn: u32,
    expected_psn: u32,
    /// The receive being filled and how many bytes it holds.
    filling: Option<(usize, usize)>,
    /// Skipping the rest of a message that lost a packet or found no receive.
    discarding: bool,
    packet: Vec<u8>,
    packets: Arc<AtomicU64>,
    drop_packet: u64,
    /// The peer's socket closed (its process ended or it closed the group).
    peer_gone: bool,
}

impl EmulatedQueuePair {
    fn error(&self, reason: String) -> Error {
        fabric_error(
            self.rank,
            format!("queue pair on {}: {reason}", self.device),
        )
    }

    /// Writes packets of the sends in progress until the socket is full.
    fn push_sends(&mut self, out: &mut Vec<Completion>) -> Result<()> {
        while let Some(front) = self.sending.front_mut() {
            let take = (front.len - front.sent).min(self.mtu);
            let mut flags = 0;
            if front.sent == 0 {
                flags |= FIRST;
            }
            if front.sent + take == front.len {
                flags |= LAST;
            }
            let packet = &mut self.packet;
            packet[0..4].copy_from_slice(&self.next_psn.to_le_bytes());
            packet[4] = flags;
            packet[8..12].copy_from_slice(&(front.len as u32).to_le_bytes());
            packet[PACKET_HEADER..PACKET_HEADER + take]
                .copy_from_slice(&self.send_slots[front.slot][front.sent..front.sent + take]);
            let number = self.packets.fetch_add(1, Ordering::Relaxed) + 1;
            let lost = number == self.drop_packet;
            if !lost {
                match self.socket.send(&packet[..PACKET_HEADER + take]) {
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        self.packets.fetch_sub(1, Ordering::Relaxed);
                        return Ok(());
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {
                        self.packets.fetch_sub(1, Ordering::Relaxed);
                        continue;
                    }
                    Err(e) if !peer_closed(&e) => {
                        return Err(self.error(format!("sending: {e}")));
                    }
                    Err(_) => {
                        // The peer's socket is gone. As on an unreliable connection, what is
                        // sent is lost without an error; waiting on this peer fails at once.
                        self.peer_gone = true;
                        for sending in self.sending.drain(..) {
                            out.push(Completion::Sent { slot: sending.slot });
                        }
                        return Ok(());
                    }
                }
            }
            self.next_psn = self.next_psn.wrapping_add(1);
            front.sent += take;
            if front.sent == front.len {
                out.push(Completion::Sent { slot: front.slot });
                self.sending.pop_front();
            }
        }
        Ok(())
    }

    /// Takes in the packets waiting on the socket.
    fn take_packets(&mut self, out: &mut Vec<Completion>) -> Result<()> {
        loop {
            let n = match self.socket.recv(&mut self.packet) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.error(format!("receiving: {e}"))),
            };
            if n < PACKET_HEADER {
                continue;
            }
            let psn = u32::from_le_bytes(self.packet[0..4].try_into().unwrap_or_default());
            let flags = self.packet[4];
            let total =
                u32::from_le_bytes(self.packet[8..12].try_into().unwrap_or_default()) as usize;
            let payload = n - PACKET_HEADER;
            if psn != self.expected_psn {
                // A packet went missing: the message being filled is lost; its receive stays
                // posted for the next message.
                self.filling = None;
                self.discarding = true;
            }
            self.expected_psn = psn.wrapping_add(1);
            if flags & FIRST != 0 {
                self.discarding = false;
                self.filling = None;
                match self.posted.front() {
                    Some(&slot) if total <= self.recv_slots[slot].len() => {
                        self.filling = Some((slot, 0))
                    }
                    _ => self.discarding = true,
                }
            }
            if self.discarding {
                continue;
            }
            let Some((slot, filled)) = self.filling else {
                continue;
            };
            let end = filled + payload;
            if end > total {
                self.filling = None;
                self.discarding = true;
                continue;
            }
            self.recv_slots[slot][filled..end]
                .copy_from_slice(&self.packet[PACKET_HEADER..PACKET_HEADER + payload]);
            self.filling = Some((slot, end));
            if flags & LAST != 0 {
                self.filling = None;
                if end == total {
                    self.posted.pop_front();
                    out.push(Completion::Received { slot, len: total });
                }
            }
        }
    }
}

impl QueuePair for EmulatedQueuePair {
    fn address(&self) -> Vec<u8> {
        self.address.clone()
    }

    fn connect(&mut self, remote: &[u8]) -> Result<()> {
        connect_datagram(&self.socket, remote).map_err(|e| {
            self.error(format!(
                "connecting to {}: {e}",
                String::from_utf8_lossy(remote)
            ))
        })
    }

    fn send_slot(&mut self, slot: usize) -> &mut [u8] {
        &mut self.send_slots[slot]
    }

    fn recv_slot(&self, slot: usize) -> &[u8] {
        &self.recv_slots[slot]
    }

    fn post_send(&mut self, slot: usize, len: usize) -> Result<()> {
        self.sending.push_back(Sending { slot, len, sent: 0 });
        Ok(())
    }

    fn post_recv(&mut self, slot: usize) -> Result<()> {
        self.posted.push_back(slot);
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<()> {
        self.push_sends(out)?;
        self.take_packets(out)
    }

    fn wake_fd(&self) -> Option<(i32, bool)> {
        use std::os::fd::AsRawFd;
        Some((self.socket.as_raw_fd(), !self.sending.is_empty()))
    }

    fn peer_alive(&mut self) -> bool {
        // An empty datagram: the peer ignores it, and a closed peer refuses it.
        if !self.peer_gone {
            if let Err(e) = self.socket.send(&[]) {
                self.peer_gone = peer_closed(&e);
            }
        }
        !self.peer_gone
    }
}

impl Drop for EmulatedQueuePair {
    fn drop(&mut self) {
        if let Some(path) = &self.path {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two connected queue pairs of 2 slots of 1 KiB, with a 256-byte MTU, losing packet
    /// `drop_packet` (0: none).
    fn pair(drop_packet: u64) -> (Box<dyn QueuePair>, Box<dyn QueuePair>) {
        let fabric = EmulatedFabric {
            rank: 0,
            mtu: 256,
            packets: Arc::new(AtomicU64::new(0)),
            drop_packet,
        };
        let mut a = fabric.open("a", 2, 1024).unwrap();
        let mut b = fabric.open("b", 2, 1024).unwrap();
        let (address_a, address_b) = (a.address(), b.address());
        a.connect(&address_b).unwrap();
        b.connect(&address_a).unwrap();
        (a, b)
    }

    fn send(qp: &mut Box<dyn QueuePair>, slot: usize, bytes: &[u8]) {
        qp.send_slot(slot)[..bytes.len()].copy_from_slice(bytes);
        qp.post_send(slot, bytes.len()).unwrap();
        let mut done = Vec::new();
        while !done.contains(&Completion::Sent { slot }) {
            qp.poll(&mut done).unwrap();
        }
    }

    /// What arrives within a short while.
    fn arrivals(qp: &mut Box<dyn QueuePair>) -> Vec<Completion> {
        let mut out = Vec::new();
        for _ in 0..50 {
            qp.poll(&mut out).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        out
    }

    #[test]
    fn a_lost_packet_loses_its_message_and_the_receive_stays_posted() {
        let (mut a, mut b) = pair(2);
        b.post_recv(0).unwrap();
        let first: Vec<u8> = (0..600).map(|i| i as u8).collect();
        send(&mut a, 0, &first); // packets 1, 2 (lost) and 3
        send(&mut a, 1, &[7; 100]); // packet 4
        assert_eq!(
            arrivals(&mut b),
            [Completion::Received { slot: 0, len: 100 }]
        );
        assert_eq!(&b.recv_slot(0)[..100], &[7; 100]);
    }

    #[test]
    fn a_message_without_a_posted_receive_is_dropped() {
        let (mut a, mut b) = pair(0);
        send(&mut a, 0, &[1; 300]);
        assert!(arrivals(&mut b).is_empty());
        b.post_recv(1).unwrap();
        send(&mut a, 1, &[2; 40]);
        assert_eq!(
            arrivals(&mut b),
            [Completion::Received { slot: 1, len: 40 }]
        );
        assert_eq!(&b.recv_slot(1)[..40], &[2; 40]);
    }

    #[test]
    fn a_closed_peer_is_noticed_and_sends_to_it_complete() {
        let (mut a, b) = pair(0);
        assert!(a.peer_alive());
        drop(b);
        send(&mut a, 0, &[3; 500]);
        // Another test of this binary may fork a compiler just as `b` closes; the child holds
        // the socket until it execs, so the refusal can come a moment late, but it must come.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while a.peer_alive() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!a.peer_alive(), "the closed peer was not noticed in 10 s");
    }
}
