#!/usr/bin/env bash
# Tunes the CUDA kernels on the GPU machine (the `device` tool), from the repo root, with the build
# made here by scripts/device-build.sh (carried as build-carry/). For each preset, `a4w4 tune`
# measures M <= 64 on a prepared B (how decode weights are deployed) and M >= 128 on a plain B (as
# the shipped files were made; the bf16 kernels take both layouts with the same tiles), the two
# halves are joined into $OUT/h200-<preset>.csv (commit it as tuned/), `a4w4 config check --strict`
# validates it, and `a4w4 bench --compare-heuristic` times tuned against heuristic choices in one
# run, on the same layouts. With A4W4_TUNE_INT8=1 a third pass tunes M >= 128 on a weight with its
# int8 form (`--weights prepared-int8`, with a workspace: the int8 kernels stage A in it); those
# entries serve only such weights.
# Usage: [A4W4_TUNE_INT8=1] bash scripts/device-tune.sh PRESET...
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
  parts=("$OUT/small.csv" "$OUT/large.csv")
  if [[ ${A4W4_TUNE_INT8:-0} == 1 ]]; then
    "$BUILD/a4w4" tune --backend cuda --shapes "$preset" -m "$large" --weights prepared-int8 \
      --workspace --out "$OUT/int8.csv" --samples 3 --batch-ms 1 >>"$OUT/tune-$preset.log" 2>&1
    echo "tune (M >= 128, int8-form B, workspace) rc=$?"
    parts+=("$OUT/int8.csv")
  fi
  tail -2 "$OUT/tune-$preset.log"
  # One file: every part's comment line, one header, every entry.
  { grep -h '^#' "${parts[@]}"; grep -v '^#' "${parts[0]}";
    for part in "${parts[@]:1}"; do grep -v '^#' "$part" | tail -n +2; done; } >"$csv"
  rm -f "${parts[@]}"
  "$BUILD/a4w4" config check --strict "$csv" 2>&1 | tail -2
  {
    "$BUILD/a4w4" bench --backend cuda --preset "$preset" -m "$small" --tuned "$csv" \
      --compare-heuristic --no-baselines --no-plain
    "$BUILD/a4w4" bench --backend cuda --preset "$preset" -m "$large" --tuned "$csv" \
      --compare-heuristic --no-baselines --no-prepared
    if [[ ${A4W4_TUNE_INT8:-0} == 1 ]]; then
      "$BUILD/a4w4" bench --backend cuda --preset "$preset" -m "$large" --tuned "$csv" \
        --compare-heuristic --no-baselines --no-plain --prepared-layout v2-int8
    fi
  } >"$OUT/compare-$preset.md" 2>/dev/null
  echo "compare rc=$?"
  grep -c "^| [0-9]" "$OUT/compare-$preset.md"
done
