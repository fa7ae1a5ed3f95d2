//! Loss functions with MLX's definitions and defaults (`mlx.nn.losses`). Each takes a
//! [`Reduction`]; MLX's default differs per loss and is named in each function's docs.

use nuvec_core::{ops, Array};

/// How a loss combines its per-element values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// Every element's loss.
    None,
    /// Their mean.
    Mean,
    /// Their sum.
    Sum,
}

fn reduce(loss: Array, reduction: Reduction) -> Array {
    match reduction {
        Reduction::None => loss,
        Reduction::Mean => ops::mean(&loss, None, false),
        Reduction::Sum => ops::sum(&loss, None, false),
    }
}

/// What a classification loss compares its logits with.
#[derive(Clone, Copy, Debug)]
pub enum Targets<'a> {
    /// Class indices (integers), one per row of the logits.
    Classes(&'a Array),
    /// A probability for every class (same shape as the logits).
    Probabilities(&'a Array),
}

/// Cross-entropy of `logits` (classes along the last axis) against `targets`:
/// `logsumexp(logits) - score`, where the score is the target's logit (or the
/// probability-weighted sum of logits). With `label_smoothing` `s`, the score is scaled by
/// `1 - s` and `s · mean(logits)` is subtracted. The logits are first shifted by their row
/// maximum, as MLX shifts them (this matters for probability targets that do not sum to
/// one). `weights` multiply each element's loss before the reduction. MLX's default
/// reduction is `None`.
///
/// ```
/// use nuvec::{array, ops, DType};
/// use nuvec_nn::losses::{cross_entropy, Reduction, Targets};
/// let logits = array![[2.0, 0.0], [0.0, 2.0]];
/// let classes = ops::astype(&array![0, 1], DType::I32);
/// let loss = cross_entropy(&logits, Targets::Classes(&classes), None, 0.0, Reduction::Mean);
/// assert!((loss.item::<f32>()? - 0.126928).abs() < 1e-5);
/// # Ok::<(), nuvec::Error>(())
/// ```
#[track_caller]
pub fn cross_entropy(
    logits: &Array,
    targets: Targets<'_>,
    weights: Option<&Array>,
    label_smoothing: f64,
    reduction: Reduction,
) -> Array {
    if !(0.0..1.0).contains(&label_smoothing) {
        return Array::invalid(
            "cross_entropy",
            format!("label smoothing must be in [0, 1), got {label_smoothing}"),
        );
    }
    // Shifted by the (constant) row maximum first, as MLX does: with probability targets
    // that do not sum to one, the shift changes the result.
    let logits = &(logits - ops::stop_gradient(&ops::max(logits, -1, true)));
    let score = match targets {
        Targets::Classes(classes) => {
            let picked = ops::take_along_axis(logits, &ops::expand_dims(classes, &[-1]), Some(-1));
            ops::squeeze(&picked, Some(&[-1]))
        }
        Targets::Probabilities(probabilities) => ops::sum(&(logits * probabilities), -1, false),
    };
    let normalizer = ops::logsumexp(logits, -1, false);
    let loss = if label_smoothing > 0.0 {
        let smoothed = ops::mean(logits, -1, false) * -label_smoothing;
        normalizer - score * (1.0 - label_smoothing) + smoothed
    } else {
        normalizer - score
    };
    let loss = match weights {
        Some(weights) => loss * weights,
        None => loss,
    };
    reduce(loss, reduction)
}

/// Binary cross-entropy. With `with_logits`, `inputs` are logits and the loss is
/// `log(1 + eˣ) - x·t`; without, they are probabilities and each log is clipped at −100.
/// MLX's default reduction is `Mean`.
#[track_caller]
pub fn binary_cross_entropy(
    inputs: &Array,
    targets: &Array,
    with_logits: bool,
    reduction: Reduction,
) -> Array {
    let loss = if with_logits {
        ops::logaddexp(0.0, inputs) - inputs * targets
    } else {
        let log_p = ops::maximum(ops::log(inputs), -100.0);
        let log_not_p = ops::maximum(ops::log(&(1.0 - inputs)), -100.0);
        -(targets * log_p + (1.0 - targets) * log_not_p)
    };
    reduce(loss, reduction)
}

/// Squared error `(p - t)²`. MLX's default reduction is `Mean`.
#[track_caller]
pub fn mse_loss(predictions: &Array, targets: &Array, reduction: Reduction) -> Array {
    reduce(ops::square(&(predictions - targets)), reduction)
}

/// Absolute error `|p - t|`. MLX's default reduction is `Mean`.
#[track_caller]
pub fn l1_loss(predictions: &Array, targets: &Array, reduction: Reduction) -> Array {
    reduce(ops::abs(&(predictions - targets)), reduction)
}

/// Negative log-likelihood: minus the target's log-probability (classes along the last axis
/// of `inputs`). MLX's default reduction is `None`.
#[track_caller]
pub fn nll_loss(inputs: &Array, classes: &Array, reduction: Reduction) -> Array {
    let picked = ops::take_along_axis(inputs, &ops::expand_dims(classes, &[-1]), Some(-1));
    reduce(-ops::squeeze(&picked, Some(&[-1])), reduction)
}

/// Kullback–Leibler divergence of log-probabilities: `Σ e^t · (t - x)` over the last axis.
/// MLX's default reduction is `None`.
#[track_caller]
pub fn kl_div_loss(inputs: &Array, targets: &Array, reduction: Reduction) -> Array {
    let terms = ops::exp(targets) * (targets - inputs);
    reduce(ops::sum(&terms, -1, false), reduction)
}

/// Smooth L1: `0.5 d² / beta` where `d = |p - t| < beta`, else `d - 0.5 beta`. MLX's
/// default `beta` is 1 and reduction `Mean`.
#[track_caller]
pub fn smooth_l1_loss(
    predictions: &Array,
    targets: &Array,
    beta: f64,
    reduction: Reduction,
) -> Array {
    let diff = ops::abs(&(predictions - targets));
    let loss = ops::where_(
        ops::less(&diff, beta),
        &(ops::square(&diff) * (0.5 / beta)),
        &(&diff - 0.5 * beta),
    );
    reduce(loss, reduction)
}

/// Huber loss: `0.5 q² + delta · (|e| - q)` with `e = x - t`, `q = min(|e|, delta)`. MLX's
/// default `delta` is 1 and reduction `None`.
#[track_caller]
pub fn huber_loss(inputs: &Array, targets: &Array, delta: f64, reduction: Reduction) -> Array {
    let errors = ops::abs(&(inputs - targets));
    let quadratic = ops::minimum(&errors, delta);
    let linear = &errors - &quadratic;
    reduce(ops::square(&quadratic) * 0.5 + linear * delta, reduction)
}
