#!/usr/bin/env bash
# On a machine with an NVIDIA Hopper GPU, in one call: build the kernels (sm_90a), run the
# device tests against the CPU reference, and time every kernel variant. Writes the test log
# and the benchmark's JSON and Markdown to the output folder (default results/kernels).
#   scripts/gpu_check.sh [OUT_DIR] [extra benchmark flags]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/kernels}
shift || true
mkdir -p "$out"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLEAPCACHE_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="${CUDACXX:-/usr/local/cuda/bin/nvcc}" -DLEAPCACHE_BUILD_SERVICE=OFF \
  > "$out/configure.log"
targets=(kernels_test code_packing_test)
[ -z "${LEAPCACHE_SKIP_BENCH:-}" ] && targets+=(leapcache-kernel-bench)
cmake --build build-gpu -j "$(nproc)" --target "${targets[@]}" > "$out/build.log" 2>&1 ||
  { tail -50 "$out/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
status=0
# Both device test binaries into one log; each must report PASSED and none FAILED.
: > "$out/device_tests.log"
for t in kernels_test code_packing_test; do
  build-gpu/tests/gpu/$t --gtest_color=no > "$out/$t.log" 2>&1 || true
  cat "$out/$t.log" >> "$out/device_tests.log"
  grep -E "^\[  (PASSED|FAILED) |FAILED|readout error|Failure|Expected|Which is|seed" "$out/$t.log" || true
  grep -q "^\[  PASSED  \]" "$out/$t.log" && ! grep -q "^\[  FAILED  \]" "$out/$t.log" || status=1
  rm "$out/$t.log"
done
if [ -z "${LEAPCACHE_SKIP_BENCH:-}" ]; then
  build-gpu/gpu/bench/leapcache-kernel-bench --out "$out" "$@"
fi
exit $status
