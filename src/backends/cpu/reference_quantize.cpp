// Reference quantizer and dequantizer: one block at a time through numerics::quantize_block,
// rows spread over threads.
#include <array>
#include <cmath>

#include "backends/cpu/reference.h"
#include "numerics/float_formats.h"
#include "numerics/mx.h"

namespace a4w4::cpu {

void reference_quantize(const QuantizeProblem& p, const ExecConfig& exec) {
  const int64_t blocks = p.cols / numerics::kBlockSize;
#pragma omp parallel for num_threads(exec.num_threads) schedule(static)
  for (int64_t r = 0; r < p.rows; ++r) {
    std::array<float, numerics::kBlockSize> values;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      for (int i = 0; i < numerics::kBlockSize; ++i)
        values[i] = numerics::load_float(p.x.dtype, p.x.data,
                                         r * p.x.stride + blk * numerics::kBlockSize + i);
      p.scale[r * p.scale_stride + blk] = numerics::quantize_block(
          values, p.mode, p.q + r * p.q_stride_bytes + blk * numerics::kBlockSize / 2);
    }
  }
}

void reference_dequantize(const DequantizeProblem& p, const ExecConfig& exec) {
#pragma omp parallel for num_threads(exec.num_threads) schedule(static)
  for (int64_t r = 0; r < p.rows; ++r) {
    const uint8_t* codes = p.q.data + r * p.q.stride_bytes;
    const uint8_t* scales = p.q.scale + r * p.q.scale_stride;
    for (int64_t i = 0; i < p.cols; ++i) {
      const double value = numerics::e2m1_to_float(numerics::unpack_e2m1(codes, i)) *
                           numerics::e8m0_to_double(scales[i / numerics::kBlockSize]);
      numerics::store_rounded(p.y_dtype, p.y, r * p.y_stride + i, value);
    }
  }
}

}  // namespace a4w4::cpu
