#!/usr/bin/env bash
# Nsight Compute profile of one kernel on the GPU machine (the `device` tool), from the repo root:
#   bash scripts/device-profile.sh 'MxNxK' [kernel-name-regex] [extra a4w4 bench args]
# Writes $OUT/profile-<shape>.txt: speed of light, occupancy, warp stall reasons, scheduler
# statistics and the instructions with the most stall samples; and $OUT/sass-<shape>.csv.gz: every
# SASS instruction of the kernel with its executed count and stall samples (ncu's source page).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device-env.sh
shape=$1
kernel=${2:-gemm_decode}
shift 2 || shift $#
shapes=$(mktemp)
echo "$shape profile" >"$shapes"
report=$(mktemp -u).ncu-rep
ncu --clock-control none --kernel-name "regex:$kernel" --launch-skip 20 --launch-count 1 -o "$report" \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters \
  --section InstructionStats \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
  "$BUILD/a4w4" bench --backend cuda --shapes "$shapes" --no-baselines --no-plain "$@" \
  >"$OUT/profile-$shape.log" 2>&1
echo "ncu rc=$? ($(tail -1 "$OUT/profile-$shape.log"))"
ncu -i "$report" --page details >"$OUT/profile-$shape.txt" 2>&1
ncu -i "$report" --page source --print-source sass --csv 2>&1 | gzip >"$OUT/sass-$shape.csv.gz"
rm -f "$OUT/profile-$shape.log"
echo "-> $OUT/profile-$shape.txt, $OUT/sass-$shape.csv.gz"
