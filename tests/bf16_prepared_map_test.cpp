// The converter threads' map over a prepared B's raw stage in the cuda.bf16_* kernels
// (src/backends/cuda/bf16_prepared_map.h), checked on the host against the prepared layout's
// definition (docs/weight-layout.md, restated here) and the 128-byte swizzle wgmma reads
// (restated here too): every row once, every piece where the layout puts it, every store at its
// natural place, and no shared-memory bank conflicts for a quarter-warp's 16-byte accesses.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "backends/cuda/bf16_prepared_map.h"

namespace {

using a4w4::cuda::bf16_prepared::row_map;

// Byte of elements (k, k + 1) (k even, k < 128) of row n (< tile N) in a raw stage: one K tile of
// 16-row groups of 1024 bytes; lane (r % 8) * 4 + k % 32 / 8 owns 32 bytes, 16 per row half.
uint32_t prepared_byte(uint32_t n, uint32_t k) {
  const uint32_t r = n % 16, lane = (r % 8) * 4 + (k % 32) / 8;
  return (n / 16) * 1024 + lane * 32 + (r / 8) * 16 + (k / 32) * 4 + (k % 8) / 2;
}

// Byte `byte` (0..127) of stage row `row` in the 128-byte swizzle: chunk c of row r at c ^ (r % 8).
uint32_t swizzled(uint32_t row, uint32_t byte) {
  return (row / 8) * 1024 + (row % 8) * 128 + (((byte / 16) ^ (row % 8)) * 16) + byte % 16;
}

TEST(Bf16PreparedMap, CoversEveryRowAndPutsEveryPieceInItsNaturalPlace) {
  constexpr int kTileM = 128;
  for (int tile_n : {128, 256}) {
    SCOPED_TRACE(tile_n);
    std::set<uint32_t> rows;
    for (int c = 0; c < 128; ++c)
      for (int i = 0; i < tile_n / 128; ++i) {
        const auto map = row_map(c, i, kTileM);
        ASSERT_LT(map.row, static_cast<uint32_t>(tile_n));
        EXPECT_TRUE(rows.insert(map.row).second) << "row " << map.row << " twice";
        for (uint32_t q = 0; q < 4; ++q) {
          const uint32_t load = map.load_offset ^ (q << 5);
          // The piece this load holds: the one whose bytes the layout puts at `load`.
          int piece = -1;
          for (uint32_t p = 0; p < 4; ++p)
            if (prepared_byte(map.row, 8 * p) == load) piece = static_cast<int>(p);
          ASSERT_GE(piece, 0) << "load " << q << " of thread " << c << " is no piece's start";
          for (uint32_t j = 0; j < 4; ++j) {
            for (uint32_t e = 0; e < 8; e += 2)  // word j = elements 8p..8p+7 of block j
              EXPECT_EQ(prepared_byte(map.row, 32 * j + 8 * piece + e), load + 4 * j + e / 2);
            // Word j converts to 8 bf16 (16 bytes) at element 32 (j % 2) + 8 piece of the row's
            // 64-element step.
            const uint32_t half = j % 2;
            EXPECT_EQ(map.store_offset ^ (((4 * half) ^ q) << 4),
                      swizzled(kTileM + map.row, 64 * half + 16 * piece));
          }
        }
      }
    EXPECT_EQ(rows.size(), static_cast<size_t>(tile_n));
  }
}

TEST(Bf16PreparedMap, QuarterWarpsHitEightDistinctBankGroups) {
  // A 16-byte shared access by a warp runs as four quarter-warps; 8 threads whose addresses fall in
  // 8 distinct 16-byte bank groups (address / 16 mod 8) run in one wavefront.
  for (int tile_n : {128, 256})
    for (int i = 0; i < tile_n / 128; ++i)
      for (int quarter = 0; quarter < 16; ++quarter)
        for (uint32_t q = 0; q < 4; ++q) {
          std::set<uint32_t> loads, stores[2];
          for (int c = 8 * quarter; c < 8 * quarter + 8; ++c) {
            const auto map = row_map(c, i, 128);
            loads.insert(((map.load_offset ^ (q << 5)) / 16) % 8);
            for (uint32_t half = 0; half < 2; ++half)
              stores[half].insert(((map.store_offset ^ (((4 * half) ^ q) << 4)) / 16) % 8);
          }
          EXPECT_EQ(loads.size(), 8u) << "tile N " << tile_n << " quarter " << quarter;
          EXPECT_EQ(stores[0].size(), 8u) << "tile N " << tile_n << " quarter " << quarter;
          EXPECT_EQ(stores[1].size(), 8u) << "tile N " << tile_n << " quarter " << quarter;
        }
}

}  // namespace
