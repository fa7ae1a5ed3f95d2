//! nuvec's meaning of a program: the same ops and transforms as `scripts/golden/mlx_diff.py`
//! gives them in MLX. An op that nuvec refuses becomes a failed array, which the transforms
//! and the final evaluation report; a panic anywhere is caught and reported as one.

use nuvec::ops::{self, Axes};
use nuvec::prelude::*;
use nuvec::transforms::{checkpoint, compile, jvp, value_and_grad, vjp, vmap};
use serde_json::{json, Value};
use std::sync::Arc;

/// A function of arrays, as the transforms take them.
type Function = Arc<dyn Fn(&[Array]) -> Vec<Array> + Send + Sync>;

fn failed(reason: impl Into<String>) -> Array {
    Array::failed(Error::Eval {
        op: "mlx_diff".into(),
        reason: reason.into(),
    })
}

fn dtype(name: &str) -> Option<DType> {
    DType::from_name(name)
}

/// A number from the JSON (NaN and the infinities travel as strings).
fn number(value: &Value) -> f64 {
    match value {
        Value::String(s) => match s.as_str() {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            _ => f64::NAN,
        },
        Value::Bool(b) => f64::from(u8::from(*b)),
        other => other.as_f64().unwrap_or(f64::NAN),
    }
}

fn ints(value: &Value) -> Vec<i32> {
    value
        .as_array()
        .map(|v| {
            v.iter()
                .filter_map(Value::as_i64)
                .map(|i| i as i32)
                .collect()
        })
        .unwrap_or_default()
}

fn optional_ints(value: &Value) -> Option<Vec<i32>> {
    (!value.is_null()).then(|| ints(value))
}

fn optional_int(value: &Value) -> Option<i32> {
    value.as_i64().map(|i| i as i32)
}

fn optional_number(value: &Value) -> Option<f64> {
    (!value.is_null()).then(|| number(value))
}

/// An input array from its JSON description.
pub(crate) fn input(spec: &Value) -> Array {
    let shape = ints(&spec["shape"]);
    let data: Vec<f64> = spec["data"]
        .as_array()
        .map(|d| d.iter().map(number).collect())
        .unwrap_or_default();
    let Some(dtype) = spec["dtype"].as_str().and_then(dtype) else {
        return failed(format!("unknown dtype {}", spec["dtype"]));
    };
    let values = Array::from_vec(data, &shape);
    if dtype == DType::Bool {
        ops::not_equal(&values, 0.0)
    } else {
        ops::astype(&values, dtype)
    }
}

fn unary(name: &str, a: &Array) -> Option<Array> {
    Some(match name {
        "abs" => ops::abs(a),
        "negative" => ops::negative(a),
        "sign" => ops::sign(a),
        "square" => ops::square(a),
        "sqrt" => ops::sqrt(a),
        "rsqrt" => ops::rsqrt(a),
        "reciprocal" => ops::reciprocal(a),
        "exp" => ops::exp(a),
        "expm1" => ops::expm1(a),
        "log" => ops::log(a),
        "log1p" => ops::log1p(a),
        "sin" => ops::sin(a),
        "cos" => ops::cos(a),
        "tanh" => ops::tanh(a),
        "sigmoid" => ops::sigmoid(a),
        "erf" => ops::erf(a),
        "erfinv" => ops::erfinv(a),
        "floor" => ops::floor(a),
        "ceil" => ops::ceil(a),
        "stop_gradient" => ops::stop_gradient(a),
        "isnan" => ops::isnan(a),
        "logical_not" => ops::logical_not(a),
        "tan" => ops::tan(a),
        "log2" => ops::log2(a),
        "log10" => ops::log10(a),
        "sinh" => ops::sinh(a),
        "cosh" => ops::cosh(a),
        "arcsin" => ops::arcsin(a),
        "arccos" => ops::arccos(a),
        "arctan" => ops::arctan(a),
        "arcsinh" => ops::arcsinh(a),
        "arccosh" => ops::arccosh(a),
        "arctanh" => ops::arctanh(a),
        _ => return None,
    })
}

fn binary(name: &str, a: &Array, b: &Array) -> Option<Array> {
    Some(match name {
        "add" => ops::add(a, b),
        "subtract" => ops::subtract(a, b),
        "multiply" => ops::multiply(a, b),
        "divide" => ops::divide(a, b),
        "power" => ops::power(a, b),
        "maximum" => ops::maximum(a, b),
        "minimum" => ops::minimum(a, b),
        "logaddexp" => ops::logaddexp(a, b),
        "greater" => ops::greater(a, b),
        "less" => ops::less(a, b),
        "equal" => ops::equal(a, b),
        "remainder" => ops::remainder(a, b),
        "floor_divide" => ops::floor_divide(a, b),
        _ => return None,
    })
}

/// The scalar of an `add_scalar`/`mul_scalar` op, as a Rust scalar (weakly typed, as MLX's
/// Python scalars are): an integer stays one, since ints and floats promote differently.
fn scalar_op(name: &str, a: &Array, value: &Value) -> Array {
    let add = name == "add_scalar";
    match value.as_i64() {
        Some(i) if value.is_i64() => {
            let i = i as i32;
            if add {
                ops::add(a, i)
            } else {
                ops::multiply(a, i)
            }
        }
        _ => {
            let x = number(value);
            if add {
                ops::add(a, x)
            } else {
                ops::multiply(a, x)
            }
        }
    }
}

fn reduction(name: &str, a: &Array, op: &Value) -> Option<Array> {
    let axes = Axes(optional_ints(&op["axes"]));
    let keepdims = op["keepdims"].as_bool().unwrap_or(false);
    Some(match name {
        "sum" => ops::sum(a, axes, keepdims),
        "prod" => ops::prod(a, axes, keepdims),
        "max" => ops::max(a, axes, keepdims),
        "min" => ops::min(a, axes, keepdims),
        "mean" => ops::mean(a, axes, keepdims),
        "logsumexp" => ops::logsumexp(a, axes, keepdims),
        "var" => ops::var(a, axes, keepdims, 0),
        "all" => ops::all(a, axes, keepdims),
        "any" => ops::any(a, axes, keepdims),
        _ => return None,
    })
}

/// One op of a program over the values computed so far.
pub(crate) fn apply(op: &Value, env: &[Array]) -> Array {
    let name = op["op"].as_str().unwrap_or("");
    let mut args = Vec::new();
    for index in op["args"].as_array().into_iter().flatten() {
        match index.as_u64().and_then(|i| env.get(i as usize)) {
            Some(array) => args.push(array.clone()),
            None => return failed(format!("{name}: argument {index} out of range")),
        }
    }
    let arg = |i: usize| {
        args.get(i)
            .cloned()
            .unwrap_or_else(|| failed("missing argument"))
    };
    let a = arg(0);
    if let Some(result) = unary(name, &a) {
        return result;
    }
    if let Some(result) = binary(name, &a, &arg(1)) {
        return result;
    }
    if let Some(result) = reduction(name, &a, op) {
        return result;
    }
    let axis = optional_int(&op["axis"]);
    let flag = |key: &str| op[key].as_bool().unwrap_or(false);
    match name {
        "add_scalar" | "mul_scalar" => scalar_op(name, &a, &op["value"]),
        "where" => ops::where_(&a, arg(1), arg(2)),
        "argmax" => ops::argmax(&a, axis, flag("keepdims")),
        "argmin" => ops::argmin(&a, axis, flag("keepdims")),
        "cumsum" => ops::cumsum(&a, axis, flag("reverse"), flag("inclusive")),
        "cumprod" => ops::cumprod(&a, axis, flag("reverse"), flag("inclusive")),
        "cummax" => ops::cummax(&a, axis, flag("reverse"), flag("inclusive")),
        "softmax" => ops::softmax(&a, Axes(optional_ints(&op["axes"]))),
        "sort" => ops::sort(&a, axis),
        "argsort" => ops::argsort(&a, axis),
        "clip" => ops::clip(&a, optional_number(&op["lo"]), optional_number(&op["hi"])),
        "transpose" => ops::transpose(&a, optional_ints(&op["perm"]).as_deref()),
        "reshape" => ops::reshape(&a, &ints(&op["shape"])),
        "expand_dims" => ops::expand_dims(&a, &ints(&op["axes"])),
        "squeeze" => ops::squeeze(&a, optional_ints(&op["axes"]).as_deref()),
        "broadcast_to" => ops::broadcast_to(&a, &ints(&op["shape"])),
        "concatenate" => ops::concatenate(&args, axis.unwrap_or(0)),
        "slice" => ops::slice(
            &a,
            &ints(&op["start"]),
            &ints(&op["stop"]),
            &ints(&op["strides"]),
        ),
        "take" => {
            let indices = ints(&op["indices"]);
            let n = indices.len() as i32;
            ops::take(&a, &Array::from_vec(indices, &[n]), axis)
        }
        "astype" => match op["dtype"].as_str().and_then(dtype) {
            Some(d) => ops::astype(&a, d),
            None => failed(format!("unknown dtype {}", op["dtype"])),
        },
        "matmul" => ops::matmul(&a, &arg(1)),
        "swapaxes" => ops::swapaxes(
            &a,
            optional_int(&op["axis1"]).unwrap_or(0),
            optional_int(&op["axis2"]).unwrap_or(0),
        ),
        other => failed(format!("unknown op {other}")),
    }
}

fn base(program: Arc<Value>) -> Function {
    Arc::new(move |inputs: &[Array]| {
        let mut env = inputs.to_vec();
        for op in program["ops"].as_array().into_iter().flatten() {
            let result = apply(op, &env);
            // MLX raises as soon as an op is refused, used or not; nuvec's refusal is the
            // failed array it returns, which `build_error` shows without evaluating.
            if let Some(error) = result.build_error() {
                return vec![Array::failed(error)];
            }
            env.push(result);
        }
        program["outputs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|i| {
                i.as_u64()
                    .and_then(|i| env.get(i as usize).cloned())
                    .unwrap_or_else(|| failed("output out of range"))
            })
            .collect()
    })
}

fn first_or_failed(outputs: Vec<Array>) -> Array {
    outputs
        .into_iter()
        .next()
        .unwrap_or_else(|| failed("the function returned nothing"))
}

/// `f` wrapped in `transform`, as `mlx_diff.py`'s `wrap`.
fn wrap(f: Function, transform: &Value) -> Function {
    let kind = transform["kind"].as_str().unwrap_or("").to_string();
    match kind.as_str() {
        "grad" => {
            let argnums: Vec<usize> = transform["argnums"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_u64)
                        .map(|i| i as usize)
                        .collect()
                })
                .unwrap_or_default();
            Arc::new(move |xs: &[Array]| {
                let inner = f.clone();
                let g = value_and_grad(
                    move |a: &[Array]| ops::sum(&first_or_failed(inner(a)), None, false),
                    &argnums,
                );
                match g(xs) {
                    Ok((_, grads)) => grads,
                    Err(error) => vec![Array::failed(error)],
                }
            })
        }
        "vjp" => Arc::new(move |xs: &[Array]| {
            let cotangents: Vec<Array> = f(xs).iter().map(ops::ones_like).collect();
            let inner = f.clone();
            match vjp(move |a| inner(a), xs, &cotangents) {
                Ok((outputs, vjps)) => outputs.into_iter().chain(vjps).collect(),
                Err(error) => vec![Array::failed(error)],
            }
        }),
        "jvp" => Arc::new(move |xs: &[Array]| {
            let inner = f.clone();
            match jvp(move |a| inner(a), xs, xs) {
                Ok((outputs, tangents)) => outputs.into_iter().chain(tangents).collect(),
                Err(error) => vec![Array::failed(error)],
            }
        }),
        "vmap" => {
            let in_axes: Vec<Option<i32>> = transform["in_axes"]
                .as_array()
                .map(|a| a.iter().map(optional_int).collect())
                .unwrap_or_default();
            Arc::new(move |xs: &[Array]| {
                let inner = f.clone();
                match vmap(move |a| inner(a), &in_axes, &[Some(0)])(xs) {
                    Ok(outputs) => outputs,
                    Err(error) => vec![Array::failed(error)],
                }
            })
        }
        "compile" => Arc::new(move |xs: &[Array]| {
            let inner = f.clone();
            match compile(move |a: &[Array]| inner(a)).call(xs) {
                Ok(outputs) => outputs,
                Err(error) => vec![Array::failed(error)],
            }
        }),
        "checkpoint" => {
            let inner = f.clone();
            let checkpointed = checkpoint(move |a: &[Array]| inner(a));
            Arc::new(move |xs: &[Array]| checkpointed(xs))
        }
        other => {
            let other = other.to_string();
            Arc::new(move |_: &[Array]| vec![failed(format!("unknown transform {other}"))])
        }
    }
}

fn encode(x: f64) -> Value {
    if x.is_nan() {
        json!("nan")
    } else if x.is_infinite() {
        json!(if x > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(x)
    }
}

/// An output as the JSON both sides write.
fn describe(array: &Array) -> Result<Value> {
    let data: Vec<Value> = match array.dtype() {
        DType::Bool => array
            .to_vec::<bool>()?
            .into_iter()
            .map(Value::from)
            .collect(),
        DType::F16 | DType::BF16 | DType::F32 | DType::F64 => ops::astype(array, DType::F64)
            .to_vec::<f64>()?
            .into_iter()
            .map(encode)
            .collect(),
        _ => ops::astype(array, DType::I64)
            .to_vec::<i64>()?
            .into_iter()
            .map(Value::from)
            .collect(),
    };
    Ok(json!({"dtype": array.dtype().name(), "shape": array.shape(), "data": data}))
}

fn outcome(program: &Value) -> Result<Vec<Value>> {
    let program = Arc::new(program.clone());
    let mut f = base(program.clone());
    for transform in program["transforms"].as_array().into_iter().flatten() {
        f = wrap(f, transform);
    }
    let inputs: Vec<Array> = program["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(input)
        .collect();
    let outputs = f(&inputs);
    eval(&outputs)?;
    outputs.iter().map(describe).collect()
}

/// nuvec's result for `program`, in the JSON form of `mlx_diff.py`'s.
pub(crate) fn run(program: &Value) -> Value {
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| outcome(program)));
    match caught {
        Ok(Ok(outputs)) => json!({"ok": true, "outputs": outputs}),
        Ok(Err(error)) => json!({"ok": false, "error": error.to_string()}),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            json!({"ok": false, "panic": true, "error": format!("panic: {message}")})
        }
    }
}
