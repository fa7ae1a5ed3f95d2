//! Rounds of `bench-distributed` and the machine's noise during them.
//!
//! With `--repeat N` every side (nuvec, MLX, Open MPI, JACCL) runs each collective N times,
//! the rounds alternating which side goes first, and a point's median is the median of its
//! rounds' medians: on a shared virtual machine one run's median moves with the neighbours'
//! load, and a single unlucky run no longer decides a ratio. Each run also records the share
//! of the machine's CPU time that the hypervisor stole meanwhile (`steal` in Linux's
//! `/proc/stat`), so a report shows how noisy its machine was.

use serde_json::{json, Value};

/// The machine's CPU time so far, in clock ticks: (stolen, all). `None` where the system does
/// not report it (anything but Linux).
pub(crate) fn cpu_ticks() -> Option<(u64, u64)> {
    #[cfg(target_os = "linux")]
    {
        std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|stat| ticks_of(&stat))
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// (stolen, all) from the text of `/proc/stat`: its first line adds up user, nice, system,
/// idle, iowait, irq, softirq and steal time (guest time is counted in user time already).
fn ticks_of(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|line| line.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    Some((*fields.get(7)?, fields.iter().sum()))
}

/// The percentage of CPU time stolen between two samples of [`cpu_ticks`].
pub(crate) fn steal_percent(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<f64> {
    let ((stolen_before, all_before), (stolen_after, all_after)) = (before?, after?);
    let all = all_after.checked_sub(all_before)?;
    (all > 0).then(|| 100.0 * stolen_after.saturating_sub(stolen_before) as f64 / all as f64)
}

/// Records `steal` (percent, when known) on each record of one run.
pub(crate) fn mark_steal(records: &mut [Value], steal: Option<f64>) {
    for record in records {
        if let (Some(fields), Some(steal)) = (record.as_object_mut(), steal) {
            fields.insert("steal_pct".into(), json!((steal * 10.0).round() / 10.0));
        }
    }
}

fn point(record: &Value) -> (Value, Value, Value, Value) {
    (
        record["op"].clone(),
        record["ranks"].clone(),
        record["bytes"].clone(),
        record["dtype"].clone(),
    )
}

/// One record per point from one side's records of every round, in first-seen order: the
/// median of the rounds' medians (bus bandwidth scaled to it), the least minimum, every
/// round's median, steal share and cross-core round trips, and whether every round's result was right. A point that
/// any round reported as an error keeps that record.
pub(crate) fn merge(records: &[Value]) -> Vec<Value> {
    let mut points: Vec<(Value, Value, Value, Value)> = Vec::new();
    for record in records {
        let key = point(record);
        if !points.contains(&key) {
            points.push(key);
        }
    }
    points
        .iter()
        .map(|key| {
            let rounds: Vec<&Value> = records.iter().filter(|r| point(r) == *key).collect();
            if let Some(error) = rounds.iter().find(|r| r.get("error").is_some()) {
                return (*error).clone();
            }
            let medians: Vec<f64> = rounds
                .iter()
                .map(|r| r["median_us"].as_f64().unwrap_or(f64::NAN))
                .collect();
            let merged_median = crate::stats::median(&medians).unwrap_or(f64::NAN);
            let first = rounds[0];
            let first_median = first["median_us"].as_f64().unwrap_or(f64::NAN);
            let busbw =
                first["busbw_gbps"].as_f64().unwrap_or(f64::NAN) * first_median / merged_median;
            let min = rounds
                .iter()
                .filter_map(|r| r["min_us"].as_f64())
                .fold(f64::INFINITY, f64::min);
            let mut merged = first.clone();
            if let Some(fields) = merged.as_object_mut() {
                fields.insert("median_us".into(), json!(merged_median));
                fields.insert("busbw_gbps".into(), json!(busbw));
                fields.insert("min_us".into(), json!(min));
                fields.insert("rounds_median_us".into(), json!(medians));
                let steals: Vec<Value> = rounds.iter().map(|r| r["steal_pct"].clone()).collect();
                fields.remove("steal_pct");
                fields.insert("rounds_steal_pct".into(), Value::Array(steals));
                let cores: Vec<Value> = rounds.iter().map(|r| r["cross_core_ns"].clone()).collect();
                fields.remove("cross_core_ns");
                fields.insert("rounds_cross_core_ns".into(), Value::Array(cores));
                let ok = rounds.iter().all(|r| r["ok"].as_bool() == Some(true));
                fields.insert("ok".into(), json!(ok));
            }
            merged
        })
        .collect()
}

/// "median M% (most X%)" of the steal shares of `records` (one per run and point), or a
/// sentence saying the system does not report it.
pub(crate) fn describe_steal(records: &[Value]) -> String {
    let steals: Vec<f64> = records
        .iter()
        .filter_map(|r| r["steal_pct"].as_f64())
        .collect();
    if steals.is_empty() {
        return "not reported by this system".into();
    }
    let most = steals.iter().copied().fold(0.0, f64::max);
    format!(
        "median {:.1}% (most {most:.1}%)",
        crate::stats::median(&steals).unwrap_or(0.0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 50 800 10 2 3 30 0 0\ncpu0 50 2 25 400 5 1 1 15 0 0\n";

    #[test]
    fn steal_is_read_from_the_machine_wide_cpu_line() {
        assert_eq!(ticks_of(STAT), Some((30, 1000)));
        assert_eq!(ticks_of("intr 5\n"), None);
        let later = Some((80, 1500));
        assert_eq!(steal_percent(Some((30, 1000)), later), Some(10.0));
        assert_eq!(steal_percent(Some((30, 1000)), Some((30, 1000))), None);
        assert_eq!(steal_percent(None, later), None);
    }

    fn record(median: f64, min: f64, steal: f64) -> Value {
        json!({"impl": "nuvec", "op": "all_sum", "bytes": 4096, "ranks": 2, "dtype": "float32",
               "median_us": median, "min_us": min, "busbw_gbps": 4096.0 / median / 1e3,
               "ok": true, "steal_pct": steal})
    }

    #[test]
    fn a_point_takes_the_median_of_its_rounds_medians() {
        let other = json!({"op": "all_gather", "ranks": 2, "bytes": 4096, "dtype": "float32",
                           "median_us": 7.0, "min_us": 6.0, "busbw_gbps": 1.0, "ok": true});
        let rounds = [
            record(30.0, 25.0, 1.0),
            other,
            record(10.0, 9.0, 12.5),
            record(20.0, 15.0, 3.0),
        ];
        let merged = merge(&rounds);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0]["median_us"], json!(20.0));
        assert_eq!(merged[0]["min_us"], json!(9.0));
        assert_eq!(merged[0]["rounds_median_us"], json!([30.0, 10.0, 20.0]));
        assert_eq!(merged[0]["rounds_steal_pct"], json!([1.0, 12.5, 3.0]));
        let busbw = merged[0]["busbw_gbps"].as_f64().unwrap();
        assert!((busbw - 4096.0 / 20.0 / 1e3).abs() < 1e-12);
        assert_eq!(merged[1]["op"], json!("all_gather"));
        assert_eq!(merged[1]["median_us"], json!(7.0));
        // An even count of rounds takes the mean of the middle two.
        let two = merge(&[record(10.0, 9.0, 0.0), record(30.0, 20.0, 0.0)]);
        assert_eq!(two[0]["median_us"], json!(20.0));
    }

    #[test]
    fn a_wrong_result_in_any_round_marks_the_point_and_errors_are_kept() {
        let mut bad = record(10.0, 9.0, 0.0);
        bad["ok"] = json!(false);
        let merged = merge(&[record(20.0, 15.0, 0.0), bad]);
        assert_eq!(merged[0]["ok"], json!(false));
        let error = json!({"op": "all_sum", "ranks": 2, "bytes": 4096, "dtype": "float32",
                           "error": "unsupported"});
        let merged = merge(&[record(20.0, 15.0, 0.0), error.clone()]);
        assert_eq!(merged, vec![error]);
    }

    #[test]
    fn steal_is_summarised_over_runs() {
        let runs = [
            record(1.0, 1.0, 2.0),
            record(1.0, 1.0, 8.0),
            record(1.0, 1.0, 4.0),
        ];
        assert_eq!(describe_steal(&runs), "median 4.0% (most 8.0%)");
        assert_eq!(
            describe_steal(&[json!({"median_us": 1.0})]),
            "not reported by this system"
        );
    }
}
