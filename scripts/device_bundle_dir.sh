#!/usr/bin/env bash
# Prints the folder of a bundle from scripts/stage_device_bundle.sh, given the folder or its
# .tar.xz archive (unpacked beside itself, once). For the device scripts.
#
#   bundle=$(scripts/device_bundle_dir.sh BUNDLE)
set -euo pipefail
bundle=${1:?usage: device_bundle_dir.sh BUNDLE}
if [ -f "$bundle" ]; then
  unpacked="$(dirname "$bundle")/$(basename "$bundle" .tar.xz).unpacked"
  if [ ! -d "$unpacked" ]; then
    mkdir -p "$unpacked.tmp" && tar -xJf "$bundle" -C "$unpacked.tmp" && mv "$unpacked.tmp" "$unpacked"
  fi
  bundle=$(echo "$unpacked"/*/)
fi
cd "$bundle" && pwd
