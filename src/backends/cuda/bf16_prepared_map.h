// Which rows and bytes each converter thread of the cuda.bf16_* kernels touches in a raw stage of a
// prepared B (gemm_bf16.cu, convert_prepared), for the host as well, so a CPU test can check it
// (tests/bf16_prepared_map_test.cpp: every row once, every piece where the prepared layout has it,
// every store at its natural swizzled place, and no shared-memory bank conflicts).
//
// A raw stage is one 128-K tile of the prepared layout (numerics/weight_layout.h) for the tile's
// rows: 16-row groups of 1024 bytes; the 16 bytes of lane (r8, p), half h8 hold piece p (elements
// [8p, 8p + 8)) of blocks j = 0..3 of row r8 + 8 h8, one 4-byte word each. Converter thread c takes
// rows 16 group + rig (i = 0 .. tile N / 128 - 1): group = 2 (c / 32 + 4 i) + (c % 32) / 16, and
// rig from c % 16 in the order 0..3, 12..15, 4..11, so each quarter-warp holds rows r8 = 0..7, four
// of each half h8. Its load q (0..3) reads piece p = q ^ g(r8 % 4), g = {0, 2, 3, 1}: g(x) and g(x)
// ^ x are both permutations of 0..3, so a quarter-warp's 16-byte loads (bank group 2p + h8) and its
// bf16 stores (chunk (4 half + p) ^ r8 of 128-byte swizzled rows) each hit 8 distinct 16-byte bank
// groups.
#pragma once

#include <cstdint>

#include "numerics/host_device.h"

namespace a4w4::cuda::bf16_prepared {

struct RowMap {
  uint32_t row;           // the row in the tile (0 .. tile N - 1)
  uint32_t load_offset;   // load q reads 16 bytes at load_offset ^ (q << 5) of the raw stage
  uint32_t store_offset;  // its word j (half = j % 2 of the step) goes, as 8 bf16, to
                          // store_offset ^ ((4 half ^ q) << 4) of the bf16 stage
};

// Row i of converter thread c (0..127); the B rows start at row `b_row0` of the bf16 stage.
A4W4_HOST_DEVICE RowMap row_map(int c, int i, int b_row0) {
  const int group = 2 * (c / 32 + 4 * i) + (c % 32) / 16, t16 = c % 16;
  const int rig = t16 < 4 ? t16 : (t16 < 8 ? t16 + 8 : t16 - 4);
  const int r8 = rig % 8, h8 = rig / 8, g = (0x1320 >> (4 * (r8 % 4))) & 3;
  const uint32_t stage_row = static_cast<uint32_t>(b_row0 + 16 * group + rig);  // % 8 == r8
  return RowMap{static_cast<uint32_t>(16 * group + rig),
                static_cast<uint32_t>(group * 1024 + r8 * 128 + h8 * 16 + (g << 5)),
                stage_row * 128 + static_cast<uint32_t>((g ^ r8) << 4)};
}

}  // namespace a4w4::cuda::bf16_prepared
