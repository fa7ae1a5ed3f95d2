#!/usr/bin/env python3
"""Generate nuvec's golden test fixtures from Apple MLX (version 0.32.4).

How to run (from the repository root):

    python3 -m venv .venv-mlx
    .venv-mlx/bin/pip install "mlx[cpu]==0.32.4" numpy   # on Linux the CPU
                                                        # backend is the extra
    .venv-mlx/bin/python scripts/golden/make_fixtures.py

The script pins MLX to the CPU device (``mx.set_default_device(mx.cpu)``) so
the results are those of MLX's CPU backend, which nuvec-cpu mirrors. It
writes one JSON file per op family into ``crates/nuvec/tests/fixtures/``:
unary, binary, compare, reduce, shape, index, matmul, sort, promotion,
random and creation.

Fixture format (parsed by the Rust tests):

    {"mlx_version": "0.32.4", "cases": [
      {"name": ..., "op": ..., "inputs": [<array>, ...], "kwargs": {...},
       "expected": <array>}                  # or "expected_list": [<array>...]
    ]}                                       # or "error": true (MLX raised)

An <array> is {"dtype": <MLX dtype name>, "shape": [...], "data": [...]}
with ``data`` the flat row-major values: bools as true/false, NaN and
infinities as the strings "nan", "inf", "-inf", float16/bfloat16 values as
the exact float they hold, 64-bit integers as JSON integers. An input may
instead be {"scalar": <number or bool>} (a Python scalar, MLX's weakly typed
operand) or {"dtype", "shape", "gen": "mod5"} meaning data[k] = k % 5.

Kwarg conventions that need a word:
  * slice: {"start", "stop", "strides"} lists, one entry per sliced axis,
    meaning a[start0:stop0:stride0, ...] with NumPy basic-slicing rules; a
    null entry means that bound was omitted (e.g. a[::-1]).
  * creation ops: a null "dtype" means MLX inferred it from the Python
    values; integral JSON numbers (no decimal point) were Python ints and
    numbers written with a decimal point were Python floats.
  * topk cases carry "unordered": true: compare as multisets per row.
  * error cases also carry "mlx_error", the first line of MLX's message
    (informational only).
  * random.permutation with an integer argument puts it in "x"; array
    arguments (categorical logits, the array to permute) are inputs.
  * random.state cases record mx.random.state[0] (the global key) after
    seed(S) and one draw.
  * random.*: "seed" is the value given to mx.random.seed() right before the
    single draw (null when an explicit "key" [u32, u32] was passed instead).
    For op "random.key", "seed" is the argument of mx.random.key().
    random.bits is not exposed by MLX's Python API; its cases come from a
    tiny C++ program linked against the wheel's libmlx.so, compiled on the
    fly with g++ (skipped with a warning if that fails).

Inputs are deterministic: NumPy RandomState seeded from the case name,
rounded to a few decimals, then converted to the case's dtype by MLX; the
fixture records the converted values.
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import mlx.core as mx

MLX_VERSION = "0.32.4"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(ROOT, "crates", "nuvec", "tests", "fixtures")

mx.set_default_device(mx.cpu)

DTYPES = {
    "bool": mx.bool_,
    "uint8": mx.uint8,
    "uint16": mx.uint16,
    "uint32": mx.uint32,
    "uint64": mx.uint64,
    "int8": mx.int8,
    "int16": mx.int16,
    "int32": mx.int32,
    "int64": mx.int64,
    "float16": mx.float16,
    "bfloat16": mx.bfloat16,
    "float32": mx.float32,
    "float64": mx.float64,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
FLOATS = {"float16", "bfloat16", "float32", "float64"}
NAN = float("nan")
INF = float("inf")


# ----------------------------------------------------------------------------
# Encoding helpers


def enc_value(v):
    """JSON-encodable scalar: non-finite floats become strings."""
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    return v


def enc(a):
    """Encode an mx.array as {"dtype", "shape", "data"}."""
    name = DTYPE_NAMES[a.dtype]
    if a.dtype == mx.bfloat16:
        host = np.array(a.astype(mx.float32))  # exact: bf16 widens to f32
    else:
        host = np.array(a)
    flat = host.reshape(-1).tolist()
    if name in FLOATS:
        flat = [enc_value(float(x)) for x in flat]
    elif name == "bool":
        flat = [bool(x) for x in flat]
    else:
        flat = [int(x) for x in flat]
    return {"dtype": name, "shape": list(a.shape), "data": flat}


def arr(dtype, shape, data):
    """Build an mx.array of MLX dtype name `dtype` from flat `data`."""
    flat = np.asarray(data, dtype=np.float64 if dtype in FLOATS else None).reshape(-1)
    if dtype == "bool":
        host = np.asarray(flat, dtype=np.bool_)
    elif dtype in FLOATS:
        host = flat.astype(np.float64)
    else:
        host = np.asarray(flat).astype(np.dtype(dtype))
    # (mx.array of a NumPy float64 array would silently give float32)
    if dtype == "float64":
        a = mx.array(host, dtype=mx.float64)
    elif dtype == "float32":
        a = mx.array(host.astype(np.float32))
    elif dtype == "float16":
        a = mx.array(host.astype(np.float16))
    elif dtype == "bfloat16":
        a = mx.array(host.astype(np.float32)).astype(mx.bfloat16)
    else:
        a = mx.array(host)
    assert a.dtype == DTYPES[dtype], (a.dtype, dtype)
    return a.reshape(list(shape))


def seed_of(name):
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def rnd(name, shape, lo=-3.0, hi=3.0, dec=2):
    """Deterministic floats in [lo, hi) rounded to `dec` decimals."""
    rs = np.random.RandomState(seed_of(name))
    return rs.uniform(lo, hi, size=int(np.prod(shape))).round(dec).tolist()


def rint(name, shape, lo, hi):
    """Deterministic integers in [lo, hi)."""
    rs = np.random.RandomState(seed_of(name))
    return [int(x) for x in rs.randint(lo, hi, size=int(np.prod(shape)))]


def distinct(name, shape, lo=-50.0, hi=50.0):
    """Deterministic distinct floats (for argsort / topk without ties)."""
    n = int(np.prod(shape))
    rs = np.random.RandomState(seed_of(name))
    vals = rs.choice(np.arange(int(lo * 10), int(hi * 10)), size=n, replace=False)
    return (vals / 10.0).tolist()


def gen_mod5(n):
    return [k % 5 for k in range(n)]


# ----------------------------------------------------------------------------
# Fixture builder


class Fixture:
    def __init__(self, filename):
        self.filename = filename
        self.cases = []
        self.names = set()

    def add(self, name, op, inputs, kwargs=None, call=None, extra=None):
        """Record one case.

        inputs: list of mx.array, or dicts {"scalar": v} / {"gen": ...}
        (already in their final fixture form, with "_value" for the MLX side).
        call: function(list_of_mlx_operands, kwargs) -> mx.array | list;
        defaults to the generic dispatcher `default_call(op)`.
        """
        assert name not in self.names, name
        self.names.add(name)
        kwargs = dict(kwargs or {})
        enc_inputs, operands = [], []
        for x in inputs:
            if isinstance(x, mx.array):
                enc_inputs.append(enc(x))
                operands.append(x)
            else:
                enc_inputs.append({k: v for k, v in x.items() if k != "_value"})
                operands.append(x["_value"])
        case = {"name": name, "op": op, "inputs": enc_inputs, "kwargs": kwargs}
        if extra:
            case.update(extra)
        fn = call or default_call(op)
        try:
            out = fn(operands, kwargs)
            if isinstance(out, (list, tuple)):
                mx.eval(*out)
                case["expected_list"] = [enc(o) for o in out]
            else:
                mx.eval(out)
                case["expected"] = enc(out)
        except Exception as e:  # MLX raised: record as an error case
            case["error"] = True
            case["mlx_error"] = str(e).splitlines()[0][:200]
        self.cases.append(case)

    def write(self):
        path = os.path.join(OUT_DIR, self.filename)
        doc = {"mlx_version": MLX_VERSION, "cases": self.cases}
        with open(path, "w") as f:
            json.dump(doc, f, separators=(",", ":"), allow_nan=False)
            f.write("\n")
        n_err = sum(1 for c in self.cases if c.get("error"))
        print(f"{self.filename}: {len(self.cases)} cases ({n_err} errors), "
              f"{os.path.getsize(path)} bytes")


def scalar(v):
    return {"scalar": v, "_value": v}


def gen_input(dtype, shape, gen):
    assert gen == "mod5"
    n = int(np.prod(shape))
    return {"dtype": dtype, "shape": list(shape), "gen": gen,
            "_value": arr(dtype, shape, gen_mod5(n))}


def dt(v):
    return None if v is None else DTYPES[v]


def default_call(op):
    """Map (op, kwargs) onto the MLX Python call that defines the case."""
    if op == "astype":
        return lambda xs, kw: xs[0].astype(DTYPES[kw["dtype"]])
    if op == "pad":
        return lambda xs, kw: mx.pad(xs[0], [tuple(p) for p in kw["pad_width"]],
                                     constant_values=kw["constant_value"])
    if op in ("concatenate", "stack"):
        return lambda xs, kw: getattr(mx, op)(list(xs), **kw)
    if op == "slice":
        def f(xs, kw):
            idx = tuple(slice(a, b, c) for a, b, c in
                        zip(kw["start"], kw["stop"], kw["strides"]))
            return xs[0][idx]
        return f
    if op == "slice_update":
        def f(xs, kw):
            idx = tuple(slice(a, b, c) for a, b, c in
                        zip(kw["start"], kw["stop"], kw["strides"]))
            out = mx.array(xs[0])
            out[idx] = xs[1]
            return out
        return f
    if op == "tile":  # reps is positional-only in MLX's binding
        return lambda xs, kw: mx.tile(xs[0], kw["reps"])
    if op == "clip":
        return lambda xs, kw: mx.clip(xs[0], kw["a_min"], kw["a_max"])
    if op == "full":
        return lambda xs, kw: mx.full(kw["shape"], kw["value"], dtype=dt(kw["dtype"]))
    if op in ("zeros", "ones"):
        return lambda xs, kw: getattr(mx, op)(kw["shape"], dtype=dt(kw["dtype"]) or mx.float32)
    if op == "arange":
        def f(xs, kw):
            d = dt(kw["dtype"])
            return mx.arange(kw["start"], kw["stop"], kw["step"], dtype=d)
        return f
    if op == "linspace":
        return lambda xs, kw: mx.linspace(kw["start"], kw["stop"], kw["num"],
                                          dtype=dt(kw["dtype"]) or mx.float32)
    if op == "eye":
        return lambda xs, kw: mx.eye(kw["n"], kw["m"], kw["k"],
                                     dtype=dt(kw["dtype"]) or mx.float32)
    fn = getattr(mx, op)
    return lambda xs, kw: fn(*xs, **kw)


# ----------------------------------------------------------------------------
# unary.json


UNARY_DOMAINS = {
    "abs": (-3, 3), "negative": (-3, 3), "sign": (-3, 3), "square": (-3, 3),
    "sqrt": (0.01, 9), "rsqrt": (0.01, 9), "exp": (-5, 5), "expm1": (-2, 2),
    "log": (0.01, 20), "log1p": (-0.9, 10), "log2": (0.01, 20),
    "log10": (0.01, 200), "sin": (-6.3, 6.3), "cos": (-6.3, 6.3),
    "tan": (-1.4, 1.4), "tanh": (-4, 4), "sigmoid": (-8, 8), "erf": (-3, 3),
    "erfinv": (-0.99, 0.99), "floor": (-3, 3), "ceil": (-3, 3),
    "round": (-3, 3), "logical_not": (-2, 2), "isnan": (-2, 2),
    "isinf": (-2, 2), "stop_gradient": (-3, 3), "reciprocal": (0.1, 5),
}


def make_unary():
    fx = Fixture("unary.json")
    for op, (lo, hi) in UNARY_DOMAINS.items():
        name = f"{op}_f32"
        data = rnd(name, [2, 5], lo, hi, 3)
        if op in ("logical_not",):
            data[0] = 0.0
        if op == "reciprocal":
            data[1] = -data[1]
        kw = {"decimals": 0} if op == "round" else {}
        fx.add(name, op, [arr("float32", [2, 5], data)], kw)

    # rounding ties go to even
    fx.add("round_f32_ties", "round",
           [arr("float32", [8], [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 2.4999])],
           {"decimals": 0})
    fx.add("floor_ceil_exact_ints_floor", "floor",
           [arr("float32", [5], [-2.0, -0.0, 0.0, 1.0, -1e-7])])

    # non-finite edge cases, one case per op
    edge = [NAN, INF, -INF, 0.0, -0.0, -1.0, 1.0, 2.0]
    for op in ["abs", "negative", "sign", "square", "sqrt", "rsqrt", "exp",
               "expm1", "log", "log1p", "log2", "log10", "sin", "cos",
               "tanh", "sigmoid", "erf", "erfinv", "floor", "ceil", "round",
               "logical_not", "isnan", "isinf", "reciprocal"]:
        fx.add(f"{op}_f32_edge", op, [arr("float32", [len(edge)], edge)],
               {"decimals": 0} if op == "round" else {})

    # other float dtypes for a subset
    for dtype in ["float16", "bfloat16", "float64"]:
        for op in ["abs", "negative", "sign", "square", "sqrt", "rsqrt", "exp",
                   "log", "sin", "cos", "tanh", "sigmoid", "erf", "floor",
                   "ceil", "round", "reciprocal", "isnan"]:
            lo, hi = UNARY_DOMAINS[op]
            name = f"{op}_{dtype}"
            data = rnd(name, [6], lo, hi, 3)
            if op == "isnan":
                data[2] = NAN
            fx.add(name, op, [arr(dtype, [6], data)],
                   {"decimals": 0} if op == "round" else {})

    # integer inputs
    for op in ["abs", "negative", "sign", "square", "floor", "ceil", "round",
               "logical_not", "isnan", "isinf", "stop_gradient"]:
        name = f"{op}_i32"
        data = rint(name, [7], -9, 10)
        data[0] = 0
        fx.add(name, op, [arr("int32", [7], data)],
               {"decimals": 0} if op == "round" else {})
    for op in ["abs", "negative", "sign", "square"]:
        fx.add(f"{op}_u8", op, [arr("uint8", [5], [0, 1, 7, 16, 200])])
    fx.add("square_i8_wrap", "square", [arr("int8", [4], [-12, 11, 12, 3])])
    fx.add("abs_i32_min", "abs", [arr("int32", [2], [-2147483648, -5])])
    # ints promoted to float by float-only unary ops
    for op in ["sqrt", "rsqrt", "exp", "log", "sin", "erf", "sigmoid",
               "reciprocal", "tanh"]:
        fx.add(f"{op}_i32_promotes", op, [arr("int32", [4], [1, 2, 3, 4])])
    fx.add("sqrt_i64_promotes", "sqrt", [arr("int64", [3], [1, 4, 9])])
    fx.add("sqrt_u8_promotes", "sqrt", [arr("uint8", [3], [1, 4, 9])])
    fx.add("exp_i16_promotes", "exp", [arr("int16", [2], [0, 1])])
    fx.add("sqrt_bool_promotes", "sqrt", [arr("bool", [2], [True, False])])
    fx.add("logical_not_bool", "logical_not", [arr("bool", [3], [True, False, True])])
    fx.add("abs_bool", "abs", [arr("bool", [2], [True, False])])
    fx.add("negative_bool", "negative", [arr("bool", [2], [True, False])])

    # empty and 0-d
    fx.add("exp_f32_empty", "exp", [arr("float32", [0], [])])
    fx.add("abs_f32_empty_2d", "abs", [arr("float32", [2, 0], [])])
    fx.add("sqrt_f32_0d", "sqrt", [arr("float32", [], [2.0])])
    fx.add("negative_i32_0d", "negative", [arr("int32", [], [5])])
    return fx


# ----------------------------------------------------------------------------
# binary.json


BINARY_OPS = ["add", "subtract", "multiply", "divide", "power", "remainder",
              "floor_divide", "maximum", "minimum", "logaddexp",
              "logical_and", "logical_or"]


def make_binary():
    fx = Fixture("binary.json")
    for op in BINARY_OPS:
        lo, hi = (0.1, 3) if op == "power" else (-5, 5)
        a = rnd(f"{op}_a", [2, 3], lo, hi)
        b = rnd(f"{op}_b", [2, 3], lo if op != "power" else -2, hi)
        if op in ("divide", "remainder", "floor_divide"):
            b = [x if abs(x) > 0.2 else 1.5 for x in b]
        if op in ("logical_and", "logical_or"):
            a[0], b[1] = 0.0, 0.0
        fx.add(f"{op}_f32", op, [arr("float32", [2, 3], a), arr("float32", [2, 3], b)])
        # broadcasting patterns
        fx.add(f"{op}_f32_broadcast_row", op,
               [arr("float32", [2, 3], a), arr("float32", [3], b[:3])])
        ia = rint(f"{op}_ia", [6], 1 if op == "power" else -9, 10)
        ib = rint(f"{op}_ib", [6], 0 if op == "power" else -5, 6)
        if op in ("remainder", "floor_divide", "divide"):
            ib = [x if x != 0 else 3 for x in ib]
        fx.add(f"{op}_i32", op, [arr("int32", [2, 3], ia), arr("int32", [2, 3], ib)])

    fx.add("add_f32_broadcast_col_row", "add",
           [arr("float32", [2, 1], [1.0, 2.0]), arr("float32", [1, 3], [10.0, 20.0, 30.0])])
    fx.add("multiply_f32_broadcast_3d", "multiply",
           [arr("float32", [4, 1, 3], rnd("m3a", [12])), arr("float32", [2, 1], [2.0, -1.0])])
    fx.add("subtract_f32_scalar_array", "subtract",
           [arr("float32", [], [10.0]), arr("float32", [2, 2], [1.0, 2.0, 3.0, 4.0])])
    fx.add("subtract_f32_array_scalar", "subtract",
           [arr("float32", [2, 2], [1.0, 2.0, 3.0, 4.0]), arr("float32", [], [10.0])])
    fx.add("add_f32_0d_0d", "add", [arr("float32", [], [1.5]), arr("float32", [], [2.25])])
    fx.add("add_f32_broadcast_size1_to_0", "add",
           [arr("float32", [0, 3], []), arr("float32", [1, 3], [1.0, 2.0, 3.0])])
    fx.add("add_f32_empty", "add", [arr("float32", [0], []), arr("float32", [0], [])])
    fx.add("add_shape_mismatch_error", "add",
           [arr("float32", [2, 3], [0.0] * 6), arr("float32", [4], [0.0] * 4)])
    fx.add("multiply_shape_mismatch_error", "multiply",
           [arr("float32", [2, 3], [0.0] * 6), arr("float32", [3, 2], [0.0] * 6)])

    # signs for remainder / floor_divide, ints and floats
    na = [7, -7, 7, -7, 6, -6, 0, 1]
    nb = [3, 3, -3, -3, 3, -3, 5, -5]
    for op in ["remainder", "floor_divide", "divide"]:
        fx.add(f"{op}_i32_signs", op, [arr("int32", [8], na), arr("int32", [8], nb)])
        fx.add(f"{op}_f32_signs", op,
               [arr("float32", [8], [7.5, -7.5, 7.5, -7.5, 6.0, -6.0, 0.0, 1.0]),
                arr("float32", [8], [2.0, 2.0, -2.0, -2.0, 3.0, -3.0, 5.0, -5.0])])
    fx.add("remainder_f32_by_zero", "remainder",
           [arr("float32", [3], [1.0, -1.0, 0.0]), arr("float32", [3], [0.0, 0.0, 0.0])])
    fx.add("floor_divide_f32_by_zero", "floor_divide",
           [arr("float32", [3], [1.0, -1.0, 0.0]), arr("float32", [3], [0.0, 0.0, 0.0])])
    fx.add("divide_f32_by_zero", "divide",
           [arr("float32", [3], [1.0, -1.0, 0.0]), arr("float32", [3], [0.0, 0.0, 0.0])])
    fx.add("divide_i32_by_zero", "divide",
           [arr("int32", [3], [1, -1, 0]), arr("int32", [3], [0, 0, 0])])
    fx.add("divide_u8_u8", "divide", [arr("uint8", [3], [7, 200, 1]), arr("uint8", [3], [2, 3, 4])])
    fx.add("floor_divide_u8_u8", "floor_divide",
           [arr("uint8", [3], [7, 200, 1]), arr("uint8", [3], [2, 3, 4])])
    fx.add("remainder_u32_u32", "remainder",
           [arr("uint32", [3], [7, 200, 1]), arr("uint32", [3], [2, 3, 4])])
    fx.add("remainder_f32_large_quotient", "remainder",
           [arr("float32", [3], [1e7 + 1, 5.5, 4.5]), arr("float32", [3], [3.0, 2.0, 3.0])])
    fx.add("power_i32_negative_exponent", "power",
           [arr("int32", [4], [2, 3, -2, 1]), arr("int32", [4], [-1, 2, 3, -4])])
    fx.add("power_f32_neg_base_fractional", "power",
           [arr("float32", [3], [-2.0, -8.0, 0.0]), arr("float32", [3], [0.5, 3.0, 0.0])])
    fx.add("add_i32_overflow_wraps", "add",
           [arr("int32", [2], [2147483647, -2147483648]), arr("int32", [2], [1, -1])])
    fx.add("add_u8_overflow_wraps", "add", [arr("uint8", [2], [250, 3]), arr("uint8", [2], [10, 4])])
    fx.add("subtract_u8_underflow_wraps", "subtract",
           [arr("uint8", [2], [3, 0]), arr("uint8", [2], [5, 1])])
    # NaN propagation / signed zeros
    fx.add("maximum_f32_nan", "maximum",
           [arr("float32", [4], [NAN, 1.0, NAN, -0.0]), arr("float32", [4], [1.0, NAN, NAN, 0.0])])
    fx.add("minimum_f32_nan", "minimum",
           [arr("float32", [4], [NAN, 1.0, NAN, -0.0]), arr("float32", [4], [1.0, NAN, NAN, 0.0])])
    fx.add("logaddexp_f32_inf", "logaddexp",
           [arr("float32", [4], [-INF, -INF, INF, 1.0]), arr("float32", [4], [-INF, 2.0, INF, NAN])])
    fx.add("add_f32_inf_nan", "add",
           [arr("float32", [3], [INF, INF, NAN]), arr("float32", [3], [-INF, 1.0, 1.0])])
    # mixed dtypes
    fx.add("add_i32_f32", "add", [arr("int32", [3], [1, 2, 3]), arr("float32", [3], [0.5, 0.25, -1.0])])
    fx.add("multiply_u8_i8", "multiply", [arr("uint8", [3], [200, 2, 3]), arr("int8", [3], [-1, 100, -128])])
    fx.add("add_f16_f32", "add", [arr("float16", [2], [0.1, 1000.0]), arr("float32", [2], [0.2, 0.3])])
    fx.add("add_bf16_f16", "add", [arr("bfloat16", [2], [0.1, 3.0]), arr("float16", [2], [0.2, 0.3])])
    fx.add("divide_f16", "divide", [arr("float16", [3], [1.0, 2.0, 3.0]), arr("float16", [3], [3.0, 3.0, 7.0])])
    fx.add("divide_bf16", "divide", [arr("bfloat16", [3], [1.0, 2.0, 3.0]), arr("bfloat16", [3], [3.0, 3.0, 7.0])])
    fx.add("divide_f64", "divide", [arr("float64", [2], [1.0, 2.0]), arr("float64", [2], [3.0, 7.0])])
    fx.add("add_f64_i64", "add", [arr("float64", [2], [1.5, 2.0]), arr("int64", [2], [3, 2**40])])
    fx.add("logical_and_bool", "logical_and",
           [arr("bool", [4], [True, True, False, False]), arr("bool", [4], [True, False, True, False])])
    fx.add("logical_or_bool", "logical_or",
           [arr("bool", [4], [True, True, False, False]), arr("bool", [4], [True, False, True, False])])
    fx.add("logical_and_i32_truthiness", "logical_and",
           [arr("int32", [3], [0, 2, -1]), arr("int32", [3], [5, 0, 3])])
    fx.add("add_bool_bool", "add", [arr("bool", [4], [True, True, False, False]),
                                    arr("bool", [4], [True, False, True, False])])
    fx.add("multiply_bool_bool", "multiply", [arr("bool", [4], [True, True, False, False]),
                                              arr("bool", [4], [True, False, True, False])])
    fx.add("subtract_bool_bool", "subtract", [arr("bool", [4], [True, True, False, False]),
                                              arr("bool", [4], [True, False, True, False])])
    fx.add("divide_bool_bool", "divide", [arr("bool", [2], [True, False]), arr("bool", [2], [True, True])])
    return fx


# ----------------------------------------------------------------------------
# compare.json


def make_compare():
    fx = Fixture("compare.json")
    ops = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]
    a = [1.0, 2.0, NAN, -0.0, INF, 3.0]
    b = [1.0, 3.0, NAN, 0.0, INF, 2.0]
    for op in ops:
        fx.add(f"{op}_f32", op, [arr("float32", [6], a), arr("float32", [6], b)])
        fx.add(f"{op}_i32_broadcast", op,
               [arr("int32", [2, 3], [1, 5, 3, 4, 2, 6]), arr("int32", [3], [3, 3, 3])])
        fx.add(f"{op}_i32_f32", op, [arr("int32", [3], [1, 2, 3]), arr("float32", [3], [1.5, 2.0, 2.5])])
        fx.add(f"{op}_u32_i32", op, [arr("uint32", [2], [1, 4000000000]), arr("int32", [2], [-1, 5])])
    fx.add("equal_bool", "equal", [arr("bool", [3], [True, False, True]), arr("bool", [3], [True, True, False])])
    fx.add("less_bool", "less", [arr("bool", [3], [True, False, False]), arr("bool", [3], [True, True, False])])
    fx.add("equal_f16_f32", "equal", [arr("float16", [2], [0.1, 0.5]), arr("float32", [2], [0.1, 0.5])])
    fx.add("equal_empty", "equal", [arr("float32", [0], []), arr("float32", [0], [])])
    fx.add("less_shape_mismatch_error", "less",
           [arr("float32", [3], [0.0] * 3), arr("float32", [2], [0.0] * 2)])

    cond = [True, False, True, False, False, True]
    fx.add("where_f32", "where", [arr("bool", [2, 3], cond), arr("float32", [2, 3], rnd("wx", [6])),
                                   arr("float32", [2, 3], rnd("wy", [6]))])
    fx.add("where_broadcast", "where", [arr("bool", [2, 1], [True, False]), arr("float32", [3], [1.0, 2.0, 3.0]),
                                         arr("float32", [], [-1.0])])
    fx.add("where_mixed_i32_f32", "where", [arr("bool", [3], [True, False, True]), arr("int32", [3], [1, 2, 3]),
                                             arr("float32", [3], [0.5, 0.5, 0.5])])
    fx.add("where_cond_f32", "where", [arr("float32", [3], [0.0, 2.0, NAN]), arr("int32", [3], [1, 2, 3]),
                                        arr("int32", [3], [-1, -2, -3])])
    fx.add("where_i32_i32", "where", [arr("bool", [4], [True, False, True, False]),
                                       arr("int32", [4], [1, 2, 3, 4]), arr("int32", [4], [-1, -2, -3, -4])])

    x = rnd("clipx", [2, 4], -5, 5)
    fx.add("clip_f32_both", "clip", [arr("float32", [2, 4], x)], {"a_min": -1.5, "a_max": 2.0})
    fx.add("clip_f32_min_only", "clip", [arr("float32", [2, 4], x)], {"a_min": 0.0, "a_max": None})
    fx.add("clip_f32_max_only", "clip", [arr("float32", [2, 4], x)], {"a_min": None, "a_max": 1.0})
    fx.add("clip_f32_nan", "clip", [arr("float32", [3], [NAN, -9.0, 9.0])], {"a_min": -1.0, "a_max": 1.0})
    fx.add("clip_i32_int_bounds", "clip", [arr("int32", [5], [-7, -1, 0, 4, 9])], {"a_min": -2, "a_max": 5})
    fx.add("clip_i32_float_bounds", "clip", [arr("int32", [5], [-7, -1, 0, 4, 9])], {"a_min": -2.5, "a_max": 5.5})
    fx.add("clip_u8", "clip", [arr("uint8", [4], [0, 10, 100, 250])], {"a_min": 5, "a_max": 200})
    fx.add("clip_f16", "clip", [arr("float16", [3], [0.1, 0.7, 2.0])], {"a_min": 0.2, "a_max": 1.0})
    return fx


# ----------------------------------------------------------------------------
# reduce.json


def make_reduce():
    fx = Fixture("reduce.json")
    x = arr("float32", [2, 3, 4], rnd("red", [24], -2, 2))
    axes_variants = [("axis_none", None), ("axis0", 0), ("axis1", 1), ("axis_neg1", -1),
                     ("axis_neg2", -2), ("axes_0_2", [0, 2]), ("axes_neg1_0", [-1, 0])]
    for op in ["sum", "mean", "prod", "max", "min", "var", "std", "logsumexp", "all", "any"]:
        for tag, ax in axes_variants:
            fx.add(f"{op}_f32_{tag}", op, [x], {"axis": ax, "keepdims": False})
        fx.add(f"{op}_f32_axis1_keepdims", op, [x], {"axis": 1, "keepdims": True})
        fx.add(f"{op}_f32_axis_none_keepdims", op, [x], {"axis": None, "keepdims": True})
    for op in ["var", "std"]:
        fx.add(f"{op}_f32_ddof1", op, [x], {"axis": -1, "keepdims": False, "ddof": 1})
        fx.add(f"{op}_f32_ddof_eq_n", op, [arr("float32", [2, 2], [1.0, 2.0, 3.0, 5.0])],
               {"axis": 1, "keepdims": False, "ddof": 2})
    for op in ["argmax", "argmin"]:
        xd = arr("float32", [3, 4], distinct(op, [12]))
        for tag, ax in [("axis_none", None), ("axis0", 0), ("axis1", 1), ("axis_neg1", -1)]:
            fx.add(f"{op}_f32_{tag}", op, [xd], {"axis": ax, "keepdims": False})
        fx.add(f"{op}_f32_axis0_keepdims", op, [xd], {"axis": 0, "keepdims": True})
        fx.add(f"{op}_f32_ties_first", op, [arr("float32", [5], [1.0, 3.0, 3.0, -1.0, -1.0])],
               {"axis": 0, "keepdims": False})
        fx.add(f"{op}_i32", op, [arr("int32", [2, 3], [4, -1, 7, 0, 0, 2])], {"axis": 1, "keepdims": False})
        fx.add(f"{op}_f32_nan", op, [arr("float32", [4], [1.0, NAN, 5.0, -3.0])], {"axis": 0, "keepdims": False})
    # cumulative ops
    c = arr("float32", [2, 4], rnd("cum", [8], -2, 2, 1))
    for op in ["cumsum", "cumprod"]:
        for ax in [0, 1, -1]:
            for rev in [False, True]:
                for inc in [True, False]:
                    fx.add(f"{op}_f32_axis{ax}_rev{int(rev)}_inc{int(inc)}", op, [c],
                           {"axis": ax, "reverse": rev, "inclusive": inc})
        fx.add(f"{op}_i32", op, [arr("int32", [5], [1, 2, -3, 4, 2])],
               {"axis": 0, "reverse": False, "inclusive": True})
        fx.add(f"{op}_bool", op, [arr("bool", [4], [True, True, False, True])],
               {"axis": 0, "reverse": False, "inclusive": True})
        fx.add(f"{op}_u8", op, [arr("uint8", [4], [100, 100, 100, 2])],
               {"axis": 0, "reverse": False, "inclusive": True})
        fx.add(f"{op}_f16", op, [arr("float16", [4], [0.1, 0.2, 0.3, 0.4])],
               {"axis": 0, "reverse": False, "inclusive": True})
    # softmax
    s = arr("float32", [2, 3, 4], rnd("smx", [24], -3, 3))
    for tag, ax in [("axis_neg1", -1), ("axis0", 0), ("axis_none", None), ("axes_1_2", [1, 2])]:
        fx.add(f"softmax_f32_{tag}", "softmax", [s], {"axis": ax})
    fx.add("softmax_f32_inf", "softmax", [arr("float32", [2, 3], [-INF, 0.0, 1.0, -INF, -INF, 2.0])],
           {"axis": -1})
    fx.add("softmax_f32_large", "softmax", [arr("float32", [3], [1000.0, 1001.0, 999.0])], {"axis": -1})
    fx.add("softmax_f16", "softmax", [arr("float16", [4], [0.5, 1.0, -2.0, 3.0])], {"axis": -1})
    fx.add("softmax_i32", "softmax", [arr("int32", [3], [1, 2, 3])], {"axis": -1})

    # dtype behaviour of integer / bool / half reductions
    i = arr("int32", [3, 4], rint("ri", [12], -50, 50))
    for op in ["sum", "prod", "max", "min", "mean", "var", "all", "any", "logsumexp"]:
        fx.add(f"{op}_i32_axis0", op, [i], {"axis": 0, "keepdims": False})
    b = arr("bool", [2, 3], [True, False, True, True, True, False])
    for op in ["sum", "prod", "max", "min", "mean", "all", "any"]:
        fx.add(f"{op}_bool_axis_none", op, [b], {"axis": None, "keepdims": False})
    u = arr("uint8", [2, 3], [200, 100, 50, 255, 1, 2])
    for op in ["sum", "prod", "max", "min", "mean"]:
        fx.add(f"{op}_u8_axis1", op, [u], {"axis": 1, "keepdims": False})
    for dtype in ["int8", "int16", "uint16", "uint32", "int64", "uint64"]:
        fx.add(f"sum_{dtype}", "sum", [arr(dtype, [4], [1, 2, 3, 120])], {"axis": None, "keepdims": False})
    fx.add("sum_i32_overflow", "sum", [arr("int32", [2], [2147483647, 1])], {"axis": None, "keepdims": False})
    h = arr("float16", [4, 5], rnd("h16", [20], 0, 10, 2))
    for op in ["sum", "mean", "max", "prod", "var", "logsumexp"]:
        fx.add(f"{op}_f16_axis1", op, [h], {"axis": 1, "keepdims": False})
    fx.add("sum_f16_many", "sum", [arr("float16", [300], [0.1] * 300)], {"axis": None, "keepdims": False})
    fx.add("sum_bf16", "sum", [arr("bfloat16", [4, 5], rnd("b16", [20], 0, 10, 2))], {"axis": 0, "keepdims": False})
    fx.add("sum_f64", "sum", [arr("float64", [5], [0.1, 0.2, 0.3, 1e10, -1e10])], {"axis": None, "keepdims": False})
    fx.add("mean_f64", "mean", [arr("float64", [3], [0.1, 0.2, 0.4])], {"axis": None, "keepdims": False})
    fx.add("sum_i32_long_column", "sum", [gen_input("int32", [8192, 3], "mod5")], {"axis": 0, "keepdims": False})
    fx.add("sum_f32_long_column", "sum", [gen_input("float32", [8192, 3], "mod5")], {"axis": 0, "keepdims": False})
    fx.add("mean_f32_long_row", "mean", [gen_input("float32", [3, 8192], "mod5")], {"axis": 1, "keepdims": False})

    # empty reductions
    e = arr("float32", [0, 3], [])
    for op in ["sum", "prod", "mean", "max", "all", "any", "logsumexp"]:
        fx.add(f"{op}_f32_empty_axis0", op, [e], {"axis": 0, "keepdims": False})
    fx.add("sum_f32_empty_axis1", "sum", [e], {"axis": 1, "keepdims": False})
    fx.add("sum_f32_empty_all", "sum", [arr("float32", [0], [])], {"axis": None, "keepdims": False})
    fx.add("argmax_f32_empty_error", "argmax", [e], {"axis": 0, "keepdims": False})
    # NaN
    for op in ["max", "min", "sum", "logsumexp"]:
        fx.add(f"{op}_f32_nan", op, [arr("float32", [2, 3], [1.0, NAN, 3.0, -1.0, -2.0, INF])],
               {"axis": 1, "keepdims": False})
    fx.add("logsumexp_f32_neg_inf", "logsumexp", [arr("float32", [3], [-INF, -INF, -INF])],
           {"axis": None, "keepdims": False})
    fx.add("sum_0d", "sum", [arr("float32", [], [3.5])], {"axis": None, "keepdims": False})
    # errors
    fx.add("sum_axis_out_of_range_error", "sum", [x], {"axis": 3, "keepdims": False})
    fx.add("max_axis_out_of_range_neg_error", "max", [x], {"axis": -4, "keepdims": False})
    fx.add("sum_duplicate_axes_error", "sum", [x], {"axis": [0, -3], "keepdims": False})
    return fx


# ----------------------------------------------------------------------------
# shape.json


def make_shape():
    fx = Fixture("shape.json")
    a = arr("float32", [2, 3, 4], list(range(24)))
    ai = arr("int32", [2, 3, 4], list(range(24)))
    fx.add("reshape_6_4", "reshape", [a], {"shape": [6, 4]})
    fx.add("reshape_infer", "reshape", [a], {"shape": [4, -1]})
    fx.add("reshape_to_0d", "reshape", [arr("float32", [1, 1], [7.0])], {"shape": []})
    fx.add("reshape_from_0d", "reshape", [arr("float32", [], [7.0])], {"shape": [1, 1, 1]})
    fx.add("reshape_empty", "reshape", [arr("float32", [0, 4], [])], {"shape": [2, 0, 2]})
    fx.add("reshape_wrong_size_error", "reshape", [a], {"shape": [5, 5]})
    fx.add("reshape_two_infer_error", "reshape", [a], {"shape": [-1, -1]})
    fx.add("flatten_all", "flatten", [a], {"start_axis": 0, "end_axis": -1})
    fx.add("flatten_1_2", "flatten", [a], {"start_axis": 1, "end_axis": 2})
    fx.add("flatten_0_1", "flatten", [a], {"start_axis": 0, "end_axis": 1})
    fx.add("flatten_0d", "flatten", [arr("float32", [], [1.0])], {"start_axis": 0, "end_axis": -1})
    fx.add("transpose_default", "transpose", [a], {"axes": None})
    fx.add("transpose_1_0_2", "transpose", [a], {"axes": [1, 0, 2]})
    fx.add("transpose_neg", "transpose", [a], {"axes": [-1, 0, 1]})
    fx.add("transpose_bad_axes_error", "transpose", [a], {"axes": [0, 0, 1]})
    fx.add("swapaxes_0_2", "swapaxes", [ai], {"axis1": 0, "axis2": 2})
    fx.add("swapaxes_neg", "swapaxes", [ai], {"axis1": -1, "axis2": -2})
    fx.add("moveaxis_0_to_2", "moveaxis", [ai], {"source": 0, "destination": 2})
    fx.add("moveaxis_neg", "moveaxis", [ai], {"source": -1, "destination": 0})
    fx.add("expand_dims_0", "expand_dims", [a], {"axis": 0})
    fx.add("expand_dims_neg1", "expand_dims", [a], {"axis": -1})
    fx.add("expand_dims_list", "expand_dims", [a], {"axis": [0, 2]})
    fx.add("expand_dims_out_of_range_error", "expand_dims", [a], {"axis": 5})
    s = arr("float32", [1, 3, 1, 2], list(range(6)))
    fx.add("squeeze_all", "squeeze", [s], {"axis": None})
    fx.add("squeeze_0", "squeeze", [s], {"axis": 0})
    fx.add("squeeze_list", "squeeze", [s], {"axis": [0, -2]})
    fx.add("squeeze_non_unit_error", "squeeze", [s], {"axis": 1})
    fx.add("broadcast_to_row", "broadcast_to", [arr("float32", [3], [1.0, 2.0, 3.0])], {"shape": [2, 3]})
    fx.add("broadcast_to_col", "broadcast_to", [arr("int32", [2, 1], [1, 2])], {"shape": [3, 2, 4]})
    fx.add("broadcast_to_scalar", "broadcast_to", [arr("float32", [], [5.0])], {"shape": [2, 2]})
    fx.add("broadcast_to_error", "broadcast_to", [arr("float32", [3], [1.0, 2.0, 3.0])], {"shape": [2, 4]})

    c1 = arr("float32", [2, 3], list(range(6)))
    c2 = arr("float32", [1, 3], [10.0, 11.0, 12.0])
    c3 = arr("float32", [2, 2], [20.0, 21.0, 22.0, 23.0])
    fx.add("concatenate_axis0", "concatenate", [c1, c2], {"axis": 0})
    fx.add("concatenate_axis1", "concatenate", [c1, c3], {"axis": 1})
    fx.add("concatenate_axis_neg1", "concatenate", [c1, c3, c3], {"axis": -1})
    fx.add("concatenate_mixed_dtype", "concatenate",
           [arr("int32", [2], [1, 2]), arr("float32", [2], [0.5, 1.5])], {"axis": 0})
    fx.add("concatenate_shape_error", "concatenate", [c1, c3], {"axis": 0})
    fx.add("stack_axis0", "stack", [c1, c1], {"axis": 0})
    fx.add("stack_axis1", "stack", [c1, c1, c1], {"axis": 1})
    fx.add("stack_axis_neg1", "stack", [c1, c1], {"axis": -1})
    fx.add("stack_shape_error", "stack", [c1, c2], {"axis": 0})
    sp = arr("int32", [6, 4], list(range(24)))
    fx.add("split_sections_axis0", "split", [sp], {"indices_or_sections": 3, "axis": 0})
    fx.add("split_sections_axis1", "split", [sp], {"indices_or_sections": 2, "axis": 1})
    fx.add("split_indices", "split", [sp], {"indices_or_sections": [1, 4], "axis": 0})
    fx.add("split_indices_neg_axis", "split", [sp], {"indices_or_sections": [1, 1, 3], "axis": -1})
    fx.add("split_indices_past_end", "split", [sp], {"indices_or_sections": [2, 10], "axis": 0})
    fx.add("split_uneven_error", "split", [sp], {"indices_or_sections": 4, "axis": 0})

    r = arr("int32", [4, 5], list(range(20)))
    slices = [
        ("slice_basic", [1, 0], [3, 5], [1, 2]),
        ("slice_neg_stride", [None, None], [None, None], [-1, -1]),
        ("slice_neg_stride_bounds", [3, 4], [0, None], [-2, -3]),
        ("slice_negative_start", [-2, -3], [None, -1], [1, 1]),
        ("slice_out_of_range_clamped", [-10, 2], [10, 100], [1, 1]),
        ("slice_empty", [3, 0], [1, 5], [1, 1]),
        ("slice_one_axis", [1], [3], [1]),
    ]
    for name, st, sp_, stride in slices:
        fx.add(name, "slice", [r], {"start": st, "stop": sp_, "strides": stride})
    fx.add("slice_3d_neg", "slice", [a], {"start": [None, 2, None], "stop": [None, 0, None],
                                          "strides": [-1, -1, 3]})

    # slice_update: MLX's `b[idx] = update` on a copy of the first input (the same
    # slice_update primitive); kwargs as for slice.
    updates = [
        ("slice_update_basic", [1, 0], [3, 5], [1, 2], [2, 3]),
        ("slice_update_neg_stride", [None, None], [None, None], [-1, -2], [4, 3]),
        ("slice_update_broadcast_row", [0, 1], [4, 3], [1, 1], [1, 2]),
        ("slice_update_scalar_update", [2], [3], [1], []),
        ("slice_update_whole", [None], [None], [1], [4, 5]),
        ("slice_update_clamped", [-10, 3], [10, 100], [1, 1], [4, 2]),
        ("slice_update_empty", [3, 0], [1, 5], [1, 1], [0, 5]),
    ]
    for name, st, sp_, stride, ushape in updates:
        u = arr("int32", ushape, [100 + k for k in range(int(np.prod(ushape)))])
        fx.add(name, "slice_update", [r, u], {"start": st, "stop": sp_, "strides": stride})
    fx.add("slice_update_cast_float_into_int", "slice_update",
           [r, arr("float32", [2], [1.75, -2.5])],
           {"start": [1, 1], "stop": [2, 3], "strides": [1, 1]})
    fx.add("slice_update_bad_shape_error", "slice_update", [r, arr("int32", [3], [1, 2, 3])],
           {"start": [0, 0], "stop": [1, 2], "strides": [1, 1]})

    p = arr("float32", [2, 3], list(range(6)))
    fx.add("pad_2d", "pad", [p], {"pad_width": [[1, 0], [2, 1]], "constant_value": 0})
    fx.add("pad_value", "pad", [p], {"pad_width": [[0, 1], [1, 1]], "constant_value": -1.5})
    fx.add("pad_i32", "pad", [arr("int32", [3], [1, 2, 3])], {"pad_width": [[2, 2]], "constant_value": 9})
    fx.add("repeat_axis0", "repeat", [p], {"repeats": 2, "axis": 0})
    fx.add("repeat_axis1", "repeat", [p], {"repeats": 3, "axis": 1})
    fx.add("repeat_flat", "repeat", [p], {"repeats": 2, "axis": None})
    fx.add("tile_2", "tile", [p], {"reps": [2]})
    fx.add("tile_2_1", "tile", [p], {"reps": [2, 1]})
    fx.add("tile_more_dims", "tile", [arr("int32", [2], [1, 2])], {"reps": [2, 1, 3]})
    t = arr("float32", [3, 4], list(range(1, 13)))
    for k in [0, 1, -1, 5]:
        fx.add(f"tril_k{k}", "tril", [t], {"k": k})
        fx.add(f"triu_k{k}", "triu", [t], {"k": k})

    # astype
    f = arr("float32", [8], [-2.7, -1.5, -0.5, 0.0, 0.5, 1.5, 2.7, 100.9])
    for d in ["int32", "int8", "int64", "uint32", "bool", "float16", "bfloat16", "float64"]:
        fx.add(f"astype_f32_to_{d}", "astype", [f], {"dtype": d})
    fx.add("astype_neg_f32_to_u8", "astype", [arr("float32", [4], [-1.0, -1.5, -3.0, 300.0])],
           {"dtype": "uint8"})
    fx.add("astype_neg_f32_to_u16", "astype", [arr("float32", [2], [-1.0, 70000.0])], {"dtype": "uint16"})
    fx.add("astype_f32_to_f16_rounding", "astype",
           [arr("float32", [9], [1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11, 65504.0, 65520.0, 1e5, 1e-8, 3e-5,
                                 0.1, -0.0])], {"dtype": "float16"})
    fx.add("astype_f32_to_bf16_rounding", "astype",
           [arr("float32", [6], [1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 0.1, 3.0e38, 1e-40, 1.0 + 2 ** -8 + 2 ** -20])],
           {"dtype": "bfloat16"})
    fx.add("astype_f32_nonfinite_to_f16", "astype", [arr("float32", [3], [NAN, INF, -INF])], {"dtype": "float16"})
    fx.add("astype_i32_to_bool", "astype", [arr("int32", [4], [0, 1, -3, 256])], {"dtype": "bool"})
    fx.add("astype_f32_to_bool_nan", "astype", [arr("float32", [3], [0.0, -0.0, NAN])], {"dtype": "bool"})
    fx.add("astype_bool_to_f32", "astype", [arr("bool", [2], [True, False])], {"dtype": "float32"})
    fx.add("astype_bool_to_i32", "astype", [arr("bool", [2], [True, False])], {"dtype": "int32"})
    fx.add("astype_i32_to_u8_wrap", "astype", [arr("int32", [4], [300, -1, 255, 256])], {"dtype": "uint8"})
    fx.add("astype_i32_to_i8_wrap", "astype", [arr("int32", [3], [200, -200, 127])], {"dtype": "int8"})
    fx.add("astype_i64_to_f32", "astype", [arr("int64", [2], [2 ** 40 + 1, -(2 ** 24) - 1])], {"dtype": "float32"})
    fx.add("astype_u32_to_f32", "astype", [arr("uint32", [2], [4294967295, 16777217])], {"dtype": "float32"})
    fx.add("astype_u64_to_f64", "astype", [arr("uint64", [1], [2 ** 63 + 2 ** 11])], {"dtype": "float64"})
    fx.add("astype_f64_to_f32", "astype", [arr("float64", [2], [0.1, 1e300])], {"dtype": "float32"})
    fx.add("astype_f16_to_i32", "astype", [arr("float16", [2], [-3.75, 2.5])], {"dtype": "int32"})
    fx.add("astype_u8_to_i8", "astype", [arr("uint8", [3], [0, 128, 255])], {"dtype": "int8"})
    return fx


# ----------------------------------------------------------------------------
# index.json


def make_index():
    fx = Fixture("index.json")
    a = arr("float32", [3, 4], list(range(12)))
    fx.add("take_flat", "take", [a, arr("int32", [4], [0, 5, 11, 3])], {"axis": None})
    fx.add("take_flat_negative", "take", [a, arr("int32", [3], [-1, -12, 2])], {"axis": None})
    fx.add("take_axis0", "take", [a, arr("int32", [4], [2, 0, 2, 1])], {"axis": 0})
    fx.add("take_axis1", "take", [a, arr("int32", [2], [3, 1])], {"axis": 1})
    fx.add("take_axis_neg1_negative_idx", "take", [a, arr("int32", [3], [-1, -4, 0])], {"axis": -1})
    fx.add("take_axis0_2d_indices", "take", [a, arr("int32", [2, 2], [0, 1, 2, 2])], {"axis": 0})
    fx.add("take_axis1_0d_index", "take", [a, arr("int32", [], [2])], {"axis": 1})
    fx.add("take_axis0_empty_indices", "take", [a, arr("int32", [0], [])], {"axis": 0})
    fx.add("take_i32_array_u32_idx", "take", [arr("int32", [5], [10, 20, 30, 40, 50]),
                                              arr("uint32", [3], [4, 0, 2])], {"axis": 0})
    fx.add("take_axis_out_of_range_error", "take", [a, arr("int32", [1], [0])], {"axis": 2})
    fx.add("take_float_indices_error", "take", [a, arr("float32", [1], [0.0])], {"axis": 0})
    b = arr("float32", [2, 3], [5.0, 1.0, 3.0, 2.0, 6.0, 4.0])
    fx.add("take_along_axis_1", "take_along_axis", [b, arr("int32", [2, 2], [2, 0, 1, 1])], {"axis": 1})
    fx.add("take_along_axis_0", "take_along_axis", [b, arr("int32", [1, 3], [1, 0, 1])], {"axis": 0})
    fx.add("take_along_axis_neg", "take_along_axis", [b, arr("int32", [2, 3], [-1, -2, -3, 0, 0, 0])],
           {"axis": -1})
    fx.add("take_along_axis_broadcast", "take_along_axis", [arr("int32", [2, 3, 2], list(range(12))),
                                                            arr("int32", [1, 2, 2], [2, 0, 1, 1])], {"axis": 1})
    fx.add("take_along_axis_ndim_error", "take_along_axis", [b, arr("int32", [2], [0, 1])], {"axis": 1})
    return fx


# ----------------------------------------------------------------------------
# matmul.json


def make_matmul():
    fx = Fixture("matmul.json")

    def m(name, dtype, sa, sb, lo=-2, hi=2):
        return (arr(dtype, sa, rnd(name + "a", sa, lo, hi)), arr(dtype, sb, rnd(name + "b", sb, lo, hi)))

    fx.add("matmul_f32_2x3_3x4", "matmul", list(m("mm1", "float32", [2, 3], [3, 4])))
    fx.add("matmul_f32_batched", "matmul", list(m("mm2", "float32", [3, 2, 4], [3, 4, 5])))
    fx.add("matmul_f32_broadcast_batch", "matmul", list(m("mm3", "float32", [2, 1, 3, 4], [5, 4, 2])))
    fx.add("matmul_f32_batch_2d", "matmul", list(m("mm4", "float32", [2, 3, 4], [4, 2])))
    fx.add("matmul_f32_vec_mat", "matmul", list(m("mm5", "float32", [3], [3, 4])))
    fx.add("matmul_f32_mat_vec", "matmul", list(m("mm6", "float32", [2, 3], [3])))
    fx.add("matmul_f32_vec_vec", "matmul", list(m("mm7", "float32", [4], [4])))
    fx.add("matmul_f32_vec_batched", "matmul", list(m("mm8", "float32", [3], [2, 3, 2])))
    fx.add("matmul_f32_k0", "matmul", list(m("mm9", "float32", [2, 0], [0, 3])))
    fx.add("matmul_f32_m0", "matmul", list(m("mm10", "float32", [0, 3], [3, 2])))
    fx.add("matmul_f32_larger", "matmul", list(m("mm11", "float32", [9, 17], [17, 7])))
    fx.add("matmul_f16", "matmul", list(m("mm12", "float16", [3, 5], [5, 2])))
    fx.add("matmul_bf16", "matmul", list(m("mm13", "bfloat16", [3, 5], [5, 2])))
    fx.add("matmul_f64", "matmul", list(m("mm14", "float64", [3, 5], [5, 2])))
    fx.add("matmul_f16_f32_mixed", "matmul", [arr("float16", [2, 2], [1.0, 2.0, 3.0, 4.0]),
                                             arr("float32", [2, 1], [0.5, 0.25])])
    fx.add("matmul_i32_error", "matmul", [arr("int32", [2, 2], [1, 2, 3, 4]), arr("int32", [2, 2], [1, 0, 0, 1])])
    fx.add("matmul_inner_mismatch_error", "matmul", list(m("mm15", "float32", [2, 3], [4, 2])))
    fx.add("matmul_0d_error", "matmul", [arr("float32", [], [1.0]), arr("float32", [], [2.0])])
    fx.add("matmul_batch_mismatch_error", "matmul", list(m("mm16", "float32", [2, 2, 3], [3, 3, 2])))

    def addmm(name, sc, sa, sb, alpha, beta, dtype="float32"):
        c = arr(dtype, sc, rnd(name + "c", sc))
        a, b = m(name, dtype, sa, sb)
        fx.add(name, "addmm", [c, a, b], {"alpha": alpha, "beta": beta})

    addmm("addmm_f32_default", [2, 4], [2, 3], [3, 4], 1.0, 1.0)
    addmm("addmm_f32_alpha_beta", [2, 4], [2, 3], [3, 4], 0.5, 2.0)
    addmm("addmm_f32_broadcast_c", [4], [2, 3], [3, 4], 1.5, -1.0)
    addmm("addmm_f32_batched", [2, 2, 4], [2, 2, 3], [3, 4], 1.0, 0.5)
    addmm("addmm_f32_beta0", [2, 4], [2, 3], [3, 4], 1.0, 0.0)
    addmm("addmm_f16", [2, 2], [2, 3], [3, 2], 1.0, 1.0, "float16")
    fx.add("addmm_f32_nan_c_beta0", "addmm",
           [arr("float32", [1, 1], [NAN]), arr("float32", [1, 1], [2.0]), arr("float32", [1, 1], [3.0])],
           {"alpha": 1.0, "beta": 0.0})
    return fx


# ----------------------------------------------------------------------------
# sort.json


def make_sort():
    fx = Fixture("sort.json")
    x = arr("float32", [3, 5], distinct("sortx", [15]))
    for op in ["sort", "argsort"]:
        for tag, ax in [("axis_neg1", -1), ("axis0", 0), ("axis1", 1), ("axis_none", None)]:
            fx.add(f"{op}_f32_{tag}", op, [x], {"axis": ax})
        fx.add(f"{op}_i32", op, [arr("int32", [6], [5, -3, 9, 0, 2, -8])], {"axis": -1})
        fx.add(f"{op}_u8", op, [arr("uint8", [5], [200, 3, 255, 0, 17])], {"axis": 0})
        fx.add(f"{op}_f16", op, [arr("float16", [4], [0.5, -1.25, 3.0, 0.1])], {"axis": 0})
        fx.add(f"{op}_3d_axis1", op, [arr("float32", [2, 3, 2], distinct(op + "3d", [12]))], {"axis": 1})
        fx.add(f"{op}_0d", op, [arr("float32", [], [1.0])],
               {"axis": -1})
        fx.add(f"{op}_empty", op, [arr("float32", [0], [])], {"axis": 0})
        fx.add(f"{op}_axis_error", op, [x], {"axis": 2})
        fx.add(f"{op}_long", op, [arr("float32", [40], distinct(op + "long", [40]))], {"axis": 0})
    fx.add("sort_f32_nan_inf", "sort", [arr("float32", [6], [3.0, NAN, -INF, 1.0, INF, -0.5])], {"axis": 0})
    fx.add("sort_i32_ties", "sort", [arr("int32", [6], [2, 1, 2, 1, 0, 2])], {"axis": 0})
    fx.add("sort_bool", "sort", [arr("bool", [4], [True, False, True, False])], {"axis": 0})
    fx.add("argsort_i32_ties", "argsort", [arr("int32", [6], [2, 1, 2, 1, 0, 2])], {"axis": 0})
    un = {"unordered": True}
    fx.add("topk_f32_1d", "topk", [arr("float32", [8], distinct("tk1", [8]))], {"k": 3, "axis": -1}, extra=un)
    fx.add("topk_f32_2d_axis_neg1", "topk", [x], {"k": 2, "axis": -1}, extra=un)
    fx.add("topk_f32_2d_axis0", "topk", [x], {"k": 2, "axis": 0}, extra=un)
    fx.add("topk_i32", "topk", [arr("int32", [6], [5, -3, 9, 0, 2, -8])], {"k": 4, "axis": 0}, extra=un)
    fx.add("topk_k_all", "topk", [arr("float32", [4], [0.5, -1.0, 2.0, 1.5])], {"k": 4, "axis": 0}, extra=un)
    fx.add("topk_k1", "topk", [x], {"k": 1, "axis": 1}, extra=un)
    fx.add("topk_k_too_large_error", "topk", [arr("float32", [3], [1.0, 2.0, 3.0])], {"k": 4, "axis": 0},
           extra=un)
    return fx


# ----------------------------------------------------------------------------
# promotion.json


def make_promotion():
    fx = Fixture("promotion.json")
    names = list(DTYPES)
    for a in names:
        for b in names:
            fx.add(f"add_{a}_{b}", "add", [arr(a, [1], [1]), arr(b, [1], [1])])
    scalar_cases = [
        ("int32", [3], 2.5), ("float16", [0.5], 2.5), ("bfloat16", [0.5], 1.1),
        ("float16", [1.0], 3), ("uint8", [250], 3), ("uint8", [250], 10),
        ("int8", [-5], 3), ("int8", [120], 10), ("bool", [True], 3),
        ("bool", [True], 2.5), ("bool", [True], True), ("int32", [7], True),
        ("float32", [1.0], 2), ("uint32", [5], -1), ("int64", [5], 2),
        ("float64", [0.5], 0.1), ("uint64", [5], 3), ("int16", [1000], 0.5),
    ]
    for dtype, data, s in scalar_cases:
        tag = type(s).__name__ + str(s).replace(".", "p").replace("-", "m")
        fx.add(f"add_{dtype}_pyscalar_{tag}", "add", [arr(dtype, [1], data), scalar(s)])
    fx.add("add_pyscalar_first_f16", "add", [scalar(1.5), arr("float16", [1], [0.5])])
    fx.add("multiply_i32_pyfloat", "multiply", [arr("int32", [2], [3, -3]), scalar(0.5)])
    fx.add("divide_u8_pyint", "divide", [arr("uint8", [2], [7, 9]), scalar(2)])
    fx.add("subtract_u8_pyint_wrap", "subtract", [arr("uint8", [2], [1, 9]), scalar(2)])
    fx.add("greater_i32_pyfloat", "greater", [arr("int32", [3], [1, 2, 3]), scalar(1.5)])
    fx.add("maximum_f16_pyint", "maximum", [arr("float16", [2], [0.5, 7.0]), scalar(3)])
    return fx


# ----------------------------------------------------------------------------
# creation.json


def make_creation():
    fx = Fixture("creation.json")
    for name, kw in [
        ("arange_int", {"start": 0, "stop": 10, "step": 1, "dtype": None}),
        ("arange_int_step3", {"start": 0, "stop": 10, "step": 3, "dtype": None}),
        ("arange_negative_step", {"start": 10, "stop": 0, "step": -3, "dtype": None}),
        ("arange_float", {"start": 0.5, "stop": 3.0, "step": 0.5, "dtype": None}),
        ("arange_float_tenths", {"start": 0.0, "stop": 1.0, "step": 0.1, "dtype": None}),
        ("arange_float_step_int_bounds", {"start": 0, "stop": 2, "step": 0.3, "dtype": None}),
        ("arange_f16", {"start": 0, "stop": 5, "step": 1, "dtype": "float16"}),
        ("arange_f64", {"start": 0.0, "stop": 1.0, "step": 0.25, "dtype": "float64"}),
        ("arange_u8", {"start": 0, "stop": 6, "step": 2, "dtype": "uint8"}),
        ("arange_int_dtype_float_step", {"start": 0, "stop": 5, "step": 1.5, "dtype": "int32"}),
        ("arange_empty", {"start": 5, "stop": 0, "step": 1, "dtype": None}),
        ("arange_zero_step_error", {"start": 0, "stop": 5, "step": 0, "dtype": None}),
        ("arange_bool_error", {"start": 0, "stop": 5, "step": 1, "dtype": "bool"}),
    ]:
        fx.add(name, "arange", [], kw)
    for name, kw in [
        ("linspace_basic", {"start": 0.0, "stop": 1.0, "num": 5, "dtype": None}),
        ("linspace_int_args", {"start": 0, "stop": 10, "num": 4, "dtype": None}),
        ("linspace_reverse", {"start": 2.0, "stop": -1.0, "num": 7, "dtype": None}),
        ("linspace_num1", {"start": 3.0, "stop": 9.0, "num": 1, "dtype": None}),
        ("linspace_num0", {"start": 3.0, "stop": 9.0, "num": 0, "dtype": None}),
        ("linspace_i32", {"start": 0, "stop": 10, "num": 4, "dtype": "int32"}),
        ("linspace_f16", {"start": 0.0, "stop": 1.0, "num": 3, "dtype": "float16"}),
        ("linspace_tenths", {"start": 0.0, "stop": 1.0, "num": 11, "dtype": None}),
        ("linspace_negative_num_error", {"start": 0.0, "stop": 1.0, "num": -1, "dtype": None}),
    ]:
        fx.add(name, "linspace", [], kw)
    for name, kw in [
        ("eye_3", {"n": 3, "m": None, "k": 0, "dtype": None}),
        ("eye_3x4_k1", {"n": 3, "m": 4, "k": 1, "dtype": None}),
        ("eye_4x3_km1", {"n": 4, "m": 3, "k": -1, "dtype": "int32"}),
        ("eye_2_k5", {"n": 2, "m": None, "k": 5, "dtype": None}),
        ("eye_bool", {"n": 2, "m": None, "k": 0, "dtype": "bool"}),
    ]:
        fx.add(name, "eye", [], kw)
    for name, kw in [
        ("full_float", {"shape": [2, 3], "value": 1.5, "dtype": None}),
        ("full_int", {"shape": [3], "value": 7, "dtype": None}),
        ("full_bool", {"shape": [2], "value": True, "dtype": None}),
        ("full_int_as_f16", {"shape": [2], "value": 3, "dtype": "float16"}),
        ("full_float_as_i32", {"shape": [2], "value": 2.7, "dtype": "int32"}),
        ("full_scalar_shape", {"shape": [], "value": 4.0, "dtype": None}),
        ("full_empty", {"shape": [0, 2], "value": 1.0, "dtype": None}),
        ("full_negative_as_u8", {"shape": [2], "value": -1, "dtype": "uint8"}),
    ]:
        fx.add(name, "full", [], kw)
    for op in ["zeros", "ones"]:
        fx.add(f"{op}_default", op, [], {"shape": [2, 3], "dtype": None})
        fx.add(f"{op}_i32", op, [], {"shape": [4], "dtype": "int32"})
        fx.add(f"{op}_bool", op, [], {"shape": [2], "dtype": "bool"})
        fx.add(f"{op}_bf16", op, [], {"shape": [2], "dtype": "bfloat16"})
        fx.add(f"{op}_0d", op, [], {"shape": [], "dtype": "float32"})
        fx.add(f"{op}_negative_shape_error", op, [], {"shape": [-1], "dtype": None})
    return fx


# ----------------------------------------------------------------------------
# random.json


BITS_CPP = r"""
#include "mlx/mlx.h"
#include <iostream>
namespace mx = mlx::core;
// stdin: lines "k0 k1 n width"; stdout: the output elements, comma separated
int main() {
  mx::set_default_device(mx::Device::cpu);
  uint32_t k0, k1; int n, w;
  while (std::cin >> k0 >> k1 >> n >> w) {
    auto b = mx::random::bits({n}, w, mx::array({k0, k1}));
    b = mx::astype(b, mx::uint32);
    b.eval();
    auto p = b.data<uint32_t>();
    for (int i = 0; i < n; ++i) std::cout << p[i] << (i + 1 < n ? "," : "");
    std::cout << "\n";
  }
}
"""


def mlx_bits_cpp(requests):
    """Run mx::random::bits through the wheel's C++ library (not exposed in
    Python). requests: list of (key, n, width). Returns lists or None."""
    pkg = os.path.dirname(mx.__file__) if getattr(mx, "__file__", None) else None
    if pkg is None or not os.path.isdir(os.path.join(pkg, "include")):
        import mlx
        pkg = list(mlx.__path__)[0]
    inc, lib = os.path.join(pkg, "include"), os.path.join(pkg, "lib")
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "bits.cpp"), os.path.join(tmp, "bits")
        with open(src, "w") as f:
            f.write(BITS_CPP)
        try:
            subprocess.run([cxx, "-std=c++20", "-O1", f"-I{inc}", src, f"-L{lib}", "-lmlx",
                            f"-Wl,-rpath,{lib}", "-o", exe], check=True, capture_output=True)
            inp = "".join(f"{k[0]} {k[1]} {n} {w}\n" for k, n, w in requests)
            out = subprocess.run([exe], input=inp, capture_output=True, text=True, check=True).stdout
        except (subprocess.CalledProcessError, OSError) as e:
            print(f"warning: could not build/run the C++ bits helper: {e}", file=sys.stderr)
            return None
    lines = out.split("\n")
    return [[int(v) for v in line.split(",")] if line else [] for line in lines[:len(requests)]]


def make_random():
    fx = Fixture("random.json")
    R = mx.random

    def draw(name, op, kwargs, fn, inputs=()):
        """kwargs must contain "seed" (seed() before the draw) or "key"."""
        def call(xs, kw):
            if kw.get("seed") is not None:
                R.seed(kw["seed"])
            key = mx.array(kw["key"], dtype=mx.uint32) if kw.get("key") is not None else None
            return fn(xs, key)
        fx.add(name, op, list(inputs), kwargs, call=call)

    logits = arr("float32", [2, 3], [0.1, 0.5, 1.2, 2.0, 0.0, -1.0])
    logits1 = arr("float32", [3], [0.1, 0.5, 1.2])
    base = {"seed": None, "key": None}
    for S in [0, 42]:
        s = dict(base, seed=S)
        draw(f"normal_seed{S}", "random.normal", dict(s, shape=[4], dtype="float32"),
             lambda xs, k: R.normal([4]))
        draw(f"uniform_seed{S}", "random.uniform", dict(s, shape=[3], low=0, high=1, dtype="float32"),
             lambda xs, k: R.uniform(shape=[3]))
        draw(f"uniform_range_seed{S}", "random.uniform",
             dict(s, shape=[2, 3], low=-2, high=3, dtype="float32"),
             lambda xs, k: R.uniform(low=-2, high=3, shape=[2, 3]))
        draw(f"randint_seed{S}", "random.randint", dict(s, shape=[6], low=0, high=10, dtype="int32"),
             lambda xs, k: R.randint(0, 10, [6]))
        draw(f"bernoulli_seed{S}", "random.bernoulli", dict(s, shape=[8], p=0.3),
             lambda xs, k: R.bernoulli(0.3, [8]))
        draw(f"truncated_normal_seed{S}", "random.truncated_normal",
             dict(s, shape=[5], lower=-1, upper=1, dtype="float32"),
             lambda xs, k: R.truncated_normal(-1, 1, [5]))
        draw(f"categorical_seed{S}", "random.categorical", dict(s, axis=-1),
             lambda xs, k: R.categorical(xs[0]), [logits])
        draw(f"permutation_seed{S}", "random.permutation", dict(s, x=6),
             lambda xs, k: R.permutation(6))
        draw(f"uniform_f16_seed{S}", "random.uniform", dict(s, shape=[5], low=0, high=1, dtype="float16"),
             lambda xs, k: R.uniform(shape=[5], dtype=mx.float16))
        draw(f"normal_bf16_seed{S}", "random.normal", dict(s, shape=[3], dtype="bfloat16"),
             lambda xs, k: R.normal([3], dtype=mx.bfloat16))
        # extras exercising the other recipes in docs/mlx-random-numbers.md
        draw(f"normal_f16_seed{S}", "random.normal", dict(s, shape=[4], dtype="float16"),
             lambda xs, k: R.normal([4], dtype=mx.float16))
        draw(f"normal_f64_seed{S}", "random.normal", dict(s, shape=[4], dtype="float64"),
             lambda xs, k: R.normal([4], dtype=mx.float64))
        draw(f"normal_loc_scale_seed{S}", "random.normal",
             dict(s, shape=[4], dtype="float32", loc=1.0, scale=2.0),
             lambda xs, k: R.normal([4], loc=1.0, scale=2.0))
        draw(f"uniform_bf16_seed{S}", "random.uniform", dict(s, shape=[5], low=0, high=1, dtype="bfloat16"),
             lambda xs, k: R.uniform(shape=[5], dtype=mx.bfloat16))
        draw(f"randint_negative_seed{S}", "random.randint",
             dict(s, shape=[2, 4], low=-5, high=5, dtype="int32"),
             lambda xs, k: R.randint(-5, 5, [2, 4]))
        draw(f"randint_u8_seed{S}", "random.randint", dict(s, shape=[5], low=0, high=200, dtype="uint8"),
             lambda xs, k: R.randint(0, 200, [5], dtype=mx.uint8))
        draw(f"truncated_normal_asym_seed{S}", "random.truncated_normal",
             dict(s, shape=[6], lower=-2.5, upper=0.7, dtype="float32"),
             lambda xs, k: R.truncated_normal(-2.5, 0.7, [6]))
        draw(f"gumbel_seed{S}", "random.gumbel", dict(s, shape=[4], dtype="float32"),
             lambda xs, k: R.gumbel([4]))
        draw(f"categorical_1d_seed{S}", "random.categorical", dict(s, axis=-1),
             lambda xs, k: R.categorical(xs[0]), [logits1])
        draw(f"categorical_num_samples_seed{S}", "random.categorical", dict(s, axis=-1, num_samples=5),
             lambda xs, k: R.categorical(xs[0], num_samples=5), [logits])
        draw(f"categorical_1d_num_samples_seed{S}", "random.categorical",
             dict(s, axis=-1, num_samples=6),
             lambda xs, k: R.categorical(xs[0], num_samples=6), [logits1])
        draw(f"categorical_axis0_seed{S}", "random.categorical", dict(s, axis=0),
             lambda xs, k: R.categorical(xs[0], axis=0), [logits])
        draw(f"permutation_array_seed{S}", "random.permutation", dict(s, axis=0),
             lambda xs, k: R.permutation(xs[0]), [arr("int32", [5], [10, 20, 30, 40, 50])])
        draw(f"bernoulli_default_seed{S}", "random.bernoulli", dict(s, shape=[6], p=0.5),
             lambda xs, k: R.bernoulli(0.5, [6]))
        # the global key after one draw: advanced to the first half of split
        draw(f"state_after_one_draw_seed{S}", "random.state", dict(s, draws=1),
             lambda xs, k: (R.uniform(shape=[1]), R.state[0])[1])

    fx.add("key_7", "random.key", [], {"seed": 7}, call=lambda xs, kw: R.key(kw["seed"]))
    fx.add("key_large", "random.key", [], {"seed": 2 ** 40 + 5}, call=lambda xs, kw: R.key(kw["seed"]))
    k7 = [0, 7]
    draw("split_key7", "random.split", dict(base, key=k7, num=2), lambda xs, k: R.split(k))
    draw("split_key7_num3", "random.split", dict(base, key=k7, num=3), lambda xs, k: R.split(k, 3))
    draw("split_key7_num1", "random.split", dict(base, key=k7, num=1), lambda xs, k: R.split(k, 1))
    k5 = [0, 5]
    draw("normal_key5", "random.normal", dict(base, key=k5, shape=[3], dtype="float32"),
         lambda xs, k: R.normal([3], key=k))
    draw("uniform_key5", "random.uniform", dict(base, key=k5, shape=[3], low=0, high=1, dtype="float32"),
         lambda xs, k: R.uniform(shape=[3], key=k))
    draw("uniform_key5_odd7", "random.uniform", dict(base, key=k5, shape=[7], low=0, high=1, dtype="float32"),
         lambda xs, k: R.uniform(shape=[7], key=k))
    draw("uniform_f64_error", "random.uniform",
         dict(base, key=k5, shape=[3], low=0, high=1, dtype="float64"),
         lambda xs, k: R.uniform(shape=[3], key=k, dtype=mx.float64))
    draw("randint_float_dtype_error", "random.randint",
         dict(base, key=k5, shape=[3], low=0, high=4, dtype="float32"),
         lambda xs, k: R.randint(0, 4, [3], key=k, dtype=mx.float32))

    # bits: C++ only
    reqs = [([0, 3], [4], 4), ([0, 3], [3], 1), ([0, 3], [3], 2), ([0, 3], [5], 4),
            ([0, 3], [7], 1), ([0, 3], [5], 2), ([0, 3], [1], 1)]
    got = mlx_bits_cpp([(k, s[0], w) for k, s, w in reqs])
    if got is None:
        print("warning: random.bits cases skipped", file=sys.stderr)
    else:
        for (k, shape, w), vals in zip(reqs, got):
            name = f"bits_key3_n{shape[0]}_w{w}"
            dtype = {1: "uint8", 2: "uint16", 4: "uint32"}[w]
            data = vals
            fx.add(name, "random.bits", [], dict(base, key=k, shape=shape, width=w),
                   call=lambda xs, kw, d=data, dtn=dtype, sh=shape: arr(dtn, sh, d))
    # Python-visible cross-check: bits([4], key) == split(key, 2).flatten()
    draw("bits_via_split_key3", "random.bits", dict(base, key=[0, 3], shape=[4], width=4),
         lambda xs, k: R.split(k, 2).reshape([4]))
    return fx


def check_known_values():
    mx.random.seed(0)
    n = np.array(mx.random.normal([4])).tolist()
    want = [1.1378784, -0.14331418, -0.59153634, 0.7946625]
    assert all(abs(a - b) < 1e-6 for a, b in zip(n, want)), n
    mx.random.seed(0)
    u = np.array(mx.random.uniform(shape=[3])).tolist()
    want = [0.87241435, 0.11105156, 0.27708054]
    assert all(abs(a - b) < 1e-7 for a, b in zip(u, want)), u


FAMILIES = {
    "unary": make_unary, "binary": make_binary, "compare": make_compare,
    "reduce": make_reduce, "shape": make_shape, "index": make_index,
    "matmul": make_matmul, "sort": make_sort, "promotion": make_promotion,
    "random": make_random, "creation": make_creation,
}

# MLX 0.32.4's CPU backend occasionally never returns from mx.eval (seen
# about once in a few hundred runs of these small graphs, at different
# cases). Each family therefore runs in its own process with a time limit
# and is retried; the output is deterministic, so a retry is harmless.
FAMILY_TIMEOUT_S = 120
FAMILY_ATTEMPTS = 4


def main():
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "--family":
        FAMILIES[args[1]]().write()
        return
    if args:
        raise SystemExit("usage: make_fixtures.py [--family NAME]")
    if mx.__version__ != MLX_VERSION:
        print(f"warning: MLX {mx.__version__} installed, fixtures are labelled {MLX_VERSION}",
              file=sys.stderr)
    check_known_values()
    os.makedirs(OUT_DIR, exist_ok=True)
    for family in FAMILIES:
        for attempt in range(1, FAMILY_ATTEMPTS + 1):
            try:
                subprocess.run([sys.executable, os.path.abspath(__file__), "--family", family],
                               check=True, timeout=FAMILY_TIMEOUT_S)
                break
            except subprocess.TimeoutExpired:
                print(f"warning: MLX hung while generating {family} "
                      f"(attempt {attempt}); retrying", file=sys.stderr)
        else:
            raise SystemExit(f"giving up on {family} after {FAMILY_ATTEMPTS} attempts")


if __name__ == "__main__":
    main()
