//! The verbs layer JACCL's algorithms run on, behind one small trait: queue pairs with
//! registered send and receive slots, two-sided sends into posted receives, and completions.
//!
//! Two fabrics implement it: `verbs.rs`, the system's ibverbs library loaded at run time
//! (unreliable connected queue pairs, as MLX uses), and `emulated.rs`, a fabric of Unix
//! datagram sockets between processes on one machine that models the same rules: MTU-sized
//! packets, a message with a lost packet discarded whole, a message with no posted receive
//! dropped. `NUVEC_JACCL_FABRIC=emulated` selects it.

#[cfg(test)]
mod abi_tests;
pub(crate) mod emulated;
pub(crate) mod ffi;
pub(crate) mod verbs;

use nuvec_core::Result;
use std::time::Duration;

/// The variable that selects the fabric: `emulated`, or `verbs` (the default).
pub const FABRIC_VARIABLE: &str = "NUVEC_JACCL_FABRIC";

/// A finished work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Completion {
    /// The send slot may be written again.
    Sent { slot: usize },
    /// A message of `len` bytes is in the receive slot.
    Received { slot: usize, len: usize },
}

/// One end of a connection over one cable: `slots` registered send buffers and as many
/// receive buffers of `slot_bytes` each.
pub(crate) trait QueuePair: Send + std::fmt::Debug {
    /// What the peer needs to connect to this end (exchanged over the side channel).
    fn address(&self) -> Vec<u8>;
    /// Connects to the peer's end; sends and receives work afterwards.
    fn connect(&mut self, remote: &[u8]) -> Result<()>;
    /// Send slot `slot`, to be filled before [`QueuePair::post_send`].
    fn send_slot(&mut self, slot: usize) -> &mut [u8];
    /// Receive slot `slot`, valid after its receive completed and until it is posted again.
    fn recv_slot(&self, slot: usize) -> &[u8];
    /// Sends the first `len` bytes of send slot `slot` as one message.
    fn post_send(&mut self, slot: usize, len: usize) -> Result<()>;
    /// Makes receive slot `slot` ready for the next message.
    fn post_recv(&mut self, slot: usize) -> Result<()>;
    /// Moves work along without waiting and appends what finished to `out`.
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<()>;
    /// A descriptor that becomes readable when work may have finished (`None`: the caller
    /// naps briefly instead), and whether writability matters now.
    fn wake_fd(&self) -> Option<(i32, bool)>;
    /// Whether the peer's end may still be there. Real unreliable connections cannot tell
    /// (a dead peer shows only as silence, caught by the timeout); the emulated fabric knows
    /// when the peer's socket closed.
    fn peer_alive(&mut self) -> bool {
        true
    }
}

/// Opens queue pairs on named devices.
pub(crate) trait Fabric: Send + Sync + std::fmt::Debug {
    /// The fabric's name in messages.
    fn name(&self) -> &'static str;
    /// A queue pair on `device` with `slots` send and receive slots of `slot_bytes`.
    fn open(&self, device: &str, slots: usize, slot_bytes: usize) -> Result<Box<dyn QueuePair>>;
}

/// The fabric `choice` names for rank `rank`, else the one `NUVEC_JACCL_FABRIC` names.
pub(crate) fn select(
    rank: usize,
    choice: Option<super::options::Fabric>,
) -> Result<Box<dyn Fabric>> {
    use super::options::Fabric as Choice;
    let named = match choice {
        Some(Choice::Emulated) => Some("emulated".to_string()),
        Some(Choice::Verbs) => Some("verbs".to_string()),
        None => std::env::var(FABRIC_VARIABLE).ok(),
    };
    match named.as_deref() {
        Some("emulated") => Ok(Box::new(emulated::EmulatedFabric::from_env(rank)?)),
        None | Some("") | Some("verbs") => Ok(Box::new(verbs::VerbsFabric::load(rank)?)),
        Some(other) => Err(nuvec_core::Error::Distributed {
            op: "jaccl".into(),
            rank: Some(rank),
            reason: format!("{FABRIC_VARIABLE} must be `emulated` or `verbs`, got {other:?}"),
        }),
    }
}

/// How long a caller without a descriptor to wait on sleeps between polls.
pub(crate) const NAP: Duration = Duration::from_micros(50);
