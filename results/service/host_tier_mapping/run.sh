#!/usr/bin/env bash
# The device tests of the data plane, then CUDA IPC gets from the host tier with the tier mapped
# for the device and without (the same run), then mapped under MPS. On a GPU machine, from the
# repository root, with a bundle from scripts/stage_device_bundle.sh (the folder or its .tar.xz):
#   results/service/host_tier_mapping/run.sh BUNDLE RESULTS_DIR
set -u
bundle=${1:?usage: run.sh BUNDLE RESULTS_DIR}
out=${2:?usage: run.sh BUNDLE RESULTS_DIR}
if [ -f "$bundle" ]; then  # the archive: unpacked beside itself, once
  unpacked="$(dirname "$bundle")/$(basename "$bundle" .tar.xz).unpacked"
  [ -d "$unpacked" ] || { mkdir -p "$unpacked" && tar -xJf "$bundle" -C "$unpacked"; }
  bundle=$(echo "$unpacked"/*/)
fi
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64" LEAPCACHE_SERVER_BIN="$bundle/bin/leapcache-server"
mkdir -p "$out"
for t in transport_gpu_test device_tier_test; do
  timeout 200 "$bundle/bin/$t" --gtest_color=no > $out/$t.log 2>&1; echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' $out/$t.log | tr '\n' ' ')"
done
serve() {  # name, flags...
  local name=$1; shift
  rm -f $out/port
  env -u LEAPCACHE_SERVER_BIN "$bundle/bin/leapcache-server" --listen=127.0.0.1:0 --metrics-listen=127.0.0.1:0 \
    --memory-budget=2GiB --port-file=$out/port "$@" > $out/server_$name.log 2>&1 &
  local s=$!
  for _ in $(seq 300); do grep -q "metrics on" $out/server_$name.log && break; sleep 0.1; done
  local mp=$(sed -n 's/.*metrics on [0-9.]*:\([0-9]*\).*/\1/p' $out/server_$name.log)
  timeout 200 "$bundle/bin/leapcache-transfer-bench" --reps=20 --target=127.0.0.1:$(cat $out/port) \
    --engine-gpu=0 --metrics-port=$mp --transports=cuda_ipc | grep -v '^{' > $out/bench_$name.md
  kill -TERM $s; wait $s
  echo "== $name"; grep -E "^\| cuda_ipc \| cuda \| compact" $out/bench_$name.md
}
serve host_mapped
serve host_unmapped --host-tier-mapping=off
export CUDA_MPS_PIPE_DIRECTORY=$out/mps-pipe CUDA_MPS_LOG_DIRECTORY=$out/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
serve host_mapped_mps
echo quit | nvidia-cuda-mps-control
rm -rf $out/mps-pipe
