//! One connection on its own: frames queued for the writer thread and frames written through
//! from the caller's thread arrive whole and in order, and a send to a peer that stops
//! reading ends with an error within its timeout instead of hanging.

use super::connection::{Connection, Poll, SEND_PIECE, SPIN};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// A connected pair: a `Connection` (standing for rank 1) and the raw far end.
pub(crate) fn pair() -> (Connection, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let near = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (far, _) = listener.accept().unwrap();
    (Connection::new(1, near, Poll::Off).unwrap(), far)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn written_through_frames_follow_queued_ones_in_order() {
    let (peer, mut far) = pair();
    // Large enough that most of the first frame waits in the writer thread's queue.
    let queued = pattern(24 << 20, 1);
    let through = pattern(24 << 20, 2);
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        far.read_to_end(&mut all).unwrap();
        all
    });
    peer.write("send", &[&queued[..8], &queued[8..]]).unwrap();
    peer.write_through(
        "send",
        &[&through[..5], &through[5..]],
        SEND_PIECE,
        Duration::from_secs(20),
    )
    .unwrap();
    peer.end_writes();
    peer.flush("send", Duration::from_secs(20)).unwrap();
    let all = reader.join().unwrap();
    assert_eq!(all.len(), queued.len() + through.len());
    assert!(
        all[..queued.len()] == queued[..],
        "the queued frame arrives first, whole"
    );
    assert!(
        all[queued.len()..] == through[..],
        "then the written-through frame"
    );
}

#[test]
fn writing_through_to_a_peer_that_stops_reading_times_out_naming_it() {
    let (peer, _far) = pair();
    // Far more than the socket buffers on both ends hold; nobody reads.
    let data = vec![7u8; 256 << 20];
    let start = Instant::now();
    let error = peer
        .write_through("send", &[&data], usize::MAX, Duration::from_millis(300))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("timed out")
            && error.contains("stopped reading")
            && error.contains("rank 1"),
        "{error}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "it gave up in time"
    );
}

#[test]
fn point_to_point_receives_spin_longer_and_crowded_machines_still_yield() {
    use super::connection::{MESSAGE_SPIN, YIELD};
    let (Poll::Spin(short), Poll::Spin(long)) = (SPIN, MESSAGE_SPIN) else {
        panic!("SPIN and MESSAGE_SPIN must both spin");
    };
    assert!(long > short, "{long:?} <= {short:?}");
    assert_eq!(SPIN.for_messages(), MESSAGE_SPIN);
    assert_eq!(YIELD.for_messages(), YIELD);
    assert_eq!(Poll::Off.for_messages(), Poll::Off);
}

#[test]
fn a_message_read_polls_then_sleeps_until_its_bytes_come() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let near = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut far, _) = listener.accept().unwrap();
    let peer = Connection::new(1, near, SPIN).unwrap();
    let message = pattern(3 << 20, 7);
    let sent = message.clone();
    // The message starts well after the 300 µs poll, so the read must go on to sleep.
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        far.write_all(&sent).unwrap();
        far
    });
    let mut got = vec![0u8; message.len()];
    peer.read_message("recv", &mut got, Duration::from_secs(10))
        .unwrap();
    assert!(got == message, "the message arrived altered");
    drop(writer.join().unwrap());
}

#[test]
fn only_a_send_that_waits_for_room_starts_the_writer_thread() {
    let (peer, mut far) = pair();
    far.write_all(b"hello").unwrap();
    let mut got = [0u8; 5];
    peer.read_exact("recv", &mut got, Duration::from_secs(5))
        .unwrap();
    assert_eq!(&got, b"hello");
    peer.write("send", &[b"small"]).unwrap();
    peer.flush("send", Duration::from_secs(5)).unwrap();
    assert!(
        !peer.has_writer_thread(),
        "reads and sends the socket takes at once need no thread"
    );
    // Far more than the socket buffers hold while nobody reads: the rest must wait.
    let big = pattern(24 << 20, 3);
    peer.write("send", &[&big]).unwrap();
    assert!(peer.has_writer_thread());
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        far.read_to_end(&mut all).unwrap();
        all
    });
    peer.end_writes();
    peer.flush("send", Duration::from_secs(20)).unwrap();
    let all = reader.join().unwrap();
    assert_eq!(&all[..5], b"small");
    assert!(
        all[5..] == big[..],
        "the waiting frame arrives whole after the small one"
    );
    peer.close();
    assert!(!peer.has_writer_thread(), "close stops the thread");
}

#[test]
fn ending_writes_without_a_writer_thread_closes_the_peers_stream() {
    let (peer, mut far) = pair();
    peer.write("send", &[b"last words"]).unwrap();
    peer.end_writes();
    let mut all = Vec::new();
    far.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    far.read_to_end(&mut all).unwrap();
    assert_eq!(all, b"last words");
    assert!(!peer.has_writer_thread());
}

/// A loopback port nothing listens on now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
