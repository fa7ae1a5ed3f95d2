//! The contiguous entry points, which take several elements per thread and step, against the
//! strided ones (one element each; the form that ran on the GPU against the CPU) over the same
//! data, bit for bit, with a tail that does not fill a step; a fused chain against its
//! unfused kernels; the contiguous copy against the strided one.

use super::host::{compile, compiler_or_skip, run, workdir, Values};
use nuvec_cpu::binary::BinaryOp;
use nuvec_cpu::unary::UnaryOp;
use nuvec_cpu::DType;
use nuvec_cuda::kernels::elementwise::{binary, convert, unary};
use nuvec_cuda::kernels::fused::{chain, Step};
use nuvec_cuda::kernels::layout::strided_copy;
use nuvec_cuda::kernels::types::storage;
use nuvec_cuda::kernels::Source;

/// Elements: not a multiple of the threads times the elements each takes.
const N: u64 = 1003;

/// A layout of one dimension of `n`, each operand with stride `strides[k]`.
const DIMS: &str = r#"
static nv_dims nv_line(nv_u64 n, long long s0, long long s1) {
    nv_dims d{};
    d.ndim = 1;
    d.shape[0] = (long long)n;
    d.strides[0][0] = s0;
    d.strides[1][0] = s1;
    d.strides[2][0] = 1;
    return d;
}
"#;

/// Random bytes for `count` elements of `dtype`, each a valid value (bool 0 or 1).
fn operand(dtype: DType, count: u64, seed: u64) -> Vec<u8> {
    let mut values = Values(seed);
    let mut bytes = Vec::new();
    for _ in 0..count {
        let x = values.next() * 3.0;
        match dtype {
            DType::F32 => bytes.extend(x.to_le_bytes()),
            DType::BF16 => bytes.extend(nuvec_cpu::bf16::from_f32(x).to_bits().to_le_bytes()),
            DType::F16 => bytes.extend(nuvec_cpu::f16::from_f32(x).to_bits().to_le_bytes()),
            DType::I32 => bytes.extend(((x * 1000.0) as i32).to_le_bytes()),
            DType::U8 => bytes.push(values.byte()),
            _ => panic!("no test operands of {dtype}"),
        }
    }
    bytes
}

/// Runs `source`'s `_c` and `_s` entry points over the same inputs and returns both outputs,
/// and `_c`'s again with every operand one element further on (so no pack is aligned), over
/// the `n - 1` elements after the first (its element 0 left zero).
fn both_paths(source: &Source, inputs: &[DType], output: DType) -> [Vec<u8>; 3] {
    let name = &source.name;
    let so = storage(output);
    let params = |from: usize| -> String {
        inputs
            .iter()
            .enumerate()
            .map(|(k, d)| format!("(const {}*)in{k}.data() + {from}, ", storage(*d)))
            .collect()
    };
    let (args, shifted) = (params(0), params(1));
    let strides = ", 1".repeat(inputs.len());
    let reads: String = (0..inputs.len())
        .map(|k| format!("auto in{k} = nv_read(\"in{k}.bin\");\n"))
        .collect();
    let driver = format!(
        r#"{DIMS}
int main() {{
    nv_u64 n = {N};
    {reads}
    std::vector<unsigned char> c(n * sizeof({so})), s(n * sizeof({so})), m(n * sizeof({so}));
    nv_launch(3, 8, [&] {{ {name}_c({args}({so}*)c.data(), n{strides}); }});
    nv_dims d = nv_line(n, 1, 1);
    nv_launch(3, 8, [&] {{ {name}_s({args}({so}*)s.data(), n, d); }});
    nv_launch(3, 8, [&] {{ {name}_c({shifted}({so}*)m.data() + 1, n - 1{strides}); }});
    c.insert(c.end(), s.begin(), s.end());
    c.insert(c.end(), m.begin(), m.end());
    nv_write("out.bin", c);
}}
"#
    );
    let dir = workdir(name);
    compile(&dir, source, &driver);
    let data: Vec<(String, Vec<u8>)> = inputs
        .iter()
        .enumerate()
        .map(|(k, &d)| (format!("in{k}"), operand(d, N, 3 + k as u64)))
        .collect();
    let named: Vec<(&str, &[u8])> = data.iter().map(|(n, b)| (n.as_str(), &b[..])).collect();
    let out = run(&dir, &named, &[]);
    let _ = std::fs::remove_dir_all(&dir);
    let third = out.len() / 3;
    [0, 1, 2].map(|k| out[k * third..(k + 1) * third].to_vec())
}

#[test]
fn contiguous_kernels_give_the_strided_kernels_bits() {
    if !compiler_or_skip("contiguous_kernels_give_the_strided_kernels_bits") {
        return;
    }
    let cases: Vec<(Source, Vec<DType>, DType)> = vec![
        (
            unary(UnaryOp::Exp, DType::F32, DType::F32).unwrap(),
            vec![DType::F32],
            DType::F32,
        ),
        (
            unary(UnaryOp::Abs, DType::I32, DType::I32).unwrap(),
            vec![DType::I32],
            DType::I32,
        ),
        (
            binary(BinaryOp::Add, DType::BF16, DType::BF16).unwrap(),
            vec![DType::BF16; 2],
            DType::BF16,
        ),
        (
            binary(BinaryOp::Less, DType::F32, DType::Bool).unwrap(),
            vec![DType::F32; 2],
            DType::Bool,
        ),
        (
            convert(DType::F32, DType::F16),
            vec![DType::F32],
            DType::F16,
        ),
        (convert(DType::U8, DType::F32), vec![DType::U8], DType::F32),
    ];
    for (source, inputs, output) in cases {
        let [c, s, shifted] = both_paths(&source, &inputs, output);
        assert_eq!(c.len(), N as usize * output.size());
        assert!(
            c == s,
            "{}: the contiguous and strided kernels differ",
            source.name
        );
        let first = output.size();
        assert!(
            shifted[first..] == s[first..],
            "{}: the contiguous kernel differs on operands out of its packs' alignment",
            source.name
        );
    }
    // An addition checked against Rust's own, element by element.
    let add = binary(BinaryOp::Add, DType::F32, DType::F32).unwrap();
    let [c, _, _] = both_paths(&add, &[DType::F32; 2], DType::F32);
    let (a, b) = (operand(DType::F32, N, 3), operand(DType::F32, N, 4));
    let f =
        |bytes: &[u8], i: usize| f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap());
    for i in 0..N as usize {
        assert_eq!(
            f(&c, i).to_bits(),
            (f(&a, i) + f(&b, i)).to_bits(),
            "element {i}"
        );
    }
}

#[test]
fn a_fused_chain_and_a_contiguous_copy_give_the_unfused_and_strided_bits() {
    if !compiler_or_skip("a_fused_chain_and_a_contiguous_copy_give_the_unfused_and_strided_bits") {
        return;
    }
    // tanh(x * s) in bfloat16 with `s` a scalar (stride 0), against multiply then tanh.
    let steps = [
        Step::Binary(BinaryOp::Multiply, 0, 1),
        Step::Unary(UnaryOp::Tanh, 2),
    ];
    let fused = chain(&steps, 2, DType::BF16).unwrap();
    let multiply = binary(BinaryOp::Multiply, DType::BF16, DType::BF16).unwrap();
    let tanh = unary(UnaryOp::Tanh, DType::BF16, DType::BF16).unwrap();
    // Each kernel is its own program (their preludes would clash in one); the product's output
    // is the input of tanh.
    let dir = workdir("fused_against_unfused");
    let (x, scale) = (operand(DType::BF16, N, 8), operand(DType::BF16, 1, 9));
    // The layout helper only where the kernel declares the layout's struct.
    let line = |source: &Source, body: &str| {
        let dims = if source.text.contains("struct nv_dims") {
            DIMS
        } else {
            ""
        };
        format!(
            "{dims}\nint main() {{\n    nv_u64 n = {N};\n    auto x = nv_read(\"x.bin\"), s = nv_read(\"s.bin\");\n    std::vector<unsigned char> y(n * 2);\n    {body}\n    nv_write(\"out.bin\", y);\n}}\n"
        )
    };
    // Compiles `source` with `body` as its main and runs it on `x` and the scale.
    let launch = |source: &Source, body: &str, x: &[u8]| {
        compile(&dir, source, &line(source, body));
        run(&dir, &[("x", x), ("s", &scale)], &[])
    };
    let t = "unsigned short";
    let got = launch(
        &fused,
        &format!(
            "nv_launch(3, 8, [&] {{ {}(({t}*)x.data(), 1, ({t}*)s.data(), 0, ({t}*)y.data(), n); }});",
            fused.name
        ),
        &x,
    );
    let product = launch(
        &multiply,
        &format!(
            "nv_dims d = nv_line(n, 1, 0); nv_launch(3, 8, [&] {{ {}_s(({t}*)x.data(), ({t}*)s.data(), ({t}*)y.data(), n, d); }});",
            multiply.name
        ),
        &x,
    );
    // The contiguous kernel reads a scalar operand by its stride parameter of 0.
    let contiguous = launch(
        &multiply,
        &format!(
            "nv_launch(3, 8, [&] {{ {}_c(({t}*)x.data(), ({t}*)s.data(), ({t}*)y.data(), n, 1, 0); }});",
            multiply.name
        ),
        &x,
    );
    assert!(
        contiguous == product,
        "the contiguous product by a scalar differs from the strided one"
    );
    let want = launch(
        &tanh,
        &format!(
            "nv_dims d = nv_line(n, 1, 1); nv_launch(3, 8, [&] {{ {}_s(({t}*)x.data(), ({t}*)y.data(), n, d); }});",
            tanh.name
        ),
        &product,
    );
    assert!(
        got == want,
        "the fused chain differs from multiply then tanh"
    );

    // A copy of 2-byte elements: contiguous (flat) against the same copy as two dimensions.
    let copy = strided_copy(2).unwrap();
    let both = launch(
        &copy,
        &format!(
            "nv_dims flat = nv_line(n, 1, 0); flat.strides[2][0] = 1;\n    std::vector<unsigned char> z(n * 2);\n    nv_launch(3, 8, [&] {{ {name}((unsigned short*)x.data(), (unsigned short*)y.data(), n, flat); }});\n    nv_dims d{{}}; d.ndim = 2; d.shape[0] = 17; d.shape[1] = 59; d.strides[0][0] = 59; d.strides[0][1] = 1; d.strides[2][0] = 59; d.strides[2][1] = 1;\n    nv_launch(3, 8, [&] {{ {name}((unsigned short*)x.data(), (unsigned short*)z.data(), n, d); }});\n    y.insert(y.end(), z.begin(), z.end());",
            name = copy.name
        ),
        &x,
    );
    let (flat, strided) = both.split_at(both.len() / 2);
    assert!(
        flat == &x[..] && strided == &x[..],
        "the copies differ from their source"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
