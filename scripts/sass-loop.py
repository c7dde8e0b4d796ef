#!/usr/bin/env python3
"""Opcode histogram of a kernel's main loop, from `cuobjdump -sass` output read on this GPU-less
machine: the innermost backward branch whose body holds at least MIN_GMMA warpgroup MMAs.

Usage: scripts/sass-loop.py SASS_FILE KERNEL_NAME_PART [MIN_GMMA] [--list]

cuobjdump is not in the toolkit here; PyPI's wheel has it:
  pip download --no-deps nvidia-cuda-cuobjdump && python3 -m zipfile -e nvidia_cuda_cuobjdump-*.whl x
  x/nvidia/cu13/bin/cuobjdump -sass build-dev/CMakeFiles/a4w4_objects.dir/src/backends/cuda/gemm_skinny.cu.o
"""
import collections
import re
import sys

# sm_90 pipes: the integer pipe takes two cycles per warp instruction (16 lanes per scheduler).
INTEGER_PIPE = {"PRMT", "LOP3", "SHF", "IADD3", "ISETP", "SEL", "VIMNMX", "VIMNMX3", "IMNMX", "LEA",
                "FLO", "POPC", "BFE", "BFI", "VOTE", "PLOP3", "P2R", "R2P", "IABS", "MOV", "VIADD"}
FMA_PIPE = {"IMAD", "FFMA", "FADD", "FMUL", "HFMA2"}


def main():
    args = [a for a in sys.argv[1:] if a != "--list"]
    sass, name = args[0], args[1]
    min_gmma = int(args[2]) if len(args) > 2 else 8
    functions = [f for f in open(sass).read().split("Function : ") if name in f.split("\n")[0]]
    if len(functions) != 1:
        sys.exit(f"{len(functions)} functions match {name!r}")
    code = []
    for line in functions[0].split("\n"):
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            code.append((int(m.group(1), 16), m.group(2).strip()))
    index = {address: i for i, (address, _) in enumerate(code)}
    gmma = [i for i, (_, text) in enumerate(code) if "GMMA" in text]
    best = None
    for i, (address, text) in enumerate(code):
        m = re.search(r"BRA .*0x([0-9a-f]+)", text)
        target = int(m.group(1), 16) if m else None
        if target is None or target >= address or target not in index:
            continue
        lo, hi = index[target], i
        if sum(lo <= g <= hi for g in gmma) >= min_gmma and (best is None or hi - lo < best[1] - best[0]):
            best = (lo, hi)
    if best is None:
        sys.exit("no loop with enough GMMAs")
    lo, hi = best
    ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]
                              for _, text in code[lo:hi + 1])
    print(f"loop: {hi - lo + 1} instructions, {sum(lo <= g <= hi for g in gmma)} GMMA; "
          f"integer pipe {sum(v for k, v in ops.items() if k in INTEGER_PIPE)}, "
          f"FMA pipe {sum(v for k, v in ops.items() if k in FMA_PIPE)}")
    for op, count in ops.most_common():
        print(f"{count:5d} {op}")
    if "--list" in sys.argv:
        for address, text in code[lo:hi + 1]:
            print(f"{address:05x} {text}")


if __name__ == "__main__":
    main()
