# Sourced by the scripts run on the GPU machine (device-run, device-profile, device-tune) from the
# repo root: finds the build made here by scripts/device-build.sh — build-dev/ itself or its slim
# copy carried as build-carry/build-dev — and makes its runtime libraries and the paths its CTest
# files name resolve there. Sets BUILD (default build-dev) and OUT (default ./out).
OUT=${OUT:-$PWD/out}
BUILD=${BUILD:-build-dev}
mkdir -p "$OUT"
if [[ ! -d $BUILD && -d build-carry/$BUILD ]]; then ln -s "build-carry/$BUILD" "$BUILD"; fi
# The CTest files name this machine's checkout (/work/main) and CMake module path.
if [[ ! -e /work/main && -d $BUILD ]]; then mkdir -p /work && ln -s "$PWD" /work/main; fi
for module in "$BUILD"/cmake-modules/*.cmake; do
  [[ -e $module ]] || continue
  target=$(grep -ho '/usr/share/cmake-[0-9.]*/Modules/GoogleTestAddTests.cmake' \
    "$BUILD"/tests/cuda/*include.cmake 2>/dev/null | head -1)
  [[ -n $target && ! -e $target ]] && mkdir -p "$(dirname "$target")" && cp "$module" "$target"
done
export LD_LIBRARY_PATH="$PWD/$BUILD/runtime-libs:${LD_LIBRARY_PATH:-}"
