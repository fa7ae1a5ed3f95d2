//! Activation functions with MLX's definitions (`mlx.nn.activations`), and [`Activation`],
//! the ones without parameters as a value that a [`crate::Sequential`] can hold.

use nuvec_core::{ops, Array};

/// `max(x, 0)`.
pub fn relu(x: &Array) -> Array {
    ops::maximum(x, 0.0)
}

/// `min(max(x, 0), 6)`.
pub fn relu6(x: &Array) -> Array {
    ops::minimum(ops::maximum(x, 0.0), 6.0)
}

/// `max(slope · x, x)` (MLX's default slope is 0.01).
pub fn leaky_relu(x: &Array, negative_slope: f64) -> Array {
    ops::maximum(&(x * negative_slope), x)
}

/// `x` where positive, else `alpha · (eˣ - 1)`.
pub fn elu(x: &Array, alpha: f64) -> Array {
    ops::where_(ops::greater(x, 0.0), x, &(ops::expm1(x) * alpha))
}

/// `1.0507 · elu(x, 1.67326)`.
pub fn selu(x: &Array) -> Array {
    elu(x, 1.67326) * 1.0507
}

/// `max(x, 0) + alpha · (e^(min(x, 0)/alpha) - 1)`.
pub fn celu(x: &Array, alpha: f64) -> Array {
    ops::maximum(x, 0.0) + ops::expm1(&(ops::minimum(x, 0.0) / alpha)) * alpha
}

/// `x · σ(x)`.
pub fn silu(x: &Array) -> Array {
    x * ops::sigmoid(x)
}

/// `x · (1 + erf(x/√2)) / 2`.
pub fn gelu(x: &Array) -> Array {
    x * (ops::erf(&(x / std::f64::consts::SQRT_2)) + 1.0) / 2.0
}

/// `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`.
pub fn gelu_approx(x: &Array) -> Array {
    let inner = (x + ops::power(x, 3.0) * 0.044715) * (2.0 / std::f64::consts::PI).sqrt();
    x * 0.5 * (ops::tanh(&inner) + 1.0)
}

/// `x · σ(1.702 x)`.
pub fn gelu_fast_approx(x: &Array) -> Array {
    x * ops::sigmoid(&(x * 1.702))
}

/// `log(1 + eˣ)`.
pub fn softplus(x: &Array) -> Array {
    ops::logaddexp(x, 0.0)
}

/// `x / (1 + |x|)`.
pub fn softsign(x: &Array) -> Array {
    x / (ops::abs(x) + 1.0)
}

/// `x · tanh(softplus(x))`.
pub fn mish(x: &Array) -> Array {
    x * ops::tanh(&softplus(x))
}

/// `log σ(x) = -softplus(-x)`.
pub fn log_sigmoid(x: &Array) -> Array {
    -softplus(&-x)
}

/// `σ(x) = 1 / (1 + e⁻ˣ)`.
pub fn sigmoid(x: &Array) -> Array {
    ops::sigmoid(x)
}

/// `tanh(x)`.
pub fn tanh(x: &Array) -> Array {
    ops::tanh(x)
}

/// `x` clipped to `[min, max]` (MLX's defaults −1 and 1).
pub fn hard_tanh(x: &Array, min: f64, max: f64) -> Array {
    ops::minimum(ops::maximum(x, min), max)
}

/// `x · min(max(x + 3, 0), 6) / 6`.
pub fn hardswish(x: &Array) -> Array {
    let gate = ops::minimum(ops::maximum(&(x + 3.0), 0.0), 6.0);
    x * gate / 6.0
}

/// 1 where `x >= threshold`, else 0, as int32 (MLX's dtype).
pub fn step(x: &Array, threshold: f64) -> Array {
    ops::where_(
        ops::greater_equal(x, threshold),
        Array::scalar(1i32),
        Array::scalar(0i32),
    )
}

/// `max(x, 0) + alpha · min(x, 0)`.
pub fn prelu(x: &Array, alpha: &Array) -> Array {
    ops::maximum(x, 0.0) + alpha * ops::minimum(x, 0.0)
}

/// `a · σ(b)` for the two halves `a`, `b` of `x` along `axis`.
pub fn glu(x: &Array, axis: i32) -> Array {
    let halves = ops::split(x, 2, axis);
    &halves[0] * ops::sigmoid(&halves[1])
}

/// `x - logsumexp(x)` along `axis`.
pub fn log_softmax(x: &Array, axis: i32) -> Array {
    x - ops::logsumexp(x, axis, true)
}

/// `eˣ / Σ eˣ` along `axis`.
pub fn softmax(x: &Array, axis: i32) -> Array {
    ops::softmax(x, axis)
}

/// An activation without parameters, as a layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    /// [`relu`].
    Relu,
    /// [`relu6`].
    Relu6,
    /// [`leaky_relu`] with this slope.
    LeakyRelu(f64),
    /// [`elu`] with this alpha.
    Elu(f64),
    /// [`selu`].
    Selu,
    /// [`celu`] with this alpha.
    Celu(f64),
    /// [`silu`].
    Silu,
    /// [`gelu`].
    Gelu,
    /// [`gelu_approx`].
    GeluApprox,
    /// [`gelu_fast_approx`].
    GeluFastApprox,
    /// [`softplus`].
    Softplus,
    /// [`softsign`].
    Softsign,
    /// [`mish`].
    Mish,
    /// [`log_sigmoid`].
    LogSigmoid,
    /// [`sigmoid`].
    Sigmoid,
    /// [`tanh`].
    Tanh,
    /// [`hard_tanh`] to `[-1, 1]`.
    HardTanh,
    /// [`hardswish`].
    Hardswish,
    /// [`glu`] along the last axis.
    Glu,
}

impl Activation {
    /// The activation of `x`.
    pub fn forward(&self, x: &Array) -> Array {
        match *self {
            Activation::Relu => relu(x),
            Activation::Relu6 => relu6(x),
            Activation::LeakyRelu(slope) => leaky_relu(x, slope),
            Activation::Elu(alpha) => elu(x, alpha),
            Activation::Selu => selu(x),
            Activation::Celu(alpha) => celu(x, alpha),
            Activation::Silu => silu(x),
            Activation::Gelu => gelu(x),
            Activation::GeluApprox => gelu_approx(x),
            Activation::GeluFastApprox => gelu_fast_approx(x),
            Activation::Softplus => softplus(x),
            Activation::Softsign => softsign(x),
            Activation::Mish => mish(x),
            Activation::LogSigmoid => log_sigmoid(x),
            Activation::Sigmoid => sigmoid(x),
            Activation::Tanh => tanh(x),
            Activation::HardTanh => hard_tanh(x, -1.0, 1.0),
            Activation::Hardswish => hardswish(x),
            Activation::Glu => glu(x, -1),
        }
    }
}
