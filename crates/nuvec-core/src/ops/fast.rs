//! MLX's `mx.fast`: the fused operations language models lean on (`rms_norm`, `layer_norm`,
//! `rope`, `scaled_dot_product_attention`), with MLX's numerics: statistics and softmax in
//! float32 whatever the input dtype, results in the inputs' promoted dtype.
//!
//! They are composed from ops, so every transform (`grad`, `vjp`, `jvp`, `vmap`, `compile`)
//! applies to them as to any other op; `compile` fuses their element-wise chains.

use crate::{ops, Array, DType};

/// The dtype of a normalisation's result: `x`'s, promoted with the weight's when there is one.
fn promoted(x: &Array, weight: Option<&Array>) -> DType {
    match weight {
        Some(w) => DType::promote(x.dtype(), w.dtype()),
        None => x.dtype(),
    }
}

/// Why `x` cannot be normalised over its last axis with `weight`/`bias`, if it cannot.
fn check_norm(x: &Array, params: &[(&str, Option<&Array>)]) -> Option<String> {
    if x.ndim() == 0 {
        return Some("needs an input of rank 1 or more, got a scalar".to_string());
    }
    if !x.dtype().is_float() {
        return Some(format!("needs a floating-point input, got {}", x.dtype()));
    }
    let last = x.shape()[x.ndim() - 1];
    for (name, p) in params {
        if let Some(p) = p {
            if p.shape() != [last] {
                return Some(format!(
                    "{name} must have shape [{last}] (the input's last axis), got {:?}",
                    p.shape()
                ));
            }
        }
    }
    None
}

/// Root-mean-square normalisation over the last axis, as `mx.fast.rms_norm`:
/// `x / √(mean(x²) + eps) · weight`, the statistics in float32.
///
/// ```
/// use nuvec_core::{array, ops::fast};
/// let y = fast::rms_norm(&array![[3.0, 4.0]], Some(&array![1.0, 2.0]), 0.0);
/// let rms = (12.5f32).sqrt();
/// assert_eq!(y.to_vec::<f32>()?, [3.0 / rms, 8.0 / rms]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn rms_norm(x: &Array, weight: Option<&Array>, eps: f32) -> Array {
    if let Some(reason) = check_norm(x, &[("weight", weight)]) {
        return Array::invalid("rms_norm", reason);
    }
    let out = promoted(x, weight);
    let xf = x.astype(DType::F32);
    let mean_square = ops::mean(&ops::square(&xf), -1, true);
    let normed = (&xf * ops::rsqrt(&(mean_square + eps as f64))).astype(out);
    match weight {
        Some(w) => normed * w,
        None => normed,
    }
}

/// Layer normalisation over the last axis, as `mx.fast.layer_norm`:
/// `(x − mean) / √(var + eps) · weight + bias`, the statistics in float32.
///
/// ```
/// use nuvec_core::{array, ops::fast};
/// let y = fast::layer_norm(&array![[1.0, 3.0]], None, None, 0.0);
/// assert_eq!(y.to_vec::<f32>()?, [-1.0, 1.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn layer_norm(x: &Array, weight: Option<&Array>, bias: Option<&Array>, eps: f32) -> Array {
    if let Some(reason) = check_norm(x, &[("weight", weight), ("bias", bias)]) {
        return Array::invalid("layer_norm", reason);
    }
    let mut out = promoted(x, weight);
    if let Some(b) = bias {
        out = DType::promote(out, b.dtype());
    }
    let xf = x.astype(DType::F32);
    let mean = ops::mean(&xf, -1, true);
    let centered = &xf - &mean;
    let variance = ops::mean(&ops::square(&centered), -1, true);
    let mut y = (centered * ops::rsqrt(&(variance + eps as f64))).astype(out);
    if let Some(w) = weight {
        y = y * w;
    }
    if let Some(b) = bias {
        y = y + b;
    }
    y
}

/// The frequencies of a rotary embedding: `base` or explicit per-pair `freqs`, as in
/// `mx.fast.rope(..., base=None, freqs=...)`.
#[derive(Debug, Clone, Copy)]
pub enum RopeFrequencies<'a> {
    /// Pair `i` turns by `base^(−2i/dims)` per position.
    Base(f32),
    /// Pair `i` turns by `1 / freqs[i]` per position (`freqs` has `dims / 2` entries).
    Explicit(&'a Array),
}

/// Rotary position embedding of the first `dims` features of `x` (positions along the
/// second-to-last axis, starting at `offset`), as `mx.fast.rope`: the angle of pair `i` at
/// position `p` is `(offset + p) · scale · θᵢ`; pairs are `(i, i + dims/2)`, or `(2i, 2i+1)`
/// when `traditional`. Features past `dims` pass through; the angles are float32, the
/// rotation is done in `x`'s dtype.
///
/// ```
/// use nuvec_core::{array, ops::fast::{self, RopeFrequencies}};
/// // At position 0 nothing turns.
/// let x = array![[1.0, 2.0, 3.0, 4.0]];
/// let y = fast::rope(&x, 4, false, RopeFrequencies::Base(10000.0), 1.0, 0);
/// assert_eq!(y.to_vec::<f32>()?, [1.0, 2.0, 3.0, 4.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn rope(
    x: &Array,
    dims: usize,
    traditional: bool,
    frequencies: RopeFrequencies<'_>,
    scale: f32,
    offset: usize,
) -> Array {
    let shape = x.shape().to_vec();
    let ndim = shape.len();
    if ndim < 2 || dims == 0 || !dims.is_multiple_of(2) || dims as i32 > shape[ndim - 1] {
        return Array::invalid(
            "rope",
            format!("needs an even dims of at most the last axis and an input of rank 2 or more, got dims {dims} for shape {shape:?}"),
        );
    }
    if !x.dtype().is_float() {
        return Array::invalid(
            "rope",
            format!("needs a floating-point input, got {}", x.dtype()),
        );
    }
    let half = (dims / 2) as i32;
    let inverse = match frequencies {
        RopeFrequencies::Base(base) => {
            let exponents = ops::arange(0.0, half as f64, 1.0, DType::F32) * (-2.0 / dims as f64);
            ops::power(base as f64, &exponents)
        }
        RopeFrequencies::Explicit(freqs) => {
            if freqs.shape() != [half] {
                return Array::invalid(
                    "rope",
                    format!(
                        "freqs must have shape [{half}] (dims / 2), got {:?}",
                        freqs.shape()
                    ),
                );
            }
            ops::reciprocal(&freqs.astype(DType::F32))
        }
    };
    let length = shape[ndim - 2];
    let positions = ops::arange(
        offset as f64,
        (offset + length as usize) as f64,
        1.0,
        DType::F32,
    ) * scale;
    let angles = ops::matmul(
        &ops::reshape(&positions, &[length, 1]),
        &ops::reshape(&inverse, &[1, half]),
    );
    let dtype = x.dtype();
    let (cos, sin) = (
        ops::cos(&angles).astype(dtype),
        ops::sin(&angles).astype(dtype),
    );
    let features = shape[ndim - 1];
    let rotated_part = last_axis(x, 0, dims as i32);
    let (x1, x2) = if traditional {
        let pairs = ops::reshape(&rotated_part, &[&shape[..ndim - 1], &[half, 2]].concat());
        let parts = ops::split(&pairs, 2, -1);
        (
            ops::squeeze(&parts[0], Some(&[-1])),
            ops::squeeze(&parts[1], Some(&[-1])),
        )
    } else {
        let parts = ops::split(&rotated_part, 2, -1);
        (parts[0].clone(), parts[1].clone())
    };
    let y1 = &x1 * &cos - &x2 * &sin;
    let y2 = &x1 * &sin + &x2 * &cos;
    let rotated = if traditional {
        let pairs = ops::stack(&[y1, y2], -1);
        ops::reshape(&pairs, &[&shape[..ndim - 1], &[dims as i32]].concat())
    } else {
        ops::concatenate(&[y1, y2], -1)
    };
    if (dims as i32) < features {
        ops::concatenate(&[rotated, last_axis(x, dims as i32, features)], -1)
    } else {
        rotated
    }
}

/// `x[..., start..stop]`.
fn last_axis(x: &Array, start: i32, stop: i32) -> Array {
    let shape = x.shape();
    let mut starts = vec![0; shape.len()];
    let mut stops = shape.to_vec();
    let last = shape.len() - 1;
    starts[last] = start;
    stops[last] = stop;
    ops::slice(x, &starts, &stops, &vec![1; shape.len()])
}

/// The mask of [`scaled_dot_product_attention`].
#[derive(Debug, Clone, Copy)]
pub enum AttentionMask<'a> {
    /// Every query sees every key.
    None,
    /// Query `i` of `L` sees keys `0..=i + (S − L)` of `S` (the last queries of a sequence
    /// whose first `S − L` positions are cached): MLX's `mask="causal"`.
    Causal,
    /// A boolean array broadcastable to the scores `[B, H, L, S]`: where false, the key is
    /// hidden. A floating-point array is added to the scores.
    Array(&'a Array),
}

/// Attention as `mx.fast.scaled_dot_product_attention`: `softmax(q·kᵀ·scale + mask)·v`
/// with `q` `[B, H, L, D]`, `k` `[B, Hkv, S, D]`, `v` `[B, Hkv, S, Dv]` and `H` a multiple of
/// `Hkv` (grouped-query attention: each key/value head serves `H / Hkv` query heads, without
/// copying it). The softmax is computed in float32; the result is `[B, H, L, Dv]` in `q`'s
/// dtype.
///
/// ```
/// use nuvec_core::{array, ops::{self, fast::{self, AttentionMask}}};
/// let q = ops::reshape(&array![1.0, 0.0], &[1, 1, 1, 2]);
/// let k = ops::reshape(&array![[1.0, 0.0], [0.0, 1.0]], &[1, 1, 2, 2]);
/// let v = ops::reshape(&array![[1.0], [3.0]], &[1, 1, 2, 1]);
/// // With scale 0 the weights are equal: the mean of the values.
/// let y = fast::scaled_dot_product_attention(&q, &k, &v, 0.0, AttentionMask::None);
/// assert_eq!(y.to_vec::<f32>()?, [2.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn scaled_dot_product_attention(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: AttentionMask<'_>,
) -> Array {
    let op = "scaled_dot_product_attention";
    if q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4 {
        return Array::invalid(
            op,
            format!(
                "queries, keys and values must be of rank 4 [batch, heads, length, dims], got {:?}, {:?} and {:?}",
                q.shape(),
                k.shape(),
                v.shape()
            ),
        );
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let (batch, heads, length, dims) = (qs[0], qs[1], qs[2], qs[3]);
    let (kv_heads, keys) = (ks[1], ks[2]);
    if ks[0] != batch || vs[0] != batch || ks[3] != dims || vs[1] != kv_heads || vs[2] != keys {
        return Array::invalid(
            op,
            format!(
                "keys {ks:?} and values {vs:?} do not match queries {qs:?} (same batch, keys' dims equal to the queries', values' heads and length equal to the keys')"
            ),
        );
    }
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Array::invalid(
            op,
            format!("{heads} query heads are not a multiple of {kv_heads} key/value heads"),
        );
    }
    let repeats = heads / kv_heads;
    let dtype = q.dtype();
    // Queries as [B, Hkv, repeats·L, D]: each key/value head meets its group of query heads
    // in one product, with no copy of the keys or values.
    let grouped = ops::reshape(
        &(q * scale as f64),
        &[batch, kv_heads, repeats * length, dims],
    );
    let scores = ops::matmul(&grouped, &ops::swapaxes(k, -1, -2));
    let scores =
        ops::reshape(&scores, &[batch, kv_heads, repeats, length, keys]).astype(DType::F32);
    let scores = match mask {
        AttentionMask::None => scores,
        AttentionMask::Causal => {
            let rows = ops::arange(0.0, length as f64, 1.0, DType::I32) + (keys - length);
            let cols = ops::arange(0.0, keys as f64, 1.0, DType::I32);
            let visible = ops::greater_equal(
                ops::reshape(&rows, &[length, 1]),
                ops::reshape(&cols, &[1, keys]),
            );
            ops::where_(&visible, &scores, f32::NEG_INFINITY as f64)
        }
        AttentionMask::Array(m) => {
            let grouped_mask = group_mask(m, batch, kv_heads, repeats, length, keys);
            if m.dtype() == DType::Bool {
                ops::where_(&grouped_mask, &scores, f32::NEG_INFINITY as f64)
            } else {
                scores + grouped_mask.astype(DType::F32)
            }
        }
    };
    let weights = ops::softmax(&scores, -1).astype(dtype);
    let weights = ops::reshape(&weights, &[batch, kv_heads, repeats * length, keys]);
    let out = ops::matmul(&weights, v);
    ops::reshape(&out, &[batch, heads, length, vs[3]])
}

/// A mask broadcastable to `[B, H, L, S]`, laid out as the grouped scores
/// `[B, Hkv, H/Hkv, L, S]`.
#[track_caller]
fn group_mask(m: &Array, batch: i32, kv_heads: i32, repeats: i32, length: i32, keys: i32) -> Array {
    let full = ops::broadcast_to(m, &[batch, kv_heads * repeats, length, keys]);
    ops::reshape(&full, &[batch, kv_heads, repeats, length, keys])
}
