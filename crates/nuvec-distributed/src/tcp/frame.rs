//! The header every collective and message carries on each connection: protocol version,
//! operation, dtype, byte count and sequence number, so a rank that calls something different
//! from its peer gets an error naming both instead of corrupted data or a hang.

use nuvec_core::DType;

/// Marks nuvec frames ("NUVC").
pub(crate) const MAGIC: u32 = 0x4E55_5643;
/// Bumped whenever the wire format changes; peers must agree.
pub(crate) const VERSION: u16 = 6;
/// Encoded size of a [`Header`].
pub(crate) const HEADER_BYTES: usize = 24;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    AllSum = 1,
    AllMax = 2,
    AllMin = 3,
    AllGather = 4,
    SumScatter = 5,
    Send = 6,
    /// One piece of a collective's data.
    Chunk = 8,
    /// A rank's notice that its group failed, and why.
    Abort = 9,
    /// A broadcast: its header's byte count carries the root too ([`Header::broadcast_bytes`]).
    Broadcast = 10,
    AllToAll = 11,
    /// An all-to-all of counted rows: its header's byte count is the row's.
    AllToAllV = 12,
}

/// Where a broadcast header keeps its root: the byte count's top 16 bits, plus one.
const ROOT_SHIFT: u32 = 48;

impl Kind {
    fn from_u8(value: u8) -> Option<Kind> {
        Some(match value {
            1 => Kind::AllSum,
            2 => Kind::AllMax,
            3 => Kind::AllMin,
            4 => Kind::AllGather,
            5 => Kind::SumScatter,
            6 => Kind::Send,
            8 => Kind::Chunk,
            9 => Kind::Abort,
            10 => Kind::Broadcast,
            11 => Kind::AllToAll,
            12 => Kind::AllToAllV,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::AllSum => "all_sum",
            Kind::AllMax => "all_max",
            Kind::AllMin => "all_min",
            Kind::AllGather => "all_gather",
            Kind::SumScatter => "sum_scatter",
            Kind::Send => "send",
            Kind::Chunk => "chunk",
            Kind::Abort => "abort",
            Kind::Broadcast => "broadcast",
            Kind::AllToAll => "all_to_all",
            Kind::AllToAllV => "all_to_all_v",
        }
    }
}

/// A frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) kind: Kind,
    pub(crate) dtype: DType,
    /// Per-connection count of frames of this kind family (collectives or messages).
    pub(crate) sequence: u64,
    /// Payload bytes that follow (for a collective: the whole array's bytes on the sender).
    pub(crate) bytes: u64,
}

impl Header {
    pub(crate) fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[4..6].copy_from_slice(&VERSION.to_le_bytes());
        out[6] = self.kind as u8;
        out[7] = DType::ALL
            .iter()
            .position(|d| *d == self.dtype)
            .unwrap_or(0) as u8;
        out[8..16].copy_from_slice(&self.sequence.to_le_bytes());
        out[16..24].copy_from_slice(&self.bytes.to_le_bytes());
        out
    }

    /// Decodes a header, explaining what is wrong with one that is not nuvec's.
    pub(crate) fn decode(raw: &[u8; HEADER_BYTES]) -> Result<Header, String> {
        let magic = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
        if magic != MAGIC {
            return Err(format!(
                "received bytes that are not a nuvec frame (magic {magic:#010x})"
            ));
        }
        let version = u16::from_le_bytes([raw[4], raw[5]]);
        if version != VERSION {
            return Err(format!("peer speaks nuvec wire version {version}, this rank {VERSION}: run the same nuvec on every rank"));
        }
        let kind = Kind::from_u8(raw[6]).ok_or_else(|| format!("unknown frame kind {}", raw[6]))?;
        let dtype = *DType::ALL
            .get(raw[7] as usize)
            .ok_or_else(|| format!("unknown dtype code {}", raw[7]))?;
        let mut word = [0u8; 8];
        word.copy_from_slice(&raw[8..16]);
        let sequence = u64::from_le_bytes(word);
        word.copy_from_slice(&raw[16..24]);
        let bytes = u64::from_le_bytes(word);
        Ok(Header {
            kind,
            dtype,
            sequence,
            bytes,
        })
    }

    /// The error of rank `rank`'s call `self` when rank `peer` called `theirs` instead,
    /// naming both calls.
    pub(crate) fn mismatch(&self, rank: usize, peer: usize, theirs: &Header) -> nuvec_core::Error {
        nuvec_core::Error::Distributed {
            op: self.kind.name().into(),
            rank: Some(peer),
            reason: format!(
                "rank {peer} called {}, this rank (rank {rank}) called {}",
                theirs.describe(),
                self.describe()
            ),
        }
    }

    /// The byte count a broadcast's header carries for `bytes` from rank `root`: the two
    /// together, so that ranks naming different roots (or sizes) disagree on the header.
    pub(crate) fn broadcast_bytes(bytes: usize, root: usize) -> usize {
        bytes | (root + 1) << ROOT_SHIFT
    }

    /// One-line description for mismatch errors: `all_sum of 4096 bytes of float32 (#3)`,
    /// `broadcast from root 1 of 8 bytes of float32 (call #0)`.
    pub(crate) fn describe(&self) -> String {
        let (mut bytes, mut root) = (self.bytes, String::new());
        if self.kind == Kind::Broadcast && self.bytes >> ROOT_SHIFT > 0 {
            root = format!(" from root {}", (self.bytes >> ROOT_SHIFT) - 1);
            bytes &= (1 << ROOT_SHIFT) - 1;
        }
        format!(
            "{}{root} of {bytes} bytes of {} (call #{})",
            self.kind.name(),
            self.dtype,
            self.sequence
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_foreign_bytes_are_rejected() {
        let header = Header {
            kind: Kind::AllGather,
            dtype: DType::BF16,
            sequence: 42,
            bytes: 1 << 33,
        };
        assert_eq!(Header::decode(&header.encode()), Ok(header));
        let mut bad = header.encode();
        bad[0] = 0;
        assert!(Header::decode(&bad)
            .unwrap_err()
            .contains("not a nuvec frame"));
        let mut old = header.encode();
        old[4] = 9;
        assert!(Header::decode(&old).unwrap_err().contains("version"));
    }

    /// Arbitrary bytes, and valid headers with bytes changed, decode to an error or a header
    /// that encodes back to the same bytes: never a panic.
    #[test]
    fn decoding_arbitrary_bytes_never_panics() {
        let mut random = crate::test_random::Random::new(0x853C_49E6_748F_EA9B);
        let mut next = move || random.next();
        let valid = Header {
            kind: Kind::Chunk,
            dtype: DType::F32,
            sequence: 3,
            bytes: 4096,
        }
        .encode();
        let mut decoded = 0;
        for round in 0..200_000 {
            let mut raw = [0u8; HEADER_BYTES];
            if round % 2 == 0 {
                raw.iter_mut().for_each(|b| *b = next() as u8);
            } else {
                raw = valid;
                raw[(next() % HEADER_BYTES as u64) as usize] = next() as u8;
            }
            if let Ok(header) = Header::decode(&raw) {
                assert_eq!(header.encode(), raw);
                decoded += 1;
            }
        }
        assert!(decoded > 0);
    }
}
