#!/usr/bin/env bash
# On a machine with two GPUs, with a bundle from scripts/stage_device_bundle.sh: the service on
# GPU 0 and an engine on GPU 1. Runs the data-plane device tests with the engine's buffers on
# GPU 1 (CUDA IPC, UCX, NCCL, inline; then NCCL's fault cases), the transfer benchmark with the
# engine on GPU 1 (every transport against cudaMemcpyPeer with peer access, same run), and
# attached decode across the GPUs: the service inside the benchmark's process (two_gpus/), and
# the service as its own leapcache-server process with the benchmark as the engine process,
# its vectors in the step messages or in its device buffer over NCCL or CUDA IPC
# (two_gpus_engine_process/). Logs, JSON and Markdown go under RESULTS_DIR.
# scripts/device_service_check.sh calls this when it finds two GPUs. PARTS (default: all four)
# picks some of transport, transfer, decode, engine_process, so a run fits a bounded call.
#
#   scripts/device_two_gpu_check.sh BUNDLE RESULTS_DIR [PARTS...]
set -euo pipefail
bundle=$(cd "${1:?usage: device_two_gpu_check.sh BUNDLE RESULTS_DIR}" && pwd)
out=${2:?usage: device_two_gpu_check.sh BUNDLE RESULTS_DIR}
shift 2
parts=" ${*:-transport transfer decode engine_process} "
wants() { [[ $parts == *" $1 "* ]]; }
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LEAPCACHE_SERVER_BIN="$bundle/bin/leapcache-server"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared hosts, children included
status=0
server_pid="" server_target=""
mkdir -p "$out/two_gpus"

# Starts a leapcache-server with FLAGS, its port file in DIR; sets $server_pid and $server_target.
start_server() {
  local dir=$1
  shift
  rm -f "$dir/server.port"
  # The tests find the server through LEAPCACHE_SERVER_BIN; the server reads LEAPCACHE_* as its
  # settings, so it starts without it.
  env -u LEAPCACHE_SERVER_BIN "$bundle/bin/leapcache-server" --listen=127.0.0.1:0 --metrics-listen= \
    --port-file="$dir/server.port" "$@" > "$dir/server.log" 2>&1 &
  server_pid=$!
  # Up to 30 s: a fresh process's first CUDA context on a large GPU can take seconds.
  for _ in $(seq 300); do
    [ -s "$dir/server.port" ] || ! kill -0 "$server_pid" 2>/dev/null && break
    sleep 0.1
  done
  if [ ! -s "$dir/server.port" ]; then
    echo "leapcache-server did not start:" >&2
    cat "$dir/server.log" >&2
    return 1
  fi
  server_target="127.0.0.1:$(cat "$dir/server.port")"
}
stop_server() {
  kill -TERM "$server_pid" 2>/dev/null || true
  wait "$server_pid" || true
}

# Data-plane tests; NCCL's fault cases separately, each bounded, so a hang costs only itself.
wants transport && for part in "-NcclSessionTest.*EngineNever*" "NcclSessionTest.GetsTheEngineNever*" \
  "NcclSessionTest.PutTheEngineNever*"; do
  log="$out/two_gpus/transport_gpu_test_${part//[^A-Za-z]/_}.log"
  LEAPCACHE_TEST_ENGINE_GPU=1 timeout 170 "$bundle/bin/transport_gpu_test" --gtest_color=no \
    --gtest_filter="$part" > "$log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|^\[       OK|^\[  FAILED" "$log" |
    sed "s/^/transport_gpu_test, engine on GPU 1: /" || true  # nothing printed: a hang
done

# Transfers with the engine's buffers on GPU 1; the server's context (and NCCL rank) on GPU 0.
# Then the same with the checkpoints in a 4 GiB GPU tier on GPU 0 (CUDA IPC gets copy from it
# device to device, across NVLink).
if wants transfer; then
  for tier in host gpu_tier; do
    flags=(--memory-budget=2GiB --gpu-device=0)
    [ "$tier" = gpu_tier ] && flags+=(--gpu-memory-budget=4GiB)
    start_server "$out/two_gpus" "${flags[@]}" || status=1
    echo "server ${flags[*]}:"
    timeout 300 "$bundle/bin/leapcache-transfer-bench" --reps=5 --target="$server_target" \
      --engine-gpu=1 --json="$out/two_gpus/transfer_bench_engine_gpu1_$tier.json" |
      grep -v '^{' | tee "$out/two_gpus/transfer_bench_engine_gpu1_$tier.md" || status=1
    stop_server
  done
fi

if wants decode; then
  timeout 300 "$bundle/bin/leapcache-decode-bench" --backend=cuda --server-device=0 \
    --local-device=1 --out="$out/two_gpus" | tee "$out/two_gpus/decode_bench.txt" || status=1
fi

# The service as its own process decoding on GPU 0 (the bench's in-process settings: 16 GiB of
# live states, 64 MiB messages for B = 256); the engine process's reference on GPU 1.
engine_out="$out/two_gpus_engine_process"
wants engine_process && mkdir -p "$engine_out"
if ! wants engine_process; then
  :
elif start_server "$engine_out" --memory-budget=256MiB --max-message-bytes=64MiB \
  --compute-backend=cuda --gpu-device=0 --decode-memory-budget=16GiB; then
  timeout 300 "$bundle/bin/leapcache-decode-bench" --backend=cuda --local-device=1 \
    --target="$server_target" --out="$engine_out" | tee "$engine_out/decode_bench.txt" ||
    status=1
  # The same steps with their vectors in the engine's device buffer, moved over the data plane
  # (NCCL and CUDA IPC across the GPUs, CUDA IPC with the engine on the service's GPU).
  for run in nccl:1 cuda_ipc:1 cuda_ipc:0; do
    dp=${run%%:*} gpu=${run##*:}
    mkdir -p "$engine_out/${dp}_engine_gpu$gpu"
    timeout 300 "$bundle/bin/leapcache-decode-bench" --backend=cuda --local-device="$gpu" \
      --target="$server_target" --data-plane="$dp" --out="$engine_out/${dp}_engine_gpu$gpu" |
      tee "$engine_out/${dp}_engine_gpu$gpu/decode_bench.txt" || status=1
  done
  stop_server
else
  status=1
fi
exit $status
