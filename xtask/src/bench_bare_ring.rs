//! The bare ring of `bench-distributed`: `scripts/bench/ring_floor.rs`, the ring backend's
//! all-reduce algorithm over loopback written the plainest way (blocking threads, no headers,
//! checks, graph, timeouts or polling), built with `rustc` and run for each large `float32`
//! `all_sum` row, as one more side of the comparison: what the algorithm takes without the
//! ring's protocol and design, measured in the same run.

use crate::stdout_of;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The smallest `all_sum` the bare ring runs for: below this, its sixteen threads' wake-ups
/// and barriers, not bandwidth, decide its time.
pub(crate) const FROM_BYTES: u64 = 16 << 20;

/// The probe's source, from the workspace root.
const SOURCE: &str = "scripts/bench/ring_floor.rs";

/// Builds the probe into `target/ring_floor` (with the `rustc` beside `cargo`).
pub(crate) fn build(root: &Path) -> Result<PathBuf, String> {
    build_script(root, SOURCE, "ring_floor")
}

/// Builds the standalone script `source` (a path from the workspace root, compiled by `rustc`
/// alone) into `target/{name}`.
pub(crate) fn build_script(root: &Path, source: &str, name: &str) -> Result<PathBuf, String> {
    let binary = root.join("target").join(name);
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let status = Command::new(&rustc)
        .args(["--edition", "2021", "-O"])
        .arg(root.join(source))
        .arg("-o")
        .arg(&binary)
        .status()
        .map_err(|e| format!("running {rustc} on {source}: {e}"))?;
    if !status.success() {
        return Err(format!("{rustc} could not build {source} ({status})"));
    }
    Ok(binary)
}

/// The lanes the ring gives an all-reduce of `bytes` on `ranks` ranks with one connection
/// between neighbours (`ring/algorithms/lanes.rs`: a second ring the other way round on three ranks or
/// more, each lane at least 1 MiB).
fn lanes(ranks: u64, bytes: u64) -> u64 {
    if ranks >= 3 && bytes >= 2 << 20 {
        2
    } else {
        1
    }
}

/// The ring's chunk for a lane of `bytes` (`ring/mod.rs`, `chunk_bytes`).
fn chunk(bytes: u64) -> u64 {
    if bytes >= 32 << 20 {
        256 << 10
    } else {
        512 << 10
    }
}

/// Iterations for about a second of `bytes` at the bare ring's pace, at least 7.
fn iterations(bytes: u64) -> u64 {
    ((2 << 30) / bytes.max(1)).clamp(7, 31)
}

/// Bytes of a size as the rank programs take it: a count with an optional `K`, `M` or `G`.
pub(crate) fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, scale) = match text.chars().last()? {
        'K' => (&text[..text.len() - 1], 1 << 10),
        'M' => (&text[..text.len() - 1], 1 << 20),
        'G' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<u64>().ok().map(|n| n * scale)
}

/// The bare ring's record for each size of `sizes` from [`FROM_BYTES`] up on `ranks` ranks,
/// shaped like the rank programs' (`float32`; bus bandwidth with the all-reduce's factor).
pub(crate) fn run(binary: &Path, ranks: u64, sizes: &str) -> Result<Vec<Value>, String> {
    let mut records = Vec::new();
    for size in sizes.split(',') {
        let bytes = parse_size(size).ok_or_else(|| format!("--sizes: {size:?} is not a size"))?;
        if bytes < FROM_BYTES {
            continue;
        }
        let lanes = lanes(ranks, bytes);
        let mut command = Command::new(binary);
        command.args(
            [bytes, iterations(bytes), ranks, lanes, chunk(bytes / lanes)].map(|n| n.to_string()),
        );
        let stdout = stdout_of(
            &mut command,
            &binary.display().to_string(),
            "the bare ring failed",
        )?;
        let stdout = String::from_utf8_lossy(&stdout);
        let median = stdout
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find_map(|line| line["median_us"].as_f64())
            .ok_or_else(|| format!("the bare ring printed no median: {stdout}"))?;
        let factor = 2.0 * (ranks - 1) as f64 / ranks as f64;
        records.push(json!({
            "impl": "bare-ring",
            "op": "all_sum",
            "bytes": bytes,
            "ranks": ranks,
            "dtype": "float32",
            "lanes": lanes,
            "median_us": median,
            "busbw_gbps": bytes as f64 * factor / median / 1e3,
            "ok": true,
        }));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_the_rank_programs_read_them() {
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size("256M"), Some(256 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("100"), Some(100));
        assert_eq!(parse_size("M"), None);
        assert_eq!(parse_size("x4"), None);
    }

    #[test]
    fn lanes_and_chunks_follow_the_ring() {
        assert_eq!(lanes(2, 256 << 20), 1);
        assert_eq!(lanes(4, 256 << 20), 2);
        assert_eq!(chunk(128 << 20), 256 << 10);
        assert_eq!(chunk(8 << 20), 512 << 10);
    }

    #[test]
    fn the_bare_ring_builds_runs_and_reports_a_checked_median() {
        let root = crate::workspace_root();
        let binary = build(&root).expect("rustc builds the probe");
        let records = run(&binary, 3, "4K,16M").expect("the probe runs");
        assert_eq!(records.len(), 1, "only sizes from 16 MB: {records:?}");
        assert_eq!(records[0]["bytes"], 16 << 20);
        assert_eq!(records[0]["lanes"], 2);
        assert!(records[0]["median_us"].as_f64().is_some_and(|m| m > 0.0));
    }
}
