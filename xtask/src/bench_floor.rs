//! This machine's ceilings for `cargo xtask bench-distributed`, measured in the same run as
//! the collectives, and each row's loopback floor: the least time loopback TCP needs to carry
//! the bytes the ring moves, plus the reductions' CPU time.
//!
//! Loopback is measured three ways: one stream; as many streams at once as ranks, sent from
//! and received into a cache-sized buffer; and the same streams sent from and received into
//! memory as large as a rank's output. The last matters once the ranks' outputs together
//! outgrow the last-level cache: the bytes that land in an output must then reach memory, and
//! the bytes sent come from buffers as large (the input, the output being built), so loopback
//! carries them slower than cache-hot ones.
//!
//! On one machine loopback keeps every core busy (the kernel copies each byte on the way in
//! and on the way out), so the reductions cannot hide behind the transfers: their CPU time,
//! measured as a single-core `float32` add of a cached chunk into memory, spread over all
//! cores, adds to the floor.

use std::io::{Read, Write};
use std::time::Instant;

/// Bytes per cache-hot read buffer, and per write of the large-write measurement.
const CHUNK: usize = 4 << 20;
/// Bytes per write of the other measurement: the ring's sends (`tcp/connection.rs`,
/// `SEND_PIECE`), below one of loopback's segments, which loopback carries faster on one
/// stream here (and slower on several).
const PIECE: usize = 48 << 10;
/// Bytes each measurement moves in all (shared between its streams).
const TOTAL: usize = 2 << 30;
/// The last-level cache assumed where the system does not say.
const DEFAULT_CACHE: u64 = 32 << 20;

/// Single-core memcpy bandwidth (GB/s, best of 5 copies of 256 MiB).
pub(crate) fn memcpy_ceiling() -> f64 {
    let size = 256 << 20;
    let source = vec![1u8; size];
    let mut target = vec![0u8; size];
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let start = Instant::now();
        target.copy_from_slice(&source);
        best = best.min(start.elapsed().as_secs_f64());
        std::hint::black_box(&target);
    }
    size as f64 / best / 1e9
}

/// Single-core `c[i] += a[i]` over `float32` (GB/s of `c`), with `c` 256 MiB in memory and
/// `a` a 512 KiB block in cache, as a ring reduces a received chunk into its buffer (best of
/// 5 passes).
pub(crate) fn reduce_ceiling() -> f64 {
    let mut c = vec![1f32; 64 << 20];
    let a = vec![0.5f32; 128 << 10];
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let start = Instant::now();
        for block in c.chunks_mut(a.len()) {
            for (x, y) in block.iter_mut().zip(&a) {
                *x += *y;
            }
        }
        best = best.min(start.elapsed().as_secs_f64());
        std::hint::black_box(&mut c);
    }
    (c.len() * 4) as f64 / best / 1e9
}

/// Loopback TCP throughput (GB/s in total) with `streams` streams at once, each writing from
/// `region` bytes and reading into as many, each in turn (allocated and touched before the
/// clock starts): `CHUNK` for the cache-hot rate, an output's size for the rate from memory
/// into memory (a collective whose outputs outgrow the cache sends from such buffers too).
/// The best of four measurements is taken, two writing `CHUNK` at a time and two `PIECE`:
/// a floor should be what the best way of writing allows, and should not be raised by a
/// moment when another tenant of the machine took a core.
pub(crate) fn tcp_rate(streams: usize, region: usize) -> Result<f64, String> {
    let mut best = 0f64;
    for write in [CHUNK, PIECE, CHUNK, PIECE] {
        best = best.max(tcp_rate_once(streams, region, write)?);
    }
    Ok(best)
}

fn tcp_rate_once(streams: usize, region: usize, write: usize) -> Result<f64, String> {
    let region = region.max(CHUNK);
    let per_stream = TOTAL / streams / CHUNK;
    let mut pairs = Vec::new();
    for _ in 0..streams {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        let mut buffer = vec![1u8; region];
        let reader = std::thread::spawn(move || -> std::io::Result<usize> {
            let (mut stream, _) = listener.accept()?;
            let (mut received, mut at) = (0, 0);
            loop {
                let end = (at + CHUNK).min(region);
                match stream.read(&mut buffer[at..end])? {
                    0 => return Ok(received),
                    n => {
                        received += n;
                        at = if at + n >= region { 0 } else { at + n };
                    }
                }
            }
        });
        let stream = std::net::TcpStream::connect(address).map_err(|e| e.to_string())?;
        pairs.push((reader, stream, vec![7u8; region]));
    }
    let start = Instant::now();
    let mut threads = Vec::new();
    for (reader, mut stream, data) in pairs {
        threads.push(std::thread::spawn(move || -> std::io::Result<()> {
            for k in 0..per_stream {
                let at = k * CHUNK % (region - region % CHUNK);
                for piece in data[at..at + CHUNK].chunks(write) {
                    stream.write_all(piece)?;
                }
            }
            drop(stream);
            let received = reader
                .join()
                .map_err(|_| std::io::Error::other("reader panicked"))??;
            if received == per_stream * CHUNK {
                Ok(())
            } else {
                Err(std::io::Error::other(format!(
                    "a stream delivered {received} bytes"
                )))
            }
        }));
    }
    for thread in threads {
        thread
            .join()
            .map_err(|_| "a stream's thread panicked")?
            .map_err(|e| e.to_string())?;
    }
    Ok((streams * per_stream * CHUNK) as f64 / start.elapsed().as_secs_f64() / 1e9)
}

/// The largest CPU cache this machine reports (Linux's sysfs), else 32 MiB.
pub(crate) fn last_level_cache() -> u64 {
    (0..8)
        .filter_map(|index| {
            let path = format!("/sys/devices/system/cpu/cpu0/cache/index{index}/size");
            let text = std::fs::read_to_string(path).ok()?;
            let text = text.trim();
            let (digits, scale) = match text.strip_suffix('K') {
                Some(kib) => (kib, 1 << 10),
                None => match text.strip_suffix('M') {
                    Some(mib) => (mib, 1 << 20),
                    None => (text, 1),
                },
            };
            Some(digits.parse::<u64>().ok()? * scale)
        })
        .max()
        .unwrap_or(DEFAULT_CACHE)
}

/// Bytes a collective's ring moves through loopback in total (all ranks), for the big
/// buffer `bytes`; how many of them land in the ranks' outputs (the rest land in scratch
/// buffers that stay in cache); and whether they move on `ranks` streams at once (else one
/// at a time).
fn loopback_traffic(op: &str, ranks: u64, bytes: u64) -> (u64, u64, bool) {
    match op {
        // The reduce-scatter half is received into scratch, the all-gather half into the
        // output.
        "all_sum" => (2 * (ranks - 1) * bytes, (ranks - 1) * bytes, true),
        // Every rank but one receives the big buffer's worth (a broadcast's non-roots, an
        // all-gather's or all-to-all's (n − 1)/n of it on each of n ranks).
        "all_gather" | "broadcast" | "all_to_all" => {
            ((ranks - 1) * bytes, (ranks - 1) * bytes, true)
        }
        "sum_scatter" => ((ranks - 1) * bytes, 0, true),
        // A ping-pong's time is one way (half the round trip): the message crosses once.
        _ => (bytes, bytes, false),
    }
}

/// Whether `op`'s floor counts bytes landing in outputs, on streams at once (so it needs the
/// rate into memory when the outputs outgrow the cache).
pub(crate) fn lands_in_outputs(op: &str) -> bool {
    let (_, into_outputs, parallel) = loopback_traffic(op, 2, 1);
    into_outputs > 0 && parallel
}

/// Bytes all ranks together reduce (received bytes combined into their buffers) in `op`.
fn reduced_bytes(op: &str, ranks: u64, bytes: u64) -> u64 {
    match op {
        "all_sum" | "sum_scatter" => (ranks - 1) * bytes,
        _ => 0,
    }
}

/// The loopback ceilings of a run.
pub(crate) struct Ceilings {
    /// One stream, cache-hot (GB/s).
    pub(crate) one: f64,
    /// (streams, GB/s) with as many streams at once as ranks, cache-hot.
    pub(crate) together: Vec<(u64, f64)>,
    /// (streams, output bytes, GB/s) sent from and received into memory of an output's size, for outputs
    /// that together outgrow `cache`.
    pub(crate) into_memory: Vec<(u64, u64, f64)>,
    /// The last-level cache (bytes).
    pub(crate) cache: u64,
    /// Single-core reduction rate (GB/s), and the cores the ranks share.
    pub(crate) reduce: f64,
    pub(crate) cores: u64,
}

impl Ceilings {
    /// Measures one stream and `ranks` streams at once, cache-hot.
    pub(crate) fn measure(ranks: &[usize]) -> Result<Ceilings, String> {
        let one = tcp_rate(1, CHUNK)?;
        let mut together = Vec::new();
        for &n in ranks {
            together.push((n as u64, tcp_rate(n, CHUNK)?));
        }
        Ok(Ceilings {
            one,
            together,
            into_memory: Vec::new(),
            cache: last_level_cache(),
            reduce: reduce_ceiling(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        })
    }

    /// Whether the outputs of `ranks` ranks of `bytes` each outgrow the cache.
    pub(crate) fn outgrows_cache(&self, ranks: u64, bytes: u64) -> bool {
        ranks * bytes > self.cache
    }

    /// Measures the rate into memory for each (ranks, output bytes) whose outputs outgrow
    /// the cache and that is not measured yet.
    pub(crate) fn measure_into_memory(&mut self, rows: &[(u64, u64)]) -> Result<(), String> {
        for &(ranks, bytes) in rows {
            let known = self
                .into_memory
                .iter()
                .any(|&(n, b, _)| (n, b) == (ranks, bytes));
            if self.outgrows_cache(ranks, bytes) && !known {
                let rate = tcp_rate(ranks as usize, bytes as usize)?;
                self.into_memory.push((ranks, bytes, rate));
            }
        }
        Ok(())
    }

    /// The least time (µs) for `op` on `ranks` ranks: loopback carrying its traffic (the
    /// bytes landing in outputs at the rate into memory where one was measured, the rest at
    /// the cache-hot rate of as many streams as ranks; for a ping-pong, the best cache-hot
    /// rate measured, since a message can be split over streams), plus its reductions spread
    /// over every core.
    pub(crate) fn floor_us(&self, op: &str, ranks: u64, bytes: u64) -> f64 {
        let (traffic, into_outputs, parallel) = loopback_traffic(op, ranks, bytes);
        let hot = if parallel {
            self.together
                .iter()
                .find(|(n, _)| *n == ranks)
                .map_or(self.one, |(_, rate)| *rate)
        } else {
            self.together
                .iter()
                .map(|(_, rate)| *rate)
                .fold(self.one, f64::max)
        };
        let memory = self
            .into_memory
            .iter()
            .find(|&&(n, b, _)| n == ranks && b == bytes && lands_in_outputs(op))
            .map(|&(_, _, rate)| rate);
        let seconds = match memory {
            Some(rate) => {
                (traffic - into_outputs) as f64 / (hot * 1e9) + into_outputs as f64 / (rate * 1e9)
            }
            None => traffic as f64 / (hot * 1e9),
        };
        let reducing =
            reduced_bytes(op, ranks, bytes) as f64 / (self.reduce * 1e9) / self.cores as f64;
        (seconds + reducing) * 1e6
    }

    pub(crate) fn describe(&self) -> String {
        let together: Vec<String> = self
            .together
            .iter()
            .map(|(n, rate)| format!("{n} at once {rate:.2} GB/s"))
            .collect();
        let memory: Vec<String> = self
            .into_memory
            .iter()
            .map(|(n, bytes, rate)| {
                format!("{n} at once into {} MB each {rate:.2} GB/s", bytes >> 20)
            })
            .collect();
        let mut text = format!(
            "reduction (f32 add, one core) {:.2} GB/s on {} cores; loopback TCP: one stream {:.2} GB/s; {}",
            self.reduce,
            self.cores,
            self.one,
            together.join(", ")
        );
        if !memory.is_empty() {
            text += &format!(
                "; from memory into memory (outputs beyond the {} MB cache): {}",
                self.cache >> 20,
                memory.join(", ")
            );
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ceilings() -> Ceilings {
        Ceilings {
            one: 1.0,
            together: vec![(4, 2.0)],
            into_memory: Vec::new(),
            cache: 32 << 20,
            reduce: f64::INFINITY,
            cores: 2,
        }
    }

    #[test]
    fn loopback_floors_count_every_rank_s_traffic() {
        let ceilings = ceilings();
        // all_sum on 4 ranks: each sends 2 · 3/4 of the buffer, 6 MB in all at 2 GB/s.
        assert_eq!(ceilings.floor_us("all_sum", 4, 1_000_000), 3000.0);
        // all_gather: 3/4 each, 3 MB in all.
        assert_eq!(ceilings.floor_us("all_gather", 4, 1_000_000), 1500.0);
        // A ping-pong's one-way time: the message crosses once, at the best rate measured
        // (here 4 streams together at 2 GB/s, against 1 GB/s on one).
        assert_eq!(ceilings.floor_us("pingpong", 4, 1_000_000), 500.0);
    }

    #[test]
    fn bytes_landing_in_outputs_beyond_the_cache_go_at_the_rate_into_memory() {
        let mut ceilings = ceilings();
        let bytes = 64 << 20;
        assert!(ceilings.outgrows_cache(4, bytes));
        assert!(!ceilings.outgrows_cache(2, 8 << 20));
        ceilings.into_memory.push((4, bytes, 1.0));
        let gb = |b: u64| b as f64 / 1e9;
        // all_sum: 3 buffers' worth into scratch at 2 GB/s, 3 into outputs at 1 GB/s.
        let want = (gb(3 * bytes) / 2.0 + gb(3 * bytes) / 1.0) * 1e6;
        assert!((ceilings.floor_us("all_sum", 4, bytes) - want).abs() < 1e-6);
        // all_gather: everything lands in outputs.
        let want = gb(3 * bytes) / 1.0 * 1e6;
        assert!((ceilings.floor_us("all_gather", 4, bytes) - want).abs() < 1e-6);
        // sum_scatter: everything lands in scratch.
        let want = gb(3 * bytes) / 2.0 * 1e6;
        assert!((ceilings.floor_us("sum_scatter", 4, bytes) - want).abs() < 1e-6);
        // Another size keeps the cache-hot rate.
        assert_eq!(ceilings.floor_us("all_gather", 4, 1_000_000), 1500.0);
    }

    #[test]
    fn reductions_add_their_cpu_time_spread_over_the_cores() {
        let mut ceilings = ceilings();
        ceilings.reduce = 1.0;
        // all_sum on 4 ranks reduces 3 buffers' worth: 3 MB at 1 GB/s on 2 cores, 1.5 ms.
        let close = |got: f64, want: f64| (got - want).abs() < 1e-6;
        assert!(close(ceilings.floor_us("all_sum", 4, 1_000_000), 4500.0));
        assert!(close(
            ceilings.floor_us("sum_scatter", 4, 1_000_000),
            3000.0
        ));
        // Gathers and ping-pongs reduce nothing.
        assert_eq!(ceilings.floor_us("all_gather", 4, 1_000_000), 1500.0);
        assert_eq!(ceilings.floor_us("pingpong", 4, 1_000_000), 500.0);
    }

    #[test]
    fn a_stream_into_a_large_region_delivers_every_byte() {
        // Small enough for a test: 2 streams, each cycling through 8 MiB.
        let rate = tcp_rate(2, 8 << 20).expect("loopback");
        assert!(rate > 0.0 && rate.is_finite());
    }

    #[test]
    fn the_last_level_cache_is_at_least_a_mebibyte() {
        assert!(last_level_cache() >= 1 << 20);
    }
}
