#!/usr/bin/env bash
# The Python package's GPU tests on the GPU machine (pytest -m cuda: torch CUDA tensors, streams,
# CUDA graphs, torch.compile; CuPy/JAX when installed there), then the whole Python suite, logs
# under $OUT. That machine has no package registry, so nothing is pip-installed there. As last seen it
# has Python 3.12 with torch 2.11 (CUDA 13.0), numpy, pytest, ml_dtypes, nanobind, cupy and jax, plus
# cmake, ninja, g++ and nvcc 13.0, so the plain way is to carry nothing and let the script build the
# extension there (sm_90a, -j16, the library's objects included):
#
#   there: device run 'bash scripts/device-python.sh'
#
# Or build here and carry it (only useful when the Python versions match; the script checks and
# rebuilds there otherwise, with the carried nanobind sources if that machine lacks nanobind):
#
#   here:  scripts/device-python.sh --build      # build-pydev/: extension (CUDA on, sm_90a) for
#                                                # .venv's Python, pytest & co., nanobind sources
#   there: device run --carry build-pydev/python build-pydev/pydeps build-pydev/runtime-libs \
#            'bash scripts/device-python.sh'
#
# Building there needs the fmt headers and CMake files: the system's, or .deps/*.deb as for
# scripts/device-run.sh. PYTHON picks the interpreter (default: python3); PYTEST_ARGS adds
# pytest arguments.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-pydev}
repo=$PWD

if [[ "${1:-}" == "--build" ]]; then
  set -e
  venv=${VENV:-.venv}
  [[ -x $venv/bin/python ]] || { echo "device-python: no venv at $venv (run scripts/test.sh)"; exit 1; }
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DA4W4_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a-real -DA4W4_WERROR=ON -DA4W4_BUILD_PYTHON=ON \
    -DA4W4_BUILD_TESTS=OFF -DA4W4_BUILD_TOOLS=OFF -DPython_EXECUTABLE="$repo/$venv/bin/python" >/dev/null
  cmake --build "$BUILD" -j"${JOBS:-2}" --target _core
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  rm -rf "$BUILD/pydeps" && mkdir -p "$BUILD/pydeps/any" "$BUILD/pydeps/abi"
  for pkg in pytest _pytest pluggy iniconfig py.py packaging pygments nanobind; do
    [[ -e $site/$pkg ]] && cp -r "$site/$pkg" "$BUILD/pydeps/any/"
  done
  # Compiled test deps, used there only when the Python matches and lacks them.
  for pkg in ml_dtypes; do
    [[ -e $site/$pkg ]] && cp -r "$site/$pkg" "$BUILD/pydeps/abi/"
  done
  "$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' >"$BUILD/pydeps/abi/VERSION"
  mkdir -p "$BUILD/runtime-libs"
  cp -L "$(g++ -print-file-name=libgomp.so.1)" "$BUILD/runtime-libs/"
  du -sh "$BUILD/python" "$BUILD/pydeps" "$BUILD/runtime-libs"
  exit 0
fi

OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
log() { echo "=== $* ===" | tee -a "$OUT/summary.txt"; }
export LD_LIBRARY_PATH="$repo/$BUILD/runtime-libs:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv >"$OUT/gpu.txt" 2>&1
log "git $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
"$PY" - <<'EOF' 2>&1 | tee -a "$OUT/summary.txt"
import importlib, sys
print("python", sys.version.split()[0], sys.executable)
for m in ("torch", "numpy", "pytest", "ml_dtypes", "cupy", "jax"):
    try:
        mod = importlib.import_module(m)
        extra = ""
        if m == "torch":
            extra = f" cuda={mod.version.cuda} available={mod.cuda.is_available()}"
        print(f"{m} {getattr(mod, '__version__', '?')}{extra}")
    except Exception as e:  # noqa: BLE001
        print(f"{m}: not importable ({type(e).__name__})")
EOF

pypath="$repo/$BUILD/python:$repo/$BUILD/pydeps/any"
ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [[ -f $BUILD/pydeps/abi/VERSION && $(cat "$BUILD/pydeps/abi/VERSION") == "$ver" ]]; then
  for m in ml_dtypes; do  # only what this Python lacks (numpy must be there: torch brings it)
    if ! "$PY" -c "import $m" 2>/dev/null; then
      mkdir -p "$BUILD/pydeps/extra"
      cp -r "$BUILD/pydeps/abi/$m" "$BUILD/pydeps/extra/"
    fi
  done
  pypath="$pypath:$repo/$BUILD/pydeps/extra"
fi
export PYTHONPATH="$pypath${PYTHONPATH:+:$PYTHONPATH}"

# The a4w4 to test: one from this tree (carried or built here), with the CUDA backend.
usable="import a4w4; assert a4w4.__file__.startswith('$repo/'), a4w4.__file__; \
assert a4w4._core.cuda_compiled, 'built without CUDA'"
if ! "$PY" -c "$usable" >"$OUT/import.log" 2>&1; then
  log "no carried extension loads with this Python ($ver); building it here"
  cat "$OUT/import.log" >>"$OUT/summary.txt"
  for f in .deps/*.deb; do [[ -e $f ]] && dpkg -x "$f" .deps/root; done
  nbdir=$("$PY" -c 'import nanobind; print(nanobind.cmake_dir())')
  BUILD2=${BUILD_THERE:-build-pydevice}
  cmake -S . -B "$BUILD2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DA4W4_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a-real -DA4W4_BUILD_PYTHON=ON -DA4W4_BUILD_TESTS=OFF \
    -DA4W4_BUILD_TOOLS=OFF -DPython_EXECUTABLE="$(command -v "$PY")" -Dnanobind_DIR="$nbdir" \
    -DCMAKE_PREFIX_PATH="$repo/.deps/root/usr" -DCMAKE_CXX_FLAGS="-isystem $repo/.deps/root/usr/include" \
    >"$OUT/configure.log" 2>&1 &&
    cmake --build "$BUILD2" -j"${JOBS:-16}" --target _core >"$OUT/build.log" 2>&1 ||
    { log "device build failed"; tail -30 "$OUT/configure.log" "$OUT/build.log"; exit 1; }
  export PYTHONPATH="$repo/$BUILD2/python:$PYTHONPATH"
  "$PY" -c "$usable" 2>&1 | tee -a "$OUT/summary.txt"
fi
"$PY" -c 'import a4w4; print("a4w4", a4w4.__version__, a4w4.backends()["cuda"])' 2>&1 |
  tee -a "$OUT/summary.txt"

log "pytest -m cuda"
"$PY" -m pytest -m cuda -v -rs -p no:cacheprovider tests/python --junitxml="$OUT/pytest-cuda.xml" \
  ${PYTEST_ARGS:-} >"$OUT/pytest-cuda.log" 2>&1
echo "pytest -m cuda rc=$?" | tee -a "$OUT/summary.txt"
tail -3 "$OUT/pytest-cuda.log" | tee -a "$OUT/summary.txt"
log "pytest (whole suite)"
"$PY" -m pytest -rs -p no:cacheprovider tests/python --junitxml="$OUT/pytest-all.xml" \
  ${PYTEST_ARGS:-} >"$OUT/pytest-all.log" 2>&1
echo "pytest rc=$?" | tee -a "$OUT/summary.txt"
tail -3 "$OUT/pytest-all.log" | tee -a "$OUT/summary.txt"
