#!/usr/bin/env bash
# Stages the Debian shared libraries that leapcache's service binaries (server, client tools,
# integration tests, benchmarks) load and that a GPU machine without gRPC, Abseil or UCX lacks:
# downloads the packages (apt-get download, no install) and unpacks them with dpkg -x into
# OUT/lib. Run there with LD_LIBRARY_PATH=OUT/lib (UCX also needs UCX_MODULE_DIR=OUT/lib/ucx).
#
#   scripts/stage_runtime_libs.sh build-runtime      # then ship build-runtime/ with the binaries
set -euo pipefail
out=${1:?usage: stage_runtime_libs.sh OUT_DIR}
packages=(
  libabsl20220623 libgrpc29 libgrpc++1.51 libprotobuf32 libre2-9 libc-ares2 libyaml-cpp0.7
  libcivetweb1 libucx0 libnuma1
)
mkdir -p "$out/debs" "$out/root" "$out/lib"
(cd "$out/debs" && apt-get download "${packages[@]}" >/dev/null)
for deb in "$out"/debs/*.deb; do dpkg -x "$deb" "$out/root"; done
cp -a "$out"/root/usr/lib/x86_64-linux-gnu/. "$out/lib/"
rm -rf "$out/debs" "$out/root"
# Only the shared objects and UCX's transport modules are needed.
find "$out/lib" -mindepth 1 -maxdepth 1 ! -name '*.so*' ! -name ucx -exec rm -rf {} +
du -sh "$out/lib"
