#!/usr/bin/env bash
# Installs the Debian 12 packages leapcache's build and tests need. Idempotent; run as root or
# with sudo available. CUDA is optional and comes from the CUDA toolkit, not from here.
set -euo pipefail

packages=(
  build-essential  # g++ 12
  cmake            # 3.25
  ninja-build
  libgtest-dev     # GoogleTest (unit tests)
  clang-14            # fuzz targets (fuzz/, scripts/test.sh): libFuzzer builds
  libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes of clang 14
  libabsl-dev      # Abseil 20220623 (service: Status, Mutex, containers, time)
  libssl-dev       # OpenSSL libcrypto (service: SHA-256 block hashes)
  openssl          # TLS tests: a throw-away CA and certificates made at test time
  pkg-config              # finds gRPC (grpc++.pc)
  libgrpc++-dev           # gRPC 1.51 (service and client)
  libprotobuf-dev         # protobuf 3.21 runtime
  protobuf-compiler       # protoc
  protobuf-compiler-grpc  # grpc_cpp_plugin
  libcivetweb-dev         # HTTP server of /metrics, /healthz, /readyz
  libyaml-cpp-dev         # server configuration file
  gnuplot-nox             # load tester (load/): the report's PNG plots
  libucx-dev              # UCX 1.13 (data-plane transport; pulls the libucx0 runtime)
  prometheus              # prometheus + promtool for the metrics integration test
  python3                              # deploy tests (tests/deploy)
  python3-numpy                        # Python client tests (tests/python)
  python3-pytest                       # Python client tests
  python3-torch                        # Python client tests (CPU tensors)
  golang-go                            # deploy tests: builds the chart renderer and gRPC probe
  golang-github-masterminds-sprig-dev  # deploy tests: Helm's template functions
  golang-gopkg-yaml.v3-dev             # deploy tests: YAML in the chart renderer
  golang-google-grpc-dev               # deploy tests: gRPC health probe (as the kubelet's)
)

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
echo "bootstrap: all packages present"
