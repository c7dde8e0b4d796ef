// Operand packing for the blocked CPU GEMM kernels (gemm_driver.cpp). Packing decodes E2M1 once
// into int8 panels laid out in the order the micro-kernels read them, and turns E8M0 scales into
// doubles (decode_tables.h), so the inner loops do nothing but integer dot products and one
// scale-and-accumulate per 32-wide block.
//
// A, in groups of kGroupRows rows: for each group and block, 8 quads x kGroupRows rows x 4 bytes
// (elements 4q..4q+3 of row i at byte q*16 + i*4), signed 2*E2M1; plus per row and block the
// int32 correction -12 * sum(2a) and the double 2^(sa - 128).
// B, in panels of kPanelCols columns: for each panel and block, 8 quads x kPanelCols columns x
// 4 bytes, biased 2*E2M1 + 12; plus per block the kPanelCols doubles 2^(sb - 128).
// One int32 lane of a vector then holds 4 K elements of one column: vpdpbusd with the 4 A bytes
// of one row broadcast adds that row's 4 products into every column lane at once.
// The E8M0 bytes are kept too (kernels that sum several blocks in integers look at their spread).
// Rows and columns past the matrix are padded with zero values and the scales of the last real
// row or column (so padding never widens a tile's scale spread); they are computed and discarded.
#pragma once

#include <cstdint>
#include <vector>

#include "dispatch/problem.h"

namespace a4w4::cpu {

inline constexpr int kGroupRows = 4;
inline constexpr int kPanelCols = 32;
inline constexpr int kQuads = 8;  // 4-element quads per 32-wide block
inline constexpr int64_t kGroupBlockBytes = kQuads * kGroupRows * 4;  // 128
inline constexpr int64_t kPanelBlockBytes = kQuads * kPanelCols * 4;  // 1024

struct PackedAView {
  const int8_t* values;        // [groups][blocks][kGroupBlockBytes]
  const int32_t* corr;         // [groups][blocks][kGroupRows]
  const double* scale;         // [groups][blocks][kGroupRows]
  const uint8_t* scale_bytes;  // [groups][blocks][kGroupRows], the E8M0 bytes
};

struct PackedBView {
  const uint8_t* values;       // [panels][blocks][kPanelBlockBytes]
  const double* scale;         // [panels][blocks][kPanelCols]
  const uint8_t* scale_bytes;  // [panels][blocks][kPanelCols]
};

// Packs row group `group` (rows group*4 .. +3 of a plain operand with `blocks` blocks per row).
void pack_a_group(const PackedOperand& a, int64_t rows, int64_t blocks, int64_t group,
                  int8_t* values, int32_t* corr, double* scale, uint8_t* scale_bytes);

// An ISA's fast path for the values of four consecutive plain columns: rows[c] is B's row (packed
// bytes) for column c; writes the columns' 4-byte quads of every block into `values` (the panel's
// values at the first of the four columns).
using PackFourColumns = void (*)(const uint8_t* const rows[4], int64_t blocks, uint8_t* values);

// Packs columns [first_col, first_col + kPanelCols) of B (plain or prepared), rows beyond `rows`
// padded. `row_scratch` holds K/2 + K/32 bytes (used for prepared layouts). `pack_four`, when not
// null, packs the values of whole groups of four plain columns.
void pack_b_panel(const PackedOperand& b, int64_t rows, int64_t blocks, int64_t first_col,
                  uint8_t* values, double* scale, uint8_t* scale_bytes,
                  std::vector<uint8_t>& row_scratch, PackFourColumns pack_four = nullptr);

// Row `row` of a packed E2M1 operand as plain packed bytes (K/2) and its scale bytes: pointers into
// the operand for the plain layout, or gathered into the scratch buffers for a prepared one.
struct PlainRow {
  const uint8_t* bytes;
  const uint8_t* scales;
  int64_t scale_step;  // distance between consecutive scale bytes
};
PlainRow plain_row(const PackedOperand& op, int64_t row, int64_t blocks,
                   std::vector<uint8_t>& scratch);

// Row `row` of a prepared version-2 operand in plain order: unless codes is null, its K tiles'
// 64-byte runs into codes (k_tiles * 64 bytes, zeros past K) and, unless scales is null, their
// scale words into scales (k_tiles * 4 bytes).
void gather_tiled_row(const PackedOperand& op, int64_t row, int64_t k_tiles, uint8_t* codes,
                      uint8_t* scales);

}  // namespace a4w4::cpu
