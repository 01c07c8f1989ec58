#!/usr/bin/env bash
# Lookups against redis GET on the same machine, in the same run.
#
#   scripts/lookup_bench.sh BUILD [OUT]
#
# Starts a redis-server and a leapcache-server (CPU backend, loopback) on this machine and, for
# ROUNDS rounds, measures back to back at 1, 8 and 64 clients:
#   - redis-benchmark GET of 64-byte values over 100,000 keys, one request in flight per client,
#     and pipelined BATCH deep (-P);
#   - leapcache-service-bench lookups of 32-block chains through the client library, one Lookup
#     per call, and LookupBatch calls of BATCH lookups (one call in flight per client);
#   - the same single lookups by attached engines, through their sessions' transfer channels
#     (shared memory: the path of an engine on the cache's host).
# The client and the server share the machine's cores in both cases. Each ratio is
# leapcache / redis within one round (the machine's speed drifts between minutes); the table gives
# the median over rounds and the worst round. OUT (optional) receives lookups.md and the raw
# rows (raw.tsv).
#
# Environment: ROUNDS (3), ROW_SECONDS (2, leapcache's seconds per row), BATCH (64).
# Needs redis-server and redis-benchmark (Debian's redis-server and redis-tools).
set -euo pipefail

build=${1:?usage: scripts/lookup_bench.sh BUILD [OUT]}
out=${2:-}
rounds=${ROUNDS:-3}
row_seconds=${ROW_SECONDS:-2}
batch=${BATCH:-64}
server_bin="$build/service/server/leapcache-server"
bench_bin="$build/service/bench/leapcache-service-bench"
for b in "$server_bin" "$bench_bin"; do
  [[ -x "$b" ]] || { echo "lookup_bench: $b not built" >&2; exit 1; }
done
for t in redis-server redis-benchmark; do
  command -v "$t" > /dev/null || { echo "lookup_bench: $t not installed (apt-get install redis-server redis-tools)" >&2; exit 1; }
done

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$work" > "$work/redis.log" 2>&1 &
pids+=($!)
"$server_bin" --listen=127.0.0.1:0 --metrics-listen= --memory-budget=1GiB \
  --port-file="$work/port" > "$work/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  [[ -s "$work/port" ]] && redis-cli -p "$redis_port" ping > /dev/null 2>&1 && break
  sleep 0.1
done
[[ -s "$work/port" ]] || { cat "$work/server.log" >&2; exit 1; }
target="127.0.0.1:$(cat "$work/port")"
redis-benchmark -p "$redis_port" -t set -r 100000 -n 200000 -d 64 -q > /dev/null

# requests/s of one redis-benchmark GET row.
redis_row() {  # clients pipeline requests
  redis-benchmark -p "$redis_port" -t get -r 100000 -d 64 -c "$1" -P "$2" -n "$3" --csv |
    awk -F'"' '$2 == "GET" { print $4 }'
}

raw="$work/raw.tsv"
printf 'round\tsystem\tper_call\tclients\tper_second\n' > "$raw"
for r in $(seq "$rounds"); do
  for c in 1 8 64; do
    n=$((c == 1 ? 40000 : 100000))
    printf '%s\tredis\t1\t%s\t%s\n' "$r" "$c" "$(redis_row "$c" 1 "$n")" >> "$raw"
    printf '%s\tredis\t%s\t%s\t%s\n' "$r" "$batch" "$c" "$(redis_row "$c" "$batch" $((n * 20)))" >> "$raw"
  done
  "$bench_bin" --target="$target" --lookups-only --seconds="$row_seconds" \
    --lookup-batches="1,$batch" --lookup-clients=1,8,64 |
    awk -F'|' -v r="$r" '$2 ~ /^ *[0-9]+ *$/ {
      gsub(/ /, "", $2); gsub(/ /, "", $3); gsub(/ /, "", $4)
      printf "%s\tleapcache\t%s\t%s\t%s\n", r, $2, $3, $4 }' >> "$raw"
  "$bench_bin" --target="$target" --lookups-only --seconds="$row_seconds" --lookup-engines \
    --lookup-batches=1 --lookup-clients=1,8,64 |
    awk -F'|' -v r="$r" '$2 ~ /^ *[0-9]+ *$/ {
      gsub(/ /, "", $3); gsub(/ /, "", $4)
      printf "%s\tleapcache\tengine\t%s\t%s\n", r, $3, $4 }' >> "$raw"
done

report=$(/usr/bin/python3 - "$raw" "$batch" "$rounds" "$(nproc)" <<'EOF'
import collections, statistics, sys
raw, batch, rounds, cores = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = collections.defaultdict(dict)  # (per_call, clients) -> round -> {system: rate}
engine = collections.defaultdict(dict)  # clients -> round -> engine lookups/s
for line in open(raw).read().splitlines()[1:]:
    r, system, per_call, clients, rate = line.split("\t")
    if per_call == "engine":
        engine[int(clients)][r] = float(rate)
        continue
    rows[(int(per_call), int(clients))].setdefault(r, {})[system] = float(rate)
for clients, by_round in engine.items():  # against redis's GET without pipelining
    for r, rate in by_round.items():
        redis = rows[(1, clients)].get(r, {}).get("redis")
        if redis is not None:
            rows[("engine", clients)][r] = {"redis": redis, "leapcache": rate}
print(f"Lookups against redis GET, {cores} cores shared by client and server, {rounds} rounds "
      f"(median; worst round's ratio)\n")
print("| per call | clients | redis GET/s | leapcache lookups/s | leapcache / redis | worst round |")
print("|---|---:|---:|---:|---:|---:|")
def order(key):
    per_call, clients = key
    return (0 if per_call == 1 else 2 if per_call == "engine" else 1, clients)
for (per_call, clients), by_round in sorted(rows.items(), key=lambda kv: order(kv[0])):
    both = [v for v in by_round.values() if "redis" in v and "leapcache" in v]
    ratios = [v["leapcache"] / v["redis"] for v in both]
    what = ("1 (Lookup / GET)" if per_call == 1 else
            "1 (engine, transfer channel / GET)" if per_call == "engine" else
            f"{per_call} (LookupBatch / GET -P {per_call})")
    print(f"| {what} | {clients} | {statistics.median(v['redis'] for v in both):,.0f} | "
          f"{statistics.median(v['leapcache'] for v in both):,.0f} | "
          f"{statistics.median(ratios):.2f}x | {min(ratios):.2f}x |")
EOF
)
echo "$report"
if [[ -n "$out" ]]; then
  mkdir -p "$out"
  cp "$raw" "$out/raw.tsv"
  {
    echo "# Lookups against redis GET"
    echo
    echo "\`ROUNDS=$rounds ROW_SECONDS=$row_seconds BATCH=$batch scripts/lookup_bench.sh BUILD\`"
    echo "($(redis-server --version | cut -d' ' -f1-3), $(nproc) cores, $(date -u +%Y-%m-%d))."
    echo
    echo "$report"
  } > "$out/lookups.md"
fi
