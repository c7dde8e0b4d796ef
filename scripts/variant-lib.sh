#!/usr/bin/env bash
# Builds a variant of build-dev's library for an A/B run on the device: one CUDA source compiled
# again (its ninja command, plus the given defines) and the library linked with that object in
# place of build-dev's, written xz-compressed (about 3 MB, for the device's carry limit) to
# build-exp/libs/NAME/liba4w4.so.0.xz, with the object's SASS beside it (build-exp/obj/NAME.sass,
# when cuobjdump is found; scripts/sass-loop.py reads it). On the device, run each variant through
# the same binaries: LD_LIBRARY_PATH=DIR_OF_THE_UNPACKED_LIB build-dev/a4w4 bench ...
# Usage: scripts/variant-lib.sh NAME SOURCE [DEFINES...]
#   e.g. scripts/variant-lib.sh base src/backends/cuda/gemm_skinny.cu
#        scripts/variant-lib.sh try src/backends/cuda/gemm_skinny.cu -DA4W4_EXPERIMENT=1
# Needs build-dev (scripts/device-build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 source=$2
shift 2
repo=$PWD object="CMakeFiles/a4w4_objects.dir/$source.o"
mkdir -p build-exp/obj "build-exp/libs/$name"
cd build-dev
compile=$(ninja -t commands "$object" | tail -1)
compile=${compile/-MD -MT $object -MF $object.d/}
compile=${compile/-o $object/-o $repo/build-exp/obj/$name.o}
eval "$compile $*"
link=$(ninja -t commands liba4w4.so.0.1.0 | tail -1)
link=${link#: && }
link=${link%% && :*}
link=${link/ $object / $repo/build-exp/obj/$name.o }
link=${link/-o liba4w4.so.0.1.0/-o $repo/build-exp/libs/$name/liba4w4.so.0}
eval "$link"
xz -T2 -f -6 "$repo/build-exp/libs/$name/liba4w4.so.0"
if command -v cuobjdump >/dev/null; then
  cuobjdump -sass "$repo/build-exp/obj/$name.o" >"$repo/build-exp/obj/$name.sass"
fi
ls -la "$repo/build-exp/libs/$name"
