//! The harness: compiling a kernel with a driver as host C++, running it, its operands.

use nuvec_cpu::{bf16, f16};
use nuvec_cuda::kernels::Source;
use std::path::{Path, PathBuf};
use std::process::Command;
/// Whether `g++` is here; without it, a visible skip (or a failure when required).
pub(crate) fn compiler_or_skip(test: &str) -> bool {
    let found = Command::new("g++")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("NUVEC_REQUIRE_HOST_CXX").is_none(),
            "{test}: NUVEC_REQUIRE_HOST_CXX is set but g++ is not on PATH"
        );
        nuvec_test_support::skip(&format!(
            "{test}: g++ is not on PATH (apt install g++; set NUVEC_REQUIRE_HOST_CXX=1 to make this a failure)"
        ));
    }
    found
}

/// A fresh directory for one kernel's program and files.
pub(crate) fn workdir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("nuvec-host-kernels-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// Compiles `source` with `driver` (a `main` reading its operands from files and taking the
/// sizes as arguments) into `dir/run`.
pub(crate) fn compile(dir: &Path, source: &Source, driver: &str) {
    let header = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/host");
    let program = dir.join("main.cpp");
    let text = format!("#include \"cuda_on_host.h\"\n{}\n{driver}", source.text);
    std::fs::write(&program, text).expect("writing the program");
    let output = Command::new("g++")
        .args(["-std=c++20", "-O1", "-pthread", "-w", "-I"])
        .arg(&header)
        .arg(&program)
        .arg("-o")
        .arg(dir.join("run"))
        .output()
        .expect("running g++");
    assert!(
        output.status.success(),
        "{} did not compile as host C++:\n{}",
        source.name,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Runs `dir/run` with `args`, its operands written first as `name.bin`; returns `out.bin`.
pub(crate) fn run(dir: &Path, operands: &[(&str, &[u8])], args: &[u64]) -> Vec<u8> {
    for (name, bytes) in operands {
        std::fs::write(dir.join(format!("{name}.bin")), bytes).expect("writing an operand");
    }
    let status = Command::new(dir.join("run"))
        .args(args.iter().map(u64::to_string))
        .current_dir(dir)
        .status()
        .expect("running the kernel's program");
    assert!(status.success(), "the kernel's program failed: {status}");
    std::fs::read(dir.join("out.bin")).expect("reading the result")
}

/// Deterministic values in `[-1, 1)`.
pub(crate) struct Values(pub(crate) u64);

impl Values {
    pub(crate) fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    pub(crate) fn byte(&mut self) -> u8 {
        ((self.next() + 1.0) * 128.0) as u8
    }
}

/// The dtypes the tests use, as their little-endian bytes.
pub(crate) trait Stored: Copy {
    const BYTES: usize;
    fn put(self, out: &mut Vec<u8>);
    fn get(bytes: &[u8]) -> Self;
}

impl Stored for f32 {
    const BYTES: usize = 4;
    fn put(self, out: &mut Vec<u8>) {
        out.extend(self.to_le_bytes());
    }
    fn get(bytes: &[u8]) -> Self {
        f32::from_le_bytes(bytes.try_into().expect("4 bytes"))
    }
}

impl Stored for bf16 {
    const BYTES: usize = 2;
    fn put(self, out: &mut Vec<u8>) {
        out.extend(self.to_bits().to_le_bytes());
    }
    fn get(bytes: &[u8]) -> Self {
        bf16::from_bits(u16::from_le_bytes(bytes.try_into().expect("2 bytes")))
    }
}

impl Stored for f16 {
    const BYTES: usize = 2;
    fn put(self, out: &mut Vec<u8>) {
        out.extend(self.to_bits().to_le_bytes());
    }
    fn get(bytes: &[u8]) -> Self {
        f16::from_bits(u16::from_le_bytes(bytes.try_into().expect("2 bytes")))
    }
}

impl Stored for i32 {
    const BYTES: usize = 4;
    fn put(self, out: &mut Vec<u8>) {
        out.extend(self.to_le_bytes());
    }
    fn get(bytes: &[u8]) -> Self {
        i32::from_le_bytes(bytes.try_into().expect("4 bytes"))
    }
}

impl Stored for u32 {
    const BYTES: usize = 4;
    fn put(self, out: &mut Vec<u8>) {
        out.extend(self.to_le_bytes());
    }
    fn get(bytes: &[u8]) -> Self {
        u32::from_le_bytes(bytes.try_into().expect("4 bytes"))
    }
}

pub(crate) fn bytes_of<T: Stored>(values: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * T::BYTES);
    for &v in values {
        v.put(&mut out);
    }
    out
}

pub(crate) fn from_bytes<T: Stored>(bytes: &[u8]) -> Vec<T> {
    bytes.chunks_exact(T::BYTES).map(T::get).collect()
}
