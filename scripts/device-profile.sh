#!/usr/bin/env bash
# Nsight Compute profile of one kernel on the GPU machine (the `device` tool), from the repo root:
#   bash scripts/device-profile.sh 'MxNxK' [kernel-name-regex] [extra a4w4 bench args]
# Writes $OUT/profile-<shape>.txt: speed of light, occupancy, warp stall reasons, scheduler
# statistics and the instructions with the most stall samples.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
BUILD=${BUILD:-build-dev}
shape=$1
kernel=${2:-gemm_decode}
shift 2 || shift $#
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$BUILD/runtime-libs:${LD_LIBRARY_PATH:-}"
shapes=$(mktemp)
echo "$shape profile" >"$shapes"
ncu --clock-control none --kernel-name "regex:$kernel" --launch-skip 20 --launch-count 1 \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters \
  --section InstructionStats \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
  "$BUILD/a4w4" bench --backend cuda --shapes "$shapes" --no-baselines --no-plain "$@" \
  >"$OUT/profile-$shape.txt" 2>&1
echo "ncu rc=$? -> $OUT/profile-$shape.txt"
