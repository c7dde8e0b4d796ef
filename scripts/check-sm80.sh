#!/usr/bin/env bash
# CI builds the CUDA code for sm_80 (SASS + PTX) as well as sm_90a; scripts/device-build.sh only for
# sm_90a. This compiles the CUDA sources for compute_80 alone (front end only, warnings as errors),
# so warnings that only the sm_80 pass sees (code under __CUDA_ARCH__ >= 900 guards leaving helpers
# unreferenced) show up before CI. Usage: bash scripts/check-sm80.sh [file.cu...] (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
files=("$@")
[[ ${#files[@]} -gt 0 ]] || mapfile -t files < <(ls src/backends/cuda/*.cu bench/*.cu)
status=0
for f in "${files[@]}"; do
  if ! /usr/local/cuda/bin/nvcc -std=c++20 -x cu --generate-code=arch=compute_80,code=compute_80 \
      -Iinclude -Isrc -DA4W4_WITH_CUDA=1 -DFMT_HEADER_ONLY=1 --expt-relaxed-constexpr \
      -Xcompiler=-Wall,-Wextra -Werror=all-warnings -c "$f" -o /dev/null; then
    echo "check-sm80: $f fails"; status=1
  fi
done
exit $status
