//! A channel: numbered messages over one queue pair, with credits so that no message is ever
//! sent without a receive posted for it (an unreliable connected queue pair would drop it).
//!
//! Every message starts with a 32-byte header: its sequence number on this channel, the
//! receiver's grant (how many messages the other side may have sent in all), the operation it
//! belongs to (a counter per direction and the collective's kind), its payload length and
//! whether it carries data or only credits. A gap in sequence numbers means a message was lost
//! on the link, and fails the operation instead of corrupting a later one.
//!
//! Credits: each side posts `slots` receives and re-posts one as soon as its message is
//! consumed, so it may grant `consumed + slots`. Data leaves while more than one credit is
//! left; the last credit is kept for a credit-only message, sent when half the window has been
//! consumed and no data is going the other way to carry the grant.

use super::fabric::{Completion, QueuePair};
use nuvec_core::Result;
use std::collections::VecDeque;

/// Header bytes before each message's payload.
pub(crate) const HEADER_BYTES: usize = 32;
const DATA: u8 = 1;
const CREDIT: u8 = 2;

/// A data message waiting to be consumed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrived {
    pub(crate) slot: usize,
    pub(crate) tag: u64,
    pub(crate) len: usize,
}

/// One queue pair to one peer, with its credits and sequence numbers.
#[derive(Debug)]
pub(crate) struct Channel {
    pub(crate) qp: Box<dyn QueuePair>,
    /// The peer's rank.
    pub(crate) peer: usize,
    slots: usize,
    /// Messages sent, and how many the peer has granted in all.
    sent: u64,
    granted: u64,
    /// Messages that arrived, messages consumed, and the grant last sent.
    arrived: u64,
    consumed: u64,
    advertised: u64,
    free_sends: Vec<usize>,
    /// Data messages that arrived and were not consumed yet, in order.
    pub(crate) ready: VecDeque<Arrived>,
    completions: Vec<Completion>,
}

fn lost(peer: usize, expected: u64, got: u64) -> String {
    format!(
        "a message from rank {peer} was lost on the link (expected message {expected}, got {got}); unreliable connections do not retransmit, so the operation fails"
    )
}

impl Channel {
    /// A channel over a connected queue pair with `slots` receives to post.
    pub(crate) fn new(mut qp: Box<dyn QueuePair>, peer: usize, slots: usize) -> Result<Channel> {
        for slot in 0..slots {
            qp.post_recv(slot)?;
        }
        Ok(Channel {
            qp,
            peer,
            slots,
            sent: 0,
            granted: slots as u64,
            arrived: 0,
            consumed: 0,
            advertised: slots as u64,
            free_sends: (0..slots).rev().collect(),
            ready: VecDeque::new(),
            completions: Vec::new(),
        })
    }

    /// Whether sends posted on this channel have not all left yet (their slots are still the
    /// queue pair's: a process that went away now would lose them).
    pub(crate) fn sending(&self) -> bool {
        self.free_sends.len() < self.slots
    }

    /// Whether a data message may leave now.
    pub(crate) fn can_send_data(&self) -> bool {
        self.sent + 1 < self.granted && !self.free_sends.is_empty()
    }

    fn grant(&self) -> u64 {
        self.consumed + self.slots as u64
    }

    fn post(&mut self, kind: u8, tag: u64, payload: &[u8]) -> Result<()> {
        let slot = self
            .free_sends
            .pop()
            .expect("a free send slot (checked by the caller)");
        let grant = self.grant();
        let buffer = self.qp.send_slot(slot);
        buffer[0..8].copy_from_slice(&self.sent.to_le_bytes());
        buffer[8..16].copy_from_slice(&grant.to_le_bytes());
        buffer[16..24].copy_from_slice(&tag.to_le_bytes());
        buffer[24..28].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        buffer[28] = kind;
        buffer[HEADER_BYTES..HEADER_BYTES + payload.len()].copy_from_slice(payload);
        self.qp.post_send(slot, HEADER_BYTES + payload.len())?;
        self.sent += 1;
        self.advertised = grant;
        Ok(())
    }

    /// Sends one data message (the caller checked [`Channel::can_send_data`]).
    pub(crate) fn send_data(&mut self, tag: u64, payload: &[u8]) -> Result<()> {
        self.post(DATA, tag, payload)
    }

    /// Sends the grant alone when half the window waits to be granted and a credit is left.
    pub(crate) fn return_credits(&mut self) -> Result<bool> {
        let owed = self.grant() - self.advertised;
        if owed * 2 >= self.slots as u64 && self.sent < self.granted && !self.free_sends.is_empty()
        {
            self.post(CREDIT, 0, &[])?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Moves the queue pair along; data messages that arrived go to `ready`. Returns whether
    /// anything happened.
    pub(crate) fn poll(&mut self) -> std::result::Result<bool, String> {
        self.completions.clear();
        let mut completions = std::mem::take(&mut self.completions);
        self.qp.poll(&mut completions).map_err(|e| e.to_string())?;
        let progressed = !completions.is_empty();
        for completion in completions.drain(..) {
            match completion {
                Completion::Sent { slot } => self.free_sends.push(slot),
                Completion::Received { slot, len } => self.arrive(slot, len)?,
            }
        }
        self.completions = completions;
        Ok(progressed)
    }

    fn arrive(&mut self, slot: usize, len: usize) -> std::result::Result<(), String> {
        let peer = self.peer;
        let bytes = self.qp.recv_slot(slot);
        if len < HEADER_BYTES {
            return Err(format!(
                "rank {peer} sent a message shorter than its header"
            ));
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
        let (sequence, grant, tag) = (word(0), word(8), word(16));
        let payload = u32::from_le_bytes(bytes[24..28].try_into().unwrap_or_default()) as usize;
        let kind = bytes[28];
        if sequence != self.arrived {
            return Err(lost(peer, self.arrived, sequence));
        }
        if payload != len - HEADER_BYTES {
            return Err(format!(
                "rank {peer} sent a message whose length does not match its header"
            ));
        }
        self.arrived += 1;
        self.granted = self.granted.max(grant);
        match kind {
            CREDIT => self.consume(slot).map_err(|e| e.to_string()),
            DATA => {
                self.ready.push_back(Arrived {
                    slot,
                    tag,
                    len: payload,
                });
                Ok(())
            }
            other => Err(format!(
                "rank {peer} sent a message of unknown kind {other}"
            )),
        }
    }

    /// The payload of a data message that arrived.
    pub(crate) fn payload(&self, arrived: &Arrived) -> &[u8] {
        &self.qp.recv_slot(arrived.slot)[HEADER_BYTES..HEADER_BYTES + arrived.len]
    }

    /// Gives a consumed message's receive slot back to the queue pair.
    pub(crate) fn consume(&mut self, slot: usize) -> Result<()> {
        self.consumed += 1;
        self.qp.post_recv(slot)
    }
}
