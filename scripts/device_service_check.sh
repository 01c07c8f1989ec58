#!/usr/bin/env bash
# On a GPU machine, with a bundle from scripts/stage_device_bundle.sh: runs the service's device
# tests (attached decode on the kernels, the compute seam on device spans, the GPU memory tier,
# the kernel encoder and decoder, data-plane transfers of device buffers and attached steps in
# them between an engine process and the server process) and its benchmarks (attached decode
# against the in-process kernels, in process and with the engine in its own process over CUDA
# IPC; put/get with and without the GPU tier), and writes the logs, JSON and Markdown to RESULTS_DIR. With two GPUs it also runs
# scripts/device_two_gpu_check.sh (the service on GPU 0, an engine on GPU 1: NCCL and the other
# transports, transfers against cudaMemcpyPeer, attached decode across the GPUs).
#
#   scripts/device_service_check.sh BUNDLE RESULTS_DIR   (BUNDLE: the folder or its .tar.xz)
set -euo pipefail
bundle=${1:?usage: device_service_check.sh BUNDLE RESULTS_DIR}
bundle=$("$(dirname "$0")/device_bundle_dir.sh" "$bundle")
out=${2:?usage: device_service_check.sh BUNDLE RESULTS_DIR}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LEAPCACHE_SERVER_BIN="$bundle/bin/leapcache-server"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared hosts, children included
nvidia-smi --query-gpu=index,name,driver_version --format=csv | tee "$out/gpus.txt"
gpus=$(nvidia-smi -L | wc -l)
status=0
for t in cuda_live_states_test device_spans_test device_tier_test kernel_decoder_test kernel_encoder_test \
  transport_gpu_test; do
  # A hung device test must not take the rest of the run with it.
  timeout 300 "$bundle/bin/$t" --gtest_color=no > "$out/$t.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED)|worst|GPU tier" "$out/$t.log" | sed "s/^/$t: /" ||
    echo "$t: no result (see $t.log)"
done
"$bundle/bin/leapcache-decode-bench" --backend=cuda --out="$out" | tee "$out/decode_bench.txt" ||
  status=1
"$bundle/bin/leapcache-decode-bench" --backend=cuda --transport-only |
  tee "$out/decode_bench_transport_only.txt" || status=1
# CUDA MPS for the runs that ask for it: one daemon, its pipes and logs under the results.
mps_start() {
  export CUDA_MPS_PIPE_DIRECTORY="$out/mps-pipe" CUDA_MPS_LOG_DIRECTORY="$out/mps-log"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
}
mps_stop() {
  echo quit | nvidia-cuda-mps-control
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
# Attached decode with the engine in its own process over CUDA IPC: the server's kernels step
# the engine's registered device buffer in place, each step sent through the shared-memory step
# channel and, for comparison, through the gRPC Step stream. Then the same under CUDA MPS (where installed),
# where the two processes' kernels share the GPU without a context switch at every handoff.
decode_ipc_runs=(plain)
command -v nvidia-cuda-mps-control > /dev/null && decode_ipc_runs+=(mps)
for run in "${decode_ipc_runs[@]}"; do
  if [ "$run" = mps ]; then mps_start; fi
  rm -f "$out/decode_server.port"
  env -u LEAPCACHE_SERVER_BIN "$bundle/bin/leapcache-server" --listen=127.0.0.1:0 \
    --metrics-listen=127.0.0.1:0 --gpu-device=0 --compute-backend=cuda \
    --decode-memory-budget=16GiB --max-message-bytes=64MiB --port-file="$out/decode_server.port" \
    > "$out/decode_server_$run.log" 2>&1 &
  server=$!
  for _ in $(seq 300); do [ -s "$out/decode_server.port" ] && break; sleep 0.1; done
  # Each step through the shared-memory step channel, then through the gRPC Step stream.
  for path in channel stream; do
    mkdir -p "$out/decode_cuda_ipc_${run}_$path"
    echo "attached decode over CUDA IPC ($run, $path):"
    flag=shm
    [ "$path" = stream ] && flag=stream
    timeout 300 "$bundle/bin/leapcache-decode-bench" --backend=cuda --data-plane=cuda_ipc \
      --step-channel=$flag --target="127.0.0.1:$(cat "$out/decode_server.port")" \
      --out="$out/decode_cuda_ipc_${run}_$path" |
      tee "$out/decode_bench_cuda_ipc_${run}_$path.txt" || status=1
  done
  kill -TERM "$server"
  wait "$server" || true
  if [ "$run" = mps ]; then mps_stop; fi
done
if [ "$gpus" -ge 2 ]; then
  "$(dirname "$0")/device_two_gpu_check.sh" "$bundle" "$out" || status=1
fi
# Transfers per transport with the server in its own process (CUDA IPC needs that), the engine's
# buffers on GPU 0 (GPU 1: device_two_gpu_check.sh), one server after the other: dense gets
# decoded by the decode kernel, then by the CPU reference (the server's compute_backend);
# then checkpoints held in a 4 GiB GPU tier (CUDA IPC gets copy device to device from it).
# gpu_tier_mps repeats the last under CUDA MPS (nvidia-cuda-mps-control, where installed): the
# engine and the server then share one GPU context instead of the GPU switching between their
# contexts at every handoff (about 140 us each on an H200).
# Engines on this host move their transfers through the shared-memory transfer channel; the GPU
# tier runs repeat the CUDA IPC rows through the Transfer RPCs (*_rpc) for comparison.
# host_unmapped is decode_cuda with the host tier not mapped for the device
# (host_tier_mapping=off): gets from it then go through staging memory chunk by chunk.
runs=(decode_cuda decode_cpu host_unmapped gpu_tier)
command -v nvidia-cuda-mps-control > /dev/null && runs+=(gpu_tier_mps)
for run in "${runs[@]}"; do
  case $run in
    decode_cuda) flags=(--compute-backend=cuda) ;;
    decode_cpu) flags=(--compute-backend=cpu) ;;
    host_unmapped) flags=(--compute-backend=cuda --host-tier-mapping=off) ;;
    gpu_tier | gpu_tier_mps) flags=(--gpu-memory-budget=4GiB --gpu-device=0) ;;
  esac
  if [ "$run" = gpu_tier_mps ]; then mps_start; fi
  rm -f "$out/server.port"
  # The tests find the server through LEAPCACHE_SERVER_BIN; the server reads LEAPCACHE_* as its
  # settings, so it starts without it. The bench reads the per-phase times of the transfers
  # from the admin endpoint, whose port the server prints once it listens.
  env -u LEAPCACHE_SERVER_BIN "$bundle/bin/leapcache-server" --listen=127.0.0.1:0 \
    --metrics-listen=127.0.0.1:0 --memory-budget=2GiB \
    "${flags[@]}" --port-file="$out/server.port" > "$out/server.log" 2>&1 &
  server=$!
  for _ in $(seq 300); do grep -q "metrics on" "$out/server.log" && break; sleep 0.1; done
  metrics_port=$(sed -n 's/.*metrics on [0-9.]*:\([0-9]*\).*/\1/p' "$out/server.log")
  echo "server ${flags[*]}:"
  timeout 300 "$bundle/bin/leapcache-transfer-bench" --reps=20 \
    --target="127.0.0.1:$(cat "$out/server.port")" --engine-gpu=0 --metrics-port="$metrics_port" \
    --json="$out/transfer_bench_engine_gpu0_$run.json" |
    grep -v '^{' | tee "$out/transfer_bench_engine_gpu0_$run.md" || status=1
  # The same CUDA IPC transfers through the Transfer RPCs instead of the transfer channel.
  if [ "$run" = gpu_tier ] || [ "$run" = gpu_tier_mps ]; then
    timeout 300 "$bundle/bin/leapcache-transfer-bench" --reps=20 --transports=cuda_ipc \
      --transfer-channel=rpc --target="127.0.0.1:$(cat "$out/server.port")" --engine-gpu=0 \
      --metrics-port="$metrics_port" --json="$out/transfer_bench_engine_gpu0_${run}_rpc.json" |
      grep -v '^{' | tee "$out/transfer_bench_engine_gpu0_${run}_rpc.md" || status=1
  fi
  kill -TERM "$server"
  wait "$server" || true
  if [ "$run" = gpu_tier_mps ]; then mps_stop; fi
done
for budget in 0 4294967296; do
  "$bundle/bin/leapcache-service-bench" --seconds=1 --reps=3 --gpu-memory-budget=$budget |
    tail -6 | tee "$out/service_bench_gpu_budget_$budget.txt"
done
exit $status
