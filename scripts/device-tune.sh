#!/usr/bin/env bash
# Tunes the CUDA kernels on the GPU machine (the `device` tool), from the repo root, with the build
# made here by scripts/device-build.sh (carried as build-carry/). For each preset, `a4w4 tune`
# measures M <= 64 on a prepared B (how decode weights are deployed) and M >= 128 on a plain B (as
# the shipped files were made; the bf16 kernels take both layouts with the same tiles), the two
# halves are joined into $OUT/h200-<preset>.csv (commit it as tuned/), `a4w4 config check --strict`
# validates it, and `a4w4 bench --compare-heuristic` times tuned against heuristic choices in one
# run, on the same layouts.
# Usage: bash scripts/device-tune.sh PRESET...
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device-env.sh
small=1,2,4,8,16,32,64
large=128,256,512,1024,2048,4096,8192
for preset in "$@"; do
  csv="$OUT/h200-$preset.csv"
  echo "=== tune $preset ==="
  "$BUILD/a4w4" tune --backend cuda --shapes "$preset" -m "$small" --weights prepared \
    --out "$OUT/small.csv" --samples 3 --batch-ms 1 >"$OUT/tune-$preset.log" 2>&1
  echo "tune (M <= 64, prepared B) rc=$?"
  "$BUILD/a4w4" tune --backend cuda --shapes "$preset" -m "$large" --weights plain \
    --out "$OUT/large.csv" --samples 3 --batch-ms 1 >>"$OUT/tune-$preset.log" 2>&1
  echo "tune (M >= 128, plain B) rc=$?"
  tail -2 "$OUT/tune-$preset.log"
  # One file: both comment lines, one header, every entry.
  { grep '^#' "$OUT/small.csv"; grep '^#' "$OUT/large.csv"; grep -v '^#' "$OUT/small.csv";
    grep -v '^#' "$OUT/large.csv" | tail -n +2; } >"$csv"
  rm -f "$OUT/small.csv" "$OUT/large.csv"
  "$BUILD/a4w4" config check --strict "$csv" 2>&1 | tail -2
  {
    "$BUILD/a4w4" bench --backend cuda --preset "$preset" -m "$small" --tuned "$csv" \
      --compare-heuristic --no-baselines --no-plain
    "$BUILD/a4w4" bench --backend cuda --preset "$preset" -m "$large" --tuned "$csv" \
      --compare-heuristic --no-baselines --no-prepared
  } >"$OUT/compare-$preset.md" 2>/dev/null
  echo "compare rc=$?"
  grep -c "^| [0-9]" "$OUT/compare-$preset.md"
done
