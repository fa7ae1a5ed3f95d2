//! `nuvec trace DIR` on files written by the flight recorder's own writer: the ranks side by
//! side and the first operation at which they differ.

use nuvec_core::distributed::{records_json, Record, State};
use nuvec_core::DType;
use std::panic::Location;
use std::process::Command;
use std::time::{Duration, UNIX_EPOCH};

/// A record of `op` on 8 floats that ran for 2.5 s (unless running).
fn record(sequence: u64, op: &'static str, state: State) -> Record {
    let started = UNIX_EPOCH + Duration::from_secs(1_800_000_000 + sequence);
    Record {
        sequence,
        op,
        dtype: DType::F32,
        shape: vec![8],
        bytes: 32,
        peer: None,
        location: Location::caller(),
        started,
        ended: (state != State::Running).then(|| started + Duration::from_millis(2500)),
        state,
    }
}

fn nuvec_trace(dir: &std::path::Path) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_nuvec"))
        .arg("trace")
        .arg(dir)
        .output()
        .expect("running nuvec trace");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn nuvec_trace_points_at_the_first_operation_where_the_ranks_differ() {
    let dir = std::env::temp_dir().join(format!("nuvec-trace-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let failed = || State::Failed("[all_sum] rank 1: another call".into());
    // Ranks 0 and 1 exchange a message between their collectives: rows of their own that
    // differ by design.
    let message = |op, peer| Record {
        peer: Some(peer),
        ..record(0, op, State::Done)
    };
    let rank0 = [
        record(0, "all_sum", State::Done),
        message("send", 1),
        record(1, "all_sum", failed()),
    ];
    let rank1 = [
        record(0, "all_sum", State::Done),
        message("recv", 0),
        record(1, "all_gather", failed()),
    ];
    // Rank 2 stopped before its second call.
    let rank2 = [record(0, "all_sum", State::Done)];
    for (rank, records) in [(0, &rank0[..]), (1, &rank1[..]), (2, &rank2[..])] {
        let path = dir.join(format!("rank-{rank}.json"));
        std::fs::write(path, records_json(rank, 3, records)).unwrap();
    }
    let (ok, out, err) = nuvec_trace(&dir);
    assert!(ok, "{err}");
    assert!(out.contains("1\tall_sum float32 [8] (trace.rs:"), "{out}");
    assert!(
        out.contains("0.1\tsend #0 float32 [8] rank 1 (trace.rs:")
            && out.contains("\trecv #0 float32 [8] rank 0 (trace.rs:"),
        "{out}"
    );
    assert!(out.contains("<- first divergence"), "{out}");
    assert!(
        out.contains("all_sum float32 [8] (trace.rs:") && out.contains(") failed after 2.5 s"),
        "{out}"
    );
    assert!(
        out.contains("the ranks diverge at #1: rank 0 in all_sum")
            && out.contains("rank 1 in all_gather")
            && out.contains("rank 2 never reached #1"),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    let (ok, _, err) = nuvec_trace(&dir);
    assert!(!ok && err.starts_with("nuvec trace: reading"), "{err}");
}
