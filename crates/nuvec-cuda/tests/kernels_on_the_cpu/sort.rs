//! The sorting network against `nuvec_cpu::sort`: values in NumPy's order (NaN last, signed
//! zeros equal), and the stable argsort, for row lengths around powers of two.

use super::host::{bytes_of, compile, compiler_or_skip, from_bytes, run, workdir, Stored, Values};
use nuvec_cpu::sort::{argsort_rows, sort_rows as cpu_sort_rows};
use nuvec_cpu::{bf16, DType, Element};
use nuvec_cuda::kernels::sort::{sort_rows, SORT_THREADS};
use nuvec_cuda::kernels::types::storage;

/// Row lengths: one element, powers of two and their neighbours, and more than the block.
const LENGTHS: [usize; 8] = [1, 2, 3, 8, 31, 100, 513, 1025];
const ROWS: usize = 3;

fn driver(name: &str, s: &str) -> String {
    format!(
        r#"
int main(int argc, char** argv) {{
    nv_u64 rows = strtoull(argv[1], 0, 10), len = strtoull(argv[2], 0, 10);
    int with_indices = (int)strtol(argv[3], 0, 10);
    auto vals = nv_read("vals.bin");
    std::vector<unsigned char> idx(rows * len * 4 + 4);
    nv_launch((unsigned)rows, {SORT_THREADS}, [&] {{
        {name}(({s}*)vals.data(), (unsigned int*)idx.data(), len, with_indices);
    }});
    idx.resize(rows * len * 4);
    vals.insert(vals.end(), idx.begin(), idx.end());
    nv_write("out.bin", vals);
}}
"#
    )
}

/// Sorts `rows` of `len` on the host kernel and on the CPU, values and indices, and says
/// where they differ.
fn check<T: Stored + Element>(dtype: DType, make: impl Fn(&mut Values) -> T) -> Vec<String> {
    let source = sort_rows(dtype);
    let dir = workdir(&source.name);
    compile(&dir, &source, &driver(&source.name, storage(dtype)));
    let mut failures = Vec::new();
    let mut values = Values(u64::from(dtype.size() as u32) * 77);
    for len in LENGTHS {
        let input: Vec<T> = (0..ROWS * len).map(|_| make(&mut values)).collect();
        for with_indices in [false, true] {
            let args = [ROWS as u64, len as u64, u64::from(with_indices)];
            let out = run(&dir, &[("vals", &bytes_of(&input))], &args);
            let (vals, idx) = out.split_at(ROWS * len * T::BYTES);
            let got: Vec<T> = from_bytes(vals);
            let mut want = input.clone();
            cpu_sort_rows(&mut want, len);
            let same = |a: &T, b: &T| (a.is_nan() && b.is_nan()) || a == b;
            if !got.iter().zip(&want).all(|(a, b)| same(a, b)) {
                failures.push(format!(
                    "{} len {len}: values differ from the CPU's",
                    source.name
                ));
            }
            if with_indices {
                let got: Vec<u32> = from_bytes(idx);
                let mut want = vec![0u32; ROWS * len];
                argsort_rows(&input, len, &mut want);
                if got != want {
                    failures.push(format!(
                        "{} len {len}: argsort differs from the CPU's",
                        source.name
                    ));
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    failures
}

#[test]
fn sorting_networks_give_the_cpus_values_and_stable_indices() {
    if !compiler_or_skip("sorting_networks_give_the_cpus_values_and_stable_indices") {
        return;
    }
    let mut failures = Vec::new();
    // Floats with NaNs, signed zeros and many ties (so the stable order matters).
    failures.extend(check::<f32>(DType::F32, |v| {
        let x = v.next();
        match ((x + 1.0) * 20.0) as i32 {
            0 => f32::NAN,
            1 => -0.0,
            2 => 0.0,
            k if k < 20 => (k % 4) as f32,
            _ => x,
        }
    }));
    failures.extend(check::<bf16>(DType::BF16, |v| {
        let x = v.next();
        bf16::from_f32(if x > 0.9 { f32::NAN } else { (x * 8.0).round() })
    }));
    failures.extend(check::<i32>(DType::I32, |v| (v.next() * 50.0) as i32));
    failures.extend(check::<u32>(DType::U32, |v| {
        ((v.next() + 1.0) * 1e9) as u32
    }));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
