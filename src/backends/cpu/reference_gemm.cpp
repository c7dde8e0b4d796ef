// Reference MXFP4 GEMM. Each output tile decodes its rows of A and B once into 2*E2M1 integers,
// so a 32-wide block dot product is an exact int32 sum; the block partial isum * 2^(sa+sb-256)
// (the 1/4 of the doubling folded in) is exact in double, and the partials are added in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/epilogue.h"
#include "backends/cpu/reference.h"
#include "numerics/float_formats.h"
#include "numerics/mx.h"

namespace a4w4::cpu {
namespace {

constexpr int64_t kTileRows = 32;
constexpr int64_t kTileCols = 64;

// 2^(i - 256) for the sum of two scale bytes i = sa + sb in [0, 508]; index 509 marks NaN.
struct ScaleTable {
  double values[510];
  ScaleTable() {
    for (int i = 0; i < 509; ++i) values[i] = std::ldexp(1.0, i - 256);
    values[509] = NAN;
  }
  double operator()(uint8_t sa, uint8_t sb) const {
    const bool nan = sa == numerics::kScaleNaN || sb == numerics::kScaleNaN;
    return values[nan ? 509 : sa + sb];
  }
};

// Rows [first, first + count) of a packed operand, decoded to 2*E2M1 integers (count x k) and
// their scale bytes (count x k/32).
struct DecodedRows {
  std::vector<int8_t> values;
  std::vector<uint8_t> scales;
  std::vector<uint8_t> codes;  // scratch
};

void decode_rows(const PackedOperand& op, int64_t first, int64_t count, int64_t k,
                 DecodedRows& out) {
  const int64_t blocks = k / numerics::kBlockSize;
  out.values.resize(static_cast<size_t>(count * k));
  out.scales.resize(static_cast<size_t>(count * blocks));
  out.codes.resize(static_cast<size_t>(k));
  for (int64_t r = 0; r < count; ++r) {
    unpack_row(op, first + r, k, out.codes.data(), out.scales.data() + r * blocks);
    for (int64_t i = 0; i < k; ++i) out.values[r * k + i] = numerics::kE2M1Doubled[out.codes[i]];
  }
}

int32_t block_dot(const int8_t* a, const int8_t* b) {
  int32_t sum = 0;
  for (int i = 0; i < numerics::kBlockSize; ++i)
    sum += static_cast<int16_t>(a[i]) * static_cast<int16_t>(b[i]);
  return sum;
}

}  // namespace

void reference_gemm(const GemmProblem& p, const ExecConfig& exec) {
  static const ScaleTable scale_table;
  const int64_t blocks = p.k / numerics::kBlockSize;
  const int64_t splits = std::max(p.split_k, 1);
  const int64_t row_tiles = (p.m + kTileRows - 1) / kTileRows;
  const int64_t col_tiles = (p.n + kTileCols - 1) / kTileCols;
  const int64_t tiles = row_tiles * col_tiles;

#pragma omp parallel num_threads(exec.num_threads)
  {
    DecodedRows a_tile, b_tile;
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t m0 = (t / col_tiles) * kTileRows, n0 = (t % col_tiles) * kTileCols;
      const int64_t rows = std::min(kTileRows, p.m - m0), cols = std::min(kTileCols, p.n - n0);
      decode_rows(p.a, m0, rows, p.k, a_tile);
      decode_rows(p.b, n0, cols, p.k, b_tile);
      for (int64_t i = 0; i < rows; ++i) {
        const uint8_t* sa = a_tile.scales.data() + i * blocks;
        for (int64_t j = 0; j < cols; ++j) {
          const uint8_t* sb = b_tile.scales.data() + j * blocks;
          double acc = 0.0;
          // Split-K: partition s covers blocks [s*blocks/splits, (s+1)*blocks/splits).
          for (int64_t s = 0; s < splits; ++s) {
            double partial = 0.0;
            for (int64_t blk = s * blocks / splits; blk < (s + 1) * blocks / splits; ++blk) {
              const int64_t offset = blk * numerics::kBlockSize;
              const int32_t isum =
                  block_dot(a_tile.values.data() + i * p.k + offset,
                            b_tile.values.data() + j * p.k + offset);
              partial += static_cast<double>(isum) * scale_table(sa[blk], sb[blk]);
            }
            acc += partial;
          }
          store_output(p, m0 + i, n0 + j, acc);
        }
      }
    }
  }
}

}  // namespace a4w4::cpu
