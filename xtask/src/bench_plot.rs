//! The SVG of `bench-distributed`: bus bandwidth against message size, one panel per
//! (rank count, collective), nuvec, MLX and the bare ring as lines, one loopback TCP stream as
//! the ceiling. `cargo xtask bench-plot RUN.json OUT.svg` draws it again from a run's JSON.

use serde_json::Value;
use std::fmt::Write;

const PANEL_W: f64 = 300.0;
const PANEL_H: f64 = 200.0;
const MARGIN: f64 = 50.0;

fn points(records: &[Value], ranks: usize, op: &str) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = records
        .iter()
        .filter(|r| r["ranks"].as_u64() == Some(ranks as u64) && r["op"].as_str() == Some(op))
        .filter(|r| r["dtype"].as_str() == Some("float32") && r.get("error").is_none())
        .filter_map(|r| Some((r["bytes"].as_f64()?, r["busbw_gbps"].as_f64()?)))
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

/// The plot as an SVG document.
pub(crate) fn svg(
    (ours, theirs, bare): (&[Value], &[Value], &[Value]),
    ceiling: f64,
    ranks: &[usize],
    ops: &[String],
) -> String {
    let columns = ops.len().max(1) as f64;
    let rows = ranks.len().max(1) as f64;
    let width = columns * (PANEL_W + MARGIN) + MARGIN;
    let height = rows * (PANEL_H + MARGIN * 1.5) + MARGIN;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{MARGIN}" y="18" font-size="14">bus bandwidth (GB/s) against size: nuvec (blue), MLX ring (orange), bare ring (green, large all_sums), one loopback TCP stream (grey)</text>"#
    );
    let all: Vec<f64> = ours
        .iter()
        .chain(theirs)
        .filter_map(|r| r["bytes"].as_f64())
        .collect();
    let (lo, hi) = all
        .iter()
        .fold((f64::INFINITY, 0f64), |(lo, hi), &b| (lo.min(b), hi.max(b)));
    let (lo, hi) = if lo.is_finite() && hi > lo {
        (lo.log2(), hi.log2())
    } else {
        (12.0, 28.0)
    };
    for (row, &n) in ranks.iter().enumerate() {
        for (column, op) in ops.iter().enumerate() {
            let x0 = MARGIN + column as f64 * (PANEL_W + MARGIN);
            let y0 = MARGIN + row as f64 * (PANEL_H + MARGIN * 1.5);
            let mine = points(ours, n, op);
            let other = points(theirs, n, op);
            let reference = points(bare, n, op);
            let top = mine
                .iter()
                .chain(&other)
                .chain(&reference)
                .map(|p| p.1)
                .fold(ceiling, f64::max)
                * 1.1;
            let x = |bytes: f64| x0 + (bytes.log2() - lo) / (hi - lo).max(1.0) * PANEL_W;
            let y = |gbps: f64| y0 + PANEL_H - gbps / top * PANEL_H;
            let _ = writeln!(
                out,
                r##"<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#999"/>"##
            );
            let _ = writeln!(
                out,
                r#"<text x="{x0}" y="{}">{op}, {n} ranks</text>"#,
                y0 - 6.0
            );
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}" text-anchor="end">{top:.2}</text>"#,
                x0 - 4.0,
                y0 + 10.0
            );
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}" text-anchor="end">0</text>"#,
                x0 - 4.0,
                y0 + PANEL_H
            );
            for (label, bytes) in [("4K", 4096.0_f64), ("1M", 1048576.0), ("256M", 268435456.0)] {
                if bytes.log2() >= lo && bytes.log2() <= hi {
                    let _ = writeln!(
                        out,
                        r#"<text x="{}" y="{}" text-anchor="middle">{label}</text>"#,
                        x(bytes),
                        y0 + PANEL_H + 14.0
                    );
                }
            }
            let _ = writeln!(
                out,
                r##"<line x1="{x0}" x2="{}" y1="{}" y2="{}" stroke="#aaa" stroke-dasharray="4 3"/>"##,
                x0 + PANEL_W,
                y(ceiling),
                y(ceiling)
            );
            for (series, colour) in [
                (&mine, "#1f77b4"),
                (&other, "#ff7f0e"),
                (&reference, "#2ca02c"),
            ] {
                if series.is_empty() {
                    continue;
                }
                let path: Vec<String> = series
                    .iter()
                    .map(|&(b, g)| format!("{:.1},{:.1}", x(b), y(g)))
                    .collect();
                let _ = writeln!(
                    out,
                    r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
                    path.join(" ")
                );
                for &(b, g) in series.iter() {
                    let _ = writeln!(
                        out,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{colour}"/>"#,
                        x(b),
                        y(g)
                    );
                }
            }
        }
    }
    out.push_str("</svg>\n");
    out
}

/// `cargo xtask bench-plot RUN.json OUT.svg`: the plot of a run recorded in
/// `target/bench-distributed.json` (or a copy of it), drawn again.
pub(crate) fn replot(args: &[String]) -> Result<(), String> {
    let [json, out] = args else {
        return Err("usage: cargo xtask bench-plot RUN.json OUT.svg".into());
    };
    let text = std::fs::read_to_string(json).map_err(|e| format!("{json}: {e}"))?;
    let run: Value = serde_json::from_str(&text).map_err(|e| format!("{json}: {e}"))?;
    let side = |name: &str| run[name].as_array().cloned().unwrap_or_default();
    let (ours, theirs, bare) = (side("nuvec"), side("mlx"), side("bare_ring"));
    let mut ranks: Vec<usize> = ours
        .iter()
        .filter_map(|r| r["ranks"].as_u64())
        .map(|n| n as usize)
        .collect();
    ranks.sort_unstable();
    ranks.dedup();
    let mut ops: Vec<String> = Vec::new();
    for op in ours.iter().filter_map(|r| r["op"].as_str()) {
        if !ops.iter().any(|seen| seen == op) {
            ops.push(op.to_string());
        }
    }
    let ceiling = run["ceilings"]["tcp_stream_gbps"].as_f64().unwrap_or(0.0);
    let drawn = svg((&ours, &theirs, &bare), ceiling, &ranks, &ops);
    std::fs::write(out, drawn).map_err(|e| format!("{out}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_plot_has_a_panel_per_rank_count_and_op_with_a_line_per_side() {
        let record = |who: &str, bytes: u64, gbps: f64| json!({"impl": who, "op": "all_sum", "ranks": 2, "bytes": bytes, "dtype": "float32", "busbw_gbps": gbps});
        let ours = vec![record("nuvec", 4096, 0.1), record("nuvec", 1 << 20, 1.0)];
        let theirs = vec![record("mlx", 4096, 0.001), record("mlx", 1 << 20, 0.3)];
        let bare = vec![record("bare-ring", 1 << 20, 1.2)];
        let svg = svg((&ours, &theirs, &bare), 2.0, &[2], &["all_sum".to_string()]);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert!(svg.contains("all_sum, 2 ranks"));
    }
}
