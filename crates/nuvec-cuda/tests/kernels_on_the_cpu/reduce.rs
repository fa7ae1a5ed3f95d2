//! The row reductions and softmax against plain loops: largest and smallest values and their
//! first indices exactly, sums, products and logsumexp within rounding (the block adds in
//! another order than a loop), softmax within rounding; rows shorter than the block, of it,
//! and longer; a NaN, and a row of -inf.

use super::host::{compile, compiler_or_skip, run, workdir, Values};
use nuvec_cpu::DType;
use nuvec_cuda::kernels::reduce::{row_reduction, softmax, Reduction, BLOCK};
use nuvec_cuda::kernels::Source;

const ROWS: usize = 5;

fn driver(name: &str, out_type: &str, output_bytes: usize) -> String {
    format!(
        r#"
int main(int argc, char** argv) {{
    nv_u64 rows = strtoull(argv[1], 0, 10), cols = strtoull(argv[2], 0, 10);
    auto x = nv_read("x.bin");
    std::vector<unsigned char> y(rows * {output_bytes});
    nv_launch((unsigned)rows, {BLOCK}, [&] {{ {name}((const float*)x.data(), ({out_type}*)y.data(), rows, cols); }});
    nv_write("out.bin", y);
}}
"#
    )
}

/// The rows: random values, one NaN in row 1, row 2 all -inf, a tie for the largest in row 3.
fn rows(cols: usize) -> Vec<f32> {
    let mut values = Values(cols as u64);
    let mut x: Vec<f32> = (0..ROWS * cols).map(|_| values.next() * 4.0).collect();
    x[cols + cols / 2] = f32::NAN;
    for v in &mut x[2 * cols..3 * cols] {
        *v = f32::NEG_INFINITY;
    }
    x[3 * cols] = 9.0;
    x[4 * cols - 1] = 9.0;
    x
}

fn run_kernel(source: &Source, x: &[f32], cols: usize, out: (&str, usize)) -> Vec<u8> {
    let dir = workdir(&format!("{}-{cols}", source.name));
    compile(&dir, source, &driver(&source.name, out.0, out.1));
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let out = run(&dir, &[("x", &bytes)], &[ROWS as u64, cols as u64]);
    let _ = std::fs::remove_dir_all(&dir);
    out
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn close(got: f32, want: f64) -> bool {
    (got.is_nan() && want.is_nan())
        || got as f64 == want
        || (got as f64 - want).abs() <= 1e-5 * want.abs().max(1.0)
}

#[test]
fn row_reductions_and_softmax_match_plain_loops() {
    if !compiler_or_skip("row_reductions_and_softmax_match_plain_loops") {
        return;
    }
    let mut failures = Vec::new();
    // Rows of single elements, of whole packs (kept in registers by softmax), and of whole
    // packs too long to keep.
    for cols in [7, 256, 1000, 8200] {
        let x = rows(cols);
        // Products of values near 1, so that a row of 1000 stays finite and is checked.
        let near_one: Vec<f32> = x
            .iter()
            .map(|&v| if v.is_finite() { 1.0 + v / 1000.0 } else { v })
            .collect();
        for reduction in Reduction::ALL {
            let x = if reduction == Reduction::Prod {
                &near_one
            } else {
                &x
            };
            let row = |r: usize| &x[r * cols..(r + 1) * cols];
            let arg = matches!(reduction, Reduction::ArgMax | Reduction::ArgMin);
            let output = if arg { DType::U32 } else { DType::F32 };
            let source = row_reduction(reduction, DType::F32, output).unwrap();
            let out_type = if arg { "unsigned int" } else { "float" };
            let out = run_kernel(&source, x, cols, (out_type, 4));
            for r in 0..ROWS {
                let values = row(r);
                let nan = values.iter().any(|v| v.is_nan());
                let got_index = u32::from_le_bytes(out[4 * r..4 * r + 4].try_into().unwrap());
                let got = f32s(&out[4 * r..4 * r + 4])[0];
                let first = |better: fn(f32, f32) -> bool| {
                    let mut at = 0;
                    for (j, &v) in values.iter().enumerate() {
                        if (v.is_nan() && !values[at].is_nan()) || better(v, values[at]) {
                            at = j;
                        }
                    }
                    at as u32
                };
                let ok = match reduction {
                    Reduction::ArgMax => got_index == first(|v, b| v > b),
                    Reduction::ArgMin => got_index == first(|v, b| v < b),
                    Reduction::Max if nan => got.is_nan(),
                    Reduction::Min if nan => got.is_nan(),
                    Reduction::Max => {
                        got == values.iter().cloned().fold(f32::NEG_INFINITY, f32::max)
                    }
                    Reduction::Min => got == values.iter().cloned().fold(f32::INFINITY, f32::min),
                    Reduction::Sum => close(got, values.iter().map(|&v| v as f64).sum()),
                    Reduction::Prod => {
                        // A thousand roundings of float32, in the block's order.
                        let want = values.iter().map(|&v| v as f64).product::<f64>();
                        close(got, want) || (got as f64 - want).abs() <= 1e-4 * want.abs()
                    }
                    Reduction::LogSumExp => {
                        let top = values.iter().map(|&v| v as f64).fold(f64::MIN, f64::max);
                        let want = if nan {
                            f64::NAN
                        } else if top.is_infinite() {
                            top
                        } else {
                            top + values
                                .iter()
                                .map(|&v| (v as f64 - top).exp())
                                .sum::<f64>()
                                .ln()
                        };
                        close(got, want)
                    }
                };
                if !ok {
                    failures.push(format!(
                        "{} over {cols}: row {r} gave {got} ({got_index})",
                        source.name
                    ));
                }
            }
        }
        let row = |r: usize| &x[r * cols..(r + 1) * cols];
        let source = softmax(DType::F32).unwrap();
        let out = f32s(&run_kernel(&source, &x, cols, ("float", 4 * cols)));
        for r in [0, 3, 4] {
            let values = row(r);
            let top = values.iter().map(|&v| v as f64).fold(f64::MIN, f64::max);
            let total: f64 = values.iter().map(|&v| (v as f64 - top).exp()).sum();
            for (j, &v) in values.iter().enumerate() {
                let want = (v as f64 - top).exp() / total;
                if !close(out[r * cols + j], want) {
                    failures.push(format!("softmax over {cols}: row {r}, element {j}"));
                    break;
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
