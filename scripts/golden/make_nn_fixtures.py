#!/usr/bin/env python3
"""Generate nuvec-nn's golden fixtures from Apple MLX (version 0.32.4).

How to run (from the repository root, with the venv described in
make_fixtures.py):

    .venv-mlx/bin/python scripts/golden/make_nn_fixtures.py

Writes three files into ``crates/nuvec-nn/tests/fixtures/`` (and
``mlp_weights.safetensors`` with ``mlp_weights.json``: an MLP's weights saved by
``save_weights`` and its output for one input, for the weights interop test), every value
computed by calling MLX on its CPU backend (float32 unless noted):

  quantize.json    mx.quantize / mx.dequantize / mx.quantized_matmul
                   (mode "affine") for bits in {2,3,4,5,6,8} x group_size in
                   {32,64,128}, plus a transpose=False case and a 3-D x case.
  layers.json      mlx.nn layer initialisation under fixed seeds, layer
                   forwards (RMSNorm, LayerNorm, RoPE, Linear, Embedding,
                   Dropout), activations and losses (with some gradients).
  optimizers.json  mlx.optimizers (SGD, Adam, AdamW, with and without a
                   learning-rate schedule) over three steps, schedules alone,
                   and clip_grad_norm.

Format of every file:

    {"mlx_version": "0.32.4", "cases": [{"name": ..., "kind": ..., ...}]}

An <array> is {"dtype": "float32", "shape": [...], "data": [flat row-major]}
(dtype is one of float32, uint32, uint64, int32, bool; non-finite floats are
the strings "inf", "-inf", "nan"; integers are JSON integers; bools are JSON
bools). To keep the files small a float32 value is written as the shortest
decimal that reads back to it: parse the number as a float64 and round it to
float32 (Rust: `x as f32`) to get MLX's value bit for bit. Float inputs are numpy RandomState(seed) normals rounded to 3
decimals, converted to float32, unless the case says otherwise.

Case kinds (the "kind" field) and their fields:

quantize.json
  "quantize": bits, group_size, mode, transpose, inputs "w", "x";
      outputs "wq" (uint32), "scales", "biases" (= mx.quantize(w,
      group_size, bits)), "dequantized" (= mx.dequantize(wq, scales, biases,
      group_size, bits)), "y" (= mx.quantized_matmul(x, wq, scales, biases,
      transpose, group_size, bits)). In the transpose=True cases w is
      [N, K] and y = x @ dequantized.T; with transpose=False w is [K, N] and
      y = x @ dequantized. "edge_rows" describes the rows planted to pin
      edge cases.

layers.json
  "linear_init" / "embedding_init": "seed", "layers": [{"input_dims",
      "output_dims", "bias", "weight", "bias_value"?}] created in that order
      after mx.random.seed(seed) / {"num_embeddings", "dims", "weight"}.
  "rms_norm" / "layer_norm": "params" (constructor kwargs), "x", "weight"
      / "bias" (the layer's parameters, ones / zeros), "y".
  "rope": "params" {dims, traditional, base, scale}, "offset", "x", "y".
  "linear": "x", "weight", "bias"? , "y" (nn.Linear with those params).
  "embedding": "weight", "indices" (int32), "y".
  "dropout": "p", "seed", "x", "y" (layer in train mode called right after
      mx.random.seed(seed)), "mask" (mx.random.bernoulli(1 - p, x.shape)
      right after the same seed), "key" (uint32 [2]: the key that draw used,
      mx.random.split(mx.random.key(seed))[1]; bernoulli with key=key gives
      the same mask).
  "activation": "function" (the mlx.nn function name), "kwargs", "x",
      extra array inputs in "inputs" (prelu's alpha), "y".
  "loss": "function" (name in mlx.nn.losses), "kwargs" (scalars passed as
      keyword arguments), "inputs" {argname: <array>} (passed as keyword
      arguments too), "y"; "grad_wrt" + "grad" when the case also records
      mx.grad of the loss w.r.t. that input.

optimizers.json
  "optimizer": "optimizer" (class name in mlx.optimizers), "kwargs" (a
      schedule is written {"schedule": name, "args": [...]}), "params"
      {"w": [3, 4], "b": [4]}, "grads" (3 dicts, one per step), "steps"
      (params after each opt.apply_gradients(grads[i], params) call),
      "state" (opt.state after the last step, flattened with
      mlx.utils.tree_flatten: "step" (uint64), "learning_rate", "w.m", ...).
  "schedule": "schedule" {"name", "args"} (join_schedules args hold nested
      schedules), "steps" (evaluated at mx.array(step, mx.uint64), as the
      optimizers do), "values" (float32 [len(steps)]).
  "clip_grad_norm": "max_norm", "grads", "clipped", "total_norm".
"""

import json
import os

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten

mx.set_default_device(mx.cpu)

MLX_VERSION = "0.32.4"
OUT_DIR = os.path.normpath(os.path.join(
    os.path.dirname(__file__), "..", "..", "crates", "nuvec-nn", "tests",
    "fixtures"))

from encoding import DTYPE_NAMES, enc, enc_float, f32, normal  # noqa: E402,F401


def write(filename, cases):
    path = os.path.join(OUT_DIR, filename)
    with open(path, "w") as f:
        json.dump({"mlx_version": MLX_VERSION, "cases": cases}, f,
                  separators=(",", ":"), allow_nan=False)
        f.write("\n")
    print(f"wrote {path} ({len(cases)} cases, {os.path.getsize(path)} bytes)")


# ----------------------------------------------------------------------------
# quantize.json


def quant_weight(rs, rows, cols):
    """Normals with planted edge cases (described by the returned dict)."""
    w = normal(rs, (rows, cols))
    edges = {}
    if rows >= 4:
        # Row 1: the first 128 values constant, so its first group is
        # constant for every group size.
        w[1, :128] = 0.25
        edges["row1"] = "columns 0..128 all 0.25 (first group constant)"
        # Row 2: the first 128 values all negative.
        w[2, :128] = -np.abs(w[2, :128]) - 0.1
        edges["row2"] = "columns 0..128 all negative"
        # Row 3: the last 128 values exactly zero (an all-zero group).
        w[3, -128:] = 0.0
        edges["row3"] = "columns -128.. all 0.0 (all-zero group)"
        # Row 0: columns 128..256 all positive.
        w[0, 128:] = np.abs(w[0, 128:]) + 0.05
        edges["row0"] = "columns 128..256 all positive"
    return w, edges


def quant_case(name, w_np, x_np, bits, group_size, transpose, edges):
    w = f32(w_np)
    x = f32(x_np)
    wq, scales, biases = mx.quantize(w, group_size=group_size, bits=bits,
                                     mode="affine")
    deq = mx.dequantize(wq, scales, biases, group_size=group_size, bits=bits,
                        mode="affine")
    y = mx.quantized_matmul(x, wq, scales, biases, transpose=transpose,
                            group_size=group_size, bits=bits, mode="affine")
    mx.eval(wq, scales, biases, deq, y)
    assert wq.dtype == mx.uint32 and scales.dtype == mx.float32
    assert wq.shape[-1] == w.shape[-1] * bits // 32
    assert scales.shape[-1] == w.shape[-1] // group_size
    # Sanity: quantized_matmul agrees with a plain matmul of the dequantized
    # weights (MLX's own consistency; tolerance for accumulation order).
    ref = x @ (deq.T if transpose else deq)
    assert np.allclose(np.array(ref), np.array(y), rtol=1e-4, atol=1e-4), name
    return {"name": name, "kind": "quantize", "bits": bits,
            "group_size": group_size, "mode": "affine",
            "transpose": transpose, "edge_rows": edges,
            "w": enc(w), "x": enc(x), "wq": enc(wq), "scales": enc(scales),
            "biases": enc(biases), "dequantized": enc(deq), "y": enc(y)}


def quantize_cases():
    cases = []
    for bits in [2, 3, 4, 5, 6, 8]:
        for group_size in [32, 64, 128]:
            rs = np.random.RandomState(1000 + 10 * bits + group_size // 32)
            w, edges = quant_weight(rs, 4, 256)
            x = normal(rs, (3, 256))
            cases.append(quant_case(f"affine_b{bits}_g{group_size}", w, x,
                                    bits, group_size, True, edges))
    # transpose=False: w [K=256, N=64] quantized along N.
    rs = np.random.RandomState(2000)
    w = normal(rs, (256, 64))
    x = normal(rs, (3, 256))
    cases.append(quant_case("affine_b4_g64_no_transpose", w, x, 4, 64, False,
                            {}))
    # 3-D x with a 2-D w.
    rs = np.random.RandomState(2001)
    w, edges = quant_weight(rs, 4, 256)
    x = normal(rs, (2, 3, 256))
    cases.append(quant_case("affine_b4_g64_x3d", w, x, 4, 64, True, edges))
    # 3-D x, 3 bits (word-spanning packing) too.
    rs = np.random.RandomState(2002)
    w, edges = quant_weight(rs, 4, 256)
    x = normal(rs, (2, 3, 256))
    cases.append(quant_case("affine_b3_g32_x3d", w, x, 3, 32, True, edges))
    return cases


# ----------------------------------------------------------------------------
# layers.json


def layer_cases():
    cases = []

    # --- initialisation ----------------------------------------------------
    mx.random.seed(0)
    l1 = nn.Linear(4, 16)
    l2 = nn.Linear(16, 4)
    mx.eval(l1.parameters(), l2.parameters())
    cases.append({"name": "linear_init_seed0", "kind": "linear_init", "seed": 0,
                  "layers": [
                      {"input_dims": 4, "output_dims": 16, "bias": True,
                       "weight": enc(l1.weight), "bias_value": enc(l1.bias)},
                      {"input_dims": 16, "output_dims": 4, "bias": True,
                       "weight": enc(l2.weight), "bias_value": enc(l2.bias)}]})
    mx.random.seed(1)
    l3 = nn.Linear(5, 3, bias=False)
    mx.eval(l3.parameters())
    assert "bias" not in l3
    cases.append({"name": "linear_init_seed1_nobias", "kind": "linear_init",
                  "seed": 1,
                  "layers": [{"input_dims": 5, "output_dims": 3, "bias": False,
                              "weight": enc(l3.weight)}]})
    mx.random.seed(2)
    emb = nn.Embedding(10, 4)
    mx.eval(emb.parameters())
    cases.append({"name": "embedding_init_seed2", "kind": "embedding_init",
                  "seed": 2, "num_embeddings": 10, "dims": 4,
                  "weight": enc(emb.weight)})

    # --- normalisation -----------------------------------------------------
    rs = np.random.RandomState(10)
    x = f32(normal(rs, (2, 3, 8), 2.0) + 0.5)
    norm = nn.RMSNorm(8)
    cases.append({"name": "rms_norm_default", "kind": "rms_norm",
                  "params": {"dims": 8, "eps": norm.eps}, "x": enc(x),
                  "weight": enc(norm.weight), "y": enc(norm(x))})
    ln = nn.LayerNorm(8)
    cases.append({"name": "layer_norm_default", "kind": "layer_norm",
                  "params": {"dims": 8, "eps": ln.eps, "affine": True},
                  "x": enc(x), "weight": enc(ln.weight), "bias": enc(ln.bias),
                  "y": enc(ln(x))})
    ln2 = nn.LayerNorm(8, affine=False, eps=1e-6)
    assert "weight" not in ln2
    cases.append({"name": "layer_norm_no_affine", "kind": "layer_norm",
                  "params": {"dims": 8, "eps": 1e-6, "affine": False},
                  "x": enc(x), "y": enc(ln2(x))})
    # Non-trivial weight / bias (set by hand) so gamma/beta placement shows.
    rs = np.random.RandomState(11)
    gamma = f32(normal(rs, (8,)))
    beta = f32(normal(rs, (8,)))
    norm.weight = gamma
    ln.weight = gamma
    ln.bias = beta
    cases.append({"name": "rms_norm_weight", "kind": "rms_norm",
                  "params": {"dims": 8, "eps": norm.eps}, "x": enc(x),
                  "weight": enc(gamma), "y": enc(norm(x))})
    cases.append({"name": "layer_norm_weight_bias", "kind": "layer_norm",
                  "params": {"dims": 8, "eps": ln.eps, "affine": True},
                  "x": enc(x), "weight": enc(gamma), "bias": enc(beta),
                  "y": enc(ln(x))})

    # --- RoPE --------------------------------------------------------------
    rs = np.random.RandomState(12)
    x = f32(normal(rs, (1, 2, 5, 8)))
    for tag, kw in [("default", {}), ("traditional", {"traditional": True}),
                    ("base500_scale05", {"base": 500.0, "scale": 0.5})]:
        rope = nn.RoPE(8, **kw)
        for offset in [0, 3]:
            cases.append({"name": f"rope_{tag}_offset{offset}", "kind": "rope",
                          "params": {"dims": rope.dims,
                                     "traditional": rope.traditional,
                                     "base": float(rope.base),
                                     "scale": float(rope.scale)},
                          "offset": offset, "x": enc(x),
                          "y": enc(rope(x, offset=offset))})
    # dims smaller than the last axis: the tail passes through.
    x10 = f32(normal(rs, (1, 2, 5, 10)))
    for trad in [False, True]:
        rope = nn.RoPE(6, traditional=trad)
        cases.append({"name": f"rope_dims6_of10_trad{int(trad)}", "kind": "rope",
                      "params": {"dims": 6, "traditional": trad,
                                 "base": float(rope.base), "scale": 1.0},
                      "offset": 2, "x": enc(x10), "y": enc(rope(x10, offset=2))})

    # --- Linear / Embedding forward ----------------------------------------
    rs = np.random.RandomState(13)
    x = f32(normal(rs, (2, 3, 4)))
    w = f32(normal(rs, (5, 4)))
    b = f32(normal(rs, (5,)))
    lin = nn.Linear(4, 5)
    lin.weight = w
    lin.bias = b
    cases.append({"name": "linear_forward", "kind": "linear", "x": enc(x),
                  "weight": enc(w), "bias": enc(b), "y": enc(lin(x))})
    lin_nb = nn.Linear(4, 5, bias=False)
    lin_nb.weight = w
    cases.append({"name": "linear_forward_nobias", "kind": "linear",
                  "x": enc(x), "weight": enc(w), "y": enc(lin_nb(x))})
    emb = nn.Embedding(10, 4)
    ew = f32(normal(rs, (10, 4)))
    emb.weight = ew
    idx = mx.array([[0, 3, 9], [3, 3, 1]], dtype=mx.int32)
    cases.append({"name": "embedding_forward", "kind": "embedding",
                  "weight": enc(ew), "indices": enc(idx), "y": enc(emb(idx))})

    # --- Dropout -----------------------------------------------------------
    for p, seed, x in [(0.5, 0, mx.ones((2, 8))),
                       (0.25, 5, f32(normal(np.random.RandomState(14), (3, 4))))]:
        drop = nn.Dropout(p)
        assert drop.training
        mx.random.seed(seed)
        y = drop(x)
        mx.eval(y)
        mx.random.seed(seed)
        mask = mx.random.bernoulli(1 - p, x.shape)
        mx.eval(mask)
        assert np.array_equal(np.array((mask * x) * (1 / (1 - p))), np.array(y))
        # The key that bernoulli drew from the global key sequence:
        # KeySequence::next() splits the global key and uses the second half.
        key = mx.random.split(mx.random.key(seed))[1]
        mask_k = mx.random.bernoulli(1 - p, x.shape, key=key)
        assert np.array_equal(np.array(mask_k), np.array(mask))
        cases.append({"name": f"dropout_p{p}_seed{seed}", "kind": "dropout",
                      "p": p, "seed": seed, "x": enc(x), "y": enc(y),
                      "key": enc(key), "mask": enc(mask)})
    drop = nn.Dropout(0.5)
    drop.eval()
    x = mx.ones((2, 8))
    cases.append({"name": "dropout_eval_identity", "kind": "dropout", "p": 0.5,
                  "seed": None, "training": False, "x": enc(x),
                  "y": enc(drop(x))})

    # --- activations -------------------------------------------------------
    xa = f32(np.concatenate([np.linspace(-5.0, 5.0, 21), [-30.0, 30.0]]))
    for fname in ["relu", "relu6", "leaky_relu", "elu", "selu", "celu", "silu",
                  "gelu", "gelu_approx", "gelu_fast_approx", "softplus",
                  "softsign", "mish", "log_sigmoid", "sigmoid", "tanh",
                  "hard_tanh", "hardswish", "step"]:
        fn = getattr(nn, fname)
        cases.append({"name": f"act_{fname}", "kind": "activation",
                      "function": fname, "kwargs": {}, "x": enc(xa),
                      "y": enc(fn(xa))})
    alpha = mx.array([0.25])
    cases.append({"name": "act_prelu", "kind": "activation", "function": "prelu",
                  "kwargs": {}, "x": enc(xa), "inputs": {"alpha": enc(alpha)},
                  "y": enc(nn.prelu(xa, alpha))})
    rs = np.random.RandomState(15)
    xg = f32(normal(rs, (2, 8), 2.0))
    cases.append({"name": "act_glu", "kind": "activation", "function": "glu",
                  "kwargs": {"axis": -1}, "x": enc(xg),
                  "y": enc(nn.glu(xg, axis=-1))})
    xs = f32(np.stack([normal(rs, (5,), 2.0),
                       np.array([80.0, 79.5, -80.0, 0.0, 10.0])]))
    for fname in ["log_softmax", "softmax"]:
        cases.append({"name": f"act_{fname}", "kind": "activation",
                      "function": fname, "kwargs": {"axis": -1}, "x": enc(xs),
                      "y": enc(getattr(nn, fname)(xs, axis=-1))})

    # --- losses ------------------------------------------------------------
    L = nn.losses

    def loss_case(name, fname, inputs, kwargs, grad_wrt=None):
        fn = getattr(L, fname)
        y = fn(**inputs, **kwargs)
        case = {"name": name, "kind": "loss", "function": fname,
                "kwargs": kwargs,
                "inputs": {k: enc(v) for k, v in inputs.items()}, "y": enc(y)}
        if grad_wrt is not None:
            def f(v):
                return fn(**{**inputs, grad_wrt: v}, **kwargs)
            case["grad_wrt"] = grad_wrt
            case["grad"] = enc(mx.grad(f)(inputs[grad_wrt]))
        cases.append(case)

    rs = np.random.RandomState(20)
    logits = f32(normal(rs, (4, 6), 2.0))
    targets = mx.array([0, 5, 2, 2], dtype=mx.int32)
    probs_np = np.round(rs.dirichlet(np.ones(6), size=4), 3)
    probs = f32(probs_np)
    for ls in [0.0, 0.1]:
        for red in ["none", "mean"]:
            loss_case(f"cross_entropy_int_ls{ls}_{red}", "cross_entropy",
                      {"logits": logits, "targets": targets},
                      {"label_smoothing": ls, "reduction": red},
                      grad_wrt="logits" if red == "mean" else None)
            loss_case(f"cross_entropy_probs_ls{ls}_{red}", "cross_entropy",
                      {"logits": logits, "targets": probs},
                      {"label_smoothing": ls, "reduction": red})
    loss_case("cross_entropy_int_sum", "cross_entropy",
              {"logits": logits, "targets": targets}, {"reduction": "sum"})
    loss_case("cross_entropy_int_weights", "cross_entropy",
              {"logits": logits, "targets": targets,
               "weights": f32([0.5, 1.0, 2.0, 0.0])}, {"reduction": "none"})
    # Large logits (the max is subtracted first).
    big = f32(np.array([[1000.0, 999.0, -1000.0], [-50.0, 60.0, 0.0]]))
    loss_case("cross_entropy_large_logits", "cross_entropy",
              {"logits": big, "targets": mx.array([1, 0], dtype=mx.int32)},
              {"reduction": "none"})

    z = f32(normal(rs, (8,), 2.0))
    t = f32([0, 1, 1, 0, 1, 0, 0.3, 1])
    p = f32(np.round(rs.uniform(0.01, 0.99, size=8), 3))
    for red in ["mean", "none"]:
        loss_case(f"bce_logits_{red}", "binary_cross_entropy",
                  {"inputs": z, "targets": t},
                  {"with_logits": True, "reduction": red},
                  grad_wrt="inputs" if red == "mean" else None)
        loss_case(f"bce_probs_{red}", "binary_cross_entropy",
                  {"inputs": p, "targets": t},
                  {"with_logits": False, "reduction": red})
    pe = f32([0.0, 1.0, 0.0, 1.0, 1e-30, 0.5])
    te = f32([0.0, 1.0, 1.0, 0.0, 1.0, 0.5])
    loss_case("bce_probs_edges_none", "binary_cross_entropy",
              {"inputs": pe, "targets": te},
              {"with_logits": False, "reduction": "none"})
    ze = f32([-100.0, 100.0, 0.0, 30.0])
    loss_case("bce_logits_extreme_none", "binary_cross_entropy",
              {"inputs": ze, "targets": f32([1.0, 0.0, 1.0, 1.0])},
              {"with_logits": True, "reduction": "none"})

    pr = f32(normal(rs, (3, 4)))
    tg = f32(normal(rs, (3, 4)))
    for red in ["mean", "sum", "none"]:
        loss_case(f"mse_{red}", "mse_loss", {"predictions": pr, "targets": tg},
                  {"reduction": red})
        loss_case(f"l1_{red}", "l1_loss", {"predictions": pr, "targets": tg},
                  {"reduction": red})

    lp = f32(normal(rs, (4, 6)))
    for red in ["none", "mean"]:
        loss_case(f"nll_{red}", "nll_loss", {"inputs": lp, "targets": targets},
                  {"reduction": red})

    def log_probs(a):
        a = a - a.max(axis=-1, keepdims=True)
        return a - np.log(np.exp(a).sum(axis=-1, keepdims=True))
    kin = f32(log_probs(normal(rs, (3, 5))))
    ktg = f32(log_probs(normal(rs, (3, 5))))
    for red in ["none", "mean"]:
        loss_case(f"kl_div_{red}", "kl_div_loss",
                  {"inputs": kin, "targets": ktg}, {"reduction": red})

    sp = f32(normal(rs, (2, 5), 2.0))
    st = f32(normal(rs, (2, 5)))
    for beta in [1.0, 0.5]:
        for red in ["mean", "none"]:
            loss_case(f"smooth_l1_beta{beta}_{red}", "smooth_l1_loss",
                      {"predictions": sp, "targets": st},
                      {"beta": beta, "reduction": red})
    for delta in [1.0, 0.5]:
        for red in ["none", "mean"]:
            loss_case(f"huber_delta{delta}_{red}", "huber_loss",
                      {"inputs": sp, "targets": st},
                      {"delta": delta, "reduction": red})
    return cases


# ----------------------------------------------------------------------------
# optimizers.json


def sched(name, *args):
    return {"schedule": name, "args": list(args)}


def build_schedule(spec):
    args = [build_schedule(a) if isinstance(a, dict) else
            ([build_schedule(s) for s in a]
             if isinstance(a, list) and a and isinstance(a[0], dict) else a)
            for a in spec["args"]]
    return getattr(optim, spec["schedule"])(*args)


def build_kwargs(kwargs):
    return {k: build_schedule(v) if isinstance(v, dict) and "schedule" in v
            else v for k, v in kwargs.items()}


def enc_tree(tree):
    return {k: enc(v) for k, v in tree_flatten(tree)}


def optimizer_cases():
    cases = []
    rs = np.random.RandomState(30)
    params0 = {"w": f32(normal(rs, (3, 4))), "b": f32(normal(rs, (4,)))}
    grads = [{"w": f32(normal(rs, (3, 4))), "b": f32(normal(rs, (4,)))}
             for _ in range(3)]
    configs = [
        ("sgd", "SGD", {"learning_rate": 0.1}),
        ("sgd_momentum", "SGD", {"learning_rate": 0.1, "momentum": 0.9}),
        ("sgd_nesterov", "SGD", {"learning_rate": 0.1, "momentum": 0.9,
                                 "nesterov": True}),
        ("sgd_momentum_wd", "SGD", {"learning_rate": 0.1, "momentum": 0.9,
                                    "weight_decay": 0.01}),
        ("sgd_momentum_dampening", "SGD", {"learning_rate": 0.1,
                                           "momentum": 0.9, "dampening": 0.1}),
        ("sgd_wd_no_momentum", "SGD", {"learning_rate": 0.1,
                                       "weight_decay": 0.01}),
        ("adam", "Adam", {"learning_rate": 0.01}),
        ("adam_betas_eps", "Adam", {"learning_rate": 0.01, "betas": [0.8, 0.9],
                                    "eps": 1e-6}),
        ("adam_bias_correction", "Adam", {"learning_rate": 0.01,
                                          "bias_correction": True}),
        ("adamw", "AdamW", {"learning_rate": 0.01}),
        ("adamw_wd_bias_correction", "AdamW", {"learning_rate": 0.01,
                                               "weight_decay": 0.1,
                                               "bias_correction": True}),
        ("sgd_cosine_schedule", "SGD",
         {"learning_rate": sched("cosine_decay", 0.1, 10)}),
        ("sgd_momentum_cosine_schedule", "SGD",
         {"learning_rate": sched("cosine_decay", 0.1, 10), "momentum": 0.9}),
    ]
    for name, cls, kwargs in configs:
        opt = getattr(optim, cls)(**build_kwargs(kwargs))
        params = dict(params0)
        steps = []
        lrs = []
        for g in grads:
            params = opt.apply_gradients(g, params)
            mx.eval(params, opt.state)
            steps.append(enc_tree(params))
            lrs.append(enc(opt.learning_rate))
        cases.append({"name": name, "kind": "optimizer", "optimizer": cls,
                      "kwargs": kwargs, "params": enc_tree(params0),
                      "grads": [enc_tree(g) for g in grads], "steps": steps,
                      "learning_rate_after_step": lrs,
                      "state": enc_tree(opt.state)})

    steps = [0, 1, 2, 5, 10, 20]
    schedules = [
        sched("cosine_decay", 0.1, 10),
        sched("cosine_decay", 0.1, 10, 0.01),
        sched("exponential_decay", 0.1, 0.9),
        sched("step_decay", 0.1, 0.5, 3),
        sched("linear_schedule", 0.0, 0.1, 5),
        sched("join_schedules", [sched("linear_schedule", 0.0, 0.1, 5),
                                 sched("cosine_decay", 0.1, 10)], [5]),
    ]
    for spec in schedules:
        fn = build_schedule(spec)
        vals = [fn(mx.array(s, mx.uint64)) for s in steps]
        for v in vals:
            assert v.dtype == mx.float32 and v.shape == (), (spec, v.dtype)
        name = spec["schedule"] + "_" + "_".join(
            str(a) for a in spec["args"] if not isinstance(a, list))
        cases.append({"name": f"schedule_{name}".rstrip("_"),
                      "kind": "schedule", "schedule": spec, "steps": steps,
                      "values": enc(mx.stack(vals))})

    for max_norm in [1.0, 100.0]:
        clipped, total = optim.clip_grad_norm(grads[0], max_norm=max_norm)
        mx.eval(clipped, total)
        cases.append({"name": f"clip_grad_norm_{max_norm}",
                      "kind": "clip_grad_norm", "max_norm": max_norm,
                      "grads": enc_tree(grads[0]), "clipped": enc_tree(clipped),
                      "total_norm": enc(total)})
    return cases


def weights_file():
    """An MLP's weights written by mlx.nn's save_weights (mlp_weights.safetensors), and
    its output for one input (mlp_weights.json: "x", "y"), for the interop test."""
    mx.random.seed(3)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model.save_weights(os.path.join(OUT_DIR, "mlp_weights.safetensors"))
    x = mx.array(f32(np.random.RandomState(11).normal(size=(3, 4)).round(3)))
    y = model(x)
    mx.eval(y)
    with open(os.path.join(OUT_DIR, "mlp_weights.json"), "w") as f:
        json.dump({"mlx_version": MLX_VERSION, "x": enc(x), "y": enc(y)}, f)


def main():
    assert mx.__version__ == MLX_VERSION, mx.__version__
    os.makedirs(OUT_DIR, exist_ok=True)
    write("quantize.json", quantize_cases())
    write("layers.json", layer_cases())
    write("optimizers.json", optimizer_cases())
    weights_file()


if __name__ == "__main__":
    main()
