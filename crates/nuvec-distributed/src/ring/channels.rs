//! The shared-memory channels of a ring group: which directions between its ranks have one,
//! and what goes through them. Right after the connections form, every rank offers every
//! other rank a channel and accepts those it can open (`shm/offers.rs`). Both ends then know
//! which directions have a channel. A message to a rank with one is posted in the channel's
//! message mailbox (`posted_messages.rs`), with its payload when it fits in a post; a larger
//! payload follows through the channel's slots from [`SHARED_FROM`] bytes on (the post alone
//! announcing it), and below that as a message on TCP. Every chunk of a ring collective
//! between neighbours that share a channel goes through it (`network.rs`); where the whole
//! group shares the machine, the small collectives go through the channels' collective
//! mailboxes (`algorithms/mailboxes.rs`). Abort notices travel on TCP, and a rank giving up
//! also says so in its channels.
//!
//! `NUVEC_RING_SHARED_MEMORY=off` keeps every payload and chunk on TCP (`auto`, the default,
//! offers channels). Each channel takes `shm::CHANNEL_BYTES` (1.75 MiB and a page: 1 MiB of
//! slots, the collectives' mailbox of 256 KiB, the messages' of 512 KiB) of shared memory,
//! allocated when the group forms, per direction between two ranks on one machine: a group
//! of n ranks on one machine holds n(n − 1) channels (21 MiB for 4 ranks, 98 MiB for 8).
//! Where that memory cannot be had (a small `/dev/shm`), the directions left over stay on TCP.
//!
//! Channels beat TCP on ping-pongs from 32 KB up, on 2 ranks and on 4; at 16 KB and below TCP
//! was as fast or faster. Channels of 8 slots did as well as of 16 (measured:
//! `docs/performance.md`, "Tuning measurements").

use super::connections::Connections;
use crate::shm::offers::{accept, empty_offer, offer_to, NO, OFFER_BYTES, OFFER_MAGIC, YES};
use crate::shm::{Channel, Policy};
use nuvec_core::{Error, Result};

/// Payloads at least this large go through a channel where there is one. Smaller ones gain
/// little: loopback's round trip is already short at those sizes (`docs/performance.md`,
/// "Tuning measurements").
pub(crate) const SHARED_FROM: usize = 32 << 10;

/// How long a wait on a channel spins before yielding where ranks outnumber cores: not at
/// all, since the rank waited on most likely needs this core (20 µs for a mailbox and 30 for
/// slots otherwise, `shm/channel.rs`). Spinning 2 µs first made the 4-rank `all_gather` of 4
/// KB take 12.8–17.9 µs on the 2-core VM, not spinning 8.0–8.5 (`docs/performance.md`,
/// "Tuning measurements").
const CROWDED_SPIN: std::time::Duration = std::time::Duration::ZERO;

/// The channels of one rank, by peer: those it writes to, and those it reads from.
#[derive(Debug, Default)]
pub(crate) struct Nearby {
    to: Vec<Option<Channel>>,
    from: Vec<Option<Channel>>,
    /// Whether every other rank shares a channel each way with this one (the group is on one
    /// machine): the small collectives' mailbox path (`algorithms/mailboxes.rs`) is open.
    everyone: bool,
    /// Whether, on some rank of the group, the ranks on its machine outnumber its cores:
    /// the same on every rank.
    pub(crate) crowded: bool,
    /// Whether this rank reads other ranks' memory for large all-gathers
    /// (`algorithms/single_copy.rs`; `NUVEC_RING_CROSS_MEMORY`).
    pub(crate) reads_memory: bool,
}

impl Nearby {
    /// Offers every other rank a channel over `connections` and opens those offered that this
    /// rank can (see the module's documentation); with `wanted` false, offers none and
    /// declines every offer. Called once, right after the connections form.
    pub(crate) fn open(
        connections: &Connections,
        rank: usize,
        timeout: std::time::Duration,
        (wanted, stores): (bool, Policy),
    ) -> Result<Nearby> {
        let size = connections.size;
        let others: Vec<usize> = (0..size)
            .filter(|&r| r != rank && connections.linked(r))
            .collect();
        let mut to: Vec<Option<Channel>> = (0..size).map(|_| None).collect();
        let mut from: Vec<Option<Channel>> = (0..size).map(|_| None).collect();
        for &dst in &others {
            let (channel, offer) = if wanted {
                offer_to(rank, dst)
            } else {
                (None, empty_offer())
            };
            to[dst] = channel.map(|mut channel| {
                channel.use_stores(stores);
                channel
            });
            connections.writer("init", dst)?.write_through(
                "init",
                &[&offer],
                OFFER_BYTES,
                timeout,
            )?;
        }
        for &src in &others {
            let mut offer = [0u8; OFFER_BYTES];
            connections
                .reader("init", src)?
                .read_message("init", &mut offer, timeout)?;
            if &offer[..8] != OFFER_MAGIC {
                return Err(Error::Distributed {
                    op: "init".into(),
                    rank: Some(src),
                    reason: format!("rank {src} sent no shared-memory offer where one was due (is it running the same nuvec?)"),
                });
            }
            from[src] = if wanted { accept(src, &offer) } else { None };
        }
        for &src in &others {
            let answer = if from[src].is_some() { YES } else { NO };
            connections.writer("init", src)?.write_through(
                "init",
                &[answer],
                answer.len(),
                timeout,
            )?;
        }
        for &dst in &others {
            let mut answer = [0u8; 8];
            connections
                .reader("init", dst)?
                .read_message("init", &mut answer, timeout)?;
            if &answer != YES && &answer != NO {
                return Err(Error::Distributed {
                    op: "init".into(),
                    rank: Some(dst),
                    reason: format!("rank {dst} answered this rank's shared-memory offer with neither yes nor no"),
                });
            }
            match (&answer == YES, to[dst].as_mut()) {
                (true, Some(channel)) => channel.unlink(),
                _ => to[dst] = None,
            }
        }
        let mine = others.len() + 1 == size
            && others
                .iter()
                .all(|&peer| to[peer].is_some() && from[peer].is_some());
        // Where the ranks on this machine outnumber its cores, the rank a wait is for may
        // need this core: waits spin only briefly before yielding it.
        let local = 1 + others.iter().filter(|&&peer| from[peer].is_some()).count();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let crowded_here = local > cores;
        if crowded_here {
            for channel in to.iter_mut().chain(from.iter_mut()).flatten() {
                channel.spin_for(CROWDED_SPIN);
            }
        }
        // The mailbox path is open only if every rank has all its channels: a rank that
        // could not open one (a full /dev/shm, say) must not leave the others on a path it
        // does not take. Every rank tells every other what it has, and whether it counts
        // the machine crowded (ranks bound to fewer cores than others count differently),
        // so that the paths chosen by it agree too.
        let said = [u8::from(mine), u8::from(crowded_here)];
        for &peer in &others {
            connections.writer("init", peer)?.write_through(
                "init",
                &[&said],
                said.len(),
                timeout,
            )?;
        }
        let (mut everyone, mut crowded) = (mine, crowded_here);
        for &peer in &others {
            let mut theirs = [0u8; 2];
            connections
                .reader("init", peer)?
                .read_message("init", &mut theirs, timeout)?;
            everyone &= theirs[0] == 1;
            crowded |= theirs[1] == 1;
        }
        Ok(Nearby {
            to,
            from,
            everyone,
            crowded,
            reads_memory: false,
        })
    }

    /// Tells every rank this one sends to through shared memory that it gave the group up.
    pub(crate) fn give_up(&self) {
        for channel in self.to.iter().flatten() {
            channel.give_up();
        }
    }

    /// Whether every other rank shares a channel each way with this one.
    pub(crate) fn everyone(&self) -> bool {
        self.everyone
    }

    /// The channel a payload of `bytes` to rank `dst` goes through, if any.
    pub(crate) fn shared_to(&self, dst: usize, bytes: usize) -> Option<&Channel> {
        (bytes >= SHARED_FROM)
            .then(|| self.channel_to(dst))
            .flatten()
    }

    /// The channel a payload of `bytes` from rank `src` comes through, if any.
    pub(crate) fn shared_from(&self, src: usize, bytes: u64) -> Option<&Channel> {
        (bytes >= SHARED_FROM as u64)
            .then(|| self.channel_from(src))
            .flatten()
    }

    /// The channel to rank `dst`, if any, whatever the size: a collective's link takes it
    /// for all of its chunks.
    pub(crate) fn channel_to(&self, dst: usize) -> Option<&Channel> {
        self.to.get(dst)?.as_ref()
    }

    /// The channel from rank `src`, if any (see [`Nearby::channel_to`]).
    pub(crate) fn channel_from(&self, src: usize) -> Option<&Channel> {
        self.from.get(src)?.as_ref()
    }

    /// Whether `peer` has directions with a channel, to it and from it: for tests.
    #[cfg(test)]
    pub(crate) fn shares_memory_with(&self, peer: usize) -> (bool, bool) {
        let has = |side: &Vec<Option<Channel>>| side.get(peer).is_some_and(Option::is_some);
        (has(&self.to), has(&self.from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::transport::Transport;
    use crate::ring::RingCommunicator;

    use crate::hostfile::Address;
    use crate::Options;
    use nuvec_core::distributed::Communicator;
    use nuvec_core::DType;
    use std::time::Duration;

    /// Two ranks of one group, formed by two threads of this process over loopback.
    fn two_ranks() -> (RingCommunicator, RingCommunicator) {
        let ports = [
            crate::tcp::connection_tests::free_port(),
            crate::tcp::connection_tests::free_port(),
        ];
        let nodes: Vec<Vec<Address>> = ports
            .iter()
            .map(|p| vec![Address::parse(&format!("127.0.0.1:{p}")).unwrap()])
            .collect();
        let options = Options::with_timeout(Duration::from_secs(10));
        let (nodes_1, options_1) = (nodes.clone(), options.clone());
        let rank_1 = std::thread::spawn(move || RingCommunicator::connect(&nodes_1, 1, &options_1));
        let rank_0 = RingCommunicator::connect(&nodes, 0, &options).expect("rank 0 forms");
        (rank_0, rank_1.join().unwrap().expect("rank 1 forms"))
    }

    #[test]
    fn ranks_on_one_machine_share_memory_both_ways_and_large_messages_take_it() {
        let (rank_0, rank_1) = two_ranks();
        assert_eq!(rank_0.network.nearby.shares_memory_with(1), (true, true));
        assert_eq!(rank_1.network.nearby.shares_memory_with(0), (true, true));
        // Sizes on both sides of the threshold, and one spanning many slots with a ragged end.
        for bytes in [SHARED_FROM - 4, SHARED_FROM, 3 * (1 << 20) + 4] {
            let sent: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
            let shape = [(bytes / 4) as i32];
            std::thread::scope(|scope| {
                scope.spawn(|| rank_0.send(&sent, DType::F32, &shape, 1).unwrap());
                let mut got = vec![0u8; bytes];
                rank_1.recv(&mut got, DType::F32, &shape, 0).unwrap();
                assert!(got == sent, "{bytes} bytes came back changed");
            });
        }
        // A refused large message is skipped whole: the next one arrives intact.
        let shape = [(SHARED_FROM / 2) as i32];
        let wrong = [(SHARED_FROM / 2 - 1) as i32];
        let first = vec![1u8; SHARED_FROM * 2];
        let second: Vec<u8> = (0..SHARED_FROM * 2).map(|i| (i % 7) as u8).collect();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                rank_0.send(&first, DType::F32, &shape, 1).unwrap();
                rank_0.send(&second, DType::F32, &shape, 1).unwrap();
            });
            let mut got = vec![0u8; SHARED_FROM * 2 - 4];
            let error = rank_1
                .recv(&mut got, DType::F32, &wrong, 0)
                .unwrap_err()
                .to_string();
            assert!(error.contains("expected"), "{error}");
            let mut got = vec![0u8; SHARED_FROM * 2];
            rank_1.recv(&mut got, DType::F32, &shape, 0).unwrap();
            assert!(got == second);
        });
    }

    #[test]
    fn messages_of_another_size_are_refused_whether_posted_whole_or_not() {
        let (rank_0, rank_1) = two_ranks();
        let small: Vec<u8> = (0..64).map(|i| i as u8).collect();
        let large = vec![5u8; 4 << 20];
        // A small message (posted whole) where a large one is expected, then the reverse (a
        // large one's payload follows on the connection and the channel): each is refused
        // naming both sides, and the message after it arrives intact.
        for (sent, expected) in [(&small, large.len()), (&large, small.len())] {
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    let shape = [(sent.len() / 4) as i32];
                    rank_0.send(sent, DType::F32, &shape, 1).unwrap();
                    rank_0.send(&small, DType::F32, &[16], 1).unwrap();
                });
                let mut got = vec![0u8; expected];
                let error = rank_1
                    .recv(&mut got, DType::F32, &[(expected / 4) as i32], 0)
                    .unwrap_err()
                    .to_string();
                assert!(
                    error.contains("rank 0 sent") && error.contains("expected"),
                    "{error}"
                );
                let mut next = vec![0u8; small.len()];
                rank_1.recv(&mut next, DType::F32, &[16], 0).unwrap();
                assert_eq!(next, small);
            });
        }
    }

    #[test]
    fn both_ranks_can_send_many_small_messages_before_receiving_any() {
        let (rank_0, rank_1) = two_ranks();
        let count = 24;
        let exchange = |me: &RingCommunicator, peer: usize| {
            for i in 0..count {
                me.send(&[i as u8; 64], DType::U8, &[64], peer).unwrap();
            }
            for i in 0..count {
                let mut got = [0u8; 64];
                me.recv(&mut got, DType::U8, &[64], peer).unwrap();
                assert_eq!(got, [i as u8; 64], "message {i}");
            }
        };
        std::thread::scope(|scope| {
            scope.spawn(|| exchange(&rank_1, 0));
            exchange(&rank_0, 1);
        });
    }

    #[test]
    fn a_receiver_that_leaves_mid_message_is_named_by_the_sender() {
        let (rank_0, rank_1) = two_ranks();
        drop(rank_1);
        let data = vec![0u8; 8 << 20];
        let start = std::time::Instant::now();
        let error = rank_0
            .send(&data, DType::F32, &[2 << 20], 1)
            .unwrap_err()
            .to_string();
        assert!(error.contains("rank 1"), "{error}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "took {:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_wait_that_meets_an_abort_notice_reports_the_rank_it_names_and_why() {
        let (rank_0, rank_1) = two_ranks();
        // Rank 1 gives up because of rank 7 (say, of a larger group) and tells rank 0.
        rank_1.network.abort_all(&Error::Distributed {
            op: "all_sum".into(),
            rank: Some(7),
            reason: "rank 7 closed its connection".into(),
        });
        let start = std::time::Instant::now();
        let error = loop {
            match rank_0.network.connections.still_there("all_sum", 1) {
                Err(error) => break error,
                Ok(()) if start.elapsed() < Duration::from_secs(5) => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Ok(()) => panic!("the notice never arrived"),
            }
        };
        match &error {
            Error::Distributed { rank, reason, .. } => {
                assert_eq!(*rank, Some(7), "{error}");
                assert!(reason.contains("rank 7 closed its connection"), "{error}");
            }
            other => panic!("{other}"),
        }
    }
}
