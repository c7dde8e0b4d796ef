// The CUDA backend's entry points in a build configured without CUDA (A4W4_CUDA=OFF or no nvcc).
#include "api/error.h"
#include "backends/cuda/cuda_backend.h"

namespace a4w4::cuda {
namespace {
[[noreturn]] void not_compiled() {
  fail(A4W4_ERROR_BACKEND_NOT_COMPILED, "this build of a4w4 has no CUDA backend");
}
}  // namespace

void check_pointer(const void*, a4w4_device device, const char*) {
  if (device.type == A4W4_DEVICE_CUDA) not_compiled();
}
void quantize(const QuantizeProblem&) { not_compiled(); }
void dequantize(const DequantizeProblem&) { not_compiled(); }
void prepare_weight(const PrepareWeightProblem&) { not_compiled(); }
std::string gemm_generic_why_not(const GemmProblem&) { return "CUDA is not compiled in"; }
void gemm_generic(const GemmProblem&, const ExecConfig&) { not_compiled(); }
std::string gemm_decode_why_not(const GemmProblem&) { return "CUDA is not compiled in"; }
void gemm_decode(const GemmProblem&, const ExecConfig&) { not_compiled(); }

}  // namespace a4w4::cuda
