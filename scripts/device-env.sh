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

# The first failures of a GoogleTest log, each with what failed and the innermost case it was in
# (SCOPED_TRACE), for the output tail (device-run.sh, device-ab.sh): the device returns few files,
# and a failing call's logs may not be among them.
failures() {
  awk -v max=6 '
    /: Failure$/ { if (++n > max) exit; want = 1 }
    want && /comparison failed|Which is:|Value of:|Expected:|Actual:/ { print "  " substr($0, 1, 240) }
    /^Google Test trace:/ { trace = 1; next }
    trace { print "    in " substr($0, 1, 200); trace = 0; want = 0 }
  ' "$1"
}
