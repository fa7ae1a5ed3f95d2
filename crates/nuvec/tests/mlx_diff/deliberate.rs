//! The differences nuvec keeps on purpose, each with its name, its reason and a predicate
//! that recognises its cases, as listed in docs/mlx-differences.md (the questions the
//! predicates ask are in `questions.rs`, the float64 judge in `judge.rs`).

use super::judge::{
    float64_sides_with_nuvec, float64_verdicts, half_precision_noise_around_zero, Verdict,
};
use super::questions::*;
use serde_json::Value;

/// A difference nuvec keeps on purpose: its name, why, and whether a case is one.
pub(crate) struct Deliberate {
    pub(crate) name: &'static str,
    pub(crate) reason: &'static str,
    pub(crate) matches: fn(program: &Value, mlx: &Value, nuvec: &Value) -> bool,
}

/// The differences from MLX that nuvec keeps (docs/mlx-differences.md).
/// Ops that MLX turns into their argument itself for some shapes.
const NO_OPS_IN_MLX: [&str; 10] = [
    "astype",
    "broadcast_to",
    "reshape",
    "slice",
    "sum",
    "prod",
    "max",
    "min",
    "squeeze",
    "expand_dims",
];

/// Ops whose float32 results go through MLX's approximate `exp`.
const EXP_IN_MLX: [&str; 5] = ["exp", "softmax", "logsumexp", "sigmoid", "logaddexp"];

pub(crate) const DELIBERATE: &[Deliberate] = &[
    Deliberate {
        name: "integers carry no derivative",
        reason: "MLX differentiates through integer and boolean values in integers (the \
                 derivative of exp at 1 comes out as 2), or refuses, depending on the path; \
                 nuvec passes no derivative through them",
        matches: |program, mlx, nuvec| {
            differentiates(program)
                && has_integer_values(program)
                && nuvec["ok"] == true
                && (mlx["ok"] == true
                    || [
                        "Type of cotangents does not match primal output type",
                        "Cannot calculate JVP with respect to indices",
                        "Cannot calculate VJP with respect to indices",
                        "[negative] Not supported for bool",
                        "Cannot infer the shape of an empty array",
                        "Only inexact types are supported",
                    ]
                    .iter()
                    .any(|text| error_has(mlx, text)))
        },
    },
    Deliberate {
        name: "softmax of integers with explicit axes",
        reason: "MLX keeps an integer input's dtype when axes are given, truncating the \
                 probabilities (what follows differs too, or is refused); nuvec computes them \
                 in float32, as MLX does without axes",
        matches: |program, mlx, nuvec| {
            has_op(program, "softmax")
                && has_integer_values(program)
                && nuvec["ok"] == true
                && (mlx["ok"] == true
                    || error_has(mlx, "Only inexact types are supported")
                    || error_has(mlx, "would result in overflow"))
        },
    },
    Deliberate {
        name: "logsumexp's derivative at infinities",
        reason: "where inputs are infinite, MLX's gradient of logsumexp (a softmax after \
                 subtracting an infinite maximum) is NaN; nuvec's is the limit (over axes \
                 other than the last: over the last, nuvec's is MLX's)",
        matches: |program, mlx, nuvec| {
            has_op(program, "logsumexp")
                && differentiates(program)
                && both_ok(mlx, nuvec)
                && only_mlx_has_nan(mlx, nuvec)
        },
    },
    Deliberate {
        name: "logsumexp of booleans",
        reason: "MLX's logsumexp of a boolean array counts a false as 2 (exp(2) where exp(0) \
                 is due); nuvec computes it on 0 and 1",
        matches: |program, mlx, nuvec| {
            has_op(program, "logsumexp") && makes_booleans(program) && both_ok(mlx, nuvec)
        },
    },
    Deliberate {
        name: "logsumexp of unsigned integers",
        reason: "MLX's logsumexp of an unsigned array that is not one flat row (uint8 of shape \
                 [4, 2], say) gives inf; nuvec computes it as for the same values in int32",
        matches: |program, mlx, nuvec| {
            has_op(program, "logsumexp") && makes_unsigned(program) && both_ok(mlx, nuvec)
        },
    },
    Deliberate {
        name: "derivatives of cumprod at zeros and infinities",
        reason: "MLX's cumprod vjp divides by the input and then selects with where, whose \
                 derivative sends zeros back through that division (differentiating it again \
                 gives NaN wherever an input is zero), and it finds the first zero from the \
                 running product, which inf·0 makes NaN; nuvec finds it from the inputs and \
                 divides only before it, so its derivatives there are finite (prod's first \
                 derivative is built from cumprods, so its higher ones differ the same way)",
        matches: |program, mlx, nuvec| {
            (has_op(program, "cumprod")
                || (has_op(program, "prod") && differentiations(program) >= 2))
                && differentiations(program) >= 1
                && both_ok(mlx, nuvec)
                && only_mlx_has_nan(mlx, nuvec)
        },
    },
    Deliberate {
        name: "third derivatives of power",
        reason: "MLX's third derivatives of power are wrong: for f(x) = x^(1/sqrt(x)) at 3, \
                 MLX's f''' is 0.2766, where the exact value (mpmath) and nuvec's are 0.1130",
        matches: |program, mlx, nuvec| {
            has_op(program, "power") && differentiations(program) >= 3 && both_ok(mlx, nuvec)
        },
    },
    Deliberate {
        name: "second derivatives through max/min's tie mask",
        reason: "MLX's max/min (and maximum/minimum, and clip, which is made of them) vjp \
                 multiplies by a boolean mask of the extremes, and differentiates through it: \
                 where the first derivative is infinite or NaN (a NaN extreme, a row of \
                 infinities, arccos beyond 1), the second is NaN; nuvec's mask carries no \
                 derivative",
        matches: |program, mlx, nuvec| {
            ["max", "min", "maximum", "minimum", "clip"]
                .iter()
                .any(|op| has_op(program, op))
                && differentiations(program) >= 2
                && both_ok(mlx, nuvec)
                && only_mlx_has_nan(mlx, nuvec)
        },
    },
    Deliberate {
        name: "erf's approximation, amplified",
        reason: "nuvec's float32 erf is a different approximation from MLX's (each within a \
                 few 1e-7 of the exact value); near ±1 functions of it such as arcsin, erfinv, \
                 arctanh or log1p magnify that difference past the tolerance (to under 1%, or \
                 further where the program run in float64 shows nuvec's result is the right \
                 one)",
        matches: |program, mlx, nuvec| {
            has_op(program, "erf")
                && both_ok(mlx, nuvec)
                && (differing_outputs_all(mlx, nuvec, |a, b| {
                    equal_except(a, b, |x, y| (x - y).abs() <= 0.01 * x.abs().max(y.abs()))
                }) || float64_sides_with_nuvec(program, mlx, nuvec))
        },
    },
    Deliberate {
        name: "half-precision results that cancel exactly",
        reason: "an element that is exactly 0 in exact arithmetic (the program run in float64 \
                 says so), computed in float16 or bfloat16 from values near 1, keeps a few of \
                 their roundings: MLX's and nuvec's are different few (a float16 gradient of a \
                 softmax's sum: -0.00098 in MLX, -0.0059 in nuvec, six ulps of 1)",
        matches: |program, mlx, nuvec| {
            both_ok(mlx, nuvec) && half_precision_noise_around_zero(program, mlx, nuvec)
        },
    },
    Deliberate {
        name: "half-precision matrix products that cancel",
        reason: "MLX's CPU rounds the terms of a bfloat16 or float16 matrix product to that type \
                 before adding them; nuvec adds them in float32 and rounds once, so where the \
                 terms cancel (0.0448 in float64: nuvec 0.0459, MLX 0.0306) nuvec's result is \
                 the float64 one and MLX's is not",
        matches: |program, mlx, nuvec| {
            has_op(program, "matmul")
                && super::compare::precision_floor(program).is_some()
                && both_ok(mlx, nuvec)
                && float64_sides_with_nuvec(program, mlx, nuvec)
        },
    },
    Deliberate {
        name: "NaN cast to an integer under compile",
        reason: "MLX casts NaN (and infinities) to int32 as the minimum (-2^31) eagerly but as 0 \
                 in a compiled function, so the same program gives two answers; nuvec gives the \
                 minimum in both",
        matches: |program, mlx, nuvec| {
            has_transform(program, "compile")
                && program["ops"].as_array().into_iter().flatten().any(|op| {
                    op["op"] == "astype"
                        && matches!(
                            op["dtype"].as_str(),
                            Some("int8" | "int16" | "int32" | "uint8" | "uint16" | "uint32")
                        )
                })
                && both_ok(mlx, nuvec)
        },
    },
    Deliberate {
        name: "periodic functions of large arguments",
        reason: "nuvec's float32 exp rounds correctly more often than MLX's approximation (e^3 \
                 is 20.085537 in nuvec, 20.085535 in MLX); sin, cos or tan of a large result \
                 of it (cos(e^6) near 403) turn that last bit into a difference of 1e-4, and \
                 an argsort, argmax or argmin of such values may order them differently (further \
                 apart where the program run in float64 does not side with MLX)",
        matches: |program, mlx, nuvec| {
            let orders = ["argsort", "argmax", "argmin"]
                .iter()
                .any(|op| has_op(program, op));
            ["sin", "cos", "tan"].iter().any(|op| has_op(program, op))
                && ["exp", "expm1", "power", "sinh", "cosh"]
                    .iter()
                    .any(|op| has_op(program, op))
                && both_ok(mlx, nuvec)
                && (differing_outputs_all(mlx, nuvec, |a, b| {
                    (orders && a["dtype"] == "uint32")
                        || equal_except(a, b, |x, y| {
                            (x - y).abs() <= 1e-3 * x.abs().max(y.abs()).max(1.0)
                        })
                }) || float64_sides_with_nuvec(program, mlx, nuvec))
        },
    },
    Deliberate {
        name: "MLX's exp an ulp off, magnified",
        reason: "MLX's float32 exp (inside softmax, sigmoid, logsumexp and logaddexp too) is an ulp off the correctly rounded value for some \
                 arguments (e^-3.5: MLX 0.030197382, correctly rounded 0.030197384, nuvec's); \
                 where a later remainder, floor or reciprocal magnifies that last bit (the \
                 remainder of 1/p by p for a softmax value p near 0.0147), or an argsort, \
                 argmax or argmin orders values that are equal in exact arithmetic (e^-2 to \
                 the -2 and e^2 squared), the program run in float64 finds nuvec's result, \
                 not MLX's",
        matches: |program, mlx, nuvec| {
            EXP_IN_MLX.iter().any(|op| has_op(program, op))
                && [
                    "remainder",
                    "floor_divide",
                    "floor",
                    "ceil",
                    "reciprocal",
                    "divide",
                    "argsort",
                    "argmax",
                    "argmin",
                ]
                .iter()
                .any(|op| has_op(program, op))
                && both_ok(mlx, nuvec)
                && float64_verdicts(program, mlx, nuvec).is_some_and(|verdicts| {
                    verdicts.contains(&Verdict::OnlyNuvecHits)
                        && !verdicts.contains(&Verdict::OnlyMlxHits)
                })
        },
    },
    Deliberate {
        name: "the floor of a quotient a rounding from an integer",
        reason: "MLX's float32 sin and cos are an ulp off the correctly rounded value for some \
                 arguments (cos(-2): MLX -0.41614681, correctly rounded -0.41614684, nuvec's); \
                 where a floor_divide or floor then meets a value a rounding away from an \
                 integer (cos(y)·x / cos(y) for x = -3), the two results differ by one",
        matches: |program, mlx, nuvec| {
            ["sin", "cos"].iter().any(|op| has_op(program, op))
                && ["floor_divide", "floor", "ceil"]
                    .iter()
                    .any(|op| has_op(program, op))
                && both_ok(mlx, nuvec)
                && differing_outputs_all(mlx, nuvec, |a, b| {
                    equal_except(a, b, |x, y| {
                        x.fract() == 0.0 && y.fract() == 0.0 && (x - y).abs() == 1.0
                    })
                })
        },
    },
    Deliberate {
        name: "results float32 cannot compute",
        reason: "where a result is the difference of terms far larger than itself (the tangent \
                 of a softmax over another axis than the last, of tan near its poles), float32 \
                 roundings decide its digits: computed again in float64, neither MLX's float32 \
                 result nor nuvec's is within the tolerance of it (both about 2% off, in \
                 opposite directions), or both are, a tolerance apart on either side of it",
        matches: |program, mlx, nuvec| {
            both_ok(mlx, nuvec)
                && float64_verdicts(program, mlx, nuvec).is_some_and(|verdicts| {
                    verdicts
                        .iter()
                        .all(|v| matches!(v, Verdict::BothMiss | Verdict::BothHit))
                })
        },
    },
    Deliberate {
        name: "an infinite derivative times a cotangent that cancels",
        reason: "the derivative of a sum of softmax outputs is 0 in exact arithmetic; computed, \
                 it is a rounding residual whose sign depends on the order of the additions, \
                 and an infinite derivative behind it (arccos at -1) turns it into -inf in MLX \
                 and +inf in nuvec; in float64 the element is not finite either",
        matches: |program, mlx, nuvec| {
            differentiates(program)
                && both_ok(mlx, nuvec)
                && super::judge::infinities_signed_by_rounding(program, mlx, nuvec)
        },
    },
    Deliberate {
        name: "prod over several axes of an empty array",
        reason: "MLX's prod over two or more axes of an array with no elements returns what its \
                 output buffer held (1.1e35, 0: uninitialised memory); the product of nothing \
                 is 1, nuvec's result",
        matches: |program, mlx, nuvec| {
            has_op(program, "prod")
                && has_empty_input(program)
                && both_ok(mlx, nuvec)
                && differing_outputs_all(mlx, nuvec, |a, b| equal_except(a, b, |_, y| y == 1.0))
        },
    },
    Deliberate {
        name: "any and all over several axes of an empty array",
        reason: "like its prod, MLX's any and all over two or more axes of an array with no \
                 elements (under vmap, or after swapaxes) return what the output buffer held \
                 (true or false from run to run); any of nothing is false and all of nothing \
                 true, nuvec's results",
        matches: |program, mlx, nuvec| {
            // nuvec's value is the reduction's identity: false for any, true for all.
            let identity: fn(f64, f64) -> bool = match (has_op(program, "any"), has_op(program, "all")) {
                (true, false) => |_, y| y == 0.0,
                (false, true) => |_, y| y == 1.0,
                (true, true) => |_, _| true,
                (false, false) => return false,
            };
            has_empty_input(program)
                && both_ok(mlx, nuvec)
                && differing_outputs_all(mlx, nuvec, |a, b| {
                    a["dtype"] == "bool" && equal_except(a, b, identity)
                })
        },
    },
    Deliberate {
        name: "a cast to bool of a sum that cancels",
        reason: "where a float32 sum is exactly 0 in exact arithmetic (a matrix product whose \
                 terms cancel), the order of its additions decides whether roundings leave 0 \
                 or a value a few ulps of its terms away (MLX 0, nuvec -4.2e-9); a cast to \
                 bool then gives false on one side and true on the other",
        matches: |program, mlx, nuvec| {
            has_op(program, "astype")
                && both_ok(mlx, nuvec)
                && super::judge::casts_of_rounded_zeros(program, mlx, nuvec)
        },
    },
    Deliberate {
        name: "var of integers holding -2^31",
        reason: "MLX's var of an int32 array holding -2^31 (what casting -inf or NaN, or an \
                 exclusive cummax, gives) is wrong: [-2^31, -1, -1, 0] comes out 2.0e18 where \
                 the exact variance, numpy's and nuvec's, is 8.6e17 (its float32 var is right)",
        matches: |program, mlx, nuvec| {
            has_op(program, "var") && has_integer_values(program) && both_ok(mlx, nuvec)
        },
    },
    Deliberate {
        name: "second derivatives through checkpoint at infinities",
        reason: "differentiating a checkpoint's derivative, MLX also sends a zero cotangent \
                 through the function's original graph, where it meets an infinite derivative \
                 (0 · inf = NaN: the second derivative of exp at +inf comes out NaN, inf \
                 without the checkpoint); nuvec sends nothing there",
        matches: |program, mlx, nuvec| {
            has_transform(program, "checkpoint")
                && differentiations(program) >= 2
                && both_ok(mlx, nuvec)
                && only_mlx_has_nan(mlx, nuvec)
        },
    },
    Deliberate {
        name: "erf(+0)",
        reason: "MLX's erf of +0 is -0 (so 1 / erf(0) is -inf); erf is odd and nuvec's erf(+0) \
                 is +0, so values computed from it differ in sign, and so does what depends on \
                 that sign (an argmin after a cumprod of it)",
        matches: |program, mlx, nuvec| {
            has_op(program, "erf")
                && both_ok(mlx, nuvec)
                && (erf_of_an_input_holding_zero(program) || only_signs_differ(mlx, nuvec))
        },
    },
    Deliberate {
        name: "an output returned twice",
        reason: "when a function returns the same array twice (also an input returned beside \
                 an op that MLX makes a no-op, such as astype to the same dtype or a slice of \
                 everything, or beside a tangent that is the input's, as nested jvps of max \
                 of a 0-d array give), MLX's vjp keeps one of the two cotangents (nuvec adds \
                 them, which is the derivative) and its vmap moves the batch axis of the copy \
                 again",
        matches: |program, mlx, nuvec| {
            let outputs = program["outputs"].as_array().cloned().unwrap_or_default();
            let inputs = program["inputs"].as_array().map_or(0, Vec::len) as u64;
            let ops = program["ops"].as_array().cloned().unwrap_or_default();
            // An op MLX may return its argument from unchanged (a broadcast to its own shape,
            // a reduction over length-1 axes), applied to another output.
            let copy_of_output = |o: u64| {
                o.checked_sub(inputs)
                    .and_then(|k| ops.get(k as usize))
                    .is_some_and(|op| {
                        NO_OPS_IN_MLX.contains(&op["op"].as_str().unwrap_or(""))
                            && outputs.contains(&op["args"][0])
                    })
            };
            // An output whose tangent is an input itself (MLX's add of a constant passes the
            // tangent on unchanged, its no-ops return their argument itself, as `max` of a 0-d
            // array does, and the tester's tangents are the inputs): nested jvps return it
            // twice.
            let input_as_tangent = |o: u64| {
                let mut at = o;
                while let Some(op) = at.checked_sub(inputs).and_then(|k| ops.get(k as usize)) {
                    let name = op["op"].as_str().unwrap_or("");
                    if name != "add_scalar" && !NO_OPS_IN_MLX.contains(&name) {
                        return false;
                    }
                    at = op["args"][0].as_u64().unwrap_or(u64::MAX);
                }
                at < inputs && o >= inputs
            };
            // The array an output is, seen through MLX's no-ops.
            let source = |o: &Value| {
                let mut at = o.as_u64().unwrap_or(u64::MAX);
                while let Some(op) = at.checked_sub(inputs).and_then(|k| ops.get(k as usize)) {
                    if !NO_OPS_IN_MLX.contains(&op["op"].as_str().unwrap_or("")) {
                        break;
                    }
                    at = op["args"][0].as_u64().unwrap_or(u64::MAX);
                }
                at
            };
            let repeated = outputs.iter().enumerate().any(|(i, o)| {
                outputs[..i].contains(o)
                    || outputs[..i].iter().any(|p| source(p) == source(o))
                    || o.as_u64().is_some_and(|o| o < inputs || copy_of_output(o))
                    || (has_transform(program, "jvp") && o.as_u64().is_some_and(input_as_tangent))
            });
            let transformed = program["transforms"]
                .as_array()
                .is_some_and(|t| !t.is_empty());
            repeated && transformed && both_ok(mlx, nuvec)
        },
    },
    Deliberate {
        name: "where's derivatives select",
        reason: "MLX's jvp and vjp of where mix both sides arithmetically, so an infinite \
                 derivative on the chosen side becomes NaN, and differentiating them again \
                 goes through the condition; nuvec's select. MLX's derivative of power in its \
                 exponent is such a where (0 at a zero result), so its second derivatives at a \
                 zero base are NaN too",
        matches: |program, mlx, nuvec| {
            let differentiations = differentiations(program);
            let power_at_zero =
                has_op(program, "power") && differentiations >= 2 && only_mlx_has_nan(mlx, nuvec);
            (has_op(program, "where")
                && both_ok(mlx, nuvec)
                && (has_transform(program, "jvp")
                    || differentiations >= 2
                    || (differentiations == 1 && only_mlx_has_nan(mlx, nuvec))))
                || (power_at_zero && both_ok(mlx, nuvec))
        },
    },
    Deliberate {
        name: "tangents of outputs that have no derivative",
        reason: "the jvp of a boolean or index output (comparisons, isnan, all/any, argmax, \
                 argsort) is zeros of its own dtype in nuvec; MLX gives zeros of the input's \
                 dtype, or for all/any a reduction of the tangent",
        matches: |program, mlx, nuvec| {
            has_transform(program, "jvp")
                && both_ok(mlx, nuvec)
                && differing_outputs_all(mlx, nuvec, |_, b| zeros_without_derivative(b))
        },
    },
    Deliberate {
        name: "no cotangent through boolean and index outputs",
        reason: "MLX's vjp passes a cotangent through all/any, comparisons and arg-reductions \
                 as if they were sums; nuvec's is zero, since they have no derivative",
        matches: |program, mlx, nuvec| {
            (has_transform(program, "vjp") || has_transform(program, "grad"))
                && makes_booleans_or_indices(program)
                && both_ok(mlx, nuvec)
                && differing_outputs_all(mlx, nuvec, |_, b| all_zero(b))
        },
    },
    Deliberate {
        name: "cummax and cummin of half-precision NaN",
        reason: "MLX's float16/bfloat16 cummax and cummin lose a NaN that should propagate \
                 (0 in its place; its float32 ones propagate it), and what is computed from \
                 them differs; nuvec propagates NaN in every float type",
        matches: |program, mlx, nuvec| {
            (has_op(program, "cummax") || has_op(program, "cummin"))
                && both_ok(mlx, nuvec)
                && (half_precision_nan_input(program)
                    || super::judge::nan_reaches_a_half_precision_cumulative_extreme(program)
                    || (super::compare::precision_floor(program).is_some()
                        && nan_in_an_output(nuvec))
                    || differing_outputs_all(mlx, nuvec, |a, b| {
                        matches!(a["dtype"].as_str(), Some("float16" | "bfloat16"))
                            && nan_in_nuvec_only(a, b)
                    })
                    // The NaN cast to an integer: the type's minimum, or 0 for narrower ones.
                    || (super::compare::precision_floor(program).is_some()
                        && differing_outputs_all(mlx, nuvec, |a, b| {
                            a["dtype"].as_str().is_some_and(|d| d.contains("int"))
                                && equal_except(a, b, |_, y| {
                                    y == 0.0 || y == -(2f64.powi(31)) || y == -(2f64.powi(63))
                                })
                        })))
        },
    },
    Deliberate {
        name: "transforms MLX has not implemented",
        reason: "MLX raises for the jvp of cumprod/cummin/cummax and of scatter, and for the \
                 jvp and vmap of checkpoint (Depends); nuvec computes them",
        matches: |_, mlx, nuvec| {
            nuvec["ok"] == true
                && [
                    "is not implemented",
                    "not yet implemented",
                    "Not implemented for",
                ]
                .iter()
                .any(|text| error_has(mlx, text))
        },
    },
    Deliberate {
        name: "vjp with stop_gradient outputs",
        reason: "MLX's vjp refuses some functions that return stop_gradient's result (\"Output \
                 shape does not match cotangent shape\" although the shapes match); nuvec \
                 computes them",
        matches: |program, mlx, nuvec| {
            nuvec["ok"] == true
                && has_op(program, "stop_gradient")
                && error_has(mlx, "does not match cotangent shape")
        },
    },
    Deliberate {
        name: "argmax/argmin of a 0-d array with keepdims",
        reason: "MLX fails inside (\"cannot create std::vector larger than max_size()\"); nuvec \
                 returns index 0",
        matches: |_, mlx, nuvec| {
            error_has(mlx, "cannot create std::vector larger than max_size") && nuvec["ok"] == true
        },
    },
    Deliberate {
        name: "programs that crash MLX or never end in it",
        reason: "MLX's process dies (e.g. a segmentation fault in cummax's vjp at a leading \
                 NaN) or runs for ever; nuvec computes a result or reports an error",
        matches: |_, mlx, nuvec| {
            error_has(mlx, "MLX's process crashed or hung") && nuvec["panic"] != true
        },
    },
    Deliberate {
        name: "vmap of take's result when it is also reduced",
        reason: "when a vmapped function returns take's result (axis None) and also reduces it \
                 with keepdims, MLX returns that output with its batch axis last ([1, 3] for \
                 a batch of 3 results of shape [1]); nuvec puts the batch axis first, as out_axes \
                 says",
        matches: |program, mlx, nuvec| {
            has_transform(program, "vmap")
                && has_op(program, "take")
                && both_ok(mlx, nuvec)
                && differing_outputs_all(mlx, nuvec, |a, b| {
                    let (mut x, mut y) = (dims(a), dims(b));
                    x.sort_unstable();
                    y.sort_unstable();
                    x == y && x.len() == 2 && x[0] == 1 && a["data"] == b["data"]
                })
        },
    },
    Deliberate {
        name: "differentiating again through MLX's own gathers",
        reason: "MLX's derivatives of sort, max/min and the scans gather with indices they \
                 compute; differentiating such a derivative again (or under vmap) makes MLX \
                 refuse a derivative with respect to those indices; nuvec treats them as the \
                 constants they are",
        matches: |program, mlx, nuvec| {
            differentiates(program)
                && nuvec["ok"] == true
                && (error_has(mlx, "Cannot calculate JVP with respect to indices")
                    || error_has(mlx, "Cannot calculate VJP with respect to indices"))
        },
    },
    Deliberate {
        name: "derivatives of max/min over empty arrays",
        reason: "MLX's derivative of max/min goes through argmax/argmin, which refuse any \
                 empty array, even when the reduced axis is not empty; nuvec returns the empty \
                 result",
        matches: |program, mlx, nuvec| {
            differentiates(program)
                && nuvec["ok"] == true
                && (error_has(mlx, "Cannot argmax reduce zero size array")
                    || error_has(mlx, "Cannot argmin reduce zero size array"))
        },
    },
    Deliberate {
        name: "derivatives of prod over several axes of empty arrays",
        reason: "MLX's vjp of prod over more than one axis moves those axes to the end and \
                 flattens them with a -1 reshape, which MLX refuses for an empty array; nuvec \
                 returns the (empty) gradient",
        matches: |program, mlx, nuvec| {
            has_op(program, "prod")
                && differentiates(program)
                && nuvec["ok"] == true
                && error_has(mlx, "Cannot infer the shape of an empty array")
        },
    },
    Deliberate {
        name: "take with an index out of range",
        reason: "MLX reads whatever an out-of-range index reaches; nuvec refuses it",
        matches: |_, mlx, nuvec| {
            mlx["ok"] == true && error_has(nuvec, "is out of range for an axis of length")
        },
    },
];
