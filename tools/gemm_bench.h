// `a4w4 gemm -m M -n N -k K`: a GEMM on random data, timed and optionally checked.
#pragma once

#include <cstdint>

#include "gemm_runner.h"

namespace a4w4::cli {

struct BenchOptions {
  int64_t m = 256;
  int64_t n = 1024;
  int64_t k = 2048;
  bool check = false;
  int repeat = 5;
  uint64_t seed = 1;
};

// Random bf16 operands quantized with RCEIL by the library, one warm-up call, then `repeat` timed
// calls; prints the median time and TFLOP/s, and with check the error against a float64
// reference (a Failure if it exceeds the tolerance of the output dtype).
void run_gemm_benchmark(const BenchOptions& options, const GemmSettings& settings);

}  // namespace a4w4::cli
