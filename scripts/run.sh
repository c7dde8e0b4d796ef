#!/usr/bin/env bash
# The main job: install what is missing, build a4w4 (CUDA backend when nvcc is found), and run
# `a4w4 gemm` on its default problem with a check against the float64 formula.
# Extra arguments go to `a4w4 gemm`, e.g. scripts/run.sh -m 64 -n 4096 -k 4096 --check
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
build/a4w4 info
build/a4w4 gemm "$@"
