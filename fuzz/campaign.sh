#!/usr/bin/env bash
# The long fuzz campaign (outside CI): every target of a LEAPCACHE_FUZZ build for RUNS executions
# (default 10,000,000), one after the other, from its committed corpus plus a scratch directory
# that keeps what the campaign found. Writes OUT (default results/fuzz/campaign.md): per target
# the executions, seconds, executions per second, corpus growth and peak RSS, with the commit it
# ran on. Stops at the first crash, whose input stays in BUILD_DIR/fuzz-artifacts/.
#
#   fuzz/campaign.sh BUILD_DIR [RUNS] [OUT]
#
# TARGETS (default: all, in order) names the targets to run, so that targets can run side by side
# on a machine with more cores, one campaign per target and OUT each. MAX_SECONDS caps each
# target's time: a target stopped by it reports the executions it reached, below RUNS. FORK=N
# runs one target as N libFuzzer worker processes sharing its corpus (libFuzzer's -fork; RUNS
# and MAX_SECONDS are then totals over the workers).
#
# ucx_wire_fuzzer runs every blob the checks accept through a real UCX endpoint (a worker per
# Connect): it manages tens of executions per second where the others manage thousands, so its
# RUNS can be given apart as UCX_WIRE_RUNS; engine_request_fuzzer (a data plane and a decode table
# per input, UCX endpoints to a real engine) manages about a hundred: ENGINE_REQUEST_RUNS.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: fuzz/campaign.sh BUILD_DIR [RUNS] [OUT]}
runs=${2:-10000000}
out=${3:-results/fuzz/campaign.md}
artifacts="$build/fuzz-artifacts"
work="$build/fuzz-campaign"
mkdir -p "$artifacts" "$work" "$(dirname "$out")"

commit=${COMMIT:-$(git rev-parse --short HEAD)}  # COMMIT: where the tree has no .git
{
  echo "# Fuzz campaign on $commit"
  echo
  settings=""
  for v in TARGETS FORK MAX_SECONDS; do
    if [ -n "${!v:-}" ]; then settings+="$v=${!v// /,} "; fi
  done
  echo "\`${settings}fuzz/campaign.sh $build $runs\`, $(nproc) cores, $(date -u +%Y-%m-%d)."
  echo
  echo "| target | executions | seconds | exec/s | corpus (seed -> end) | peak RSS MiB | result |"
  echo "|---|---:|---:|---:|---|---:|---|"
} >"$out.tmp"

targets=${TARGETS:-blob_parser npy_reader config_loader proto_request ucx_wire engine_request peer_descriptor}
extra=()
if [ -n "${MAX_SECONDS:-}" ]; then extra+=(-max_total_time="$MAX_SECONDS"); fi
if [ -n "${FORK:-}" ]; then extra+=(-fork="$FORK"); fi
for target in $targets; do
  n=$runs
  if [ "$target" = ucx_wire ]; then n=${UCX_WIRE_RUNS:-$runs}; fi
  if [ "$target" = engine_request ]; then n=${ENGINE_REQUEST_RUNS:-$runs}; fi
  mkdir -p "$work/$target"
  seeds=$(ls "fuzz/corpus/$target" | wc -l)
  log="$work/$target.log"
  echo "campaign: $target for $n executions"
  start=$(date +%s)
  result=ok
  if ! UCX_LOG_LEVEL=fatal "$build/fuzz/${target}_fuzzer" -runs="$n" "${extra[@]}" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/${target}-" \
      "$work/$target" "fuzz/corpus/$target" >"$log" 2>&1; then
    result="CRASH (input in $artifacts/)"
  fi
  seconds=$(( $(date +%s) - start ))
  executed=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if [ -n "${FORK:-}" ]; then  # the parent's last progress line counts every worker's
    executed=$(sed -n 's/^#\([0-9]*\): cov:.*/\1/p' "$log" | tail -n 1)
  fi
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -n 1)
  corpus=$(( seeds + $(ls "$work/$target" | wc -l) ))
  rate=$(( ${executed:-0} / (seconds > 0 ? seconds : 1) ))
  echo "| $target | ${executed:-?} | $seconds | $rate | $seeds -> $corpus | ${rss:-?} | $result |" \
    >>"$out.tmp"
  if [ "$result" != ok ]; then
    mv "$out.tmp" "$out"
    tail -n 60 "$log" >&2
    exit 1
  fi
done
mv "$out.tmp" "$out"
cat "$out"
