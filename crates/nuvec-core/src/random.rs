//! Random numbers with MLX's generator: the same seed gives MLX's values bit for bit.
//!
//! Keys are uint32 arrays of shape `[2]` fed to threefry-2x32 (see [`docs/mlx-random-numbers.md`](https://github.com/nuvec/nuvec/blob/main/docs/mlx-random-numbers.md)).
//! Functions take an optional explicit key; without one they take the next key from the
//! global state, which [`seed`] resets (each draw splits the state once, as MLX).
//!
//! ```
//! use nuvec_core::{random, DType};
//! random::seed(0);
//! let x = random::normal(&[4], DType::F32, None);
//! assert_eq!(x.to_vec::<f32>()?, [1.1378784, -0.14331418, -0.59153634, 0.7946625]);
//! # Ok::<(), nuvec_core::Error>(())
//! ```

use crate::ops;
use crate::primitives::random_bits::RandomBits;
use crate::{Array, DType};
use nuvec_cpu::threefry;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

static STATE: Mutex<Option<[u32; 2]>> = Mutex::new(None);

/// Resets the global key to `key(seed)`.
pub fn seed(seed: u64) {
    *crate::array::lock(&STATE) = Some(threefry::key_from_seed(seed));
}

thread_local! {
    /// While `compile` traces a function: the global keys it drew, in order.
    static DRAWN: std::cell::RefCell<Option<Vec<Array>>> = const { std::cell::RefCell::new(None) };
}

/// Starts noting the global keys drawn on this thread (for `compile`).
pub(crate) fn start_recording() {
    DRAWN.with(|d| *d.borrow_mut() = Some(Vec::new()));
}

/// Stops noting and returns the global keys drawn since [`start_recording`].
pub(crate) fn finish_recording() -> Vec<Array> {
    DRAWN.with(|d| d.borrow_mut().take()).unwrap_or_default()
}

/// Splits the global key: keeps the first half, returns the second (MLX's order).
pub(crate) fn next_global_key() -> Array {
    let mut state = crate::array::lock(&STATE);
    let current = state.get_or_insert_with(|| {
        // Unseeded: the time in milliseconds, taken once, as MLX.
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        threefry::key_from_seed(millis)
    });
    let drawn = threefry::next_key(current);
    let key = Array::from_slice(&drawn, &[2]);
    DRAWN.with(|d| {
        if let Some(log) = d.borrow_mut().as_mut() {
            log.push(key.clone());
        }
    });
    key
}

/// The key to draw from: `key`, checked, or the next global one.
#[track_caller]
fn key_or_next(op: &str, key: Option<&Array>) -> Result<Array, Array> {
    match key {
        None => Ok(next_global_key()),
        Some(k) if k.dtype() == DType::U32 && k.shape() == [2] => Ok(k.clone()),
        Some(k) => Err(Array::invalid(
            op,
            format!(
                "a key is a uint32 array of shape [2], got {} {:?}",
                k.dtype(),
                k.shape()
            ),
        )),
    }
}

/// The global key as it stands (uint32 `[2]`): what the next draw will split.
pub fn state() -> Array {
    let mut state = crate::array::lock(&STATE);
    let current = *state.get_or_insert_with(|| threefry::key_from_seed(0));
    Array::from_slice(&current, &[2])
}

/// A random state of its own: the keys the global state would hand out after
/// [`seed`]`(seed)`, one per [`next_key`](KeyStream::next_key), without touching the global
/// state (so several generators, a server's requests say, each repeat their own draws).
///
/// ```
/// use nuvec_core::{random, DType};
/// let mut stream = random::KeyStream::new(7);
/// random::seed(7);
/// let global = random::normal(&[3], DType::F32, None);
/// let own = random::normal(&[3], DType::F32, Some(&stream.next_key()));
/// assert_eq!(own.to_vec::<f32>()?, global.to_vec::<f32>()?);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyStream {
    state: [u32; 2],
}

impl KeyStream {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> KeyStream {
        KeyStream {
            state: threefry::key_from_seed(seed),
        }
    }

    /// The next key (uint32 `[2]`), splitting the state as a global draw does.
    pub fn next_key(&mut self) -> Array {
        Array::from_slice(&threefry::next_key(&mut self.state), &[2])
    }
}

/// The key of `seed`: `[seed >> 32, seed & 0xffffffff]` as uint32.
pub fn key(seed: u64) -> Array {
    Array::from_slice(&threefry::key_from_seed(seed), &[2])
}

/// `num` new keys from `key`, as a uint32 array of shape `[num, 2]`.
#[track_caller]
pub fn split(key: &Array, num: i32) -> Array {
    if num < 1 {
        return Array::invalid("split", format!("num must be >= 1, got {num}"));
    }
    match key_or_next("split", Some(key)) {
        Ok(k) => bits_with_key(&k, &[num, 2], 4),
        Err(failed) => failed,
    }
}

fn bits_with_key(key: &Array, shape: &[i32], width: usize) -> Array {
    let dtype = match width {
        1 => DType::U8,
        2 => DType::U16,
        _ => DType::U32,
    };
    Array::from_primitive(
        Arc::new(RandomBits { width }),
        vec![key.clone()],
        shape.to_vec(),
        dtype,
    )
}

/// Raw random bits: `width` bytes (1, 2 or 4) per element, as uint8/uint16/uint32.
#[track_caller]
pub fn bits(shape: &[i32], width: usize, key: Option<&Array>) -> Array {
    if ![1, 2, 4].contains(&width) {
        return Array::invalid(
            "bits",
            format!("width must be 1, 2 or 4 bytes, got {width}"),
        );
    }
    if shape.iter().any(|&d| d < 0) {
        return Array::invalid("bits", format!("invalid shape {shape:?}"));
    }
    match key_or_next("bits", key) {
        Ok(k) => bits_with_key(&k, shape, width),
        Err(failed) => failed,
    }
}

/// The largest value below 1 in `dtype`, held in f32.
fn below_one(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 0.999_511_718_75,
        DType::BF16 => 0.996_093_75,
        _ => f64::from(f32::from_bits(0x3F7F_FFFF)),
    }
}

/// Uniform in `[0, 1)` from explicit key bits, as `dtype`.
fn unit_uniform(key: &Array, shape: &[i32], dtype: DType) -> Array {
    let words = bits_with_key(key, shape, 4).astype(DType::F32);
    let scaled = ops::divide(&words, 4_294_967_296.0f32);
    ops::minimum(&scaled, below_one(dtype) as f32).astype(dtype)
}

/// Uniform values in `[low, high)` of `dtype` (float16, bfloat16 or float32, as MLX).
#[track_caller]
pub fn uniform(low: f64, high: f64, shape: &[i32], dtype: DType, key: Option<&Array>) -> Array {
    if !matches!(dtype, DType::F16 | DType::BF16 | DType::F32) {
        return Array::invalid(
            "uniform",
            format!("unsupported type {dtype}: use float16, bfloat16 or float32"),
        );
    }
    match key_or_next("uniform", key) {
        Ok(k) => uniform_with_key(&k, low, high, shape, dtype),
        Err(failed) => failed,
    }
}

fn uniform_with_key(key: &Array, low: f64, high: f64, shape: &[i32], dtype: DType) -> Array {
    let lo = ops::full(&[], low, DType::F32).astype(dtype);
    let range = ops::subtract(ops::full(&[], high, DType::F32).astype(dtype), &lo);
    ops::add(ops::multiply(&range, unit_uniform(key, shape, dtype)), &lo)
}

/// Standard normal values (mean 0, standard deviation 1) of any float `dtype`.
#[track_caller]
pub fn normal(shape: &[i32], dtype: DType, key: Option<&Array>) -> Array {
    normal_with(shape, dtype, 0.0, 1.0, key)
}

/// Normal values with mean `loc` and standard deviation `scale`.
#[track_caller]
pub fn normal_with(
    shape: &[i32],
    dtype: DType,
    loc: f64,
    scale: f64,
    key: Option<&Array>,
) -> Array {
    if !dtype.is_float() {
        return Array::invalid("normal", format!("needs a float dtype, got {dtype}"));
    }
    let key = match key_or_next("normal", key) {
        Ok(k) => k,
        Err(failed) => return failed,
    };
    let low = f64::from(f32::from_bits(0xBF7F_FFFF));
    let u = uniform_with_key(&key, low, 1.0, shape, DType::F32);
    let e = ops::erfinv(&u).astype(dtype);
    let mut s = ops::full(&[], std::f64::consts::SQRT_2, dtype);
    if scale != 1.0 {
        s = ops::multiply(&s, ops::full(&[], scale, dtype));
    }
    let out = ops::multiply(&s, &e);
    if loc == 0.0 {
        out
    } else {
        ops::add(ops::full(&[], loc, dtype), &out)
    }
}

/// Integers uniform in `[low, high)` of an integer (or bool) `dtype`.
#[track_caller]
pub fn randint(low: i64, high: i64, shape: &[i32], dtype: DType, key: Option<&Array>) -> Array {
    if dtype.is_float() {
        return Array::invalid(
            "randint",
            format!("needs an integer or bool dtype, got {dtype}"),
        );
    }
    let key = match key_or_next("randint", key) {
        Ok(k) => k,
        Err(failed) => return failed,
    };
    let u = uniform_with_key(&key, low as f64, high as f64, shape, DType::F32);
    let drawn = ops::floor(&u).astype(dtype);
    let top = ops::full(&[], (high - 1) as f64, DType::I32).astype(dtype);
    ops::maximum(
        ops::minimum(&drawn, &top),
        ops::full(&[], low as f64, DType::I32).astype(dtype),
    )
}

/// Booleans that are true with probability `p`.
#[track_caller]
pub fn bernoulli(p: f64, shape: &[i32], key: Option<&Array>) -> Array {
    if !(0.0..=1.0).contains(&p) {
        return Array::invalid(
            "bernoulli",
            format!("p must be a probability in [0, 1], got {p}"),
        );
    }
    match key_or_next("bernoulli", key) {
        Ok(k) => {
            let words = bits_with_key(&k, shape, 4).astype(DType::F32);
            // The next float above 2^32, so that p = 1 is always true.
            let threshold = (p as f32) * 4_294_967_808.0f32;
            ops::less(&words, threshold)
        }
        Err(failed) => failed,
    }
}

/// MLX's single-precision `erf` (used to bound truncated normals bit-exactly).
fn erf_mlx(x: f32) -> f32 {
    let t = 1.0 / 0.327_591_1f32.mul_add(x.abs(), 1.0);
    let mut r = 1.061_405_4f32.mul_add(t, -1.453_152);
    r = r.mul_add(t, 1.421_413_8);
    r = r.mul_add(t, -0.284_496_74);
    r = r.mul_add(t, 0.254_829_6);
    let e = -exp_mlx(-x * x);
    let res = (e * t).mul_add(r, 1.0);
    if x > 0.0 {
        res
    } else {
        -res
    }
}

/// MLX's fast single-precision `exp`.
fn exp_mlx(x: f32) -> f32 {
    const C: [f32; 6] = [
        1.339_887_4e-3,
        9.618_437e-3,
        5.550_332_5e-2,
        2.402_264_8e-1,
        6.931_472e-1,
        1.0,
    ];
    let y = x * std::f32::consts::LOG2_E;
    let ip = (y + 0.5).floor();
    let fp = y - ip;
    let p = C.iter().fold(1.535_336_2e-4f32, |p, &c| p.mul_add(fp, c));
    let res = f32::from_bits(((ip as i32 + 127) as u32) << 23) * p;
    if x.is_nan() {
        x
    } else if x > 88.0 {
        f32::INFINITY
    } else if x < -88.0 {
        0.0
    } else {
        res
    }
}

/// Normal values truncated to `[lower, upper]`.
#[track_caller]
pub fn truncated_normal(
    lower: f64,
    upper: f64,
    shape: &[i32],
    dtype: DType,
    key: Option<&Array>,
) -> Array {
    if !dtype.is_float() {
        return Array::invalid(
            "truncated_normal",
            format!("needs a float dtype, got {dtype}"),
        );
    }
    if lower >= upper {
        return Array::invalid(
            "truncated_normal",
            format!("lower {lower} must be below upper {upper}"),
        );
    }
    let key = match key_or_next("truncated_normal", key) {
        Ok(k) => k,
        Err(failed) => return failed,
    };
    let as_dtype = |v: f64| ops::full(&[], v, dtype);
    let r2 = as_dtype(std::f64::consts::SQRT_2);
    let (l, h) = (as_dtype(lower), as_dtype(upper));
    // erf of the bounds in f32 on their dtype-rounded values, as MLX.
    let bound = |v: f64| -> f64 {
        let rounded = ops::divide(as_dtype(v), &r2)
            .astype(DType::F32)
            .item::<f32>()
            .unwrap_or(f32::NAN);
        f64::from(erf_mlx(rounded))
    };
    let v = uniform_with_key(
        &key,
        bound(lower),
        bound(upper),
        shape,
        if dtype == DType::F64 {
            DType::F32
        } else {
            dtype
        },
    );
    let out = ops::multiply(&r2, ops::erfinv(&v).astype(dtype));
    ops::maximum(ops::minimum(&h, &out), &l)
}

/// Gumbel-distributed values: `-log(-log(uniform))`.
#[track_caller]
pub fn gumbel(shape: &[i32], dtype: DType, key: Option<&Array>) -> Array {
    let u = uniform(0.0, 1.0, shape, dtype, key);
    ops::negative(&ops::log(&ops::negative(&ops::log(&u))))
}

/// Indices (uint32) sampled from the categorical distributions given by unnormalised
/// `logits` along `axis`; `num_samples` draws several per distribution.
#[track_caller]
pub fn categorical(
    logits: &Array,
    axis: i32,
    num_samples: Option<i32>,
    key: Option<&Array>,
) -> Array {
    if let Some(error) = logits.known_error() {
        return Array::failed(error);
    }
    let axis = match ops::normalize_axis(axis, logits.ndim()) {
        Ok(a) => a,
        Err(reason) => return Array::invalid("categorical", reason),
    };
    let key = match key_or_next("categorical", key) {
        Ok(k) => k,
        Err(failed) => return failed,
    };
    let n = logits.shape()[axis];
    let mut sample_shape: Vec<i32> = logits
        .shape()
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != axis)
        .map(|(_, &d)| d)
        .collect();
    if let Some(k) = num_samples {
        if k < 0 {
            return Array::invalid("categorical", format!("num_samples must be >= 0, got {k}"));
        }
        sample_shape.push(k);
    }
    if n > 0 && logits.size() == n as usize && !sample_shape.is_empty() {
        // One distribution, several samples: MLX inverts the CDF.
        let x = ops::reshape(logits, &[-1]).astype(DType::F32);
        let peak = x.max(None, false);
        let weights = ops::where_(
            ops::isinf(&peak),
            ops::equal(&x, &peak).astype(DType::F32),
            ops::exp(&ops::subtract(&x, &peak)),
        );
        let cdf = ops::cumsum(&weights, Some(0), false, false);
        let total = ops::take(
            &ops::cumsum(&weights, Some(0), false, true),
            &Array::scalar(n - 1),
            None,
        );
        let u = ops::multiply(unit_uniform(&key, &sample_shape, DType::F32), &total);
        let below = ops::less_equal(ops::expand_dims(&cdf, &[0]), ops::reshape(&u, &[-1, 1]));
        let counts = ops::sum(&below, 1, false);
        return ops::reshape(&ops::subtract(counts.astype(DType::U32), 1), &sample_shape);
    }
    // Gumbel-max: add Gumbel noise and take the argmax over the category axis.
    let expanded = if num_samples.is_some() {
        ops::expand_dims(logits, &[-1])
    } else {
        logits.clone()
    };
    let mut noise_shape = sample_shape.clone();
    noise_shape.insert(axis, n);
    let noise = gumbel_with_key(&key, &noise_shape);
    ops::argmax(&ops::add(&noise, &expanded), Some(axis as i32), false)
}

fn gumbel_with_key(key: &Array, shape: &[i32]) -> Array {
    let u = unit_uniform(key, shape, DType::F32);
    ops::negative(&ops::log(&ops::negative(&ops::log(&u))))
}

/// A random permutation of `0..n` (uint32).
#[track_caller]
pub fn permutation(n: i32, key: Option<&Array>) -> Array {
    if n < 0 {
        return Array::invalid("permutation", format!("n must be >= 0, got {n}"));
    }
    match key_or_next("permutation", key) {
        Ok(k) => ops::argsort(&bits_with_key(&k, &[n], 4), Some(0)),
        Err(failed) => failed,
    }
}

/// `x` shuffled along `axis`.
#[track_caller]
pub fn permute(x: &Array, axis: i32, key: Option<&Array>) -> Array {
    match x.dim(axis) {
        Some(len) => ops::take(x, &permutation(len, key), Some(axis)),
        None => Array::invalid(
            "permutation",
            format!("axis {axis} is out of range for shape {:?}", x.shape()),
        ),
    }
}
