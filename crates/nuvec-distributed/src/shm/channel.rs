//! A one-way channel through shared memory between two ranks on one machine: a file both map,
//! holding a ring of [`SLOTS`] slots of [`SLOT_BYTES`]. The sender copies a message's payload
//! into free slots and publishes each by advancing `head`; the receiver copies each out and
//! frees it by advancing `tail`. A payload is cut into slots from its start, so both ends
//! agree where every slot's bytes go without any framing. Headers, sequence numbers and abort
//! notices still travel on the TCP connection (`ring/channels.rs`); only payloads come this way.
//!
//! Loopback TCP makes the kernel copy every byte twice and run the protocol on both ends;
//! here the two copies are plain `memcpy`s on the two ranks' own cores, overlapping slot by
//! slot. A C prototype beat loopback TCP, and its slots of 128 KiB beat 256 KiB (measured:
//! `docs/performance.md`, "Tuning measurements").
//!
//! Waiting ends spinning briefly, then yielding, then napping, so a rank left waiting uses
//! little CPU; every wait is bounded by the group's timeout and checks the peer is alive.

use super::layout::{
    CHANNEL_BYTES, HEAD_AT, SLOTS, SLOTS_AT, SLOT_BYTES, TAIL_AT, TOKEN_AT, TOKEN_BYTES,
};
use super::slot_copies::{Policy, Stores};
use nuvec_core::{Error, Result};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a wait spins before it starts yielding, and yields before it starts napping.
const SPIN_FOR: Duration = Duration::from_micros(30);
/// How long a mailbox wait (`mailbox.rs`) spins before it yields, where ranks do not
/// outnumber cores.
const MAILBOX_SPIN_FOR: Duration = Duration::from_micros(20);
const YIELD_FOR: Duration = Duration::from_micros(300);
/// The first and the longest nap of a long wait.
const FIRST_NAP: Duration = Duration::from_micros(20);
const LONGEST_NAP: Duration = Duration::from_millis(1);
/// How often a long wait asks whether the peer is still there.
pub(super) const CHECK_EVERY: Duration = Duration::from_millis(10);

/// One end of a channel: its mapping, and the file's path while this end may still have to
/// remove it.
#[derive(Debug)]
pub(crate) struct Channel {
    pub(super) base: *mut u8,
    /// The peer at the other end, for errors.
    pub(super) peer: usize,
    /// The file, removed when this end goes if it is still there (the creator's end).
    path: Option<PathBuf>,
    /// How the sending end copies into slots.
    stores: Stores,
    /// How long a mailbox wait spins before it yields (`mailbox.rs`).
    pub(super) spin: Duration,
    /// How long a wait for slots spins before it yields.
    slot_spin: Duration,
}

// SAFETY: the mapping is plain memory owned by this value; the counters are atomics, and the
// slots are only touched by the one operation the ring's state lock lets run.
#[allow(unsafe_code)]
unsafe impl Send for Channel {}
// SAFETY: as above: `&Channel` methods run one at a time under the ring's state lock (a
// collective spread over lanes gives each lane's thread channels of its own).
#[allow(unsafe_code)]
unsafe impl Sync for Channel {}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: `base` came from `map_shared(.., CHANNEL_BYTES)` and this is its last use.
        #[allow(unsafe_code)]
        unsafe {
            crate::platform::unmap(self.base, CHANNEL_BYTES)
        };
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Channel {
    /// Creates the file at `path` (new, readable by this user alone), maps it and writes
    /// `token` into it: the sending end of a channel to rank `peer`.
    pub(crate) fn create(
        path: PathBuf,
        token: &[u8; TOKEN_BYTES],
        peer: usize,
    ) -> std::io::Result<Channel> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(crate::platform::CHANNEL_OPEN_FLAGS)
            .open(&path)?;
        let channel = crate::platform::size_and_reserve(&file, CHANNEL_BYTES)
            .and_then(|()| Channel::map(&file, peer, Some(path.clone())));
        let channel = channel.inspect_err(|_| {
            let _ = std::fs::remove_file(&path);
        })?;
        // SAFETY: the token's bytes lie inside the mapping, before the counters.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(token.as_ptr(), channel.base.add(TOKEN_AT), TOKEN_BYTES)
        };
        Ok(channel)
    }

    /// Opens the file at `path` that rank `peer` created for this rank, and removes it once
    /// mapped; the receiving end. Refused unless it is a private regular file of this user,
    /// of a channel's size, holding `token`.
    pub(crate) fn open(
        path: &std::path::Path,
        token: &[u8; TOKEN_BYTES],
        peer: usize,
    ) -> std::result::Result<Channel, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(crate::platform::CHANNEL_OPEN_FLAGS)
            .open(path)
            .map_err(|e| format!("cannot open it: {e}"))?;
        let metadata = file
            .metadata()
            .map_err(|e| format!("cannot inspect it: {e}"))?;
        if !crate::platform::private_file_of_ours(&metadata) {
            return Err("it is not a regular file of this user closed to others".into());
        }
        if metadata.len() != CHANNEL_BYTES as u64 {
            return Err(format!(
                "it holds {} bytes, not {CHANNEL_BYTES}",
                metadata.len()
            ));
        }
        let channel = Channel::map(&file, peer, None).map_err(|e| format!("cannot map it: {e}"))?;
        let mut found = [0u8; TOKEN_BYTES];
        // SAFETY: the token's bytes lie inside the mapping.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(
                channel.base.add(TOKEN_AT),
                found.as_mut_ptr(),
                TOKEN_BYTES,
            )
        };
        if &found != token {
            return Err("it does not hold the token its creator announced".into());
        }
        let _ = std::fs::remove_file(path);
        Ok(channel)
    }

    fn map(file: &File, peer: usize, path: Option<PathBuf>) -> std::io::Result<Channel> {
        let base = crate::platform::map_shared(file, CHANNEL_BYTES)?;
        Ok(Channel {
            base,
            peer,
            path,
            stores: Stores::new(Policy::Auto),
            spin: MAILBOX_SPIN_FOR,
            slot_spin: SPIN_FOR,
        })
    }

    /// Copies into slots with stores of `policy` (the sending end's choice).
    pub(crate) fn use_stores(&mut self, policy: Policy) {
        self.stores = Stores::new(policy);
    }

    /// Makes waits spin for at most `spin` before yielding their core: short (or not at all)
    /// where ranks outnumber cores, so the rank waited on gets the core sooner.
    pub(crate) fn spin_for(&mut self, spin: Duration) {
        self.spin = spin.min(MAILBOX_SPIN_FOR);
        self.slot_spin = spin.min(SPIN_FOR);
    }

    /// Removes the file now if this end created it (the other end has it open, or never will).
    pub(crate) fn unlink(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }

    fn counter(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is 8-aligned inside the page-aligned mapping, which lives as long as
        // `self`; both processes touch the word only atomically.
        #[allow(unsafe_code)]
        unsafe {
            &*(self.base.add(at) as *const AtomicU64)
        }
    }

    fn slot(&self, index: u64) -> *mut u8 {
        let at = SLOTS_AT + (index % SLOTS as u64) as usize * SLOT_BYTES;
        // SAFETY: `at` + SLOT_BYTES ≤ CHANNEL_BYTES, inside the mapping.
        #[allow(unsafe_code)]
        unsafe {
            self.base.add(at)
        }
    }

    /// Copies `data` into the channel slot by slot, waiting for room as the receiver reads;
    /// `alive` is asked now and then whether the receiver can still read.
    pub(crate) fn write(
        &self,
        op: &str,
        data: &[u8],
        timeout: Duration,
        alive: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        let (head, tail) = (self.counter(HEAD_AT), self.counter(TAIL_AT));
        for piece in data.chunks(SLOT_BYTES) {
            let at = head.load(Ordering::Relaxed);
            // A read counter past the write counter ends the wait too, and is refused below.
            let room = || {
                let read = tail.load(Ordering::Acquire);
                read > at || at - read < SLOTS as u64
            };
            self.wait(
                op,
                "to read what this rank sent (a sender waits once a channel's 1 MiB is \
                 unread: is that rank busy elsewhere, or not receiving?)",
                room,
                timeout,
                alive,
            )?;
            if tail.load(Ordering::Acquire) > at {
                return Err(self.corrupt(op, "its read counter passed what was written"));
            }
            // SAFETY: the slot lies inside the mapping and holds at least `piece.len()`
            // bytes; the receiver has freed it (the acquire load above) and does not read it
            // again until the head moves past it, below.
            #[allow(unsafe_code)]
            let slot = unsafe { std::slice::from_raw_parts_mut(self.slot(at), piece.len()) };
            self.stores.copy(piece, slot);
            head.store(at + 1, Ordering::Release);
        }
        Ok(())
    }

    /// Copies the next `out.len()` bytes of payload out of the channel, waiting for each slot.
    pub(crate) fn read(
        &self,
        op: &str,
        out: &mut [u8],
        timeout: Duration,
        alive: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        let bytes = out.len();
        let mut copy = |offset: usize, piece: &[u8]| {
            out[offset..offset + piece.len()].copy_from_slice(piece);
        };
        self.read_with(op, bytes, (timeout, alive), &mut copy)
    }

    /// Hands the next `bytes` of payload to `take` a slot at a time, in place, with each
    /// piece's offset in the payload: a reduction reads its operand straight from the slot
    /// instead of from a copy. The slot is freed when `take` returns.
    pub(crate) fn read_with(
        &self,
        op: &str,
        bytes: usize,
        (timeout, alive): (Duration, &mut dyn FnMut() -> Result<()>),
        take: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        let mut offset = 0;
        while offset < bytes {
            let length = (bytes - offset).min(SLOT_BYTES);
            let slot = self.next_slot(op, timeout, alive)?;
            // SAFETY: the slot lies inside the mapping and holds at least `length` bytes; the
            // sender published it (the acquire load in `next_slot`) and does not write it
            // again until the tail moves past it, below.
            #[allow(unsafe_code)]
            let piece = unsafe { std::slice::from_raw_parts(self.slot(slot), length) };
            take(offset, piece);
            self.counter(TAIL_AT).store(slot + 1, Ordering::Release);
            offset += length;
        }
        Ok(())
    }

    /// Drops the next `bytes` of payload (a message this rank refused), slot by slot.
    pub(crate) fn skip(
        &self,
        op: &str,
        bytes: u64,
        timeout: Duration,
        alive: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        for _ in 0..bytes.div_ceil(SLOT_BYTES as u64) {
            let slot = self.next_slot(op, timeout, alive)?;
            self.counter(TAIL_AT).store(slot + 1, Ordering::Release);
        }
        Ok(())
    }

    /// Waits until the sender has published the slot after the last one read; its index.
    fn next_slot(
        &self,
        op: &str,
        timeout: Duration,
        alive: &mut dyn FnMut() -> Result<()>,
    ) -> Result<u64> {
        let (head, tail) = (self.counter(HEAD_AT), self.counter(TAIL_AT));
        let at = tail.load(Ordering::Relaxed);
        let published = || head.load(Ordering::Acquire) != at;
        self.wait(
            op,
            "to send the rest of what this rank is receiving",
            published,
            timeout,
            alive,
        )?;
        if head.load(Ordering::Acquire).wrapping_sub(at) > SLOTS as u64 {
            return Err(self.corrupt(op, "its write counter ran past the slots"));
        }
        Ok(at)
    }

    /// Waits until `ready`: spinning, then yielding, then napping; at most `timeout`, asking
    /// `alive` every [`CHECK_EVERY`] once napping.
    fn wait(
        &self,
        op: &str,
        what: &str,
        ready: impl Fn() -> bool,
        timeout: Duration,
        alive: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        if ready() {
            return Ok(());
        }
        let start = Instant::now();
        while start.elapsed() < self.slot_spin {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
            if ready() {
                return Ok(());
            }
        }
        while start.elapsed() < YIELD_FOR {
            std::thread::yield_now();
            if ready() {
                return Ok(());
            }
        }
        let (mut nap, mut checked) = (FIRST_NAP, start);
        loop {
            std::thread::sleep(nap);
            nap = (nap * 2).min(LONGEST_NAP);
            if ready() {
                return Ok(());
            }
            if start.elapsed() >= timeout {
                return Err(self.timed_out(op, timeout, what));
            }
            if checked.elapsed() >= CHECK_EVERY {
                // A peer that wrote what this wait needs and then left (its process ended
                // after its last collective) has not failed it: look once more first.
                if let Err(error) = alive() {
                    return if ready() { Ok(()) } else { Err(error) };
                }
                checked = Instant::now();
            }
        }
    }

    /// A wait for rank `peer` `what` (to do something) that outlasted `timeout`.
    pub(super) fn timed_out(&self, op: &str, timeout: Duration, what: &str) -> Error {
        Error::Distributed {
            op: op.into(),
            rank: Some(self.peer),
            reason: format!(
                "timed out after {:.1} s (NUVEC_DISTRIBUTED_TIMEOUT) waiting through shared \
                 memory for rank {} {what}",
                timeout.as_secs_f64(),
                self.peer
            ),
        }
    }

    pub(super) fn corrupt(&self, op: &str, what: &str) -> Error {
        Error::Distributed {
            op: op.into(),
            rank: Some(self.peer),
            reason: format!(
                "the shared-memory channel with rank {} is corrupt: {what}",
                self.peer
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(token: [u8; TOKEN_BYTES]) -> (Channel, Channel) {
        let name = format!(
            "nuvec-ring-test-{}-{}",
            std::process::id(),
            u64::from_le_bytes(token[..8].try_into().unwrap())
        );
        let path = crate::platform::shared_memory_dir().join(name);
        let sender = Channel::create(path.clone(), &token, 1).unwrap();
        let receiver = Channel::open(&path, &token, 0).unwrap();
        (sender, receiver)
    }

    fn fine() -> Result<()> {
        Ok(())
    }

    #[test]
    fn payloads_of_many_slots_arrive_whole_and_in_order_across_the_ring() {
        let (sender, receiver) = pair([7; TOKEN_BYTES]);
        // Three messages: one that wraps the ring twice, one shorter than a slot, one of odd length.
        let sizes = [SLOTS * SLOT_BYTES * 2 + 12_345, 1000, SLOT_BYTES * 3 + 1];
        let messages: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(m, &n)| (0..n).map(|i| (i * 31 + m * 7) as u8).collect())
            .collect();
        let timeout = Duration::from_secs(10);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for message in &messages {
                    sender.write("send", message, timeout, &mut fine).unwrap();
                }
            });
            for message in &messages {
                let mut out = vec![0u8; message.len()];
                receiver.read("recv", &mut out, timeout, &mut fine).unwrap();
                assert!(
                    out == *message,
                    "a message of {} bytes came back changed",
                    message.len()
                );
            }
        });
    }

    #[test]
    fn a_skipped_payload_leaves_the_next_one_intact() {
        let (sender, receiver) = pair([8; TOKEN_BYTES]);
        let timeout = Duration::from_secs(10);
        let first = vec![1u8; SLOT_BYTES + 5];
        let second: Vec<u8> = (0..70_000).map(|i| i as u8).collect();
        sender.write("send", &first, timeout, &mut fine).unwrap();
        sender.write("send", &second, timeout, &mut fine).unwrap();
        receiver
            .skip("recv", first.len() as u64, timeout, &mut fine)
            .unwrap();
        let mut out = vec![0u8; second.len()];
        receiver.read("recv", &mut out, timeout, &mut fine).unwrap();
        assert_eq!(out, second);
    }

    #[test]
    fn a_receiver_that_never_reads_stops_the_sender_with_an_error_naming_it() {
        let (sender, _receiver) = pair([9; TOKEN_BYTES]);
        let too_much = vec![0u8; (SLOTS + 1) * SLOT_BYTES];
        let error = sender
            .write("send", &too_much, Duration::from_millis(200), &mut fine)
            .unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("rank 1") && text.contains("shared memory"),
            "{text}"
        );
    }

    #[test]
    fn counters_that_run_past_each_other_are_refused_at_once() {
        let (sender, receiver) = pair([11; TOKEN_BYTES]);
        // A read counter ahead of the write counter: the sender refuses without waiting.
        receiver.counter(TAIL_AT).store(5, Ordering::Release);
        let start = Instant::now();
        let error = sender
            .write("send", &[1, 2, 3], Duration::from_secs(30), &mut fine)
            .unwrap_err();
        assert!(error.to_string().contains("corrupt"), "{error}");
        assert!(start.elapsed() < Duration::from_secs(5));
        // A write counter more than the slots ahead: the receiver refuses.
        receiver.counter(TAIL_AT).store(0, Ordering::Release);
        sender
            .counter(HEAD_AT)
            .store(SLOTS as u64 + 1, Ordering::Release);
        let mut out = [0u8; 3];
        let error = receiver
            .read("recv", &mut out, Duration::from_secs(30), &mut fine)
            .unwrap_err();
        assert!(error.to_string().contains("corrupt"), "{error}");
    }

    #[test]
    fn a_dead_peer_ends_the_wait_before_the_timeout() {
        let (_sender, receiver) = pair([10; TOKEN_BYTES]);
        let mut out = vec![0u8; 10];
        let start = Instant::now();
        let mut gone = || {
            Err(Error::Distributed {
                op: "recv".into(),
                rank: Some(0),
                reason: "the peer closed its connection".into(),
            })
        };
        let error = receiver
            .read("recv", &mut out, Duration::from_secs(30), &mut gone)
            .unwrap_err();
        assert!(
            error.to_string().contains("closed its connection"),
            "{error}"
        );
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    /// A sender that wrote everything and then left (its process ended after its last
    /// collective) is reported gone by the liveness check, yet what it wrote arrives: the wait
    /// looks once more before failing.
    #[test]
    fn a_peer_gone_after_writing_what_is_awaited_does_not_fail_the_wait() {
        let (sender, receiver) = pair([11; TOKEN_BYTES]);
        let sent: Vec<u8> = (0..64).collect();
        let mut out = vec![0u8; sent.len()];
        let mut sent_yet = false;
        // The first liveness check finds the peer gone, having just written the payload.
        let mut gone = || {
            if !sent_yet {
                sender
                    .write("send", &sent, Duration::from_secs(5), &mut fine)
                    .unwrap();
                sent_yet = true;
            }
            Err(Error::Distributed {
                op: "recv".into(),
                rank: Some(0),
                reason: "the peer closed its connection".into(),
            })
        };
        receiver
            .read("recv", &mut out, Duration::from_secs(30), &mut gone)
            .expect("what the peer wrote before leaving arrives");
        assert_eq!(out, sent);
    }

    #[test]
    fn opening_refuses_a_wrong_token_a_wrong_size_and_a_file_others_can_read() {
        let dir = crate::platform::shared_memory_dir();
        let path = dir.join(format!("nuvec-ring-test-{}-token", std::process::id()));
        let _sender = Channel::create(path.clone(), &[1; TOKEN_BYTES], 1).unwrap();
        let error = Channel::open(&path, &[2; TOKEN_BYTES], 0).unwrap_err();
        assert!(error.contains("token"), "{error}");

        let small = dir.join(format!("nuvec-ring-test-{}-small", std::process::id()));
        std::fs::write(&small, b"short").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&small, std::fs::Permissions::from_mode(0o600)).unwrap();
        let error = Channel::open(&small, &[1; TOKEN_BYTES], 0).unwrap_err();
        assert!(error.contains("bytes"), "{error}");
        std::fs::set_permissions(&small, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = Channel::open(&small, &[1; TOKEN_BYTES], 0).unwrap_err();
        assert!(error.contains("closed to others"), "{error}");
        std::fs::remove_file(&small).unwrap();
    }

    #[test]
    fn the_creator_removes_a_file_nobody_opened() {
        let path = crate::platform::shared_memory_dir()
            .join(format!("nuvec-ring-test-{}-unopened", std::process::id()));
        drop(Channel::create(path.clone(), &[3; TOKEN_BYTES], 1).unwrap());
        assert!(!path.exists());
    }
}
