#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what scripts/device-run.sh runs on the GPU machine: a Release
# build for sm_90a in build-dev/ with the runtime libraries it needs beside it, so the device
# spends no time compiling, and a slim copy of it in build-carry/build-dev (what the device needs:
# the library, the CLI, the GPU tests and bench programs, CTest files; no objects or CPU tests) to
# stay under the device's 64 MiB transfer limit. Then:
#   device run --carry build-carry 'bash scripts/device-run.sh'.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/build-dev/' .git/info/exclude 2>/dev/null || true
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DA4W4_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a-real -DA4W4_WERROR=ON >/dev/null
cmake --build build-dev -j"$(nproc)"
# The CTest files of gtest_discover_tests include this CMake module by absolute path.
mkdir -p build-dev/cmake-modules
cp "$(ls -d /usr/share/cmake-*/Modules/GoogleTestAddTests.cmake | head -1)" build-dev/cmake-modules/
mkdir -p build-dev/runtime-libs
cp -L "$(g++ -print-file-name=libgomp.so.1)" build-dev/runtime-libs/
rm -rf build-carry && mkdir -p build-carry && cp -a build-dev build-carry/
find build-carry/build-dev \( -name '*.o' -o -name '*.a' -o -name '.ninja_*' \) -delete
rm -rf build-carry/build-dev/tests/install-test
find build-carry/build-dev/tests -maxdepth 1 -type f -name 'a4w4_*_test' -delete
du -sh build-dev build-carry
