//! The header that precedes every `send` over MPI, so a receiver that expects another dtype or
//! shape gets an error naming both instead of misread bytes.
//!
//! Layout (little-endian): magic `NVMS`, version (u32), dtype (u32, its index in
//! `DType::ALL`), payload bytes (u64), number of dimensions (u32), then each dimension (i32).

use nuvec_core::DType;

const MAGIC: [u8; 4] = *b"NVMS";
/// Bumped when the layout changes.
pub(crate) const VERSION: u32 = 1;
/// More dimensions than any array has; bounds the receive buffer.
pub(crate) const MAX_NDIM: usize = 64;
/// The largest encoded header.
pub(crate) const MAX_HEADER: usize = 24 + 4 * MAX_NDIM;

/// What a sender says about the array that follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<i32>,
    pub(crate) bytes: u64,
}

impl Header {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let index = DType::ALL
            .iter()
            .position(|&d| d == self.dtype)
            .unwrap_or(0) as u32;
        let mut out = Vec::with_capacity(24 + 4 * self.shape.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&index.to_le_bytes());
        out.extend_from_slice(&self.bytes.to_le_bytes());
        out.extend_from_slice(&(self.shape.len() as u32).to_le_bytes());
        for dim in &self.shape {
            out.extend_from_slice(&dim.to_le_bytes());
        }
        out
    }

    /// Parses a header, saying what is wrong with one that is not.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Header, String> {
        let word = |at: usize| -> Option<u32> {
            Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
        };
        if bytes.get(..4) != Some(&MAGIC[..]) {
            return Err(format!(
                "a message of {} bytes that is not a nuvec array header",
                bytes.len()
            ));
        }
        let version = word(4).ok_or("a truncated header")?;
        if version != VERSION {
            return Err(format!(
                "a header of version {version} (this build speaks version {VERSION})"
            ));
        }
        let dtype = word(8)
            .and_then(|i| DType::ALL.get(i as usize).copied())
            .ok_or("a header with an unknown dtype")?;
        let payload = bytes
            .get(12..20)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or("a truncated header")?;
        let ndim = word(20).ok_or("a truncated header")? as usize;
        if ndim > MAX_NDIM || bytes.len() != 24 + 4 * ndim {
            return Err(format!(
                "a header with a malformed shape ({ndim} dimensions)"
            ));
        }
        let shape = bytes[24..]
            .chunks_exact(4)
            .map(|d| i32::from_le_bytes([d[0], d[1], d[2], d[3]]))
            .collect();
        Ok(Header {
            dtype,
            shape,
            bytes: payload,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let header = Header {
            dtype: DType::BF16,
            shape: vec![2, 0, 7],
            bytes: 0,
        };
        assert_eq!(Header::decode(&header.encode()).unwrap(), header);
        let scalar = Header {
            dtype: DType::F64,
            shape: vec![],
            bytes: 8,
        };
        assert_eq!(Header::decode(&scalar.encode()).unwrap(), scalar);
    }

    #[test]
    fn foreign_or_damaged_headers_are_refused_with_a_reason() {
        let good = Header {
            dtype: DType::F32,
            shape: vec![3],
            bytes: 12,
        }
        .encode();
        assert!(Header::decode(b"hello")
            .unwrap_err()
            .contains("not a nuvec"));
        let mut newer = good.clone();
        newer[4] = 9;
        assert!(Header::decode(&newer).unwrap_err().contains("version 9"));
        let mut bad_dtype = good.clone();
        bad_dtype[8] = 200;
        assert!(Header::decode(&bad_dtype).unwrap_err().contains("dtype"));
        assert!(Header::decode(&good[..good.len() - 1]).is_err());
    }
}
