//! What loopback TCP allows a ping-pong of one message size on this machine, for comparison
//! with the ping-pong of `cargo xtask bench-distributed` (one way: half the round trip):
//!
//! - **the kernel's work**: how long one `send` of the message takes into a connection
//!   whose far end is not reading (copying it in and running loopback's delivery; buffers
//!   large enough to take it all), and one `recv` of it once it has all arrived (copying it
//!   out, freeing it, acknowledging), the send written whole or in 48 KiB writes, whichever
//!   is cheaper. Their sum spread over every core is a floor for one way that no
//!   arrangement of streams and threads can beat. A message over 1 MiB is timed in
//!   pieces of 1 MiB, which stay in the cache (the cost per byte of cache-hot pieces, so still
//!   a floor), and the time scaled to the whole;
//! - **raw ping-pongs**: the message back and forth over 1, 2 or 4 connections between two
//!   processes, one thread on each side writing (whole, then in writes of 48 KiB as the ring
//!   does) and reading its parts round-robin without blocking, spinning while nothing can
//!   move, after a one-byte exchange (as the benchmark's barrier): no headers, checks or
//!   graph, only the bytes.
//!
//! Medians of `iterations` are printed.
//!
//! ```text
//! rustc --edition 2021 -O scripts/bench/pingpong_floor.rs -o target/pingpong_floor
//! target/pingpong_floor 1048576 2001 1,2,4        # bytes, iterations, connection counts
//! ```

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// A connected pair of loopback sockets, with Nagle's delay off.
fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
    let near = TcpStream::connect(listener.local_addr().expect("its address")).expect("connecting");
    let (far, _) = listener.accept().expect("accepting");
    for stream in [&near, &far] {
        stream.set_nodelay(true).expect("nodelay");
    }
    (near, far)
}

/// Sets both socket buffers of `stream` to `bytes` (Linux's `SO_SNDBUFFORCE` and
/// `SO_RCVBUFFORCE`, which need root, then the capped `SO_SNDBUF` and `SO_RCVBUF`).
fn large_buffers(stream: &TcpStream, bytes: i32) {
    extern "C" {
        fn setsockopt(fd: i32, level: i32, name: i32, value: *const i32, len: u32) -> i32;
    }
    use std::os::fd::AsRawFd;
    const SOL_SOCKET: i32 = 1;
    for name in [32, 33, 7, 8] {
        // SAFETY: a valid socket and a pointer to an int that outlives the call.
        unsafe { setsockopt(stream.as_raw_fd(), SOL_SOCKET, name, &bytes, 4) };
    }
}

/// The largest piece [`kernel_work`] times at once.
const PIECE: usize = 1 << 20;

/// Median seconds of one `send` of `bytes` into a connection nobody reads, and of one `recv`
/// of them after they arrived; over [`PIECE`], of each piece, scaled to `bytes`.
/// Each send is timed written whole and in writes of [`SEND_PIECE`], and the cheaper taken.
fn kernel_work(bytes: usize, iterations: usize) -> (f64, f64) {
    let piece = bytes.min(PIECE);
    let (whole, receive) = kernel_work_writing(piece, iterations, piece);
    let (in_pieces, _) = kernel_work_writing(piece, iterations, SEND_PIECE);
    let pieces = bytes as f64 / piece as f64;
    (whole.min(in_pieces) * pieces, receive * pieces)
}

/// [`kernel_work`] for `bytes` sent in writes of at most `write` bytes, unscaled.
fn kernel_work_writing(bytes: usize, iterations: usize, write: usize) -> (f64, f64) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
    let (mut near, mut far) = pair(&listener);
    let room = i32::try_from(4 * bytes).unwrap_or(i32::MAX).max(1 << 20);
    large_buffers(&near, room);
    large_buffers(&far, room);
    let message = vec![7u8; bytes];
    let mut into = vec![0u8; bytes];
    let (mut sends, mut receives) = (Vec::new(), Vec::new());
    for _ in 0..iterations {
        let clock = Instant::now();
        for piece in message.chunks(write) {
            near.write_all(piece).expect("sending");
        }
        sends.push(clock.elapsed().as_secs_f64());
        let clock = Instant::now();
        far.read_exact(&mut into).expect("receiving");
        receives.push(clock.elapsed().as_secs_f64());
    }
    (median(sends), median(receives))
}

/// Bytes per write of the ring's sends (`tcp/connection.rs`, `SEND_PIECE`).
const SEND_PIECE: usize = 48 << 10;

/// Moves `message` over `streams`, each its share, from one thread without blocking: writes
/// (at most `write` bytes each) when `send`, reads otherwise.
fn move_parts(streams: &mut [TcpStream], message: &mut [u8], send: bool, write: usize) {
    let part = message.len().div_ceil(streams.len());
    let mut parts: Vec<(usize, usize)> = (0..streams.len())
        .map(|k| {
            (
                (k * part).min(message.len()),
                ((k + 1) * part).min(message.len()),
            )
        })
        .collect();
    while parts.iter().any(|(at, end)| at < end) {
        for (stream, (at, end)) in streams.iter_mut().zip(parts.iter_mut()) {
            if at == end {
                continue;
            }
            let moved = if send {
                stream.write(&message[*at..(*end).min(at.saturating_add(write))])
            } else {
                stream.read(&mut message[*at..*end])
            };
            match moved {
                Ok(0) => panic!("the other process closed a connection"),
                Ok(n) => *at += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("moving a part: {e}"),
            }
        }
    }
}

/// Ping-pongs `bytes` over `streams` (the first also carries the one-byte exchange before each
/// iteration); the first side times each round trip.
fn ping_pong(
    mut streams: Vec<TcpStream>,
    (bytes, write): (usize, usize),
    iterations: usize,
    first: bool,
) -> f64 {
    for stream in &streams {
        stream.set_nonblocking(true).expect("non-blocking");
    }
    let mut message = vec![7u8; bytes];
    let mut byte = [0u8; 1];
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        move_parts(&mut streams[..1], &mut byte, first, write);
        move_parts(&mut streams[..1], &mut byte, !first, write);
        let clock = Instant::now();
        move_parts(&mut streams, &mut message, first, write);
        move_parts(&mut streams, &mut message, !first, write);
        times.push(clock.elapsed().as_secs_f64() / 2.0);
    }
    median(times)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bytes: usize = args.get(1).map_or(1 << 20, |s| s.parse().expect("bytes"));
    let iterations: usize = args.get(2).map_or(2001, |s| s.parse().expect("iterations"));
    let counts: Vec<usize> = args.get(3).map_or(vec![1, 2, 4], |s| {
        s.split(',')
            .map(|c| c.parse().expect("a connection count"))
            .collect()
    });
    if let Ok(port) = std::env::var("PINGPONG_FLOOR_PORT") {
        // The answering process.
        let streams: usize = std::env::var("PINGPONG_FLOOR_STREAMS")
            .unwrap()
            .parse()
            .unwrap();
        let write: usize = std::env::var("PINGPONG_FLOOR_WRITE")
            .unwrap()
            .parse()
            .unwrap();
        let connect = || {
            let stream = TcpStream::connect(format!("127.0.0.1:{port}")).expect("connecting");
            stream.set_nodelay(true).expect("nodelay");
            stream
        };
        let streams = (0..streams).map(|_| connect()).collect();
        ping_pong(streams, (bytes, write), iterations, false);
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (send, receive) = kernel_work(bytes, iterations);
    println!(
        "{bytes} bytes: kernel's work: send {:.1} µs, receive {:.1} µs; over {cores} cores: {:.1} µs",
        send * 1e6,
        receive * 1e6,
        (send + receive) / cores as f64 * 1e6
    );
    for (streams, write) in counts
        .iter()
        .flat_map(|&n| [(n, usize::MAX), (n, SEND_PIECE)])
    {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = listener.local_addr().expect("its address").port();
        let mut child = std::process::Command::new(std::env::current_exe().expect("this program"))
            .args(&args[1..])
            .env("PINGPONG_FLOOR_PORT", port.to_string())
            .env("PINGPONG_FLOOR_STREAMS", streams.to_string())
            .env("PINGPONG_FLOOR_WRITE", write.to_string())
            .spawn()
            .expect("starting the answering process");
        let accepted: Vec<TcpStream> = (0..streams)
            .map(|_| {
                let (stream, _) = listener.accept().expect("accepting");
                stream.set_nodelay(true).expect("nodelay");
                stream
            })
            .collect();
        let one_way = ping_pong(accepted, (bytes, write), iterations, true);
        assert!(child.wait().expect("the answering process").success());
        let writes = match write {
            usize::MAX => "whole writes".to_string(),
            n => format!("writes of {} KiB", n >> 10),
        };
        println!(
            "{bytes} bytes: raw ping-pong over {streams} connection(s), {writes}: one way {:.1} µs",
            one_way * 1e6
        );
    }
}
