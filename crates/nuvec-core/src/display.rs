//! `Display` for arrays in MLX's format: `array([1, 2], dtype=int32)`.

use crate::Array;
use nuvec_cpu::{with_dtype, Element};
use std::fmt;

/// Formats a float as C++ streams do by default (`%g` with 6 significant digits).
fn format_g(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let exponent = format!("{v:.5e}");
    let (mantissa, exp) = exponent.split_once('e').unwrap_or((&exponent, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-5..6).contains(&exp) {
        let mantissa = trim_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    trim_zeros(&format!("{v:.decimals$}")).to_string()
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

fn format_element<T: Element>(v: T) -> String {
    match T::DTYPE {
        nuvec_cpu::DType::Bool => if v.truthy() { "True" } else { "False" }.into(),
        d if d.is_float() => format_g(v.to_f64()),
        _ => v.to_i128().to_string(),
    }
}

fn write_nested(out: &mut String, values: &[String], shape: &[usize], depth: usize) {
    if shape.is_empty() {
        out.push_str(&values[0]);
        return;
    }
    out.push('[');
    let stride: usize = shape[1..].iter().product();
    for i in 0..shape[0] {
        if i > 0 {
            out.push(',');
            if shape.len() > 1 {
                out.push_str(&"\n".repeat(shape.len() - 1));
                out.push_str(&" ".repeat(depth + 7));
            } else {
                out.push(' ');
            }
        }
        write_nested(
            out,
            &values[i * stride..(i + 1) * stride],
            &shape[1..],
            depth + 1,
        );
    }
    out.push(']');
}

impl fmt::Display for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values: Result<Vec<String>, _> = with_dtype!(
            self.dtype(),
            T,
            self.to_vec::<T>()
                .map(|v| v.into_iter().map(format_element).collect())
        );
        match values {
            Ok(values) => {
                let mut body = String::new();
                write_nested(&mut body, &values, &self.dims(), 0);
                write!(f, "array({body}, dtype={})", self.dtype())
            }
            Err(error) => write!(f, "array(<failed: {error}>)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array;

    #[test]
    fn display_matches_mlx_repr() {
        assert_eq!(array![1, 2].to_string(), "array([1, 2], dtype=int32)");
        assert_eq!(
            array![[1.5, 2.0], [0.1, 1e-7]].to_string(),
            "array([[1.5, 2],\n       [0.1, 1e-07]], dtype=float32)"
        );
        assert_eq!(Array::scalar(true).to_string(), "array(True, dtype=bool)");
    }

    #[test]
    fn floats_print_with_six_significant_digits() {
        assert_eq!(format_g(1234.56789), "1234.57");
        assert_eq!(format_g(1234567.0), "1.23457e+06");
        assert_eq!(format_g(0.0001), "0.0001");
        assert_eq!(format_g(100.0), "100");
    }
}
