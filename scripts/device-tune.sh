#!/usr/bin/env bash
# Tunes the CUDA kernels on the GPU machine (the `device` tool), from the repo root, with the build
# carried as build-dev/: for each preset, `a4w4 tune` writes $OUT/h200-<preset>.csv (commit it as
# tuned/), `a4w4 config check --strict` validates it, and `a4w4 bench --compare-heuristic` times
# tuned against heuristic choices in one run. Usage: bash scripts/device-tune.sh PRESET...
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device-env.sh
for preset in "$@"; do
  csv="$OUT/h200-$preset.csv"
  echo "=== tune $preset ==="
  "$BUILD/a4w4" tune --backend cuda --shapes "$preset" --out "$csv" --samples 3 --batch-ms 1 \
    >"$OUT/tune-$preset.log" 2>&1
  echo "tune rc=$?"
  tail -3 "$OUT/tune-$preset.log"
  "$BUILD/a4w4" config check --strict "$csv" 2>&1 | tail -2
  "$BUILD/a4w4" bench --backend cuda --preset "$preset" --tuned "$csv" --compare-heuristic \
    --no-baselines --no-plain >"$OUT/compare-$preset.md" 2>/dev/null
  echo "compare rc=$?"
done
