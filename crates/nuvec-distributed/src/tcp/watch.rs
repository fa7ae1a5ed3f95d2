//! While a collective waits on one connection, the group's other incoming connections are
//! watched, so that a frame there which shows its rank called something else, or an abort
//! notice, fails the call at once instead of at the timeout.
//!
//! Ranks that call a collective with different sizes may take different paths (through rank
//! 0, recursive doubling, the ring) and then wait on connections their peers never write to:
//! rank 0 reads its parts in rank order while rank 1, on the ring, waits for rank 0's header.
//! Each rank's first frame went somewhere, though, and the rank it went to sees it here: a
//! frame of this call (same sequence number) whose header is not one this call sends.
//!
//! Every wait of a collective asks the watch now and then ([`Watch::sweep`]): a read on a
//! connection each `connection::WATCH_AFTER` it blocks, a wait on a shared-memory channel each
//! few milliseconds. A call whose data is on its way costs nothing more, and a mismatch or an
//! abort notice is reported within about that long.

use super::connection::{Connection, Watcher};
use super::frame::{Header, Kind, HEADER_BYTES};
use crate::sync::lock;
use nuvec_core::Error;
use std::sync::{Mutex, OnceLock, Weak};

/// The collective in progress on one group, and the connections it reads.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// This rank.
    rank: usize,
    /// The call in progress, if any (its byte counts' storage kept between calls).
    call: Mutex<Call>,
    /// The last call that ended, for [`Watch::is_of_last_call`].
    last: Mutex<Call>,
    /// Every connection this rank reads, set once the group is connected.
    readers: OnceLock<Vec<Weak<Connection>>>,
}

/// A collective in progress: its header and the byte counts its frames may carry (a large
/// all-reduce's lanes each announce their own slice).
#[derive(Debug, Clone, Default)]
struct Call {
    ours: Option<Header>,
    bytes: Vec<u64>,
}

/// Whether a frame whose header is `theirs` may belong to the call `ours` or to something
/// else whose reads will check it: a chunk; a point-to-point message, waiting for a `recv`
/// (messages count their own sequence numbers); a frame of another call; or a header this
/// call sends.
fn belongs(ours: &Header, bytes: &[u64], theirs: &Header) -> bool {
    matches!(theirs.kind, Kind::Chunk | Kind::Send)
        || theirs.sequence != ours.sequence
        || (theirs.kind == ours.kind && theirs.dtype == ours.dtype && bytes.contains(&theirs.bytes))
}

impl Watch {
    /// A watch for rank `rank`, with no connections yet.
    pub(crate) fn new(rank: usize) -> Watch {
        Watch {
            rank,
            ..Watch::default()
        }
    }

    /// Sets the connections this rank reads (once; later calls are ignored).
    pub(crate) fn set_readers(&self, readers: Vec<Weak<Connection>>) {
        let _ = self.readers.set(readers);
    }

    /// Starts watching for the call `ours`.
    pub(crate) fn begin(&self, ours: Header) {
        let mut call = lock(&self.call);
        call.ours = Some(ours);
        call.bytes.clear();
        call.bytes.push(ours.bytes);
    }

    /// Lets the call in progress carry frames announcing `bytes` too (a lane's slice, or the
    /// reply of rank 0 on the path through it).
    pub(crate) fn accept(&self, bytes: u64) {
        let mut call = lock(&self.call);
        if call.ours.is_some() {
            call.bytes.push(bytes);
        }
    }

    /// Ends the call in progress.
    pub(crate) fn end(&self) {
        let mut call = lock(&self.call);
        if call.ours.is_some() {
            // A swap, not a copy: the two calls' byte counts trade storage, so that a
            // small collective allocates nothing here.
            std::mem::swap(&mut *lock(&self.last), &mut *call);
        }
        call.ours = None;
    }

    /// Whether a frame whose header is `theirs` is one of the last call's own (not a chunk):
    /// after a failure, a peer whose frame shows it is in the same call as this rank.
    pub(crate) fn is_of_last_call(&self, theirs: &Header) -> bool {
        let last = lock(&self.last);
        last.ours.as_ref().is_some_and(|ours| {
            theirs.kind == ours.kind
                && theirs.sequence == ours.sequence
                && theirs.dtype == ours.dtype
                && last.bytes.contains(&theirs.bytes)
        })
    }

    /// Judges, once and without waiting, the frame headers waiting on every incoming
    /// connection that no other thread is reading. Fails on a frame of another call, or with
    /// the abort notice waiting, read whole so the error names the rank that was lost and why
    /// (a lane that fails passes its error on to every peer at once).
    pub(crate) fn sweep(&self, op: &str) -> Result<(), Error> {
        let call = lock(&self.call).clone();
        let (Some(ours), Some(readers)) = (call.ours, self.readers.get()) else {
            return Ok(());
        };
        for peer in readers.iter().filter_map(Weak::upgrade) {
            let Some(raw) = peer.try_waiting_header() else {
                continue;
            };
            if let Some(notice) =
                super::wire::take_abort(&peer, op, &raw, super::wire::ABORT_READ_WAIT)
            {
                return Err(notice);
            }
            if let Some(error) = judge(self.rank, (&ours, &call.bytes), peer.rank, &raw) {
                return Err(error);
            }
        }
        Ok(())
    }
}

impl Watcher for Watch {
    fn check(&self, op: &str) -> Result<(), Error> {
        self.sweep(op)
    }
}

/// The error for a frame `raw` from rank `peer` that does not belong to the call `ours`
/// (whose frames announce one of `bytes`): the abort notice it is, or the call it shows.
fn judge(
    rank: usize,
    (ours, bytes): (&Header, &[u64]),
    peer: usize,
    raw: &[u8; HEADER_BYTES],
) -> Option<Error> {
    match Header::decode(raw) {
        Ok(theirs) if theirs.kind == Kind::Abort => Some(Error::Distributed {
            op: ours.kind.name().into(),
            rank: Some(peer),
            reason: format!("rank {peer} reported that the group failed"),
        }),
        Ok(theirs) if belongs(ours, bytes, &theirs) => None,
        Ok(theirs) => Some(ours.mismatch(rank, peer, &theirs)),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nuvec_core::DType;

    const OURS: Header = Header {
        kind: Kind::AllSum,
        dtype: DType::F32,
        sequence: 5,
        bytes: 4096,
    };

    fn judged(theirs: Header, bytes: &[u64]) -> Option<String> {
        judge(0, (&OURS, bytes), 3, &theirs.encode()).map(|e| e.to_string())
    }

    #[test]
    fn frames_this_call_sends_or_that_belong_elsewhere_pass() {
        assert_eq!(judged(OURS, &[4096]), None);
        // A lane's own slice, once the call accepts it.
        let lane = Header {
            bytes: 2048,
            ..OURS
        };
        assert_eq!(judged(lane, &[4096, 2048]), None);
        // A chunk, a message waiting for its recv, the next call: their reads check them.
        for other in [
            Header {
                kind: Kind::Chunk,
                bytes: 512,
                ..OURS
            },
            Header {
                kind: Kind::Send,
                bytes: 16,
                ..OURS
            },
            Header {
                kind: Kind::AllMax,
                sequence: 6,
                ..OURS
            },
        ] {
            assert_eq!(judged(other, &[4096]), None, "{other:?}");
        }
    }

    #[test]
    fn a_frame_of_this_call_with_another_size_kind_or_dtype_names_both_calls() {
        for theirs in [
            Header { bytes: 64, ..OURS },
            Header {
                kind: Kind::AllMax,
                ..OURS
            },
            Header {
                dtype: DType::BF16,
                ..OURS
            },
        ] {
            let error = judged(theirs, &[4096]).expect("a mismatch");
            assert!(
                error.contains("rank 3 called")
                    && error.contains(&theirs.describe())
                    && error.contains("this rank (rank 0) called all_sum of 4096 bytes"),
                "{error}"
            );
        }
    }

    #[test]
    fn an_abort_notice_fails_the_call_naming_its_sender() {
        let notice = Header {
            kind: Kind::Abort,
            dtype: DType::U8,
            sequence: 1,
            bytes: 10,
        };
        let error = judged(notice, &[4096]).expect("a failure");
        assert!(
            error.contains("rank 3 reported that the group failed"),
            "{error}"
        );
    }
}
