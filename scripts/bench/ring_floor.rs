//! A bare ring all-reduce of `float32` over loopback TCP: the ring backend's algorithm
//! (reduce-scatter then all-gather around the ring in pipelined chunks, one ring per lane, a
//! second lane going the other way round) written the plainest way, with nothing else: no
//! headers, checks, graph, timeouts or polling. `cargo xtask bench-distributed` runs it for
//! its large `all_sum` rows as a reference measured in the same run: what the algorithm
//! takes without the ring's protocol, and with blocking threads instead of its design.
//!
//! Each rank and lane has a thread that receives a chunk, reduces it and hands it on, and a
//! thread that sends it (blocking calls, so neither spins; in sends of at most 48 KiB, as
//! the ring's). The result goes, as `all_sum`'s
//! does, into an output apart from the input (`output = input + received`, the received chunk
//! in a reused scratch buffer), or with `in-place` into the input itself. Buffers are in huge
//! pages where the system allows, allocated and touched before the clock starts. The ranks are
//! threads of one process (the kernel's work, which dominates, is the same as for processes).
//!
//! Each iteration starts after a barrier of every thread and ends when the last rank is
//! done. Every output value is checked after the last iteration. It prints the median with
//! the range, then the same as one JSON line.
//!
//! ```text
//! rustc --edition 2021 -O scripts/bench/ring_floor.rs -o target/ring_floor
//! target/ring_floor 268435456 9 4 2 262144        # bytes, iterations, ranks, lanes, chunk
//! target/ring_floor 268435456 9 4 2 262144 in-place
//! ```

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::ops::Range;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// A rank's buffer of `f32`, shared by its lanes' threads.
struct Buffer {
    pointer: *mut f32,
    len: usize,
}

// SAFETY: the threads touch chunks in an order the ring's schedule fixes: a chunk is sent
// only after it was received and reduced, and written again only after the ring has carried
// it on (which needs this rank's send of it to have finished).
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// `len` floats (at least one) in memory aligned for huge pages, advised to use them,
    /// filled with `value`.
    fn new(len: usize, value: f32) -> Buffer {
        extern "C" {
            fn madvise(address: *mut u8, len: usize, advice: i32) -> i32;
        }
        const MADV_HUGEPAGE: i32 = 14;
        let layout = std::alloc::Layout::from_size_align(len * 4, 2 << 20).expect("layout");
        // SAFETY: a non-zero size.
        let raw = unsafe { std::alloc::alloc(layout) };
        assert!(!raw.is_null(), "out of memory");
        // SAFETY: the block just allocated; madvise only changes how it is backed.
        unsafe { madvise(raw, len * 4, MADV_HUGEPAGE) };
        let buffer = Buffer {
            pointer: raw.cast(),
            len,
        };
        buffer.slice(0..len).fill(value);
        buffer
    }

    #[allow(clippy::mut_from_ref)]
    fn slice(&self, range: Range<usize>) -> &mut [f32] {
        assert!(range.end <= self.len);
        // SAFETY: in bounds; the threads' use is ordered as the `Send` impl says.
        unsafe { std::slice::from_raw_parts_mut(self.pointer.add(range.start), range.len()) }
    }
}

fn bytes_of(floats: &mut [f32]) -> &mut [u8] {
    // SAFETY: any bytes are valid floats and the length is exact.
    unsafe { std::slice::from_raw_parts_mut(floats.as_mut_ptr().cast(), floats.len() * 4) }
}

/// Segment `index` of `n` of `range`.
fn segment(range: &Range<usize>, n: usize, index: usize) -> Range<usize> {
    let len = range.len();
    range.start + len * index / n..range.start + len * (index + 1) / n
}

/// `range` in pieces of at most `chunk`.
fn chunks(range: Range<usize>, chunk: usize) -> impl Iterator<Item = Range<usize>> {
    let end = range.end;
    (range.start..end)
        .step_by(chunk)
        .map(move |start| start..(start + chunk).min(end))
}

/// One rank's part of one lane: its place on the lane's ring, the lane's slice of the
/// buffer, and the chunk in floats.
#[derive(Clone)]
struct Lane {
    position: usize,
    ranks: usize,
    slice: Range<usize>,
    chunk: usize,
}

impl Lane {
    /// (segment sent, segment received) at each reduce-scatter step, then at each
    /// all-gather step.
    fn steps(&self) -> (Vec<(usize, usize)>, Vec<(usize, usize)>) {
        let (n, p) = (self.ranks, self.position);
        let reduce = (0..n - 1)
            .map(|s| ((p + n - s) % n, (p + 2 * n - s - 1) % n))
            .collect();
        let gather = (0..n - 1)
            .map(|s| ((p + 1 + n - s) % n, (p + n - s) % n))
            .collect();
        (reduce, gather)
    }

    fn pieces(&self, segment_index: usize) -> impl Iterator<Item = Range<usize>> {
        chunks(segment(&self.slice, self.ranks, segment_index), self.chunk)
    }
}

/// A rank's input and output (the same buffer in place), and the barriers around each of
/// `iterations`.
struct Work {
    input: Arc<Buffer>,
    output: Arc<Buffer>,
    start: Arc<Barrier>,
    end: Arc<Barrier>,
    iterations: usize,
}

fn receive_loop(lane: Lane, work: Work, mut left: TcpStream, forward: Sender<Range<usize>>) {
    let in_place = Arc::ptr_eq(&work.input, &work.output);
    let mut scratch = vec![0f32; lane.chunk];
    let (reduce, gather) = lane.steps();
    for _ in 0..work.iterations {
        work.start.wait();
        for &(_, received) in &reduce {
            for piece in lane.pieces(received) {
                let incoming = &mut scratch[..piece.len()];
                left.read_exact(bytes_of(incoming)).expect("receiving");
                let out = work.output.slice(piece.clone());
                if in_place {
                    out.iter_mut()
                        .zip(incoming.iter())
                        .for_each(|(o, x)| *o += x);
                } else {
                    let own = work.input.slice(piece.clone());
                    for ((o, a), x) in out.iter_mut().zip(own.iter()).zip(incoming.iter()) {
                        *o = a + x;
                    }
                }
                forward.send(piece).expect("the sending thread");
            }
        }
        for (index, &(_, received)) in gather.iter().enumerate() {
            for piece in lane.pieces(received) {
                let out = work.output.slice(piece.clone());
                left.read_exact(bytes_of(out)).expect("receiving");
                if index + 2 < lane.ranks {
                    forward.send(piece).expect("the sending thread");
                }
            }
        }
        work.end.wait();
    }
}

/// Bytes per send: the ring backend's `SEND_PIECE` (`tcp/connection.rs`), below one of loopback's
/// segments.
const SEND_PIECE: usize = 48 << 10;

/// Writes `bytes` in sends of at most [`SEND_PIECE`].
fn send_all(stream: &mut TcpStream, bytes: &[u8]) {
    for piece in bytes.chunks(SEND_PIECE) {
        stream.write_all(piece).expect("sending");
    }
}

fn send_loop(lane: Lane, work: Work, mut right: TcpStream, pieces: Receiver<Range<usize>>) {
    let (reduce, gather) = lane.steps();
    let forwarded: usize = reduce[1..]
        .iter()
        .chain(&gather)
        .map(|&(sent, _)| lane.pieces(sent).count())
        .sum();
    for _ in 0..work.iterations {
        work.start.wait();
        for piece in lane.pieces(reduce[0].0) {
            send_all(&mut right, bytes_of(work.input.slice(piece)));
        }
        for _ in 0..forwarded {
            let piece = pieces.recv().expect("the receiving thread");
            send_all(&mut right, bytes_of(work.output.slice(piece)));
        }
        work.end.wait();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: ring_floor BYTES ITERATIONS RANKS LANES CHUNK_BYTES [in-place]";
    let numbers: Vec<usize> = args
        .iter()
        .take(5)
        .map(|a| a.parse().expect(usage))
        .collect();
    let [bytes, iterations, ranks, lanes, chunk_bytes] = numbers[..] else {
        panic!("{usage}");
    };
    let in_place = match args.get(5).map(String::as_str) {
        None => false,
        Some("in-place") => true,
        Some(_) => panic!("{usage}"),
    };
    assert!(ranks >= 2, "at least 2 ranks");
    assert!((1..=2).contains(&lanes), "1 or 2 lanes");
    assert!(
        iterations >= 1 && chunk_bytes >= 4 && bytes >= 4 * ranks * lanes,
        "{usage}"
    );
    let len = bytes / 4;
    let inputs: Vec<Arc<Buffer>> = (0..ranks)
        .map(|r| Arc::new(Buffer::new(len, (r + 1) as f32)))
        .collect();
    let outputs: Vec<Arc<Buffer>> = match in_place {
        true => inputs.clone(),
        false => (0..ranks)
            .map(|_| Arc::new(Buffer::new(len, 0.0)))
            .collect(),
    };
    let listener = TcpListener::bind("127.0.0.1:0").expect("a listener");
    let start = Arc::new(Barrier::new(2 * ranks * lanes + 1));
    let end = Arc::new(Barrier::new(2 * ranks * lanes + 1));
    let work = |r: usize| Work {
        input: inputs[r].clone(),
        output: outputs[r].clone(),
        start: start.clone(),
        end: end.clone(),
        iterations,
    };
    let mut threads = Vec::new();
    for l in 0..lanes {
        // Lane 1 goes the other way round: rank r sends to r - 1, receives from r + 1.
        let left_of = |r: usize| match l {
            0 => (r + ranks - 1) % ranks,
            _ => (r + 1) % ranks,
        };
        // Connection r carries rank r's sends to the rank on its right.
        let mut sends = Vec::new();
        let mut receives = Vec::new();
        for _ in 0..ranks {
            let near = TcpStream::connect(listener.local_addr().expect("its address"))
                .expect("connecting");
            let (far, _) = listener.accept().expect("accepting");
            near.set_nodelay(true).expect("nodelay");
            far.set_nodelay(true).expect("nodelay");
            sends.push(Some(near));
            receives.push(Some(far));
        }
        for r in 0..ranks {
            let lane = Lane {
                position: if l == 0 { r } else { (ranks - r) % ranks },
                ranks,
                slice: len * l / lanes..len * (l + 1) / lanes,
                chunk: chunk_bytes / 4,
            };
            let (forward, pieces) = channel();
            let right = sends[r].take().expect("each connection once");
            let left = receives[left_of(r)].take().expect("each connection once");
            let (sender, receiver) = (lane.clone(), lane);
            let (ours, theirs) = (work(r), work(r));
            threads.push(std::thread::spawn(move || {
                send_loop(sender, ours, right, pieces)
            }));
            threads.push(std::thread::spawn(move || {
                receive_loop(receiver, theirs, left, forward)
            }));
        }
    }
    let mut times = Vec::new();
    for _ in 0..iterations {
        if in_place {
            for (r, input) in inputs.iter().enumerate() {
                input.slice(0..len).fill((r + 1) as f32);
            }
        }
        start.wait();
        let clock = Instant::now();
        end.wait();
        times.push(clock.elapsed().as_secs_f64() * 1e3);
    }
    for thread in threads {
        thread.join().expect("a rank's thread");
    }
    let sum = (ranks * (ranks + 1) / 2) as f32;
    for (r, output) in outputs.iter().enumerate() {
        let wrong = output.slice(0..len).iter().filter(|&&v| v != sum).count();
        assert_eq!(wrong, 0, "rank {r}: {wrong} values are not the sum {sum}");
    }
    times.sort_by(f64::total_cmp);
    let (median, low, high) = (times[times.len() / 2], times[0], times[times.len() - 1]);
    let place = if in_place {
        "in place"
    } else {
        "into an output"
    };
    println!(
        "bare ring all-reduce of {bytes} bytes {place}, {ranks} ranks, {lanes} lane(s), \
         chunks of {chunk_bytes}: median {median:.2} ms ({low:.2} to {high:.2}) over {iterations}"
    );
    println!(
        "{{\"bytes\": {bytes}, \"ranks\": {ranks}, \"lanes\": {lanes}, \"chunk_bytes\": \
         {chunk_bytes}, \"in_place\": {in_place}, \"iterations\": {iterations}, \
         \"median_us\": {:.1}}}",
        median * 1e3
    );
}
