//! How fast one message crosses loopback TCP between two processes on this machine, for
//! comparison with the ping-pong of `cargo xtask bench-distributed`: the receiving process
//! (this program started again) reads `bytes` split evenly over `streams` connections, one
//! thread per connection on each side, with plain blocking reads and writes, then answers
//! with one byte on a separate connection. An iteration is the time from the first write to
//! that answer; the median of `iterations` is printed for each stream count, with the share
//! of the machine's CPU time spent meanwhile (Linux's `/proc/stat`). No headers, checks,
//! timeouts or graph: only the bytes.
//!
//! ```text
//! rustc --edition 2021 -O scripts/bench/message_floor.rs -o target/message_floor
//! target/message_floor 16777216 41 1,2,4        # bytes, iterations, stream counts
//! ```

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// Ticks of busy and of all CPU time so far (user, nice, system, irq, softirq; all eight
/// fields), where the system reports them.
fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|line| line.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    (f.len() == 8).then(|| (f[0] + f[1] + f[2] + f[5] + f[6], f.iter().sum()))
}

/// Moves `part` bytes on each of `streams`, `iterations` times, each side's threads meeting
/// at a barrier around every iteration; `send` says which side this is. Returns the times
/// (seconds) on the sending side.
fn run(
    streams: Vec<TcpStream>,
    mut control: TcpStream,
    part: usize,
    iterations: usize,
    send: bool,
) -> Vec<f64> {
    let start = Arc::new(Barrier::new(streams.len() + 1));
    let done = Arc::new(Barrier::new(streams.len() + 1));
    let workers: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            let (start, done) = (start.clone(), done.clone());
            std::thread::spawn(move || {
                let mut buffer = vec![7u8; part];
                for _ in 0..iterations {
                    start.wait();
                    if send {
                        stream.write_all(&buffer).expect("writing");
                    } else {
                        stream.read_exact(&mut buffer).expect("reading");
                    }
                    done.wait();
                }
            })
        })
        .collect();
    let mut times = Vec::with_capacity(iterations);
    let mut byte = [0u8; 1];
    for _ in 0..iterations {
        let clock = Instant::now();
        start.wait();
        done.wait();
        if send {
            control.read_exact(&mut byte).expect("the answer");
        } else {
            control.write_all(&byte).expect("answering");
        }
        times.push(clock.elapsed().as_secs_f64());
    }
    for worker in workers {
        worker.join().expect("a stream's thread");
    }
    times
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bytes: usize = args.get(1).map_or(16 << 20, |s| s.parse().expect("bytes"));
    let iterations: usize = args.get(2).map_or(41, |s| s.parse().expect("iterations"));
    let counts: Vec<usize> = args.get(3).map_or(vec![1, 2, 4], |s| {
        s.split(',')
            .map(|c| c.parse().expect("a stream count"))
            .collect()
    });
    if let Ok(port) = std::env::var("MESSAGE_FLOOR_PORT") {
        // The receiving process: connect every stream, then the answer's connection.
        let streams: usize = std::env::var("MESSAGE_FLOOR_STREAMS")
            .unwrap()
            .parse()
            .unwrap();
        let address = format!("127.0.0.1:{port}");
        let connect = || {
            let stream = TcpStream::connect(&address).expect("connecting");
            stream.set_nodelay(true).expect("nodelay");
            stream
        };
        let data: Vec<TcpStream> = (0..streams).map(|_| connect()).collect();
        let control = connect();
        run(data, control, bytes / streams, iterations, false);
        return;
    }
    for streams in counts {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = listener.local_addr().expect("its address").port();
        let mut child = std::process::Command::new(std::env::current_exe().expect("this program"))
            .args(&args[1..])
            .env("MESSAGE_FLOOR_PORT", port.to_string())
            .env("MESSAGE_FLOOR_STREAMS", streams.to_string())
            .spawn()
            .expect("starting the receiver");
        let accept = || {
            let (stream, _) = listener.accept().expect("accepting");
            stream.set_nodelay(true).expect("nodelay");
            stream
        };
        let data: Vec<TcpStream> = (0..streams).map(|_| accept()).collect();
        let control = accept();
        let before = cpu_ticks();
        let mut times = run(data, control, bytes / streams, iterations, true);
        let busy = match (before, cpu_ticks()) {
            (Some((b0, a0)), Some((b1, a1))) if a1 > a0 => {
                format!("{:.0}%", 100.0 * (b1 - b0) as f64 / (a1 - a0) as f64)
            }
            _ => "not reported".to_string(),
        };
        assert!(
            child.wait().expect("the receiver").success(),
            "the receiver failed"
        );
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        println!(
            "{bytes} bytes over {streams} stream(s): median {:.1} µs ({:.2} GB/s); CPU busy {busy}",
            median * 1e6,
            bytes as f64 / median / 1e9
        );
    }
}
