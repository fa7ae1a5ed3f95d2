//! The handshake that opens every connection of a forming group.
//!
//! The connecting end sends a hello (its rank, the group size, whether it holds a key, a fresh
//! challenge); the accepting end answers in kind, with its proof when both hold a key; the
//! connecting end checks that proof and sends its own; the accepting end gives a verdict. Every
//! message is one fixed-size record, so decoding arbitrary bytes never allocates.
//!
//! A hello also carries the process's incarnation, a random number drawn once per formation:
//! a rank opens several connections to the same peer, and the peer refuses a connection
//! claiming a rank whose earlier connections came from another incarnation (two processes
//! started as the same rank).

use super::frame::VERSION;
use crate::auth::{challenge, Key, Role, Transcript, PROOF_BYTES};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Marks handshake messages ("NVHS").
const MAGIC: [u8; 4] = *b"NVHS";
/// Encoded size of a [`Message`].
pub(crate) const MESSAGE_BYTES: usize = 84;
const KEYED: u8 = 1;

/// Which message of the handshake a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Hello = 1,
    Answer = 2,
    Proof = 3,
    Verdict = 4,
}

/// The accepting end's decision, sent as the last message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Accepted = 0,
    KeyRequired = 1,
    BadProof = 2,
    WrongSize = 3,
    DuplicateRank = 4,
    NoKeyHere = 5,
}

impl Verdict {
    fn from_u8(code: u8) -> Option<Verdict> {
        Some(match code {
            0 => Verdict::Accepted,
            1 => Verdict::KeyRequired,
            2 => Verdict::BadProof,
            3 => Verdict::WrongSize,
            4 => Verdict::DuplicateRank,
            5 => Verdict::NoKeyHere,
            _ => return None,
        })
    }
}

/// One handshake record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Message {
    pub(crate) step: Step,
    pub(crate) keyed: bool,
    pub(crate) verdict: Verdict,
    pub(crate) rank: u32,
    pub(crate) size: u32,
    /// The sending process's incarnation (24 bits).
    pub(crate) incarnation: u32,
    pub(crate) challenge: [u8; PROOF_BYTES],
    pub(crate) proof: [u8; PROOF_BYTES],
}

impl Message {
    fn new(step: Step) -> Message {
        Message {
            step,
            keyed: false,
            verdict: Verdict::Accepted,
            rank: 0,
            size: 0,
            incarnation: 0,
            challenge: [0; PROOF_BYTES],
            proof: [0; PROOF_BYTES],
        }
    }

    pub(crate) fn verdict(verdict: Verdict) -> Message {
        Message {
            verdict,
            ..Message::new(Step::Verdict)
        }
    }

    pub(crate) fn encode(&self) -> [u8; MESSAGE_BYTES] {
        let mut out = [0u8; MESSAGE_BYTES];
        out[0..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&VERSION.to_le_bytes());
        out[6] = self.step as u8;
        out[7] = if self.keyed { KEYED } else { 0 };
        out[8] = self.verdict as u8;
        out[9..12].copy_from_slice(&self.incarnation.to_le_bytes()[..3]);
        out[12..16].copy_from_slice(&self.rank.to_le_bytes());
        out[16..20].copy_from_slice(&self.size.to_le_bytes());
        out[20..52].copy_from_slice(&self.challenge);
        out[52..84].copy_from_slice(&self.proof);
        out
    }

    /// Decodes a record, explaining what is wrong with bytes that are not one.
    pub(crate) fn decode(raw: &[u8; MESSAGE_BYTES]) -> Result<Message, String> {
        if raw[0..4] != MAGIC {
            return Err("the bytes are not a nuvec handshake".into());
        }
        let version = u16::from_le_bytes([raw[4], raw[5]]);
        if version != VERSION {
            return Err(format!(
                "the peer speaks nuvec wire version {version}, this rank {VERSION}: run the same nuvec on every rank"
            ));
        }
        let step = match raw[6] {
            1 => Step::Hello,
            2 => Step::Answer,
            3 => Step::Proof,
            4 => Step::Verdict,
            other => return Err(format!("unknown handshake step {other}")),
        };
        if raw[7] & !KEYED != 0 {
            return Err("reserved handshake bits are set".into());
        }
        let verdict =
            Verdict::from_u8(raw[8]).ok_or_else(|| format!("unknown verdict {}", raw[8]))?;
        let word = |at: usize| u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
        let mut message = Message::new(step);
        message.keyed = raw[7] & KEYED != 0;
        message.verdict = verdict;
        message.rank = word(12);
        message.size = word(16);
        message.incarnation = u32::from_le_bytes([raw[9], raw[10], raw[11], 0]);
        message.challenge.copy_from_slice(&raw[20..52]);
        message.proof.copy_from_slice(&raw[52..84]);
        Ok(message)
    }
}

/// This end of a forming group.
#[derive(Clone, Debug)]
pub(crate) struct Local {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) key: Option<Key>,
    /// This process's incarnation for this formation ([`incarnation`]).
    pub(crate) incarnation: u32,
}

/// A fresh incarnation: a random 24-bit number.
pub(crate) fn incarnation() -> Result<u32, String> {
    let bytes = challenge()?;
    Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], 0]))
}

impl Local {
    fn hello(&self, step: Step) -> Result<Message, String> {
        Ok(Message {
            keyed: self.key.is_some(),
            rank: self.rank as u32,
            size: self.size as u32,
            incarnation: self.incarnation & 0x00FF_FFFF,
            challenge: challenge()?,
            ..Message::new(step)
        })
    }
}

/// Reads one record, waiting at most until `deadline` in all (a peer that trickles bytes
/// cannot stretch it).
pub(crate) fn read_message(stream: &mut TcpStream, deadline: Instant) -> Result<Message, String> {
    let mut raw = [0u8; MESSAGE_BYTES];
    let mut filled = 0;
    while filled < MESSAGE_BYTES {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("no complete handshake message before the deadline".into());
        }
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .map_err(|e| e.to_string())?;
        match stream.read(&mut raw[filled..]) {
            Ok(0) => return Err("the connection closed during the handshake".into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err("no complete handshake message before the deadline".into())
            }
            Err(e) => return Err(format!("reading the handshake failed: {e}")),
        }
    }
    Message::decode(&raw)
}

pub(crate) fn write_message(stream: &mut TcpStream, message: &Message) -> Result<(), String> {
    stream
        .write_all(&message.encode())
        .map_err(|e| format!("sending the handshake failed: {e}"))
}

fn expect(message: Message, step: Step) -> Result<Message, String> {
    if message.step == step {
        Ok(message)
    } else {
        Err(format!(
            "expected a handshake {step:?}, got {:?}",
            message.step
        ))
    }
}

/// The connecting end's side, towards rank `peer`. Errors say what this rank should fix.
pub(crate) fn connect_side(
    stream: &mut TcpStream,
    local: &Local,
    peer: usize,
    deadline: Instant,
) -> Result<(), String> {
    let hello = local.hello(Step::Hello)?;
    write_message(stream, &hello)?;
    let answer = expect(read_message(stream, deadline)?, Step::Answer)?;
    if answer.rank as usize != peer {
        return Err(format!(
            "the process at rank {peer}'s address says it is rank {}",
            answer.rank
        ));
    }
    if answer.size as usize != local.size {
        return Err(format!(
            "rank {peer} believes the group has {} ranks, this rank (rank {}) has {}",
            answer.size, local.rank, local.size
        ));
    }
    let mismatch_of_keys = match (&local.key, answer.keyed) {
        (Some(_), false) => Some("has no pre-shared key and this rank has one"),
        (None, true) => Some("requires a pre-shared key and this rank has none"),
        _ => None,
    };
    if let Some(reason) = mismatch_of_keys {
        return Err(format!(
            "rank {peer} {reason}: set the same NUVEC_DISTRIBUTED_KEY (or Options::key) on every rank"
        ));
    }
    let mut genuine = true;
    if let Some(key) = &local.key {
        let transcript = Transcript {
            connecting_challenge: hello.challenge,
            accepting_challenge: answer.challenge,
            connecting: (hello.rank, hello.size),
            accepting: (answer.rank, answer.size),
        };
        genuine = key.verify(Role::Accepting, &transcript, &answer.proof);
        let reply = if genuine {
            Message {
                proof: key.prove(Role::Connecting, &transcript),
                ..Message::new(Step::Proof)
            }
        } else {
            // Tell the accepting rank at once that the keys differ, so that it need not wait
            // out its timeout (see `Accepted::Disowned`).
            Message::verdict(Verdict::BadProof)
        };
        write_message(stream, &reply)?;
    }
    if !genuine {
        return Err(format!(
            "rank {peer} did not prove the pre-shared key: the ranks hold different keys (or another process answered at rank {peer}'s address)"
        ));
    }
    let verdict = expect(read_message(stream, deadline)?, Step::Verdict)?;
    match verdict.verdict {
        Verdict::Accepted => Ok(()),
        Verdict::WrongSize => Err(format!(
            "rank {peer} refused this rank: the ranks disagree on the group's size"
        )),
        Verdict::DuplicateRank => Err(format!(
            "rank {peer} refused this rank: another process already joined as rank {} (check MLX_RANK on every process)",
            local.rank
        )),
        Verdict::BadProof | Verdict::KeyRequired | Verdict::NoKeyHere => Err(format!(
            "rank {peer} refused this rank's proof of the pre-shared key: the ranks hold different keys"
        )),
    }
}

/// What the accepting end learnt from a connection.
#[derive(Debug)]
pub(crate) enum Accepted {
    /// A rank of the group (proved its key when keys are in use): its hello.
    Connection(Message),
    /// A connection claiming a rank that failed authentication: why.
    Refused { claimed: u32, reason: String },
    /// The connection, claiming rank `claimed`, says this rank's proof did not verify there:
    /// unauthenticated, so the formation fails only if that rank does not prove the key soon.
    Disowned { claimed: u32 },
    /// Not a nuvec rank at all (garbage, silence, a closed connection).
    Stray,
    /// A key mismatch that this (key-less) rank can trust: the formation fails.
    Fatal(String),
}

/// The accepting end's side, up to (not including) the verdict.
pub(crate) fn accept_side(stream: &mut TcpStream, local: &Local, deadline: Instant) -> Accepted {
    let Ok(Ok(hello)) = read_message(stream, deadline).map(|m| expect(m, Step::Hello)) else {
        return Accepted::Stray;
    };
    let Ok(answer) = local.hello(Step::Answer) else {
        return Accepted::Stray;
    };
    let claimed = hello.rank;
    match (&local.key, hello.keyed) {
        (None, false) => {
            if write_message(stream, &answer).is_err() {
                return Accepted::Stray;
            }
            Accepted::Connection(hello)
        }
        (None, true) => {
            let _ = write_message(stream, &answer);
            Accepted::Fatal(format!(
                "rank {claimed} authenticates with a pre-shared key and this rank has none: set the same NUVEC_DISTRIBUTED_KEY (or Options::key) on every rank"
            ))
        }
        (Some(_), false) => {
            let _ = write_message(stream, &answer);
            Accepted::Refused {
                claimed,
                reason: "it had no pre-shared key".into(),
            }
        }
        (Some(key), true) => {
            let transcript = Transcript {
                connecting_challenge: hello.challenge,
                accepting_challenge: answer.challenge,
                connecting: (hello.rank, hello.size),
                accepting: (answer.rank, answer.size),
            };
            let answer = Message {
                proof: key.prove(Role::Accepting, &transcript),
                ..answer
            };
            if write_message(stream, &answer).is_err() {
                return Accepted::Stray;
            }
            let reply = read_message(stream, deadline);
            if let Ok(Message {
                step: Step::Verdict,
                verdict: Verdict::BadProof,
                ..
            }) = reply
            {
                return Accepted::Disowned { claimed };
            }
            let Ok(Ok(proof)) = reply.map(|m| expect(m, Step::Proof)) else {
                return Accepted::Refused {
                    claimed,
                    reason: "it did not send a proof of the key".into(),
                };
            };
            if key.verify(Role::Connecting, &transcript, &proof.proof) {
                Accepted::Connection(hello)
            } else {
                let _ = write_message(stream, &Message::verdict(Verdict::BadProof));
                Accepted::Refused {
                    claimed,
                    reason: "its proof of the key did not verify (a different key, or a replayed handshake)".into(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let message = Message {
            step: Step::Answer,
            keyed: true,
            verdict: Verdict::DuplicateRank,
            rank: 3,
            size: 4,
            incarnation: 0x00AB_CDEF,
            challenge: [7; PROOF_BYTES],
            proof: [9; PROOF_BYTES],
        };
        assert_eq!(Message::decode(&message.encode()), Ok(message));
    }

    /// Arbitrary bytes, and valid records with bytes flipped, decode to an error or a record
    /// that encodes back to the same bytes: never a panic.
    #[test]
    fn decoding_arbitrary_bytes_never_panics() {
        let mut random = crate::test_random::Random::new(0x9E37_79B9_7F4A_7C15);
        let mut next = move || random.next();
        let valid = Message::verdict(Verdict::Accepted).encode();
        let mut decoded = 0;
        for round in 0..200_000 {
            let mut raw = [0u8; MESSAGE_BYTES];
            if round % 2 == 0 {
                raw.iter_mut().for_each(|b| *b = next() as u8);
            } else {
                raw = valid;
                for _ in 0..1 + next() % 3 {
                    raw[(next() % MESSAGE_BYTES as u64) as usize] = next() as u8;
                }
            }
            if let Ok(message) = Message::decode(&raw) {
                assert_eq!(message.encode(), raw);
                decoded += 1;
            }
        }
        assert!(
            decoded > 0,
            "no mutated record decoded: the test is not exercising decode"
        );
    }
}
