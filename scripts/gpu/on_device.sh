#!/usr/bin/env bash
# On the GPU machine, from the repository's root (carried with `.gpu/` from collect.sh):
# runs every GPU test binary with NUVEC_REQUIRE_GPU=1, then `bench_gpu` against PyTorch
# unless given `tests`. Logs go to $OUT (or /tmp/nuvec-gpu). The binaries look for their
# fixtures where they were built, /work/main, so that path is made to point here.
set -uo pipefail
out="${OUT:-/tmp/nuvec-gpu}"
mkdir -p "$out"
if [ "$(readlink -f /work/main)" != "$PWD" ]; then
  mkdir -p /work && rm -rf /work/main && ln -s "$PWD" /work/main
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
export NUVEC_REQUIRE_GPU=1 NUVEC_REQUIRE_NVRTC=1
status=0
for t in no_gpu nvrtc gpu_ops gpu_arrays gpu_training gpu_generate; do
  [ -x ".gpu/$t" ] || { echo "MISSING .gpu/$t"; status=1; continue; }
  if ".gpu/$t" --test-threads=1 >"$out/$t.log" 2>&1; then
    echo "PASS $t: $(grep -E '^test result' "$out/$t.log" | tail -1)"
  else
    status=1
    echo "FAIL $t"; grep -E '^test .*FAILED|panicked|^---- ' "$out/$t.log" | head -20
    tail -30 "$out/$t.log"
  fi
done
if [ "${1:-}" != tests ]; then
  NUVEC_TORCH_SCRIPT="$PWD/scripts/bench/torch_gpu.py" .gpu/bench_gpu 2>&1 | tee "$out/bench_gpu.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
exit $status
