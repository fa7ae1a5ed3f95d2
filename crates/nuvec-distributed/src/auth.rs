//! Pre-shared-key authentication: the [`Key`] every rank holds, fresh challenges, and the
//! HMAC-SHA256 proofs both ends of a connection exchange while the group forms.
//!
//! A proof covers both challenges, both ends' ranks and group sizes, and which end made it, so
//! a recorded handshake cannot be replayed (the other end's challenge is new every time) nor
//! reflected back at its sender (the role differs).

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::fmt;

/// The fewest bytes a secret may have.
pub(crate) const SHORTEST_KEY: usize = 16;
/// Bytes of a challenge and of a proof.
pub(crate) const PROOF_BYTES: usize = 32;

/// Separates nuvec's use of a secret from any other use of the same secret.
const DOMAIN: &[u8] = b"nuvec-distributed pre-shared key v1\0";

/// A pre-shared secret, kept only as SHA-256 of a domain tag and the secret. Its `Debug`
/// prints `Key(..)`: the secret and its digest never appear in output.
#[derive(Clone)]
pub(crate) struct Key {
    digest: [u8; 32],
    secret_len: usize,
}

impl Key {
    /// Derives a key from `secret` (checked for length when a group forms).
    pub(crate) fn new(secret: &[u8]) -> Key {
        let mut hasher = Sha256::new();
        hasher.update(DOMAIN);
        hasher.update(secret);
        Key {
            digest: hasher.finalize().into(),
            secret_len: secret.len(),
        }
    }

    /// Refuses a secret shorter than [`SHORTEST_KEY`] bytes, without showing it.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.secret_len < SHORTEST_KEY {
            return Err(format!(
                "the pre-shared key has {} bytes; at least {SHORTEST_KEY} are required (generate one with `openssl rand -hex 32`)",
                self.secret_len
            ));
        }
        Ok(())
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(&self.digest).expect("HMAC accepts keys of any length")
    }

    /// The proof that the end playing `role` holds the key, over `transcript`.
    pub(crate) fn prove(&self, role: Role, transcript: &Transcript) -> [u8; PROOF_BYTES] {
        let mut mac = self.mac();
        transcript.feed(role, &mut mac);
        mac.finalize().into_bytes().into()
    }

    /// Whether `proof` is the proof of `role` over `transcript` (compared in constant time).
    pub(crate) fn verify(&self, role: Role, transcript: &Transcript, proof: &[u8]) -> bool {
        let mut mac = self.mac();
        transcript.feed(role, &mut mac);
        mac.verify_slice(proof).is_ok()
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        let differences = self
            .digest
            .iter()
            .zip(other.digest)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        differences == 0 && self.secret_len == other.secret_len
    }
}

impl Eq for Key {}

/// Which end of a connection made a proof.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The rank that connected.
    Connecting,
    /// The rank that accepted the connection.
    Accepting,
}

/// What both ends said in a handshake; each proof covers all of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Transcript {
    pub(crate) connecting_challenge: [u8; PROOF_BYTES],
    pub(crate) accepting_challenge: [u8; PROOF_BYTES],
    /// (rank, group size) as the connecting end stated them.
    pub(crate) connecting: (u32, u32),
    /// (rank, group size) as the accepting end stated them.
    pub(crate) accepting: (u32, u32),
}

impl Transcript {
    fn feed(&self, role: Role, mac: &mut Hmac<Sha256>) {
        mac.update(match role {
            Role::Connecting => b"connecting",
            Role::Accepting => b"accepting\0",
        });
        mac.update(&self.connecting_challenge);
        mac.update(&self.accepting_challenge);
        for value in [
            self.connecting.0,
            self.connecting.1,
            self.accepting.0,
            self.accepting.1,
        ] {
            mac.update(&value.to_le_bytes());
        }
    }
}

/// A fresh challenge from the operating system's random source.
pub(crate) fn challenge() -> Result<[u8; PROOF_BYTES], String> {
    let mut bytes = [0u8; PROOF_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| format!("no random bytes for a challenge: {e}"))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transcript(accepting_challenge: u8) -> Transcript {
        Transcript {
            connecting_challenge: [1; PROOF_BYTES],
            accepting_challenge: [accepting_challenge; PROOF_BYTES],
            connecting: (0, 2),
            accepting: (1, 2),
        }
    }

    #[test]
    fn a_proof_verifies_only_for_the_same_key_role_and_transcript() {
        let key = Key::new(b"0123456789abcdef0123");
        let proof = key.prove(Role::Connecting, &transcript(7));
        assert!(key.verify(Role::Connecting, &transcript(7), &proof));
        // Replayed against a fresh challenge, reflected to the other role, or under another key.
        assert!(!key.verify(Role::Connecting, &transcript(8), &proof));
        assert!(!key.verify(Role::Accepting, &transcript(7), &proof));
        let other = Key::new(b"0123456789abcdef0124");
        assert!(!other.verify(Role::Connecting, &transcript(7), &proof));
        // Nor for different stated ranks.
        let mut moved = transcript(7);
        moved.connecting.0 = 5;
        assert!(!key.verify(Role::Connecting, &moved, &proof));
    }

    #[test]
    fn short_secrets_are_refused_without_showing_them() {
        let error = Key::new(b"hunter2").validate().unwrap_err();
        assert!(error.contains("7 bytes") && error.contains("16"), "{error}");
        assert!(!error.contains("hunter2"));
        assert!(Key::new(&[b'k'; 16]).validate().is_ok());
    }

    #[test]
    fn debug_output_never_shows_the_secret_or_its_digest() {
        let key = Key::new(b"a very secret secret");
        assert_eq!(format!("{key:?}"), "Key(..)");
    }

    #[test]
    fn challenges_are_fresh() {
        assert_ne!(challenge().unwrap(), challenge().unwrap());
    }
}
