#!/usr/bin/env bash
# The one script a developer sends to the GPU machine (the `device` tool), from the repo root:
#   GPU tests (ctest -L cuda), compute-sanitizer memcheck on them, and the benchmarks, with every
#   log under $OUT. It uses a build made here by scripts/device-build.sh (carried as build-carry/)
#   when that runs there, and otherwise builds on the device with the carried Debian packages in
#   .deps/ (CLI11, fmt, GoogleTest headers and CMake files).
# Usage there: bash scripts/device-run.sh [tests] [probe] [memcheck] [racecheck] [sass] [bench] [wide]
#   (extra bench args via BENCH_ARGS)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device-env.sh
steps=${*:-tests memcheck bench}
repo=$PWD
log() { echo "=== $* ===" | tee -a "$OUT/summary.txt"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu \
  --format=csv >"$OUT/gpu.txt" 2>&1
log "git $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

if ! "$BUILD/a4w4" info >"$OUT/info.txt" 2>&1; then
  log "carried build does not run here; building on the device"
  cat "$OUT/info.txt" >>"$OUT/summary.txt"
  for f in .deps/*.deb; do dpkg -x "$f" .deps/root; done
  BUILD=build-device
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DA4W4_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH="$repo/.deps/root/usr" \
    -DCMAKE_CXX_FLAGS="-isystem $repo/.deps/root/usr/include" >"$OUT/configure.log" 2>&1 &&
    cmake --build "$BUILD" -j16 >"$OUT/build.log" 2>&1 || { log "device build failed"; tail -30 "$OUT/build.log"; exit 1; }
  "$BUILD/a4w4" info >"$OUT/info.txt" 2>&1
fi
cat "$OUT/info.txt"

if [[ $steps == *tests* ]]; then
  log "ctest -L cuda"
  ctest --test-dir "$BUILD" -L cuda --output-on-failure --timeout "${CTEST_TIMEOUT:-600}" >"$OUT/ctest-cuda.log" 2>&1
  echo "ctest rc=$?" | tee -a "$OUT/summary.txt"
  grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/ctest-cuda.log" | tail -20 | tee -a "$OUT/summary.txt"
  failures "$OUT/ctest-cuda.log" | tee -a "$OUT/summary.txt"
fi
if [[ $steps == *probe* ]]; then
  log "wgmma probe (layouts, accumulation bits)"
  "$BUILD/bench/a4w4_wgmma_probe" 2>&1 | tee -a "$OUT/summary.txt"
fi
if [[ $steps == *memcheck* ]]; then
  log "compute-sanitizer memcheck"
  compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/tests/cuda/a4w4_cuda_test" \
    --gtest_filter='-*GemmMatchesReferenceAcrossShapesAndEpilogues*' >"$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?" | tee -a "$OUT/summary.txt"
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | tail -5 | tee -a "$OUT/summary.txt"
  failures "$OUT/memcheck.log" | tee -a "$OUT/summary.txt"
fi
if [[ $steps == *racecheck* ]]; then
  # Racecheck over the GPU tests takes far longer than memcheck (the cuda.skinny test alone runs
  # past 200 s), so it checks one short bench run per kernel that shares memory between warps:
  # cuda.gemv, cuda.skinny (one warpgroup; the two-token-tile kernel at 200 rows, both math
  # modes), the int8 family (typical data) and the bf16 family (wide scales: the int8 family's
  # tiles all go to it), prepared B.
  log "compute-sanitizer racecheck (one bench shape per kernel)"
  for case in "1x4096x4096 exact typical" "16x8192x4096 exact typical" \
    "128x8192x4096 exact typical" "200x8192x4096 exact typical" "200x8192x4096 fast typical" \
    "512x4096x4096 exact typical" "512x2048x2048 exact wide"; do
    read -r shape math data <<<"$case"
    echo "$shape" >"$OUT/racecheck-shape.txt"
    summary=$(timeout "${RACECHECK_TIMEOUT:-120}" compute-sanitizer --tool racecheck "$BUILD/a4w4" bench \
      --backend cuda --shapes "$OUT/racecheck-shape.txt" --math "$math" --data "$data" \
      --warmup-ms 0 --samples 3 --no-baselines --no-plain 2>&1 | grep -E "RACECHECK SUMMARY|Error: " | head -2)
    echo "$shape $math $data: ${summary:-no summary (timed out)}" | tee -a "$OUT/summary.txt"
  done
  rm -f "$OUT/racecheck-shape.txt"
fi
if [[ $steps == *sass* ]]; then
  log "SASS of the CUDA kernels (cuobjdump)"
  cuobjdump -sass "$BUILD/liba4w4.so" >"$OUT/sass-all.txt" 2>&1
  echo "cuobjdump rc=$? ($(wc -l <"$OUT/sass-all.txt") lines)" | tee -a "$OUT/summary.txt"
  # One file per kernel function, named by its demangled-ish template arguments, for reading.
  awk -v dir="$OUT/sass" 'BEGIN { system("mkdir -p " dir) }
    /Function : / { name = $3; gsub(/[^A-Za-z0-9_]/, "_", name); file = dir "/" substr(name, 1, 120) ".sass" }
    file != "" { print > file }' "$OUT/sass-all.txt"
  rm -f "$OUT/sass-all.txt"
  tar -C "$OUT" -czf "$OUT/sass.tar.gz" sass && rm -rf "$OUT/sass"  # few files travel back
fi
if [[ $steps == *bench* ]]; then
  log "a4w4 bench --preset targets --quantize ${BENCH_ARGS:-}"
  # (CUBLASLT_LOG_MASK=63 CUBLASLT_LOG_FILE=... in the environment explains a refused cuBLASLt
  # call.) At most 8 files come back from the device: keep them few.
  "$BUILD/a4w4" bench --backend cuda --preset targets --quantize ${BENCH_ARGS:-} \
    >"$OUT/bench.md" 2>"$OUT/bench.err"
  echo "bench rc=$?" | tee -a "$OUT/summary.txt"
  cat "$OUT/bench.md"
  tail -3 "$OUT/bench.err"
fi
if [[ $steps == *wide* ]]; then
  log "a4w4 bench --preset targets --wide-scales --no-baselines (the exact path's cost)"
  "$BUILD/a4w4" bench --backend cuda --preset targets --wide-scales --no-baselines \
    >"$OUT/bench-wide.md" 2>>"$OUT/bench.err"
  echo "bench rc=$?" | tee -a "$OUT/summary.txt"
  cat "$OUT/bench-wide.md"
fi
