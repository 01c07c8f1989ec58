#!/usr/bin/env bash
# On a GPU machine, with a bundle from scripts/stage_device_bundle.sh: runs the service's device
# tests (attached decode on the kernels, the GPU memory tier, the kernel encoder, data-plane
# transfers of device buffers between an engine process and the server process) and its
# benchmarks (attached decode against the in-process kernels; put/get with and without the GPU
# tier), and writes the logs, JSON and Markdown to RESULTS_DIR. With two GPUs the decode
# benchmark also runs the service on GPU 0 against the engine's in-process reference on GPU 1,
# once with the service inside the benchmark's process (two_gpus/) and once as a separate
# leapcache-server process decoding on GPU 0, the benchmark being the engine process
# (two_gpus_engine_process/), and the transfer tests put the engine's buffers on GPU 1 (the
# server's context is on GPU 0).
#
#   scripts/device_service_check.sh BUNDLE RESULTS_DIR
set -euo pipefail
bundle=$(cd "${1:?usage: device_service_check.sh BUNDLE RESULTS_DIR}" && pwd)
out=${2:?usage: device_service_check.sh BUNDLE RESULTS_DIR}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LEAPCACHE_SERVER_BIN="$bundle/bin/leapcache-server"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared hosts, children included
nvidia-smi --query-gpu=index,name,driver_version --format=csv | tee "$out/gpus.txt"
gpus=$(nvidia-smi -L | wc -l)
status=0
for t in cuda_decode_backend_test device_tier_test kernel_encoder_test transport_gpu_test; do
  "$bundle/bin/$t" --gtest_color=no > "$out/$t.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED)|worst|GPU tier" "$out/$t.log" | sed "s/^/$t: /"
done
"$bundle/bin/leapcache-decode-bench" --backend=cuda --out="$out" | tee "$out/decode_bench.txt" ||
  status=1
"$bundle/bin/leapcache-decode-bench" --backend=cuda --transport-only |
  tee "$out/decode_bench_transport_only.txt" || status=1
if [ "$gpus" -ge 2 ]; then
  mkdir -p "$out/two_gpus"
  LEAPCACHE_TEST_ENGINE_GPU=1 "$bundle/bin/transport_gpu_test" --gtest_color=no \
    > "$out/two_gpus/transport_gpu_test.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED)" "$out/two_gpus/transport_gpu_test.log" |
    sed "s/^/transport_gpu_test, engine on GPU 1: /"
  "$bundle/bin/leapcache-decode-bench" --backend=cuda --server-device=0 --local-device=1 \
    --out="$out/two_gpus" | tee "$out/two_gpus/decode_bench.txt" || status=1
  # The service as its own process with its decode pools on GPU 0 (the bench's in-process server
  # settings: 16 GiB of live states, 64 MiB messages for B = 256), the engine process's reference
  # on GPU 1.
  engine_out="$out/two_gpus_engine_process"
  mkdir -p "$engine_out"
  rm -f "$engine_out/server.port"
  "$bundle/bin/leapcache-server" --listen=127.0.0.1:0 --metrics-listen= --memory-budget=256MiB \
    --max-message-bytes=64MiB --decode-backend=cuda --decode-device=0 \
    --decode-memory-budget=16GiB --port-file="$engine_out/server.port" \
    > "$engine_out/server.log" 2>&1 &
  decode_server=$!
  # Up to 30 s: a fresh process's first CUDA context on a large GPU can take seconds.
  for _ in $(seq 300); do
    [ -s "$engine_out/server.port" ] || ! kill -0 "$decode_server" 2>/dev/null && break
    sleep 0.1
  done
  if [ -s "$engine_out/server.port" ]; then
    "$bundle/bin/leapcache-decode-bench" --backend=cuda --local-device=1 \
      --target="127.0.0.1:$(cat "$engine_out/server.port")" --out="$engine_out" |
      tee "$engine_out/decode_bench.txt" || status=1
  else
    echo "leapcache-server for the engine-process decode bench did not start:" >&2
    cat "$engine_out/server.log" >&2
    status=1
  fi
  kill -TERM "$decode_server" 2>/dev/null || true
  wait "$decode_server" || true
fi
# Transfers per transport with the server in its own process (CUDA IPC needs that), the engine's
# buffers on GPU 0 and, with two GPUs, on GPU 1.
"$bundle/bin/leapcache-server" --listen=127.0.0.1:0 --metrics-listen= --memory-budget=2GiB \
  --port-file="$out/server.port" > "$out/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do [ -s "$out/server.port" ] && break; sleep 0.1; done
for gpu in $(seq 0 $((gpus > 1 ? 1 : 0))); do
  "$bundle/bin/leapcache-transfer-bench" --reps=5 --target="127.0.0.1:$(cat "$out/server.port")" \
    --engine-gpu="$gpu" --json="$out/transfer_bench_engine_gpu$gpu.json" |
    grep -v '^{' | tee "$out/transfer_bench_engine_gpu$gpu.md" || status=1
done
kill -TERM "$server"
wait "$server" || true
for budget in 0 4294967296; do
  "$bundle/bin/leapcache-service-bench" --seconds=1 --reps=3 --gpu-memory-budget=$budget |
    tail -6 | tee "$out/service_bench_gpu_budget_$budget.txt"
done
exit $status
