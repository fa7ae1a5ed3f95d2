"""Which slice of each tensor every rank holds after mlx-lm 0.32.2's `model.shard(group)`,
for nuvec-lm's tensor-parallel test (crates/nuvec-lm/tests/tensor_parallel.rs).

Run from the repository root with mlx 0.32.4 and mlx-lm 0.32.2 installed:

    python scripts/golden/make_shard_fixtures.py

mlx-lm's sharding reads only the group's `rank()` and `size()` while it slices, so a stand-in
group gives each rank's model in one process. For each model folder of
crates/nuvec-lm/tests/fixtures named below and each rank of 2, the fixture records every
parameter of the sharded model (mlx-lm's names): its shape, dtype, and the sum and the sum
of absolute values of its elements in float64 (unsigned integers summed exactly). Writes
crates/nuvec-lm/tests/fixtures/shards.json:

    {"mlx_version", "mlx_lm_version", "ranks": 2,
     "models": {NAME: [ {PARAMETER: {"shape", "dtype", "sum", "abs_sum"}} per rank ]}}
"""

import json
from pathlib import Path

import mlx.core as mx
import mlx_lm
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm import load

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "crates" / "nuvec-lm" / "tests" / "fixtures"
MODELS = ["llama-f32", "qwen2-q4", "qwen3-q4", "qwen3_moe-f32"]
RANKS = 2


class StandInGroup:
    """What mlx-lm's shard asks of a group while it slices."""

    def __init__(self, rank, size):
        self._rank, self._size = rank, size

    def rank(self):
        return self._rank

    def size(self):
        return self._size


def summary(array):
    values = np.array(array.astype(mx.float32) if array.dtype == mx.bfloat16 else array)
    wide = values.astype(np.uint64 if values.dtype.kind == "u" else np.float64)
    return {"shape": list(array.shape), "dtype": str(array.dtype).split(".")[-1],
            "sum": float(wide.sum()), "abs_sum": float(np.abs(wide).sum())}


def main():
    assert mx.__version__ == "0.32.4", mx.__version__
    assert mlx_lm.__version__ == "0.32.2", mlx_lm.__version__
    models = {}
    for name in MODELS:
        per_rank = []
        for rank in range(RANKS):
            model, _ = load(str(FIXTURES / name))
            model.shard(StandInGroup(rank, RANKS))
            mx.eval(model.parameters())
            per_rank.append({k: summary(v) for k, v in tree_flatten(model.parameters())})
        models[name] = per_rank
    out = {"mlx_version": mx.__version__, "mlx_lm_version": mlx_lm.__version__,
           "ranks": RANKS, "models": models}
    path = FIXTURES / "shards.json"
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
