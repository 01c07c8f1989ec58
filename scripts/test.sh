#!/usr/bin/env bash
# Builds and runs every test that needs no GPU, three times: an optimised build (all labels
# except gpu), then an AddressSanitizer + UndefinedBehaviorSanitizer build (also without the long
# accuracy acceptance run, which the first pass covers), then a ThreadSanitizer build of only the
# cache core's tests (label core; TSan needs everything instrumented, and the core is where the
# concurrency is).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$jobs"
ctest --test-dir build -LE gpu --output-on-failure -j "$jobs"

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLEAPCACHE_SANITIZE=ON \
  -DLEAPCACHE_CUDA=OFF
cmake --build build-asan -j "$jobs"
ctest --test-dir build-asan -LE 'gpu|accuracy' --output-on-failure -j "$jobs"

cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLEAPCACHE_TSAN=ON \
  -DLEAPCACHE_CUDA=OFF
cmake --build build-tsan -j "$jobs" --target leapcache_core_tests
ctest --test-dir build-tsan -L core --output-on-failure -j "$jobs"

# Fuzz targets (fuzz/): a clang build with libFuzzer, ASan and UBSan; each target runs for 20 s
# from its committed seed corpus, and any crash or violated invariant fails the run.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
  -DLEAPCACHE_FUZZ=ON -DLEAPCACHE_CUDA=OFF -DLEAPCACHE_BUILD_TESTS=OFF
cmake --build build-fuzz -j "$jobs" --target leapcache_fuzzers
fuzz/run.sh build-fuzz 20
