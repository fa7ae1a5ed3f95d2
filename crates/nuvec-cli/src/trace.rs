//! `nuvec trace DIR`: the flight recorder's files (`rank-N.json`, written on a failure where
//! `NUVEC_DISTRIBUTED_TRACE` pointed), shown side by side, one row per collective number (every
//! rank numbers the same program's collectives alike), with the first number at which the
//! ranks did different things (or where some stopped) pointed out. A rank's messages (`send`,
//! `recv`, numbered per peer) sit in rows `n.k` under the collective `n` they followed.

use clap::Args;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub(crate) struct TraceArgs {
    /// The folder the ranks wrote their records to.
    dir: PathBuf,
    /// Rows to show before the first divergence (all of them after it).
    #[arg(long, default_value_t = 8)]
    context: usize,
}

/// Where a record sits: `(n + 1, 0)` for collective `n`, `(n + 1, k)` for the `k`th message
/// after it (`(first, k)` before the first collective kept, numbered `first`).
type Row = (u64, u64);

/// One rank's file: its rank and its records by row.
struct RankTrace {
    rank: u64,
    records: BTreeMap<Row, String>,
}

fn is_message(record: &Value) -> bool {
    matches!(record["op"].as_str(), Some("send" | "recv"))
}

/// Each record's row, in the order the rank made them (`written`: when the file was, in
/// nanoseconds since the Unix epoch, for how long running records had run).
fn rows(records: &[Value], written: Option<u64>) -> Vec<(Row, String)> {
    let first = records
        .iter()
        .find(|r| !is_message(r))
        .and_then(|r| r["sequence"].as_u64())
        .unwrap_or(0);
    let mut at = (first, 0);
    records
        .iter()
        .filter_map(|r| {
            let n = r["sequence"].as_u64()?;
            at = match is_message(r) {
                true => (at.0, at.1 + 1),
                false => (n + 1, 0),
            };
            Some((at, cell(r, written)))
        })
        .collect()
}

/// A row's label: `n` for collective `n`, `n.k` for a message after it (`-.k` before any).
fn label((base, sub): Row) -> String {
    match (base, sub) {
        (base, 0) => (base - 1).to_string(),
        (0, sub) => format!("-.{sub}"),
        (base, sub) => format!("{}.{sub}", base - 1),
    }
}

/// How long a record ran, as a cell ends: ` after 30.0 s` (failed), ` for 2.5 s` (running,
/// until the file was written); nothing for one that finished or without the times.
fn how_long(record: &Value, state: &str, written: Option<u64>) -> String {
    let start = record["start_ns"].as_u64();
    let end = match state {
        "failed" => record["end_ns"].as_u64(),
        "running" => written,
        _ => None,
    };
    let (Some(start), Some(end)) = (start, end) else {
        return String::new();
    };
    let seconds = end.saturating_sub(start) as f64 / 1e9;
    let word = if state == "failed" { "after" } else { "for" };
    match seconds {
        s if s >= 0.1 => format!(" {word} {s:.1} s"),
        s => format!(" {word} {:.1} ms", s * 1e3),
    }
}

/// A record as a cell: `all_sum float32 [8] (train.rs:88) failed after 30.0 s`.
fn cell(record: &Value, written: Option<u64>) -> String {
    let text = |key: &str| record[key].as_str().unwrap_or("?").to_string();
    let file = text("file");
    let file = Path::new(&file)
        .file_name()
        .map_or_else(|| file.clone(), |f| f.to_string_lossy().into_owned());
    let peer = match record["peer"].as_u64() {
        Some(peer) => format!(" rank {peer}"),
        None => String::new(),
    };
    let number = match is_message(record) {
        true => format!(" #{}", record["sequence"]),
        false => String::new(),
    };
    let shape = record["shape"].to_string().replace(',', ", ");
    let state = match text("state").as_str() {
        "done" => String::new(),
        other => format!(" {other}{}", how_long(record, other, written)),
    };
    format!(
        "{}{number} {} {shape}{peer} ({file}:{}){state}",
        text("op"),
        text("dtype"),
        record["line"]
    )
}

fn read(path: &Path) -> Result<RankTrace, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a trace file: {e}", path.display()))?;
    let rank = value["rank"]
        .as_u64()
        .ok_or_else(|| format!("{} names no rank", path.display()))?;
    let records = value["records"]
        .as_array()
        .ok_or_else(|| format!("{} has no records list", path.display()))?;
    Ok(RankTrace {
        rank,
        records: rows(records, value["written_ns"].as_u64())
            .into_iter()
            .collect(),
    })
}

/// What the operation cells say without where they were called and how they ended: two
/// ranks agree at a number when these are equal.
fn what(cell: &str) -> &str {
    cell.split(" (").next().unwrap_or(cell)
}

pub(crate) fn run(args: TraceArgs) -> Result<i32, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(&args.dir)
        .map_err(|e| format!("reading {}: {e}", args.dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| n.starts_with("rank-") && n.ends_with(".json"))
        })
        .collect();
    if files.is_empty() {
        return Err(format!(
            "no rank-N.json in {} (the ranks write them there on a failure when \
             NUVEC_DISTRIBUTED_TRACE names the folder)",
            args.dir.display()
        ));
    }
    files.sort();
    let mut ranks = files
        .iter()
        .map(|f| read(f))
        .collect::<Result<Vec<_>, _>>()?;
    ranks.sort_by_key(|r| r.rank);
    let numbers: Vec<Row> = {
        let mut all: Vec<Row> = ranks
            .iter()
            .flat_map(|r| r.records.keys().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    };
    // The first collective where a rank has no record while others do, or where they
    // differ (messages differ between ranks by design).
    let first_kept = ranks
        .iter()
        .filter_map(|r| r.records.keys().find(|row| row.1 == 0).copied())
        .max();
    let diverges = numbers.iter().copied().find(|n| {
        if n.1 != 0 || first_kept.is_some_and(|first| *n < first) {
            return false;
        }
        let cells: Vec<Option<&str>> = ranks
            .iter()
            .map(|r| r.records.get(n).map(|c| what(c)))
            .collect();
        cells.iter().any(|c| *c != cells[0])
    });
    let start = diverges.map_or(0, |d| {
        numbers
            .iter()
            .position(|n| *n == d)
            .unwrap_or(0)
            .saturating_sub(args.context)
    });
    let header: Vec<String> = ranks.iter().map(|r| format!("rank {}", r.rank)).collect();
    println!("#\t{}", header.join("\t"));
    for &n in &numbers[start..] {
        let cells: Vec<&str> = ranks
            .iter()
            .map(|r| r.records.get(&n).map_or("-", String::as_str))
            .collect();
        let mark = if Some(n) == diverges {
            "  <- first divergence"
        } else {
            ""
        };
        println!("{}\t{}{mark}", label(n), cells.join("\t"));
    }
    match diverges {
        Some(n) => {
            let at: Vec<String> = ranks
                .iter()
                .map(|r| match r.records.get(&n) {
                    Some(cell) => format!("rank {} in {cell}", r.rank),
                    None => format!("rank {} never reached #{}", r.rank, label(n)),
                })
                .collect();
            println!("the ranks diverge at #{}: {}", label(n), at.join("; "));
        }
        None => println!("the ranks agree on every operation recorded"),
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_says_how_long_a_failed_or_running_record_ran() {
        let record = |state: &str| {
            serde_json::json!({"sequence": 3, "op": "all_sum", "dtype": "float32", "shape": [8],
                "file": "src/train.rs", "line": 9, "start_ns": 1_000_000_000u64,
                "end_ns": 31_000_000_000u64, "state": state})
        };
        let written = Some(1_004_500_000u64);
        assert_eq!(
            cell(&record("failed"), written),
            "all_sum float32 [8] (train.rs:9) failed after 30.0 s"
        );
        assert_eq!(
            cell(&record("running"), written),
            "all_sum float32 [8] (train.rs:9) running for 4.5 ms"
        );
        assert_eq!(
            cell(&record("done"), written),
            "all_sum float32 [8] (train.rs:9)"
        );
        // Files without the times (written before they were kept) still read.
        let mut old = record("failed");
        old.as_object_mut().unwrap().remove("start_ns");
        assert_eq!(cell(&old, None), "all_sum float32 [8] (train.rs:9) failed");
    }
}
