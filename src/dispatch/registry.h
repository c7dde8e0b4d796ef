// The kernel registry: every GEMM kernel compiled into this build, by name, with the test of
// whether it can run a problem. Dispatch chooses from it; an explicit kernel name is looked up
// here and refused with its own status code when unknown or not applicable.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "a4w4/a4w4.h"
#include "dispatch/problem.h"

namespace a4w4 {

struct GemmKernel {
  const char* name;
  a4w4_backend backend;
  // Empty when the kernel can run the problem; otherwise why not (one phrase).
  std::string (*why_not)(const GemmProblem& problem);
  void (*run)(const GemmProblem& problem, const ExecConfig& exec);
};

std::span<const GemmKernel> gemm_kernels();

// The kernel to run problem on backend: the named one (validated) or the dispatcher's choice.
// Fails with A4W4_ERROR_KERNEL_NOT_FOUND / A4W4_ERROR_KERNEL_NOT_APPLICABLE.
const GemmKernel& select_gemm_kernel(const GemmProblem& problem, a4w4_backend backend,
                                     std::string_view requested_name);

}  // namespace a4w4
