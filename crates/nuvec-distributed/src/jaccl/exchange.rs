//! Moving bytes over several channels at once: every JACCL collective is a sequence of
//! exchanges, each sending a slice to some peers while receiving slices from some (possibly
//! other) peers, with flow control, message checks and the group's timeout.
//!
//! One thread drives every channel: it sends while credits last, polls every queue pair (so
//! credits and early messages of the next operation are taken in even on channels this exchange
//! does not use), copies arrived payloads out, and otherwise sleeps on the queue pairs'
//! descriptors. A peer that makes no progress for the whole timeout is named in the error.

use super::channel::Channel;
use super::jaccl_error;
use crate::platform::wait_fds;
use nuvec_core::Result;
use std::ops::Range;
use std::time::{Duration, Instant};

/// Polls without sleeping before waiting on descriptors.
const SPINS: u32 = 32;
/// The longest single sleep, so that a deadline is noticed promptly.
const LONGEST_WAIT: Duration = Duration::from_millis(50);
/// How often a stalled exchange asks whether the peers it waits on are still there.
const PROBE_EVERY: Duration = Duration::from_millis(100);

/// One channel's part of an exchange: bytes to send on it and a place for bytes to receive.
pub(crate) struct Transfer<'a> {
    pub(crate) channel: usize,
    pub(crate) send: &'a [u8],
    pub(crate) recv: &'a mut [u8],
}

/// Every channel of a group, and the operation counters that tag their messages.
#[derive(Debug)]
pub(crate) struct Links {
    pub(crate) rank: usize,
    pub(crate) channels: Vec<Channel>,
    pub(crate) slot_bytes: usize,
    pub(crate) timeout: Duration,
    /// Operations that sent, and that received, on each channel.
    sent_ops: Vec<u64>,
    received_ops: Vec<u64>,
    /// Payload bytes sent, and received, on each channel.
    pub(crate) sent_bytes: Vec<u64>,
    pub(crate) received_bytes: Vec<u64>,
}

/// The tag kind of `all_gather`.
pub(crate) const ALL_GATHER: u8 = 4;
/// The tag kind of `sum_scatter`.
pub(crate) const SUM_SCATTER: u8 = 5;
/// The tag kind of `send` and `recv`.
pub(crate) const SEND_RECV: u8 = 6;

/// The tag kind of a reduction.
pub(crate) fn reduce_kind(op: nuvec_core::distributed::ReduceOp) -> u8 {
    match op {
        nuvec_core::distributed::ReduceOp::Sum => 1,
        nuvec_core::distributed::ReduceOp::Max => 2,
        nuvec_core::distributed::ReduceOp::Min => 3,
    }
}

/// Kinds of operation, carried in the tag's top byte so that ranks running different
/// collectives fail instead of mixing their bytes.
pub(crate) fn kind_name(kind: u8) -> &'static str {
    match kind {
        1 => "all_sum",
        2 => "all_max",
        3 => "all_min",
        4 => "all_gather",
        5 => "sum_scatter",
        6 => "send/recv",
        _ => "an unknown operation",
    }
}

fn tag(kind: u8, count: u64) -> u64 {
    (u64::from(kind) << 56) | (count & ((1 << 56) - 1))
}

impl Links {
    pub(crate) fn new(
        rank: usize,
        channels: Vec<Channel>,
        slot_bytes: usize,
        timeout: Duration,
    ) -> Links {
        let n = channels.len();
        Links {
            rank,
            channels,
            slot_bytes,
            timeout,
            sent_ops: vec![0; n],
            received_ops: vec![0; n],
            sent_bytes: vec![0; n],
            received_bytes: vec![0; n],
        }
    }

    /// Runs one exchange of operation `op` (its name in errors) and `kind` (its tag).
    pub(crate) fn exchange(
        &mut self,
        op: &str,
        kind: u8,
        transfers: &mut [Transfer<'_>],
    ) -> Result<()> {
        let rank = self.rank;
        let payload = self.slot_bytes - super::channel::HEADER_BYTES;
        let mut send_tags = Vec::with_capacity(transfers.len());
        let mut recv_tags = Vec::with_capacity(transfers.len());
        for t in transfers.iter() {
            let c = t.channel;
            send_tags.push((!t.send.is_empty()).then(|| {
                self.sent_ops[c] += 1;
                tag(kind, self.sent_ops[c])
            }));
            recv_tags.push((!t.recv.is_empty()).then(|| {
                self.received_ops[c] += 1;
                tag(kind, self.received_ops[c])
            }));
        }
        let mut sent = vec![0usize; transfers.len()];
        let mut received = vec![0usize; transfers.len()];
        let mut deadline = Instant::now() + self.timeout;
        let mut next_probe = Instant::now() + PROBE_EVERY;
        let mut idle = 0u32;
        let mut peer_gone_before = false;
        loop {
            let mut progress = false;
            for (i, t) in transfers.iter().enumerate() {
                let channel = &mut self.channels[t.channel];
                while sent[i] < t.send.len() && channel.can_send_data() {
                    let take = (t.send.len() - sent[i]).min(payload);
                    channel.send_data(
                        send_tags[i].unwrap_or_default(),
                        &t.send[sent[i]..sent[i] + take],
                    )?;
                    sent[i] += take;
                    progress = true;
                }
            }
            progress |= self.poll_all(op)?;
            for (i, t) in transfers.iter_mut().enumerate() {
                let channel = &mut self.channels[t.channel];
                while received[i] < t.recv.len() {
                    let Some(arrived) = channel.ready.front().copied() else {
                        break;
                    };
                    let expected = recv_tags[i].unwrap_or_default();
                    if arrived.tag != expected {
                        return Err(jaccl_error(
                            op,
                            rank,
                            mismatch(
                                channel.peer,
                                expected,
                                arrived.tag,
                                received[i],
                                t.recv.len(),
                            ),
                        ));
                    }
                    let end = received[i] + arrived.len;
                    if end > t.recv.len() {
                        return Err(jaccl_error(
                            op,
                            rank,
                            format!(
                                "rank {} sent more than the {} bytes this rank expects for {}: the ranks disagree on the shape or dtype",
                                channel.peer,
                                t.recv.len(),
                                kind_name(kind)
                            ),
                        ));
                    }
                    t.recv[received[i]..end].copy_from_slice(channel.payload(&arrived));
                    channel.ready.pop_front();
                    channel.consume(arrived.slot)?;
                    received[i] = end;
                    progress = true;
                }
            }
            progress |= self.return_all_credits()?;
            // Done when every byte arrived and every message sent has left this process.
            let done = transfers
                .iter()
                .enumerate()
                .all(|(i, t)| sent[i] == t.send.len() && received[i] == t.recv.len())
                && !self.channels.iter().any(Channel::sending);
            if done {
                for t in transfers.iter() {
                    self.sent_bytes[t.channel] += t.send.len() as u64;
                    self.received_bytes[t.channel] += t.recv.len() as u64;
                }
                return Ok(());
            }
            if progress {
                idle = 0;
                deadline = Instant::now() + self.timeout;
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(jaccl_error(
                    op,
                    rank,
                    self.stalled(transfers, &sent, &received),
                ));
            }
            idle += 1;
            if idle > SPINS {
                if now >= next_probe {
                    next_probe = now + PROBE_EVERY;
                    if let Err(error) = self.check_peers(op, transfers, &sent, &received) {
                        // A peer that sent its last messages and ended at once is gone
                        // before this rank read them: fail only if it is still waited on a
                        // probe later, once the polls between have drained what it left.
                        if peer_gone_before {
                            return Err(error);
                        }
                        peer_gone_before = true;
                    }
                }
                self.wait((deadline - now).min(LONGEST_WAIT));
            }
        }
    }

    /// Moves every queue pair along (credits and early messages of later operations are taken
    /// in even on channels the caller does not use); whether anything happened.
    fn poll_all(&mut self, op: &str) -> Result<bool> {
        let mut progress = false;
        for channel in self.channels.iter_mut() {
            let peer = channel.peer;
            progress |= channel
                .poll()
                .map_err(|reason| jaccl_error(op, self.rank, with_peer(peer, reason)))?;
        }
        Ok(progress)
    }

    /// Returns credits on every channel that owes them; whether any message left.
    fn return_all_credits(&mut self) -> Result<bool> {
        let mut progress = false;
        for channel in self.channels.iter_mut() {
            progress |= channel.return_credits()?;
        }
        Ok(progress)
    }

    /// Receives one transfer of `bytes` bytes on `channel` and throws it away (a message the
    /// receiver did not expect, taken so the channel stays usable).
    pub(crate) fn discard(
        &mut self,
        op: &str,
        kind: u8,
        channel: usize,
        bytes: usize,
    ) -> Result<()> {
        self.received_ops[channel] += 1;
        let expected = tag(kind, self.received_ops[channel]);
        let mut left = bytes;
        let mut deadline = Instant::now() + self.timeout;
        while left > 0 {
            let peer = self.channels[channel].peer;
            let mut progress = self.poll_all(op)?;
            let c = &mut self.channels[channel];
            while let Some(arrived) = c.ready.front().copied() {
                if arrived.tag != expected || arrived.len > left {
                    return Err(jaccl_error(
                        op,
                        self.rank,
                        mismatch(peer, expected, arrived.tag, bytes - left, bytes),
                    ));
                }
                c.ready.pop_front();
                c.consume(arrived.slot)?;
                left -= arrived.len;
                progress = true;
                if left == 0 {
                    break;
                }
            }
            progress |= self.return_all_credits()?;
            if progress {
                deadline = Instant::now() + self.timeout;
            } else if Instant::now() >= deadline {
                return Err(jaccl_error(
                    op,
                    self.rank,
                    format!(
                        "no progress from rank {peer} within {:.1} s",
                        self.timeout.as_secs_f64()
                    ),
                ));
            } else {
                self.wait((deadline - Instant::now()).min(LONGEST_WAIT));
            }
        }
        Ok(())
    }

    /// Sleeps until a queue pair may have work, or `timeout`.
    fn wait(&self, timeout: Duration) {
        let fds: Option<Vec<(i32, bool)>> = self.channels.iter().map(|c| c.qp.wake_fd()).collect();
        match fds {
            Some(fds) if wait_fds(&fds, timeout).is_ok() => {}
            _ => std::thread::sleep(super::fabric::NAP.min(timeout)),
        }
    }

    /// Fails naming a peer this exchange still waits on whose queue pair is known to be gone.
    fn check_peers(
        &mut self,
        op: &str,
        transfers: &[Transfer<'_>],
        sent: &[usize],
        received: &[usize],
    ) -> Result<()> {
        for (i, t) in transfers.iter().enumerate() {
            let waiting = received[i] < t.recv.len() || sent[i] < t.send.len();
            let channel = &mut self.channels[t.channel];
            if waiting && !channel.qp.peer_alive() {
                return Err(jaccl_error(
                    op,
                    self.rank,
                    format!(
                        "rank {} is gone: its queue pair closed (its process ended or it closed the group)",
                        channel.peer
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Names the peers an exchange was still waiting for.
    fn stalled(&self, transfers: &[Transfer<'_>], sent: &[usize], received: &[usize]) -> String {
        let mut waiting: Vec<String> = Vec::new();
        for (i, t) in transfers.iter().enumerate() {
            let peer = self.channels[t.channel].peer;
            if received[i] < t.recv.len() {
                waiting.push(format!(
                    "rank {peer} (received {} of {} bytes)",
                    received[i],
                    t.recv.len()
                ));
            } else if sent[i] < t.send.len() {
                waiting.push(format!(
                    "rank {peer} (sent {} of {} bytes; it took no more)",
                    sent[i],
                    t.send.len()
                ));
            }
        }
        waiting.dedup();
        format!(
            "no progress from {} within {:.1} s: the peer stopped, died or runs a different program",
            waiting.join(", "),
            self.timeout.as_secs_f64()
        )
    }
}

fn with_peer(peer: usize, reason: String) -> String {
    if reason.contains(&format!("rank {peer}")) {
        reason
    } else {
        format!("the connection to rank {peer} failed: {reason}")
    }
}

fn mismatch(peer: usize, expected: u64, got: u64, received: usize, wanted: usize) -> String {
    let (kind_expected, kind_got) = ((expected >> 56) as u8, (got >> 56) as u8);
    if kind_expected != kind_got {
        format!(
            "rank {peer} is running {} while this rank runs {}: every rank must call the same collectives in the same order",
            kind_name(kind_got),
            kind_name(kind_expected)
        )
    } else {
        format!(
            "rank {peer} sent {received} bytes for this {}, this rank expected {wanted}: the ranks disagree on the shape or dtype",
            kind_name(kind_expected)
        )
    }
}

/// Disjoint mutable slices of `buffer` for `ranges` (in the order given); `None` when two
/// ranges overlap or one runs past the end.
pub(crate) fn carve<'a>(
    buffer: &'a mut [u8],
    ranges: &[Range<usize>],
) -> Option<Vec<&'a mut [u8]>> {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| ranges[i].start);
    let mut pieces: Vec<Option<&'a mut [u8]>> = (0..ranges.len()).map(|_| None).collect();
    let mut rest = buffer;
    let mut offset = 0;
    for i in order {
        let range = &ranges[i];
        if range.start < offset || range.end < range.start || range.end - offset > rest.len() {
            return None;
        }
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(range.start - offset);
        let (piece, tail) = tail.split_at_mut(range.len());
        pieces[i] = Some(piece);
        rest = tail;
        offset = range.end;
    }
    pieces.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carve_gives_disjoint_slices_in_the_order_asked() {
        let mut buffer: Vec<u8> = (0..10).collect();
        let pieces = carve(&mut buffer, &[6..8, 0..2, 2..2]).unwrap();
        assert_eq!(pieces[0], [6, 7]);
        assert_eq!(pieces[1], [0, 1]);
        assert!(pieces[2].is_empty());
        assert!(carve(&mut buffer, &[0..3, 2..4]).is_none(), "overlap");
        assert!(carve(&mut buffer, &[0..1, 8..11]).is_none(), "past the end");
    }

    #[test]
    fn tags_carry_the_kind_and_mismatches_say_which_collectives() {
        let error = mismatch(2, tag(1, 5), tag(4, 5), 0, 8);
        assert!(
            error.contains("rank 2 is running all_gather while this rank runs all_sum"),
            "{error}"
        );
        let error = mismatch(1, tag(1, 5), tag(1, 6), 4, 8);
        assert!(
            error.contains("sent 4 bytes") && error.contains("expected 8"),
            "{error}"
        );
    }
}
