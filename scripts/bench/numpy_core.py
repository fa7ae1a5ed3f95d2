#!/usr/bin/env python3
"""numpy's side of the core-op benchmark: the same benchmarks as nuvec's
`crates/nuvec-bench/src/bin/bench_core.rs`, for comparison.

f32 matmul of square matrices (256, 1024, 2048), element-wise add and exp, and a full sum,
each over 16M (16 * 1024 * 1024) f32 elements. Inputs are built before the clock starts;
each benchmark warms up (at least 2 runs and 0.3 s), then times an adaptive number of runs
(about 1.5 s worth, at least 5, at most 200) and reports the median.

Run:

    python3 scripts/bench/numpy_core.py            # every benchmark
    python3 scripts/bench/numpy_core.py matmul     # names containing "matmul"

(`cargo xtask bench-core` runs this and the nuvec example alternately and compares them.)

Output, one JSON object per line on stdout: first a line describing numpy
(`{"meta":"numpy","numpy_version":...,"blas":...,"python":...}`), then one line per benchmark:

    {"bench":"matmul_f32_256","median_ms":0.4123,"iters":200}

numpy runs with its default threading: BLAS (matmul) uses its own thread pool, the
element-wise ops and the sum run on one thread.
"""

import json
import platform
import sys
import time

import numpy as np

ELEMENTWISE_LEN = 16 * 1024 * 1024
TARGET_S = 1.5
WARMUP_S = 0.3
MIN_WARMUP_ITERS = 2
MAX_WARMUP_ITERS = 50
MIN_ITERS = 5
MAX_ITERS = 200


def pattern(length, seed):
    """The nuvec example's pattern: ((i * 7919 + seed * 104729) % 1000) / 1000 - 0.5, as f32."""
    i = np.arange(length, dtype=np.int64)
    values = (i * 7919 + seed * 104729) % 1000
    return (values.astype(np.float32) / np.float32(1000.0) - np.float32(0.5)).astype(np.float32)


def blas_name():
    """The BLAS numpy was built against, from show_config's dict form (which prints nothing)."""
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # older numpy without mode="dicts", or a changed layout
        return "unknown"


def time_once(fn):
    start = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - start
    del out
    return elapsed


def median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def run(name, fn):
    warm = []
    warm_start = time.perf_counter()
    while len(warm) < MIN_WARMUP_ITERS or (
        time.perf_counter() - warm_start < WARMUP_S and len(warm) < MAX_WARMUP_ITERS
    ):
        warm.append(time_once(fn))
    estimate = max(median(warm), 1e-9)
    iters = min(max(int(-(-TARGET_S // estimate)), MIN_ITERS), MAX_ITERS)
    times = [time_once(fn) for _ in range(iters)]
    print(
        json.dumps({"bench": name, "median_ms": round(median(times) * 1e3, 4), "iters": iters}),
        flush=True,
    )


def main():
    filters = sys.argv[1:]

    def wanted(name):
        return not filters or any(f in name for f in filters)

    print(
        json.dumps(
            {
                "meta": "numpy",
                "numpy_version": np.__version__,
                "blas": blas_name(),
                "python": platform.python_version(),
            }
        ),
        flush=True,
    )

    for n in (256, 1024, 2048):
        name = f"matmul_f32_{n}"
        if wanted(name):
            a = pattern(n * n, 1).reshape(n, n)
            b = pattern(n * n, 2).reshape(n, n)
            run(name, lambda a=a, b=b: np.matmul(a, b))

    if any(wanted(name) for name in ("add_f32_16m", "exp_f32_16m", "sum_f32_16m")):
        x = pattern(ELEMENTWISE_LEN, 3)
        y = pattern(ELEMENTWISE_LEN, 4)
        if wanted("add_f32_16m"):
            run("add_f32_16m", lambda: np.add(x, y))
        if wanted("exp_f32_16m"):
            run("exp_f32_16m", lambda: np.exp(x))
        if wanted("sum_f32_16m"):
            run("sum_f32_16m", lambda: np.sum(x))

    # Attention's softmax: 14 heads of 512 x 512 scores, over the last axis.
    if wanted("softmax_f32_7168x512"):
        scores = pattern(7168 * 512, 5).reshape(7168, 512)

        def softmax():
            e = np.exp(scores - scores.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)

        run("softmax_f32_7168x512", softmax)


if __name__ == "__main__":
    main()
