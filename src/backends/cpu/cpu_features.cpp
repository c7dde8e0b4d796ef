#include "backends/cpu/cpu_features.h"

#include <cstdlib>
#include <cstring>

namespace a4w4::cpu {
namespace {

Isa detect() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi"))
    return Isa::kAvx512Vnni;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
#endif
  return Isa::kScalar;
}

Isa with_env_cap(Isa detected) {
  const char* cap = std::getenv("A4W4_CPU_ISA");
  if (cap == nullptr || *cap == '\0') return detected;
  Isa wanted = detected;
  if (std::strcmp(cap, "scalar") == 0) wanted = Isa::kScalar;
  if (std::strcmp(cap, "avx2") == 0) wanted = Isa::kAvx2;
  if (std::strcmp(cap, "avx512vnni") == 0) wanted = Isa::kAvx512Vnni;
  return wanted < detected ? wanted : detected;
}

}  // namespace

Isa best_isa() {
  static const Isa isa = with_env_cap(detect());
  return isa;
}

bool isa_supported(Isa isa) {
  return isa <= best_isa();
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512Vnni:
      return "avx512vnni";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

}  // namespace a4w4::cpu
