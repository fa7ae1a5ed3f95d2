#!/usr/bin/env bash
# 2-rank ping-pongs of nuvec and of MLX's ring, launched alternately, each after a reading of
# scripts/bench/cross_core.rs, so that each pair can be compared in the machine's state at
# the time (docs/performance.md, "Tuning measurements"). Needs the release builds and MLX in
# .venv-mlx (cargo xtask bench-distributed makes both).
#
#   scripts/bench/paired_pingpong.sh [ROUNDS] [SIZES]      # defaults: 8 1M,16M
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-8}
sizes=${2:-1M,16M}
for needed in target/release/nuvec target/release/examples/bench_distributed .venv-mlx/bin/python; do
  [ -x "$needed" ] || { echo "missing $needed: run cargo xtask bench-distributed first" >&2; exit 1; }
done
rustc --edition 2021 -O scripts/bench/cross_core.rs -o target/cross_core
hostfile=$(mktemp)
trap 'rm -f "$hostfile"' EXIT
port=28000
medians() { grep -o '"median_us": [0-9.]*' | sed 's/"median_us": //' | xargs printf '%.1f µs  '; }
for round in $(seq "$rounds"); do
  for side in nuvec mlx; do
    port=$((port + 20))
    probe=$(target/cross_core)
    if [ "$side" = nuvec ]; then
      out=$(target/release/nuvec launch -n 2 -p "$port" --no-prefix -- \
        target/release/examples/bench_distributed --ops pingpong --sizes "$sizes" --budget 1 </dev/null)
    else
      echo "[[\"127.0.0.1:$port\"], [\"127.0.0.1:$((port + 1))\"]]" > "$hostfile"
      MLX_RANK=1 MLX_HOSTFILE="$hostfile" .venv-mlx/bin/python scripts/bench/mlx_collectives.py \
        --ops pingpong --sizes "$sizes" --budget 1 >/dev/null </dev/null &
      out=$(MLX_RANK=0 MLX_HOSTFILE="$hostfile" .venv-mlx/bin/python scripts/bench/mlx_collectives.py \
        --ops pingpong --sizes "$sizes" --budget 1 </dev/null)
      wait
    fi
    echo "round $round  $side  cross-core ${probe} ns  $sizes: $(echo "$out" | medians)"
  done
done
