#!/usr/bin/env bash
# On a machine with an NVIDIA Hopper GPU and Nsight Compute: profiles one launch of each
# window-format kernel inside leapcache-kernel-bench (GDN and KDA step, the staggered refit
# launch; at 6 bits the GDN step and the encode) at batch B (default 256) and writes, per kernel, the full section report, the
# per-SASS-instruction source page (executed instructions and stall samples per instruction) and
# the same counters per CUDA source line, each line followed by its instructions (the kernels
# build with -lineinfo; an inlined instruction may count at several lines of its inline chain),
# as CSV.
# Clocks are left as the machine has them (--clock-control none).
#   [LEAPCACHE_PROFILE_ONLY=step_gdn,...] scripts/gpu_profile.sh BENCH_BINARY OUT_DIR [B]
set -uo pipefail
bench=${1:?usage: gpu_profile.sh BENCH_BINARY OUT_DIR [B]}
out=${2:?usage: gpu_profile.sh BENCH_BINARY OUT_DIR [B]}
batch=${3:-256}
mkdir -p "$out"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
[ -n "$ncu" ] || { echo "no ncu on this machine" >&2; exit 1; }
# name | kernel filter | launches skipped (past the bench's set-up steps, into the timed cycle)
profiles=(
  "step_gdn|regex:WindowStepKernel<.bool.0, .bool.0|100"
  "step_kda|regex:WindowStepKernel<.bool.1, .bool.0|100"
  "step_gdn_6bit|regex:WindowStepKernel<.bool.0, .bool.1|2"
  "refit_staggered|regex:RefitKernel|100"
  "encode_6bit|regex:EncodeKernel<__nv_bfloat16, .bool.1|2"
)
only=${LEAPCACHE_PROFILE_ONLY:-}  # a comma-separated subset of the names above
status=0
for p in "${profiles[@]}"; do
  IFS='|' read -r name filter skip <<< "$p"
  [ -z "$only" ] || [[ ",$only," == *",$name,"* ]] || continue
  "$ncu" --kernel-name-base demangled --kernel-name "$filter" --launch-skip "$skip" \
    --launch-count 1 --set full --import-source yes --clock-control none -f -o "$out/$name" \
    "$bench" --batches "$batch" --out "$out/bench_$name" > "$out/$name.ncu.log" 2>&1 || status=1
  "$ncu" -i "$out/$name.ncu-rep" --page details --csv > "$out/$name.details.csv" 2>&1 || status=1
  "$ncu" -i "$out/$name.ncu-rep" --page source --csv --print-source sass \
    > "$out/$name.sass.csv" 2>&1 || status=1
  "$ncu" -i "$out/$name.ncu-rep" --page source --csv --print-source cuda,sass \
    > "$out/$name.cuda_sass.csv" 2>&1 || status=1
done
exit $status
