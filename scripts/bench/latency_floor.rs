//! The latency a minimal TCP all-reduce reaches on this machine, for comparison with the
//! ring's small collectives: N threads joined by loopback TCP in a full mesh run recursive
//! doubling on `float32` buffers, each read polling (non-blocking `recv`, yielding the core)
//! for a window before it blocks. Every iteration follows a one-element all-reduce as a
//! barrier; its time is the slowest thread's, and the median of 2000 is printed, as
//! `cargo xtask bench-distributed` does. No headers, checks, timeouts or graph: only the
//! exchanges and the additions.
//!
//! With the word `processes` after those three numbers, the ranks are processes instead (this
//! program started again once per rank, meeting on loopback ports from 47000), as the ring's
//! ranks are. With the word `star`, the timed all-reduce goes through rank 0 instead (every
//! rank sends it its data; it adds them in rank order and sends the sum back), as the ring's
//! small collectives on 3 to 8 ranks do.
//!
//! ```text
//! rustc --edition 2021 -O scripts/bench/latency_floor.rs -o target/latency_floor
//! target/latency_floor 4 1024 200             # ranks, elements, polling window (µs)
//! target/latency_floor 4 1024 200 processes
//! target/latency_floor 4 1024 200 processes star
//! ```

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

const ITERATIONS: usize = 2000;

/// Reads `buf` whole, polling for `window` before blocking.
fn read_polling(stream: &mut TcpStream, buf: &mut [u8], window: Duration) {
    let mut filled = 0;
    stream.set_nonblocking(true).expect("non-blocking");
    let until = Instant::now() + window;
    while filled < buf.len() {
        match stream.read(&mut buf[filled..]) {
            Ok(0) => panic!("a peer closed its connection"),
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() > until {
                    break;
                }
                std::thread::yield_now();
            }
            Err(e) => panic!("reading: {e}"),
        }
    }
    stream.set_nonblocking(false).expect("blocking");
    stream.read_exact(&mut buf[filled..]).expect("reading");
}

/// Through rank 0 over `peers` (the stream to each rank, none for this one): it adds the
/// ranks' data in rank order and sends the sum to every rank.
/// The `f32`s stored in `bytes`.
fn decode(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn all_sum_star(peers: &mut [Option<TcpStream>], rank: usize, data: &mut [f32], window: Duration) {
    let mut bytes = vec![0u8; data.len() * 4];
    let encode = |bytes: &mut [u8], data: &[f32]| {
        for (out, value) in bytes.chunks_exact_mut(4).zip(data) {
            out.copy_from_slice(&value.to_le_bytes());
        }
    };
    if rank == 0 {
        for stream in peers.iter_mut().skip(1) {
            read_polling(stream.as_mut().expect("a connection"), &mut bytes, window);
            for (value, theirs) in data.iter_mut().zip(decode(&bytes)) {
                *value += theirs;
            }
        }
        encode(&mut bytes, data);
        for stream in peers.iter_mut().skip(1) {
            stream
                .as_mut()
                .expect("a connection")
                .write_all(&bytes)
                .expect("writing");
        }
    } else {
        let stream = peers[0].as_mut().expect("a connection");
        encode(&mut bytes, data);
        stream.write_all(&bytes).expect("writing");
        read_polling(stream, &mut bytes, window);
        for (value, sum) in data.iter_mut().zip(decode(&bytes)) {
            *value = sum;
        }
    }
}

/// Recursive doubling over `peers` (the stream to each rank, none for this one).
fn all_sum(peers: &mut [Option<TcpStream>], rank: usize, data: &mut [f32], window: Duration) {
    let mut outgoing = vec![0u8; data.len() * 4];
    let mut incoming = vec![0u8; data.len() * 4];
    let mut distance = 1;
    while distance < peers.len() {
        let stream = peers[rank ^ distance].as_mut().expect("a connection");
        for (bytes, value) in outgoing.chunks_exact_mut(4).zip(data.iter()) {
            bytes.copy_from_slice(&value.to_le_bytes());
        }
        stream.write_all(&outgoing).expect("writing");
        read_polling(stream, &mut incoming, window);
        for (value, bytes) in data.iter_mut().zip(incoming.chunks_exact(4)) {
            *value += f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        distance *= 2;
    }
}

/// One rank's timed iterations: a barrier, then the all-reduce of `elements` values.
fn run_rank(
    mut peers: Vec<Option<TcpStream>>,
    rank: usize,
    elements: usize,
    window: Duration,
) -> Vec<f64> {
    let ranks = peers.len();
    let mut times = Vec::with_capacity(ITERATIONS);
    // The barrier is a one-element all-reduce of the same kind, as in the ring.
    let reduce = if flag("star") { all_sum_star } else { all_sum };
    for _ in 0..ITERATIONS {
        reduce(&mut peers, rank, &mut [1.0], window);
        let mut data = vec![1.0f32; elements];
        let start = Instant::now();
        reduce(&mut peers, rank, &mut data, window);
        times.push(start.elapsed().as_secs_f64());
        assert_eq!(data[0], ranks as f32, "a wrong sum");
    }
    times
}

/// Whether the word `name` follows the three numbers on the command line.
fn flag(name: &str) -> bool {
    std::env::args().skip(4).any(|arg| arg == name)
}

const BASE_PORT: u16 = 47000;

/// This process's connections as rank `rank` of `ranks`: it accepts from higher ranks on
/// its own port and connects to lower ones.
fn connect_process(rank: usize, ranks: usize) -> Vec<Option<TcpStream>> {
    let listener = TcpListener::bind(("127.0.0.1", BASE_PORT + rank as u16)).expect("binding");
    let mut peers: Vec<Option<TcpStream>> = (0..ranks).map(|_| None).collect();
    for (lower, slot) in peers.iter_mut().enumerate().take(rank) {
        let stream = loop {
            match TcpStream::connect(("127.0.0.1", BASE_PORT + lower as u16)) {
                Ok(stream) => break stream,
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        let mut stream = stream;
        stream.write_all(&[rank as u8]).expect("introducing");
        stream.set_nodelay(true).expect("nodelay");
        *slot = Some(stream);
    }
    for _ in rank + 1..ranks {
        let (mut stream, _) = listener.accept().expect("accepting");
        let mut who = [0u8];
        stream.read_exact(&mut who).expect("introduction");
        stream.set_nodelay(true).expect("nodelay");
        peers[who[0] as usize] = Some(stream);
    }
    peers
}

fn main() {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .map_or(default, |s| s.parse().expect("a number"))
    };
    let (ranks, elements) = (arg(1, 4) as usize, arg(2, 1024) as usize);
    let window = Duration::from_micros(arg(3, 200));
    let processes = flag("processes");
    assert!(
        ranks.is_power_of_two() && ranks <= 256,
        "recursive doubling needs a power of two (at most 256: ranks introduce themselves in a byte)"
    );
    if let Ok(rank) = std::env::var("LATENCY_FLOOR_RANK") {
        // A child: run, then print this rank's times for the parent.
        let rank: usize = rank.parse().expect("a rank");
        let times = run_rank(connect_process(rank, ranks), rank, elements, window);
        let text: Vec<String> = times.iter().map(|t| t.to_string()).collect();
        println!("{}", text.join(" "));
        return;
    }
    let per_rank: Vec<Vec<f64>> = if processes {
        let children: Vec<_> = (0..ranks)
            .map(|rank| {
                std::process::Command::new(std::env::current_exe().expect("this program"))
                    .args(std::env::args().skip(1))
                    .env("LATENCY_FLOOR_RANK", rank.to_string())
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .expect("starting a rank")
            })
            .collect();
        children
            .into_iter()
            .map(|child| {
                let output = child.wait_with_output().expect("a rank");
                assert!(output.status.success(), "a rank failed");
                String::from_utf8_lossy(&output.stdout)
                    .split_whitespace()
                    .map(|t| t.parse().expect("a time"))
                    .collect()
            })
            .collect()
    } else {
        let listeners: Vec<TcpListener> = (0..ranks)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("binding"))
            .collect();
        let mut meshes: Vec<Vec<Option<TcpStream>>> = (0..ranks)
            .map(|_| (0..ranks).map(|_| None).collect())
            .collect();
        for i in 0..ranks {
            for j in i + 1..ranks {
                let out = TcpStream::connect(listeners[j].local_addr().expect("address"))
                    .expect("connecting");
                let (back, _) = listeners[j].accept().expect("accepting");
                out.set_nodelay(true).expect("nodelay");
                back.set_nodelay(true).expect("nodelay");
                meshes[i][j] = Some(out);
                meshes[j][i] = Some(back);
            }
        }
        let threads: Vec<_> = meshes
            .into_iter()
            .enumerate()
            .map(|(rank, peers)| {
                std::thread::spawn(move || run_rank(peers, rank, elements, window))
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a rank panicked"))
            .collect()
    };
    let mut slowest: Vec<f64> = (0..ITERATIONS)
        .map(|i| per_rank.iter().map(|t| t[i]).fold(0.0, f64::max))
        .collect();
    slowest.sort_by(f64::total_cmp);
    println!(
        "{ranks} ranks ({}, {}), {} bytes, polling {} µs: median {:.1} µs, min {:.1} µs",
        if processes { "processes" } else { "threads" },
        if flag("star") {
            "through rank 0"
        } else {
            "recursive doubling"
        },
        elements * 4,
        window.as_micros(),
        slowest[ITERATIONS / 2] * 1e6,
        slowest[0] * 1e6
    );
}
