//! A peer that completes the handshake and then sends arbitrary bytes (random, or valid frames
//! with corrupted fields, sizes and shapes): every operation on the receiving rank ends in an
//! error or a correct result, never a panic, a hang or an allocation the peer's numbers drive.

use super::RingCommunicator;
use crate::hostfile::Address;
use crate::tcp::connection_tests::free_port;
use crate::tcp::frame::{Header, Kind};
use crate::tcp::handshake::{connect_side, Local};
use crate::test_random::Random;
use crate::Options;
use nuvec_core::distributed::{Communicator, ReduceOp};
use nuvec_core::DType;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A byte stream a hostile or broken rank 0 might send.
fn hostile_bytes(random: &mut Random) -> Vec<u8> {
    let kinds = [
        Kind::AllSum,
        Kind::Send,
        Kind::Chunk,
        Kind::Abort,
        Kind::AllGather,
    ];
    let mut out = Vec::new();
    for _ in 0..1 + random.below(4) {
        match random.below(3) {
            0 => out.extend((0..random.below(200)).map(|_| random.next() as u8)),
            _ => {
                let header = Header {
                    kind: kinds[random.below(kinds.len() as u64) as usize],
                    dtype: DType::ALL[random.below(DType::ALL.len() as u64) as usize],
                    sequence: random.below(3),
                    bytes: match random.below(3) {
                        0 => 16,
                        1 => random.below(64),
                        _ => random.next(),
                    },
                };
                let mut frame = header.encode().to_vec();
                if random.below(4) == 0 {
                    let at = random.below(frame.len() as u64) as usize;
                    frame[at] = random.next() as u8;
                }
                out.extend(frame);
                // A shape prefix (for send frames) with a plausible or absurd dimension count.
                let ndim = if random.below(2) == 0 {
                    1
                } else {
                    random.next() as u32
                };
                out.extend(ndim.to_le_bytes());
                out.extend((0..random.below(40)).map(|_| random.next() as u8));
            }
        }
    }
    out
}

/// Forms a 2-rank group whose rank 0 is this test's raw sockets; returns rank 1, the socket
/// rank 1 reads rank 0's data from, and the one it writes to rank 0 on (rank 0 opens both, as
/// the left rank of a pair does).
fn group_with_raw_rank_0() -> (RingCommunicator, TcpStream, TcpStream) {
    let ports = [free_port(), free_port()];
    let nodes: Vec<Vec<Address>> = ports
        .iter()
        .map(|p| vec![Address::parse(&format!("127.0.0.1:{p}")).unwrap()])
        .collect();
    let rank_1 = std::thread::spawn(move || {
        RingCommunicator::connect(&nodes, 1, &Options::with_timeout(Duration::from_secs(2)))
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let local = Local {
        rank: 0,
        size: 2,
        key: None,
        incarnation: 7,
    };
    let open = || {
        let mut stream = loop {
            match TcpStream::connect(("127.0.0.1", ports[1])) {
                Ok(stream) => break stream,
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
                Err(e) => panic!("rank 1 never listened: {e}"),
            }
        };
        connect_side(&mut stream, &local, 1, deadline).expect("handshake as rank 0");
        stream
    };
    let mut stream = open();
    let mut incoming = open();
    // Rank 0 offers no shared memory and declines rank 1's offer.
    let (ours, theirs) = crate::shm::offers::declining_exchange();
    stream.write_all(&ours).expect("rank 0's offer");
    let mut offer = vec![0u8; theirs];
    incoming
        .read_exact(&mut offer)
        .expect("rank 1's offer and answer");
    (
        rank_1.join().unwrap().expect("rank 1 forms"),
        stream,
        incoming,
    )
}

#[test]
fn arbitrary_bytes_from_a_peer_end_in_errors_not_panics_or_hangs() {
    let mut random = Random::new(0x2545_F491_4F6C_DD1D);
    for case in 0..60 {
        let (group, mut raw, incoming) = group_with_raw_rank_0();
        let bytes = hostile_bytes(&mut random);
        let _ = raw.write_all(&bytes);
        // The hostile peer leaves: nothing may wait past that.
        drop((raw, incoming));
        let start = Instant::now();
        let mut data = [0u8; 16];
        let outcome = if case % 2 == 0 {
            group.recv(&mut data, DType::F32, &[4], 0)
        } else {
            group.all_reduce(&mut data, DType::F32, ReduceOp::Sum)
        };
        assert!(
            outcome.is_err(),
            "case {case}: {} bytes were accepted",
            bytes.len()
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "case {case} took {:?}",
            start.elapsed()
        );
        group.close();
    }
}
