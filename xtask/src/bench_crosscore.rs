//! How fast this machine's cores pass a cache line to each other, sampled around every run
//! of `bench-distributed` by `scripts/bench/cross_core.rs` (two threads pinned to cores 0
//! and 1).
//!
//! On the project's 2-core VMs the time for a cache line to go from one core to the other and
//! back moves between two levels, for seconds to minutes at a time: about 75 ns, and about
//! 320 ns (a C probe, 2026-12-02: `67 79 312 322 82 77 …`, one sample every 3 s). Our reading
//! is that the host places the two virtual CPUs on cores that share a cache or on cores that
//! do not. Every transfer between ranks crosses cores, so a run taken in the slow state is
//! slower for any side: the report records the state next to each run's times.

use crate::bench_bare_ring::build_script;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The probe's source, from the workspace root.
const SOURCE: &str = "scripts/bench/cross_core.rs";

/// Builds the probe into `target/cross_core`.
pub(crate) fn build(root: &Path) -> Result<PathBuf, String> {
    build_script(root, SOURCE, "cross_core")
}

/// One reading of the probe `binary`, in nanoseconds; `None` when it cannot run or prints
/// something else than a number.
pub(crate) fn cross_core_ns(binary: Option<&Path>) -> Option<f64> {
    let output = Command::new(binary?).output().ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8_lossy(&output.stdout).trim().parse().ok()
}

/// Records the probe's readings before and after one run on each of its records.
pub(crate) fn mark_cross_core(records: &mut [Value], before: Option<f64>, after: Option<f64>) {
    for record in records {
        if let Some(fields) = record.as_object_mut() {
            let round = |ns: Option<f64>| ns.map(|ns| json!(ns.round()));
            fields.insert("cross_core_ns".into(), json!([round(before), round(after)]));
        }
    }
}

/// "before–after ns" for the progress line.
pub(crate) fn describe(before: Option<f64>, after: Option<f64>) -> String {
    match (before, after) {
        (Some(before), Some(after)) => format!("{before:.0} ns before, {after:.0} ns after"),
        _ => "not measured".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_builds_and_reads_a_positive_finite_time_below_a_millisecond() {
        let root = crate::workspace_root();
        let binary = build(&root).expect("rustc builds the probe");
        let ns = cross_core_ns(Some(&binary)).expect("a reading");
        assert!(ns.is_finite() && ns > 0.0 && ns < 1e6, "{ns} ns");
        assert_eq!(cross_core_ns(None), None);
    }

    #[test]
    fn readings_land_on_every_record_of_the_run() {
        let mut records = vec![json!({"op": "all_sum"}), json!({"op": "all_sum"})];
        mark_cross_core(&mut records, Some(74.6), Some(321.2));
        for record in &records {
            assert_eq!(record["cross_core_ns"], json!([75.0, 321.0]));
        }
        assert_eq!(describe(Some(74.6), None), "not measured");
    }
}
