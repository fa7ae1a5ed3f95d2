//! The table of `bench-distributed`: one row per point of nuvec's results, beside MLX's,
//! the floor, the bare ring, Open MPI through shared memory and over TCP, and JACCL, with
//! nuvec's ratio to each.

use crate::bench_floor::Ceilings;
use serde_json::Value;

pub(crate) fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{} MB", b >> 20),
        b if b >= 1 << 10 => format!("{} KB", b >> 10),
        b => format!("{b} B"),
    }
}

pub(crate) fn us(value: f64) -> String {
    if value >= 1000.0 {
        format!("{:.2} ms", value / 1000.0)
    } else {
        format!("{value:.0} µs")
    }
}

pub(crate) fn key(record: &Value) -> (String, u64, u64, String) {
    (
        record["op"].as_str().unwrap_or_default().to_string(),
        record["ranks"].as_u64().unwrap_or_default(),
        record["bytes"].as_u64().unwrap_or_default(),
        record["dtype"].as_str().unwrap_or_default().to_string(),
    )
}

/// The median and bus bandwidth of the record matching `k` in `records`, as table cells, and
/// the median itself.
fn cells(records: &[Value], k: &(String, u64, u64, String)) -> (String, String, f64) {
    match records.iter().find(|t| key(t) == *k) {
        Some(t) if t.get("error").is_none() => {
            let m = t["median_us"].as_f64().unwrap_or(f64::NAN);
            let bw = t["busbw_gbps"].as_f64().unwrap_or(f64::NAN);
            (us(m), format!("{bw:.3}"), m)
        }
        Some(_) => ("unsupported".into(), "–".into(), f64::NAN),
        None => ("–".into(), "–".into(), f64::NAN),
    }
}

fn ratio(mine: f64, other: f64) -> String {
    if other.is_nan() {
        "–".into()
    } else {
        format!("{:.3}", mine / other)
    }
}

/// The results of the columns other than nuvec's and MLX's.
pub(crate) struct Peers<'a> {
    /// Open MPI with its shared-memory transport (on one host).
    pub(crate) mpi_shm: &'a [Value],
    /// Open MPI over TCP.
    pub(crate) mpi_tcp: &'a [Value],
    pub(crate) jaccl: &'a [Value],
    pub(crate) bare: &'a [Value],
}

pub(crate) fn table(
    ours: &[Value],
    theirs: &[Value],
    peers: Peers<'_>,
    ceilings: Option<&Ceilings>,
) -> String {
    let Peers {
        mpi_shm,
        mpi_tcp: mpi,
        jaccl,
        bare,
    } = peers;
    let mut out = String::from(
        "| op | ranks | dtype | size | nuvec median | MLX median | nuvec / MLX | nuvec busbw GB/s | MLX busbw GB/s | floor (loopback + reductions) | nuvec / floor | bare ring median | nuvec / bare ring | Open MPI shm median | nuvec / Open MPI shm | Open MPI TCP median | nuvec / Open MPI TCP | JACCL (emulated) median | JACCL busbw GB/s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for record in ours {
        let k = key(record);
        let mine = record["median_us"].as_f64().unwrap_or(f64::NAN);
        let (their_median, their_bw, theirs_us) = cells(theirs, &k);
        let (mpi_median, _, mpi_us) = cells(mpi, &k);
        let (shm_median, _, shm_us) = cells(mpi_shm, &k);
        let (jaccl_median, jaccl_bw, _) = cells(jaccl, &k);
        let (bare_median, _, bare_us) = cells(bare, &k);
        let checked = if record["ok"].as_bool() == Some(true) {
            ""
        } else {
            " (WRONG RESULT)"
        };
        let floor = ceilings.map_or(f64::NAN, |c| c.floor_us(&k.0, k.1, k.2));
        let floor_cell = if floor.is_finite() {
            us(floor)
        } else {
            "–".into()
        };
        out += &format!(
            "| {} | {} | {} | {} | {}{checked} | {their_median} | {} | {:.3} | {their_bw} | {} | {} | {bare_median} | {} | {shm_median} | {} | {mpi_median} | {} | {jaccl_median} | {jaccl_bw} |\n",
            k.0,
            k.1,
            k.3,
            human(k.2),
            us(mine),
            ratio(mine, theirs_us),
            record["busbw_gbps"].as_f64().unwrap_or(f64::NAN),
            floor_cell,
            ratio(mine, floor),
            ratio(mine, bare_us),
            ratio(mine, shm_us),
            ratio(mine, mpi_us),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_pairs_each_result_with_mlx_and_shows_the_ratio() {
        let ours = vec![
            json!({"op": "all_sum", "ranks": 2, "bytes": 4096, "dtype": "float32", "median_us": 40.0, "busbw_gbps": 0.1, "ok": true}),
        ];
        let theirs = vec![
            json!({"op": "all_sum", "ranks": 2, "bytes": 4096, "dtype": "float32", "median_us": 4000.0, "busbw_gbps": 0.001}),
        ];
        let over_shm = vec![
            json!({"op": "all_sum", "ranks": 2, "bytes": 4096, "dtype": "float32", "median_us": 10.0, "busbw_gbps": 0.4}),
        ];
        let over_mpi = vec![
            json!({"op": "all_sum", "ranks": 2, "bytes": 4096, "dtype": "float32", "median_us": 20.0, "busbw_gbps": 0.2}),
        ];
        let over_jaccl = vec![
            json!({"op": "all_sum", "ranks": 2, "bytes": 4096, "dtype": "float32", "median_us": 60.0, "busbw_gbps": 0.07}),
        ];
        let bare = vec![
            json!({"op": "all_sum", "ranks": 2, "bytes": 4096, "dtype": "float32", "median_us": 32.0, "busbw_gbps": 0.12}),
        ];
        // 2 GB/s on two streams at once: an all-sum of 4 KiB on 2 ranks moves 8 KiB, 4.1 µs.
        let ceilings = Ceilings {
            one: 1.0,
            together: vec![(2, 2.0)],
            into_memory: Vec::new(),
            cache: 32 << 20,
            reduce: f64::INFINITY,
            cores: 2,
        };
        let table = table(
            &ours,
            &theirs,
            Peers {
                mpi_shm: &over_shm,
                mpi_tcp: &over_mpi,
                jaccl: &over_jaccl,
                bare: &bare,
            },
            Some(&ceilings),
        );
        assert!(
            table.contains("| all_sum | 2 | float32 | 4 KB | 40 µs | 4.00 ms | 0.010 |"),
            "{table}"
        );
        assert!(
            table.contains("| 0.001 | 4 µs | 9.766 | 32 µs | 1.250 |"),
            "{table}"
        );
        assert!(
            table.ends_with("| 10 µs | 4.000 | 20 µs | 2.000 | 60 µs | 0.070 |\n"),
            "{table}"
        );
    }
}
