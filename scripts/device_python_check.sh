#!/usr/bin/env bash
# On a GPU machine with torch and pytest, with a bundle from scripts/stage_device_bundle.sh: runs
# the Python package's CUDA tests (tests/python/cuda_ipc_test.py: an Engine over CUDA IPC into
# torch CUDA tensors, with and without conv states) against the real server twice, with the
# checkpoints in the host tier and then in a GPU tier.
#
#   scripts/device_python_check.sh BUNDLE    (BUNDLE: the folder or its .tar.xz)
#   PYTHON: the interpreter that has torch and pytest (default python3)
set -euo pipefail
bundle=${1:?usage: device_python_check.sh BUNDLE}
bundle=$("$(dirname "$0")/device_bundle_dir.sh" "$bundle")
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LEAPCACHE_SERVER_BIN="$bundle/bin/leapcache-server" PYTHONPATH="$bundle/python"
export PYTHONDONTWRITEBYTECODE=1
status=0
for tier in "" "--gpu-memory-budget=1GiB --gpu-device=0"; do
  echo "server ${tier:-(host tier)}:"
  LEAPCACHE_TEST_SERVER_ARGS="$tier" "${PYTHON:-python3}" -m pytest -q -p no:cacheprovider \
    tests/python/cuda_ipc_test.py || status=1
done
exit $status
