#!/usr/bin/env bash
# Soak: mixed load on one real leapcache-server for SECONDS (default 3600) with evictions and
# spills (small tiers), client SIGKILLs and server SIGKILL/restarts, every get verified byte for
# byte by leapcache-load. Each round starts CLIENTS load clients (own tenant and seed each),
# SIGKILLs one of them mid-run, and every third round SIGKILLs the server mid-run and starts a
# new one. Once a round's clients are gone (and the killed writers' put TTL has passed) the
# server must hold no read lease, no pending put and no reserved page. Every client keeps its
# checked gets in a counters file as it runs (leapcache-load --counters_file), so the gets a
# SIGKILLed client verified before it died count too.
#
# The states are small (2 layers x 2 heads of 16 x 16, each with a bf16 conv state of 24
# channels x 3 and 4 extra bytes; 64-token blocks: checkpoints of a few KiB in 64 KiB pages) so
# that the hour is spent on many verified gets, puts and evictions rather than on moving large
# payloads; REQUESTS (default 20000) per client and format per round keeps
# the rounds long against the wait for the killed client's puts to expire.
#
#   scripts/soak.sh BUILD_DIR [SECONDS] [OUT]     (OUT default: results/soak/soak.md)
#
# Exit 1 on any wrong byte or any leak; the totals go to OUT with the commit they ran on.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/soak.sh BUILD_DIR [SECONDS] [OUT]}
seconds=${2:-3600}
out=${3:-results/soak/soak.md}
clients=${CLIENTS:-4}
requests=${REQUESTS:-20000}
server_bin="$build/service/server/leapcache-server"
load_bin="$build/load/leapcache-load"
work=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
python=/usr/bin/python3

server_pid=""
grpc=""
metrics=""
restarts=0
start_server() {
  local log="$work/server-$restarts.log"
  "$server_bin" --listen=127.0.0.1:0 --metrics-listen=127.0.0.1:0 --memory-budget=48MiB \
    --spill-budget=48MiB --page-bytes=64KiB --put-ttl=5s --reaper-interval=500ms \
    --decode-memory-budget=0 >"$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 200); do
    grpc=$(sed -n 's/^leapcache-server listening on //p' "$log")
    metrics=$(sed -n 's/^leapcache-server metrics on //p' "$log")
    [ -n "$grpc" ] && [ -n "$metrics" ] && return 0
    sleep 0.05
  done
  echo "soak: the server did not start" >&2
  cat "$log" >&2
  exit 1
}
metric() {  # the value of an unlabelled series, summed over its lines
  curl -s "http://$metrics/metrics" | awk -v name="$1" '$1 == name || index($1, name "{") == 1 { s += $2 } END { print s + 0 }'
}

start_server
deadline=$(( $(date +%s) + seconds ))
round=0 completed=0 killed=0 leaks=0
while [ "$(date +%s)" -lt "$deadline" ]; do
  round=$((round + 1))
  pids=()
  for i in $(seq "$clients"); do
    # A fixed seed per client slot: each round replays its slot's workload, so later rounds hit
    # (and verify) checkpoints that earlier rounds put, spilled or promoted.
    "$load_bin" --server="$grpc" --tenant="soak-$i" --seed="$i" \
      --formats=leap8,bf16 --scenario=mixed --requests="$requests" --engines=4 --slots=8 \
      --population=48 --time_scale=0 --keep --dk=16 --dv=16 --heads=2 --layers=2 \
      --conv_channels=48 --conv_width=3 --extra_bytes=4 \
      --block_tokens=64 --out="$work/r$round-c$i" --counters_file="$work/r$round-c$i.counts" \
      >"$work/r$round-c$i.log" 2>&1 &
    pids+=($!)
  done
  sleep "$(( 5 + RANDOM % 20 ))"
  victim=${pids[$((RANDOM % clients))]}
  kill -9 "$victim" 2>/dev/null && killed=$((killed + 1)) || true
  if [ $((round % 3)) -eq 0 ]; then
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    restarts=$((restarts + 1))
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    start_server
    continue
  fi
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # The killed client's puts expire (put_ttl 5 s, reaper 0.5 s); then nothing may be held.
  sleep 6
  leases=$(metric leapcache_read_leases)
  pending=$(metric leapcache_pending_puts)
  reserved=$(metric leapcache_tier_reserved_bytes)
  if [ "$leases" != 0 ] || [ "$pending" != 0 ] || [ "$reserved" != 0 ]; then
    echo "soak: round $round left $leases leases, $pending pending puts, $reserved reserved bytes" >&2
    leaks=$((leaks + 1))
  fi
done
kill -TERM "$server_pid" 2>/dev/null || true
wait "$server_pid" 2>/dev/null || true

# Every client's checked gets, from the counts it kept up to date as it ran (a SIGKILLed
# client's up to its last write), and how many clients finished with a report.
read -r reports verified mismatched missing <<<"$("$python" - "$work" <<'PY'
import glob, sys
reports = len(glob.glob(sys.argv[1] + "/*/report.json"))
verified = mismatched = missing = 0
for path in glob.glob(sys.argv[1] + "/*.counts"):
    try:
        fields = dict(kv.split("=") for kv in open(path).read().split())
    except (OSError, ValueError):
        continue
    verified += int(fields.get("verified", 0))
    mismatched += int(fields.get("mismatched", 0))
    missing += int(fields.get("missing", 0))
print(reports, verified, mismatched, missing)
PY
)"
mkdir -p "$(dirname "$out")"
{
  echo "# Soak on $(git rev-parse --short HEAD)"
  echo
  echo "\`REQUESTS=$requests CLIENTS=$clients scripts/soak.sh $build $seconds\`, $(nproc) cores, $(date -u +%Y-%m-%d)."
  echo
  echo "| seconds | rounds | client reports | clients SIGKILLed | server SIGKILL + restarts | gets verified byte for byte | wrong bytes (mismatched gets) | missing | rounds with leaks |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  echo "| $seconds | $round | $reports | $killed | $restarts | $verified | $mismatched | $missing | $leaks |"
} >"$out"
cat "$out"
[ "$mismatched" = 0 ] && [ "$leaks" = 0 ]
