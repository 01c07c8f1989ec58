#!/usr/bin/env bash
# On a GPU machine with torch and transformers, with a bundle from scripts/stage_device_bundle.sh:
# starts the real leapcache-server with a GPU tier and runs tests/gpu/model/model_resume.py
# against it (tiny random-weight Qwen3-Next and Kimi Linear models put their linear layers'
# states and conv states at block boundaries through the Python client's data plane, then
# resume from leapcache and are compared with a full recompute). Writes the tables and the
# server's log to RESULTS_DIR.
#
#   scripts/device_model_check.sh BUNDLE RESULTS_DIR [--quick]   (BUNDLE: folder or .tar.xz)
#   PYTHON: the interpreter that has torch and transformers (default python3)
set -euo pipefail
bundle=${1:?usage: device_model_check.sh BUNDLE RESULTS_DIR [--quick]}
out=${2:?usage: device_model_check.sh BUNDLE RESULTS_DIR [--quick]}
shift 2
bundle=$("$(dirname "$0")/device_bundle_dir.sh" "$bundle")
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
rm -f "$out/server.port"
"$bundle/bin/leapcache-server" --listen=127.0.0.1:0 --metrics-listen= --memory-budget=2GiB \
  --gpu-memory-budget=4GiB --gpu-device=0 --port-file="$out/server.port" > "$out/server.log" 2>&1 &
server=$!
for _ in $(seq 300); do [ -s "$out/server.port" ] && break; sleep 0.1; done
status=0
PYTHONPATH="$bundle/python" "${PYTHON:-python3}" tests/gpu/model/model_resume.py \
  --target="127.0.0.1:$(cat "$out/server.port")" --out="$out/model_resume.md" \
  --json="$out/model_resume.json" "$@" || status=$?
kill -TERM "$server"
wait "$server" || status=1
exit $status
