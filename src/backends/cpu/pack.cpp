#include "backends/cpu/pack.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/decode_tables.h"
#include "numerics/mx.h"
#include "numerics/weight_layout.h"

namespace a4w4::cpu {

PlainRow plain_row(const PackedOperand& op, int64_t row, int64_t blocks,
                   std::vector<uint8_t>& scratch) {
  if (op.layout == A4W4_LAYOUT_PLAIN)
    return {op.data + row * op.stride_bytes, op.scale + row * op.scale_stride, 1};
  // Prepared (GPU tile) layout: gather the row back into plain order. Version 2 holds it in runs
  // of 64 bytes (and 4 scale bytes) per K tile, copied whole (the padding past K is zeros).
  const int64_t k = blocks * numerics::kBlockSize, k_tiles = layout::k_tiles(k);
  scratch.resize(static_cast<size_t>(k_tiles * (layout::kRowRunBytes + layout::kTileBlocks)));
  uint8_t* bytes = scratch.data();
  uint8_t* scales = bytes + k_tiles * layout::kRowRunBytes;
  if (op.layout == A4W4_LAYOUT_PREPARED_V2) {
    gather_tiled_row(op, row, k_tiles, bytes, scales);
    return {bytes, scales, 1};
  }
  for (int64_t i = 0; i < k; i += 2)
    bytes[i / 2] = op.data[layout::prepared_weight_offset(op.layout, row, i, k_tiles)];
  for (int64_t b = 0; b < blocks; ++b)
    scales[b] = op.scale[layout::prepared_scale_offset(row, b, k_tiles)];
  return {bytes, scales, 1};
}

void gather_tiled_row(const PackedOperand& op, int64_t row, int64_t k_tiles, uint8_t* codes,
                      uint8_t* scales) {
  // A row's runs and scale words are one tile (kTileBytes, kTileScaleBytes) apart.
  const uint8_t* run = op.data + layout::row_run_offset(row, 0, k_tiles);
  const uint8_t* word = op.scale + layout::prepared_scale_offset(row, 0, k_tiles);
  for (int64_t t = 0; t < k_tiles; ++t) {
    if (codes != nullptr)
      std::memcpy(codes + t * layout::kRowRunBytes, run + t * layout::kTileBytes,
                  layout::kRowRunBytes);
    if (scales != nullptr)
      std::memcpy(scales + t * layout::kTileBlocks, word + t * layout::kTileScaleBytes,
                  layout::kTileBlocks);
  }
}

void pack_a_group(const PackedOperand& a, int64_t rows, int64_t blocks, int64_t group,
                  int8_t* values, int32_t* corr, double* scale, uint8_t* scale_bytes) {
  for (int i = 0; i < kGroupRows; ++i) {
    const int64_t row = group * kGroupRows + i;
    const uint8_t* sa = a.scale + std::min(row, rows - 1) * a.scale_stride;
    for (int64_t b = 0; b < blocks; ++b) {
      scale_bytes[b * kGroupRows + i] = sa[b];
      scale[b * kGroupRows + i] = kHalfScale[sa[b]];
    }
    if (row >= rows) {  // padding row: zero values, no correction
      for (int64_t b = 0; b < blocks; ++b) {
        for (int q = 0; q < kQuads; ++q)
          std::memset(values + b * kGroupBlockBytes + q * 16 + i * 4, 0, 4);
        corr[b * kGroupRows + i] = 0;
      }
      continue;
    }
    const uint8_t* src = a.data + row * a.stride_bytes;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* in = src + b * 16;
      int8_t* out = values + b * kGroupBlockBytes + i * 4;
      int sum = 0;
      for (int q = 0; q < kQuads; ++q) {
        const uint32_t quad =
            kDoubledPair[in[2 * q]] | static_cast<uint32_t>(kDoubledPair[in[2 * q + 1]]) << 16;
        std::memcpy(out + q * 16, &quad, 4);
        sum += kDoubledPairSum[in[2 * q]] + kDoubledPairSum[in[2 * q + 1]];
      }
      corr[b * kGroupRows + i] = -kBBias * sum;
    }
  }
}

void pack_b_panel(const PackedOperand& b, int64_t rows, int64_t blocks, int64_t first_col,
                  uint8_t* values, double* scale, uint8_t* scale_bytes,
                  std::vector<uint8_t>& row_scratch, PackFourColumns pack_four) {
  for (int j = 0; j < kPanelCols; ++j) {
    const int64_t row = first_col + j;
    if (row >= rows) {  // padding column: biased zeros, the scales of the last real column
      for (int64_t blk = 0; blk < blocks; ++blk) {
        for (int q = 0; q < kQuads; ++q)
          std::memset(values + blk * kPanelBlockBytes + q * kPanelCols * 4 + j * 4, kBBias, 4);
        scale[blk * kPanelCols + j] = scale[blk * kPanelCols + j - 1];
        scale_bytes[blk * kPanelCols + j] = scale_bytes[blk * kPanelCols + j - 1];
      }
      continue;
    }
    // Four whole columns at once through the ISA's packer, when it has one: plain rows, or a
    // prepared version-2 B's rows gathered from their tiles first (64-byte runs).
    const bool four_at_once = pack_four != nullptr && (b.layout == A4W4_LAYOUT_PLAIN ||
                                                       b.layout == A4W4_LAYOUT_PREPARED_V2);
    if (four_at_once && j % 4 == 0 && row + 3 < rows) {
      const uint8_t* four[4];
      if (b.layout == A4W4_LAYOUT_PLAIN) {
        for (int c = 0; c < 4; ++c) four[c] = b.data + (row + c) * b.stride_bytes;
      } else {
        const int64_t k_tiles = (blocks + layout::kTileBlocks - 1) / layout::kTileBlocks;
        const int64_t row_bytes = k_tiles * layout::kRowRunBytes;
        row_scratch.resize(static_cast<size_t>(4 * row_bytes));
        for (int c = 0; c < 4; ++c) {
          uint8_t* out = row_scratch.data() + c * row_bytes;
          gather_tiled_row(b, row + c, k_tiles, out, nullptr);
          four[c] = out;
        }
      }
      pack_four(four, blocks, values + j * 4);  // before plain_row reuses row_scratch
    }
    const bool values_done = four_at_once && row - j % 4 + 3 < rows;
    const PlainRow src = plain_row(b, row, blocks, row_scratch);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      if (!values_done) {
        const uint8_t* in = src.bytes + blk * 16;
        uint8_t* out = values + blk * kPanelBlockBytes + j * 4;
        for (int q = 0; q < kQuads; ++q) {
          const uint32_t quad =
              kBiasedPair[in[2 * q]] | static_cast<uint32_t>(kBiasedPair[in[2 * q + 1]]) << 16;
          std::memcpy(out + q * kPanelCols * 4, &quad, 4);
        }
      }
      const uint8_t sb = src.scales[blk * src.scale_step];
      scale[blk * kPanelCols + j] = kHalfScale[sb];
      scale_bytes[blk * kPanelCols + j] = sb;
    }
  }
}

}  // namespace a4w4::cpu
