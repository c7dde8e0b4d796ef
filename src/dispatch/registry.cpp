#include "dispatch/registry.h"

#include <array>

#include "api/error.h"
#include "backends/cpu/fast.h"
#include "backends/cpu/reference.h"
#include "backends/cuda/cuda_backend.h"

namespace a4w4 {
namespace {

std::string always_applicable(const GemmProblem&) { return {}; }

// In order of preference: dispatch takes the first one that applies. The fast CPU kernels come
// before cpu.reference (the oracle, still selectable by name; docs/cpu-backend.md says how they
// compare with it).
constexpr std::array kGemmKernels = {
    GemmKernel{"cpu.gemv_avx512vnni", A4W4_BACKEND_CPU, cpu::gemv_avx512_vnni_why_not,
               cpu::gemv_avx512_vnni},
    GemmKernel{"cpu.gemm_avx512vnni", A4W4_BACKEND_CPU, cpu::gemm_avx512_vnni_why_not,
               cpu::gemm_avx512_vnni},
    GemmKernel{"cpu.gemm_avx2", A4W4_BACKEND_CPU, cpu::gemm_avx2_why_not, cpu::gemm_avx2},
    GemmKernel{"cpu.gemm_scalar", A4W4_BACKEND_CPU, always_applicable, cpu::gemm_scalar},
    GemmKernel{"cpu.reference", A4W4_BACKEND_CPU, always_applicable, cpu::reference_gemm},
#if A4W4_WITH_CUDA
    GemmKernel{"cuda.decode", A4W4_BACKEND_CUDA, cuda::gemm_decode_why_not, cuda::gemm_decode},
    GemmKernel{"cuda.generic", A4W4_BACKEND_CUDA, cuda::gemm_generic_why_not, cuda::gemm_generic},
#endif
};

}  // namespace

std::span<const GemmKernel> gemm_kernels() { return kGemmKernels; }

const GemmKernel& select_gemm_kernel(const GemmProblem& problem, a4w4_backend backend,
                                     std::string_view requested_name) {
  if (!requested_name.empty()) {
    for (const GemmKernel& kernel : kGemmKernels) {
      if (kernel.name != requested_name) continue;
      if (kernel.backend != backend)
        fail(A4W4_ERROR_KERNEL_NOT_APPLICABLE,
             "kernel: '{}' is a {} kernel, but the operands are on the {} backend", kernel.name,
             a4w4_backend_name(kernel.backend), a4w4_backend_name(backend));
      const std::string reason = kernel.why_not(problem);
      if (!reason.empty())
        fail(A4W4_ERROR_KERNEL_NOT_APPLICABLE, "kernel: '{}' cannot run M={} N={} K={}: {}",
             kernel.name, problem.m, problem.n, problem.k, reason);
      return kernel;
    }
    fail(A4W4_ERROR_KERNEL_NOT_FOUND,
         "kernel: no kernel named '{}' is registered (a4w4 kernels lists them)", requested_name);
  }
  for (const GemmKernel& kernel : kGemmKernels) {
    if (kernel.backend == backend && kernel.why_not(problem).empty()) return kernel;
  }
  fail(A4W4_ERROR_KERNEL_NOT_APPLICABLE, "no {} kernel in this build can run M={} N={} K={}",
       a4w4_backend_name(backend), problem.m, problem.n, problem.k);
}

}  // namespace a4w4

extern "C" {

int a4w4_kernel_count(void) { return static_cast<int>(a4w4::gemm_kernels().size()); }

a4w4_status a4w4_kernel_info(int index, const char** name, a4w4_backend* backend) {
  return a4w4::guarded(__func__, [&] {
    const auto kernels = a4w4::gemm_kernels();
    if (index < 0 || static_cast<size_t>(index) >= kernels.size())
      a4w4::fail(A4W4_ERROR_INVALID_ARGUMENT, "index: expected 0 <= index < {}, got {}",
                 kernels.size(), index);
    if (name != nullptr) *name = kernels[index].name;
    if (backend != nullptr) *backend = kernels[index].backend;
  });
}

}  // extern "C"
