// One GEMM problem set up for the library: a context configured from the command line, the
// operands placed on the device, and the a4w4_gemm call that can be repeated (for timing).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "a4w4/a4w4.h"
#include "a4w4/a4w4.hpp"
#include "common.h"
#include "device_memory.h"

namespace a4w4::cli {

enum class OutDtype { kF32, kBF16, kF16 };

a4w4_dtype library_dtype(OutDtype dtype);
const char* out_dtype_name(OutDtype dtype);
// ||D - ref|| / ||ref|| a correct kernel stays within for D in dtype (one rounding of D); with
// fast accumulation at least 1e-2 (its bound, 2^-5 of the sum of |products| per element, is not
// relative to D: docs/semantics.md).
double check_tolerance(OutDtype dtype, a4w4_math_mode mode = A4W4_MATH_EXACT);

struct GemmSettings {
  a4w4_backend backend = A4W4_BACKEND_CPU;
  int threads = 0;    // 0: the library's default
  std::string tuned;  // a tuned configuration to load (empty: none, or A4W4_TUNED_CONFIG's)
  OutDtype out = OutDtype::kF32;
  GemmOptions call;  // alpha, beta, kernel, split-K, math mode, B constant
};

// A float operand in host memory: C as [rows, cols], bias as [cols] with rows == 1.
struct FloatMatrix {
  a4w4_dtype dtype = A4W4_DTYPE_F32;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> bytes;
};

class GemmRun {
 public:
  // a, b, c and bias must outlive this object; c and bias may be null.
  GemmRun(const GemmSettings& settings, DeviceMemory& memory, const MxMatrix& a, const MxMatrix& b,
          const FloatMatrix* c, const FloatMatrix* bias);
  // options_ points into call_ (its kernel name): not copied or moved.
  GemmRun(const GemmRun&) = delete;
  GemmRun& operator=(const GemmRun&) = delete;

  // One a4w4_gemm call (queued, on a device backend). Throws Failure on error.
  void run();
  void synchronize() { memory_.synchronize(); }
  // D, row-major [M, N], in the output dtype.
  std::vector<uint8_t> result();

 private:
  Context context_;
  DeviceMemory& memory_;
  const GemmOptions call_;
  const a4w4_gemm_options options_;
  a4w4_tensor a_{}, a_scale_{}, b_{}, b_scale_{}, c_{}, bias_{}, d_{};
  bool has_c_ = false, has_bias_ = false;
  std::vector<uint8_t> d_host_;
};

// D as an NPY array: '<f4' for fp32, '<f4' widened exactly for bf16, '<f2' for fp16.
npy::Array result_array(OutDtype dtype, int64_t rows, int64_t cols, std::vector<uint8_t> raw);

// D's values, exactly, for checking.
std::vector<double> result_values(OutDtype dtype, std::span<const uint8_t> raw);

}  // namespace a4w4::cli
