#!/usr/bin/env python3
"""Generate nuvec's autodiff golden fixtures from Apple MLX (version 0.32.4).

How to run (from the repository root, with the venv described in
make_fixtures.py):

    .venv-mlx/bin/python scripts/golden/make_grad_fixtures.py

Writes ``crates/nuvec/tests/fixtures/grad.json``: for each case, the scalar
loss and its gradient with respect to every input, computed with
``mx.value_and_grad`` on MLX's CPU backend (float32 throughout).

Format:

    {"mlx_version": "0.32.4", "cases": [
      {"name": ..., "function": <name>, "inputs": [<array>, ...],
       "value": <array, shape []>, "grads": [<array>, ...]}   # one per input
    ]}

An <array> is {"dtype": "float32", "shape": [...], "data": [flat row-major]}.
Inputs are numpy RandomState(seed) normals rounded to 3 decimals (or the
special values noted per case). The functions (re-implemented on the Rust
side) are:

  mlp_mse(x, w1, b1, w2, y):  mean(square(tanh(x@w1 + b1) @ w2 - y))
  softmax_cross_entropy(logits, onehot):
      mean(-sum(onehot * (logits - logsumexp(logits, -1, keepdims)), -1))
  layer_norm(x, gamma, beta, w):  xn = (x - mean) * rsqrt(var + 1e-5) over
      the last axis (population variance); sum((xn*gamma + beta) * w)
  sigmoid_bce(z, t):  p = sigmoid(z); -mean(t*log(p) + (1-t)*log(1-p))
  softmax_weighted(x, w):  sum(softmax(x, -1) * w)
  max_and_exp(x):  sum(max(x, axis=1)) + sum(exp(x) * 0.1)
  broadcast_mul_div(a, b):  sum(a * b / (1 + b))
  cumsum_square(x):  sum(square(cumsum(x, axis=1)))
  slice_update_square(a, u):  b = 2a; b[1:3, ::-2] = sin(u); sum(square(b) * cos(b))
"""

import json
import os

import mlx.core as mx
import numpy as np

mx.set_default_device(mx.cpu)

MLX_VERSION = "0.32.4"
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "nuvec",
                   "tests", "fixtures", "grad.json")


def mlp_mse(x, w1, b1, w2, y):
    h = mx.tanh(x @ w1 + b1)
    out = h @ w2
    return mx.mean(mx.square(out - y))


def softmax_cross_entropy(logits, onehot):
    lsm = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    return mx.mean(-mx.sum(onehot * lsm, axis=-1))


def layer_norm(x, gamma, beta, w):
    mu = mx.mean(x, axis=-1, keepdims=True)
    var = mx.var(x, axis=-1, keepdims=True)
    xn = (x - mu) * mx.rsqrt(var + 1e-5)
    return mx.sum((xn * gamma + beta) * w)


def sigmoid_bce(z, t):
    p = mx.sigmoid(z)
    return -mx.mean(t * mx.log(p) + (1 - t) * mx.log(1 - p))


def softmax_weighted(x, w):
    return mx.sum(mx.softmax(x, axis=-1) * w)


def max_and_exp(x):
    return mx.sum(mx.max(x, axis=1)) + mx.sum(mx.exp(x) * 0.1)


def broadcast_mul_div(a, b):
    return mx.sum(a * b / (1 + b))


def cumsum_square(x):
    return mx.sum(mx.square(mx.cumsum(x, axis=1)))


def slice_update_square(a, u):
    b = a * 2.0
    b[1:3, ::-2] = mx.sin(u)
    return mx.sum(mx.square(b) * mx.cos(b))


FUNCS = {f.__name__: f for f in (mlp_mse, softmax_cross_entropy, layer_norm,
                                  sigmoid_bce, softmax_weighted, max_and_exp,
                                  broadcast_mul_div, cumsum_square,
                                  slice_update_square)}


def normal(rs, shape):
    return np.round(rs.normal(size=shape), 3)


def onehot(rs, rows, cols):
    m = np.zeros((rows, cols))
    m[np.arange(rows), rs.randint(0, cols, size=rows)] = 1.0
    return m


def make_inputs():
    cases = []
    rs = np.random.RandomState(0)
    cases.append(("mlp_mse", "mlp_mse",
                  [normal(rs, s) for s in [(4, 3), (3, 5), (5,), (5, 2), (4, 2)]]))
    rs = np.random.RandomState(1)
    cases.append(("softmax_cross_entropy", "softmax_cross_entropy",
                  [normal(rs, (4, 5)), onehot(rs, 4, 5)]))
    rs = np.random.RandomState(2)
    cases.append(("layer_norm", "layer_norm",
                  [normal(rs, s) for s in [(3, 6), (6,), (6,), (3, 6)]]))
    rs = np.random.RandomState(3)
    cases.append(("sigmoid_bce", "sigmoid_bce",
                  [normal(rs, (8,)),
                   np.array([0, 1, 1, 0, 1, 0, 0, 1], dtype=np.float64)]))
    rs = np.random.RandomState(4)
    cases.append(("softmax_weighted", "softmax_weighted",
                  [normal(rs, (2, 4)), normal(rs, (2, 4))]))
    rs = np.random.RandomState(5)
    x = normal(rs, (3, 4))
    assert len(np.unique(x)) == x.size, "max_and_exp needs distinct values"
    cases.append(("max_and_exp", "max_and_exp", [x]))
    rs = np.random.RandomState(6)
    cases.append(("broadcast_mul_div", "broadcast_mul_div",
                  [normal(rs, (2, 3)), np.round(rs.uniform(0.5, 1.5, size=(3,)), 3)]))
    rs = np.random.RandomState(7)
    cases.append(("cumsum_square", "cumsum_square", [normal(rs, (2, 5))]))
    rs = np.random.RandomState(8)
    cases.append(("slice_update_square", "slice_update_square",
                  [normal(rs, (4, 5)), normal(rs, (2, 3))]))
    return cases


def enc(a):
    a = np.array(a, dtype=np.float32)
    assert np.all(np.isfinite(a))
    return {"dtype": "float32", "shape": list(a.shape),
            "data": [float(v) for v in a.reshape(-1)]}


def main():
    assert mx.__version__ == MLX_VERSION, mx.__version__
    out = []
    for name, fname, np_inputs in make_inputs():
        inputs = [mx.array(v.astype(np.float32)) for v in np_inputs]
        fn = FUNCS[fname]
        argnums = list(range(len(inputs)))
        value, grads = mx.value_and_grad(fn, argnums=argnums)(*inputs)
        if isinstance(grads, mx.array):  # a single argnum gives a bare array
            grads = [grads]
        grads = list(grads)
        assert len(grads) == len(inputs)
        mx.eval(value, grads)
        for x, g in zip(inputs, grads):
            assert g.dtype == mx.float32 and g.shape == x.shape, (name, g.dtype, g.shape, x.shape)
        assert value.dtype == mx.float32 and value.shape == ()
        out.append({"name": name, "function": fname,
                    "inputs": [enc(x) for x in inputs],
                    "value": enc(value), "grads": [enc(g) for g in grads]})
    path = os.path.normpath(OUT)
    with open(path, "w") as f:
        json.dump({"mlx_version": MLX_VERSION, "cases": out}, f)
        f.write("\n")
    print(f"wrote {path} ({len(out)} cases)")


if __name__ == "__main__":
    main()
