"""PyTorch's side of `cargo xtask bench-gpu`: the same operations on the same sizes, timed the
same way (median of timed runs after warm-ups, each run ended by a device synchronize). Prints
one JSON object: {name: seconds}."""
import json
import sys

import torch


def median_time(run, warm=3, runs=10):
    for _ in range(warm):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(0.7978846 * (x + 0.044715 * x * x * x)))


def main():
    if not torch.cuda.is_available():
        sys.exit("torch_gpu.py: PyTorch sees no GPU")
    dev = "cuda"
    n = 1 << 28  # 1 GiB of float32
    x = torch.rand(n, device=dev)
    y = torch.rand(n, device=dev)
    out = torch.empty_like(x)
    rows = x.view(1 << 16, 1 << 12)
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    compiled_gelu = torch.compile(gelu)
    times = {
        "copy": median_time(lambda: out.copy_(x)),
        "x + 1": median_time(lambda: torch.add(x, 1.0)),
        "add": median_time(lambda: torch.add(x, y)),
        "exp": median_time(lambda: torch.exp(x)),
        "sum_rows": median_time(lambda: rows.sum(dim=1)),
        "softmax": median_time(lambda: torch.softmax(rows, dim=1)),
        "matmul_bf16": median_time(lambda: a @ b),
        "gelu_compiled": median_time(lambda: compiled_gelu(x)),
    }
    print(json.dumps(times))


main()
