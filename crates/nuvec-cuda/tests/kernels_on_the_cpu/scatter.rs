//! The scatter-add kernel against a plain loop in the CPU's order (each sum rounded to the
//! element type, as `nuvec-core`'s `ScatterAdd` adds): repeated and negative indices, and an
//! index out of range flagged.

use super::host::{bytes_of, compile, compiler_or_skip, from_bytes, run, workdir, Stored, Values};
use nuvec_cpu::{bf16, DType, Element};
use nuvec_cuda::kernels::scatter::scatter_add;
use nuvec_cuda::kernels::types::storage;

const OUTER: usize = 2;
const TAKEN: usize = 9;
const LEN: usize = 4;
const INNER: usize = 3;

fn driver(name: &str, s: &str) -> String {
    format!(
        r#"
int main(int argc, char** argv) {{
    nv_u64 outer = strtoull(argv[1], 0, 10), taken = strtoull(argv[2], 0, 10);
    nv_u64 len = strtoull(argv[3], 0, 10), inner = strtoull(argv[4], 0, 10);
    auto u = nv_read("u.bin"), index = nv_read("index.bin");
    // Not zeroed: the kernel zeroes the output itself.
    std::vector<unsigned char> out(outer * len * inner * sizeof({s}), 0xab);
    int flag = 0;
    nv_launch(2, 2, [&] {{
        {name}((const {s}*)u.data(), (const int*)index.data(), ({s}*)out.data(), outer, taken,
               len, inner, &flag);
    }});
    out.push_back((unsigned char)flag);
    nv_write("out.bin", out);
}}
"#
    )
}

/// Runs the kernel on `updates` and `indices`; the output and the out-of-range flag.
fn scatter<T: Stored + Element>(dtype: DType, updates: &[T], indices: &[i32]) -> (Vec<T>, bool) {
    let source = scatter_add(dtype).expect("a scatter-add kernel");
    let dir = workdir(&source.name);
    compile(&dir, &source, &driver(&source.name, storage(dtype)));
    let index_bytes: Vec<u8> = indices.iter().flat_map(|i| i.to_le_bytes()).collect();
    let args = [OUTER, TAKEN, LEN, INNER].map(|v| v as u64);
    let mut out = run(
        &dir,
        &[("u", &bytes_of(updates)), ("index", &index_bytes)],
        &args,
    );
    let _ = std::fs::remove_dir_all(&dir);
    let flag = out.pop() == Some(1);
    (from_bytes(&out), flag)
}

fn reference<T: Element>(updates: &[T], indices: &[i32]) -> Vec<T> {
    let mut out = vec![T::from_f64(0.0); OUTER * LEN * INNER];
    for (flat, (&u, &i)) in updates.iter().zip(indices).enumerate() {
        let (p, q) = (flat / (TAKEN * INNER), flat % INNER);
        let at = if i < 0 { i + LEN as i32 } else { i } as usize;
        let to = (p * LEN + at) * INNER + q;
        out[to] = out[to].add(u);
    }
    out
}

fn check<T: Stored + Element + PartialEq + std::fmt::Debug>(
    dtype: DType,
    make: impl Fn(&mut Values) -> T,
) {
    let mut values = Values(41);
    let n = OUTER * TAKEN * INNER;
    let updates: Vec<T> = (0..n).map(|_| make(&mut values)).collect();
    // Every index from -LEN to LEN - 1, many repeated.
    let indices: Vec<i32> = (0..n)
        .map(|_| ((values.next() + 1.0) * LEN as f32) as i32 - LEN as i32)
        .collect();
    let (got, flagged) = scatter(dtype, &updates, &indices);
    assert!(!flagged, "scatter_add {dtype}: in-range indices flagged");
    let want = reference(&updates, &indices);
    assert_eq!(
        bytes_of(&got),
        bytes_of(&want),
        "scatter_add {dtype}: {got:?} against the CPU's {want:?}"
    );
    let mut wrong = indices.clone();
    wrong[7] = LEN as i32;
    assert!(
        scatter(dtype, &updates, &wrong).1,
        "an index of {LEN} is flagged"
    );
}

#[test]
fn scatter_add_gives_the_cpus_bits_and_flags_an_index_out_of_range() {
    if !compiler_or_skip("scatter_add_gives_the_cpus_bits_and_flags_an_index_out_of_range") {
        return;
    }
    check::<f32>(DType::F32, |v| v.next() * 1e3);
    check::<bf16>(DType::BF16, |v| bf16::from_f32(v.next() * 10.0));
    check::<i32>(DType::I32, |v| (v.next() * 1e9) as i32);
}
