#!/usr/bin/env bash
# Builds, on this Debian machine (CUDA toolkit, gRPC, Abseil, UCX), everything the service runs
# on a GPU machine that has CUDA but none of those libraries, and stages it for the trip:
# OUT/bin (stripped binaries: the server, the kernels' and the service's device tests, the
# benchmarks),
# OUT/python (the Python package with its libleapcache_c.so) and OUT/lib (Debian's shared
# libraries, scripts/stage_runtime_libs.sh). Then, on the GPU machine,
# from the repository root:   scripts/device_service_check.sh OUT RESULTS_DIR
#
# With ARCHIVE, the bundle is also written there as one xz-compressed tar (about a sixth of its
# size, for transports that limit what they carry); device_service_check.sh takes either.
#
#   scripts/stage_device_bundle.sh [OUT] [BUILD_DIR] [ARCHIVE]
#   (defaults: build-devrun, build-device, no archive)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-devrun}
build=${2:-build-device}
archive=${3:-}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLEAPCACHE_CUDA=ON >/dev/null
binaries=(
  service/server/leapcache-server
  tests/gpu/kernels_test
  tests/gpu/compute/cuda_live_states_test
  tests/gpu/compute/device_spans_test
  tests/gpu/compute/kernel_decoder_test
  tests/gpu/compute/kernel_encoder_test
  tests/gpu/service/device_tier_test
  tests/gpu/transport/transport_gpu_test
  service/bench/leapcache-decode-bench
  service/bench/leapcache-in-place-get-bench
  service/bench/leapcache-service-bench
  service/bench/leapcache-transfer-bench
)
targets=(leapcache_python)
for b in "${binaries[@]}"; do targets+=("$(basename "$b")"); done
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
rm -rf "$out"
mkdir -p "$out/bin" "$out/python"
for b in "${binaries[@]}"; do cp "$build/$b" "$out/bin/"; done
cp -r "$build/client/python/leapcache" "$out/python/"
strip "$out"/bin/* "$out"/python/leapcache/*.so
scripts/stage_runtime_libs.sh "$out" >/dev/null
du -sh "$out"
if [ -n "$archive" ]; then
  mkdir -p "$(dirname "$archive")"
  tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -T0 -6 > "$archive"
  du -sh "$archive"
fi
