//! An optional system BLAS, loaded at run time, for large float32/float64 products.
//!
//! The `gemm` crate computes every product by default. When a CBLAS library can be loaded
//! (OpenBLAS on Linux, Accelerate on macOS; `NUVEC_BLAS=/path/to/lib` names one,
//! `NUVEC_BLAS=none` turns this off), products of at least [`MIN_BLAS_FLOPS`] use it: on
//! large matrices a tuned BLAS is faster than `gemm`. Nothing is needed at build time.

use libloading::Library;
use std::sync::OnceLock;

/// Multiply-adds below which `gemm` is used anyway (calling into BLAS costs its threads' wake-up).
pub const MIN_BLAS_FLOPS: usize = 512 * 512 * 512;

const ROW_MAJOR: i32 = 101;
const NO_TRANS: i32 = 111;

/// `cblas_?gemm` for element type `T`.
type Gemm<T> = unsafe extern "C" fn(
    i32,
    i32,
    i32,
    i32,
    i32,
    i32,
    T,
    *const T,
    i32,
    *const T,
    i32,
    T,
    *mut T,
    i32,
);
type Sgemm = Gemm<f32>;
type Dgemm = Gemm<f64>;

/// A loaded CBLAS library.
#[derive(Debug)]
pub struct Blas {
    /// Where it was loaded from.
    pub name: String,
    sgemm: Sgemm,
    dgemm: Dgemm,
    _library: Library,
}

fn candidates() -> Vec<String> {
    if let Ok(chosen) = std::env::var("NUVEC_BLAS") {
        return if chosen == "none" {
            Vec::new()
        } else {
            vec![chosen]
        };
    }
    if cfg!(target_os = "macos") {
        vec!["/System/Library/Frameworks/Accelerate.framework/Accelerate".into()]
    } else {
        [
            "libopenblas.so.0",
            "libopenblas.so",
            "libcblas.so.3",
            "libblas.so.3",
        ]
        .map(String::from)
        .to_vec()
    }
}

fn load(name: &str) -> Option<Blas> {
    // SAFETY: loading runs the library's initialisers; the candidates are system BLAS
    // libraries (or one the user named in NUVEC_BLAS), whose initialisers are sound.
    let library = unsafe { Library::new(name) }.ok()?;
    // SAFETY: `cblas_sgemm`/`cblas_dgemm` have these C signatures in every CBLAS (LP64).
    let sgemm = unsafe { library.get::<Sgemm>(b"cblas_sgemm\0") }
        .ok()
        .map(|s| *s)?;
    // SAFETY: as above.
    let dgemm = unsafe { library.get::<Dgemm>(b"cblas_dgemm\0") }
        .ok()
        .map(|s| *s)?;
    Some(Blas {
        name: name.to_string(),
        sgemm,
        dgemm,
        _library: library,
    })
}

/// The system BLAS, loaded once on first use; `None` when there is none.
pub fn blas() -> Option<&'static Blas> {
    static BLAS: OnceLock<Option<Blas>> = OnceLock::new();
    BLAS.get_or_init(|| candidates().iter().find_map(|name| load(name)))
        .as_ref()
}

fn fits(dims: [usize; 3]) -> bool {
    dims.iter().all(|&d| d > 0 && d <= i32::MAX as usize)
}

/// `out = a x b` through `gemm` (row-major, no transposes); false when the dims do not fit
/// BLAS's 32-bit integers or the slices are too short.
fn product<T: Copy>(
    gemm: Gemm<T>,
    (one, zero): (T, T),
    (m, n, k): (usize, usize, usize),
    a: &[T],
    b: &[T],
    out: &mut [T],
) -> bool {
    if !fits([m, n, k]) || a.len() < m * k || b.len() < k * n || out.len() < m * n {
        return false;
    }
    let (m, n, k) = (m as i32, n as i32, k as i32);
    // SAFETY: the slices hold at least m*k, k*n and m*n elements (checked above), which is
    // exactly what a row-major NoTrans product with these leading dimensions reads/writes.
    unsafe {
        gemm(
            ROW_MAJOR,
            NO_TRANS,
            NO_TRANS,
            m,
            n,
            k,
            one,
            a.as_ptr(),
            k,
            b.as_ptr(),
            n,
            zero,
            out.as_mut_ptr(),
            n,
        )
    };
    true
}

impl Blas {
    /// `out = a x b` for row-major `a: [m, k]`, `b: [k, n]`, `out: [m, n]` in f32; false when
    /// the dims do not fit BLAS's 32-bit integers (the caller then uses `gemm`).
    pub fn sgemm(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        b: &[f32],
        out: &mut [f32],
    ) -> bool {
        product(self.sgemm, (1.0, 0.0), (m, n, k), a, b, out)
    }

    /// [`Blas::sgemm`] in f64.
    pub fn dgemm(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: &[f64],
        b: &[f64],
        out: &mut [f64],
    ) -> bool {
        product(self.dgemm, (1.0, 0.0), (m, n, k), a, b, out)
    }
}
