// Portable micro-kernel: plain C++ over the packed panels, for CPUs without AVX2.
#include <cstring>

#include "backends/cpu/fast.h"
#include "backends/cpu/gemm_driver.h"

namespace a4w4::cpu {

void micro_kernel_scalar(const MicroTile& t) {
  double acc[kGroupRows][kPanelCols];
  if (t.zero) {
    for (auto& row : acc)
      for (double& v : row) v = 0.0;
  } else {
    std::memcpy(acc, t.acc, sizeof(acc));
  }
  for (int64_t blk = 0; blk < t.blocks; ++blk) {
    const int8_t* a = t.a + blk * kGroupBlockBytes;
    const uint8_t* b = t.b + blk * kPanelBlockBytes;
    for (int i = 0; i < kGroupRows; ++i) {
      int32_t isum[kPanelCols];
      for (int j = 0; j < kPanelCols; ++j) isum[j] = t.a_corr[blk * kGroupRows + i];
      for (int q = 0; q < kQuads; ++q)
        for (int j = 0; j < kPanelCols; ++j)
          for (int e = 0; e < 4; ++e)
            isum[j] +=
                a[q * 16 + i * 4 + e] * static_cast<int32_t>(b[q * kPanelCols * 4 + j * 4 + e]);
      const double ra = t.a_scale[blk * kGroupRows + i];
      for (int j = 0; j < kPanelCols; ++j)
        acc[i][j] += static_cast<double>(isum[j]) * ra * t.b_scale[blk * kPanelCols + j];
    }
  }
  std::memcpy(t.acc, acc, sizeof(acc));
}

}  // namespace a4w4::cpu

namespace a4w4::cpu {

void gemm_scalar(const GemmProblem& problem, const ExecConfig& exec) {
  run_blocked_gemm(problem, exec, micro_kernel_scalar);
}

}  // namespace a4w4::cpu
