#!/usr/bin/env bash
# Builds the GPU test binaries and `bench_gpu` here (release, `cuda` on) and copies them,
# stripped of debug info, into `.gpu/` (ignored by git), which a call to the GPU machine
# carries: that machine has no Rust toolchain. Run from the repository's root.
set -euo pipefail
cargo test --release -p nuvec-cuda -p nuvec -p nuvec-nn -p nuvec-lm --features nuvec/cuda \
  --test gpu_ops --test gpu_arrays --test no_gpu --test gpu_training --test gpu_generate \
  --test nvrtc --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])
' >/tmp/nuvec-gpu-tests.txt
cargo build --release -p nuvec-bench --features cuda --bin bench_gpu
rm -rf .gpu && mkdir -p .gpu
while read -r name path; do
  strip --strip-all -o ".gpu/$name" "$path"
done </tmp/nuvec-gpu-tests.txt
strip --strip-all -o .gpu/bench_gpu target/release/bench_gpu
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
du -sh .gpu
