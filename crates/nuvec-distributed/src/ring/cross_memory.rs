//! Where a payload lies in its sender's memory, as one rank tells another on the same machine
//! so that the other reads it in one copy (`platform::read_process`, Linux's cross-memory
//! attach): large all-gathers (`algorithms/single_copy.rs`) and large messages
//! (`posted_messages.rs`).

use crate::platform;

/// A payload's place: the process, the address and the length, as posted (20 bytes,
/// little-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Location {
    pid: u32,
    address: u64,
    pub(crate) bytes: u64,
}

/// Bytes of a posted [`Location`].
pub(crate) const LOCATION_BYTES: usize = 20;

impl Location {
    /// Where `payload`, memory of this process, lies.
    pub(crate) fn of(payload: &[u8]) -> Location {
        Location {
            pid: std::process::id(),
            address: payload.as_ptr() as u64,
            bytes: payload.len() as u64,
        }
    }

    pub(crate) fn encode(&self) -> [u8; LOCATION_BYTES] {
        let mut post = [0u8; LOCATION_BYTES];
        post[..4].copy_from_slice(&self.pid.to_le_bytes());
        post[4..12].copy_from_slice(&self.address.to_le_bytes());
        post[12..].copy_from_slice(&self.bytes.to_le_bytes());
        post
    }

    /// The location in `post`; `None` unless it holds exactly one.
    pub(crate) fn decode(post: &[u8]) -> Option<Location> {
        let post: &[u8; LOCATION_BYTES] = post.try_into().ok()?;
        let word = |at: usize| u64::from_le_bytes(post[at..at + 8].try_into().expect("8 bytes"));
        Some(Location {
            pid: u32::from_le_bytes(post[..4].try_into().expect("4 bytes")),
            address: word(4),
            bytes: word(12),
        })
    }

    /// The `bytes` bytes from `offset` of this payload (within it).
    pub(crate) fn part(&self, offset: u64, bytes: u64) -> Location {
        Location {
            pid: self.pid,
            address: self.address + offset,
            bytes,
        }
    }

    /// Copies `from` (as long as this place) into this place, in its process: whether the
    /// kernel let it.
    pub(crate) fn write_from(&self, from: &[u8]) -> bool {
        self.bytes == from.len() as u64
            && platform::write_process(self.pid, self.address, from).is_ok()
    }

    /// Copies the payload into `into` (as long as the payload), if `allowed` (this rank reads
    /// other ranks' memory, `NUVEC_RING_CROSS_MEMORY`) and the kernel lets it: whether it did.
    pub(crate) fn read_into(&self, into: &mut [u8], allowed: bool) -> bool {
        allowed
            && self.bytes == into.len() as u64
            && platform::read_process(self.pid, self.address, into).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_round_trips_and_reads_its_payload_unless_forbidden() {
        let payload: Vec<u8> = (0..70_000u32).map(|i| (i % 253) as u8).collect();
        let location = Location::decode(&Location::of(&payload).encode()).unwrap();
        assert_eq!(location, Location::of(&payload));
        assert_eq!(Location::decode(&[0u8; 19]), None);
        let mut into = vec![0u8; payload.len()];
        assert!(!location.read_into(&mut into, false));
        assert!(
            !location.read_into(&mut into[1..], true),
            "a length that differs"
        );
        if cfg!(target_os = "linux") {
            assert!(location.read_into(&mut into, true));
            assert_eq!(into, payload);
            let mut target = vec![0u8; 1000];
            let place = Location::of(&target).part(100, 800);
            assert!(place.write_from(&payload[..800]));
            assert!(!place.write_from(&payload[..799]), "a length that differs");
            assert_eq!(&target[100..900], &payload[..800]);
            assert_eq!(target[..100], [0u8; 100]);
            target[0] = 1;
        }
    }
}
