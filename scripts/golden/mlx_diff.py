"""MLX's side of nuvec's differential tester (crates/nuvec/tests/mlx_diff/).

Reads programs, one JSON object per line on stdin, runs each in MLX 0.32.4, and writes one
JSON result per line on stdout: {"ok": true, "outputs": [{"dtype", "shape", "data"}]} or
{"ok": false, "error": "..."}. A program is a list of ops over its inputs, wrapped in
transforms applied innermost first; the Rust side (mlx_diff/interpret.rs) gives each op and
transform the same meaning. NaN and infinities travel as the strings "nan", "inf", "-inf".

Run: .venv-mlx/bin/python scripts/golden/mlx_diff.py < programs.jsonl > results.jsonl
"""

import json
import math
import sys

import mlx.core as mx

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
NAMES = {v: k for k, v in DTYPES.items()}

UNARY = {
    "abs", "negative", "sign", "square", "sqrt", "rsqrt", "reciprocal", "exp", "expm1",
    "log", "log1p", "sin", "cos", "tanh", "sigmoid", "erf", "erfinv", "floor", "ceil",
    "stop_gradient", "isnan", "logical_not", "tan", "log2", "log10", "sinh", "cosh", "arcsin",
    "arccos", "arctan", "arcsinh", "arccosh", "arctanh",
}
BINARY = {
    "add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "logaddexp",
    "greater", "less", "equal", "remainder", "floor_divide",
}
REDUCTIONS = {"sum", "prod", "max", "min", "mean", "logsumexp", "var", "all", "any"}


def decode(value):
    return float(value) if isinstance(value, str) else value


def encode(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def make_input(spec):
    dtype = DTYPES[spec["dtype"]]
    data = [decode(v) for v in spec["data"]]
    return mx.array(data, dtype=dtype).reshape(spec["shape"])


def apply(op, env):
    name = op["op"]
    args = [env[i] for i in op["args"]]
    if name in UNARY:
        return getattr(mx, name)(args[0])
    if name in BINARY:
        return getattr(mx, name)(args[0], args[1])
    if name == "add_scalar":
        return args[0] + op["value"]
    if name == "mul_scalar":
        return args[0] * op["value"]
    if name == "where":
        return mx.where(args[0], args[1], args[2])
    if name in REDUCTIONS:
        return getattr(mx, name)(args[0], axis=op["axes"], keepdims=op["keepdims"])
    if name in ("argmax", "argmin"):
        return getattr(mx, name)(args[0], axis=op["axis"], keepdims=op["keepdims"])
    if name in ("cumsum", "cumprod", "cummax"):
        return getattr(mx, name)(
            args[0], axis=op["axis"], reverse=op["reverse"], inclusive=op["inclusive"]
        )
    if name == "softmax":
        return mx.softmax(args[0], axis=op["axes"])
    if name in ("sort", "argsort"):
        return getattr(mx, name)(args[0], axis=op["axis"])
    if name == "clip":
        # nuvec's clip takes f64 bounds and treats integral ones on an integer array as
        # integers (its documented reading of MLX's Python ints), unless one has a fraction:
        # give MLX the same.
        bounds = [b for b in (op["lo"], op["hi"]) if b is not None]
        integral = all(float(b).is_integer() for b in bounds)

        def bound(value):
            if value is not None and integral and not mx.issubdtype(args[0].dtype, mx.floating):
                return int(value)
            return value

        return mx.clip(args[0], bound(op["lo"]), bound(op["hi"]))
    if name == "transpose":
        return mx.transpose(args[0], op["perm"])
    if name == "reshape":
        return mx.reshape(args[0], op["shape"])
    if name == "expand_dims":
        return mx.expand_dims(args[0], op["axes"])
    if name == "squeeze":
        return mx.squeeze(args[0], op["axes"])
    if name == "broadcast_to":
        return mx.broadcast_to(args[0], op["shape"])
    if name == "concatenate":
        return mx.concatenate(args, axis=op["axis"])
    if name == "slice":
        index = tuple(
            slice(start, stop, step)
            for start, stop, step in zip(op["start"], op["stop"], op["strides"])
        )
        return args[0][index]
    if name == "take":
        return mx.take(args[0], mx.array(op["indices"], dtype=mx.int32), axis=op["axis"])
    if name == "astype":
        return args[0].astype(DTYPES[op["dtype"]])
    if name == "matmul":
        return mx.matmul(args[0], args[1])
    if name == "swapaxes":
        return mx.swapaxes(args[0], op["axis1"], op["axis2"])
    raise ValueError(f"unknown op {name}")


def base_function(program):
    def run(*inputs):
        env = list(inputs)
        for op in program["ops"]:
            env.append(apply(op, env))
        return [env[i] for i in program["outputs"]]

    return run


def as_list(result):
    return list(result) if isinstance(result, (list, tuple)) else [result]


def wrap(f, transform):
    kind = transform["kind"]
    if kind == "grad":
        g = mx.grad(lambda *xs: f(*xs)[0].sum(), argnums=transform["argnums"])
        return lambda *xs: as_list(g(*xs))
    if kind == "vjp":

        def vjp(*xs):
            cotangents = [mx.ones_like(o) for o in f(*xs)]
            outputs, vjps = mx.vjp(lambda *a: f(*a), list(xs), cotangents)
            return list(outputs) + list(vjps)

        return vjp
    if kind == "jvp":

        def jvp(*xs):
            outputs, tangents = mx.jvp(lambda *a: f(*a), list(xs), list(xs))
            return list(outputs) + list(tangents)

        return jvp
    if kind == "vmap":
        v = mx.vmap(lambda *a: f(*a), in_axes=tuple(transform["in_axes"]), out_axes=0)
        return lambda *xs: as_list(v(*xs))
    if kind == "compile":
        c = mx.compile(lambda *a: f(*a))
        return lambda *xs: as_list(c(*xs))
    if kind == "checkpoint":
        c = mx.checkpoint(lambda *a: f(*a))
        return lambda *xs: as_list(c(*xs))
    raise ValueError(f"unknown transform {kind}")


def run_program(program):
    f = base_function(program)
    for transform in program["transforms"]:
        f = wrap(f, transform)
    inputs = [make_input(spec) for spec in program["inputs"]]
    outputs = f(*inputs)
    mx.eval(outputs)
    return [
        {
            "dtype": NAMES.get(o.dtype, str(o.dtype)),
            "shape": list(o.shape),
            "data": [encode(v) for v in o.reshape(-1).tolist()],
        }
        for o in outputs
    ]


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        program = json.loads(line)
        try:
            result = {"ok": True, "outputs": run_program(program)}
        except Exception as error:  # every MLX refusal is a result to compare
            result = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
