#!/usr/bin/env bash
# A/B timing of library variants on the GPU machine (the `device` tool), from the repo root: each
# variant is a library built here by scripts/variant-lib.sh (build-exp/libs/NAME/liba4w4.so.0.xz),
# run through the same carried CLI (build-carry/, scripts/device-build.sh) by LD_LIBRARY_PATH, the
# variants alternated within each round so that clock and thermal drift fall on all of them.
# Prints one table: a row per shape, a column per variant, each cell the rounds' medians (µs);
# every bench output stays under $OUT.
#   bash scripts/device-ab.sh [options] SHAPES_FILE VARIANT...
# Options (before the shapes file):
#   --rounds N        rounds (default 2)
#   --test VARIANT    first run `ctest -L cuda` on that variant (repeatable)
#   --memcheck VARIANT  compute-sanitizer memcheck on its `*Skinny*` GPU tests (or A4W4_AB_FILTER)
#   --                the rest of the options go to every `a4w4 bench` call (default: --backend cuda
#                     --warmup-ms 100 --samples 10 --no-baselines --no-plain)
# Carry: build-carry, build-exp/libs and the shapes file's folder when it is ignored.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
source scripts/device-env.sh
rounds=2 tests=() memchecks=()
while [[ $# -gt 0 ]]; do
  case $1 in
  --rounds) rounds=$2 && shift 2 ;;
  --test) tests+=("$2") && shift 2 ;;
  --memcheck) memchecks+=("$2") && shift 2 ;;
  *) break ;;
  esac
done
if [[ $# -lt 2 ]]; then
  echo "usage: $0 [--rounds N] [--test VARIANT] [--memcheck VARIANT] SHAPES_FILE VARIANT... [-- BENCH_ARGS]" >&2
  exit 2
fi
shapes=$1
shift
variants=()
while [[ $# -gt 0 && $1 != -- ]]; do variants+=("$1") && shift; done
[[ ${1:-} == -- ]] && shift
bench_args=("$@")
((${#bench_args[@]})) || bench_args=(--backend cuda --warmup-ms 100 --samples 10 --no-baselines --no-plain)

base_path=$LD_LIBRARY_PATH
libs=$(mktemp -d)
trap 'rm -rf "$libs"' EXIT
for v in "${variants[@]}" "${tests[@]}" "${memchecks[@]}"; do
  [[ -e $libs/$v/liba4w4.so.0 ]] && continue
  if [[ ! -f build-exp/libs/$v/liba4w4.so.0.xz ]]; then
    echo "no build-exp/libs/$v/liba4w4.so.0.xz (scripts/variant-lib.sh $v ...; carry build-exp/libs)" >&2
    exit 2
  fi
  mkdir -p "$libs/$v" && xz -dc "build-exp/libs/$v/liba4w4.so.0.xz" >"$libs/$v/liba4w4.so.0"
done
with() { local v=$1 && shift && LD_LIBRARY_PATH="$libs/$v:$base_path" "$@"; }

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null
for v in "${tests[@]}"; do
  with "$v" ctest --test-dir "$BUILD" -L cuda --output-on-failure --timeout 600 >"$OUT/ctest-$v.log" 2>&1
  echo "ctest -L cuda ($v): rc=$? $(grep -E 'tests passed' "$OUT/ctest-$v.log" | tail -1)"
  grep -E "\(Failed\)|\*\*\*" "$OUT/ctest-$v.log" | head -5
  failures "$OUT/ctest-$v.log"
done
for v in "${memchecks[@]}"; do
  with "$v" compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/tests/cuda/a4w4_cuda_test" \
    --gtest_filter="${A4W4_AB_FILTER:-*Skinny*}" >"$OUT/memcheck-$v.log" 2>&1
  echo "memcheck ($v): rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-$v.log" | tail -1)"
  grep -m 3 -E '^========= (Invalid|Program hit|Uninitialized|Error)' "$OUT/memcheck-$v.log"
  failures "$OUT/memcheck-$v.log"
done

for ((round = 1; round <= rounds; ++round)); do
  for v in "${variants[@]}"; do
    with "$v" "$BUILD/a4w4" bench --shapes "$shapes" "${bench_args[@]}" >"$OUT/ab-$v-$round.md" \
      2>"$OUT/ab-$v-$round.err" || echo "bench ($v, round $round) failed: $(tail -1 "$OUT/ab-$v-$round.err")"
  done
done

# The table: the first "a4w4 ... µs" column of each output, by shape (and label) in file order.
python3 - "$OUT" "$rounds" "${variants[@]}" <<'EOF'
import sys
out, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def times(path):
    rows, column = [], None
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError:
        return rows
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if column is None:
            column = next((i for i, c in enumerate(cells) if c.startswith("a4w4") and "µs" in c), None)
            continue
        if len(cells) > column and cells[0][:1].isdigit():
            rows.append((" ".join(cells[:2]).strip(), cells[column]))
    return rows

results = {v: [times(f"{out}/ab-{v}-{r}.md") for r in range(1, rounds + 1)] for v in variants}
shapes = [s for s, _ in results[variants[0]][0]] if results[variants[0]] else []
print("| shape | " + " | ".join(variants) + " |")
print("|---" * (len(variants) + 1) + "|")
for i, shape in enumerate(shapes):
    cells = []
    for v in variants:
        cells.append(" / ".join(r[i][1] if i < len(r) else "?" for r in results[v]))
    print(f"| {shape} | " + " | ".join(cells) + " |")
EOF
