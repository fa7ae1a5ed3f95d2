#!/usr/bin/env python3
"""One rank of `cargo xtask bench-distributed`, MLX side: the same method as
crates/nuvec-bench/src/bin/bench_distributed.rs, over MLX's ring (mx.distributed).

Per (op, size): warm up twice, agree on the slowest warm-up with all_max, choose the
iteration count that fits --budget seconds, then time each iteration after a barrier
(a one-element all_sum); an iteration's time is the slowest rank's (all_max of the
per-iteration times); rank 0 prints one JSON line with the median and minimum.
Sizes are nccl-tests' "big buffer" bytes; pingpong's time is half the round trip.
An op MLX's ring does not support is reported with "error".
"""

import argparse
import json
import statistics
import time

import mlx.core as mx

DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16}


def parse_size(text):
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if scale > 1 else text) * scale


def bus_factor(op, n):
    if op == "all_sum":
        return 2 * (n - 1) / n
    if op in ("all_gather", "sum_scatter"):
        return (n - 1) / n
    return 1.0


def barrier(group):
    mx.eval(mx.distributed.all_sum(mx.array([1.0]), group=group))


def step(op, x, group):
    d = mx.distributed
    if op == "all_sum":
        out = d.all_sum(x, group=group)
    elif op == "all_gather":
        out = d.all_gather(x, group=group)
    elif op == "sum_scatter":
        out = d.sum_scatter(x, group=group)
    elif op == "pingpong":
        if group.rank() == 0:
            mx.eval(d.send(x, 1, group=group))
            out = d.recv_like(x, 1, group=group)
        elif group.rank() == 1:
            out = d.recv_like(x, 0, group=group)
            mx.eval(out)
            mx.eval(d.send(out, 0, group=group))
        else:
            out = x
    else:
        raise ValueError(op)
    mx.eval(out)
    return out


def make_input(op, nbytes, dtype, group):
    n = group.size()
    elements = nbytes // dtype.size
    if op == "all_gather":
        elements //= n
    elif op == "sum_scatter":
        elements = elements // n * n
    x = mx.full((elements,), group.rank() + 1, dtype=dtype)
    mx.eval(x)
    return x


def correct(op, out, group):
    n = group.size()
    values = out.astype(mx.float32)
    first, last = values[0].item(), values[-1].item()
    if op in ("all_sum", "sum_scatter"):
        return first == last == n * (n + 1) / 2
    if op == "all_gather":
        return first == 1 and last == n
    if op == "pingpong":
        return group.rank() > 1 or first == last == 1
    return False


def time_op(op, nbytes, args, group):
    dtype = DTYPES[args.dtype]
    x = make_input(op, nbytes, dtype, group)
    step(op, x, group)
    barrier(group)
    start = time.perf_counter()
    step(op, x, group)
    warm = time.perf_counter() - start
    warm = mx.distributed.all_max(mx.array([warm], dtype=mx.float32), group=group).item()
    iters = int(min(max(args.budget / max(warm, 1e-7), args.min_iters), args.max_iters))
    times = []
    out = x
    for _ in range(iters):
        # The previous output goes before the next call, as in the rank program.
        out = None
        barrier(group)
        start = time.perf_counter()
        out = step(op, x, group)
        # A ping-pong's time is one way: half the round trip.
        times.append((time.perf_counter() - start) / (2.0 if op == "pingpong" else 1.0))
    ok = correct(op, out, group)
    ok = mx.distributed.all_min(mx.array([1.0 if ok else 0.0]), group=group).item() == 1.0
    slowest = mx.distributed.all_max(mx.array(times, dtype=mx.float32), group=group).tolist()
    if group.rank() == 0:
        median = statistics.median(slowest)
        print(json.dumps({
            "impl": "mlx", "op": op, "bytes": nbytes, "ranks": group.size(),
            "dtype": args.dtype, "iters": iters, "median_us": median * 1e6,
            "min_us": min(slowest) * 1e6,
            "busbw_gbps": nbytes / median * bus_factor(op, group.size()) / 1e9,
            "ok": ok,
        }), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", default="all_sum,all_gather,sum_scatter,pingpong")
    parser.add_argument("--sizes", default="4K,64K,1M,16M,64M,256M")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--budget", type=float, default=1.0)
    parser.add_argument("--min-iters", type=int, default=5)
    parser.add_argument("--max-iters", type=int, default=2000)
    parser.add_argument("--backend", default="ring", choices=["ring", "jaccl"])
    args = parser.parse_args()
    group = mx.distributed.init(strict=True, backend=args.backend)
    for op in args.ops.split(","):
        for nbytes in map(parse_size, args.sizes.split(",")):
            try:
                time_op(op, nbytes, args, group)
            except Exception as error:  # an op the ring does not support
                if group.rank() == 0:
                    print(json.dumps({"impl": "mlx", "op": op, "bytes": nbytes,
                                      "ranks": group.size(), "dtype": args.dtype,
                                      "error": str(error)}), flush=True)
                break


if __name__ == "__main__":
    main()
