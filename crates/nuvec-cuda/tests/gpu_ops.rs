//! The kernels on a real GPU against the CPU's results (`nuvec-cpu`), over sizes that are not
//! multiples of a block and layouts that are not contiguous. Without a GPU this is a visible
//! skip (CI has none); `NUVEC_REQUIRE_GPU=1` makes it a failure, as on the borrowed machine.

use half::{bf16, f16};
use nuvec_cpu::binary::BinaryOp;
use nuvec_cpu::unary::UnaryOp;
use nuvec_cpu::DType;
use nuvec_cuda::kernels::reduce::Reduction;
use nuvec_cuda::kernels::{BINARY_OPS, UNARY_OPS};
use nuvec_cuda::matmul::{matmul, Product};
use nuvec_cuda::ops::{self, Dims};
use nuvec_cuda::Gpu;
use std::sync::Arc;

fn gpu_or_skip(test: &str) -> Option<Arc<Gpu>> {
    match nuvec_cuda::gpu(0) {
        Ok(gpu) => Some(gpu),
        Err(e) => {
            assert!(
                std::env::var_os("NUVEC_REQUIRE_GPU").is_none(),
                "{test}: NUVEC_REQUIRE_GPU is set but {e}"
            );
            nuvec_test_support::skip(&format!("{test}: no GPU here ({e})"));
            None
        }
    }
}

/// `n` values in `[-3, 3)` from a fixed sequence.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 6.0 - 3.0
        })
        .collect()
}

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Whether `got` is within `ulps` units in the last place of `want` (NaNs agree).
fn close(got: f32, want: f32, ulps: i64) -> bool {
    if got.is_nan() || want.is_nan() {
        return got.is_nan() && want.is_nan();
    }
    if got == want {
        return true;
    }
    let (a, b) = (got.to_bits() as i32 as i64, want.to_bits() as i32 as i64);
    (a - b).abs() <= ulps || (got - want).abs() <= 1e-6 * want.abs().max(1e-30)
}

const N: usize = 100_003;

#[test]
fn unary_ops_on_float32_and_bfloat16_match_the_cpu() {
    let Some(gpu) = gpu_or_skip("unary_ops_on_float32_and_bfloat16_match_the_cpu") else {
        return;
    };
    let x = values(N, 1);
    let dims = Dims::new(&[N as i64], &[&[1]]).unwrap();
    let device_x = gpu.upload(&bytes_f32(&x)).unwrap();
    let bf: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let device_bf = gpu
        .upload(&bf.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>())
        .unwrap();
    for op in UNARY_OPS {
        let out = ops::unary(
            &gpu,
            op,
            (&device_x, DType::F32),
            (N as u64, &dims),
            DType::F32,
        )
        .unwrap();
        let got = f32s(&gpu.download(&out, 4 * N).unwrap());
        for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
            let want = op.apply_f32(v);
            // Where the CPU's float32 function is itself off (acosh just above 1), the GPU
            // may instead be within a few ulp of the exact value.
            let exact = op.apply_f64(f64::from(v)) as f32;
            assert!(
                close(g, want, 4) || close(g, exact, 4),
                "{} f32 of {v} at {i}: GPU {g}, CPU {want}, exact {exact}",
                op.name()
            );
        }
        let out = ops::unary(
            &gpu,
            op,
            (&device_bf, DType::BF16),
            (N as u64, &dims),
            DType::BF16,
        )
        .unwrap();
        let got = gpu.download(&out, 2 * N).unwrap();
        for (i, c) in got.chunks_exact(2).enumerate() {
            let g = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            let want = bf16::from_f32(op.apply_f32(bf[i].to_f32())).to_f32();
            assert!(
                close(g, want, 1),
                "{} bf16 of {} at {i}: GPU {g}, CPU {want}",
                op.name(),
                bf[i]
            );
        }
    }
}

#[test]
fn binary_ops_broadcast_and_match_the_cpu_for_every_float_and_int32() {
    let Some(gpu) = gpu_or_skip("binary_ops_broadcast_and_match_the_cpu_for_every_float_and_int32")
    else {
        return;
    };
    let (rows, cols) = (301usize, 333usize);
    let a = values(rows * cols, 2);
    let b = values(cols, 3);
    // `b` is one row broadcast over every row of `a`.
    let dims = Dims::new(&[rows as i64, cols as i64], &[&[cols as i64, 1], &[0, 1]]).unwrap();
    let n = (rows * cols) as u64;
    for op in BINARY_OPS {
        let (da, db) = (
            gpu.upload(&bytes_f32(&a)).unwrap(),
            gpu.upload(&bytes_f32(&b)).unwrap(),
        );
        let out = ops::binary(&gpu, op, (&da, &db, DType::F32), (n, &dims));
        let Ok(out) = out else {
            panic!("{}: {}", op.name(), out.unwrap_err())
        };
        let predicate = op.is_predicate();
        let got = gpu
            .download(
                &out,
                if predicate {
                    rows * cols
                } else {
                    4 * rows * cols
                },
            )
            .unwrap();
        for i in 0..rows * cols {
            let (x, y) = (a[i], b[i % cols]);
            if predicate {
                let want = op.test(x, y);
                assert_eq!(got[i] != 0, want, "{} of {x} and {y}", op.name());
            } else {
                let g = f32::from_le_bytes(got[4 * i..4 * i + 4].try_into().unwrap());
                let want = op.apply(x, y);
                // A result far smaller than its operands (logaddexp's cancellation) is
                // within a few ulp of the operands' scale.
                let scale = 4.0 * f32::EPSILON * x.abs().max(y.abs());
                assert!(
                    close(g, want, 4) || (g - want).abs() <= scale,
                    "{} of {x} and {y}: GPU {g}, CPU {want}",
                    op.name()
                );
            }
        }
        let ints: Vec<i32> = a.iter().map(|v| (v * 10.0) as i32).collect();
        let int_b: Vec<i32> = b.iter().map(|v| (v * 10.0) as i32).collect();
        let to_bytes = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let (da, db) = (
            gpu.upload(&to_bytes(&ints)).unwrap(),
            gpu.upload(&to_bytes(&int_b)).unwrap(),
        );
        match ops::binary(&gpu, op, (&da, &db, DType::I32), (n, &dims)) {
            Ok(out) => {
                let width = if predicate { 1 } else { 4 };
                let got = gpu.download(&out, width * rows * cols).unwrap();
                for i in 0..rows * cols {
                    let (x, y) = (ints[i], int_b[i % cols]);
                    if predicate {
                        assert_eq!(got[i] != 0, op.test(x, y), "{} of {x} and {y}", op.name());
                    } else {
                        let g = i32::from_le_bytes(got[4 * i..4 * i + 4].try_into().unwrap());
                        assert_eq!(g, op.apply(x, y), "{} of {x} and {y}", op.name());
                    }
                }
            }
            Err(e) => assert!(
                matches!(op, BinaryOp::LogAddExp | BinaryOp::ArcTan2),
                "{}: {e}",
                op.name()
            ),
        }
    }
}

#[test]
fn conversions_round_as_the_cpu_does() {
    let Some(gpu) = gpu_or_skip("conversions_round_as_the_cpu_does") else {
        return;
    };
    let x: Vec<f32> = values(N, 4).iter().map(|v| v * 1234.567).collect();
    let dims = Dims::new(&[N as i64], &[&[1]]).unwrap();
    let dx = gpu.upload(&bytes_f32(&x)).unwrap();
    let bf = gpu
        .download(
            &ops::convert(&gpu, (&dx, DType::F32), (N as u64, &dims), DType::BF16).unwrap(),
            2 * N,
        )
        .unwrap();
    let h = gpu
        .download(
            &ops::convert(&gpu, (&dx, DType::F32), (N as u64, &dims), DType::F16).unwrap(),
            2 * N,
        )
        .unwrap();
    let i = gpu
        .download(
            &ops::convert(&gpu, (&dx, DType::F32), (N as u64, &dims), DType::I32).unwrap(),
            4 * N,
        )
        .unwrap();
    for (k, &v) in x.iter().enumerate() {
        assert_eq!(
            u16::from_le_bytes([bf[2 * k], bf[2 * k + 1]]),
            bf16::from_f32(v).to_bits(),
            "bf16 of {v}"
        );
        assert_eq!(
            u16::from_le_bytes([h[2 * k], h[2 * k + 1]]),
            f16::from_f32(v).to_bits(),
            "f16 of {v}"
        );
        assert_eq!(
            i32::from_le_bytes(i[4 * k..4 * k + 4].try_into().unwrap()),
            v as i32,
            "i32 of {v}"
        );
    }
}

#[test]
fn reductions_softmax_and_transposes_match_the_cpu() {
    let Some(gpu) = gpu_or_skip("reductions_softmax_and_transposes_match_the_cpu") else {
        return;
    };
    let (rows, cols) = (257usize, 1031usize);
    let x = values(rows * cols, 5);
    let dx = gpu.upload(&bytes_f32(&x)).unwrap();
    for reduction in Reduction::ALL {
        let arg = matches!(reduction, Reduction::ArgMax | Reduction::ArgMin);
        let output = if arg { DType::U32 } else { DType::F32 };
        let out = ops::reduce_rows(
            &gpu,
            reduction,
            (&dx, DType::F32),
            (rows as u64, cols as u64),
            output,
        )
        .unwrap();
        let got = gpu.download(&out, 4 * rows).unwrap();
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let word = u32::from_le_bytes(got[4 * r..4 * r + 4].try_into().unwrap());
            let g = f32::from_bits(word);
            let top = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let low = row.iter().copied().fold(f32::INFINITY, f32::min);
            match reduction {
                Reduction::Sum => {
                    assert!((g - row.iter().sum::<f32>()).abs() < 1e-2, "sum row {r}")
                }
                // The rows' products overflow float32; `near_one`'s rows below do not.
                Reduction::Prod => {}
                Reduction::Max => assert_eq!(g, top),
                Reduction::Min => assert_eq!(g, low),
                Reduction::ArgMax => {
                    assert_eq!(word as usize, row.iter().position(|&v| v == top).unwrap())
                }
                Reduction::ArgMin => {
                    assert_eq!(word as usize, row.iter().position(|&v| v == low).unwrap())
                }
                Reduction::LogSumExp => {
                    let want = top + row.iter().map(|v| (v - top).exp()).sum::<f32>().ln();
                    assert!(
                        (g - want).abs() < 1e-4,
                        "logsumexp row {r}: {g} against {want}"
                    );
                }
            }
        }
    }
    let soft = gpu
        .download(
            &ops::softmax_rows(&gpu, (&dx, DType::F32), (rows as u64, cols as u64)).unwrap(),
            4 * rows * cols,
        )
        .unwrap();
    let soft = f32s(&soft);
    for r in 0..rows {
        let total: f32 = soft[r * cols..(r + 1) * cols].iter().sum();
        assert!((total - 1.0).abs() < 1e-4, "row {r} sums to {total}");
    }
    // The transpose through the strided copy.
    let dims = Dims::new(&[cols as i64, rows as i64], &[&[1, cols as i64]]).unwrap();
    let t = f32s(
        &gpu.download(
            &ops::copy_strided(&gpu, &dx, 4, ((rows * cols) as u64, &dims)).unwrap(),
            4 * rows * cols,
        )
        .unwrap(),
    );
    for r in 0..rows {
        for c in 0..cols {
            assert_eq!(t[c * rows + r], x[r * cols + c]);
        }
    }
}

#[test]
fn gathers_take_along_an_axis_count_negative_indices_and_refuse_out_of_range_ones() {
    let Some(gpu) = gpu_or_skip(
        "gathers_take_along_an_axis_count_negative_indices_and_refuse_out_of_range_ones",
    ) else {
        return;
    };
    // x: [2, 5, 3] as float32, taking positions [4, -1, 0] along axis 1.
    let x: Vec<f32> = (0..30).map(|v| v as f32).collect();
    let dx = gpu.upload(&bytes_f32(&x)).unwrap();
    let index: Vec<u8> = [4i32, -1, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let shape = ops::Gather {
        outer: 2,
        axis: 5,
        taken: 3,
        inner: 3,
        per_element: false,
    };
    let out = ops::gather(&gpu, (&dx, 4), &gpu.upload(&index).unwrap(), shape).unwrap();
    let got = f32s(&gpu.download(&out, 4 * 18).unwrap());
    let want: Vec<f32> = [0usize, 1]
        .iter()
        .flat_map(|&o| {
            [4usize, 4, 0]
                .into_iter()
                .flat_map(move |k| (0..3).map(move |i| (o * 15 + k * 3 + i) as f32))
        })
        .collect();
    assert_eq!(got, want);
    let bad: Vec<u8> = [5i32, 0, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let error = ops::gather(&gpu, (&dx, 4), &gpu.upload(&bad).unwrap(), shape).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("out of range for an axis of extent 5"),
        "{error}"
    );
}

#[test]
fn random_bits_equal_the_cpus_for_the_same_key() {
    let Some(gpu) = gpu_or_skip("random_bits_equal_the_cpus_for_the_same_key") else {
        return;
    };
    for (key, bytes) in [
        ([0u32, 7u32], 4usize),
        ([1, 2], 13),
        ([0xdead, 0xbeef], 1 << 20),
        ([3, 4], 4 * 10_001),
    ] {
        let got = gpu
            .download(&ops::random_bits(&gpu, key, bytes as u64).unwrap(), bytes)
            .unwrap();
        let mut want = vec![0u8; bytes];
        nuvec_cpu::threefry::fill_random_bytes(key, &mut want);
        assert_eq!(got, want, "key {key:?}, {bytes} bytes");
    }
}

/// `batch` row-major products `[m, k] · [k, n]`, summed in order in float32.
fn plain_product(a: &[f32], b: &[f32], (batch, m, n, k): (usize, usize, usize, usize)) -> Vec<f32> {
    let mut out = vec![0f32; batch * m * n];
    for p in 0..batch {
        for i in 0..m {
            for j in 0..n {
                out[p * m * n + i * n + j] = (0..k)
                    .map(|l| a[p * m * k + i * k + l] * b[p * k * n + l * n + j])
                    .sum();
            }
        }
    }
    out
}

#[test]
fn matmul_in_every_float_matches_a_plain_product() {
    let Some(gpu) = gpu_or_skip("matmul_in_every_float_matches_a_plain_product") else {
        return;
    };
    let (batch, m, n, k) = (3usize, 67usize, 45usize, 129usize);
    let a = values(batch * m * k, 6);
    let b = values(batch * k * n, 7);
    let want = plain_product(&a, &b, (batch, m, n, k));
    let product = Product {
        batch,
        m,
        n,
        k,
        transpose_a: false,
        transpose_b: false,
    };
    let out = matmul(
        &gpu,
        (
            &gpu.upload(&bytes_f32(&a)).unwrap(),
            &gpu.upload(&bytes_f32(&b)).unwrap(),
        ),
        product,
        DType::F32,
    )
    .unwrap();
    let got = f32s(&gpu.download(&out, 4 * batch * m * n).unwrap());
    for (g, w) in got.iter().zip(&want) {
        assert!(
            (g - w).abs() < 1e-2 * w.abs().max(1.0),
            "f32: {g} against {w}"
        );
    }
    let to_bf = |v: &[f32]| {
        v.iter()
            .flat_map(|x| bf16::from_f32(*x).to_le_bytes())
            .collect::<Vec<u8>>()
    };
    let out = matmul(
        &gpu,
        (
            &gpu.upload(&to_bf(&a)).unwrap(),
            &gpu.upload(&to_bf(&b)).unwrap(),
        ),
        product,
        DType::BF16,
    )
    .unwrap();
    let got = gpu.download(&out, 2 * batch * m * n).unwrap();
    // The reference multiplies the bfloat16-rounded inputs, so what is left is the product's
    // own rounding (accumulated in float32, stored in bfloat16).
    let rounded =
        |v: &[f32]| -> Vec<f32> { v.iter().map(|x| bf16::from_f32(*x).to_f32()).collect() };
    let want_bf = plain_product(&rounded(&a), &rounded(&b), (batch, m, n, k));
    for (c, w) in got.chunks_exact(2).zip(&want_bf) {
        let g = bf16::from_le_bytes([c[0], c[1]]).to_f32();
        assert!(
            (g - w).abs() < 1e-2 * w.abs().max(1.0),
            "bf16: {g} against {w}"
        );
    }
    let unsupported = matmul(
        &gpu,
        (
            &gpu.upload(&[0u8; 4]).unwrap(),
            &gpu.upload(&[0u8; 4]).unwrap(),
        ),
        Product {
            batch: 1,
            m: 1,
            n: 1,
            k: 1,
            transpose_a: false,
            transpose_b: false,
        },
        DType::I32,
    );
    assert!(unsupported
        .unwrap_err()
        .to_string()
        .contains("matmul has no GPU kernel for int32"));
}

#[test]
fn an_op_without_a_kernel_for_a_dtype_is_an_error_naming_both() {
    let Some(gpu) = gpu_or_skip("an_op_without_a_kernel_for_a_dtype_is_an_error_naming_both")
    else {
        return;
    };
    let dims = Dims::new(&[4], &[&[1]]).unwrap();
    let x = gpu.upload(&[0u8; 16]).unwrap();
    let error =
        ops::unary(&gpu, UnaryOp::Exp, (&x, DType::I32), (4, &dims), DType::I32).unwrap_err();
    assert_eq!(error.to_string(), "exp has no GPU kernel for int32 (gpu:0)");
}
