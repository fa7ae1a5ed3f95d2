//! The quantized kernels against `nuvec_cpu::quantized`: products, dequantization and
//! quantization.

use super::host::{bytes_of, compile, compiler_or_skip, from_bytes, run, workdir, Stored, Values};
use nuvec_cpu::quantized::affine::quantize_rows;
use nuvec_cpu::quantized::{quantized_matmul_t, QuantizedDims};
use nuvec_cpu::{bf16, f16, DType, Float};
use nuvec_cuda::kernels::quantized::{dequantize, matvec, quantize, BITS, MATVEC_THREADS};
use nuvec_cuda::kernels::types::storage;

/// A packed matrix of random words, scales and biases, and random activations.
struct Case<T> {
    x: Vec<T>,
    words: Vec<u8>,
    scales: Vec<T>,
    biases: Vec<T>,
}

fn case<T: Float>(dims: QuantizedDims, seed: u64) -> Case<T> {
    let mut values = Values(seed);
    let groups = dims.n * dims.k / dims.group_size;
    let mut take = |count: usize, scale: f32| -> Vec<T> {
        (0..count)
            .map(|_| T::from_f32(values.next() * scale))
            .collect()
    };
    let x = take(dims.m * dims.k, 1.0);
    let scales = take(groups, 0.05);
    let biases = take(groups, 0.1);
    let words = (0..dims.n * dims.k * dims.bits as usize / 8)
        .map(|_| values.byte())
        .collect();
    Case {
        x,
        words,
        scales,
        biases,
    }
}

fn driver_matvec(name: &str, s: &str) -> String {
    format!(
        r#"
int main(int argc, char** argv) {{
    nv_u64 m = strtoull(argv[1], 0, 10), n = strtoull(argv[2], 0, 10);
    nv_u64 k = strtoull(argv[3], 0, 10), group_size = strtoull(argv[4], 0, 10);
    auto x = nv_read("x.bin"), w = nv_read("w.bin"), s = nv_read("s.bin"), b = nv_read("b.bin");
    std::vector<unsigned char> y(m * n * sizeof({s}));
    nv_launch((unsigned)n, {MATVEC_THREADS}, [&] {{
        {name}((const {s}*)x.data(), w.data(), (const {s}*)s.data(), (const {s}*)b.data(),
               ({s}*)y.data(), m, n, k, group_size);
    }});
    nv_write("out.bin", y);
}}
"#
    )
}

fn driver_dequantize(name: &str, s: &str) -> String {
    format!(
        r#"
int main(int argc, char** argv) {{
    nv_u64 n = strtoull(argv[1], 0, 10), k = strtoull(argv[2], 0, 10);
    nv_u64 group_size = strtoull(argv[3], 0, 10);
    auto w = nv_read("w.bin"), s = nv_read("s.bin"), b = nv_read("b.bin");
    std::vector<unsigned char> out(n * k * sizeof({s}));
    // Fewer threads than values: the grid-stride loop covers the rest.
    nv_launch(3, 32, [&] {{
        {name}(w.data(), (const {s}*)s.data(), (const {s}*)b.data(), ({s}*)out.data(),
               n, k, group_size);
    }});
    nv_write("out.bin", out);
}}
"#
    )
}

/// Whether `got` is within rounding of `want`: the kernel and the CPU sum in `float` in
/// different orders, and a half-precision result may round either way of a tie.
fn close(got: f32, want: f32, ulp: f32) -> bool {
    (got - want).abs() <= ulp * want.abs().max(1.0) * 4.0
}

fn check_matvec<T: Stored + Float>(dtype: DType, ulp: f32) {
    let mut failures = Vec::new();
    for bits in BITS {
        let source = matvec(bits, dtype).expect("a matvec kernel");
        let dir = workdir(&source.name);
        compile(&dir, &source, &driver_matvec(&source.name, storage(dtype)));
        for (m, n, k, group_size) in [(1, 5, 128, 64), (3, 4, 96, 32), (8, 3, 256, 128)] {
            let dims = QuantizedDims {
                m,
                n,
                k,
                group_size,
                bits,
            };
            let c = case::<T>(dims, u64::from(bits) * 1000 + m as u64);
            let out = run(
                &dir,
                &[
                    ("x", &bytes_of(&c.x)),
                    ("w", &c.words),
                    ("s", &bytes_of(&c.scales)),
                    ("b", &bytes_of(&c.biases)),
                ],
                &[m as u64, n as u64, k as u64, group_size as u64],
            );
            let got: Vec<T> = from_bytes(&out);
            let mut want = vec![T::from_f32(0.0); m * n];
            quantized_matmul_t(&c.x, &c.words, &c.scales, &c.biases, dims, &mut want);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                if !close(g.to_f32(), w.to_f32(), ulp) {
                    failures.push(format!(
                        "{} {dims:?}: y[{i}] = {} on the kernel, {} on the CPU",
                        source.name,
                        g.to_f32(),
                        w.to_f32()
                    ));
                }
            }
            assert_eq!(got.len(), m * n, "{}: output length", source.name);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn quantized_matvec_kernels_match_the_cpu_in_float32() {
    if compiler_or_skip("quantized_matvec_kernels_match_the_cpu_in_float32") {
        check_matvec::<f32>(DType::F32, 1e-5);
    }
}

#[test]
fn quantized_matvec_kernels_match_the_cpu_in_bfloat16() {
    if compiler_or_skip("quantized_matvec_kernels_match_the_cpu_in_bfloat16") {
        check_matvec::<bf16>(DType::BF16, 1.0 / 128.0);
    }
}

#[test]
fn dequantize_kernels_give_the_values_the_cpu_multiplies_by() {
    if !compiler_or_skip("dequantize_kernels_give_the_values_the_cpu_multiplies_by") {
        return;
    }
    let mut failures = Vec::new();
    for bits in BITS {
        let source = dequantize(bits, DType::F16).expect("a dequantize kernel");
        let dir = workdir(&source.name);
        compile(
            &dir,
            &source,
            &driver_dequantize(&source.name, storage(DType::F16)),
        );
        let (n, k, group_size) = (3, 64, 32);
        // The CPU's product with the identity (`k` rows of `x`) is `Wᵀ`, each value once
        // rounded from the `float` the CPU dequantizes to.
        let dims = QuantizedDims {
            m: k,
            n,
            k,
            group_size,
            bits,
        };
        let mut c = case::<f16>(dims, u64::from(bits));
        c.x = (0..k * k)
            .map(|i| f16::from_f32(if i / k == i % k { 1.0 } else { 0.0 }))
            .collect();
        let out = run(
            &dir,
            &[
                ("w", &c.words),
                ("s", &bytes_of(&c.scales)),
                ("b", &bytes_of(&c.biases)),
            ],
            &[n as u64, k as u64, group_size as u64],
        );
        let got: Vec<f16> = from_bytes(&out);
        let mut transposed = vec![f16::from_f32(0.0); k * n];
        quantized_matmul_t(&c.x, &c.words, &c.scales, &c.biases, dims, &mut transposed);
        for r in 0..n {
            for j in 0..k {
                let (g, w) = (got[r * k + j], transposed[j * n + r]);
                if g.to_bits() != w.to_bits() {
                    failures.push(format!(
                        "{}: W[{r}][{j}] = {g} on the kernel, {w} on the CPU",
                        source.name
                    ));
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn driver_quantize(name: &str, s: &str) -> String {
    format!(
        r#"
int main(int argc, char** argv) {{
    nv_u64 groups = strtoull(argv[1], 0, 10), group_size = strtoull(argv[2], 0, 10);
    unsigned bits = (unsigned)strtoul(argv[3], 0, 10);
    auto w = nv_read("w.bin");
    // Not zeroed: the kernel clears the words it packs into.
    std::vector<unsigned char> out(groups * group_size * bits / 8, 0xab);
    std::vector<unsigned char> scales(groups * sizeof({s})), biases(groups * sizeof({s}));
    nv_launch(2, 3, [&] {{
        {name}((const {s}*)w.data(), (unsigned int*)out.data(), ({s}*)scales.data(),
               ({s}*)biases.data(), groups, group_size);
    }});
    out.insert(out.end(), scales.begin(), scales.end());
    out.insert(out.end(), biases.begin(), biases.end());
    nv_write("out.bin", out);
}}
"#
    )
}

fn check_quantize<T: Stored + Float>(dtype: DType) {
    let mut failures = Vec::new();
    let (n, group_size) = (128, 32);
    let rows = 3;
    let mut values = Values(17);
    let mut w: Vec<T> = (0..rows * n)
        .map(|_| T::from_f32(values.next() * 2.5))
        .collect();
    // A constant group (the smallest scale), one whose low end has the larger magnitude, and
    // a NaN.
    for v in &mut w[..group_size] {
        *v = T::from_f32(0.75);
    }
    for (j, v) in w[group_size..2 * group_size].iter_mut().enumerate() {
        *v = T::from_f32(-3.0 + j as f32 * 0.01);
    }
    w[200] = T::from_f32(f32::NAN);
    let groups = rows * n / group_size;
    for bits in BITS {
        let source = quantize(bits, dtype).expect("a quantize kernel");
        let dir = workdir(&source.name);
        compile(
            &dir,
            &source,
            &driver_quantize(&source.name, storage(dtype)),
        );
        let args = [groups as u64, group_size as u64, u64::from(bits)];
        let out = run(&dir, &[("w", &bytes_of(&w))], &args);
        let _ = std::fs::remove_dir_all(&dir);
        let word_bytes = rows * n * bits as usize / 8;
        let mut words = vec![0u32; word_bytes / 4];
        let mut scales = vec![T::from_f32(0.0); groups];
        let mut biases = vec![T::from_f32(0.0); groups];
        quantize_rows(
            &w,
            (n, group_size, bits),
            (&mut words, &mut scales, &mut biases),
        );
        let want_words: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let (got_words, rest) = out.split_at(word_bytes);
        let (got_scales, got_biases) = rest.split_at(groups * T::BYTES);
        if got_words != &want_words[..] {
            failures.push(format!(
                "{}: the packed words differ from the CPU's",
                source.name
            ));
        }
        if got_scales != &bytes_of(&scales)[..] || got_biases != &bytes_of(&biases)[..] {
            failures.push(format!(
                "{}: scales or biases differ from the CPU's",
                source.name
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn quantize_kernels_give_the_cpus_words_scales_and_biases() {
    if compiler_or_skip("quantize_kernels_give_the_cpus_words_scales_and_biases") {
        check_quantize::<f32>(DType::F32);
        check_quantize::<bf16>(DType::BF16);
    }
}
