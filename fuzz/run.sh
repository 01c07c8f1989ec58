#!/usr/bin/env bash
# Runs every fuzz target of a LEAPCACHE_FUZZ build for a bounded time, starting from its
# committed seed corpus (fuzz/corpus/<target>/, never modified here: new inputs go to a scratch
# directory). Stops at the first failure; the input that caused it is kept under
# BUILD_DIR/fuzz-artifacts/ (add it to the corpus once the bug is fixed).
#
#   fuzz/run.sh BUILD_DIR [SECONDS_PER_TARGET]    (default 25)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: fuzz/run.sh BUILD_DIR [SECONDS_PER_TARGET]}
seconds=${2:-25}
artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for target in blob_parser npy_reader config_loader proto_request ucx_wire engine_request \
    peer_descriptor; do
  mkdir -p "$work/$target"
  echo "fuzz: $target for ${seconds}s"
  # -timeout: an input taking over 10 s counts as a hang; -rss_limit_mb bounds a leak or blow-up.
  log="$work/$target.log"
  if ! UCX_LOG_LEVEL=fatal TMPDIR="$work" "$build/fuzz/${target}_fuzzer" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/${target}-" \
      "$work/$target" "fuzz/corpus/$target" >"$log" 2>&1; then
    tail -n 80 "$log" >&2
    echo "fuzz: $target failed; the input is in $artifacts/" >&2
    exit 1
  fi
  grep -E "^#[0-9]+[[:space:]]+DONE|^stat::(number_of_executed_units|peak_rss_mb)" "$log" || true
done
echo "fuzz: all targets passed"
