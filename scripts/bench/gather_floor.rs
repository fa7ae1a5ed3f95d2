//! A bare 2-rank all-gather over loopback TCP, for comparison with the ring's `all_gather`
//! on 2 ranks in `cargo xtask bench-distributed`: no headers, checks, graph, timeouts or
//! polling. Each rank is a process with one connection to write and one to read; per
//! iteration (after a one-byte exchange, as the benchmark's barrier) a long-lived sending
//! thread writes the rank's block (whole, or in writes of `piece` bytes), while the main
//! thread copies the block into its place in the output and reads the other rank's block
//! into the other half. The blocks are checked once at the end. Rank 0 prints the median.
//!
//! ```text
//! rustc --edition 2021 -O scripts/bench/gather_floor.rs -o target/gather_floor
//! target/gather_floor 1 16777216 200 49152 & target/gather_floor 0 16777216 200 49152; wait
//! #                   rank, output bytes, iterations, bytes per write (0: whole), [port]
//! ```

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        eprintln!("usage: gather_floor RANK OUTPUT_BYTES ITERATIONS PIECE [PORT]");
        std::process::exit(2);
    }
    let number = |i: usize| -> usize { args[i].parse().expect("a whole number") };
    let (rank, bytes, iterations) = (number(1), number(2), number(3));
    let piece = match number(4) {
        0 => usize::MAX,
        n => n,
    };
    let port: u16 = args.get(5).map_or(26000, |p| p.parse().expect("a port"));
    // Rank 0 accepts both connections: first the one it writes on, then the one it reads.
    let (mut out, mut into) = if rank == 0 {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("the port");
        let out = listener.accept().expect("accepting").0;
        (out, listener.accept().expect("accepting").0)
    } else {
        let into = loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(stream) => break stream,
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        (TcpStream::connect(("127.0.0.1", port)).expect("connecting"), into)
    };
    for stream in [&out, &into] {
        stream.set_nodelay(true).expect("nodelay");
    }
    let block = bytes / 2;
    let input = vec![rank as u8 + 1; block];
    let mut output = vec![0u8; 2 * block];
    let (go, wait_go) = channel::<()>();
    let (done, wait_done) = channel::<()>();
    let mut writer = out.try_clone().expect("a second handle");
    let sending = input.clone();
    std::thread::spawn(move || {
        while wait_go.recv().is_ok() {
            for part in sending.chunks(piece) {
                writer.write_all(part).expect("sending");
            }
            done.send(()).expect("the main thread");
        }
    });
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        out.write_all(&[1]).expect("the barrier");
        into.read_exact(&mut [0u8]).expect("the barrier");
        let clock = Instant::now();
        go.send(()).expect("the sending thread");
        let (low, high) = output.split_at_mut(block);
        let (mine, theirs) = if rank == 0 { (low, high) } else { (high, low) };
        mine.copy_from_slice(&input);
        into.read_exact(theirs).expect("receiving");
        wait_done.recv().expect("the sending thread");
        times.push(clock.elapsed().as_secs_f64());
    }
    let (first, second) = output.split_at(block);
    assert!(first.iter().all(|&b| b == 1) && second.iter().all(|&b| b == 2));
    times.sort_by(f64::total_cmp);
    if rank == 0 {
        let write = if piece == usize::MAX { "whole".to_string() } else { format!("{piece}-byte") };
        println!(
            "bare 2-rank all_gather of {bytes} bytes, {write} writes: median {:.1} µs over {iterations}",
            times[times.len() / 2] * 1e6
        );
    }
}
