//! Rotary embeddings from a config's `rope_theta` and `rope_scaling`, as mlx-lm's
//! `initialize_rope`: default, linear, and Llama 3's frequency-dependent scaling.

use super::transformer::Rope;
use crate::{Error, Result};
use nuvec_core::{ops, DType};
use serde_json::Value;

fn number(scaling: &Value, key: &str, default: Option<f64>) -> Result<f64> {
    match scaling.get(key) {
        Some(v) => v.as_f64().ok_or_else(|| {
            Error::load(
                "<config>",
                format!("rope_scaling.{key} must be a number, got {v}"),
            )
        }),
        None => default.ok_or_else(|| Error::load("<config>", format!("rope_scaling needs {key}"))),
    }
}

/// The rotary embedding of heads of `dims` features.
pub(crate) fn initialize(
    dims: usize,
    base: f32,
    traditional: bool,
    scaling: Option<&Value>,
) -> Result<Rope> {
    let mut rope = Rope {
        dims,
        traditional,
        base,
        scale: 1.0,
        freqs: None,
    };
    let Some(scaling) = scaling.filter(|s| !s.is_null()) else {
        return Ok(rope);
    };
    let kind = scaling
        .get("type")
        .or_else(|| scaling.get("rope_type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    match kind {
        "default" => {}
        "linear" => rope.scale = (1.0 / number(scaling, "factor", None)?) as f32,
        "llama3" => {
            let factor = number(scaling, "factor", None)?;
            let low = number(scaling, "low_freq_factor", Some(1.0))?;
            let high = number(scaling, "high_freq_factor", Some(4.0))?;
            let old_context = number(scaling, "original_max_position_embeddings", Some(8192.0))?;
            // Wavelengths per pair, stretched by `factor` past the old context, blended in
            // between, in float32 as mlx-lm computes them.
            let (low_wavelength, high_wavelength) = (old_context / low, old_context / high);
            let exponents =
                ops::arange(0.0, dims as f64, 2.0, DType::I32).astype(DType::F32) / dims as f64;
            let freqs = ops::power(base as f64, &exponents);
            let wavelengths = &freqs * (2.0 * std::f64::consts::PI);
            let freqs = ops::where_(
                ops::greater(&wavelengths, low_wavelength),
                &freqs * factor,
                &freqs,
            );
            let medium = ops::logical_and(
                ops::greater(&wavelengths, high_wavelength),
                ops::less(&wavelengths, low_wavelength),
            );
            let smooth = (old_context / &wavelengths - low) / (high - low);
            let smoothed = &freqs / ((1.0 - &smooth) / factor + &smooth);
            rope.freqs = Some(ops::where_(&medium, &smoothed, &freqs));
        }
        other => {
            return Err(Error::load(
                "<config>",
                format!("rope_scaling type {other:?} is not supported (default, linear, llama3)"),
            ))
        }
    }
    Ok(rope)
}
