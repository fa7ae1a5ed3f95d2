//! The scan kernels against `nuvec_cpu::scan`, bit for bit: every op, both directions,
//! inclusive or not, over a middle axis with lanes before and after it.

use super::host::{bytes_of, compile, compiler_or_skip, from_bytes, run, workdir, Stored, Values};
use nuvec_cpu::binary::BinaryOp;
use nuvec_cpu::reduce::{Layout3, ReduceOp};
use nuvec_cpu::scan::scan as cpu_scan;
use nuvec_cpu::{bf16, DType, Element};
use nuvec_cuda::kernels::scan::{scan, SCAN_OPS};
use nuvec_cuda::kernels::types::storage;

const LAYOUT: Layout3 = Layout3 {
    outer: 2,
    len: 37,
    inner: 3,
};

fn driver(name: &str, s: &str) -> String {
    format!(
        r#"
int main(int argc, char** argv) {{
    nv_u64 outer = strtoull(argv[1], 0, 10), len = strtoull(argv[2], 0, 10);
    nv_u64 inner = strtoull(argv[3], 0, 10);
    int reverse = (int)strtol(argv[4], 0, 10), inclusive = (int)strtol(argv[5], 0, 10);
    auto x = nv_read("x.bin");
    std::vector<unsigned char> y(x.size());
    nv_launch(2, 2, [&] {{
        {name}((const {s}*)x.data(), ({s}*)y.data(), outer, len, inner, reverse, inclusive);
    }});
    nv_write("out.bin", y);
}}
"#
    )
}

fn reduce_op(op: BinaryOp) -> ReduceOp {
    match op {
        BinaryOp::Add => ReduceOp::Sum,
        BinaryOp::Multiply => ReduceOp::Prod,
        BinaryOp::Maximum => ReduceOp::Max,
        _ => ReduceOp::Min,
    }
}

fn check<T: Stored + Element>(dtype: DType, make: impl Fn(&mut Values) -> T) -> Vec<String> {
    let mut values = Values(dtype.size() as u64 + 5);
    let n = LAYOUT.outer * LAYOUT.len * LAYOUT.inner;
    let input: Vec<T> = (0..n).map(|_| make(&mut values)).collect();
    let mut failures = Vec::new();
    for op in SCAN_OPS {
        let source = scan(op, dtype).expect("a scan kernel");
        let dir = workdir(&source.name);
        compile(&dir, &source, &driver(&source.name, storage(dtype)));
        for (reverse, inclusive) in [(false, true), (true, true), (false, false), (true, false)] {
            let args = [
                LAYOUT.outer as u64,
                LAYOUT.len as u64,
                LAYOUT.inner as u64,
                u64::from(reverse),
                u64::from(inclusive),
            ];
            let got: Vec<T> = from_bytes(&run(&dir, &[("x", &bytes_of(&input))], &args));
            let mut want = input.clone();
            cpu_scan(reduce_op(op), reverse, inclusive, &input, LAYOUT, &mut want);
            let same = |a: &T, b: &T| bytes_of(&[*a]) == bytes_of(&[*b]);
            if let Some(i) = (0..n).find(|&i| !same(&got[i], &want[i])) {
                failures.push(format!(
                    "{} reverse {reverse} inclusive {inclusive}: element {i} differs from the CPU's",
                    source.name
                ));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    failures
}

#[test]
fn scans_give_the_cpus_bits_in_every_direction() {
    if !compiler_or_skip("scans_give_the_cpus_bits_in_every_direction") {
        return;
    }
    let mut failures = Vec::new();
    // A NaN among floats (max and min let it win); values whose running sums round.
    failures.extend(check::<f32>(DType::F32, |v| {
        let x = v.next();
        if x > 0.97 {
            f32::NAN
        } else {
            x * 1.1
        }
    }));
    failures.extend(check::<bf16>(DType::BF16, |v| {
        bf16::from_f32(v.next() * 3.0)
    }));
    // Products of these wrap around.
    failures.extend(check::<i32>(DType::I32, |v| (v.next() * 100.0) as i32));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
