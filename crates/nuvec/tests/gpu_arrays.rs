//! Arrays on a CUDA device (`Device::Gpu`): every result computed on the GPU is compared with
//! the same ops built on the CPU. Without a GPU the GPU cases are a visible skip
//! (`NUVEC_REQUIRE_GPU=1` makes them fail), and the no-GPU behaviour is checked instead.
//! The tests build with the `cuda` feature (the crate's dev-dependencies turn it on).

use nuvec::ops::{self, to_device};
use nuvec::transforms::{compile, grad, vmap};
use nuvec::{random, with_default_device, Array, DType, Device};

fn gpu_or_skip(test: &str) -> Option<Device> {
    match Device::Gpu(0).unavailable_reason() {
        None => Some(Device::Gpu(0)),
        Some(reason) => {
            assert!(
                std::env::var_os("NUVEC_REQUIRE_GPU").is_none(),
                "{test}: NUVEC_REQUIRE_GPU is set but {reason}"
            );
            nuvec_test_support::skip(&format!("{test}: no GPU here ({reason})"));
            None
        }
    }
}

/// `n` values in `[-2, 2)` from a fixed sequence, shaped `shape`.
fn values(shape: &[i32], seed: u64) -> Array {
    let n: i32 = shape.iter().product();
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let data: Vec<f32> = (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect();
    Array::from_slice(&data, shape)
}

/// `f` built on `device`, evaluated, and read back as float32.
fn run_on(device: Device, f: impl Fn() -> Array) -> (Device, Vec<f32>, Vec<i32>) {
    let out = with_default_device(device, f);
    let built_on = out.device();
    let shape = out.shape().to_vec();
    let read = out.astype(DType::F32);
    (
        built_on,
        read.to_vec::<f32>()
            .unwrap_or_else(|e| panic!("on {device}: {e}")),
        shape,
    )
}

/// `f`'s values built on the GPU (which must be where it was built) and on the CPU, of the
/// same shape.
fn on_both(gpu: Device, what: &str, f: impl Fn() -> Array) -> (Vec<f32>, Vec<f32>) {
    let (built_on, got, got_shape) = run_on(gpu, &f);
    assert_eq!(built_on, gpu, "{what}: the op was not built on the GPU");
    let (_, want, want_shape) = run_on(Device::Cpu, &f);
    assert_eq!(got_shape, want_shape, "{what}: shapes differ");
    (got, want)
}

/// `f` on the GPU and on the CPU agree within `tolerance` (relative to the larger magnitude).
fn same_on_both(gpu: Device, what: &str, tolerance: f32, f: impl Fn() -> Array) {
    let (got, want) = on_both(gpu, what, f);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let scale = g.abs().max(w.abs()).max(1.0);
        assert!(
            g == w || (g - w).abs() <= tolerance * scale || (g.is_nan() && w.is_nan()),
            "{what}: element {i} is {g} on the GPU and {w} on the CPU"
        );
    }
}

/// `f` on the GPU and on the CPU agree within `tolerance` of the result's largest magnitude:
/// for sums whose terms are rounded differently on the two (a bfloat16 product of weights
/// dequantized into bfloat16 for cuBLAS, against the CPU's weights kept in float), where an
/// element near zero after cancellation can differ by more than its own size.
fn close_on_both(gpu: Device, what: &str, tolerance: f32, f: impl Fn() -> Array) {
    let (got, want) = on_both(gpu, what, f);
    let largest = want.iter().fold(1.0f32, |m, w| m.max(w.abs()));
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= tolerance * largest,
            "{what}: element {i} is {g} on the GPU and {w} on the CPU (largest {largest})"
        );
    }
}

#[test]
fn a_gpu_that_is_not_there_is_an_error_naming_it() {
    if Device::Gpu(0).is_available() {
        nuvec_test_support::skip("a_gpu_that_is_not_there_is_an_error_naming_it: a GPU is here");
        return;
    }
    assert_eq!(nuvec::default_device(), Device::Cpu);
    let error = nuvec::set_default_device(Device::Gpu(0)).unwrap_err();
    assert!(error.to_string().contains("set_default_device"), "{error}");
    let a = with_default_device(Device::Gpu(0), || ops::exp(&values(&[4], 1)));
    assert_eq!(a.device(), Device::Gpu(0));
    let error = a.to_vec::<f32>().unwrap_err().to_string();
    assert!(error.contains("[exp]"), "{error}");
    assert!(
        error.contains("CUDA") || error.contains("cuda") || error.contains("gpu"),
        "the error says what is missing: {error}"
    );
    assert!(!error.contains("Error {"), "no Debug form: {error}");
}

#[test]
fn element_wise_ops_broadcast_and_convert_as_on_the_cpu() {
    let Some(gpu) = gpu_or_skip("element_wise_ops_broadcast_and_convert_as_on_the_cpu") else {
        return;
    };
    let (a, b) = (values(&[3, 1, 5], 1), values(&[4, 1], 2));
    same_on_both(gpu, "exp(a) * b + 1", 1e-6, || {
        ops::add(ops::multiply(ops::exp(&a), &b), 1.0)
    });
    same_on_both(gpu, "tanh in bfloat16", 1e-2, || {
        ops::tanh(&a.astype(DType::BF16))
    });
    same_on_both(gpu, "a > b as int32", 0.0, || {
        ops::greater(&a, &b).astype(DType::I32)
    });
    same_on_both(gpu, "maximum of a transposed and b", 0.0, || {
        ops::maximum(ops::transpose(&a, None), values(&[5, 1, 1], 3))
    });
}

#[test]
fn reductions_over_any_axes_match_the_cpu() {
    let Some(gpu) = gpu_or_skip("reductions_over_any_axes_match_the_cpu") else {
        return;
    };
    let x = values(&[4, 6, 5], 4);
    same_on_both(gpu, "sum over axes 0 and 2", 1e-5, || {
        ops::sum(&x, [0, 2], false)
    });
    same_on_both(gpu, "sum over everything", 1e-5, || {
        ops::sum(&x, None, false)
    });
    same_on_both(gpu, "max over axis 1, kept", 0.0, || {
        ops::max(&x, [1], true)
    });
    same_on_both(gpu, "argmax over axis 0", 0.0, || {
        ops::argmax(&x, Some(0), false)
    });
    same_on_both(gpu, "logsumexp over axis 2", 1e-5, || {
        ops::logsumexp(&x, [2], false)
    });
    same_on_both(gpu, "softmax over axis 1", 1e-6, || ops::softmax(&x, [1]));
}

#[test]
fn matrix_products_batched_broadcast_and_transposed_match_the_cpu() {
    let Some(gpu) = gpu_or_skip("matrix_products_batched_broadcast_and_transposed_match_the_cpu")
    else {
        return;
    };
    let (a, b) = (values(&[2, 3, 17, 9], 5), values(&[9, 11], 6));
    same_on_both(gpu, "[2,3,17,9] @ [9,11]", 1e-5, || ops::matmul(&a, &b));
    let c = values(&[3, 11, 9], 7);
    same_on_both(gpu, "[2,3,17,9] @ [3,9,11] (b broadcast)", 1e-5, || {
        ops::matmul(&a, &ops::transpose(&c, Some(&[0, 2, 1])))
    });
    let w = values(&[11, 9], 15);
    same_on_both(
        gpu,
        "linear (x · wᵀ), the weight as stored",
        1e-5,
        || ops::linear(&a, &w),
    );
    same_on_both(gpu, "linear with a bfloat16 weight", 2e-2, || {
        ops::linear(&a.astype(DType::BF16), &w.astype(DType::BF16))
    });
    same_on_both(gpu, "bfloat16 product", 2e-2, || {
        ops::matmul(&a.astype(DType::BF16), &b.astype(DType::BF16))
    });
}

#[test]
fn quantization_and_quantized_products_match_the_cpu() {
    let Some(gpu) = gpu_or_skip("quantization_and_quantized_products_match_the_cpu") else {
        return;
    };
    // Quantized on the CPU, as a checkpoint's weights arrive; a few rows of `x` take the
    // matrix-vector kernel, many the dequantized weights through cuBLAS.
    let w = values(&[24, 256], 21);
    for (bits, group_size) in [(4, 64), (8, 32), (3, 64), (6, 128), (2, 32), (5, 64)] {
        // Quantizing and dequantizing on the GPU give the CPU's bits (the words compared in
        // halves of 16 bits, which float32 holds exactly).
        let half = Array::scalar(65536u32);
        for high in [false, true] {
            let what = if high { "high halves" } else { "low halves" };
            same_on_both(
                gpu,
                &format!("quantize's words, {what}, {bits} bits"),
                0.0,
                || {
                    let wq = ops::quantize(&w.astype(DType::BF16), group_size, bits).0;
                    if high {
                        ops::floor_divide(&wq, &half)
                    } else {
                        ops::remainder(&wq, &half)
                    }
                },
            );
        }
        for (part, what) in [(1, "scales"), (2, "biases")] {
            same_on_both(gpu, &format!("quantize's {what}, {bits} bits"), 0.0, || {
                let (wq, s, b) = ops::quantize(&w.astype(DType::BF16), group_size, bits);
                [wq, s, b][part].clone()
            });
        }
        let (wq, scales, biases) = ops::quantize(&w, group_size, bits);
        same_on_both(gpu, &format!("dequantize, {bits} bits"), 0.0, || {
            ops::dequantize(&wq, &scales, &biases, group_size, bits)
        });
        for rows in [1, 5, 8, 9, 40] {
            let x = values(&[rows, 256], 22 + rows as u64);
            let what = format!("{bits}-bit groups of {group_size}, {rows} rows");
            same_on_both(gpu, &what, 1e-4, || {
                ops::quantized_matmul(&x, &wq, &scales, &biases, true, group_size, bits)
            });
            let (x16, s16, b16) = (
                x.astype(DType::BF16),
                scales.astype(DType::BF16),
                biases.astype(DType::BF16),
            );
            // Up to 8 rows the kernel keeps the weights in float, as the CPU does; past that
            // they are dequantized into bfloat16 for cuBLAS (as MLX's Metal kernels round
            // them), a relative 2⁻⁹ on each of 256 terms.
            close_on_both(gpu, &format!("{what}, bfloat16"), 2e-2, || {
                ops::quantized_matmul(&x16, &wq, &s16, &b16, true, group_size, bits)
            });
        }
    }
}

#[test]
fn mixture_of_experts_products_match_the_cpu() {
    let Some(gpu) = gpu_or_skip("mixture_of_experts_products_match_the_cpu") else {
        return;
    };
    // Four experts; tokens routed in runs (1, 1, 3) and alone (0, 2), with a row of `x` per
    // token and a shared `x` taken by index.
    let experts = values(&[4, 64, 24], 41);
    let tokens = values(&[5, 2, 64], 42);
    let routes = Array::from_slice(&[1i32, 1, 3, 0, 2], &[5]);
    same_on_both(gpu, "gather_mm", 1e-5, || {
        ops::gather_mm(&tokens, &experts, None, Some(&routes))
    });
    let shared = values(&[2, 2, 64], 43);
    let lhs = Array::from_slice(&[0i32, 1, 1, 0, 1], &[5]);
    same_on_both(gpu, "gather_mm with lhs indices", 1e-5, || {
        ops::gather_mm(&shared, &experts, Some(&lhs), Some(&routes))
    });
    // Quantized experts `[4, out, in]`, multiplied transposed.
    let stacked = ops::swapaxes(&experts, 1, 2);
    let (wq, scales, biases) = ops::quantize(&stacked, 32, 4);
    same_on_both(gpu, "gather_qmm", 1e-4, || {
        ops::gather_qmm(
            &tokens,
            &wq,
            &scales,
            &biases,
            None,
            Some(&routes),
            true,
            32,
            4,
        )
    });
    // An expert out of range is an error, as on the CPU.
    let far = Array::from_slice(&[1i32, 9, 0, 0, 0], &[5]);
    let error = with_default_device(gpu, || ops::gather_mm(&tokens, &experts, None, Some(&far)))
        .eval()
        .unwrap_err()
        .to_string();
    assert!(error.contains("rhs_indices[1] = 9"), "{error}");
}

#[test]
fn sorts_argsorts_top_k_and_scans_match_the_cpu_exactly() {
    let Some(gpu) = gpu_or_skip("sorts_argsorts_top_k_and_scans_match_the_cpu_exactly") else {
        return;
    };
    // Ties (rounded values) make the stable order matter; a NaN sorts last.
    let x = ops::round(&(values(&[3, 1000], 31) * 4.0f32), 0);
    let with_nan = ops::concatenate(&[x.clone(), ops::full(&[3, 1], f64::NAN, DType::F32)], 1);
    for (what, a) in [("rows of 1000", &x), ("rows with a NaN", &with_nan)] {
        same_on_both(gpu, &format!("sort, {what}"), 0.0, || {
            ops::sort(a, Some(-1))
        });
        same_on_both(gpu, &format!("argsort, {what}"), 0.0, || {
            ops::argsort(a, Some(-1))
        });
        same_on_both(gpu, &format!("sort along axis 0, {what}"), 0.0, || {
            ops::sort(a, Some(0))
        });
    }
    same_on_both(gpu, "top 5", 0.0, || ops::topk(&x, 5, Some(-1)));
    same_on_both(gpu, "argsort of bfloat16", 0.0, || {
        ops::argsort(&x.astype(DType::BF16), Some(-1))
    });
    same_on_both(gpu, "sort of int32", 0.0, || {
        ops::sort(&x.astype(DType::I32), None)
    });
    // Scans round each step as the CPU does: the same bits.
    let y = values(&[4, 300, 3], 32);
    for axis in [0, 1, 2] {
        for (reverse, inclusive) in [(false, true), (true, false)] {
            let what = format!("axis {axis}, reverse {reverse}, inclusive {inclusive}");
            same_on_both(gpu, &format!("cumsum {what}"), 0.0, || {
                ops::cumsum(&y, Some(axis), reverse, inclusive)
            });
            same_on_both(gpu, &format!("cummax {what}"), 0.0, || {
                ops::cummax(&y, Some(axis), reverse, inclusive)
            });
            same_on_both(gpu, &format!("cumprod of bfloat16 {what}"), 0.0, || {
                ops::cumprod(&y.astype(DType::BF16), Some(axis), reverse, inclusive)
            });
        }
    }
}

#[test]
fn layout_and_indexing_match_the_cpu() {
    let Some(gpu) = gpu_or_skip("layout_and_indexing_match_the_cpu") else {
        return;
    };
    let x = values(&[5, 7], 8);
    same_on_both(gpu, "concatenate along axis 1", 0.0, || {
        ops::concatenate(&[x.clone(), values(&[5, 2], 9)], 1)
    });
    same_on_both(gpu, "a slice with steps", 0.0, || {
        ops::slice(&x, &[1, 6], &[5, 0], &[2, -2])
    });
    let indices = Array::from_slice(&[4i32, -1, 0, 2], &[4]);
    same_on_both(gpu, "take along axis 0 with a negative index", 0.0, || {
        ops::take(&x, &indices, Some(0))
    });
    same_on_both(
        gpu,
        "where with a broadcast condition and a scalar",
        0.0,
        || ops::where_(ops::greater(&x, values(&[1, 7], 10)), &x, 0.5),
    );
    same_on_both(gpu, "pad with a value", 0.0, || {
        ops::pad(&x, &[(1, 2), (0, 3)], -1.5)
    });
    let along = Array::from_slice(&[6u32, 0, 3, 1, 2, 5, 4, 0, 0, 1], &[5, 2]);
    same_on_both(gpu, "take_along_axis with uint32 indices", 0.0, || {
        ops::take_along_axis(&x, &along, Some(1))
    });
}

#[test]
fn random_numbers_on_the_gpu_equal_the_cpus_for_the_same_key() {
    let Some(gpu) = gpu_or_skip("random_numbers_on_the_gpu_equal_the_cpus_for_the_same_key") else {
        return;
    };
    let key = random::key(42);
    same_on_both(gpu, "uniform", 0.0, || {
        random::uniform(0.0, 1.0, &[1000], DType::F32, Some(&key))
    });
    same_on_both(gpu, "bits", 0.0, || {
        random::bits(&[257], 4, Some(&key)).astype(DType::F32)
    });
}

#[test]
fn gradients_and_vmap_run_on_the_gpu_unchanged() {
    let Some(gpu) = gpu_or_skip("gradients_and_vmap_run_on_the_gpu_unchanged") else {
        return;
    };
    let (w, x) = (values(&[8, 3], 10), values(&[5, 8], 11));
    let loss = |p: &[Array]| {
        let h = ops::tanh(&ops::matmul(&p[1], &p[0]));
        ops::sum(&ops::logsumexp(&h, [1], false), None, false)
    };
    let gradient = |device| {
        with_default_device(device, || grad(loss)(&[w.clone(), x.clone()]))
            .unwrap_or_else(|e| panic!("grad on {device}: {e}"))
    };
    let (on_gpu, on_cpu) = (gradient(gpu), gradient(Device::Cpu));
    for (g, c) in on_gpu.iter().zip(&on_cpu) {
        assert_eq!(g.device(), gpu, "the gradient was computed on the GPU");
        let (g, c) = (g.to_vec::<f32>().unwrap(), c.to_vec::<f32>().unwrap());
        for (p, q) in g.iter().zip(&c) {
            assert!((p - q).abs() <= 1e-5 * p.abs().max(1.0), "{p} against {q}");
        }
    }
    // Through an embedding lookup: its gradient scatters the rows back (repeated and
    // negative indices add up), in the CPU's order, so the same bits.
    let table = values(&[10, 4], 12);
    let tokens = Array::from_slice(&[3i32, 7, 3, -1, 0, 3], &[6]);
    let embed = |p: &[Array]| {
        let rows = ops::take(&p[0], &tokens, Some(0));
        ops::sum(&ops::square(&rows), None, false)
    };
    let gradient = |device| {
        with_default_device(device, || grad(embed)(std::slice::from_ref(&table)))
            .unwrap_or_else(|e| panic!("grad through take on {device}: {e}"))
    };
    let (g, c) = (gradient(gpu), gradient(Device::Cpu));
    assert_eq!(g[0].device(), gpu, "the scatter ran on the GPU");
    assert_eq!(
        g[0].to_vec::<f32>().unwrap(),
        c[0].to_vec::<f32>().unwrap(),
        "grad through take"
    );
    let rows = |device| {
        with_default_device(device, || {
            vmap(
                |a: &[Array]| vec![ops::softmax(&a[0], [0])],
                &[Some(0)],
                &[Some(0)],
            )(std::slice::from_ref(&x))
        })
        .unwrap()[0]
            .to_vec::<f32>()
            .unwrap()
    };
    let (g, c) = (rows(gpu), rows(Device::Cpu));
    for (p, q) in g.iter().zip(&c) {
        assert!((p - q).abs() <= 1e-6, "vmap(softmax): {p} against {q}");
    }
}

#[test]
fn arrays_move_between_devices_and_a_dtype_without_a_kernel_says_so() {
    let Some(gpu) = gpu_or_skip("arrays_move_between_devices_and_a_dtype_without_a_kernel_says_so")
    else {
        return;
    };
    let x = values(&[6], 12);
    let there = to_device(&x, gpu);
    assert_eq!(there.device(), gpu);
    there.eval().unwrap();
    assert_eq!(there.device(), gpu, "evaluated, the data stays on the GPU");
    let back = to_device(&there, Device::Cpu);
    assert_eq!(back.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    // cuBLAS multiplies float32, float16 and bfloat16; the CPU float64 too.
    let wide = x.astype(DType::F64).reshape(&[2, 3]);
    let product = |device| with_default_device(device, || ops::matmul(&wide, &wide.t()));
    let error = product(gpu).eval().unwrap_err().to_string();
    assert!(
        error.contains("matmul") && error.contains("float64") && error.contains("gpu:0"),
        "the error names the op, the dtype and the device: {error}"
    );
    let on_cpu = product(Device::Cpu);
    assert_eq!(on_cpu.device(), Device::Cpu);
    on_cpu.eval().unwrap();
}

#[test]
fn a_compiled_chain_runs_as_one_fused_kernel_with_the_unfused_results() {
    let Some(gpu) =
        gpu_or_skip("a_compiled_chain_runs_as_one_fused_kernel_with_the_unfused_results")
    else {
        return;
    };
    let gelu = |v: &[Array]| {
        let x = &v[0];
        let inner = ops::multiply(
            ops::add(x, ops::multiply(ops::power(x, 3.0), 0.044715)),
            0.797_884_6,
        );
        vec![ops::multiply(
            ops::multiply(x, 0.5),
            ops::add(ops::tanh(&inner), 1.0),
        )]
    };
    for dtype in [DType::F32, DType::BF16] {
        let x = values(&[(1 << 20) + 3], 13).astype(dtype);
        let fused = with_default_device(gpu, || compile(gelu).call(std::slice::from_ref(&x)))
            .unwrap()
            .remove(0);
        assert_eq!(fused.device(), gpu);
        let plain = with_default_device(gpu, || gelu(std::slice::from_ref(&x))).remove(0);
        let (f, p) = (
            fused.astype(DType::F32).to_vec::<f32>().unwrap(),
            plain.astype(DType::F32).to_vec::<f32>().unwrap(),
        );
        assert!(
            f.iter().zip(&p).all(|(a, b)| a.to_bits() == b.to_bits()),
            "{dtype}: the fused kernel's bits are the unfused kernels'"
        );
    }
}

#[test]
fn the_nccl_backend_without_its_launch_environment_says_what_is_missing() {
    if std::env::var_os("NCCL_HOST_IP").is_some() {
        nuvec_test_support::skip("the_nccl_backend_...: NCCL_HOST_IP is set here");
        return;
    }
    let error = nuvec_distributed::init_backend(true, nuvec_distributed::Backend::Nccl)
        .unwrap_err()
        .to_string();
    assert!(error.contains("NCCL_HOST_IP"), "{error}");
}

#[test]
fn a_group_of_one_through_nccl_sums_gathers_and_scatters_gpu_arrays() {
    let Some(gpu) = gpu_or_skip("a_group_of_one_through_nccl_sums_gathers_and_scatters_gpu_arrays")
    else {
        return;
    };
    use nuvec::distributed::{all_gather, all_max, all_sum, sum_scatter, Group};
    use nuvec_distributed::nccl::{communicator::NcclCommunicator, Launch};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env = |name: &str| match name {
        "NCCL_HOST_IP" => Some("127.0.0.1".to_string()),
        "NCCL_PORT" => Some(port.to_string()),
        "MLX_RANK" => Some("0".to_string()),
        "MLX_WORLD_SIZE" => Some("1".to_string()),
        _ => None,
    };
    let launch = Launch::from_vars(&env).unwrap().unwrap();
    let options = nuvec_distributed::Options::with_timeout(std::time::Duration::from_secs(60));
    let communicator = NcclCommunicator::connect(&launch, 0, &options)
        .unwrap_or_else(|e| panic!("NCCL group of one: {e}"));
    // A group of one's collectives return their input without a call, so NCCL is driven
    // through the communicator itself: host bytes (staged) and device memory.
    use nuvec_core::distributed::{Communicator, ReduceOp};
    let data: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5 - 7.0).collect();
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut reduced = bytes.clone();
    Communicator::all_reduce(&communicator, &mut reduced, DType::F32, ReduceOp::Sum).unwrap();
    assert_eq!(reduced, bytes, "all_reduce of host bytes over one rank");
    let mut gathered = vec![0u8; bytes.len()];
    Communicator::all_gather(&communicator, &bytes, &mut gathered, DType::F32).unwrap();
    assert_eq!(gathered, bytes, "all_gather of host bytes over one rank");
    let device = nuvec_cuda::gpu(0).unwrap();
    let input = device.upload(&bytes).unwrap();
    let mut output = device.alloc(bytes.len()).unwrap();
    let on_device = communicator
        .on_device()
        .expect("NCCL has device collectives");
    on_device
        .all_reduce((&input, &mut output), data.len(), DType::F32, ReduceOp::Max)
        .unwrap();
    assert_eq!(device.download(&output, bytes.len()).unwrap(), bytes);
    on_device
        .reduce_scatter((&input, &mut output), data.len(), DType::F32, ReduceOp::Sum)
        .unwrap();
    assert_eq!(device.download(&output, bytes.len()).unwrap(), bytes);
    let group = Group::register(std::sync::Arc::new(communicator));
    assert_eq!((group.rank(), group.size()), (0, 1));
    let x = with_default_device(gpu, || ops::exp(&values(&[4, 3], 14)));
    let want = x.to_vec::<f32>().unwrap();
    for device in [gpu, Device::Cpu] {
        let results = with_default_device(device, || {
            [
                ("all_sum", all_sum(&x, Some(&group))),
                ("all_max", all_max(&x, Some(&group))),
                ("all_gather", all_gather(&x, Some(&group))),
                ("sum_scatter", sum_scatter(&x, Some(&group))),
            ]
        });
        for (what, got) in results {
            assert_eq!(got.to_vec::<f32>().unwrap(), want, "{what} on {device}");
        }
    }
    group.health().unwrap();
    group.close();
}
