//! Element-wise functions of one argument.

use crate::element::{Element, Float};

use crate::parallel;

/// A unary element-wise function, as MLX names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
/// Exhaustive on purpose: every rule that matches on it must handle a new variant.
pub enum UnaryOp {
    /// `|x|`.
    Abs,
    /// `-x`.
    Negative,
    /// -1, 0 or 1 (NaN stays NaN).
    Sign,
    /// `x * x`.
    Square,
    /// `sqrt(x)`.
    Sqrt,
    /// `1 / sqrt(x)`.
    Rsqrt,
    /// `1 / x`.
    Reciprocal,
    /// `e^x`.
    Exp,
    /// `e^x - 1`, accurate near 0.
    Expm1,
    /// Natural logarithm.
    Log,
    /// `log(1 + x)`, accurate near 0.
    Log1p,
    /// Base-2 logarithm.
    Log2,
    /// Base-10 logarithm.
    Log10,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// Tangent.
    Tan,
    /// Hyperbolic tangent.
    Tanh,
    /// Hyperbolic sine.
    Sinh,
    /// Hyperbolic cosine.
    Cosh,
    /// Inverse sine.
    ArcSin,
    /// Inverse cosine.
    ArcCos,
    /// Inverse tangent.
    ArcTan,
    /// Inverse hyperbolic sine.
    ArcSinh,
    /// Inverse hyperbolic cosine.
    ArcCosh,
    /// Inverse hyperbolic tangent.
    ArcTanh,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// The error function.
    Erf,
    /// The inverse of the error function.
    ErfInv,
    /// Round toward negative infinity.
    Floor,
    /// Round toward positive infinity.
    Ceil,
    /// Round half to even, as NumPy and MLX.
    Round,
}

impl UnaryOp {
    /// MLX's name of the op.
    pub const fn name(self) -> &'static str {
        match self {
            UnaryOp::Abs => "abs",
            UnaryOp::Negative => "negative",
            UnaryOp::Sign => "sign",
            UnaryOp::Square => "square",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Reciprocal => "reciprocal",
            UnaryOp::Exp => "exp",
            UnaryOp::Expm1 => "expm1",
            UnaryOp::Log => "log",
            UnaryOp::Log1p => "log1p",
            UnaryOp::Log2 => "log2",
            UnaryOp::Log10 => "log10",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Tan => "tan",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sinh => "sinh",
            UnaryOp::Cosh => "cosh",
            UnaryOp::ArcSin => "arcsin",
            UnaryOp::ArcCos => "arccos",
            UnaryOp::ArcTan => "arctan",
            UnaryOp::ArcSinh => "arcsinh",
            UnaryOp::ArcCosh => "arccosh",
            UnaryOp::ArcTanh => "arctanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Erf => "erf",
            UnaryOp::ErfInv => "erfinv",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Round => "round",
        }
    }

    /// Whether the op keeps integer and bool inputs as they are (otherwise they become float32).
    pub const fn keeps_integers(self) -> bool {
        matches!(
            self,
            UnaryOp::Abs
                | UnaryOp::Negative
                | UnaryOp::Sign
                | UnaryOp::Square
                | UnaryOp::Floor
                | UnaryOp::Ceil
                | UnaryOp::Round
        )
    }

    /// Applies the op to one integer (or bool) value; only for ops that keep integers.
    pub fn apply_exact<T: Element>(self, x: T) -> T {
        match self {
            UnaryOp::Abs => x.abs(),
            UnaryOp::Negative => x.neg(),
            UnaryOp::Sign => Element::sign(x),
            UnaryOp::Square => x.mul(x),
            _ => x,
        }
    }

    /// Applies the op in `f32`.
    pub fn apply_f32(self, x: f32) -> f32 {
        match self {
            UnaryOp::Abs => x.abs(),
            UnaryOp::Negative => -x,
            UnaryOp::Sign => Element::sign(x),
            UnaryOp::Square => x * x,
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Reciprocal => 1.0 / x,
            UnaryOp::Exp => exp_f32(x),
            UnaryOp::Expm1 => libm::expm1f(x),
            UnaryOp::Log => x.ln(),
            UnaryOp::Log1p => libm::log1pf(x),
            UnaryOp::Log2 => x.log2(),
            UnaryOp::Log10 => x.log10(),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Tan => x.tan(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sinh => x.sinh(),
            UnaryOp::Cosh => x.cosh(),
            UnaryOp::ArcSin => x.asin(),
            UnaryOp::ArcCos => x.acos(),
            UnaryOp::ArcTan => x.atan(),
            UnaryOp::ArcSinh => x.asinh(),
            UnaryOp::ArcCosh => x.acosh(),
            UnaryOp::ArcTanh => x.atanh(),
            UnaryOp::Sigmoid => sigmoid_f32(x),
            UnaryOp::Erf => erf_f32_precise(x),
            UnaryOp::ErfInv => erfinv_f32(x),
            UnaryOp::Floor => x.floor(),
            UnaryOp::Ceil => x.ceil(),
            UnaryOp::Round => x.round_ties_even(),
        }
    }

    /// Applies the op in `f64`.
    pub fn apply_f64(self, x: f64) -> f64 {
        match self {
            UnaryOp::Abs => x.abs(),
            UnaryOp::Negative => -x,
            UnaryOp::Sign => Element::sign(x),
            UnaryOp::Square => x * x,
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Reciprocal => 1.0 / x,
            UnaryOp::Exp => x.exp(),
            UnaryOp::Expm1 => x.exp_m1(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Log1p => x.ln_1p(),
            UnaryOp::Log2 => x.log2(),
            UnaryOp::Log10 => x.log10(),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Tan => x.tan(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sinh => x.sinh(),
            UnaryOp::Cosh => x.cosh(),
            UnaryOp::ArcSin => x.asin(),
            UnaryOp::ArcCos => x.acos(),
            UnaryOp::ArcTan => x.atan(),
            UnaryOp::ArcSinh => x.asinh(),
            UnaryOp::ArcCosh => x.acosh(),
            UnaryOp::ArcTanh => x.atanh(),
            UnaryOp::Sigmoid => {
                let y = 1.0 / (1.0 + x.abs().exp());
                if x < 0.0 {
                    y
                } else {
                    1.0 - y
                }
            }
            UnaryOp::Erf => libm::erf(x),
            UnaryOp::ErfInv => erfinv_f64(x),
            UnaryOp::Floor => x.floor(),
            UnaryOp::Ceil => x.ceil(),
            UnaryOp::Round => x.round_ties_even(),
        }
    }
}

/// `out[i] = op(input[i])` for integer or bool elements (ops that keep integers).
pub fn unary_exact<T: Element>(op: UnaryOp, input: &[T], out: &mut [T]) {
    parallel::map(input, out, |x| op.apply_exact(*x));
}

/// `out[i] = op(input[i])` for float elements; `f64` is computed in `f64`, the rest in `f32`.
pub fn unary_float<T: Float>(op: UnaryOp, input: &[T], out: &mut [T]) {
    if T::DTYPE == crate::DType::F64 {
        parallel::map(input, out, |x| T::from_f64(op.apply_f64(x.to_f64())));
    } else if T::DTYPE == crate::DType::F32 && op == UnaryOp::Exp {
        // Written as a plain loop over f32 so the compiler vectorizes the polynomial.
        parallel::map(input, out, |x| T::from_f32(exp_f32(x.to_f32())));
    } else if T::DTYPE == crate::DType::F32 && op == UnaryOp::Erf {
        parallel::map(input, out, |x| T::from_f32(erf_f32(x.to_f32())));
        erf_tails(input, out);
    } else {
        parallel::map(input, out, |x| T::from_f32(op.apply_f32(x.to_f32())));
    }
}

/// Recomputes `out = erf(input)` where `|input|` is past [`ERF_TAIL`] with libm's erff (under
/// an ulp): there `1 - erf(x)` is a few ulps of 1, and functions of it (`log1p(-erf)`,
/// `arctanh(erf)`) would carry the fast fit's few ulps into percents. Few elements of most
/// arrays lie there, so the fast loop stays the rule.
fn erf_tails<T: Float>(input: &[T], out: &mut [T]) {
    for (x, o) in input.iter().zip(out.iter_mut()) {
        let x = x.to_f32();
        if x.abs() > ERF_TAIL {
            *o = T::from_f32(libm::erff(x));
        }
    }
}

/// Where erf's tail starts: past it the fast fit's ulps are a large share of `1 - erf(x)`.
const ERF_TAIL: f32 = 2.0;

/// `erf(x)` in f32 for one value: the fast fit, libm's erff in the tails.
pub fn erf_f32_precise(x: f32) -> f32 {
    if x.abs() > ERF_TAIL {
        libm::erff(x)
    } else {
        erf_f32(x)
    }
}

/// The same as [`unary_float`], in place.
pub fn unary_float_in_place<T: Float>(op: UnaryOp, data: &mut [T]) {
    if T::DTYPE == crate::DType::F64 {
        parallel::map_in_place(data, |x| T::from_f64(op.apply_f64(x.to_f64())));
    } else if T::DTYPE == crate::DType::F32 && op == UnaryOp::Exp {
        parallel::map_in_place(data, |x| T::from_f32(exp_f32(x.to_f32())));
    } else if T::DTYPE == crate::DType::F32 && op == UnaryOp::Erf {
        // The tails' values are computed before the inputs are overwritten.
        let tails: Vec<(usize, f32)> = data
            .iter()
            .enumerate()
            .filter(|(_, x)| x.to_f32().abs() > ERF_TAIL)
            .map(|(i, x)| (i, libm::erff(x.to_f32())))
            .collect();
        parallel::map_in_place(data, |x| T::from_f32(erf_f32(x.to_f32())));
        for (i, value) in tails {
            data[i] = T::from_f32(value);
        }
    } else {
        parallel::map_in_place(data, |x| T::from_f32(op.apply_f32(x.to_f32())));
    }
}

/// Logistic function, stable for large |x| in both directions, written as MLX's CPU kernel
/// writes it: the smaller side `y = 1 / (1 + e^|x|)`, then `1 - y` for x ≥ 0. Near 1 this
/// rounds once, at the subtraction, so `1 - sigmoid(x)` (the derivatives of `sigmoid` and
/// `logaddexp`) keeps the bits MLX's has.
fn sigmoid_f32(x: f32) -> f32 {
    let y = 1.0 / (1.0 + exp_f32(x.abs()));
    if x < 0.0 {
        y
    } else {
        1.0 - y
    }
}

/// `erf(x)` in f32: a rational function of `x²` on `[-4, 4]`, where erf saturates to ±1 in
/// f32 (under 5e-7 absolute, a few ulp; libm's erff is within 1 ulp), written so that loops over it
/// vectorize. The coefficients are the minimax fit used by Eigen and XLA for float erf.
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    // Beyond 3.9, erf rounds to ±1 in f32.
    let saturated = if x < 0.0 { -1.0 } else { 1.0 };
    let far = x.abs() > 3.9;
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    p = p * x2 + 2.770_681_4e-8;
    p = p * x2 + -2.101_024e-6;
    p = p * x2 + -5.692_506_4e-5;
    p = p * x2 + -7.349_906_3e-4;
    p = p * x2 + -2.954_600_1e-3;
    p = p * x2 + -1.609_603_3e-2;
    let mut q = -1.456_607_2e-5_f32;
    q = q * x2 + -2.133_740_6e-4;
    q = q * x2 + -1.682_827e-3;
    q = q * x2 + -7.373_329e-3;
    q = q * x2 + -1.426_474e-2;
    if far {
        saturated
    } else {
        x * p / q
    }
}

/// `e^x` in f32: branch-free range reduction and a degree-7 polynomial (under 2 ulp), written
/// so that loops over it vectorize (no libm call, no data-dependent branch).
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in a high part exact in f32 and a low correction.
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer without `rintf`.
    const ROUNDER: f32 = 12_582_912.0;
    let clamped = x.clamp(-104.0, 88.722_83);
    let n = (clamped * LOG2_E + ROUNDER) - ROUNDER;
    let r = (clamped - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // Scale by 2^n in two halves, so that neither factor overflows or underflows on its own
    // (results near the ends of the range and subnormal results stay exact).
    let n = n as i32;
    let half = n >> 1;
    let scale_a = f32::from_bits(((half + 127) as u32) << 23);
    let scale_b = f32::from_bits(((n - half + 127) as u32) << 23);
    let y = p * scale_a * scale_b;
    if x.is_nan() {
        x
    } else if x > 88.722_83 {
        f32::INFINITY
    } else {
        y
    }
}

/// Inverse error function in f32: Giles' single-precision approximation, evaluated with
/// fused multiply-adds in the same order as MLX's CPU backend so random normals match it.
pub fn erfinv_f32(a: f32) -> f32 {
    const TAIL: [f32; 8] = [
        2.932_431e-8,
        1.221_503_3e-6,
        2.841_089_6e-5,
        3.935_529_7e-4,
        3.026_988_1e-3,
        4.831_858e-3,
        -2.646_461_4e-1,
        8.400_165e-1,
    ];
    const CENTRAL: [f32; 9] = [
        1.432_854_5e-7,
        1.227_747_9e-6,
        1.129_636_3e-7,
        -5.615_307_6e-5,
        -1.476_976_3e-4,
        2.314_686_8e-3,
        1.153_925_8e-2,
        -2.320_154_8e-1,
        8.862_269e-1,
    ];
    let t = a.mul_add(-a, 1.0).ln();
    let p = if t.abs() > 6.125 {
        TAIL.iter()
            .fold(3.036_975_7e-10f32, |p, &c| p.mul_add(t, c))
    } else {
        CENTRAL
            .iter()
            .fold(5.438_778_3e-9f32, |p, &c| p.mul_add(t, c))
    };
    a * p
}

/// Inverse error function in f64: the f32 estimate refined by two Newton steps on `erf`.
pub fn erfinv_f64(a: f64) -> f64 {
    if a.is_nan() || a.abs() > 1.0 {
        return f64::NAN;
    }
    if a.abs() == 1.0 {
        return a * f64::INFINITY;
    }
    let mut x = f64::from(erfinv_f32(a as f32));
    let two_over_sqrt_pi = 2.0 / std::f64::consts::PI.sqrt();
    for _ in 0..3 {
        let err = libm::erf(x) - a;
        x -= err / (two_over_sqrt_pi * (-x * x).exp());
    }
    x
}

#[cfg(test)]
mod tests {

    #[test]
    fn fast_erf_is_within_5e_7_of_the_exact_value() {
        let mut worst = 0.0f64;
        for i in -60_000..=60_000 {
            let x = i as f32 * 1e-4;
            worst = worst.max((f64::from(erf_f32(x)) - libm::erf(f64::from(x))).abs());
        }
        assert!(worst < 5e-7, "largest error {worst}");
        assert_eq!(erf_f32(0.0), 0.0);
        assert_eq!((erf_f32(10.0), erf_f32(-10.0)), (1.0, -1.0));
    }

    /// Past 2, `1 - erf(x)` is a few ulps of 1: the kernels (copying and in place) and the
    /// scalar path keep erf within an ulp there, so that `1 - erf` keeps its digits (at 3.46,
    /// where it is 9.6e-7, the fast fit alone was 13% off).
    #[test]
    fn erf_tails_are_within_an_ulp_on_every_path() {
        let xs: Vec<f32> = (-4000..=4000).map(|i| i as f32 * 1e-3).collect();
        let mut copied = vec![0.0f32; xs.len()];
        unary_float(UnaryOp::Erf, &xs, &mut copied);
        let mut in_place = xs.clone();
        unary_float_in_place(UnaryOp::Erf, &mut in_place);
        for (i, &x) in xs.iter().enumerate() {
            if x.abs() <= ERF_TAIL {
                continue;
            }
            let exact = libm::erf(f64::from(x));
            let ulp = f64::from(f32::EPSILON) / 2.0;
            for got in [copied[i], in_place[i], UnaryOp::Erf.apply_f32(x)] {
                assert!(
                    (f64::from(got) - exact).abs() <= ulp,
                    "erf({x}) = {got}, exact {exact}"
                );
            }
        }
    }

    use super::*;

    #[test]
    fn fast_exp_is_within_two_ulp_of_libm() {
        let mut x = -87.0f32;
        while x < 88.72 {
            let expected = (x as f64).exp();
            let got = f64::from(exp_f32(x));
            assert!(
                ((got - expected) / expected).abs() < 2.5e-7,
                "exp({x}) = {got}, want {expected}"
            );
            x += 0.0137;
        }
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert!(exp_f32(88.5).is_finite() && exp_f32(88.72).is_finite());
        let tiny = exp_f32(-100.0);
        // Subnormal results are within one subnormal step (2^-149) of the true value.
        assert!(
            (f64::from(tiny) - (-100.0f64).exp()).abs() <= 1.5e-45,
            "subnormal {tiny}"
        );
        assert!(exp_f32(f32::NAN).is_nan());
    }

    #[test]
    fn erfinv_inverts_erf() {
        for i in -99..100 {
            let y = i as f64 / 100.0;
            assert!((libm::erf(erfinv_f64(y)) - y).abs() < 1e-14, "{y}");
            assert!(
                (libm::erff(erfinv_f32(y as f32)) - y as f32).abs() < 3e-6,
                "{y}"
            );
        }
    }
}
