#!/usr/bin/env bash
# The test command: install what is missing, build with warnings as errors, run the CPU test suite
# and the Python package's tests (pip install . into .venv, pytest), then the same C++ suite under
# AddressSanitizer + UndefinedBehaviorSanitizer, then brief libFuzzer runs of the NPY reader and the
# tuned-configuration CSV reader. GPU tests (ctest label `cuda`, pytest -m cuda) run on a GPU
# machine: scripts/device-run.sh, scripts/device-python.sh.
#   scripts/test.sh           everything
#   scripts/test.sh --quick   the main build, its tests and the Python tests only
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[[ "${1:-}" == "--quick" ]] && quick=1
jobs=$(nproc)

if ((quick)); then scripts/install-deps.sh; else scripts/install-deps.sh --fuzz; fi

echo "=== build (Release, -Werror, CUDA backend when nvcc is found) ==="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DA4W4_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
echo "=== tests: cpu ==="
ctest --test-dir build -L cpu --output-on-failure -j"$jobs"

# The Python package: `pip install .` into a venv kept in .venv/ (ignored; reused between runs),
# with the CPU backend only (the CUDA backend is compiled above), then pytest on the CPU.
echo "=== python: pip install . (CPU backend) into .venv, pytest ==="
venv=.venv
[[ -x $venv/bin/python ]] || "${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
  nanobind scikit-build-core numpy ml_dtypes pytest
CMAKE_BUILD_PARALLEL_LEVEL=$jobs "$venv/bin/python" -m pip install -q --disable-pip-version-check \
  --no-build-isolation --no-deps -C build-dir=build-python -C cmake.define.A4W4_CUDA=OFF \
  -C cmake.define.A4W4_WERROR=ON .
"$venv/bin/python" -m pytest tests/python -q -rs -p no:cacheprovider
((quick)) && exit 0

echo "=== build: ASan + UBSan (Debug, CPU backend) ==="
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DA4W4_CUDA=OFF -DA4W4_WERROR=ON \
  -DA4W4_SANITIZE=address,undefined >/dev/null
cmake --build build-asan -j"$jobs"
echo "=== tests: cpu under ASan + UBSan ==="
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -L cpu --output-on-failure -j"$jobs"

echo "=== fuzz: NPY reader (libFuzzer, 60 s) ==="
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DA4W4_BUILD_FUZZERS=ON \
  -DA4W4_BUILD_TESTS=OFF -DA4W4_CUDA=OFF >/dev/null
cmake --build build-fuzz -j"$jobs" --target npy_fuzzer tuned_csv_fuzzer
mkdir -p build-fuzz/corpus-npy
build-fuzz/fuzz/npy_fuzzer -max_total_time=60 -print_final_stats=1 -dict=fuzz/npy.dict \
  build-fuzz/corpus-npy \
  fuzz/corpus/npy
echo "=== fuzz: tuned-configuration CSV reader (libFuzzer, 30 s) ==="
mkdir -p build-fuzz/corpus-tuned-csv
build-fuzz/fuzz/tuned_csv_fuzzer -max_total_time=30 -print_final_stats=1 \
  -dict=fuzz/tuned_csv.dict build-fuzz/corpus-tuned-csv fuzz/corpus/tuned_csv
echo "=== all tests passed ==="
