// Which x86 instruction sets the CPU we run on offers, checked once at run time. Kernels compiled
// for a newer ISA (through __attribute__((target))) are only called after these checks.
#pragma once

namespace a4w4::cpu {

enum class Isa {
  kScalar = 0,      // portable C++
  kAvx2 = 1,        // AVX2 + FMA (vpmaddubsw / vpmaddwd int8 dot products)
  kAvx512Vnni = 2,  // AVX-512 F/BW/VL/DQ + VNNI (vpdpbusd) + VBMI (vpermb)
};

// The best ISA this CPU supports. A4W4_CPU_ISA=scalar|avx2|avx512vnni in the environment lowers
// it (never raises it), e.g. to test or benchmark the slower paths on a fast machine.
Isa best_isa();
bool isa_supported(Isa isa);  // isa <= best_isa()
const char* isa_name(Isa isa);

}  // namespace a4w4::cpu
