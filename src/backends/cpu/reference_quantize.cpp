// Reference quantizer and dequantizer: one block at a time through numerics::quantize_block,
// rows spread over threads.
#include <algorithm>
#include <array>
#include <vector>
#include <cmath>

#include "backends/cpu/reference.h"
#include "numerics/float_formats.h"
#include "numerics/mx.h"
#include "numerics/weight_layout.h"

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

void unpack_row(const PackedOperand& op, int64_t row, int64_t cols, uint8_t* codes,
                uint8_t* scales) {
  const int64_t blocks = cols / numerics::kBlockSize;
  if (op.layout == A4W4_LAYOUT_PLAIN) {
    const uint8_t* packed = op.data + row * op.stride_bytes;
    for (int64_t i = 0; i < cols; ++i) codes[i] = numerics::unpack_e2m1(packed, i);
    for (int64_t b = 0; b < blocks; ++b) scales[b] = op.scale[row * op.scale_stride + b];
    return;
  }
  const int64_t k_tiles = layout::k_tiles(cols);
  for (int64_t i = 0; i < cols; i += 2) {
    const uint8_t byte = op.data[layout::prepared_weight_offset(op.layout, row, i, k_tiles)];
    codes[i] = byte & 0xF;
    codes[i + 1] = byte >> 4;
  }
  for (int64_t b = 0; b < blocks; ++b)
    scales[b] = op.scale[layout::prepared_scale_offset(row, b, k_tiles)];
}

void reference_dequantize(const DequantizeProblem& p, const ExecConfig& exec) {
#pragma omp parallel num_threads(exec.num_threads)
  {
    std::vector<uint8_t> codes(static_cast<size_t>(p.cols));
    std::vector<uint8_t> scales(static_cast<size_t>(p.cols / numerics::kBlockSize));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) {
      unpack_row(p.q, r, p.cols, codes.data(), scales.data());
      for (int64_t i = 0; i < p.cols; ++i) {
        const double value = numerics::e2m1_to_float(codes[i]) *
                             numerics::e8m0_to_double(scales[i / numerics::kBlockSize]);
        numerics::store_rounded(p.y_dtype, p.y, r * p.y_stride + i, value);
      }
    }
  }
}

void prepare_weight(const PrepareWeightProblem& p, const ExecConfig& exec) {
  const int64_t k_tiles = layout::k_tiles(p.k);
  // A4W4_LAYOUT_PREPARED_V2_INT8: version 2's tiles, then the int8 part.
  const a4w4_layout tiles = layout::tiles_layout(p.layout);
  std::fill_n(p.prepared, layout::prepared_weight_bytes(p.n, p.k), uint8_t{0});
  std::fill_n(p.prepared_scale, layout::prepared_scale_bytes(p.n, p.k), uint8_t{0});
  const int64_t blocks = p.k / numerics::kBlockSize;
#pragma omp parallel for num_threads(exec.num_threads) schedule(static)
  for (int64_t n = 0; n < p.n; ++n) {
    const uint8_t* row = p.b.data + n * p.b.stride_bytes;
    for (int64_t i = 0; i < p.k; i += 2)
      p.prepared[layout::prepared_weight_offset(tiles, n, i, k_tiles)] = row[i / 2];
    for (int64_t b = 0; b < blocks; ++b)
      p.prepared_scale[layout::prepared_scale_offset(n, b, k_tiles)] =
          p.b.scale[n * p.b.scale_stride + b];
  }
  if (p.layout == A4W4_LAYOUT_PREPARED_V2_INT8) prepare_int8_part(p, exec);
}

}  // namespace a4w4::cpu
